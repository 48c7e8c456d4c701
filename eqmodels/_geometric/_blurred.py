"""A geometric model convolved with a circular Gaussian."""

import math

import jax
import jax.numpy as jnp
import jax.scipy.signal
import numpy as np
from jaxtyping import Array, Float

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._image._parametric import sigma_pixels
from .._numerics import FWHM_PER_SIGMA
from ._base import AbstractGeometricModel
from ._common import points, size_leaf


class Blurred(AbstractGeometricModel):
    r"""A geometric model convolved with a circular Gaussian of FWHM `w`
    (`σ = w / sqrt(8 ln 2)`), its flux kept:

    `V'(u, v) = V(u, v) · exp(−2π² σ² (u² + v²))`.

    `Blurred(MRing(...), w)` is the thick m-ring (Johnson et al. 2020). It has no
    closed-form intensity: it renders as its model rendered on the grid,
    convolved with the Gaussian sampled at the pixel offsets (normalised to sum
    to 1; FFT convolution, zero-padded, no wrap-around), so it cannot go inside
    `Shifted`, `Rotated` or `Stretched`: blur last (a shift or rotation commutes
    with a circular blur). It can go inside a [`eqmodels.Sum`][].
    """

    model: AbstractGeometricModel
    fwhm: Float[Array, ""]

    def __init__(self, model: AbstractGeometricModel, fwhm: RealLike):
        """**Arguments:**

        - `model`: a geometric model (any: its render is convolved).
        - `fwhm`: the Gaussian's FWHM (radians, > 0).
        """
        if not isinstance(model, AbstractGeometricModel):
            raise TypeError(
                "`model` must be a geometric model (`eqmodels.AbstractGeometricModel`"
                f": `MRing`, `Disk`, ...), got {type(model).__name__}."
            )
        if not model.has_visibility:
            raise ValueError(
                "`model` holds a pixel model: blur the geometric part only "
                "(`Sum(Blurred(ring, fwhm), pixels)`)."
            )
        if model.polarimetric:
            raise ValueError(
                f"`model` is polarimetric ({type(model).__name__}): `Blurred` is a "
                "Stokes I model; blur the polarized m-ring with its own `fwhm` "
                "(`PolMRing(..., fwhm=w)`), or polarize the blurred Stokes I model "
                "(`Polarized(Blurred(model, w), frac, evpa)`)."
            )
        self.model = model
        self.fwhm = size_leaf("fwhm", fwhm, model.dtype)

    @property
    def grid(self) -> ImageGrid:  # type: ignore[override]
        return self.model.grid

    @property
    def has_intensity(self) -> bool:
        return False

    def visibility(self, u, v):
        u, v = points(u, v, self.fwhm.dtype)
        sigma = self.fwhm / FWHM_PER_SIGMA
        taper = jnp.exp(-2.0 * math.pi**2 * sigma**2 * (u * u + v * v))
        return self.model.visibility(u, v) * taper

    def intensity(self, x, y, resolution=0.0):
        raise ValueError(
            "a `Blurred` model has no closed-form intensity: render it on its grid "
            "(`model()`), or evaluate its visibilities."
        )

    def render(self):
        return gaussian_blur(self.grid, self.fwhm, self.model.render())


def gaussian_blur(grid: ImageGrid, fwhm, img):
    """`img` (`(ny, nx)`, or planes `(k, ny, nx)`) convolved with a circular
    Gaussian of FWHM `fwhm` (radians) sampled at the pixel offsets and normalised
    to sum to 1 (FFT convolution, zero-padded, no wrap-around)."""
    g = grid
    dtype = fwhm.dtype
    s = sigma_pixels(fwhm, g.psize, FWHM_PER_SIGMA)
    ky = jnp.asarray(np.arange(-(g.ny - 1), g.ny), dtype)
    kx = jnp.asarray(np.arange(-(g.nx - 1), g.nx), dtype)
    gy = jnp.exp(-0.5 * (ky / s) ** 2)
    gx = jnp.exp(-0.5 * (kx / s) ** 2)
    kernel = (gy[:, None] * gx[None, :]) / (jnp.sum(gy) * jnp.sum(gx))
    if img.ndim == 3:
        return jax.vmap(lambda p: jax.scipy.signal.fftconvolve(p, kernel, "same"))(img)
    return jax.scipy.signal.fftconvolve(img, kernel, mode="same")
