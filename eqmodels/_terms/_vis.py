"""Chi² of complex visibilities."""

import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Scalar

from .._forward._base import AbstractForwardModel
from .._grid import ImageGrid
from .._validation import as_complex, as_real, check_same_shape
from ._base import AbstractDataTerm, as_image
from ._common import (
    abs2,
    check_forward_type,
    inverse_variance,
    term_from_data,
    values_dtype,
)


class VisChi2(AbstractDataTerm, strict=True):
    """Chi² of complex visibilities (eht-imaging's `'vis'` term):

    `χ² = Σ_k w_k |V̂_k − V_k|² / (2N)`, `w_k = 1/σ_k²`, `N` = number of rows.

    A row with weight exactly 0 contributes exactly 0 (that is how rows are padded);
    `n_rows` keeps the true `N`.
    """

    forward: AbstractForwardModel
    vis: Complex[Array, "*points"]
    weight: Float[Array, "*points"]
    n_rows: int = eqx.field(static=True)

    def __init__(
        self,
        forward: AbstractForwardModel,
        vis: ArrayLike,
        sigma: ArrayLike,
    ):
        """**Arguments:**

        - `forward`: the forward model (its points are the data's (u, v)).
        - `vis`: observed complex visibilities (Jy), the shape of `forward.u`.
        - `sigma`: thermal noise per visibility (Jy, > 0), same shape.
        """
        check_forward_type(forward, "VisChi2")
        dtype, ctype = values_dtype(forward)
        vis = as_complex("vis", vis)
        sigma = as_real("sigma", sigma)
        check_same_shape(("vis", "sigma", "forward.u"), vis, sigma, forward.u)
        self.forward = forward
        self.vis = jnp.asarray(vis, ctype)
        self.weight = inverse_variance(sigma, dtype)
        self.n_rows = int(math.prod(np.shape(vis)))

    @classmethod
    def from_data(
        cls, data, grid: ImageGrid, *, forward: str = "direct", **forward_kwargs
    ) -> "VisChi2":
        """The term for a `VisData` (or anything with `u`, `v`, `vis`, `sigma`).

        **Arguments:**

        - `data`: the visibilities (e.g. scan-averaged).
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`.
        - `**forward_kwargs`: options of the forward model (`pulse`, `eps`, `dtype`).
        """
        return term_from_data(cls, data, "vis", grid, forward, forward_kwargs)

    def residuals(self, image) -> Float[Array, " m"]:
        d = self.forward(as_image(image)) - self.vis
        s = jnp.sqrt(self.weight / (2 * self.n_rows))
        return jnp.concatenate([(s * d.real).reshape(-1), (s * d.imag).reshape(-1)])

    def __call__(self, image) -> Scalar:
        d = self.forward(as_image(image)) - self.vis
        return jnp.sum(self.weight * abs2(d)) / (2 * self.n_rows)
