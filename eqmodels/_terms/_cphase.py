"""Chi² of closure phases."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Complex, Float, Int, Scalar

from .._forward._base import AbstractForwardModel
from .._forward._select import ForwardLike
from .._grid import ImageGrid
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
)


class ClosurePhaseChi2(AbstractDataTerm):
    r"""Chi² of closure phases (eht-imaging's `'cphase'` term):

    `χ² = (2/N) Σ_k w_k (1 − cos(ψ_k − ψ̂_k))`, `ψ̂_k = arg(V̂_k1 V̂_k2 V̂_k3)`,
    `w_k = 1/σ_k²`,

    with `ψ` and `σ` in **radians**. The value is computed as
    `cos(ψ − ψ̂) = Re(B̂ e^{−iψ}) / |B̂|` (no arctangent). Residuals:
    `r_k = 2 sqrt(w_k/N) sin(Δ_k/2)`, `Δ_k = ψ_k − ψ̂_k` wrapped to `(−π, π]`
    (since `1 − cos Δ = 2 sin²(Δ/2)`). Where the model bispectrum is exactly 0 its
    phase is taken as 0 (numpy's `angle(0)`); rows of weight 0 contribute exactly 0.

    **Correlations** (`log_likelihood` only; the χ² and residuals above are
    eht-imaging's, independent, in either case): `covariance="independent"` (the
    default, as eht-imaging and Comrade) treats the closure phases as independent,
    each contributing `−(1 − cos Δ)/σ² − ln σ − ½ ln 2π`. `covariance="full"`
    uses their covariance through shared baselines: per timestamp, with `A` the
    closure design matrix (±1 per leg, the closures given, which must be linearly
    independent: `closures="min"`) and `σ_b = σ/|V|` each leg's linearised phase
    noise (`leg_sigma`), `Σ = A diag(σ_b²) Aᵀ + diag(σ_k² − Σ_legs σ_b²)` (the
    diagonal is the closure's own `σ_k²`; the excess, e.g. a systematic
    closure-phase noise, stays independent) and
    `ln L = Σ_t (−½ c_tᵀ Σ_t⁻¹ c_t − ½ ln det 2πΣ_t)` in the chords
    `c_k = 2 sin(Δ_k/2)` (Δ wrapped). `Σ_t` is fixed, so its whitening is
    computed at construction. With one closure per timestamp the two agree.
    """

    forward: AbstractForwardModel | None
    cphase: Float[Array, " n"]
    weight: Float[Array, " n"]
    n_rows: Int[Array, ""]
    stations: Int[Array, "n 3 2"]
    time_index: Int[Array, " n"]
    index_key: Int[Array, ""]
    closure_covariance: ClosureCovariance | None

    report_name = "cphase"
    reals_per_row = 1
    row_fields = ("cphase", "weight", "stations", "time_index")

    def __init__(
        self,
        forward: AbstractForwardModel,
        cphase: Float[ArrayLike, " n"],
        sigma: Float[ArrayLike, " n"],
        *,
        stations: ArrayLike | None = None,
        time_index: ArrayLike | None = None,
        index_key: int | ArrayLike | None = None,
        covariance: str = "independent",
        leg_sigma: Float[ArrayLike, "n 3"] | None = None,
    ):
        """**Arguments:**

        - `forward`: forward model at the legs' `(u, v)`, points of shape `(n, 3)`,
          the legs walked around each triangle (`u₁ + u₂ + u₃ = 0`; rows that do
          not close, most of them, are refused).
        - `cphase`: observed closure phases in radians, shape `(n,)`.
        - `sigma`: closure-phase noise in radians (> 0; a median above π is
          refused as degrees by mistake), shape `(n,)`.
        - `stations`: each leg's station pair (oriented as the leg is walked), and
          `time_index` each row's time slot (see [`eqmodels.VisChi2`][]); default
          unknown (`-1`).
        - `index_key`: the fingerprint of the tables that `time_index` and
          `stations` point into ([`eqmodels.VisData.index_key`][];
          `from_data` sets it, and [`eqmodels.GainCorrected`][] checks it
          against the gains'); default unknown (`-1`).
        - `covariance`: `"independent"` (default) or `"full"`, how
          `log_likelihood` treats the correlations between closure phases of one
          timestamp (see the class docs). `"full"` needs `stations`, `time_index`
          and `leg_sigma`, and linearly independent closures per timestamp.
        - `leg_sigma`: each leg's linearised phase noise `σ/|V|` in radians,
          shape `(n, 3)` (`eqmodels.closure_phases` products carry it as
          `leg_sigma`); used by `covariance="full"` only.
        """
        self.cphase, self.weight, self.n_rows = real_rows(
            forward, 3, "ClosurePhaseChi2", "cphase", cphase, sigma, radians=True
        )
        self.forward = forward
        self.stations, self.time_index = row_labels(
            stations, time_index, tuple(forward.u.shape)
        )
        self.index_key = index_key_leaf(index_key)
        if check_covariance(covariance) == "full":
            self.closure_covariance = closure_covariance(
                "ClosurePhaseChi2",
                u=forward.u,
                v=forward.v,
                legs=self.stations,
                time_index=self.time_index,
                weight=self.weight,
                leg_sigma=leg_sigma,
                leg_signs=None,
                dtype=self.cphase.dtype,
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
    ) -> "ClosurePhaseChi2":
        """The term for a [`eqmodels.ClosurePhaseProducts`][] (or anything with `u`,
        `v` of shape `(n, 3)`, `cphase`, `sigma`, in radians).

        **Arguments:**

        - `data`: the closure-phase products.
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
            "cphase",
            grid,
            forward,
            forward_kwargs,
            k=3,
            product="a `ClosurePhaseProducts` (from `eqmodels.closure_phases(data)`)",
            extra=dict(
                covariance=check_covariance(covariance),
                leg_sigma=getattr(data, "leg_sigma", None),
            ),
        )

    def _rotated(self, vis: Complex[Array, "n 3"]):
        """`(Re, Im)` of `B̂ e^{−iψ}` and `|B̂|²`, with dead or zero rows made safe."""
        if vis.dtype != jnp.complex128:
            # In float32 `|V₁V₂V₃|²`, the sixth power of the amplitudes, is
            # subnormal or 0 for a faint source (1e-5 Jy): each leg is scaled to a
            # largest component of 1 first (a positive scale: the phase is kept).
            scale = jnp.maximum(jnp.abs(jax.lax.real(vis)), jnp.abs(jax.lax.imag(vis)))
            vis = vis / jnp.where(scale > 0, scale, 1.0)
        b = vis[:, 0] * vis[:, 1] * vis[:, 2]
        bsq = abs2(b)
        # `!= 0`, not `> 0`: a NaN bispectrum stays NaN (not "exactly 0", phase 0).
        ok = live_rows(self.weight) & (bsq != 0)
        br = jnp.where(ok, jax.lax.real(b), 1.0)
        bi = jnp.where(ok, jax.lax.imag(b), 0.0)
        c, s = jnp.cos(self.cphase), jnp.sin(self.cphase)
        # Where B̂ = 0 the model phase is 0, so B̂ e^{-iψ} is replaced by e^{-iψ}.
        re = jnp.where(ok, br * c + bi * s, c)
        im = jnp.where(ok, bi * c - br * s, -s)
        return re, im, jnp.where(ok, br * br + bi * bi, 1.0)

    def residuals_from_vis(self, vis: Complex[Array, "n 3"]) -> Float[Array, " n"]:
        re, im, _ = self._rotated(vis)
        delta = -jnp.arctan2(im, re)  # ψ − ψ̂, wrapped
        return 2.0 * jnp.sqrt(self.weight / self.n_rows) * jnp.sin(0.5 * delta)

    def chi2_from_vis(self, vis: Complex[Array, "n 3"]) -> Scalar:
        re, im, bsq = self._rotated(vis)
        b = jnp.sqrt(bsq)
        if re.dtype == jnp.float64:
            one_minus_cos = 1.0 - re / b  # eht-imaging's form, to the last digit
        else:
            # `1 − cos Δ` cancels in float32 for small Δ (an error of eps/σ² per
            # row: 2 % of the χ² at σ = 0.05°); `im² / (|B| (|B| + re))` does not.
            front = re >= 0
            safe = jnp.where(front, b * (b + re), 1.0)
            one_minus_cos = jnp.where(front, im * im / safe, 1.0 - re / b)
        return 2.0 * jnp.sum(self.weight * one_minus_cos) / self.n_rows

    def log_likelihood_from_vis(self, vis: Complex[Array, "n 3"]) -> Scalar:
        """The Gaussian log-likelihood (see the class docs: independent closure
        phases, or their full covariance with `covariance="full"`).

        **Arguments:** `vis`, the model visibilities at the term's points.

        **Returns:** `ln L`, a scalar.
        """
        if self.closure_covariance is None:
            return super().log_likelihood_from_vis(vis)
        re, im, _ = self._rotated(vis)
        delta = -jnp.arctan2(im, re)  # ψ − ψ̂, wrapped
        return self.closure_covariance.log_likelihood(2.0 * jnp.sin(0.5 * delta))

    def take_rows(self, index, *, n_rows=None) -> "ClosurePhaseChi2":
        refuse_take(self, index)
        return super().take_rows(index, n_rows=n_rows)
