"""Plain-numpy references for station Jones matrices and the correlation χ² (no
JAX, no code shared with the package), written from the formulas with explicit
2×2 matrices per row, and an analytic image gradient.

Conventions: circular-basis coherency `C = [[I+V, Q+iU], [Q−iU, I−V]]`; a station
`s` with feeds circular / linear has `T = 1` / `[[1, 1], [−i, i]]/√2`;
`J = G D T Φ`, `G = diag(g_R, g_L)`, `D = [[1, d_R], [d_L, 1]]`,
`Φ = diag(e^{−iφ}, e^{iφ})`; recorded `C_obs = J_a C J_bᴴ`, correlations in the
order `C00, C11, C01, C10`.
"""

import numpy as np


T_LIN = np.array([[1, 1], [-1j, 1j]]) / np.sqrt(2)


def coherency(s):
    """`(4,)` Stokes → 2×2 circular coherency."""
    i, q, u, v = s
    return np.array([[i + v, q + 1j * u], [q - 1j * u, i - v]])


def correlations(c):
    return np.array([c[0, 0], c[1, 1], c[0, 1], c[1, 0]])


def jones_matrix(g, d, phi, linear=False, corrected=False):
    """`J = G D T Φ` (or `R⁻¹ G D R T` with `R = T Φ Tᴴ` when `corrected`) of one
    station: `g`, `d` pairs (R, L), `phi` radians."""
    gm = np.diag(g)
    dm = np.array([[1, d[0]], [d[1], 1]])
    t = T_LIN if linear else np.eye(2)
    ph = np.diag([np.exp(-1j * phi), np.exp(1j * phi)])
    if corrected:
        r = t @ ph @ t.conj().T
        return np.linalg.inv(r) @ gm @ dm @ r @ t
    return gm @ dm @ t @ ph


def ehtim_circular_jones(g, d, phi):
    """eht-imaging's `make_jones` matrix (frcal=False, dcal=False), as written
    in its source: `[[e^{−iφ} g_R, e^{iφ} d_R g_R], [e^{−iφ} d_L g_L, e^{iφ} g_L]]`."""
    return np.array(
        [
            [np.exp(-1j * phi) * g[0], np.exp(1j * phi) * d[0] * g[0]],
            [np.exp(-1j * phi) * d[1] * g[1], np.exp(1j * phi) * g[1]],
        ]
    )


def station_matrices(
    la, ph, dre, dim, slot, dslot, fr, feeds, stations, ti, corrected=False
):
    """`(n, 2, 2, 2)`: `J_a`, `J_b` of each row."""
    n = stations.shape[0]
    out = np.empty((n, 2, 2, 2), complex)
    for r in range(n):
        t = ti[r]
        for e in range(2):
            s = stations[r, e]
            k, kd = slot[t], dslot[t]
            g = np.exp(la[k, s] + 1j * ph[k, s])
            d = dre[kd, s] + 1j * dim[kd, s]
            out[r, e] = jones_matrix(g, d, fr[t, s], feeds[s] == "linear", corrected)
    return out


def corrupt(stokes_vis, mats):
    """Recorded correlations `(n, 4)` of Stokes visibilities `(n, 4)`."""
    out = np.empty(stokes_vis.shape, complex)
    for r in range(stokes_vis.shape[0]):
        ja, jb = mats[r, 0], mats[r, 1]
        out[r] = correlations(ja @ coherency(stokes_vis[r]) @ jb.conj().T)
    return out


def linear_map(mats):
    """`K` `(n, 4 corr, 4 Stokes)`: the recorded correlations as a linear map of
    the row's Stokes visibilities (by columns: the image of each unit Stokes)."""
    n = mats.shape[0]
    k = np.empty((n, 4, 4), complex)
    for p in range(4):
        unit = np.zeros((n, 4), complex)
        unit[:, p] = 1.0
        k[:, :, p] = corrupt(unit, mats)
    return k


def correlation_chi2(a0, stokes_img, corr, weight, mats):
    """`χ² = Σ w |Ĉ − C|² / (2N)` (`N` = present correlations, `w > 0`) of the
    Stokes image `(4, ny, nx)` through the DFT `a0` and Jones matrices `mats`;
    returns `(value, ∂χ²/∂image)`."""
    s = np.stack([a0 @ p.ravel() for p in stokes_img], axis=-1)  # (n, 4)
    k = linear_map(mats)
    model = np.einsum("rcp,rp->rc", k, s)
    n = np.count_nonzero(weight)
    diff = model - corr
    value = np.sum(weight * np.abs(diff) ** 2) / (2 * n)
    r = weight * diff / n  # dχ² = Re Σ conj(r) dĈ
    coef = np.einsum("rc,rcp->rp", np.conj(r), k)  # (n, 4 Stokes)
    grad = np.stack([np.real(coef[:, p] @ a0) for p in range(4)])
    return value, grad.reshape(stokes_img.shape)
