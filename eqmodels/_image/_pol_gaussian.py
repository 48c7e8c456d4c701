"""An elliptical Gaussian with uniform polarization."""

import jax.numpy as jnp
from jaxtyping import Array, Float

from .._custom_types import RealLike
from .._grid import ImageGrid
from ._gaussian import GaussianImage
from ._pol_base import AbstractPolImageModel
from ._pol_common import clip_fraction, fraction_leaves


class PolGaussianImage(AbstractPolImageModel):
    r"""An elliptical Gaussian (Stokes I: a [`eqmodels.GaussianImage`][],
    `intensity`) with uniform fractional polarization:

    `Q = I m cos 2χ`, `U = I m sin 2χ`, `V = I v`,

    with `m = |P| / I` the linear polarized fraction, `χ` the EVPA (radians east of
    north) and `v = V / I` the circular fraction. Construction refuses
    `m² + v² > 1`; an optimiser's step may still take the parameters there, and
    the image then scales `(m, v)` back onto `m² + v² = 1` (value and derivative:
    those of the image rendered), so `Q² + U² + V² ≤ I²` always. A negative `m`
    renders as `|m|` at `χ + π/2`.
    """

    intensity: GaussianImage
    frac: Float[Array, ""]
    evpa: Float[Array, ""]
    vfrac: Float[Array, ""]

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
        frac: RealLike = 0.0,
        evpa: RealLike = 0.0,
        vfrac: RealLike = 0.0,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`, `flux`, `fwhm`, `fwhm_minor`, `angle`, `x0`, `y0`, `dtype`: the
          Stokes I Gaussian, as for [`eqmodels.GaussianImage`][].
        - `frac`: the linear polarized fraction `m = |P| / I`, in `[0, 1]`.
        - `evpa`: the EVPA `χ`, radians east of north.
        - `vfrac`: the circular fraction `v = V / I`; `m² + v² ≤ 1`.
        """
        self.intensity = GaussianImage(
            grid,
            flux,
            fwhm,
            fwhm_minor=fwhm_minor,
            angle=angle,
            x0=x0,
            y0=y0,
            dtype=dtype,
        )
        dtype = self.intensity.flux.dtype
        self.frac, self.evpa, self.vfrac = fraction_leaves(frac, evpa, vfrac, dtype)

    @property
    def grid(self) -> ImageGrid:
        """The image grid (the intensity's)."""
        return self.intensity.grid

    def __call__(self) -> Float[Array, "4 ny nx"]:
        i = self.intensity()
        fq, fu, fv = clip_fraction(
            self.frac * jnp.cos(2 * self.evpa),
            self.frac * jnp.sin(2 * self.evpa),
            self.vfrac,
        )
        return jnp.stack([i, fq * i, fu * i, fv * i])
