"""Chi² of visibility amplitudes."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._forward._base import AbstractForwardModel
from .._grid import ImageGrid
from .._numerics import safe_sqrt
from ._base import AbstractDataTerm, as_image, ImageLike
from ._common import (
    abs2,
    real_rows,
    term_from_data,
)


class AmpChi2(AbstractDataTerm, strict=True):
    r"""Chi² of visibility amplitudes (eht-imaging's `'amp'` term):

    `χ² = (1/N) Σ_k w_k (|V̂_k| − A_k)²`, `w_k = 1/σ_k²`,

    with `A_k` the (usually debiased) observed amplitude and `N = n_rows`.
    Residuals: `r_k = sqrt(w_k/N) (|V̂_k| − A_k)`. Where the model visibility is
    exactly 0 the amplitude's derivative is taken as 0 (no NaN); a row of weight 0
    contributes exactly 0.
    """

    forward: AbstractForwardModel
    amp: Float[Array, " n"]
    weight: Float[Array, " n"]
    n_rows: int = eqx.field(static=True)

    def __init__(
        self,
        forward: AbstractForwardModel,
        amp: Float[ArrayLike, " n"],
        sigma: Float[ArrayLike, " n"],
    ):
        """**Arguments:**

        - `forward`: forward model at the rows' `(u, v)`, points of shape `(n,)`.
        - `amp`: observed amplitudes (Jy), shape `(n,)`.
        - `sigma`: amplitude noise (Jy, > 0), shape `(n,)`.
        """
        self.forward, self.amp, self.weight, self.n_rows = real_rows(
            forward, None, "AmpChi2", "amp", amp, sigma
        )

    @classmethod
    def from_data(
        cls, data, grid: ImageGrid, *, forward: str = "direct", **forward_kwargs
    ) -> "AmpChi2":
        """The term for an [`eqmodels.AmpProducts`][] (or anything with `u`, `v`,
        `amp`, `sigma`).

        **Arguments:**

        - `data`: the amplitude products.
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`.
        - `**forward_kwargs`: options of the forward model (`pulse`, `eps`, `dtype`).
        """
        return term_from_data(cls, data, "amp", grid, forward, forward_kwargs)

    def _amp(self, image: ImageLike):
        return safe_sqrt(abs2(self.forward(as_image(image))))

    def residuals(self, image: ImageLike) -> Float[Array, " n"]:
        return jnp.sqrt(self.weight / self.n_rows) * (self._amp(image) - self.amp)

    def __call__(self, image: ImageLike) -> Scalar:
        d = self._amp(image) - self.amp
        return jnp.sum(self.weight * d * d) / self.n_rows
