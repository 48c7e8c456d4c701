"""Plain-numpy references for the polarimetric data terms (eht-imaging's `pvis`,
`m`, `vvis`), written from the formulas (no JAX, no code shared with the package or
eht-imaging): value and analytic gradient with respect to the four Stokes planes.

With `A` the DFT matrix (`tests.reference.numpy_ft.dft_matrix`), `w = 1/σ²` and `N`
the number of rows:

- pvis: `χ² = Σ w |A q + i A u − P|² / (2N)`;
  `∂/∂Q = Re(Aᴴ r) / N`, `∂/∂U = Im(Aᴴ r) / N` with `r = w (P̂ − P)`.
- m: `χ² = Σ w |m̂ − m|² / (2N)`, `m̂ = P̂ / Î`; with `g = w (m̂ − m) / conj(Î)`:
  `∂/∂Q = Re(Aᴴ g) / N`, `∂/∂U = Im(Aᴴ g) / N`, `∂/∂I = −Re(Aᴴ (g conj(m̂))) / N`.
- vvis: `χ² = Σ w |A v − V|² / (2N)`; `∂/∂V = Re(Aᴴ (w (V̂ − V))) / N`.
"""

import numpy as np


def _planes(a, stokes):
    return [a @ np.ravel(p) for p in stokes]


def _grad(shape, n, **planes):
    out = np.zeros((4, *shape))
    for k, name in enumerate("iquv"):
        if name in planes:
            out[k] = np.reshape(planes[name], shape) / n
    return out


def pvis_chi2(a, stokes, pvis, sigma):
    """`(value, gradient (4, ny, nx))` of the pvis χ²."""
    _, q, u, _ = _planes(a, stokes)
    w = 1.0 / np.asarray(sigma) ** 2
    d = q + 1j * u - pvis
    n = d.size
    r = a.conj().T @ (w * d)
    value = np.sum(w * np.abs(d) ** 2) / (2 * n)
    return value, _grad(stokes.shape[1:], n, q=r.real, u=r.imag)


def m_chi2(a, stokes, m, sigma):
    """`(value, gradient (4, ny, nx))` of the m χ²."""
    i, q, u, _ = _planes(a, stokes)
    w = 1.0 / np.asarray(sigma) ** 2
    mhat = (q + 1j * u) / i
    d = mhat - m
    n = d.size
    g = w * d / np.conj(i)
    r = a.conj().T @ g
    ri = -np.real(a.conj().T @ (g * np.conj(mhat)))
    value = np.sum(w * np.abs(d) ** 2) / (2 * n)
    return value, _grad(stokes.shape[1:], n, i=ri, q=r.real, u=r.imag)


def vvis_chi2(a, stokes, vvis, sigma):
    """`(value, gradient (4, ny, nx))` of the vvis χ²."""
    _, _, _, v = _planes(a, stokes)
    w = 1.0 / np.asarray(sigma) ** 2
    d = v - vvis
    n = d.size
    r = a.conj().T @ (w * d)
    value = np.sum(w * np.abs(d) ** 2) / (2 * n)
    return value, _grad(stokes.shape[1:], n, v=r.real)


def stokes_rows_with_conjugates(u, v, stokes_vis, stokes_sigma):
    """eht-imaging's `unpack(..., conj=True)` rows: the rows, then each row's
    conjugate baseline `(−u, −v)` with every Stokes visibility conjugated and the
    same sigmas."""
    return (
        np.concatenate([u, -u]),
        np.concatenate([v, -v]),
        np.concatenate([stokes_vis, np.conj(stokes_vis)]),
        np.concatenate([stokes_sigma, stokes_sigma]),
    )


def m_data(stokes_vis, stokes_sigma):
    """eht-imaging's `m` and `msigma` from Stokes visibilities and sigmas `(n, 4)`:
    `m = (Q + iU) / I`, `σ = sqrt((σ_Q² + σ_U² + (σ_I |m|)²) / |I|²)`."""
    i, q, u = stokes_vis[:, 0], stokes_vis[:, 1], stokes_vis[:, 2]
    si, sq, su = stokes_sigma[:, 0], stokes_sigma[:, 1], stokes_sigma[:, 2]
    m = (q + 1j * u) / i
    return m, np.sqrt((sq**2 + su**2 + (si * np.abs(m)) ** 2) / np.abs(i) ** 2)
