"""Chi² of log closure amplitudes."""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int, Scalar

from .._forward._base import AbstractForwardModel
from .._forward._select import ForwardLike
from .._grid import ImageGrid
from .._validation import is_concrete
from ._base import AbstractDataTerm
from ._closure_covariance import (
    check_covariance,
    closure_covariance,
    ClosureCovariance,
    refuse_take,
)
from ._common import (
    abs2,
    index_key_leaf,
    live_rows,
    real_rows,
    row_labels,
    term_from_data,
    where_live,
)


class LogClosureAmpChi2(AbstractDataTerm):
    r"""Chi² of log closure amplitudes (eht-imaging's `'logcamp'` term):

    `χ² = (1/N) Σ_k w_k (ln C_k − ln Ĉ_k)²`,
    `ln Ĉ_k = ln|V̂_k1| + ln|V̂_k2| − ln|V̂_k3| − ln|V̂_k4|`, `w_k = 1/σ_k²`,

    over quadrangles whose four legs' `(u, v)` are given (legs 1, 2 in the
    numerator, 3, 4 in the denominator). Residuals:
    `r_k = sqrt(w_k/N) (ln Ĉ_k − ln C_k)`. Rows of weight 0 contribute exactly 0
    (their legs are never passed to the logarithm).

    **Correlations** (`log_likelihood` only; the χ² and residuals above are
    eht-imaging's, independent, in either case): `covariance="independent"` (the
    default, as eht-imaging and Comrade) treats the log closure amplitudes as
    independent Gaussians of σ `σ_k`. `covariance="full"` uses their covariance
    through shared baselines: per timestamp, with `A` the closure design matrix
    (+1 for legs 1, 2, −1 for legs 3, 4; the closures given, which must be
    linearly independent: `closures="min"`) and `σ_b = σ/|V|` each leg's
    linearised log-amplitude noise (`leg_sigma`),
    `Σ = A diag(σ_b²) Aᵀ + diag(σ_k² − Σ_legs σ_b²)` (the diagonal is the
    closure's own `σ_k²`) and `ln L = Σ_t (−½ d_tᵀ Σ_t⁻¹ d_t − ½ ln det 2πΣ_t)`,
    `d = ln Ĉ − ln C`. `Σ_t` is fixed, so its whitening is computed at
    construction. With one closure per timestamp the two agree.
    """

    forward: AbstractForwardModel | None
    logcamp: Float[Array, " n"]
    weight: Float[Array, " n"]
    n_rows: Int[Array, ""]
    stations: Int[Array, "n 4 2"]
    time_index: Int[Array, " n"]
    index_key: Int[Array, ""]
    closure_covariance: ClosureCovariance | None

    report_name = "logcamp"
    reals_per_row = 1
    row_fields = ("logcamp", "weight", "stations", "time_index")

    def __init__(
        self,
        forward: AbstractForwardModel,
        logcamp: Float[ArrayLike, " n"],
        sigma: Float[ArrayLike, " n"],
        *,
        stations: ArrayLike | None = None,
        time_index: ArrayLike | None = None,
        index_key: int | ArrayLike | None = None,
        covariance: str = "independent",
        leg_sigma: Float[ArrayLike, "n 4"] | None = None,
    ):
        """**Arguments:**

        - `forward`: forward model at the legs' `(u, v)`, points of shape `(n, 4)`.
        - `logcamp`: observed (debiased) log closure amplitudes, shape `(n,)`.
        - `sigma`: their noise (> 0), shape `(n,)`.
        - `stations`: each leg's station pair (oriented as the leg is walked), and
          `time_index` each row's time slot (see [`eqmodels.VisChi2`][]); default
          unknown (`-1`).
        - `index_key`: the fingerprint of the tables that `time_index` and
          `stations` point into ([`eqmodels.VisData.index_key`][];
          `from_data` sets it, and [`eqmodels.GainCorrected`][] checks it
          against the gains'); default unknown (`-1`).
        - `covariance`: `"independent"` (default) or `"full"`, how
          `log_likelihood` treats the correlations between log closure amplitudes
          of one timestamp (see the class docs). `"full"` needs `stations`,
          `time_index` and `leg_sigma`, and linearly independent closures per
          timestamp.
        - `leg_sigma`: each leg's linearised log-amplitude noise `σ/|V|`, shape
          `(n, 4)` (`eqmodels.log_closure_amplitudes` products carry it as
          `leg_sigma`); used by `covariance="full"` only.
        """
        self.logcamp, self.weight, self.n_rows = real_rows(
            forward, 4, "LogClosureAmpChi2", "logcamp", logcamp, sigma
        )
        _refuse_linear(self.logcamp, self.weight)
        self.forward = forward
        self.stations, self.time_index = row_labels(
            stations, time_index, tuple(forward.u.shape)
        )
        self.index_key = index_key_leaf(index_key)
        if check_covariance(covariance) == "full":
            self.closure_covariance = closure_covariance(
                "LogClosureAmpChi2",
                u=forward.u,
                v=forward.v,
                legs=self.stations,
                time_index=self.time_index,
                weight=self.weight,
                leg_sigma=leg_sigma,
                leg_signs=(1.0, 1.0, -1.0, -1.0),
                dtype=self.logcamp.dtype,
            )
        else:
            self.closure_covariance = None

    @property
    def covariance(self) -> str:
        """`"full"` or `"independent"`: how `log_likelihood` treats the
        correlations between closures."""
        return "independent" if self.closure_covariance is None else "full"

    @classmethod
    def from_data(
        cls,
        data,
        grid: ImageGrid,
        *,
        forward: ForwardLike = "direct",
        covariance: str = "independent",
        **forward_kwargs,
    ) -> "LogClosureAmpChi2":
        """The term for a [`eqmodels.LogClosureAmpProducts`][] (or anything with `u`,
        `v` of shape `(n, 4)`, `logcamp`, `sigma`).

        **Arguments:**

        - `data`: the log closure amplitude products.
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`, a forward-model class
          or a callable `(grid, u, v) -> forward model` (see
          [`eqmodels.make_forward`][]).
        - `covariance`: `"independent"` (default) or `"full"` (see the class
          docs; uses the products' `leg_sigma`).
        - `**forward_kwargs`: options of the forward model (`pulse`, `eps`, `dtype`).
        """
        return term_from_data(
            cls,
            data,
            "logcamp",
            grid,
            forward,
            forward_kwargs,
            k=4,
            product="a `LogClosureAmpProducts` (from `eqmodels.log_closure_amplitudes(data)`)",
            extra=dict(
                covariance=check_covariance(covariance),
                leg_sigma=getattr(data, "leg_sigma", None),
            ),
        )

    def _diff(self, vis: Complex[Array, "n 4"]) -> Float[Array, " n"]:
        sq = where_live(live_rows(self.weight), abs2(vis))
        lsq = jnp.log(sq)  # 2 ln|V|
        model = 0.5 * ((lsq[:, 0] + lsq[:, 1]) - (lsq[:, 2] + lsq[:, 3]))
        return model - self.logcamp

    def residuals_from_vis(self, vis: Complex[Array, "n 4"]) -> Float[Array, " n"]:
        return jnp.sqrt(self.weight / self.n_rows) * self._diff(vis)

    def chi2_from_vis(self, vis: Complex[Array, "n 4"]) -> Scalar:
        d = self._diff(vis)
        return jnp.sum(self.weight * d * d) / self.n_rows

    def log_likelihood_from_vis(self, vis: Complex[Array, "n 4"]) -> Scalar:
        """The Gaussian log-likelihood (see the class docs: independent log
        closure amplitudes, or their full covariance with `covariance="full"`).

        **Arguments:** `vis`, the model visibilities at the term's points.

        **Returns:** `ln L`, a scalar.
        """
        if self.closure_covariance is None:
            return super().log_likelihood_from_vis(vis)
        return self.closure_covariance.log_likelihood(self._diff(vis))

    def take_rows(self, index, *, n_rows=None) -> "LogClosureAmpChi2":
        refuse_take(self, index)
        return super().take_rows(index, n_rows=n_rows)


# Rows from which all-positive values are taken for linear closure amplitudes:
# log closure amplitudes scatter about 0 (a quadrangle's ratio and its inverse),
# so a data set of this many with no value <= 0 is not one (chance: ~2⁻⁸).
_LINEAR_ROWS = 8


def _refuse_linear(logcamp, weight) -> None:
    """Refuse (concrete) closure amplitudes given where their logarithms are
    expected: every live value > 0, over enough rows."""
    if not (is_concrete(logcamp) and is_concrete(weight)):
        return
    values = np.asarray(logcamp)[np.asarray(weight) > 0]
    if values.size >= _LINEAR_ROWS and np.all(values > 0):
        raise ValueError(
            f"`logcamp` has no value <= 0 in {values.size} rows (median "
            f"{float(np.median(values)):.3g}): these look like linear closure "
            "amplitudes, whose logarithms scatter about 0. Give their logarithms "
            "(`eqmodels.log_closure_amplitudes(data)`, or `np.log(camp)` with "
            "`sigma / camp`), or use `ClosureAmpChi2` for linear ones."
        )
