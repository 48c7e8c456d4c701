"""Helpers over a `Samples`' draws: the checks, the flattened (and thinned) draws,
a function mapped over them in batches, and the names of the draws' leaves."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from ._sample import Samples


def check_samples(samples, name: str = "samples") -> None:
    """Refuse what is not a [`eqmodels.Samples`][]."""
    if not isinstance(samples, Samples):
        raise TypeError(
            f"`{name}` must be eqmodels.Samples (what `eqmodels.sample` returns), "
            f"got {type(samples).__name__}."
        )


def draws_shape(samples: Samples) -> tuple[int, int]:
    """`(chains, samples)`, the leading axes of the draws."""
    c, s = np.shape(samples.log_density)[:2]
    return int(c), int(s)


def check_num_draws(num_draws, total: int) -> np.ndarray:
    """The indices (into the draws flattened chain-major) of `num_draws` evenly
    spaced draws (all of them when `num_draws` is None)."""
    if num_draws is None:
        return np.arange(total)
    if (
        isinstance(num_draws, bool)
        or not isinstance(num_draws, int | np.integer)
        or not 2 <= num_draws <= total
    ):
        raise ValueError(
            f"`num_draws` must be None (every draw) or an int in [2, {total}] "
            f"(the draws there are), got {num_draws!r}."
        )
    return np.unique(np.round(np.linspace(0, total - 1, int(num_draws))).astype(int))


def check_batch_size(batch_size) -> int:
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int | np.integer)
        or batch_size < 1
    ):
        raise ValueError(f"`batch_size` must be an int ≥ 1, got {batch_size!r}.")
    return int(batch_size)


def flat_draws(samples: Samples, index: np.ndarray) -> PyTree:
    """The draws' models with the `(chains, samples)` axes flattened chain-major
    and the draws `index` taken: every array leaf gets one leading axis."""
    c, s = draws_shape(samples)

    def take(x):
        if not eqx.is_array(x):
            return x
        return jnp.reshape(x, (c * s, *x.shape[2:]))[index]

    return jax.tree.map(take, samples.draws)


def one_draw(models: PyTree, i: int = 0) -> PyTree:
    """The `i`-th model of flattened draws."""
    return jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, models)


def map_draws(fn, models: PyTree, batch_size: int):
    """`fn(model)` of every model of flattened draws (leading axis), `batch_size`
    at a time (`jax.lax.map`), compiled once per `fn` and draws' structure (give
    a module-level function or a module's bound method, not a new lambda, for
    the compilation to be reused); numpy out."""
    dyn, static = eqx.partition(models, eqx.is_array)
    return jax.tree.map(np.asarray, _map(fn, dyn, static, batch_size))


@eqx.filter_jit
def _map(fn, dyn, static, batch_size):
    return jax.lax.map(lambda d: fn(eqx.combine(d, static)), dyn, batch_size=batch_size)


def _token(key) -> str:
    if isinstance(key, jax.tree_util.GetAttrKey):
        return key.name
    if isinstance(key, jax.tree_util.SequenceKey):
        return str(key.idx)
    if isinstance(key, jax.tree_util.DictKey):
        return str(key.key)
    if isinstance(key, jax.tree_util.FlattenedIndexKey):
        return str(key.key)
    return str(key)


def is_real_float(x) -> bool:
    return eqx.is_array(x) and jnp.issubdtype(x.dtype, jnp.floating)


def leaf_names(draws: PyTree) -> list[tuple[str, object]]:
    """`(name, leaf)` of each real floating-point array leaf of `draws`, named by
    the shortest tail of its path (attribute names and indices joined by `.`)
    that no other leaf shares (an index with its container): `radius`,
    `params`, `parts.0.flux`."""
    items = [
        ([_token(k) for k in path], leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(draws)[0]
        if is_real_float(leaf)
    ]
    depth = [1] * len(items)
    while True:
        names = [".".join(p[-d:]) or "x" for (p, _), d in zip(items, depth)]
        clash = {n for n in names if names.count(n) > 1}
        grow = [
            i for i, n in enumerate(names) if n in clash and depth[i] < len(items[i][0])
        ]
        if not grow:
            break
        for i in grow:
            depth[i] += 1
            path = items[i][0]
            # an index is named with its container: `parts.0.flux`, not `0.flux`
            if path[-depth[i]].isdigit() and depth[i] < len(path):
                depth[i] += 1
    return [(n, leaf) for n, (_, leaf) in zip(names, items)]
