"""Chi² of visibility amplitudes."""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Complex, Float, Int, Scalar

from .._forward._base import AbstractForwardModel
from .._forward._select import ForwardLike
from .._grid import ImageGrid
from .._numerics import safe_sqrt
from ._base import AbstractDataTerm
from ._common import (
    abs2,
    check_amplitudes,
    check_vis_shape,
    index_key_leaf,
    real_rows,
    row_labels,
    term_from_data,
)


class AmpChi2(AbstractDataTerm):
    r"""Chi² of visibility amplitudes (eht-imaging's `'amp'` term):

    `χ² = (1/N) Σ_k w_k (|V̂_k| − A_k)²`, `w_k = 1/σ_k²`,

    with `A_k` the (usually debiased) observed amplitude and `N = n_rows`.
    Residuals: `r_k = sqrt(w_k/N) (|V̂_k| − A_k)`. Where the model visibility is
    exactly 0 the amplitude's derivative is taken as 0 (no NaN); a row of weight 0
    contributes exactly 0.
    """

    forward: AbstractForwardModel | None
    amp: Float[Array, " n"]
    weight: Float[Array, " n"]
    n_rows: Int[Array, ""]
    stations: Int[Array, "n 2"]
    time_index: Int[Array, " n"]
    index_key: Int[Array, ""]

    report_name = "amp"
    reals_per_row = 1
    row_fields = ("amp", "weight", "stations", "time_index")

    def __init__(
        self,
        forward: AbstractForwardModel,
        amp: Float[ArrayLike, " n"],
        sigma: Float[ArrayLike, " n"],
        *,
        stations: ArrayLike | None = None,
        time_index: ArrayLike | None = None,
        index_key: int | ArrayLike | None = None,
    ):
        """**Arguments:**

        - `forward`: forward model at the rows' `(u, v)`, points of shape `(n,)`.
        - `amp`: observed amplitudes (Jy, `>= 0`, at most `1e6`), shape `(n,)`.
        - `sigma`: amplitude noise (Jy, > 0), shape `(n,)`.
        - `stations`, `time_index`: each row's station pair and time slot (see
          [`eqmodels.VisChi2`][]); default unknown (`-1`).
        - `index_key`: the fingerprint of the tables that `time_index` and
          `stations` point into ([`eqmodels.VisData.index_key`][];
          `from_data` sets it, and [`eqmodels.GainCorrected`][] checks it
          against the gains'); default unknown (`-1`).
        """
        self.amp, self.weight, self.n_rows = real_rows(
            forward,
            None,
            "AmpChi2",
            "amp",
            amp,
            sigma,
            check=lambda a: check_amplitudes("amp", a, term="AmpChi2", jy=True),
        )
        self.forward = forward
        self.stations, self.time_index = row_labels(
            stations, time_index, tuple(forward.u.shape)
        )
        self.index_key = index_key_leaf(index_key)

    @classmethod
    def from_data(
        cls, data, grid: ImageGrid, *, forward: ForwardLike = "direct", **forward_kwargs
    ) -> "AmpChi2":
        """The term for an [`eqmodels.AmpProducts`][] (or anything with `u`, `v`,
        `amp`, `sigma`).

        **Arguments:**

        - `data`: the amplitude products.
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`, a forward-model class
          or a callable `(grid, u, v) -> forward model` (see
          [`eqmodels.make_forward`][]).
        - `**forward_kwargs`: options of the forward model (`pulse`, `eps`, `dtype`).
        """
        return term_from_data(
            cls,
            data,
            "amp",
            grid,
            forward,
            forward_kwargs,
            k=None,
            product="an `AmpProducts` (from `eqmodels.amplitudes(data)`)",
        )

    def residuals_from_vis(self, vis: Complex[Array, " n"]) -> Float[Array, " n"]:
        check_vis_shape(self, vis, self.amp.shape)
        return jnp.sqrt(self.weight / self.n_rows) * (safe_sqrt(abs2(vis)) - self.amp)

    def chi2_from_vis(self, vis: Complex[Array, " n"]) -> Scalar:
        check_vis_shape(self, vis, self.amp.shape)
        d = safe_sqrt(abs2(vis)) - self.amp
        return jnp.sum(self.weight * d * d) / self.n_rows
