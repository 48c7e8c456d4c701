"""Plain-numpy references for the polarimetric image models and the β_m
decomposition, written from the formulas (position angles with `np.arctan2`, no
shared code with eqmodels)."""

import numpy as np

from .regularizers import coords


_F = np.sqrt(8 * np.log(2))


def unit_ball_clip(f):
    """`f` `(3, ...)` scaled onto the unit ball where `|f| > 1`."""
    n = np.sqrt(np.sum(f * f, axis=0))
    return f / np.maximum(n, 1.0)


def pol_pixel(i, w):
    """`(I, I f)` with `f = tanh(|w|) w / |w|` (`f = w` at `w = 0`); `w` `(k, ny,
    nx)`, k = 2 (V = 0) or 3."""
    if w.shape[0] == 2:
        w = np.concatenate([w, np.zeros_like(w[:1])])
    r = np.sqrt(np.sum(w * w, axis=0))
    scale = np.where(r > 0, np.tanh(r) / np.where(r > 0, r, 1.0), 1.0)
    return np.concatenate([i[None], i[None] * w * scale])


def pol_spherical(i, a, phi, b, pol_transform):
    """eht-imaging's `(I, ρ, φ, ψ)` from its solver variables, then Q, U, V:
    `P = I ρ cos ψ e^{iφ}`, `V = I ρ sin ψ`."""
    s = 0.5 + np.arctan(a / 0.5) / np.pi
    if pol_transform == "polcv":
        rho, psi = s, np.arctan(b)
    else:  # mcv: m = (1 − |v|) s, ρ = √(m² + v²), ψ = arcsin(v / ρ)
        m = (1 - np.abs(b)) * s
        rho = np.hypot(m, b)
        psi = np.arcsin(b / rho)
    return np.stack(
        [
            i,
            i * rho * np.cos(psi) * np.cos(phi),
            i * rho * np.cos(psi) * np.sin(phi),
            i * rho * np.sin(psi),
        ]
    )


def gaussian_i(ny, nx, psize, flux, fwhm_major, fwhm_minor, angle, x0, y0):
    xx, yy = coords(ny, nx, psize)
    dx, dy = xx - x0, yy - y0
    s, c = np.sin(angle), np.cos(angle)
    a = dx * s + dy * c
    b = dx * c - dy * s
    g = np.exp(-0.5 * ((a * _F / fwhm_major) ** 2 + (b * _F / fwhm_minor) ** 2))
    return flux * g / g.sum()


def pol_gaussian(ny, nx, psize, flux, fwhm_major, fwhm_minor, angle, x0, y0, m, chi, v):
    i = gaussian_i(ny, nx, psize, flux, fwhm_major, fwhm_minor, angle, x0, y0)
    f = unit_ball_clip(np.array([m * np.cos(2 * chi), m * np.sin(2 * chi), v]))
    return np.stack([i, f[0] * i, f[1] * i, f[2] * i])


def mring_series(phi, beta_i, beta_p, beta_v):
    """`(a_I, a_P, a_V)` at position angles `phi`."""
    a_i = 1.0 + sum(
        2 * np.real(b * np.exp(1j * (k + 1) * phi)) for k, b in enumerate(beta_i)
    )
    mp = (len(beta_p) - 1) // 2
    a_p = sum(b * np.exp(1j * (k - mp) * phi) for k, b in enumerate(beta_p))
    a_v = np.real(beta_v[0]) + sum(
        2 * np.real(beta_v[k] * np.exp(1j * k * phi)) for k in range(1, len(beta_v))
    )
    return a_i, a_p + 0 * phi, a_v + 0 * phi


def pol_mring(ny, nx, psize, flux, diameter, width, x0, y0, beta_i, beta_p, beta_v):
    """I = F R a_I / Σ R a_I (a_I clipped at 0), (Q, U, V) = I (a_P, a_V) / a_I
    scaled onto the unit ball; no pixel may sit exactly on the centre."""
    xx, yy = coords(ny, nx, psize)
    dx, dy = xx - x0, yy - y0
    r = np.hypot(dx, dy)
    phi = np.arctan2(dx, dy)  # east of north
    rad = np.exp(-0.5 * ((r - diameter / 2) * _F / width) ** 2)
    a_i, a_p, a_v = mring_series(phi, beta_i, beta_p, beta_v)
    a_i = np.maximum(a_i, 0.0)
    g = rad * a_i
    i = flux * g / g.sum()
    # f = u / a_I scaled onto the unit ball: u / max(a_I, |u|) (0 where both are).
    u = np.stack([a_p.real, a_p.imag, a_v])
    den = np.maximum(a_i, np.sqrt(np.sum(u * u, axis=0)))
    f = np.where(a_i > 0, u / np.where(den > 0, den, 1.0), 0.0)
    return np.concatenate([i[None], f * i])


def beta_m(stokes, psize, m, pol="P", r_min=0.0, r_max=np.inf, x0=0.0, y0=0.0):
    """Palumbo et al. 2020: Σ_ann X e^{−imφ} / Σ_ann I over the pixels whose
    centres lie in the annulus, φ east of north (a pixel on the centre: m = 0
    only)."""
    _, ny, nx = stokes.shape
    xx, yy = coords(ny, nx, psize)
    dx, dy = xx - x0, yy - y0
    r = np.hypot(dx, dy)
    phi = np.arctan2(dx, dy)
    ann = (r >= r_min) & (r <= r_max)
    x = {"P": stokes[1] + 1j * stokes[2], "V": stokes[3], "I": stokes[0]}[pol]
    phase = np.where(r > 0, np.exp(-1j * m * phi), 1.0 if m == 0 else 0.0)
    return np.sum((x * phase)[ann]) / np.sum(stokes[0][ann])
