"""Plain-numpy references for the regularizers, written from CONVENTIONS.md (and,
for `compact` and `rgauss`, from the formulas documented on the classes), each
returning `(penalty, ∂penalty/∂image)` with the gradient derived by hand.

`norm` is the divisor applied when normalisation is on (1 otherwise); F = target
flux, b = beam, p = pixel size, P = prior image. Pixel-centre coordinates follow
CONVENTIONS.md: x[ix] = (nx/2 − 1/2 − ix) p, y[iy] = (ny/2 − 1/2 − iy) p.
"""

import numpy as np


def coords(ny, nx, psize):
    x = (nx / 2.0 - 0.5 - np.arange(nx)) * psize
    y = (ny / 2.0 - 0.5 - np.arange(ny)) * psize
    return np.meshgrid(x, y)


def simple(img, prior, norm=1.0):
    """Σ I ln(I/P); ∂/∂I = ln(I/P) + 1 (I > 0)."""
    return np.sum(img * np.log(img / prior)) / norm, (np.log(img / prior) + 1.0) / norm


def gull_skilling(img, prior, norm=1.0):
    """Σ (P − I + I ln(I/P)); ∂/∂I = ln(I/P)."""
    value = np.sum(prior - img + img * np.log(img / prior)) / norm
    return value, np.log(img / prior) / norm


def l1(img, norm=1.0):
    """Σ |I|; ∂/∂I = sign(I)."""
    return np.sum(np.abs(img)) / norm, np.sign(img) / norm


def l1w(img, prior, eps=1e-10):
    """Σ sqrt(I² + ε) / (sqrt(P² + ε) + ε); ∂/∂I = I / sqrt(I² + ε) / den."""
    den = np.sqrt(prior**2 + eps) + eps
    return np.sum(np.sqrt(img**2 + eps) / den), img / np.sqrt(img**2 + eps) / den


def _diffs(img):
    """Forward differences with the image zero beyond the last row / column."""
    ny, nx = img.shape
    down = np.zeros_like(img)
    down[:-1, :] = img[1:, :]
    right = np.zeros_like(img)
    right[:, :-1] = img[:, 1:]
    return down - img, right - img


def _adjoint_diffs(g_row, g_col):
    """Gradient of Σ (g_row · d_row + g_col · d_col) w.r.t. the image:
    pixel (i, j) enters d_row[i, j] with −1 and d_row[i−1, j] with +1 (same for
    columns)."""
    out = -(g_row + g_col)
    out[1:, :] += g_row[:-1, :]
    out[:, 1:] += g_col[:, :-1]
    return out


def tv(img, eps=0.0, norm=1.0):
    """Σ sqrt(d_row² + d_col² + ε); ∂/∂d = d / sqrt(...)."""
    dr, dc = _diffs(img)
    s = np.sqrt(dr**2 + dc**2 + eps)
    return np.sum(s) / norm, _adjoint_diffs(dr / s, dc / s) / norm


def tsv(img, norm=1.0):
    """Σ d_row² + d_col²; ∂/∂d = 2 d."""
    dr, dc = _diffs(img)
    return np.sum(dr**2 + dc**2) / norm, _adjoint_diffs(2 * dr, 2 * dc) / norm


def flux(img, target, norm=1.0):
    """(Σ I − F)²; ∂/∂I = 2 (Σ I − F)."""
    d = np.sum(img) - target
    return d**2 / norm, np.full_like(img, 2 * d / norm)


def centroid(img, psize, norm=1.0, origin_shift=(0.0, 0.0)):
    """(Σ I x)² + (Σ I y)²; ∂/∂I = 2 (Σ I x) x + 2 (Σ I y) y.

    `origin_shift` (pixels) moves the origin, e.g. to eht-imaging's pixel
    `(ny/2, nx/2)`, for the oracle comparison."""
    xx, yy = coords(*img.shape, psize)
    xx = xx + origin_shift[1] * psize
    yy = yy + origin_shift[0] * psize
    mx, my = np.sum(img * xx), np.sum(img * yy)
    return (mx**2 + my**2) / norm, (2 * mx * xx + 2 * my * yy) / norm


def compact(img, psize, total=None, norm=1.0):
    """Σ I ((x − x̄)² + (y − ȳ)²), x̄ = Σ I x / T with T = `total` (the target flux)
    or Σ I when `total` is None. Per axis, with M = Σ I x, Q = Σ I x², S = Σ I:
    - T fixed: value Q − 2M²/T + S M²/T²,
      ∂/∂I_p = x_p² − 4 M x_p/T + M²/T² + 2 S M x_p/T²;
    - T = S: value Q − M²/S, ∂/∂I_p = x_p² − 2 x_p M/S + M²/S².
    """
    xx, yy = coords(*img.shape, psize)
    s = np.sum(img)
    value = 0.0
    grad = np.zeros_like(img)
    for c in (xx, yy):
        m = np.sum(img * c)
        q = np.sum(img * c * c)
        if total is None:
            value += q - m * m / s
            grad += c * c - 2 * c * m / s + (m / s) ** 2
        else:
            t = total
            # Σ I (c − m/t)² = q − 2 m²/t + s m²/t²
            value += q - 2 * m * m / t + s * m * m / t**2
            grad += c * c - 4 * m * c / t + m * m / t**2 + 2 * s * m * c / t**2
    return value / norm, grad / norm


def compact2(img, psize, norm=1.0):
    """Σ I² (x² + y²); ∂/∂I = 2 I (x² + y²)."""
    xx, yy = coords(*img.shape, psize)
    r2 = xx**2 + yy**2
    return np.sum(img**2 * r2) / norm, 2 * img * r2 / norm


def gaussian_covariance(fwhm_major, fwhm_minor, angle):
    """(G_xx, G_yy, G_xy): σ along the major axis at position angle φ (east of
    north, i.e. direction (sin φ, cos φ) in (x, y)) and the minor axis."""
    f = np.sqrt(8 * np.log(2))
    vmaj, vmin = (fwhm_major / f) ** 2, (fwhm_minor / f) ** 2
    s, c = np.sin(angle), np.cos(angle)
    return (
        vmaj * s * s + vmin * c * c,
        vmaj * c * c + vmin * s * s,
        (vmaj - vmin) * s * c,
    )


def gaussian_moments(img, psize, fwhm_major, fwhm_minor, angle):
    """((M_xx − G_xx)² + (M_yy − G_yy)² + 2 (M_xy − G_xy)²) / (θ_maj θ_min)² with
    M the centroid-subtracted, flux-normalised second moments.

    With S = Σ I, a = Σ I x / S, M_xx = Σ I x² / S − a² (and likewise):
    ∂M_xx/∂I_p = (x_p² − M_xx − a²)/S − 2 a (x_p − a)/S = ((x_p − a)² − M_xx)/S,
    ∂M_xy/∂I_p = ((x_p − a)(y_p − b) − M_xy)/S."""
    xx, yy = coords(*img.shape, psize)
    s = np.sum(img)
    a = np.sum(img * xx) / s
    b = np.sum(img * yy) / s
    dx, dy = xx - a, yy - b
    mxx = np.sum(img * dx * dx) / s
    myy = np.sum(img * dy * dy) / s
    mxy = np.sum(img * dx * dy) / s
    gxx, gyy, gxy = gaussian_covariance(fwhm_major, fwhm_minor, angle)
    scale = (fwhm_major * fwhm_minor) ** 2
    value = ((mxx - gxx) ** 2 + (myy - gyy) ** 2 + 2 * (mxy - gxy) ** 2) / scale
    grad = (
        2 * (mxx - gxx) * (dx * dx - mxx) / s
        + 2 * (myy - gyy) * (dy * dy - myy) / s
        + 4 * (mxy - gxy) * (dx * dy - mxy) / s
    ) / scale
    return value, grad
