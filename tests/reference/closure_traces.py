"""Plain-numpy references for closure traces (Broderick & Pesce 2020), written
from the definition with `np.linalg.inv` per quadrangle (no code shared with the
package), their σ by numerical (complex-step-free) linear propagation, and the
χ² with an analytic image gradient.

`𝒯_abcd = ½ tr(C_ab C_cb⁻¹ C_cd C_ad⁻¹)`, `C_yx = C_xyᴴ`;
`𝒮_abcd = 𝒯_abcd 𝒯_adcb`.
"""

import numpy as np


def coherency_from_corr(c4):
    return np.array([[c4[0], c4[2]], [c4[3], c4[1]]])


def coherency_from_stokes(s):
    i, q, u, v = s
    return np.array([[i + v, q + 1j * u], [q - 1j * u, i - v]])


def trace_of(legs):
    """`legs`: four 2×2 matrices A = C_ab, B = C_cb, C = C_cd, D = C_ad."""
    a, b, c, d = legs
    return 0.5 * np.trace(a @ np.linalg.inv(b) @ c @ np.linalg.inv(d))


def leg_matrix(corr, ant1, ant2, row, x, y):
    """`C_xy` from a data row holding baseline {x, y} in either orientation."""
    c = coherency_from_corr(corr[row])
    if ant1[row] == x and ant2[row] == y:
        return c
    assert ant1[row] == y and ant2[row] == x
    return c.conj().T


def quadrangle_value(corr, ant1, ant2, rows, quad, kind):
    a, b, c, d = quad
    pairs = ((a, b), (c, b), (c, d), (a, d))
    legs = [leg_matrix(corr, ant1, ant2, r, x, y) for r, (x, y) in zip(rows, pairs)]
    t1 = trace_of(legs)
    if kind == "trace":
        return t1
    return t1 * trace_of([legs[3], legs[2], legs[1], legs[0]])


def quadrangle_sigma(corr, sigma, ant1, ant2, rows, quad, kind, h=1e-7):
    """Linear propagation by central differences on the real and imaginary part
    of each of the sixteen correlations: `σ² = Σ_k σ_k² (|∂_re 𝒯|² + |∂_im 𝒯|²)/2`
    (for a holomorphic 𝒯 both derivatives have modulus |∂𝒯/∂C_k|)."""
    total = 0.0
    for r in rows:
        for p in range(4):
            for step in (h, 1j * h):
                plus, minus = corr.copy(), corr.copy()
                scale = abs(corr[r, p])
                plus[r, p] += step * scale
                minus[r, p] -= step * scale
                der = (
                    quadrangle_value(plus, ant1, ant2, rows, quad, kind)
                    - quadrangle_value(minus, ant1, ant2, rows, quad, kind)
                ) / (2 * h * scale)
                total += 0.5 * abs(der) ** 2 * sigma[r, p] ** 2
    return np.sqrt(total)


def model_trace_and_stokes_gradient(svis, kind):
    """`svis` `(4 legs, 4 Stokes)` at the oriented legs: the model value and
    `∂value/∂S` `(4 legs, 4 Stokes)` (holomorphic), by explicit matrices."""
    legs = [coherency_from_stokes(s) for s in svis]

    def tr(lg):
        a, b, c, d = lg
        bi, di = np.linalg.inv(b), np.linalg.inv(d)
        t = 0.5 * np.trace(a @ bi @ c @ di)
        g = [
            0.5 * (bi @ c @ di).T,
            -0.5 * (bi @ c @ di @ a @ bi).T,
            0.5 * (di @ a @ bi).T,
            -0.5 * (di @ a @ bi @ c @ di).T,
        ]
        return t, g

    t1, g1 = tr(legs)
    if kind == "trace":
        t, g = t1, g1
    else:
        t2, g2r = tr([legs[3], legs[2], legs[1], legs[0]])
        g2 = g2r[::-1]
        t = t1 * t2
        g = [t2 * x + t1 * y for x, y in zip(g1, g2)]
    out = np.empty((4, 4), complex)
    for k in range(4):
        m = g[k]
        out[k] = [
            m[0, 0] + m[1, 1],
            m[0, 1] + m[1, 0],
            1j * m[0, 1] - 1j * m[1, 0],
            m[0, 0] - m[1, 1],
        ]
    return t, out


def closure_trace_chi2(a_legs, stokes_img, values, weight, kind):
    """`χ² = Σ w |𝒯̂ − 𝒯|² / (2N)` of a Stokes image through `a_legs`
    (`(n, 4, npix)` DFT rows of the oriented legs); `(value, ∂χ²/∂image)`."""
    n = values.shape[0]
    planes = stokes_img.reshape(4, -1)
    svis = np.einsum("rlj,pj->rlp", a_legs, planes)  # (n, 4 legs, 4 Stokes)
    value = 0.0
    grad = np.zeros_like(planes)
    for r in range(n):
        t, g = model_trace_and_stokes_gradient(svis[r], kind)
        d = t - values[r]
        value += weight[r] * abs(d) ** 2
        c = np.conj(weight[r] * d / n)
        for leg in range(4):
            for p in range(4):
                grad[p] += np.real(c * g[leg, p] * a_legs[r, leg])
    return value / (2 * n), grad.reshape(stokes_img.shape)
