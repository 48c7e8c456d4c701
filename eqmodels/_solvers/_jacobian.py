"""Chunked Jacobians of a residual function.

A Jacobian `J = ∂r/∂x` (m residuals × n parameters) is built `chunk` rows (reverse
mode, when m ≤ n) or `chunk` columns (forward mode, when m > n) at a time, under
`lax.map` over chunks and `vmap` inside one chunk: peak memory grows as
`m0 + m1·chunk`, time shrinks as `t0 + t1/chunk`. `chunk_size="auto"` measures
`m0`, `m1` from two compiled programs (XLA's memory analysis, no execution) and
takes the largest chunk that fits a memory budget.
"""

from collections.abc import Callable
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, PyTree

from .._compile import run_once_jit
from .._validation import is_concrete
from ._common import is_real_float_array
from ._memory import compiled_bytes, largest_chunk, linear_model
from ._residuals import objective_residuals


DEFAULT_MEMORY_BUDGET = 512 * 2**20  # bytes of temporary memory for one chunk


def check_chunk_size(chunk_size) -> None:
    if isinstance(chunk_size, str) and chunk_size == "auto":
        return
    if (
        isinstance(chunk_size, bool)
        or not isinstance(chunk_size, int | np.integer)
        or chunk_size < 1
    ):
        raise ValueError(
            f"`chunk_size` must be a positive int or 'auto', got {chunk_size!r}."
        )


def check_memory_budget(memory_budget) -> None:
    if (
        isinstance(memory_budget, bool)
        or not isinstance(memory_budget, int | float | np.integer | np.floating)
        or not memory_budget > 0
    ):
        raise ValueError(
            f"`memory_budget` must be a positive number of bytes, got {memory_budget!r}."
        )


def _mode(m: int, n: int) -> str:
    return "rev" if m <= n else "fwd"


def dense_jacobian(
    fn: Callable[[Float[Array, " n"]], Float[Array, " m"]],
    x: Float[Array, " n"],
    chunk: int,
) -> tuple[Float[Array, " m"], Float[Array, "m n"]]:
    """`(fn(x), ∂fn/∂x)` for a flat `x`, `chunk` rows or columns at a time
    (traceable; `chunk` is static)."""
    r, vjp = jax.vjp(fn, x)
    m, n = r.shape[0], x.shape[0]
    mode = _mode(m, n)
    k = m if mode == "rev" else n
    chunk = int(max(1, min(chunk, k)))
    n_chunks = -(-k // chunk)
    # Basis vectors, padded with zero rows to a whole number of chunks.
    eye = jnp.eye(n_chunks * chunk, k, dtype=x.dtype).reshape(n_chunks, chunk, k)
    if mode == "rev":

        def one(e):
            return vjp(e.astype(r.dtype))[0]

    else:

        def one(e):
            return jax.jvp(fn, (x,), (e,))[1]

    blocks = jax.lax.map(jax.vmap(one), eye)  # (n_chunks, chunk, n or m)
    flat = blocks.reshape(n_chunks * chunk, -1)[:k]
    return r, (flat if mode == "rev" else flat.T)


def _abstract(x):
    """`x` as a shape, dtype and (for a concrete array) sharding: lowering with it
    instead of closing over it works for arrays that span devices of other
    processes, which a compiled closure refuses."""
    if (
        isinstance(x, jax.Array)
        and not isinstance(x, jax.core.Tracer)
        and len(x.sharding.device_set) > 1
    ):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    # One device's arrays are placed with the others by the compiled program.
    return jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x))


def _temp_bytes(fn_of, arrays, x_abstract, chunk) -> int | None:
    compiled = (
        jax.jit(lambda a, x: dense_jacobian(fn_of(a), x, chunk))
        .lower(jax.tree.map(_abstract, arrays), x_abstract)
        .compile()
    )
    return compiled_bytes(compiled)


def _sizes(k: int) -> tuple[int, int]:
    c1, c2 = max(1, min(k, 4)), max(2, min(k, 16))
    return (1 if c1 == c2 else c1), c2


def memory_model(fn_of, arrays, x_abstract, k: int) -> tuple[float, float]:
    """`(m0, m1)` in bytes, so that a chunk of `c` needs about `m0 + m1·c`, from two
    compilations (no execution) of the Jacobian of `fn_of(arrays)`."""
    return linear_model(lambda c: _temp_bytes(fn_of, arrays, x_abstract, c), *_sizes(k))


def choose_chunk(fn_of, arrays, x_abstract, k: int, memory_budget) -> int:
    """The largest chunk whose modelled memory fits `memory_budget` (bytes)."""
    return largest_chunk(
        lambda c: _temp_bytes(fn_of, arrays, x_abstract, c),
        *_sizes(k),
        memory_budget,
        k,
    )


_AUTO: dict = {}


def resolve_chunk_size(
    chunk_size: int | Literal["auto"],
    fn_of: Callable,
    arrays: PyTree,
    x: Float[Array, " n"],
    memory_budget: int | float,
    key=None,
) -> int:
    """An integer chunk size; `"auto"` is measured once per `key` (problem
    structure) and budget, then remembered. `fn_of(arrays)` is the residual
    function of the flat parameters (the arrays are arguments of the programs
    compiled to measure memory, not constants closed over)."""
    check_chunk_size(chunk_size)
    if chunk_size != "auto":
        return int(chunk_size)
    m = jax.eval_shape(lambda a, y: fn_of(a)(y), arrays, x).shape[0]
    n = x.shape[0]
    k = m if _mode(m, n) == "rev" else n
    cache_key = (key, memory_budget)
    if key is not None and cache_key in _AUTO:
        return _AUTO[cache_key]
    abstract = jax.ShapeDtypeStruct(x.shape, x.dtype)
    chunk = choose_chunk(fn_of, arrays, abstract, k, memory_budget)
    if key is not None:
        _AUTO[cache_key] = chunk
    return chunk


def flat_residual_fn(objective, model, filter_spec):
    """`(fn, x0, unravel)`: the weighted residuals as a function of the flat
    parameter vector."""
    params, static = eqx.partition(model, filter_spec)
    x0, unravel = ravel_pytree(params)

    def fn(x):
        return objective_residuals(objective, eqx.combine(unravel(x), static))

    return fn, x0, unravel


def structure_key(*trees) -> tuple:
    """A hashable key of the structure (tree, shapes, dtypes, static fields)."""
    dynamic, static = eqx.partition(trees, eqx.is_array)
    leaves, treedef = jax.tree.flatten(dynamic)
    sleaves, streedef = jax.tree.flatten(static)
    hashable = []
    for leaf in sleaves:
        try:
            hash(leaf)
            hashable.append(leaf)
        except TypeError:
            hashable.append(id(leaf))
    return (
        treedef,
        tuple((tuple(x.shape), str(x.dtype)) for x in leaves),
        streedef,
        tuple(hashable),
    )


def auto_chunk(objective, model, filter_spec, chunk_size, memory_budget) -> int:
    """Resolve `chunk_size` for a residual Jacobian of `objective` at `model`
    (works on tracers too: only shapes are used)."""
    check_chunk_size(chunk_size)
    check_memory_budget(memory_budget)
    if chunk_size != "auto":
        return int(chunk_size)
    _, x0, _ = flat_residual_fn(objective, model, filter_spec)
    arrays, static = eqx.partition((objective, model), eqx.is_array)

    def fn_of(a):
        return flat_residual_fn(*eqx.combine(a, static), filter_spec)[0]

    concrete = all(is_concrete(x) for x in jax.tree.leaves((objective, model)))
    key = structure_key(objective, model, filter_spec) if concrete else None
    return resolve_chunk_size("auto", fn_of, arrays, x0, memory_budget, key)


@run_once_jit
def _jacobian_jit(objective, model, filter_spec, chunk):
    fn, x0, _ = flat_residual_fn(objective, model, filter_spec)
    return dense_jacobian(fn, x0, chunk)


def residual_jacobian(
    objective: PyTree,
    model: PyTree,
    *,
    chunk_size: int | str = "auto",
    memory_budget: int | float = DEFAULT_MEMORY_BUDGET,
    params: Callable = is_real_float_array,
) -> tuple[Float[Array, " m"], Float[Array, "m n"]]:
    """The weighted residuals of a least-squares objective and their Jacobian with
    respect to the model's parameters (flattened in `jax.flatten_util.ravel_pytree`
    order), computed in chunks.

    **Arguments:**

    - `objective`: an [`eqmodels.Objective`][] of terms with residuals (data terms).
    - `model`: the image model (e.g. a [`eqmodels.PixelImage`][]).
    - `chunk_size`: rows (reverse mode, when there are fewer residuals than
      parameters) or columns (forward mode) of the Jacobian computed together, or
      `"auto"`: the largest chunk whose memory, modelled as `m0 + m1·chunk` from
      two compilations, fits `memory_budget`.
    - `memory_budget`: bytes of temporary memory allowed (`"auto"` only).
    - `params`: which leaves of `model` are parameters (an `eqx.partition` filter).

    **Returns:** `(r, J)`, shapes `(m,)` and `(m, n)`, with `Σ r² = Σ_d w_d χ²_d`.
    """
    chunk = auto_chunk(objective, model, params, chunk_size, memory_budget)
    return _jacobian_jit(objective, model, params, chunk)
