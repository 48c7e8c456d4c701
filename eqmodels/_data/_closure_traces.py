"""Closure traces and conjugate closure trace products (Broderick & Pesce 2020,
ApJ 902, 139): complex quantities of the four correlations on quadrangles that
no station-based Jones matrix changes (gains, leakage, field rotation, feed
basis).

For a quadrangle `(a, b, c, d)` at one time, with the 2×2 coherency matrices
`C_xy = [[RR, RL], [LR, LL]]` of the legs (`C_yx = C_xyᴴ`),

`𝒯_abcd = ½ tr(C_ab C_cb⁻¹ C_cd C_ad⁻¹)`;

under `C_xy → J_x C_xy J_yᴴ` the product inside the trace becomes
`J_a (…) J_a⁻¹`, so the trace is unchanged. The *conjugate* quadrangle
`(a, d, c, b)` walks the same four baselines the other way; the product
`𝒮_abcd = 𝒯_abcd 𝒯_adcb` is 1 for an unpolarized source (whatever its Stokes I
structure) and probes only the fractional polarization.
"""

import itertools

import equinox as eqx
import numpy as np
from jaxtyping import ArrayLike, Complex, Float, Int


#: The six classes of orderings of a quartet `p < q < r < s`: `𝒯_abcd` equals
#: `𝒯_cdab` (cyclic trace) and `conj 𝒯_badc` (`C_yx = C_xyᴴ`), which leaves six
#: values per quartet, three conjugate pairs `(a, b, c, d) ↔ (a, d, c, b)`.
_ORDERS = (
    (0, 1, 2, 3),
    (0, 3, 2, 1),
    (0, 1, 3, 2),
    (0, 2, 3, 1),
    (0, 2, 1, 3),
    (0, 3, 1, 2),
)


class ClosureTraceProducts(eqx.Module):
    """Closure traces (or conjugate closure trace products) of a polarimetric
    data set, one per quadrangle and time: what
    [`eqmodels.ClosureTraceChi2`][] fits.

    - `u`, `v` `(m, 4)`: the legs' points, each oriented as the leg is walked
      (`a→b`, `c→b`, `c→d`, `a→d`; a leg stored the other way round in the data
      has its `(u, v)` negated); NaN when the data gave none;
    - `values` `(m,)` complex: `𝒯_abcd` (`kind="trace"`) or
      `𝒮_abcd = 𝒯_abcd 𝒯_adcb` (`kind="product"`);
    - `sigma` `(m,)`: the noise of the real and imaginary parts each (linear
      error propagation, see [`eqmodels.closure_traces`][]);
    - `quadrangle` `(m, 4)`: the stations `(a, b, c, d)`; `legs` `(m, 4, 2)`:
      each leg's oriented station pair; `rows` `(m, 4)`: the data rows of the
      legs; `time_index` `(m,)`; `conjugate` `(m,)`: the index of the conjugate
      quadrangle's entry (`kind="trace"`; −1 where it was dropped);
    - `index_key`: the data set's fingerprint (−1 unknown).

    The arrays are numpy (host data, like a data set's).
    """

    u: Float[np.ndarray, "m 4"]
    v: Float[np.ndarray, "m 4"]
    values: Complex[np.ndarray, " m"]
    sigma: Float[np.ndarray, " m"]
    quadrangle: Int[np.ndarray, "m 4"]
    legs: Int[np.ndarray, "m 4 2"]
    rows: Int[np.ndarray, "m 4"]
    time_index: Int[np.ndarray, " m"]
    conjugate: Int[np.ndarray, " m"]
    kind: str = eqx.field(static=True, default="trace")
    index_key: int = eqx.field(static=True, default=-1)

    def __len__(self) -> int:
        return int(np.shape(self.values)[0])


def _coherency(corr: np.ndarray) -> np.ndarray:
    """`(..., 4)` correlations (RR, LL, RL, LR) → `(..., 2, 2)` coherency."""
    out = np.empty(corr.shape[:-1] + (2, 2), complex)
    out[..., 0, 0], out[..., 1, 1] = corr[..., 0], corr[..., 1]
    out[..., 0, 1], out[..., 1, 0] = corr[..., 2], corr[..., 3]
    return out


def _inv(m: np.ndarray) -> np.ndarray:
    det = m[..., 0, 0] * m[..., 1, 1] - m[..., 0, 1] * m[..., 1, 0]
    adj = np.empty_like(m)
    adj[..., 0, 0], adj[..., 1, 1] = m[..., 1, 1], m[..., 0, 0]
    adj[..., 0, 1], adj[..., 1, 0] = -m[..., 0, 1], -m[..., 1, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        return adj / det[..., None, None]


def trace_and_gradients(c: np.ndarray):
    """`𝒯 = ½ tr(A B⁻¹ C D⁻¹)` of legs `c` `(m, 4, 2, 2)` (A, B, C, D the oriented
    legs) and `∂𝒯/∂leg_ij` `(m, 4, 2, 2)` (holomorphic derivatives)."""
    a, b, cc, d = (c[:, k] for k in range(4))
    bi, di = _inv(b), _inv(d)
    t = 0.5 * np.trace(a @ bi @ cc @ di, axis1=-2, axis2=-1)
    sw = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731  ∂tr(X M)/∂X_ij = M_ji
    grads = np.stack(
        [
            0.5 * sw(bi @ cc @ di),
            -0.5 * sw(bi @ cc @ di @ a @ bi),
            0.5 * sw(di @ a @ bi),
            -0.5 * sw(di @ a @ bi @ cc @ di),
        ],
        axis=1,
    )
    return t, grads


def closure_traces(
    corr: ArrayLike,
    sigma: ArrayLike,
    ant1: ArrayLike,
    ant2: ArrayLike,
    time_index: ArrayLike,
    *,
    u: ArrayLike | None = None,
    v: ArrayLike | None = None,
    flag: ArrayLike | None = None,
    kind: str = "trace",
    index_key: int = -1,
) -> ClosureTraceProducts:
    r"""Closure traces (`kind="trace"`) or conjugate closure trace products
    (`kind="product"`) of the four correlations of a data set, for **every**
    quadrangle at every time: per set of four stations with all six baselines'
    correlations present at that time, the six closure traces that differ
    (`𝒯_abcd = 𝒯_cdab` and `𝒯_badc = conj 𝒯_abcd` leave six orderings of a
    quartet: with `p < q < r < s`, `(p, q, r, s)`, `(p, s, r, q)`,
    `(p, q, s, r)`, `(p, r, s, q)`, `(p, r, q, s)`, `(p, s, q, r)`, three
    conjugate pairs), or the three products `𝒯_abcd 𝒯_adcb` of the conjugate
    pairs (the first quadrangle of each pair above). These are not independent
    (a quartet's independent information is fewer numbers, and quartets share
    baselines): the χ² of all of them over-counts the data, as eht-imaging's
    `'all'` closure sets do; weigh the term accordingly.

    A quadrangle needs all four correlations of its four legs (a flagged
    correlation drops it); the legs are `a→b`, `c→b`, `c→d`, `a→d`, a leg
    stored as `y→x` in the data taken as `C_xy = C_yxᴴ` (`RR*`, `LL*`, `LR*`,
    `RL*`) with `(u, v)` negated. Quadrangles whose legs are singular (`det = 0`)
    or whose value is not finite are dropped.

    **Noise.** Linear error propagation of independent complex noise on each
    correlation (σ per real and imaginary part): `𝒯` is holomorphic in the
    correlations, so `σ_𝒯² = Σ_k |∂𝒯/∂C_k|² σ_k²` over the sixteen
    correlations (`∂𝒯/∂A = ½ (B⁻¹ C D⁻¹)ᵀ`,
    `∂𝒯/∂B = −½ (B⁻¹ C D⁻¹ A B⁻¹)ᵀ`, `∂𝒯/∂C = ½ (D⁻¹ A B⁻¹)ᵀ`,
    `∂𝒯/∂D = −½ (D⁻¹ A B⁻¹ C D⁻¹)ᵀ`), the same for each part; for a product,
    `∂𝒮 = 𝒯_adcb ∂𝒯_abcd + 𝒯_abcd ∂𝒯_adcb`. Valid at high signal-to-noise of
    the correlations (the traces are ratios: at low S/N their noise is neither
    Gaussian nor small).

    **Arguments:**

    - `corr`, `sigma`: the correlations `(n, 4)` in the file's order (RR, LL,
      RL, LR; or XX, YY, XY, YX: the traces do not depend on the feed basis) and
      their σ (NaN where missing), e.g. `data.correlations()`.
    - `ant1`, `ant2`: each row's stations; `time_index`: each row's time slot.
    - `u`, `v`: each row's `(u, v)` (for a term; default NaN).
    - `flag`: True where a correlation is missing (default: where `corr` or
      `sigma` is not finite).
    - `kind`: `"trace"` or `"product"`.
    - `index_key`: the data set's fingerprint, carried to the products.

    **Returns:** a [`eqmodels.ClosureTraceProducts`][].
    """
    if kind not in ("trace", "product"):
        raise ValueError(f"`kind` must be 'trace' or 'product', got {kind!r}.")
    corr = np.asarray(corr)
    sigma = np.asarray(sigma, np.float64)
    n = corr.shape[0] if corr.ndim else 0
    if corr.ndim != 2 or corr.shape[1] != 4 or sigma.shape != corr.shape:
        raise ValueError(
            "`corr` and `sigma` must both have shape (n, 4) (the four correlations "
            f"of each row), got {corr.shape} and {sigma.shape}."
        )
    a1, a2, ti = (np.asarray(x) for x in (ant1, ant2, time_index))
    for name, x in (("ant1", a1), ("ant2", a2), ("time_index", ti)):
        if x.shape != (n,) or (x.size and not np.issubdtype(x.dtype, np.integer)):
            raise ValueError(
                f"`{name}` must be integers of shape ({n},), got {x.dtype} {x.shape}."
            )
    if np.any(a1 == a2):
        raise ValueError("`ant1` and `ant2` must differ (no autocorrelations).")
    uu = np.full(n, np.nan) if u is None else np.asarray(u, np.float64)
    vv = np.full(n, np.nan) if v is None else np.asarray(v, np.float64)
    if uu.shape != (n,) or vv.shape != (n,):
        raise ValueError(f"`u` and `v` must have shape ({n},).")
    if flag is None:
        flag = ~(np.isfinite(corr) & np.isfinite(sigma))
    flag = np.asarray(flag, bool)
    if flag.shape != (n, 4):
        raise ValueError(f"`flag` must have shape ({n}, 4), got {flag.shape}.")
    if np.any(~flag & ~(sigma > 0)):
        raise ValueError("`sigma` must be > 0 where a correlation is present.")
    usable = ~flag.any(axis=1)

    # Per time slot: baseline (min, max) → row.
    quads, rows = [], []
    order = np.argsort(ti, kind="stable")
    bounds = np.flatnonzero(np.diff(ti[order])) + 1
    for group in np.split(order, bounds):
        table: dict[tuple[int, int], int] = {}
        for r in group:
            key = (int(min(a1[r], a2[r])), int(max(a1[r], a2[r])))
            if key in table:
                raise ValueError(
                    f"time slot {int(ti[r])} has two rows of baseline {key}: "
                    "closure traces take one row per baseline and time (select one "
                    "band, or average the data first)."
                )
            table[key] = int(r)
        table = {k: r for k, r in table.items() if usable[r]}
        if len(table) < 6:
            continue
        sts = sorted({s for k in table for s in k})
        for quartet in itertools.combinations(sts, 4):
            if not all(k in table for k in itertools.combinations(quartet, 2)):
                continue
            for o in _ORDERS:
                a, b, c, d = (quartet[i] for i in o)
                quads.append((a, b, c, d))
                legs = ((a, b), (c, b), (c, d), (a, d))
                rows.append([table[(min(x, y), max(x, y))] for x, y in legs])
    quad = np.asarray(quads, np.int64).reshape(-1, 4)
    rows_a = np.asarray(rows, np.int64).reshape(-1, 4)
    legs = np.stack(
        [quad[:, [0, 1]], quad[:, [2, 1]], quad[:, [2, 3]], quad[:, [0, 3]]], axis=1
    )
    flip = a1[rows_a] != legs[..., 0]  # stored y→x
    c = _coherency(corr[rows_a])
    c = np.where(flip[..., None, None], np.conj(np.swapaxes(c, -1, -2)), c)
    s = _coherency(sigma[rows_a].astype(complex)).real
    s = np.where(flip[..., None, None], np.swapaxes(s, -1, -2), s)
    t, g = trace_and_gradients(c)
    # Conjugate quadrangles sit in consecutive pairs (_ORDERS).
    m = t.size
    partner = np.arange(m) ^ 1
    if kind == "product":
        tc = t[partner]
        # The conjugate's legs are A' = D, B' = C, C' = B, D' = A.
        gc = g[partner][:, ::-1]
        g = tc[:, None, None, None] * g + t[:, None, None, None] * gc
        t = t * tc
        keep_pair = np.arange(m) % 2 == 0
    else:
        keep_pair = np.ones(m, bool)
    sig = np.sqrt(np.sum(np.abs(g) ** 2 * s**2, axis=(1, 2, 3)))
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(t) & np.isfinite(sig) & (sig > 0)
    if kind == "product":
        ok &= ok[partner]  # both traces finite
    keep = keep_pair & ok
    sign = np.where(flip, -1.0, 1.0)
    new_index = np.cumsum(keep) - 1
    conj = np.where(keep[partner], new_index[partner], -1)
    if kind == "product":
        conj = np.full(m, -1)
    return ClosureTraceProducts(
        u=np.asarray(sign * uu[rows_a])[keep],
        v=np.asarray(sign * vv[rows_a])[keep],
        values=t[keep],
        sigma=sig[keep],
        quadrangle=quad[keep],
        legs=legs[keep],
        rows=rows_a[keep],
        time_index=ti[rows_a[:, 0]][keep] if m else np.zeros(0, np.int64),
        conjugate=conj[keep],
        kind=kind,
        index_key=int(index_key),
    )
