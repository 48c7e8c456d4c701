"""Chi² of complex visibilities."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Scalar

from .._forward._base import AbstractForwardModel
from .._forward._select import make_forward
from .._grid import ImageGrid
from .._validation import (
    as_complex,
    as_real,
    check_positive,
    check_same_shape,
    is_concrete,
)
from ._base import AbstractDataTerm, as_image


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
        if not isinstance(forward, AbstractForwardModel):
            raise TypeError(
                f"`forward` must be a forward model (`DirectFT`, `SeparableFT`, "
                f"`NUFFT`), got {type(forward).__name__}."
            )
        dtype = forward.dtype
        ctype = np.complex64 if dtype == np.float32 else np.complex128
        vis = as_complex("vis", vis)
        sigma = as_real("sigma", sigma)
        check_same_shape(("vis", "sigma", "forward.u"), vis, sigma, forward.u)
        check_positive("sigma", sigma)
        self.forward = forward
        if is_concrete(sigma):
            weight = 1.0 / np.asarray(sigma, np.float64) ** 2
        else:
            weight = 1.0 / sigma**2
        self.vis = jnp.asarray(vis, ctype)
        self.weight = jnp.asarray(weight, dtype)
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
        fwd = make_forward(forward, grid, data.u, data.v, **forward_kwargs)
        return cls(fwd, data.vis, data.sigma)

    def residuals(self, image) -> Float[Array, " m"]:
        d = self.forward(as_image(image)) - self.vis
        s = jnp.sqrt(self.weight / (2 * self.n_rows))
        return jnp.concatenate([(s * d.real).reshape(-1), (s * d.imag).reshape(-1)])

    def __call__(self, image) -> Scalar:
        d = self.forward(as_image(image)) - self.vis
        sq = jax.lax.real(d) ** 2 + jax.lax.imag(d) ** 2
        return jnp.sum(self.weight * sq) / (2 * self.n_rows)
