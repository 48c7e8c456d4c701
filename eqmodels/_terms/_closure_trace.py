"""Chi² of closure traces (Broderick & Pesce 2020), a polarimetric term."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int, Scalar

from .._coherency import (
    adjugate,
    det,
    matmul,
    stokes_to_coherency,
)
from .._data._closure_traces import closure_traces, ClosureTraceProducts
from .._forward._base import AbstractForwardModel
from .._forward._select import ForwardLike, make_forward
from .._grid import ImageGrid
from .._numerics import asarray
from .._validation import as_complex
from ._base import AbstractDataTerm, n_rows_leaf
from ._common import (
    abs2,
    check_forward,
    check_vis_shape,
    index_key_leaf,
    live_rows,
    row_labels,
    values_dtype,
    weight_from_sigma,
)


class ClosureTraceChi2(AbstractDataTerm):
    r"""Chi² of complex closure traces (Broderick & Pesce 2020), or of conjugate
    closure trace products:

    `χ² = Σ_k w_k |𝒯̂_k − 𝒯_k|² / (2N)`, `w_k = 1/σ_k²` (σ per real and
    imaginary part), `N` = number of quadrangles,

    `𝒯_abcd = ½ tr(C_ab C_cb⁻¹ C_cd C_ad⁻¹)` (`kind="trace"`) or
    `𝒮_abcd = 𝒯_abcd 𝒯_adcb` (`kind="product"`), the model coherencies
    `C = [[I + V, Q + iU], [Q − iU, I − V]]` of the Stokes visibilities at the
    four legs' points (`(n, 4)`, each leg oriented as walked: `a→b`, `c→b`,
    `c→d`, `a→d`). Closure traces are invariant to every station-based Jones
    matrix (gains, leakage, field rotation, feed basis), so the term needs no
    calibration model. A polarimetric term: inside an
    [`eqmodels.Objective`][] its legs are served by the shared batched Stokes
    transform. Rows of weight 0 contribute exactly 0 (their legs are replaced
    by identity matrices before inverting).

    `log_likelihood` treats the rows as **independent** (eht-imaging's and
    Comrade's default), ignoring the covariance of closures on shared baselines;
    `ClosurePhaseChi2` and `LogClosureAmpChi2` offer it (`covariance="full"`).
    """

    forward: AbstractForwardModel | None
    values: Complex[Array, " n"]
    weight: Float[Array, " n"]
    n_rows: Int[Array, ""]
    stations: Int[Array, "n 4 2"]
    time_index: Int[Array, " n"]
    index_key: Int[Array, ""]
    kind: str = eqx.field(static=True)

    polarimetric = True
    report_name = "ctrace"
    reals_per_row = 2
    row_fields = ("values", "weight", "stations", "time_index")

    def __init__(
        self,
        forward: AbstractForwardModel,
        values: Complex[ArrayLike, " n"],
        sigma: Float[ArrayLike, " n"],
        *,
        kind: str = "trace",
        stations: ArrayLike | None = None,
        time_index: ArrayLike | None = None,
        index_key: int | ArrayLike | None = None,
    ):
        """**Arguments:**

        - `forward`: forward model at the legs' `(u, v)`, points `(n, 4)`, each
          leg oriented as walked (`a→b`, `c→b`, `c→d`, `a→d`).
        - `values`: observed closure traces (or products), complex, `(n,)`.
        - `sigma`: their noise per real and imaginary part (> 0), `(n,)`.
        - `kind`: `"trace"` or `"product"` (conjugate closure trace products).
        - `stations`, `time_index`, `index_key`: as [`eqmodels.ClosureAmpChi2`][].
        """
        if kind not in ("trace", "product"):
            raise ValueError(f"`kind` must be 'trace' or 'product', got {kind!r}.")
        check_forward(forward, 4, "ClosureTraceChi2")
        n = forward.u.shape[0]
        dtype, ctype = values_dtype(forward)
        values = as_complex("values", values)
        if np.shape(values) != (n,):
            raise ValueError(
                f"`values` has shape {np.shape(values)} but `forward` has {n} rows "
                "(quadrangles): one closure trace per row."
            )
        self.forward = forward
        self.values = asarray(values, ctype)
        self.weight = weight_from_sigma(sigma, n, dtype)
        self.n_rows = n_rows_leaf(int(n))
        self.stations, self.time_index = row_labels(
            stations, time_index, tuple(forward.u.shape)
        )
        self.index_key = index_key_leaf(index_key)
        self.kind = kind

    @classmethod
    def from_data(
        cls,
        data,
        grid: ImageGrid,
        *,
        forward: ForwardLike = "direct",
        kind: str = "trace",
        **forward_kwargs,
    ) -> "ClosureTraceChi2":
        """The term for a polarimetric data set (`PolVisData`, or anything with
        `u`, `v`, `correlations()`, `ant1`, `ant2`, `time_index`), its closure
        traces computed by [`eqmodels.closure_traces`][] (every quadrangle at
        every time); or for [`eqmodels.ClosureTraceProducts`][] directly.

        **Arguments:**

        - `data`: the polarimetric data (e.g. scan-averaged), or closure trace
          products.
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`, a forward-model class
          or a callable (see [`eqmodels.make_forward`][]).
        - `kind`: `"trace"` or `"product"` (ignored for products, which carry
          their kind).
        - `**forward_kwargs`: options of the forward model.
        """
        if not isinstance(data, ClosureTraceProducts):
            if not callable(getattr(data, "correlations", None)):
                raise TypeError(
                    "`data` must be a polarimetric data set (`load_uvfits(path, "
                    "polarization='full')`) or `ClosureTraceProducts`, got "
                    f"{type(data).__name__}, which has no `correlations()`."
                )
            corr, sigma = data.correlations()
            flag = getattr(data, "flag", None)
            data = closure_traces(
                corr,
                sigma,
                data.ant1,
                data.ant2,
                data.time_index,
                u=data.u,
                v=data.v,
                flag=None if flag is None else np.asarray(flag, bool),
                kind=kind,
                index_key=int(getattr(data, "index_key", -1)),
            )
        if len(data) == 0:
            raise ValueError(
                "the data have no closure traces (no four stations with all six "
                "baselines' correlations at one time)."
            )
        if not np.all(np.isfinite(np.asarray(data.u))):
            raise ValueError(
                "the closure traces carry no (u, v): compute them with "
                "`closure_traces(..., u=data.u, v=data.v)`."
            )
        fwd = make_forward(forward, grid, data.u, data.v, **forward_kwargs)
        return cls(
            fwd,
            data.values,
            data.sigma,
            kind=data.kind,
            stations=data.legs,
            time_index=data.time_index,
            index_key=data.index_key,
        )

    def model_values(self, vis: Complex[Array, "n 4 4"]) -> Complex[Array, " n"]:
        """The model closure traces (or products) of the legs' Stokes
        visibilities `(n, 4 legs, 4 Stokes)`."""
        c = stokes_to_coherency(vis)  # (n, 4, 2, 2)
        live = live_rows(self.weight)[:, None, None, None]
        eye = jnp.eye(2, dtype=c.dtype)
        c = jnp.where(live, c, eye)
        a, b, cc, d = (c[:, k] for k in range(4))
        db, dd = det(b), det(d)
        adj_b, adj_d = adjugate(b), adjugate(d)
        # ½ tr(A B⁻¹ C D⁻¹) = ½ tr(A adj(B) C adj(D)) / (det B det D).
        t1 = _half_trace(matmul(matmul(a, adj_b), matmul(cc, adj_d))) / (db * dd)
        if self.kind == "trace":
            return t1
        dc, da = det(cc), det(a)
        adj_c, adj_a = adjugate(cc), adjugate(a)
        t2 = _half_trace(matmul(matmul(d, adj_c), matmul(b, adj_a))) / (dc * da)
        return t1 * t2

    def residuals_from_vis(self, vis: Complex[Array, "n 4 4"]) -> Float[Array, " m"]:
        check_vis_shape(self, vis, (*self.stations.shape[:2], 4))
        diff = self.model_values(vis) - self.values
        s = jnp.sqrt(self.weight / (2 * self.n_rows))
        return jnp.concatenate([s * diff.real, s * diff.imag])

    def chi2_from_vis(self, vis: Complex[Array, "n 4 4"]) -> Scalar:
        check_vis_shape(self, vis, (*self.stations.shape[:2], 4))
        diff = self.model_values(vis) - self.values
        return jnp.sum(self.weight * abs2(diff)) / (2 * self.n_rows)


def _half_trace(m):
    return 0.5 * (m[..., 0, 0] + m[..., 1, 1])
