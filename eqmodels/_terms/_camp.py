"""Chi² of closure amplitudes."""

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
    index_key_leaf,
    live_rows,
    real_rows,
    row_labels,
    term_from_data,
    where_live,
)


class ClosureAmpChi2(AbstractDataTerm):
    r"""Chi² of closure amplitudes (eht-imaging's `'camp'` term):

    `χ² = (1/N) Σ_k w_k (C_k − Ĉ_k)²`,
    `Ĉ_k = |V̂_k1| |V̂_k2| / (|V̂_k3| |V̂_k4|)`, `w_k = 1/σ_k²`,

    over quadrangles whose four legs' `(u, v)` are given. Residuals:
    `r_k = sqrt(w_k/N) (Ĉ_k − C_k)`. Rows of weight 0 contribute exactly 0.

    `log_likelihood` treats the rows as **independent** (eht-imaging's and
    Comrade's default), ignoring the covariance of closures on shared baselines;
    `ClosurePhaseChi2` and `LogClosureAmpChi2` offer it (`covariance="full"`).
    """

    forward: AbstractForwardModel | None
    camp: Float[Array, " n"]
    weight: Float[Array, " n"]
    n_rows: Int[Array, ""]
    stations: Int[Array, "n 4 2"]
    time_index: Int[Array, " n"]
    index_key: Int[Array, ""]

    report_name = "camp"
    reals_per_row = 1
    row_fields = ("camp", "weight", "stations", "time_index")

    def __init__(
        self,
        forward: AbstractForwardModel,
        camp: Float[ArrayLike, " n"],
        sigma: Float[ArrayLike, " n"],
        *,
        stations: ArrayLike | None = None,
        time_index: ArrayLike | None = None,
        index_key: int | ArrayLike | None = None,
    ):
        """**Arguments:**

        - `forward`: forward model at the legs' `(u, v)`, points of shape `(n, 4)`.
        - `camp`: observed (debiased) closure amplitudes (`>= 0`), shape `(n,)`.
        - `sigma`: their noise (> 0), shape `(n,)`.
        - `stations`: each leg's station pair (oriented as the leg is walked), and
          `time_index` each row's time slot (see [`eqmodels.VisChi2`][]); default
          unknown (`-1`).
        - `index_key`: the fingerprint of the tables that `time_index` and
          `stations` point into ([`eqmodels.VisData.index_key`][];
          `from_data` sets it, and [`eqmodels.GainCorrected`][] checks it
          against the gains'); default unknown (`-1`).
        """
        self.camp, self.weight, self.n_rows = real_rows(
            forward,
            4,
            "ClosureAmpChi2",
            "camp",
            camp,
            sigma,
            check=lambda c: check_amplitudes(
                "camp",
                c,
                term="ClosureAmpChi2",
                jy=False,
                hint=" for log closure amplitudes use `LogClosureAmpChi2`;",
            ),
        )
        self.forward = forward
        self.stations, self.time_index = row_labels(
            stations, time_index, tuple(forward.u.shape)
        )
        self.index_key = index_key_leaf(index_key)

    @classmethod
    def from_data(
        cls, data, grid: ImageGrid, *, forward: ForwardLike = "direct", **forward_kwargs
    ) -> "ClosureAmpChi2":
        """The term for a [`eqmodels.ClosureAmpProducts`][] (or anything with `u`,
        `v` of shape `(n, 4)`, `camp`, `sigma`).

        **Arguments:**

        - `data`: the closure amplitude products.
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`, a forward-model class
          or a callable `(grid, u, v) -> forward model` (see
          [`eqmodels.make_forward`][]).
        - `**forward_kwargs`: options of the forward model (`pulse`, `eps`, `dtype`).
        """
        return term_from_data(
            cls,
            data,
            "camp",
            grid,
            forward,
            forward_kwargs,
            k=4,
            product="a `ClosureAmpProducts` (from `eqmodels.closure_amplitudes(data)`)",
        )

    def _diff(self, vis: Complex[Array, "n 4"]) -> Float[Array, " n"]:
        live = live_rows(self.weight)
        amp = safe_sqrt(abs2(vis))
        num = amp[:, 0] * amp[:, 1]
        den = where_live(live, amp[:, 2] * amp[:, 3])
        return num / den - self.camp

    def residuals_from_vis(self, vis: Complex[Array, "n 4"]) -> Float[Array, " n"]:
        return jnp.sqrt(self.weight / self.n_rows) * self._diff(vis)

    def chi2_from_vis(self, vis: Complex[Array, "n 4"]) -> Scalar:
        d = self._diff(vis)
        return jnp.sum(self.weight * d * d) / self.n_rows
