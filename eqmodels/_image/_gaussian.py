"""An elliptical Gaussian image model."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._numerics import FWHM_PER_SIGMA
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
    gaussian_log_profile,
    normalised,
    pixel_offsets,
    sigma_pixels,
)


class GaussianImage(AbstractImageModel):
    r"""An elliptical Gaussian rendered on the grid, differentiable in its
    parameters:

    `I_p = F · g_p / Σ_q g_q`, `g_p = exp(−a_p²/(2σ_maj²) − c_p²/(2σ_min²))`,

    with `a = Δx sin φ + Δy cos φ` (along the major axis, at position angle `φ`
    east of north), `c = Δx cos φ − Δy sin φ`, `Δx = x − x0`, `Δy = y − y0`, and
    `σ = FWHM / sqrt(8 ln 2)`. The image is point-sampled at the pixel centres and
    normalised to sum to `F` exactly (as eht-imaging rescales its prior and initial
    images to the total flux).

    The normalisation is computed stably: a Gaussian far narrower than a pixel
    puts its flux on the pixel(s) nearest `(x0, y0)` (the point-sampled limit)
    instead of `0/0`. A centre outside the field of view, or a Gaussian wider than
    the field (`fwhm` beyond its narrower side, as a ring reaching outside it is),
    is refused at construction (its flux would pile up on the edge or be
    renormalised onto its flat top); parameters traced under
    `jit` are not checked, and such a centre renders on the nearest edge pixels.
    """

    grid: ImageGrid
    flux: Float[Array, ""]
    fwhm_major: Float[Array, ""]
    fwhm_minor: Float[Array, ""]
    angle: Float[Array, ""]
    x0: Float[Array, ""]
    y0: Float[Array, ""]

    def __init__(
        self,
        grid: ImageGrid,
        flux: RealLike,
        fwhm: RealLike,
        *,
        fwhm_minor: RealLike | None = None,
        angle: RealLike = 0.0,
        x0: RealLike = 0.0,
        y0: RealLike = 0.0,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][].
        - `flux`: total flux `F` (Jy).
        - `fwhm`: FWHM of the major axis (radians; `eqmodels.uas_to_rad(40.0)`).
        - `fwhm_minor`: FWHM of the minor axis (radians); default `fwhm` (circular).
        - `angle`: position angle `φ` of the major axis, radians east of north.
        - `x0`, `y0`: centre (radians; +x east, +y north).
        - `dtype`: float32 / float64 (default: JAX's default float, float64 under
          x64).
        """
        self.grid = check_grid(grid)
        dtype = resolve_float_dtype(jnp.result_type(float) if dtype is None else dtype)
        self.flux = scalar_leaf("flux", flux, dtype)
        self.fwhm_major = scalar_leaf("fwhm", fwhm, dtype, positive=True)
        self.fwhm_minor = scalar_leaf(
            "fwhm_minor",
            fwhm if fwhm_minor is None else fwhm_minor,
            dtype,
            positive=True,
        )
        check_radians("fwhm", self.fwhm_major)
        check_radians("fwhm_minor", self.fwhm_minor)
        self.angle = scalar_leaf("angle", angle, dtype)
        self.x0 = scalar_leaf("x0", x0, dtype)
        self.y0 = scalar_leaf("y0", y0, dtype)
        check_inside(self.grid, self.x0, self.y0)
        # A Gaussian wider than its field (FWHM of the major axis beyond the
        # field's narrower side) is mostly off the grid: its flux would be
        # renormalised onto a flat-topped patch (a `fwhm` in µas read as radians
        # is caught by `check_radians` above; this catches one a grid too wide).
        if is_concrete(self.fwhm_major):
            width, fov = float(self.fwhm_major), min(self.grid.fov)
            if width > fov:
                raise ValueError(
                    f"`fwhm`={width:.4g} rad is wider than the field of view "
                    f"({fov:.4g} rad): the image would hold only the Gaussian's "
                    "flat top, renormalised to `flux`. Use a larger field of view "
                    "(`ImageGrid.from_fov`) or a narrower Gaussian (radians: "
                    "`em.uas_to_rad(40.0)`)."
                )

    def _log_profile(self) -> Float[Array, "ny nx"]:
        """`ln g_p`, the unnormalised profile's logarithm."""
        dx, dy = pixel_offsets(self.grid, self.x0, self.y0, self.flux.dtype)
        p = self.grid.psize
        s_maj = sigma_pixels(self.fwhm_major, p, FWHM_PER_SIGMA)
        s_min = sigma_pixels(self.fwhm_minor, p, FWHM_PER_SIGMA)
        return gaussian_log_profile(dx, dy, s_maj, s_min, self.angle)

    def __call__(self) -> Float[Array, "ny nx"]:
        return self.flux * normalised(self._log_profile())

    def log_image(self) -> Float[Array, "ny nx"]:
        """`ln I_p = ln F + ln g_p − ln Σ_q g_q`, computed in log space: finite where
        the image itself underflows to 0 (a narrow Gaussian's tails in float32,
        beyond about 5 FWHM). An entropy given this model as its prior takes its
        `ln P` from here (the logarithm of the underflowed tails, `-inf`, would
        give an infinite penalty)."""
        log_g = self._log_profile()
        return jnp.log(self.flux) + log_g - jax.nn.logsumexp(log_g)
