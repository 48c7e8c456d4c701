"""Helpers shared by the data terms (visibility, amplitude, closure).

NaN safety: a row of weight exactly 0 (padding) must contribute exactly 0 to the
value and to the gradient, whatever its model visibilities (even 0, where `|V|`,
`ln|V|` and `arg V` have no derivative). The helpers below (and `safe_sqrt` in
`eqmodels._numerics`) use the "double where" pattern: the unsafe operation only ever sees safe inputs, and the branch that is
not taken gets a zero cotangent.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Complex, Float, Int

from .._forward._base import AbstractForwardModel
from .._forward._select import ForwardLike, make_forward
from .._grid import ImageGrid
from .._numerics import asarray
from .._validation import as_real, check_nonempty, check_positive, is_concrete
from ._base import n_rows_leaf


def check_forward_type(forward, term: str) -> None:
    """`forward` is a forward model."""
    if not isinstance(forward, AbstractForwardModel):
        raise TypeError(
            f"`forward` must be a forward model (`DirectFT`, `SeparableFT`, `NUFFT`), "
            f"got {type(forward).__name__}; or build the term with "
            f"`{term}.from_data(data, grid, forward='direct')`."
        )


def check_forward(forward, k: int | None, term: str) -> None:
    """`forward` is a forward model whose points are `(n,)` (k None) or `(n, k)`."""
    check_forward_type(forward, term)
    shape = tuple(forward.u.shape)
    want = "(n,)" if k is None else f"(n, {k})"
    ok = len(shape) == 1 if k is None else (len(shape) == 2 and shape[1] == k)
    if not ok:
        raise ValueError(
            f"`forward` has points of shape {shape} but {term} needs {want}: one "
            + ("point per row." if k is None else f"point per leg, {k} legs per row.")
        )
    if k == 3:
        check_closed(forward, term)


# Open-triangle limits, as fractions of a row's longest leg. Real averaged data
# close to within 2.2e-2 (scan averages of the 15 public EHT files) and 0.19
# (averages over 2 h): a median beyond 0.1 is the systematic mistake (a leg stored
# the other way round in every row), a single row beyond 0.5 a leg flipped there.
_OPEN_MEDIAN = 0.1
_OPEN_ROW = 0.5


def check_closed(forward, term: str) -> None:
    """The legs of a triangle term close (`u₁ + u₂ + u₃ = 0`, the legs walked
    around the triangle). Averaged data close to within a few percent of the longest
    leg per row (2.2e-2 for scan averages of the public EHT files, 0.19 for averages
    over 2 h); a leg stored the other way round opens its row by twice that leg:
    refused where the median row is open by more than a tenth of its longest leg
    (the mistake made in every row) or any row by more than half of it. Concrete
    points held by this process only (no collective at construction)."""
    for x in (forward.u, forward.v):
        if not is_concrete(x) or (
            isinstance(x, jax.Array) and not x.is_fully_addressable
        ):
            return
    u, v = np.asarray(forward.u, np.float64), np.asarray(forward.v, np.float64)
    longest = np.sqrt(u**2 + v**2).max(axis=1, initial=0.0)
    rows = longest > 0  # padded rows sit at (0, 0)
    if not rows.any():
        return
    gap = np.hypot(u.sum(axis=1), v.sum(axis=1))[rows] / longest[rows]
    if np.median(gap) > _OPEN_MEDIAN:
        open_rows = gap > _OPEN_MEDIAN
        what = f"the legs of {int(open_rows.sum())} of {gap.size} triangles"
    elif gap.max() > _OPEN_ROW:
        open_rows = gap > _OPEN_ROW
        what = (
            f"the legs of {int(open_rows.sum())} of {gap.size} triangles (averaged "
            "data close to a few percent of their longest leg)"
        )
    else:
        return
    k = int(np.argmax(open_rows))
    raise ValueError(
        f"{term}: {what} do not close (row {int(np.flatnonzero(rows)[k])}: "
        f"|u₁ + u₂ + u₃| is {gap[k]:.2g} of its longest leg): the three legs must be "
        "walked around the triangle, a→b, b→c, c→a, so that their (u, v) sum to 0. "
        "Negate the (u, v) of a leg stored the other way (c→a from a baseline a→c), "
        "or build the products with `eqmodels.closure_phases` / "
        "`eqmodels.bispectra`."
    )


def check_values(name: str, values, n: int, dtype) -> np.ndarray | jax.Array:
    """Real, finite, shape `(n,)`."""
    values = as_real(name, values)
    if np.shape(values) != (n,):  # shapes are static: checked when traced too
        raise ValueError(
            f"`{name}` has shape {np.shape(values)} but `forward` has {n} rows; "
            "they must match (one value per row)."
        )
    return asarray(values, dtype)


def weight_from_sigma(sigma, n: int, dtype) -> Float[Array, " n"]:
    """`1/σ²` after checking that `σ` is finite, > 0 and of shape `(n,)`."""
    sigma = as_real("sigma", sigma)
    check_nonempty("sigma", sigma)
    if np.shape(sigma) != (n,):
        raise ValueError(
            f"`sigma` has shape {np.shape(sigma)} but `forward` has {n} rows; "
            "they must match (one sigma per row)."
        )
    return inverse_variance(sigma, dtype)


def inverse_variance(sigma, dtype) -> Float[Array, "*s"]:
    """`1/σ²` (computed in float64 when concrete) after checking that `σ > 0`; `σ`
    has been through `as_real`."""
    check_positive("sigma", sigma)
    if is_concrete(sigma):
        sigma64 = np.asarray(sigma, np.float64)
        with np.errstate(over="ignore", under="ignore"):
            weight = (1.0 / sigma64**2).astype(dtype)
        bad = ~np.isfinite(weight) | (weight == 0)
        if np.any(bad):
            worst = sigma64[bad].flat[0]
            raise ValueError(
                f"`sigma` = {worst:g}: its inverse variance 1/σ² is not representable "
                f"in {np.dtype(dtype).name} ({'overflow' if worst < 1 else 'underflow'})."
                " Express the data in other units (e.g. mJy instead of Jy), or compute "
                "in float64 (`jax.config.update('jax_enable_x64', True)`)."
            )
        return asarray(weight, dtype)
    return asarray(1.0 / sigma**2, dtype)


def real_rows(
    forward,
    k: int | None,
    term: str,
    name: str,
    values,
    sigma,
    *,
    radians=False,
    check=None,
):
    """The checked `(values, weight, n_rows)` of a term with one real value per row
    (`values` in radians when `radians`; `check(values)` run on the finite,
    concrete values), `weight = 1/σ²`, `n_rows` a 0-d leaf."""
    check_forward(forward, k, term)
    n = forward.u.shape[0]
    dtype, _ = values_dtype(forward)
    if radians:
        check_radians(name, values)
        check_radian_sigmas(sigma)
    if check is not None:
        checked = as_real(name, values)
        check(checked)
    values = check_values(name, values, n, dtype)
    return values, weight_from_sigma(sigma, n, dtype), n_rows_leaf(int(n))


def row_labels(
    stations, time_index, points: tuple[int, ...]
) -> tuple[Int[Array, "..."], Int[Array, "..."]]:
    """The checked `(stations, time_index)` of a term whose points have shape
    `points`: each leg's station pair, `(*points, 2)`, and each row's time slot,
    `points[:1]` (`points` for a visibility term, one slot per point); `-1` where
    not given (unknown)."""
    slots_shape = points if len(points) == 1 else points[:1]
    out = []
    for name, x, shape in (
        ("stations", stations, (*points, 2)),
        ("time_index", time_index, slots_shape),
    ):
        if x is None:
            out.append(asarray(np.full(shape, -1, np.int32)))  # no eager compile
            continue
        if is_concrete(x):
            arr = np.asarray(x)
            if arr.size and not np.issubdtype(arr.dtype, np.integer):
                raise TypeError(
                    f"`{name}` must hold integer indices, got dtype {arr.dtype}."
                )
            if arr.shape != shape:
                raise ValueError(
                    f"`{name}` has shape {arr.shape} but the term's points need "
                    f"{shape}"
                    + (
                        " (a station pair per leg)."
                        if name == "stations"
                        else " (one time slot per row)."
                    )
                )
            if arr.size and arr.min() < -1:
                raise ValueError(
                    f"`{name}` must be indices >= 0 (or -1 for unknown), got "
                    f"{int(arr.min())}."
                )
            x = arr
        out.append(asarray(x, jnp.int32))
    return out[0], out[1]


def check_vis_shape(term, vis, points: tuple[int, ...]) -> None:
    """`vis` has the shape of the term's points: one model visibility per point.
    Elementwise arithmetic would broadcast a batch `(2, n)`, a column `(n, 1)` or
    a scalar into a wrong χ² without a word. Shapes are static: checked when
    traced, at no cost."""
    if tuple(jnp.shape(vis)) != tuple(points):
        raise ValueError(
            f"{type(term).__name__}: `vis` has shape {tuple(jnp.shape(vis))}, but the "
            f"term's points have shape {tuple(points)}: one model visibility per "
            "point (`term.model_vis(image)`); for a batch, `jax.vmap` over it."
        )


def abs2(z: Complex[Array, "*s"]) -> Float[Array, "*s"]:
    """`|z|²` without a square root."""
    return jax.lax.real(z) ** 2 + jax.lax.imag(z) ** 2


def live_rows(weight: Float[Array, " n"]) -> Bool[Array, " n"]:
    """Rows that contribute (weight > 0)."""
    return weight > 0


def where_live(
    live: Bool[Array, " n"], x: Float[Array, " n *k"], fill: float = 1.0
) -> Float[Array, " n *k"]:
    """`x` on live rows, `fill` on dead (zero-weight) rows."""
    live = live.reshape(live.shape + (1,) * (x.ndim - 1))
    return jnp.where(live, x, asarray(fill, x.dtype))


def values_dtype(forward: AbstractForwardModel):
    """The (real, complex) dtypes of a term built on `forward`."""
    dtype = forward.dtype
    return dtype, (np.complex64 if dtype == np.float32 else np.complex128)


#: Largest plausible amplitude (Jy) of an observed visibility; the same limit as
#: `load_uvfits`'s plausibility check.
MAX_AMPLITUDE_JY: float = 1e6


def check_amplitudes(name: str, x, *, term: str, jy: bool, hint: str = "") -> None:
    """Amplitudes are `>= 0` (a negative one is a sign error, log-amplitudes passed
    as amplitudes, or an undebiased sum gone wrong) and, when in Jy (`jy`), at most
    `MAX_AMPLITUDE_JY` (corrupt values or other units). Concrete values only."""
    if not is_concrete(x) or np.size(x) == 0:
        return
    arr = np.asarray(x)
    neg = arr < 0
    if neg.any():
        raise ValueError(
            f"`{name}` has {int(neg.sum())} negative value(s), first "
            f"{float(arr[neg][0]):.4g} at index {int(np.argmax(neg))}: {term} needs "
            f"amplitudes >= 0 (a modulus);{hint} flag or drop those rows."
        )
    if jy:
        big = np.abs(arr) > MAX_AMPLITUDE_JY
        if big.any():
            raise ValueError(
                f"`{name}` reaches {float(np.abs(arr).max()):.4g} Jy, above the "
                f"{MAX_AMPLITUDE_JY:g} Jy no observation produces: corrupt values, or "
                "not in Jy (convert to Jy, or flag those rows)."
            )


def check_radians(name: str, x: Float[ArrayLike, "*s"]) -> None:
    """Phases beyond 2π are almost always degrees by mistake."""
    if is_concrete(x) and np.size(x) and float(np.max(np.abs(x))) > 2 * np.pi + 1e-9:
        raise ValueError(
            f"`{name}` reaches |{name}| = {float(np.max(np.abs(x))):.4g} > 2π: closure "
            "phases must be in radians (eht-imaging stores degrees); convert with "
            "`np.deg2rad`."
        )


def check_radian_sigmas(sigma) -> None:
    """Closure-phase sigmas in radians, like the phases: eht-imaging stores both in
    degrees, and sigmas left in degrees weaken the term by (180/π)² ≈ 3283 without a
    word. Rows of very low signal-to-noise have sigmas beyond π (raw EHT rows reach
    177), so it is the median that is checked: above π, the noise of most closure
    phases would span the whole circle. (The median of the public EHT files is
    0.07–0.75 in radians, 4–43 in degrees, raw or scan-averaged.)"""
    if not is_concrete(sigma) or not np.size(sigma):
        return
    arr = np.asarray(sigma, np.float64)
    arr = arr[np.isfinite(arr)]  # non-finite sigmas are refused with their own message
    if arr.size and float(np.median(arr)) > np.pi:
        raise ValueError(
            f"`sigma` has a median of {float(np.median(arr)):.4g} > π: closure-phase "
            "sigmas must be in radians, like the phases (eht-imaging stores both in "
            "degrees); convert with `np.deg2rad`."
        )


def check_product(data, values: str, k, term: str, product: str) -> None:
    """`data` is the product `term.from_data` needs: it has `u`, `v`, `<values>`
    and `sigma`, and its points are `(n,)` (`k` None), `(n, k)`, or any shape (`k`
    is `...`). A `TypeError` naming the expected product otherwise."""
    got = type(data).__name__
    need = ("u", "v", values, "sigma")
    missing = [n for n in need if not hasattr(data, n)]
    if missing:
        raise TypeError(
            f"`data` must be {product} for `{term}.from_data` (anything with "
            + ", ".join(f"`{n}`" for n in need)
            + f"), got {got}, which has no "
            + ", ".join(f"`{n}`" for n in missing)
            + "."
        )
    if k is ...:
        return
    shape = tuple(np.shape(data.u))
    ok = len(shape) == 1 if k is None else (len(shape) == 2 and shape[1] == k)
    if not ok:
        want = "(n,)" if k is None else f"(n, {k})"
        raise TypeError(
            f"`data` must be {product} for `{term}.from_data`, with points `u` of "
            f"shape {want}; got {got} with `u` of shape {shape}."
        )


def index_key_leaf(index_key) -> Int[Array, ""]:
    """`index_key` (a fingerprint of a data set's timestamps and station table,
    see `VisData.index_key`) as a 0-d int32 leaf, `-1` when not given (unknown)."""
    if index_key is None:
        index_key = -1
    if is_concrete(index_key):
        arr = np.asarray(index_key)
        if not np.issubdtype(arr.dtype, np.integer) or arr.shape != ():
            raise TypeError(
                "`index_key` must be one integer (a data set's `index_key`), got "
                f"{index_key!r}."
            )
        return asarray(arr, jnp.int32)  # on the host: no eager cast to compile
    return jnp.asarray(index_key, jnp.int32)


def term_from_data(
    cls,
    data,
    values: str,
    grid: ImageGrid,
    forward: ForwardLike,
    forward_kwargs: dict,
    *,
    k,
    product: str,
    extra: dict | None = None,
):
    """The body of the terms' `from_data`: `cls(forward model at (data.u, data.v),
    data.<values>, data.sigma)`, with the legs' station pairs and the rows' time
    slots when `data` carries them (`legs` / `stations` and `time_index`), and the
    keyword arguments `extra`. `data` is checked to be `product` first (see
    `check_product`)."""
    check_product(data, values, k, cls.__name__, product)
    fwd = make_forward(forward, grid, data.u, data.v, **forward_kwargs)
    legs = getattr(data, "legs", None)
    if legs is None:  # a VisData or AmpProducts: the row's own pair
        legs = _pairs(data)
    return cls(
        fwd,
        getattr(data, values),
        data.sigma,
        stations=legs,
        time_index=getattr(data, "time_index", None),
        index_key=getattr(data, "index_key", None),
        **(extra or {}),
    )


def _pairs(data):
    if hasattr(data, "ant1") and hasattr(data, "ant2"):
        return np.stack([np.asarray(data.ant1), np.asarray(data.ant2)], axis=-1)
    st = getattr(data, "stations", None)
    if st is not None and np.ndim(st) == 2 and np.shape(st)[1] == 2:
        return np.asarray(st)
    return None
