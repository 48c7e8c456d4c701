"""The polarimetric geometric-model interface."""

import abc
from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Complex, Float

from .._forward._base import AbstractForwardModel
from .._image._pol_base import AbstractPolImageModel
from ._base import AbstractGeometricModel


class AbstractPolGeometricModel(AbstractGeometricModel, AbstractPolImageModel):
    r"""Base class of polarimetric geometric models: four Stokes images `I, Q, U,
    V` (Jy/sr; EVPA `χ = ½ arg(Q + iU)` east of north) with analytic Stokes
    visibilities

    `(V_I, V_Q, V_U, V_V)(u, v) = ∫∫ (I, Q, U, V)(x, y) e^{+2πi (u x + v y)} dx dy`,

    stacked last, `(*points, 4)` (as the polarimetric data terms take them).

    A polarimetric data term given one evaluates `stokes_visibility` at its points
    (no pixel transform), a Stokes I term `visibility` (the I column); a
    regularizer, a plot or `model()` get the four planes rendered on `grid`,
    `(4, ny, nx)` (Jy/pixel): it is an [`eqmodels.AbstractPolImageModel`][] too.
    The coordinate transforms, [`eqmodels.Blurred`][] and [`eqmodels.Sum`][] take
    Stokes I models only: transform the Stokes I model, then polarize it
    ([`eqmodels.Polarized`][]).

    Subclasses hold `grid` and implement `stokes_visibility(u, v)`, `render()`
    (the four planes) and `intensity` (Stokes I, as any geometric model).
    """

    polarimetric: ClassVar[bool] = True

    @abc.abstractmethod
    def stokes_visibility(
        self, u: Float[ArrayLike, "*points"], v: Float[ArrayLike, "*points"]
    ) -> Complex[Array, "*points 4"]:
        """**Arguments:** `u`, `v`, the points in wavelengths (same shape).

        **Returns:** the Stokes visibilities `(V_I, V_Q, V_U, V_V)` (Jy), shape
        `(*u.shape, 4)`.
        """

    @abc.abstractmethod
    def render(self) -> Float[Array, "4 ny nx"]:
        """**Returns:** the Stokes planes I, Q, U, V on `grid`, `(4, ny, nx)`,
        Jy/pixel."""

    def visibility(self, u, v):
        """The Stokes I visibilities (what a Stokes I term takes)."""
        return self.stokes_visibility(u, v)[..., 0]

    def stokes_visibility_through(
        self, forward: AbstractForwardModel
    ) -> Complex[Array, "*points 4"]:
        """The Stokes visibilities at `forward`'s points, in its complex dtype,
        `(*points, 4)`: what a polarimetric data term calls."""
        ctype = jnp.result_type(forward.dtype, jnp.complex64)
        return self.stokes_visibility(forward.u, forward.v).astype(ctype)

    def __call__(self) -> Float[Array, "4 ny nx"]:
        return self.render()
