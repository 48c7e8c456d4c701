"""Any Stokes I geometric model, polarized with constant fractions."""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._image._pol_common import clip_fraction, fraction_leaves
from ._base import AbstractGeometricModel
from ._pol_base import AbstractPolGeometricModel


class Polarized(AbstractPolGeometricModel):
    r"""A Stokes I geometric model with uniform fractional polarization:

    `Q = I m cos 2χ`, `U = I m sin 2χ`, `V = I v`, so
    `(V_I, V_Q, V_U, V_V) = V_I · (1, m cos 2χ, m sin 2χ, v)`,

    with `m` the linear polarized fraction, `χ` the EVPA (radians east of north)
    and `v` the circular fraction. The model may be any Stokes I geometric model
    (transformed, [`eqmodels.Blurred`][], an [`eqmodels.XSRingauss`][], a
    [`eqmodels.Sum`][], a hybrid sum with a pixel model, whose part a data term
    transforms). Construction refuses `m < 0` and `m² + v² > 1`; parameters an
    optimiser moves beyond are scaled back onto `m² + v² = 1` (visibilities and
    render alike, as [`eqmodels.PolGaussianImage`][] does).
    """

    model: AbstractGeometricModel
    frac: Float[Array, ""]
    evpa: Float[Array, ""]
    vfrac: Float[Array, ""]

    def __init__(
        self,
        model: AbstractGeometricModel,
        frac: RealLike,
        evpa: RealLike = 0.0,
        vfrac: RealLike = 0.0,
    ):
        """**Arguments:**

        - `model`: a Stokes I geometric model.
        - `frac`: the linear polarized fraction `m = |P| / I`, in `[0, 1]`.
        - `evpa`: the EVPA `χ`, radians east of north.
        - `vfrac`: the circular fraction `v = V / I`; `m² + v² ≤ 1`.
        """
        if not isinstance(model, AbstractGeometricModel):
            raise TypeError(
                "`model` must be a geometric model (`eqmodels.AbstractGeometricModel`"
                f": `MRing`, `XSRingauss`, ...), got {type(model).__name__}; for a "
                "polarized Gaussian pixel model see `PolGaussianImage`."
            )
        if model.polarimetric:
            raise ValueError(
                f"`model` is already polarimetric ({type(model).__name__}): "
                "`Polarized` polarizes a Stokes I model."
            )
        self.model = model
        dtype = model.dtype
        self.frac, self.evpa, self.vfrac = fraction_leaves(frac, evpa, vfrac, dtype)

    @property
    def grid(self) -> ImageGrid:  # type: ignore[override]
        return self.model.grid

    @property
    def dtype(self) -> np.dtype:
        return self.model.dtype

    @property
    def has_intensity(self) -> bool:
        return self.model.has_intensity

    @property
    def has_visibility(self) -> bool:
        return self.model.has_visibility

    def fractions(self) -> Float[Array, " 4"]:
        """`(1, m cos 2χ, m sin 2χ, v)`, scaled onto `m² + v² ≤ 1`."""
        fq, fu, fv = clip_fraction(
            self.frac * jnp.cos(2 * self.evpa),
            self.frac * jnp.sin(2 * self.evpa),
            self.vfrac,
        )
        return jnp.stack([jnp.ones_like(fq), fq, fu, fv])

    def visibility(self, u, v):
        return self.model.visibility(u, v)

    def visibility_through(self, forward):
        return self.model.visibility_through(forward)

    def stokes_visibility(self, u, v):
        return _times(self.model.visibility(u, v), self.fractions())

    def stokes_visibility_through(self, forward):
        f = self.fractions().astype(forward.dtype)
        return _times(self.model.visibility_through(forward), f)

    def intensity(self, x, y, resolution=0.0):
        return self.model.intensity(x, y, resolution)

    def render(self):
        img = self.model.render()
        return self.fractions()[:, None, None].astype(img.dtype) * img[None]


def _times(vis, fractions):
    """`(*points, 4)`: the Stokes I visibilities times each fraction."""
    return jnp.stack([vis * fractions[k] for k in range(4)], axis=-1)
