"""Chi² of closure amplitudes."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._forward._base import AbstractForwardModel
from .._forward._select import make_forward
from .._grid import ImageGrid
from ._base import AbstractDataTerm, as_image, ImageLike
from ._common import (
    abs2,
    check_forward,
    check_values,
    live_rows,
    safe_abs,
    values_dtype,
    weight_from_sigma,
    where_live,
)


class ClosureAmpChi2(AbstractDataTerm, strict=True):
    r"""Chi² of closure amplitudes (eht-imaging's `'camp'` term):

    `χ² = (1/N) Σ_k w_k (C_k − Ĉ_k)²`,
    `Ĉ_k = |V̂_k1| |V̂_k2| / (|V̂_k3| |V̂_k4|)`, `w_k = 1/σ_k²`,

    over quadrangles whose four legs' `(u, v)` are given. Residuals:
    `r_k = sqrt(w_k/N) (Ĉ_k − C_k)`. Rows of weight 0 contribute exactly 0.
    """

    forward: AbstractForwardModel
    camp: Float[Array, " n"]
    weight: Float[Array, " n"]
    n_rows: int = eqx.field(static=True)

    def __init__(
        self,
        forward: AbstractForwardModel,
        camp: Float[ArrayLike, " n"],
        sigma: Float[ArrayLike, " n"],
    ):
        """**Arguments:**

        - `forward`: forward model at the legs' `(u, v)`, points of shape `(n, 4)`.
        - `camp`: observed (debiased) closure amplitudes, shape `(n,)`.
        - `sigma`: their noise (> 0), shape `(n,)`.
        """
        check_forward(forward, 4, "ClosureAmpChi2")
        n = forward.u.shape[0]
        dtype, _ = values_dtype(forward)
        self.forward = forward
        self.camp = check_values("camp", camp, n, dtype)
        self.weight = weight_from_sigma(sigma, n, dtype)
        self.n_rows = int(n)

    @classmethod
    def from_data(
        cls, data, grid: ImageGrid, *, forward: str = "direct", **forward_kwargs
    ) -> "ClosureAmpChi2":
        """The term for a [`eqmodels.ClosureAmpProducts`][] (or anything with `u`,
        `v` of shape `(n, 4)`, `camp`, `sigma`).

        **Arguments:**

        - `data`: the closure amplitude products.
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`.
        - `**forward_kwargs`: options of the forward model (`pulse`, `eps`, `dtype`).
        """
        fwd = make_forward(forward, grid, data.u, data.v, **forward_kwargs)
        return cls(fwd, data.camp, data.sigma)

    def _diff(self, image: ImageLike) -> Float[Array, " n"]:
        live = live_rows(self.weight)
        amp = safe_abs(abs2(self.forward(as_image(image))))
        num = amp[:, 0] * amp[:, 1]
        den = where_live(live, amp[:, 2] * amp[:, 3])
        return num / den - self.camp

    def residuals(self, image: ImageLike) -> Float[Array, " n"]:
        return jnp.sqrt(self.weight / self.n_rows) * self._diff(image)

    def __call__(self, image: ImageLike) -> Scalar:
        d = self._diff(image)
        return jnp.sum(self.weight * d * d) / self.n_rows
