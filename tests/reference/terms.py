"""Plain-numpy references for the data terms, written from CONVENTIONS.md, with
analytic gradients derived by hand (no autodiff, no code shared with the package).

Every function takes the per-leg DFT matrices `a[l]` (complex `(n, npix)`, leg `l`
of each row; from `numpy_ft.dft_matrix`), the image and the data, and returns
`(chi², ∂chi²/∂image)`. Weights are `w = 1/σ²`; `n` is the number of rows.

Derivatives used (for a real image x and V = A x):
- ∂V/∂x_p = A[:, p]
- ∂|V|/∂x_p = Re(conj(V) A[:, p]) / |V|
- ∂ln|V|/∂x_p = Re(A[:, p] / V)
- ∂arg V/∂x_p = Im(A[:, p] / V)
"""

import numpy as np

from .numpy_ft import dft_matrix


def leg_matrices(ny, nx, psize, u, v, kind="triangle"):
    """One `(n, npix)` matrix per leg for points of shape `(n, k)`."""
    u = np.asarray(u)
    v = np.asarray(v)
    if u.ndim == 1:
        return [dft_matrix(ny, nx, psize, u, v, kind)]
    return [
        dft_matrix(ny, nx, psize, u[:, i], v[:, i], kind) for i in range(u.shape[1])
    ]


def _out(value, grad, img):
    return value, np.asarray(grad).reshape(np.shape(img))


def amp_chi2(a, img, amp, sigma):
    """χ² = Σ w (|V| − A)² / N."""
    (a0,) = a
    x = np.ravel(img)
    vis = a0 @ x
    m = np.abs(vis)
    w = 1.0 / sigma**2
    n = m.size
    value = np.sum(w * (m - amp) ** 2) / n
    coef = 2.0 * w * (m - amp) / n
    grad = np.real(a0.T @ (coef * np.conj(vis) / m))
    return _out(value, grad, img)


def bispectrum_chi2(a, img, bis, sigma):
    """χ² = Σ w |V1 V2 V3 − B|² / (2N)."""
    x = np.ravel(img)
    v1, v2, v3 = (al @ x for al in a)
    b = v1 * v2 * v3
    r = b - bis
    w = 1.0 / sigma**2
    n = b.size
    value = np.sum(w * np.abs(r) ** 2) / (2 * n)
    # ∂/∂x_p = Σ w/N Re(conj(r) ∂B/∂x_p), ∂B/∂x_p = A1 V2 V3 + V1 A2 V3 + V1 V2 A3.
    c = w * np.conj(r) / n
    grad = np.real(
        a[0].T @ (c * v2 * v3) + a[1].T @ (c * v1 * v3) + a[2].T @ (c * v1 * v2)
    )
    return _out(value, grad, img)


def cphase_chi2(a, img, psi, sigma):
    """χ² = (2/N) Σ w (1 − cos(ψ − ψ̂)), ψ̂ = arg(V1 V2 V3) (radians)."""
    x = np.ravel(img)
    vs = [al @ x for al in a]
    model = np.angle(vs[0] * vs[1] * vs[2])
    w = 1.0 / sigma**2
    n = model.size
    value = 2.0 / n * np.sum(w * (1.0 - np.cos(psi - model)))
    # ∂/∂ψ̂ (1 − cos(ψ − ψ̂)) = −sin(ψ − ψ̂); ∂ψ̂/∂x_p = Σ_l Im(A_l[:, p] / V_l).
    c = -2.0 / n * w * np.sin(psi - model)
    grad = sum(np.imag(al.T @ (c / vl)) for al, vl in zip(a, vs))
    return _out(value, grad, img)


def logcamp_chi2(a, img, logcamp, sigma):
    """χ² = Σ w (ln C − ln Ĉ)² / N, ln Ĉ = ln|V1| + ln|V2| − ln|V3| − ln|V4|."""
    x = np.ravel(img)
    vs = [al @ x for al in a]
    signs = (1.0, 1.0, -1.0, -1.0)
    model = sum(s * np.log(np.abs(vl)) for s, vl in zip(signs, vs))
    w = 1.0 / sigma**2
    n = model.size
    value = np.sum(w * (logcamp - model) ** 2) / n
    c = -2.0 * w * (logcamp - model) / n
    grad = sum(s * np.real(al.T @ (c / vl)) for s, al, vl in zip(signs, a, vs))
    return _out(value, grad, img)


def camp_chi2(a, img, camp, sigma):
    """χ² = Σ w (C − Ĉ)² / N, Ĉ = |V1||V2| / (|V3||V4|)."""
    x = np.ravel(img)
    vs = [al @ x for al in a]
    model = np.abs(vs[0]) * np.abs(vs[1]) / (np.abs(vs[2]) * np.abs(vs[3]))
    w = 1.0 / sigma**2
    n = model.size
    value = np.sum(w * (camp - model) ** 2) / n
    # ∂Ĉ/∂x_p = Ĉ Σ_l s_l Re(A_l[:, p] / V_l).
    c = -2.0 * w * (camp - model) / n * model
    signs = (1.0, 1.0, -1.0, -1.0)
    grad = sum(s * np.real(al.T @ (c / vl)) for s, al, vl in zip(signs, a, vs))
    return _out(value, grad, img)


def vis_chi2(a, img, vis, sigma):
    """χ² = Σ w |V − V_obs|² / (2N)."""
    (a0,) = a
    x = np.ravel(img)
    r = a0 @ x - vis
    w = 1.0 / sigma**2
    n = r.size
    value = np.sum(w * np.abs(r) ** 2) / (2 * n)
    grad = np.real(a0.conj().T @ (w * r)) / n
    return _out(value, grad, img)


def synthetic_closures(ny, nx, psize, truth, *, n_stations=6, n_times=3, seed=0):
    """Hand-built data products (numpy only) for a `truth` image on a small grid.

    Stations sit in a disk of the uv plane (radius 0.2/psize) that rotates with
    time, so every baseline `p_i − p_j` stays inside the Nyquist limit. Per time:
    every baseline i<j once (amplitudes, visibilities), triangles (i, j, k) walked
    i→j→k→i (legs `p_i−p_j`, `p_j−p_k`, `p_k−p_i`: the last is a stored baseline
    reversed), quadrangles (i, j, k, l) with `C = |V_ij||V_kl| / (|V_ik||V_jl|)`.
    Observed values are the truth's plus noise.

    Returns a dict of `(u, v, value, sigma)` tuples keyed by product.
    """
    rng = np.random.default_rng(seed)
    r = 0.2 / psize * np.sqrt(rng.uniform(0, 1, n_stations))
    phi = rng.uniform(0, 2 * np.pi, n_stations)
    base = np.stack([r * np.cos(phi), r * np.sin(phi)], axis=1)
    vis_rows, tri_rows, quad_rows = [], [], []
    for t in range(n_times):
        ang = 0.4 * t
        rot = np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]])
        p = base @ rot.T
        for i in range(n_stations):
            for j in range(i + 1, n_stations):
                vis_rows.append(p[i] - p[j])
        for i, j, k in [(0, 1, 2), (0, 2, 3), (1, 3, 4), (0, 4, 5), (2, 3, 5)]:
            tri_rows.append([p[i] - p[j], p[j] - p[k], p[k] - p[i]])
        for i, j, k, m in [(0, 1, 2, 3), (0, 2, 4, 5), (1, 2, 3, 5), (0, 3, 4, 5)]:
            quad_rows.append([p[i] - p[j], p[k] - p[m], p[i] - p[k], p[j] - p[m]])
    vis_uv = np.array(vis_rows)
    tri = np.array(tri_rows)
    quad = np.array(quad_rows)
    x = np.ravel(truth)

    def model(u, v):
        return dft_matrix(ny, nx, psize, np.ravel(u), np.ravel(v)) @ x

    out = {}
    u, v = vis_uv[:, 0], vis_uv[:, 1]
    vis = model(u, v)
    sig = np.abs(vis).mean() * rng.uniform(0.02, 0.05, u.size)
    noisy = vis + sig * (rng.standard_normal(u.size) + 1j * rng.standard_normal(u.size))
    out["vis"] = (u, v, noisy, sig)
    out["amp"] = (u, v, np.abs(noisy), sig)
    u, v = tri[..., 0], tri[..., 1]
    legs = model(u, v).reshape(u.shape)
    bis = legs[:, 0] * legs[:, 1] * legs[:, 2]
    sig_b = np.abs(bis) * rng.uniform(0.05, 0.1, bis.size)
    n_b = bis.size
    noisy_b = bis + sig_b * (rng.standard_normal(n_b) + 1j * rng.standard_normal(n_b))
    out["bispectrum"] = (u, v, noisy_b, sig_b)
    sig_c = rng.uniform(0.05, 0.15, n_b)
    out["cphase"] = (u, v, np.angle(bis) + sig_c * rng.standard_normal(n_b), sig_c)
    u, v = quad[..., 0], quad[..., 1]
    legs = np.abs(model(u, v).reshape(u.shape))
    camp = legs[:, 0] * legs[:, 1] / (legs[:, 2] * legs[:, 3])
    n_q = camp.size
    sig_q = rng.uniform(0.05, 0.1, n_q)
    out["logcamp"] = (u, v, np.log(camp) + sig_q * rng.standard_normal(n_q), sig_q)
    sig_ca = camp * rng.uniform(0.05, 0.1, n_q)
    out["camp"] = (u, v, camp + sig_ca * rng.standard_normal(n_q), sig_ca)
    return out
