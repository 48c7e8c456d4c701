"""Several data sets as one batch: pad terms (or objectives) to one shape and stack.

Data terms hold their row count `n_rows` as an array leaf, so two data sets padded to
the same number of rows have the same tree structure: a stack of them is one PyTree
with a leading batch axis, and `jax.vmap` evaluates every data set in one compiled
program (several days or bands, a survey over data sets).
"""

from collections.abc import Sequence
from typing import TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._gains._joint import WithGains
from ._gains._survey import stack_gains
from ._terms._base import AbstractDataTerm
from ._terms._closure_covariance import pad_covariances
from ._terms._objective import Objective
from ._terms._shared import SharedForward
from ._tree import structure_difference


_T = TypeVar("_T", AbstractDataTerm, Objective, WithGains)


def _pad_group(group: SharedForward, points: int, rows: Sequence[int]) -> SharedForward:
    """A shared model padded to `points` distinct points (copies of point 0, never
    gathered by a real row) and its members' gathers padded to `rows` rows (copies
    of row 0: their terms' padding rows have weight 0)."""
    m = group.n_points
    forward = group.forward
    if points > m:
        forward = forward.take(
            np.concatenate([np.arange(m), np.zeros(points - m, int)])
        )
    index, conj = [], []
    for idx, cj, n in zip(group.index, group.conj, rows):
        k = idx.shape[0]
        take = np.concatenate([np.arange(k), np.zeros(n - k, int)])
        index.append(idx[take])
        conj.append(cj[take])
    return SharedForward(forward, tuple(index), tuple(conj), group.members)


def _pad_objective(obj: Objective, rows: Sequence[int | None], points: Sequence[int]):
    terms = [
        t.pad_rows(n) if isinstance(t, AbstractDataTerm) else t
        for t, n in zip(obj.terms, rows)
    ]
    groups = tuple(
        _pad_group(g, p, [rows[m] for m in g.members])
        for g, p in zip(obj.shared, points)
    )
    return eqx.tree_at(lambda o: (o.terms, o.shared), obj, (tuple(terms), groups))


def pad_to_match(items: Sequence[_T]) -> list[_T]:
    """Pad data terms, or objectives built the same way on different data sets, to
    one shape (the largest row count of each term, the largest number of distinct
    points of each shared transform), without stacking them: e.g. the
    configurations of a [`eqmodels.survey`][] over data sets. Padding rows have
    weight exactly 0, so every value and gradient is unchanged.

    **Arguments:** `items`, as for [`eqmodels.pad_and_stack`][].

    **Returns:** the padded items, in order, all of one tree structure and shape.
    """
    items = list(items)
    if not items:
        raise ValueError("`items` is empty: give at least one term or objective.")
    if all(isinstance(x, WithGains) for x in items):
        # A joint image + gain objective: its objective padded, wrapped again.
        return [WithGains(x) for x in pad_to_match([x.objective for x in items])]
    kind = type(items[0])
    if not all(type(x) is kind for x in items):
        raise TypeError(
            "`items` must all be of one class (data terms of one kind, or "
            f"objectives), got {sorted({type(x).__name__ for x in items})}."
        )
    if isinstance(items[0], AbstractDataTerm):
        length = max(x.rows for x in items)
        return pad_covariances([x.pad_rows(length) for x in items])
    if isinstance(items[0], Objective):
        names = items[0].names
        if any(x.names != names for x in items):
            raise ValueError(
                "the objectives must hold the same terms in the same order, got "
                f"{[x.names for x in items]}."
            )
        groups = [[g.members for g in x.shared] for x in items]
        if any(g != groups[0] for g in groups):
            raise ValueError(
                "the objectives must share their transforms the same way (same "
                f"groups of data terms; got {groups}, term positions per group). "
                "Build them with the same forward model kind; a data term alone on "
                "its points with none repeated gets no shared transform (nothing to "
                "save), so data sets where that happens to some of them stack with "
                "`share=False`."
            )
        rows = [
            max(x.terms[i].rows for x in items)
            if isinstance(items[0].terms[i], AbstractDataTerm)
            else None
            for i in range(len(names))
        ]
        points = [
            max(x.shared[g].n_points for x in items) for g in range(len(groups[0]))
        ]
        return pad_covariances([_pad_objective(x, rows, points) for x in items])
    raise TypeError(
        f"`items` must be data terms or objectives, got {type(items[0]).__name__}."
    )


def pad_and_stack(items: Sequence[_T]) -> _T:
    """Pad data terms, or objectives built the same way on different data sets, to
    one shape and stack them along a new leading axis, for `jax.vmap`.

    Each data term is padded to the largest row count among the items with
    zero-weight rows ([`eqmodels.AbstractDataTerm.pad_rows`][]: the value and every
    gradient are unchanged, `n_rows` keeps each data set's true count); an
    objective's shared transforms are padded to the largest number of distinct
    points; station gains of different data sets (other solution intervals or
    station tables, inside `GainCorrected` terms and gain priors) are padded to
    one shape, with gain 1 where no row looks, under placeholder tables. The
    result is a batched module:
    `eqx.filter_vmap(lambda o, x: o(x), in_axes=(0, None))(stacked, image)` gives
    one value per data set, in one compiled program whatever the row counts.

    **Arguments:** `items`, a non-empty sequence of data terms of one class (or of
    objectives with the same terms, weights' shape and shared groups, or of
    [`eqmodels.WithGains`][] of such objectives).

    **Returns:** the stacked term or objective (every array leaf gains a leading
    axis of length `len(items)`).
    """
    # Station gains of different data sets: padded to one shape and table.
    padded, _ = stack_gains(pad_to_match(items), model_index=None)
    arrays, statics = [], []
    for x in padded:
        dyn, static = eqx.partition(x, eqx.is_array)
        arrays.append(dyn)
        statics.append(static)
    structs = {jax.tree_util.tree_structure(s) for s in statics}
    shapes = {
        tuple((a.shape, a.dtype) for a in jax.tree_util.tree_leaves(d)) for d in arrays
    }
    if len(structs) != 1 or len(shapes) != 1:
        diffs = (structure_difference(padded[0], x, dtypes=True) for x in padded[1:])
        where = next((d for d in diffs if d), None)
        detail = "" if where is None else f" First difference: {where}."
        raise ValueError(
            "after padding the items still differ in structure (grids, pulses, forward "
            "model kinds, options or dtypes): only data sets imaged the same way can "
            "be stacked." + detail
        )
    differ = _static_difference(statics)
    if differ is not None:
        path, a, b = differ
        raise ValueError(
            f"the items differ in a non-array field, `{path}`: {a!r} and {b!r}. A "
            "stack keeps one value of such fields: hold that field as an array leaf "
            "(`jnp.asarray`) to stack items that differ in it."
        )
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *arrays)
    return eqx.combine(stacked, statics[0])


def _static_difference(statics):
    """`(path, first value, other value)` of the first non-array leaf in which the
    items differ, or `None` (the items' tree structures are equal)."""
    first = jax.tree_util.tree_flatten_with_path(statics[0])[0]
    for other in statics[1:]:
        for (path, a), b in zip(first, jax.tree_util.tree_leaves(other)):
            try:
                same = bool(a is b or a == b)
            except Exception:  # noqa: BLE001 - objects without a boolean `==`
                same = False
            if not same:
                return jax.tree_util.keystr(path), a, b
    return None
