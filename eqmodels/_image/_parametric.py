"""Helpers shared by the parametric image models."""

import jax
import jax.numpy as jnp
import numpy as np

from .._grid import ImageGrid
from .._numerics import asarray
from .._validation import is_concrete


def pixel_offsets(grid: ImageGrid, x0, y0, dtype):
    """`(dx, dy)` = pixel-centre coordinates minus `(x0, y0)`, in **pixels** (so
    that squared distances stay well inside float32's range)."""
    xx, yy = grid.coords()
    p = grid.psize
    dx = asarray(xx / p, dtype) - x0 / p
    dy = asarray(yy / p, dtype) - y0 / p
    return dx, dy


#: Widths (σ, in pixels) below this are rendered at it: the profile is then already
#: its point-sampled limit, and `(offset / σ)²` stays finite (a width of 1e-170
#: pixels would overflow it to `inf` everywhere, and `normalised` to `NaN`).
MIN_SIGMA_PIXELS = 1e-6


def sigma_pixels(width, psize, fwhm_per_sigma):
    """The Gaussian σ of a FWHM `width` (radians) in pixels, floored at
    `MIN_SIGMA_PIXELS` (its gradient is 0 below the floor)."""
    s = width / (fwhm_per_sigma * psize)
    return jnp.maximum(s, asarray(MIN_SIGMA_PIXELS, s.dtype))


def normalised(log_g, factor=None):
    """`F`-free normalisation `g / Σ g` of `g = exp(log_g) · factor`, computed as
    `exp(log_g − max log_g)` so that a profile far narrower than a pixel, or
    centred far from every pixel, does not underflow to `0 / 0 = NaN`: the flux
    goes to the pixels nearest the profile's peak (its point-sampled limit). The
    shift is the maximum of `log g + log factor` (`factor` in [0, 2]: a ring's
    azimuthal brightening; a negative factor counts as 0), so a pixel whose factor
    is 0 cannot be the only one left."""
    if factor is None:
        shift = jax.lax.stop_gradient(jnp.max(log_g))
        g = jnp.exp(log_g - shift)
        return g / jnp.sum(g)
    pos = factor > 0
    log_total = jnp.where(pos, log_g + jnp.log(jnp.where(pos, factor, 1.0)), -jnp.inf)
    shift = jax.lax.stop_gradient(jnp.max(log_total))
    # exp(log g + log factor − shift) where factor > 0: a pixel whose factor is 0
    # may lie far above the shift (exp would overflow, times 0 = NaN).
    g = jnp.where(pos, jnp.exp(jnp.where(pos, log_total, shift) - shift), 0.0)
    # Where the factor is exactly 0 (a crescent's dark side at asymmetry ±1) the
    # value is 0 but the derivative in the factor is `exp(log g − shift)` (the
    # one-sided derivative into the valid range): carried by a term whose value is
    # 0, its size capped at 1/eps (a pixel far above the shift) so that it stays
    # finite. A negative factor (an optimiser's asymmetry beyond ±1) is clipped to
    # 0, and so is its derivative: the derivative of the image rendered.
    cap = np.log(1.0 / np.finfo(log_g.dtype).eps)
    e = jax.lax.stop_gradient(jnp.exp(jnp.minimum(log_g - shift, cap)))
    carrier = (factor - jax.lax.stop_gradient(factor)) * e
    g = g + jnp.where(factor == 0, carrier, 0.0)
    return g / jnp.sum(g)


def check_inside(
    grid: ImageGrid, x0, y0, radius=0.0, what: str = "the centre (`x0`, `y0`)"
):
    """Refuse (concrete) parameters that put `what` (a disc of `radius` about
    `(x0, y0)`) outside the field of view: the model is renormalised to its flux on
    the grid, so the flux would silently pile up on the visible part or the edge."""
    if not all(is_concrete(a) for a in (x0, y0, radius)):
        return
    half_y, half_x = (0.5 * f for f in grid.fov)
    x0, y0, radius = float(x0), float(y0), float(radius)
    if abs(x0) + radius > half_x or abs(y0) + radius > half_y:
        raise ValueError(
            f"{what} reaches outside the field of view: `x0`={x0:.4g}, `y0`={y0:.4g}"
            + (f", radius {radius:.4g}" if radius else "")
            + f" rad, but the grid spans ±{half_x:.4g} (x) and ±{half_y:.4g} (y) rad. "
            "Its flux would be renormalised onto the visible pixels; use a larger "
            "field of view (`ImageGrid.from_fov`) or check the units (radians)."
        )


def gaussian_log_profile(dx, dy, sigma_major, sigma_minor, angle):
    """`−½ (a²/σ_maj² + b²/σ_min²)`, the log-profile of an elliptical Gaussian at
    offsets `(dx, dy)` from its centre (+x east, +y north; any unit, the σ in the
    same), with `a = dx sin φ + dy cos φ` along the major axis at position angle
    `φ` (east of north) and `b = dx cos φ − dy sin φ`. The one formula of
    [`eqmodels.GaussianImage`][] (offsets and σ in pixels) and the geometric
    [`eqmodels.EllipticalGaussian`][] (radians)."""
    s, c = jnp.sin(angle), jnp.cos(angle)
    a = dx * s + dy * c
    b = dx * c - dy * s
    return -0.5 * ((a / sigma_major) ** 2 + (b / sigma_minor) ** 2)


def gaussian_log_visibility(u, v, sigma_major, sigma_minor, angle):
    """`−2π² (σ_maj² k_a² + σ_min² k_b²)`, the logarithm of the normalised
    visibility of the Gaussian of `gaussian_log_profile` (σ in radians, `u`, `v`
    in wavelengths), with `k_a = u sin φ + v cos φ`, `k_b = u cos φ − v sin φ`."""
    s, c = jnp.sin(angle), jnp.cos(angle)
    ka = u * s + v * c
    kb = u * c - v * s
    q = (sigma_major * ka) ** 2 + (sigma_minor * kb) ** 2
    return -2.0 * np.pi**2 * q
