"""The full covariance of closure quantities through their shared baselines.

Closure phases (and log closure amplitudes) formed at one timestamp share
baselines, so their noise is correlated. Linearised, each closure is
`c = A x` with `x` the baseline phases (or log amplitudes) at that timestamp and
`A` the closure design matrix (±1 per leg), so with independent baseline noise
`σ_b` (`σ/|V|` for the phase and for the log amplitude)

`Σ = A diag(σ_b²) Aᵀ + diag(e)`,

where `e_k = σ_k² − Σ_legs σ_b² ≥ 0` is the closure's variance beyond what its
legs give (a systematic closure-phase noise, say): the diagonal of `Σ` is the
closure's own `σ_k²`, exactly what the independent likelihood uses. `σ` is
fixed, so the whitening `L⁻¹` (`Σ = L Lᵀ`) and `ln det 2πΣ` of every timestamp
are computed once, at construction, on the host.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, Scalar

from .._numerics import asarray
from .._validation import is_concrete


COVARIANCES = ("independent", "full")

# How far a closure's σ² may fall below the sum of its legs' σ_b² (rounding).
_VARIANCE_RTOL = 1e-6


class ClosureCovariance(eqx.Module):
    """Per-timestamp whitening of a closure term's residuals (built by
    `closure_covariance`): groups of rows (padded to the largest group), their
    `L⁻¹` and the total normalisation `−½ Σ_g ln det 2πΣ_g`."""

    rows: Int[Array, "g m"]
    mask: Float[Array, "g m"]
    whiten: Float[Array, "g m m"]
    log_norm: Float[Array, ""]

    def log_likelihood(self, r: Float[Array, " n"]) -> Scalar:
        """`−½ Σ_g r_gᵀ Σ_g⁻¹ r_g − ½ Σ_g ln det 2πΣ_g` for the residuals `r` of
        the term's rows (rows in no group, dead or padding, are left out)."""
        rg = r[self.rows] * self.mask  # (g, m)
        z = jnp.einsum("gij,gj->gi", self.whiten, rg)
        return -0.5 * jnp.sum(z * z) + self.log_norm


def check_covariance(covariance) -> str:
    if not isinstance(covariance, str) or covariance not in COVARIANCES:
        raise ValueError(
            f"`covariance` must be one of {COVARIANCES} ('independent': closures "
            "treated as independent, eht-imaging's and Comrade's default; 'full': "
            "their covariance through shared baselines), got "
            f"{covariance!r}."
        )
    return covariance


def closure_covariance(
    term: str,
    *,
    u,
    v,
    legs,
    time_index,
    weight,
    leg_sigma,
    leg_signs,
    dtype,
) -> ClosureCovariance:
    """The full-covariance whitening of a closure term (host numpy, concrete).

    **Arguments:**

    - `term`: the class name (for messages).
    - `u`, `v`: the legs' points, `(n, k)` (a baseline is told apart by its station
      pair and `|u|`, `|v|`, so two bands at one timestamp stay apart).
    - `legs`: each leg's station pair as walked, `(n, k, 2)`.
    - `time_index`: each row's time slot, `(n,)`.
    - `weight`: `1/σ²` per row (rows of weight 0 are left out).
    - `leg_sigma`: each leg's linearised σ_b, `(n, k)`.
    - `leg_signs`: `None` (closure phases: +1 where the leg is walked from the
      lower to the higher station index, −1 otherwise) or the fixed signs of the
      legs, `(k,)` (log closure amplitudes: `(+1, +1, −1, −1)`).
    - `dtype`: the float dtype of the result.
    """
    arrays = (u, v, legs, time_index, weight, leg_sigma)
    if not all(is_concrete(x) for x in arrays):
        raise ValueError(
            f"{term}: `covariance='full'` needs concrete (not traced) points, "
            "stations, time slots and sigmas: build the term outside `jit`."
        )
    u, v = np.abs(np.asarray(u, np.float64)), np.abs(np.asarray(v, np.float64))
    legs = np.asarray(legs)
    tix = np.asarray(time_index)
    w = np.asarray(weight, np.float64)
    n, k = u.shape
    if leg_sigma is None:
        raise ValueError(
            f"{term}: `covariance='full'` needs `leg_sigma`, each leg's linearised "
            "σ (σ/|V|), shape (n, legs): build the term with `from_data` from "
            "`eqmodels.closure_phases(data)` / `eqmodels.log_closure_amplitudes(data)` "
            "(which carry it), or pass it."
        )
    ls = np.asarray(leg_sigma, np.float64)
    if ls.shape != (n, k):
        raise ValueError(
            f"{term}: `leg_sigma` must have shape {(n, k)} (one σ per leg), got "
            f"{ls.shape}."
        )
    live = w > 0
    if not np.all(np.isfinite(ls[live]) & (ls[live] > 0)):
        raise ValueError(
            f"{term}: `leg_sigma` must be finite and > 0 on every live row."
        )
    if np.any(tix[live] < 0) or np.any(legs[live] < 0):
        raise ValueError(
            f"{term}: `covariance='full'` needs each row's `time_index` and its "
            "legs' `stations` (which closures share a baseline): build the term "
            "with `from_data`, or pass them."
        )
    var = np.where(live, 1.0 / np.where(live, w, 1.0), 0.0)
    excess = var - np.sum(ls**2, axis=1)
    bad = live & (excess < -_VARIANCE_RTOL * var)
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{term}: row {i}'s sigma ({np.sqrt(var[i]):.4g}) is below what its legs' "
            f"`leg_sigma` give (sqrt(Σ σ_b²) = {np.sqrt(var[i] - excess[i]):.4g}): "
            "a closure's σ² must be at least the sum of its legs' σ_b² (the excess "
            "is treated as independent per closure). Check `sigma` and `leg_sigma`."
        )
    excess = np.maximum(excess, 0.0)
    lo, hi = (
        np.minimum(legs[..., 0], legs[..., 1]),
        np.maximum(legs[..., 0], legs[..., 1]),
    )
    if leg_signs is None:
        signs = np.where(legs[..., 0] < legs[..., 1], 1.0, -1.0)
    else:
        signs = np.broadcast_to(np.asarray(leg_signs, np.float64), (n, k))
    groups = [np.flatnonzero(live & (tix == t)) for t in np.unique(tix[live])]
    m = max((g.size for g in groups), default=1)
    rows = np.zeros((len(groups), m), np.int64)
    mask = np.zeros((len(groups), m))
    whiten = np.zeros((len(groups), m, m))
    log_norm = 0.0
    for gi, g in enumerate(groups):
        keys = {}
        a = np.zeros((g.size, g.size * k))
        sb = np.zeros(g.size * k)
        for ri, row in enumerate(g):
            for leg in range(k):
                key = (lo[row, leg], hi[row, leg], u[row, leg], v[row, leg])
                j = keys.setdefault(key, len(keys))
                if a[ri, j] != 0:
                    raise ValueError(
                        f"{term}: row {row} walks one baseline twice."
                    )  # pragma: no cover - closure sets never do
                a[ri, j] += signs[row, leg]
                s = ls[row, leg]
                if sb[j] == 0:
                    sb[j] = s
                elif not np.isclose(sb[j], s, rtol=1e-9, atol=0):
                    raise ValueError(
                        f"{term}: the baseline {key[:2]} at time slot {tix[row]} has "
                        f"two different `leg_sigma` ({sb[j]:.6g} and {s:.6g}) in "
                        "different closures: one baseline has one σ."
                    )
        a = a[:, : len(keys)]
        rank = np.linalg.matrix_rank(a)
        if rank < g.size:
            raise ValueError(
                f"{term}: `covariance='full'` needs linearly independent closures at "
                f"each timestamp, but time slot {tix[g[0]]} has {g.size} closures "
                f"of rank {rank} (a redundant set, e.g. `closures='all'`): build the "
                "products with `closures='min'` (a maximal independent set where "
                "every baseline is present), or use `covariance='independent'`."
            )
        cov = (a * sb[: len(keys)] ** 2) @ a.T + np.diag(excess[g])
        chol = np.linalg.cholesky(cov)
        rows[gi, : g.size] = g
        mask[gi, : g.size] = 1.0
        whiten[gi, : g.size, : g.size] = np.linalg.inv(chol)
        log_norm -= np.sum(np.log(np.diag(chol))) + 0.5 * g.size * np.log(2 * np.pi)
    return ClosureCovariance(
        rows=asarray(rows, jnp.int32),
        mask=asarray(mask, dtype),
        whiten=asarray(whiten, dtype),
        log_norm=asarray(log_norm, dtype),
    )


def refuse_take(term, index) -> None:
    """A full-covariance term couples its rows within a timestamp, so its rows
    can only be kept in place (padding appended: `pad_rows`), not gathered."""
    if term.closure_covariance is None:
        return
    n = term.rows
    if is_concrete(index):
        idx = np.asarray(index).ravel()
        if idx.size >= n and np.array_equal(idx[:n], np.arange(n)):
            return
    raise ValueError(
        f"this {type(term).__name__} has `covariance='full'`, which couples its "
        "rows within each timestamp: its rows cannot be gathered, split or "
        "reordered (`take_rows`, sharding); only padded (`pad_rows`). Select the "
        "rows in the products and build the term from them, or use "
        "`covariance='independent'`."
    )


def has_closure_covariance(tree) -> bool:
    """Whether a term (or any wrapper) holds a full closure covariance."""
    leaves = jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, ClosureCovariance))
    return any(isinstance(x, ClosureCovariance) for x in leaves)


def _is_cov(x) -> bool:
    return isinstance(x, ClosureCovariance)


def _pad_cov(cov: ClosureCovariance, groups: int, size: int) -> ClosureCovariance:
    """`cov` with empty groups (mask 0, whitening 0: contributing 0) and empty
    slots appended up to `groups` groups of `size`."""
    g, m = cov.rows.shape
    if (g, m) == (groups, size):
        return cov
    pad2 = ((0, groups - g), (0, size - m))
    return ClosureCovariance(
        rows=jnp.pad(cov.rows, pad2),
        mask=jnp.pad(cov.mask, pad2),
        whiten=jnp.pad(cov.whiten, pad2 + ((0, size - m),)),
        log_norm=cov.log_norm,
    )


def pad_covariances(items: list) -> list:
    """Terms (or objectives) holding full closure covariances in the same places,
    their covariances padded to one shape (the most timestamps and the largest
    group at each place), so that they stack (`pad_and_stack`). Items that hold
    them in different places are returned as they are (the stack reports it)."""
    covs = [
        [x for x in jax.tree.leaves(t, is_leaf=_is_cov) if _is_cov(x)] for t in items
    ]
    if not covs[0] or any(len(c) != len(covs[0]) for c in covs):
        return items
    shapes = [
        (max(c[k].rows.shape[0] for c in covs), max(c[k].rows.shape[1] for c in covs))
        for k in range(len(covs[0]))
    ]

    def where(t):
        return [x for x in jax.tree.leaves(t, is_leaf=_is_cov) if _is_cov(x)]

    return [
        eqx.tree_at(where, t, [_pad_cov(x, *s) for x, s in zip(c, shapes)])
        for t, c in zip(items, covs)
    ]
