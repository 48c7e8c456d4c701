"""Chi² of the four correlations of each row (RR, LL, RL, LR; XX, YY, XY, YX)."""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Complex, Float, Int, Scalar

from .._coherency import FEEDS, stokes_to_correlations
from .._forward._base import AbstractForwardModel
from .._forward._select import ForwardLike, make_forward
from .._grid import ImageGrid
from .._numerics import asarray
from .._validation import is_concrete
from ._base import AbstractDataTerm, n_rows_leaf
from ._common import (
    abs2,
    check_forward,
    check_vis_shape,
    index_key_leaf,
    inverse_variance,
    row_labels,
    values_dtype,
)


class CorrelationChi2(AbstractDataTerm):
    r"""Chi² of the four correlations of each row, a polarimetric term:

    `χ² = Σ_{k,p} w_kp |Ĉ_kp − C_kp|² / (2N)`, `w_kp = 1/σ_kp²`,

    over rows `k` and correlations `p` (RR, LL, RL, LR in the file's order; XX,
    YY, XY, YX for linear feeds), `N` the number of correlations present (a
    flagged one has weight 0). The model correlations `Ĉ` come from the Stokes
    visibilities of the row's `(u, v)`: `RR = I + V`, `LL = I − V`,
    `RL = Q + iU`, `LR = Q − iU` for two circular stations, `T_a C T_bᴴ` with
    the feed-basis matrix `T` where a station has linear feeds (mixed baselines
    work: each row knows its stations' feeds).

    The term for fitting station Jones matrices (D-terms, R/L gains) with the
    image: wrap it, `em.JonesCorrected(term, jones)`. Residuals:
    `sqrt(w/(2N))·(Re, Im)` of `Ĉ − C`.
    """

    forward: AbstractForwardModel | None
    corr: Complex[Array, "n 4"]
    weight: Float[Array, "n 4"]
    n_rows: Int[Array, ""]
    stations: Int[Array, "n 2"]
    time_index: Int[Array, " n"]
    linear: Bool[Array, "n 2"]
    index_key: Int[Array, ""]

    polarimetric = True
    report_name = "corr"
    reals_per_row = 2
    row_fields = ("corr", "weight", "stations", "time_index", "linear")

    def __init__(
        self,
        forward: AbstractForwardModel,
        corr: ArrayLike,
        sigma: ArrayLike,
        *,
        flag: ArrayLike | None = None,
        feeds: ArrayLike | None = None,
        stations: ArrayLike | None = None,
        time_index: ArrayLike | None = None,
        index_key: int | ArrayLike | None = None,
    ):
        """**Arguments:**

        - `forward`: the forward model at the rows' `(u, v)`, points `(n,)`.
        - `corr`: the observed correlations (Jy), `(n, 4)` in the file's order;
          NaN where missing.
        - `sigma`: their noise per real and imaginary part (Jy, > 0), `(n, 4)`;
          NaN where missing.
        - `flag`: True where a correlation is missing (weight 0); default: where
          `corr` is not finite.
        - `feeds`: each row's feeds `(n, 2)` (for ant1, ant2): `"circular"` /
          `"linear"` strings or booleans (True: linear); default all circular.
        - `stations`, `time_index`, `index_key`: as [`eqmodels.VisChi2`][]
          (needed by [`eqmodels.JonesCorrected`][]).
        """
        check_forward(forward, None, "CorrelationChi2")
        n = forward.u.shape[0]
        dtype, ctype = values_dtype(forward)
        if not (is_concrete(corr) and is_concrete(sigma)):
            raise TypeError(
                "`corr` and `sigma` must be concrete (build the term outside `jit`)."
            )
        corr = np.asarray(corr)
        sigma = np.asarray(sigma)
        if np.iscomplexobj(sigma) or not np.issubdtype(sigma.dtype, np.number):
            raise TypeError(f"`sigma` must be real, got dtype {sigma.dtype}.")
        for name, x in (("corr", corr), ("sigma", sigma)):
            if x.shape != (n, 4):
                raise ValueError(
                    f"`{name}` has shape {x.shape} but CorrelationChi2 needs "
                    f"({n}, 4): the four correlations (RR, LL, RL, LR) of each of "
                    "the forward model's rows."
                )
        if flag is None:
            flag = ~np.isfinite(corr)
        else:
            flag = np.asarray(flag)
            if flag.shape != (n, 4) or flag.dtype != np.bool_:
                raise ValueError(
                    f"`flag` must be a boolean array of shape ({n}, 4), got "
                    f"{flag.dtype} {flag.shape}."
                )
        bad = ~flag & ~np.isfinite(corr)
        if bad.any():
            raise ValueError(
                f"`corr` has {int(bad.sum())} non-finite unflagged value(s): flag "
                "them (`flag=`), or leave `flag` unset to flag every NaN."
            )
        if flag.all():
            raise ValueError("every correlation is flagged: the term has no data.")
        live_sigma = np.where(flag, 1.0, sigma)
        weight = inverse_variance(np.asarray(live_sigma, np.float64), dtype)
        weight = np.where(flag, 0.0, np.asarray(weight))
        self.forward = forward
        self.corr = asarray(np.where(flag, 0.0, corr), ctype)
        self.weight = asarray(weight, dtype)
        self.n_rows = n_rows_leaf(int((~flag).sum()))
        self.stations, self.time_index = row_labels(stations, time_index, (n,))
        self.linear = asarray(_linear_feeds(feeds, n), bool)
        self.index_key = index_key_leaf(index_key)

    @classmethod
    def from_data(
        cls, data, grid: ImageGrid, *, forward: ForwardLike = "direct", **forward_kwargs
    ) -> "CorrelationChi2":
        """The term for a polarimetric data set (`PolVisData`, or anything with
        `u`, `v`, `correlations()`, `ant1`, `ant2`, `time_index`; `feeds` per
        station and `flag` `(n, 4)` when it has them).

        **Arguments:**

        - `data`: the polarimetric data (e.g. scan-averaged).
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`, a forward-model class
          or a callable (see [`eqmodels.make_forward`][]).
        - `**forward_kwargs`: options of the forward model.
        """
        if not callable(getattr(data, "correlations", None)):
            raise TypeError(
                "`data` must be a polarimetric data set for "
                "`CorrelationChi2.from_data` (`load_uvfits(path, "
                f"polarization='full')`), got {type(data).__name__}, which has no "
                "`correlations()`."
            )
        corr, sigma = data.correlations()
        fwd = make_forward(forward, grid, data.u, data.v, **forward_kwargs)
        a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
        feeds = getattr(data, "feeds", None)
        row_feeds = None
        if feeds is not None:
            f = np.asarray([x == "linear" for x in feeds])
            row_feeds = np.stack([f[a1], f[a2]], axis=1)
        flag = getattr(data, "flag", None)
        return cls(
            fwd,
            corr,
            sigma,
            flag=None if flag is None else np.asarray(flag, bool),
            feeds=row_feeds,
            stations=np.stack([a1, a2], axis=1),
            time_index=getattr(data, "time_index", None),
            index_key=getattr(data, "index_key", None),
        )

    def model_correlations(self, vis: Complex[Array, "n 4"]) -> Complex[Array, "n 4"]:
        """The model correlations (file order) of Stokes visibilities `(n, 4)`."""
        return stokes_to_correlations(vis, self.linear)

    def residuals_from_vis(self, vis: Complex[Array, "n 4"]) -> Float[Array, " m"]:
        check_vis_shape(self, vis, self.corr.shape)
        d = self.model_correlations(vis) - self.corr
        s = jnp.sqrt(self.weight / (2 * self.n_rows))
        return jnp.concatenate([(s * d.real).reshape(-1), (s * d.imag).reshape(-1)])

    def chi2_from_vis(self, vis: Complex[Array, "n 4"]) -> Scalar:
        check_vis_shape(self, vis, self.corr.shape)
        d = self.model_correlations(vis) - self.corr
        return jnp.sum(self.weight * abs2(d)) / (2 * self.n_rows)


def _linear_feeds(feeds, n: int) -> np.ndarray:
    """`(n, 2)` booleans (True: linear) from strings or booleans."""
    if feeds is None:
        return np.zeros((n, 2), bool)
    arr = np.asarray(feeds)
    if arr.shape != (n, 2):
        raise ValueError(
            f"`feeds` must give each row's two feeds, shape ({n}, 2), got {arr.shape}."
        )
    if arr.dtype == np.bool_:
        return arr
    if arr.dtype.kind in "US":
        unknown = sorted(set(arr.reshape(-1).tolist()) - set(FEEDS))
        if unknown:
            raise ValueError(f"`feeds` must be {FEEDS}, got {unknown}.")
        return arr == "linear"
    raise TypeError(
        f"`feeds` must be 'circular' / 'linear' strings or booleans, got {arr.dtype}."
    )
