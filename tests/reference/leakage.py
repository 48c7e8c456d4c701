"""Plain-numpy reference of the leakage-calibration objective (eht-imaging's
`leakage_cal`), value and analytic gradient, written from the formulas (no JAX,
no code shared with the package).

Per row: `M = D'⁻¹ = [[1, −d_R w], [−d_L w̄, 1]] / (1 − d_R d_L)` for each of its
two stations (`w = e^{2iφ}`), `C' = M_a C M_bᴴ`, `V'_ij = Σ_kl |M_a,ik|² V_kl
|M_b,jl|²`;

`f = s Σ_rows Σ_(i,j) ∈ pols |C'_ij − Ĉ_ij|² / V'_ij + Σ free |d|² / τ²`,

`s = 1 / (2 N P)`. The gradient by Wirtinger calculus: `∂f/∂Re d + i ∂f/∂Im d =
2 ∂f/∂d̄`, with `M` holomorphic in `d`.
"""

import numpy as np


POS = {0: (0, 0), 1: (1, 1), 2: (0, 1), 3: (1, 0)}  # file order → (i, j)


def _matrix(x):
    out = np.empty(x.shape[:-1] + (2, 2), x.dtype)
    for c, (i, j) in POS.items():
        out[..., i, j] = x[..., c]
    return out


def _m(d, w):
    """`M` and `∂M/∂d_R`, `∂M/∂d_L` per row."""
    r, left = d[:, 0], d[:, 1]
    p = 1.0 / (1.0 - r * left)
    n = np.zeros((d.shape[0], 2, 2), complex)
    n[:, 0, 0] = n[:, 1, 1] = 1.0
    n[:, 0, 1] = -r * w
    n[:, 1, 0] = -left * np.conj(w)
    m = p[:, None, None] * n
    dn_r = np.zeros_like(n)
    dn_r[:, 0, 1] = -w
    dn_l = np.zeros_like(n)
    dn_l[:, 1, 0] = -np.conj(w)
    dm_r = (left * p**2)[:, None, None] * n + p[:, None, None] * dn_r
    dm_l = (r * p**2)[:, None, None] * n + p[:, None, None] * dn_l
    return m, dm_r, dm_l


def objective(d, corr, var, model, interval, ant1, ant2, w, free, tol, pols):
    """`(value, gradient)`: `d` complex `(K, S, 2)`; the gradient `(K, S, 2)`
    complex, `∂f/∂Re d + i ∂f/∂Im d`."""
    d = free * d
    n_rows = corr.shape[0]
    s = 1.0 / (2.0 * n_rows * len(pols))
    da, db = d[interval, ant1], d[interval, ant2]
    ma, dma_r, dma_l = _m(da, w[:, 0])
    mb, dmb_r, dmb_l = _m(db, w[:, 1])
    c, v, mc = _matrix(corr), _matrix(var), _matrix(model)
    cp = ma @ c @ np.conj(np.swapaxes(mb, 1, 2))
    aa, bb = np.abs(ma) ** 2, np.abs(mb) ** 2
    vp = aa @ v @ np.swapaxes(bb, 1, 2)
    value = 0.0
    ga = np.zeros((n_rows, 2, 2), complex)  # ∂f/∂conj(M_a)
    gb = np.zeros((n_rows, 2, 2), complex)
    for p in pols:
        i, j = POS[p]
        e = cp[:, i, j] - mc[:, i, j]
        vv = vp[:, i, j]
        value += s * np.sum(np.abs(e) ** 2 / vv)
        for k in range(2):
            a_k = sum(c[:, k, ll] * np.conj(mb[:, j, ll]) for ll in range(2))
            b_k = sum(v[:, k, ll] * bb[:, j, ll] for ll in range(2))
            ga[:, i, k] += s * (
                e * np.conj(a_k) / vv - np.abs(e) ** 2 * ma[:, i, k] * b_k / vv**2
            )
        for ll in range(2):
            e_l = sum(ma[:, i, k] * c[:, k, ll] for k in range(2))
            f_l = sum(aa[:, i, k] * v[:, k, ll] for k in range(2))
            gb[:, j, ll] += s * (
                np.conj(e) * e_l / vv - np.abs(e) ** 2 * mb[:, j, ll] * f_l / vv**2
            )
    value += np.sum(np.abs(d) ** 2) / tol**2
    grad = np.zeros(d.shape, complex)  # ∂f/∂conj(d)
    for g, dm_r, dm_l, ant in ((ga, dma_r, dma_l, ant1), (gb, dmb_r, dmb_l, ant2)):
        for x, dm in ((0, dm_r), (1, dm_l)):
            contrib = np.sum(g * np.conj(dm), axis=(1, 2))
            np.add.at(grad, (interval, ant, x), contrib)
    grad += d / tol**2
    return value, 2.0 * free * grad
