"""Chi² of complex bispectra."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Scalar

from .._forward._base import AbstractForwardModel
from .._grid import ImageGrid
from .._validation import as_complex, is_concrete
from ._base import AbstractDataTerm, as_image, ImageLike
from ._common import (
    abs2,
    check_forward,
    term_from_data,
    values_dtype,
    weight_from_sigma,
)


class BispectrumChi2(AbstractDataTerm, strict=True):
    r"""Chi² of complex bispectra (eht-imaging's `'bs'` term):

    `χ² = (1/2N) Σ_k w_k |B̂_k − B_k|²`, `B̂_k = V̂_k1 V̂_k2 V̂_k3`, `w_k = 1/σ_k²`,

    over closed triangles whose three legs' `(u, v)` are already oriented (the
    product of the three model visibilities is the model bispectrum).
    Residuals: the real and imaginary parts of `sqrt(w_k/2N) (B̂_k − B_k)`.
    """

    forward: AbstractForwardModel
    bispectrum: Complex[Array, " n"]
    weight: Float[Array, " n"]
    n_rows: int = eqx.field(static=True)

    def __init__(
        self,
        forward: AbstractForwardModel,
        bispectrum: Complex[ArrayLike, " n"],
        sigma: Float[ArrayLike, " n"],
    ):
        """**Arguments:**

        - `forward`: forward model at the legs' `(u, v)`, points of shape `(n, 3)`.
        - `bispectrum`: observed bispectra (Jy³), shape `(n,)`.
        - `sigma`: bispectrum noise (Jy³, > 0), shape `(n,)`.
        """
        check_forward(forward, 3, "BispectrumChi2")
        n = forward.u.shape[0]
        dtype, ctype = values_dtype(forward)
        bispectrum = as_complex("bispectrum", bispectrum)
        if is_concrete(bispectrum) and np.shape(bispectrum) != (n,):
            raise ValueError(
                f"`bispectrum` has shape {np.shape(bispectrum)} but `forward` has {n} "
                "rows; they must match (one value per row)."
            )
        self.forward = forward
        self.bispectrum = jnp.asarray(bispectrum, ctype)
        self.weight = weight_from_sigma(sigma, n, dtype)
        self.n_rows = int(n)

    @classmethod
    def from_data(
        cls, data, grid: ImageGrid, *, forward: str = "direct", **forward_kwargs
    ) -> "BispectrumChi2":
        """The term for an [`eqmodels.BispectrumProducts`][] (or anything with `u`,
        `v` of shape `(n, 3)`, `bispectrum`, `sigma`).

        **Arguments:**

        - `data`: the bispectrum products.
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`.
        - `**forward_kwargs`: options of the forward model (`pulse`, `eps`, `dtype`).
        """
        return term_from_data(cls, data, "bispectrum", grid, forward, forward_kwargs)

    def _diff(self, image: ImageLike) -> Complex[Array, " n"]:
        vis = self.forward(as_image(image))
        return vis[:, 0] * vis[:, 1] * vis[:, 2] - self.bispectrum

    def residuals(self, image: ImageLike) -> Float[Array, " m"]:
        d = self._diff(image)
        s = jnp.sqrt(self.weight / (2 * self.n_rows))
        return jnp.concatenate([s * jax.lax.real(d), s * jax.lax.imag(d)])

    def __call__(self, image: ImageLike) -> Scalar:
        return jnp.sum(self.weight * abs2(self._diff(image))) / (2 * self.n_rows)
