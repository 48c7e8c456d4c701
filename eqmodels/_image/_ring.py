"""A thin-ring image model with a brightness asymmetry."""

import jax.numpy as jnp
from jaxtyping import Array, Float

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._numerics import FWHM_PER_SIGMA, safe_sqrt
from .._validation import (
    check_grid,
    check_radians,
    is_concrete,
    resolve_float_dtype,
    scalar_leaf,
)
from ._base import AbstractImageModel
from ._parametric import (
    check_inside,
    normalised,
    pixel_offsets,
    sigma_pixels,
)


class RingImage(AbstractImageModel):
    r"""A ring with a Gaussian radial profile and a cosine brightness asymmetry,
    rendered on the grid, differentiable in its parameters:

    `I_p = F · g_p / Σ_q g_q`,
    `g_p = exp(−(r_p − d/2)² / (2σ_w²)) · (1 + A cos(θ_p − θ_A))`,

    with `r`, `θ` the distance and position angle (east of north) of the pixel
    centre from `(x0, y0)`, `d` the diameter, `σ_w = w / sqrt(8 ln 2)` for the
    FWHM width `w`, `A ∈ [−1, 1]` the asymmetry and `θ_A` the position angle of the
    bright side. Normalised to sum to `F` exactly (computed stably: a ring far
    thinner than a pixel does not underflow to `0/0`). A ring reaching outside the
    field of view (its outer half-maximum radius `(d + w) / 2` from the centre) is
    refused at construction (its flux would be renormalised onto the visible part);
    parameters traced under `jit` are not checked.
    """

    grid: ImageGrid
    flux: Float[Array, ""]
    diameter: Float[Array, ""]
    width: Float[Array, ""]
    x0: Float[Array, ""]
    y0: Float[Array, ""]
    asymmetry: Float[Array, ""]
    asymmetry_angle: Float[Array, ""]

    def __init__(
        self,
        grid: ImageGrid,
        flux: RealLike,
        diameter: RealLike,
        width: RealLike,
        *,
        x0: RealLike = 0.0,
        y0: RealLike = 0.0,
        asymmetry: RealLike = 0.0,
        asymmetry_angle: RealLike = 0.0,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][].
        - `flux`: total flux `F` (Jy).
        - `diameter`: ring diameter `d` (radians; `eqmodels.uas_to_rad(40.0)`).
        - `width`: FWHM of the radial profile (radians, > 0).
        - `x0`, `y0`: centre (radians; +x east, +y north).
        - `asymmetry`: `A` in `[−1, 1]` (0: uniform ring). Construction refuses
          `|A| > 1`; an optimiser's step may still take it there, and the image
          then clips `1 + A cos(θ − θ_A)` at 0 (its derivative too, so gradients
          are those of the image rendered).
        - `asymmetry_angle`: position angle of the bright side, radians east of
          north.
        - `dtype`: float32 / float64 (default: JAX's default float, float64 under
          x64).
        """
        self.grid = check_grid(grid)
        dtype = resolve_float_dtype(jnp.result_type(float) if dtype is None else dtype)
        self.flux = scalar_leaf("flux", flux, dtype)
        self.diameter = scalar_leaf("diameter", diameter, dtype, positive=True)
        self.width = scalar_leaf("width", width, dtype, positive=True)
        check_radians("diameter", self.diameter)
        check_radians("width", self.width)
        self.x0 = scalar_leaf("x0", x0, dtype)
        self.y0 = scalar_leaf("y0", y0, dtype)
        self.asymmetry = scalar_leaf("asymmetry", asymmetry, dtype)
        if is_concrete(self.asymmetry) and not abs(float(self.asymmetry)) <= 1:
            raise ValueError(
                f"`asymmetry` must be in [-1, 1] (the brightness stays >= 0), got "
                f"{float(self.asymmetry)}."
            )
        self.asymmetry_angle = scalar_leaf("asymmetry_angle", asymmetry_angle, dtype)
        # The ring's outer half-maximum radius, d/2 + w/2, must lie inside the
        # field (`d/2` alone would let a 124 µas ring 20 µas wide on a 128 µas
        # field through, with 23 % of its flux renormalised away).
        concrete = is_concrete(self.diameter) and is_concrete(self.width)
        check_inside(
            self.grid,
            self.x0,
            self.y0,
            0.5 * (self.diameter + self.width) if concrete else 0.0,
            "the ring (`diameter`, `width`, `x0`, `y0`: its outer half-maximum "
            "radius `(diameter + width) / 2`)",
        )

    def __call__(self) -> Float[Array, "ny nx"]:
        dx, dy = pixel_offsets(self.grid, self.x0, self.y0, self.flux.dtype)
        p = self.grid.psize
        r2 = dx * dx + dy * dy
        ok = r2 > 0
        r = safe_sqrt(r2)
        s_w = sigma_pixels(self.width, p, FWHM_PER_SIGMA)
        log_radial = -0.5 * ((r - 0.5 * self.diameter / p) / s_w) ** 2
        # cos(θ − θ_A) with sin θ = Δx / r, cos θ = Δy / r (0 at the centre).
        proj = dx * jnp.sin(self.asymmetry_angle) + dy * jnp.cos(self.asymmetry_angle)
        cos_t = jnp.where(ok, proj / jnp.where(ok, r, 1.0), 0.0)
        return self.flux * normalised(log_radial, 1.0 + self.asymmetry * cos_t)
