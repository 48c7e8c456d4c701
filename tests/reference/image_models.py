"""Plain-numpy references for the parametric image models: the rendered image and
its derivative with respect to each parameter, derived by hand.

Both models are `I = F g / Σ g`, so `∂I/∂θ = F (g' Σg − g Σg') / (Σg)²` for a
shape parameter θ with `g' = ∂g/∂θ`, and `∂I/∂F = g / Σg`.
"""

import numpy as np

from .regularizers import coords


_F = np.sqrt(8 * np.log(2))


def _normalised(flux, g, dg):
    total = np.sum(g)
    image = flux * g / total
    jac = {"flux": g / total}
    for k, d in dg.items():
        jac[k] = flux * (d * total - g * np.sum(d)) / total**2
    return image, jac


def gaussian(ny, nx, psize, flux, fwhm_major, fwhm_minor, angle, x0, y0):
    """g = exp(−E), E = a²/(2σ_M²) + b²/(2σ_m²), a = Δx sin φ + Δy cos φ,
    b = Δx cos φ − Δy sin φ. Returns `(image, {param: ∂image/∂param})`."""
    xx, yy = coords(ny, nx, psize)
    dx, dy = xx - x0, yy - y0
    s, c = np.sin(angle), np.cos(angle)
    a = dx * s + dy * c
    b = dx * c - dy * s
    sM, sm = fwhm_major / _F, fwhm_minor / _F
    g = np.exp(-0.5 * (a**2 / sM**2 + b**2 / sm**2))
    # ∂a/∂x0 = −s, ∂b/∂x0 = −c; ∂a/∂y0 = −c, ∂b/∂y0 = s; ∂a/∂φ = b, ∂b/∂φ = −a.
    dE = {
        "x0": -(a * s / sM**2 + b * c / sm**2),
        "y0": -(a * c / sM**2) + b * s / sm**2,
        "angle": a * b / sM**2 - a * b / sm**2,
        "fwhm_major": -(a**2) / (sM**2 * fwhm_major),
        "fwhm_minor": -(b**2) / (sm**2 * fwhm_minor),
    }
    return _normalised(flux, g, {k: -g * v for k, v in dE.items()})


def ring(ny, nx, psize, flux, diameter, width, x0, y0, asymmetry, asymmetry_angle):
    """g = R(r) (1 + A cos Δ), R = exp(−(r − d/2)²/(2σ_w²)), cos Δ = P / r with
    P = Δx sin θ_A + Δy cos θ_A. Returns `(image, {param: ∂image/∂param})`
    (no pixel may sit exactly on the centre)."""
    xx, yy = coords(ny, nx, psize)
    dx, dy = xx - x0, yy - y0
    r = np.hypot(dx, dy)
    sw = width / _F
    t = r - diameter / 2
    rad = np.exp(-(t**2) / (2 * sw**2))
    sa, ca = np.sin(asymmetry_angle), np.cos(asymmetry_angle)
    p = dx * sa + dy * ca
    cos_d = p / r
    ang = 1.0 + asymmetry * cos_d
    # |A| > 1: the factor is clipped at 0, and with it every derivative (at exactly
    # 0, the derivatives into the valid range).
    live = ang >= 0
    ang = np.where(live, ang, 0.0)
    g = rad * ang
    d_rad_dr = -rad * t / sw**2
    # ∂r/∂x0 = −Δx/r; ∂(P/r)/∂x0 = (−sin θ_A + P Δx/r²)/r (likewise for y0).
    dg = {
        "diameter": rad * t / (2 * sw**2) * ang,
        "width": rad * t**2 / (sw**2 * width) * ang,
        "x0": d_rad_dr * (-dx / r) * ang + rad * asymmetry * (-sa + p * dx / r**2) / r,
        "y0": d_rad_dr * (-dy / r) * ang + rad * asymmetry * (-ca + p * dy / r**2) / r,
        "asymmetry": rad * cos_d,
        "asymmetry_angle": rad * asymmetry * (dx * ca - dy * sa) / r,
    }
    dg = {k: np.where(live, v, 0.0) for k, v in dg.items()}
    return _normalised(flux, g, dg)
