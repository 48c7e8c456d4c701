"""Chi² of complex bispectra."""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int, Scalar

from .._forward._base import AbstractForwardModel
from .._forward._select import ForwardLike
from .._grid import ImageGrid
from .._numerics import asarray
from .._validation import as_complex
from ._base import AbstractDataTerm, n_rows_leaf
from ._common import (
    abs2,
    check_forward,
    index_key_leaf,
    row_labels,
    term_from_data,
    values_dtype,
    weight_from_sigma,
)


class BispectrumChi2(AbstractDataTerm):
    r"""Chi² of complex bispectra (eht-imaging's `'bs'` term):

    `χ² = (1/2N) Σ_k w_k |B̂_k − B_k|²`, `B̂_k = V̂_k1 V̂_k2 V̂_k3`, `w_k = 1/σ_k²`,

    over closed triangles whose three legs' `(u, v)` are already oriented (the
    product of the three model visibilities is the model bispectrum).
    Residuals: the real and imaginary parts of `sqrt(w_k/2N) (B̂_k − B_k)`.

    `log_likelihood` treats the rows as **independent** (eht-imaging's and
    Comrade's default), ignoring the covariance of closures on shared baselines;
    `ClosurePhaseChi2` and `LogClosureAmpChi2` offer it (`covariance="full"`).
    """

    forward: AbstractForwardModel | None
    bispectrum: Complex[Array, " n"]
    weight: Float[Array, " n"]
    n_rows: Int[Array, ""]
    stations: Int[Array, "n 3 2"]
    time_index: Int[Array, " n"]
    index_key: Int[Array, ""]

    report_name = "bs"
    reals_per_row = 2
    row_fields = ("bispectrum", "weight", "stations", "time_index")

    def __init__(
        self,
        forward: AbstractForwardModel,
        bispectrum: Complex[ArrayLike, " n"],
        sigma: Float[ArrayLike, " n"],
        *,
        stations: ArrayLike | None = None,
        time_index: ArrayLike | None = None,
        index_key: int | ArrayLike | None = None,
    ):
        """**Arguments:**

        - `forward`: forward model at the legs' `(u, v)`, points of shape `(n, 3)`,
          the legs walked around each triangle (`u₁ + u₂ + u₃ = 0`; rows that do
          not close, most of them, are refused).
        - `bispectrum`: observed bispectra (Jy³), shape `(n,)`.
        - `sigma`: bispectrum noise (Jy³, > 0), shape `(n,)`.
        - `stations`: each leg's station pair (oriented as the leg is walked), and
          `time_index` each row's time slot (see [`eqmodels.VisChi2`][]); default
          unknown (`-1`).
        - `index_key`: the fingerprint of the tables that `time_index` and
          `stations` point into ([`eqmodels.VisData.index_key`][];
          `from_data` sets it, and [`eqmodels.GainCorrected`][] checks it
          against the gains'); default unknown (`-1`).
        """
        check_forward(forward, 3, "BispectrumChi2")
        n = forward.u.shape[0]
        dtype, ctype = values_dtype(forward)
        bispectrum = as_complex("bispectrum", bispectrum)
        if np.shape(bispectrum) != (n,):
            raise ValueError(
                f"`bispectrum` has shape {np.shape(bispectrum)} but `forward` has {n} "
                "rows; they must match (one value per row)."
            )
        self.forward = forward
        self.bispectrum = asarray(bispectrum, ctype)
        self.weight = weight_from_sigma(sigma, n, dtype)
        self.n_rows = n_rows_leaf(int(n))
        self.stations, self.time_index = row_labels(
            stations, time_index, tuple(forward.u.shape)
        )
        self.index_key = index_key_leaf(index_key)

    @classmethod
    def from_data(
        cls, data, grid: ImageGrid, *, forward: ForwardLike = "direct", **forward_kwargs
    ) -> "BispectrumChi2":
        """The term for an [`eqmodels.BispectrumProducts`][] (or anything with `u`,
        `v` of shape `(n, 3)`, `bispectrum`, `sigma`).

        **Arguments:**

        - `data`: the bispectrum products.
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`, a forward-model class
          or a callable `(grid, u, v) -> forward model` (see
          [`eqmodels.make_forward`][]).
        - `**forward_kwargs`: options of the forward model (`pulse`, `eps`, `dtype`).
        """
        return term_from_data(
            cls,
            data,
            "bispectrum",
            grid,
            forward,
            forward_kwargs,
            k=3,
            product="a `BispectrumProducts` (from `eqmodels.bispectra(data)`)",
        )

    def _diff(self, vis: Complex[Array, "n 3"]) -> Complex[Array, " n"]:
        return vis[:, 0] * vis[:, 1] * vis[:, 2] - self.bispectrum

    def residuals_from_vis(self, vis: Complex[Array, "n 3"]) -> Float[Array, " m"]:
        d = self._diff(vis)
        s = jnp.sqrt(self.weight / (2 * self.n_rows))
        return jnp.concatenate([s * jax.lax.real(d), s * jax.lax.imag(d)])

    def chi2_from_vis(self, vis: Complex[Array, "n 3"]) -> Scalar:
        return jnp.sum(self.weight * abs2(self._diff(vis))) / (2 * self.n_rows)
