"""An elliptical Gaussian with analytic visibilities."""

import math

import jax.numpy as jnp
from jaxtyping import Array, Float

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._image._parametric import gaussian_log_profile, gaussian_log_visibility
from .._numerics import FWHM_PER_SIGMA
from .._validation import check_grid, scalar_leaf
from ._base import AbstractGeometricModel
from ._common import model_dtype, points, size_leaf


class EllipticalGaussian(AbstractGeometricModel):
    r"""An elliptical Gaussian centred on the phase centre (shift it with
    [`eqmodels.Shifted`][]):

    `I(x, y) = F/(2π σ_a σ_b) · exp(−a²/(2σ_a²) − b²/(2σ_b²))`,
    `V(u, v) = F · exp(−2π² (σ_a² (u sin φ + v cos φ)² + σ_b² (u cos φ − v sin φ)²))`,

    with `a = x sin φ + y cos φ` (along the major axis, position angle `φ` east of
    north), `b = x cos φ − y sin φ` and `σ = FWHM / sqrt(8 ln 2)`. Smooth, so it
    renders by point sampling (`resolution` is ignored).
    """

    grid: ImageGrid
    flux: Float[Array, ""]
    fwhm_major: Float[Array, ""]
    fwhm_minor: Float[Array, ""]
    angle: Float[Array, ""]

    def __init__(
        self,
        grid: ImageGrid,
        flux: RealLike,
        fwhm: RealLike,
        *,
        fwhm_minor: RealLike | None = None,
        angle: RealLike = 0.0,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][] it renders on.
        - `flux`: total flux `F` (Jy).
        - `fwhm`: FWHM of the major axis (radians, > 0).
        - `fwhm_minor`: FWHM of the minor axis (radians, > 0); default `fwhm`.
        - `angle`: position angle `φ` of the major axis, radians east of north.
        - `dtype`: float32 / float64 (default: JAX's default float).
        """
        self.grid = check_grid(grid)
        dtype = model_dtype(dtype)
        self.flux = scalar_leaf("flux", flux, dtype)
        self.fwhm_major = size_leaf("fwhm", fwhm, dtype)
        self.fwhm_minor = size_leaf(
            "fwhm_minor", fwhm if fwhm_minor is None else fwhm_minor, dtype
        )
        self.angle = scalar_leaf("angle", angle, dtype)

    def visibility(self, u, v):
        u, v = points(u, v, self.flux.dtype)
        sa = self.fwhm_major / FWHM_PER_SIGMA
        sb = self.fwhm_minor / FWHM_PER_SIGMA
        return (
            self.flux * jnp.exp(gaussian_log_visibility(u, v, sa, sb, self.angle)) + 0j
        )

    def intensity(self, x, y, resolution=0.0):
        x, y = points(x, y, self.flux.dtype)
        sa = self.fwhm_major / FWHM_PER_SIGMA
        sb = self.fwhm_minor / FWHM_PER_SIGMA
        log_g = gaussian_log_profile(x, y, sa, sb, self.angle)
        return self.flux / (2 * math.pi * sa * sb) * jnp.exp(log_g)
