"""`survey`: many reconstructions in one compiled program, chunked, split over
devices, checkpointed chunk by chunk."""

import os
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import PyTree

from .._gains._survey import stack_gains
from .._numerics import asarray
from .._progress import progress_bar
from .._sharding._mesh import split_explicitly
from .._tree import structure_difference
from .._validation import check_flag
from ._base import AbstractSolver
from ._checkpoint import fingerprint, open_folder
from ._chunking import auto_chunk_size, survey_devices
from ._common import is_real_float_array
from ._jacobian import (
    auto_chunk,
    check_memory_budget,
    DEFAULT_MEMORY_BUDGET,
)
from ._least_squares import AbstractLeastSquaresSolver
from ._results import failed
from ._solve import (
    _param_dtype,
    check_objective,
    make_options,
    Solution,
    solve_traced,
)
from ._solvers import as_solver
from ._survey_result import SurveyResult


_AXIS = "survey"  # the device mesh axis
_VMAP_AXIS = "survey_batch"  # the vmap axis (its loop condition is psum-reduced)


_ROLES = ("objective", "model", "solver")


def _split(trees: Sequence[PyTree]):
    """`(shared, stacked)`: array leaves equal across all trees are shared, the
    others are stacked along a new leading axis (numpy, on the host)."""
    flat = [jax.tree.flatten(t, is_leaf=lambda x: x is None) for t in trees]
    treedef = flat[0][1]
    for i, (_, td) in enumerate(flat[1:], 1):
        if td != treedef:
            where = structure_difference(trees[0], trees[i], _ROLES)
            where = "" if where is None else f" in {where}"
            raise ValueError(
                f"configuration {i} differs in structure from configuration "
                f"0{where} (other terms, shapes or static options, e.g. a "
                "solver's `memory_size`). A survey batches "
                "configurations of one structure: pad data sets to one length "
                "(zero-weight rows), keep the same terms, and hold what differs "
                "as an array leaf (`jnp.asarray`)."
            )
    shared, stacked = [], []
    for j, leaves in enumerate(zip(*(f[0] for f in flat))):
        first = leaves[0]
        if eqx.is_array(first):
            for i, x in enumerate(leaves[1:], 1):
                if not eqx.is_array(x):
                    raise ValueError(
                        f"configuration {i} has {type(x).__name__} where "
                        "configuration 0 has an array: only array leaves can vary "
                        "in a survey, with one shape and dtype in every "
                        "configuration."
                    )
                if x.dtype != first.dtype:
                    raise ValueError(
                        f"configuration {i} has a {x.dtype} array leaf "
                        f"where configuration 0 has {first.dtype}: a "
                        "survey runs its configurations in one precision; cast "
                        "them to one dtype."
                    )
            if all(x is first for x in leaves) or all(
                np.shape(x) == np.shape(first) and np.array_equal(x, first)
                for x in leaves[1:]
            ):
                shared.append(first)
                stacked.append(None)
            else:
                if any(np.shape(x) != np.shape(first) for x in leaves):
                    raise ValueError(
                        "configurations have array leaves of different shapes "
                        f"({sorted({np.shape(x) for x in leaves})}): pad data sets "
                        "to one length (zero-weight rows) with "
                        "`em.pad_to_match(objectives)`."
                    )
                shared.append(None)
                stacked.append(np.stack([np.asarray(x) for x in leaves]))
        else:
            if not all(_same(x, first) for x in leaves):
                raise ValueError(
                    "configurations differ in a non-array field "
                    f"({first!r} vs others): only array leaves can vary in a survey."
                )
            shared.append(first)
            stacked.append(None)
    return (
        jax.tree.unflatten(treedef, shared),
        jax.tree.unflatten(treedef, stacked),
    )


def _same(a, b) -> bool:
    try:
        return bool(a is b or a == b)
    except Exception:  # noqa: BLE001 - uncomparable objects
        return False


def _selected(model, params) -> PyTree:
    """`model` with each leaf replaced by whether `params` (a callable or a pytree
    filter spec, as `eqx.partition` takes) selects it."""
    return jax.tree.map(
        lambda x: x is not None, eqx.filter(model, params), is_leaf=lambda x: x is None
    )


@eqx.filter_jit
def _run_chunk(shared, batched, size, opts, filter_spec, jac_chunk):
    # `size` (static): the batch, given explicitly because nothing may be stacked
    # (configurations that are all the same: every member is then one solve,
    # broadcast). Non-array leaves of the result (a neural field's activation
    # function) come back once, unbatched.
    def one(b):
        objective, model, solver = eqx.combine(b, shared)
        return solve_traced(
            objective, model, solver, opts, filter_spec, jac_chunk, _VMAP_AXIS
        )

    return eqx.filter_vmap(
        one, axis_name=_VMAP_AXIS, axis_size=size, out_axes=eqx.if_array(0)
    )(batched)


def _raise_on_failure(chunk: Solution, first: int) -> None:
    """Raise naming the first failed configuration of a chunk (`first`: the
    index of its first configuration)."""
    bad = np.flatnonzero(np.asarray(failed(chunk.result)))
    if bad.size:
        i = int(bad[0])
        raise RuntimeError(
            f"configuration {first + i} failed: "
            f"{np.atleast_1d(chunk.reason)[i]} "
            f"({bad.size} failed in its chunk; `throw=False` returns them all with "
            "their `result`)."
        )


def _progress(total: int, enabled: bool):
    return progress_bar(
        total, enabled, desc="survey", unit="config", units="configurations"
    )


def survey(
    objectives: Sequence[Callable],
    model: PyTree | Sequence[PyTree],
    solver: AbstractSolver
    | str
    | optax.GradientTransformation
    | Sequence[AbstractSolver] = "lbfgs",
    *,
    max_steps: int = 100,
    ftol: float = 1e-10,
    gtol: float = 1e-10,
    params: PyTree[Callable[[Any], bool] | bool] = is_real_float_array,
    chunk_size: int | np.integer | str | None = None,
    memory_budget: int | float = DEFAULT_MEMORY_BUDGET,
    devices: Sequence[jax.Device] | None = None,
    checkpoint: str | os.PathLike | None = None,
    progress: bool = False,
    callback: Callable[[int, Solution], None] | None = None,
    throw: bool = False,
) -> SurveyResult:
    """Many reconstructions — over weights, prior widths, systematic noise, data
    sets padded to one length: anything that is an array leaf — in one compiled
    program, `vmap`ped in chunks.

    The configurations are given as a list of objectives of one structure (e.g.
    `[objective.with_weights(w) for w in grid_of_weights]`) and one initial model
    (or one per configuration). Array leaves that are equal across all
    configurations are held once; the others are stacked. The configurations are
    cut into chunks of `chunk_size` per device × the number of devices; the last
    chunk is padded (repeating a configuration) so that every chunk runs the same
    compiled program. Memory grows linearly with `chunk_size`; time per
    configuration falls until the machine is busy (see the survey guide).

    With `checkpoint`, every finished chunk is written to that folder as it
    finishes; a survey killed mid-way and called again with the same arguments reads
    the finished chunks back and computes only the others (the results are the
    same). A folder holding another survey, in use by another survey (its
    `survey.lock`; one left by a dead process of this host is taken over), or with a
    missing, corrupt, truncated, swapped or misshapen file is refused, naming the
    file (see the survey guide).

    **Arguments:**

    - `objectives`: a sequence of objectives (configurations), all of one
      structure.
    - `model`: the initial model, shared, or a list of one per configuration (a
      tuple is one model, as `solve` takes it).
    - `solver`: as for [`eqmodels.solve`][], or a sequence of one solver per
      configuration, all of one type and static settings, whose array fields may
      differ (e.g. `[em.Adam(lr) for lr in rates]`: a survey over learning rates).
      The default, `LBFGS()` (backtracking line search), lets every member advance
      one evaluation at a time, independently.
    - `max_steps`, `ftol`, `gtol`, `params`: as for [`eqmodels.solve`][].
    - `chunk_size`: configurations per device per chunk (default: all of them in
      one chunk, up to 64 per device), or `"auto"`: the largest chunk whose memory,
      modelled as `m0 + m1·chunk` from XLA's memory analysis of the chunk program
      compiled for two sizes (two extra compilations), fits `memory_budget`.
    - `memory_budget`: bytes of temporary memory per device for one chunk
      (`"auto"` only).
    - `devices`: the devices to split each chunk over (default: the sharded
      terms' devices, else every local device of the default backend); the
      number of configurations need not divide evenly. Under `jax.distributed`
      each process surveys its own configurations on its own devices; devices of
      other processes are refused.
    - `checkpoint`: a folder for finished chunks (created), or `None`.
    - `progress`: show progress between chunks (tqdm when installed, else a line
      per chunk on stderr). Never inside the compiled program.
    - `callback`: `callback(chunk_index, solution_of_the_chunk)` after each chunk
      computed by this call (station gains of different data sets in it are the
      padded ones, see [`eqmodels.SurveyResult`][]).
    - `throw`: as for [`eqmodels.solve`][]: raise a `RuntimeError` naming the
      first configuration whose solve failed (`nonfinite`, `linesearch`; not
      `max_steps`), after its chunk is saved. Checked on the host between chunks
      (an in-program error aborts a program split over several CPU devices).
      Default `False`: each `result` says why it stopped.

    **Returns:** a [`eqmodels.SurveyResult`][].
    """
    if not isinstance(throw, bool):
        raise TypeError(f"`throw` must be True or False, got {throw!r}.")
    progress = check_flag("progress", progress)
    objectives = list(objectives) if isinstance(objectives, Sequence) else None
    if not objectives:
        raise ValueError(
            "`objectives` must be a non-empty sequence of objectives (one per "
            "configuration), e.g. `[obj.with_weights(w) for w in weights]`."
        )
    n = len(objectives)
    # One model per configuration as a list only: a tuple is a model (a pytree),
    # as `solve` takes it.
    models = list(model) if isinstance(model, list) else [model] * n
    if len(models) != n:
        raise ValueError(
            f"`model` has {len(models)} entries for {n} objectives: pass one model "
            "or one per configuration."
        )
    if isinstance(solver, list | tuple) and not hasattr(solver, "_fields"):
        solvers = [as_solver(x) for x in solver]  # (a NamedTuple is optax's)
        if len(solvers) != n:
            raise ValueError(
                f"`solver` has {len(solvers)} entries for {n} objectives: pass one "
                "solver or one per configuration."
            )
    else:
        solvers = [as_solver(solver)] * n
    # Each objective (callable), and its model where it checks one (`WithGains`).
    for i, (o, m) in enumerate(zip(objectives, models)):
        try:
            check_objective(o, m)
        except ValueError as e:
            hint = (
                ""
                if isinstance(model, list)
                else " (One model serves every configuration here: a survey over "
                "data sets with gains of their own takes one model per "
                "configuration, `model=[(image_model, gains_i), ...]`.)"
            )
            raise ValueError(f"configuration {i}: {e}{hint}") from None
    # Gains of different data sets: padded to one shape and table (given back
    # per configuration by `SurveyResult[i]`).
    configurations, gains_tables = stack_gains(list(zip(objectives, models, solvers)))
    objectives, models, solvers = (list(x) for x in zip(*configurations))
    solver = solvers[0]
    devices = survey_devices(objectives, devices)
    if not devices:
        raise ValueError("`devices` is empty.")
    if len(set(devices)) != len(devices):
        raise ValueError(
            f"`devices` lists a device more than once ({devices}): pass each once "
            "(a chunk is split over distinct devices)."
        )
    n_dev = len(devices)
    per_device = -(-n // n_dev)
    if chunk_size is None:
        chunk_size = min(per_device, 64)
    auto = isinstance(chunk_size, str) and chunk_size == "auto"
    if not auto and (
        isinstance(chunk_size, bool)
        or not isinstance(chunk_size, int | np.integer)
        or chunk_size < 1
    ):
        raise ValueError(
            f"`chunk_size` must be a positive int or 'auto', got {chunk_size!r}."
        )
    if not auto:
        chunk_size = int(chunk_size)
    check_memory_budget(memory_budget)

    shared, stacked = _split(configurations)
    dtype = _param_dtype(models[0], params)
    opts = make_options(max_steps, ftol, gtol, dtype)
    jac_chunk = 0
    if isinstance(solver, AbstractLeastSquaresSolver):
        jac_chunk = auto_chunk(
            objectives[0], models[0], params, solver.chunk_size, solver.memory_budget
        )

    mesh = Mesh(np.array(devices), (_AXIS,))
    rows = NamedSharding(mesh, PartitionSpec(_AXIS))
    replicated = NamedSharding(mesh, PartitionSpec())
    # The configurations as given: leaves that differ between them were already
    # stacked on the host (losing their sharding) by `_split`.
    leaves = jax.tree.leaves((objectives, shared, stacked))
    if any(eqx.is_array(x) and split_explicitly(x) for x in leaves):
        raise ValueError(
            "`objectives` hold rows split over a mesh with Explicit axes (a "
            "`ShardedChi2` on `jax.make_mesh`'s default mesh), which `survey`, "
            "splitting configurations over its own mesh, cannot combine with: "
            "build the sharded terms on a mesh with Auto axes "
            "(`jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * k)` or "
            "`jax.sharding.Mesh(devices, names)`), or solve each configuration with "
            "`solve`."
        )

    def place(x):
        if not eqx.is_array(x):
            return x
        sharding = getattr(x, "sharding", None)
        if isinstance(sharding, NamedSharding) and not sharding.is_fully_replicated:
            return x  # split over its rows by a sharded term: kept split
        return jax.device_put(x, replicated)

    shared_dev = jax.tree.map(place, shared)

    if auto:
        chunk_size = auto_chunk_size(
            _run_chunk,
            shared_dev,
            stacked,
            rows,
            n_dev,
            per_device,
            memory_budget,
            (opts, params, jac_chunk),
        )
    batch = chunk_size * n_dev
    n_chunks = -(-n // batch)

    def chunk_inputs(i):
        idx = np.arange(i * batch, (i + 1) * batch)
        idx = np.where(idx < n, idx, 0)  # pad the last chunk (same program)
        return jax.tree.map(lambda x: jax.device_put(x[idx], rows), stacked)

    record = {
        "max_steps": int(max_steps),
        "ftol": float(ftol),
        "gtol": float(gtol),
        "chunk_size": chunk_size,
        "devices": n_dev,
    }
    meta = None
    if checkpoint is not None:
        # Before any chunk runs: what cannot be fingerprinted is refused now.
        meta = {
            "n_configurations": n,
            "batch": batch,
            "n_chunks": n_chunks,
            "options": record,
            "fingerprint": fingerprint(shared, stacked, _selected(models[0], params)),
        }

    # The structure of one chunk's result (no compilation).
    out_shape = eqx.filter_eval_shape(
        _run_chunk, shared_dev, chunk_inputs(0), batch, opts, params, jac_chunk
    )
    # Array leaves are batched and saved; the others come back as they are.
    is_shape = lambda x: isinstance(x, jax.ShapeDtypeStruct)  # noqa: E731
    out_arrays, out_static = eqx.partition(out_shape, is_shape)
    out_leaves_shape, out_def = jax.tree.flatten(out_arrays)

    def assemble(leaves):
        return eqx.combine(jax.tree.unflatten(out_def, leaves), out_static)

    shapes = [(x.shape[1:], x.dtype) for x in out_leaves_shape]
    bar = _progress(n, progress)
    parts: list[list[np.ndarray]] = []
    computed, loaded = [], []
    folder = None if checkpoint is None else open_folder(checkpoint, meta)
    try:
        for i in range(n_chunks):
            real = min(batch, n - i * batch)
            held = range(i * batch, i * batch + real)
            leaves = None if folder is None else folder.load_chunk(i, held, shapes)
            if leaves is not None:
                loaded.append(i)
            else:
                sol = _run_chunk(
                    shared_dev, chunk_inputs(i), batch, opts, params, jac_chunk
                )
                sol = eqx.filter(sol, eqx.is_array)
                leaves = [np.asarray(x)[:real] for x in jax.tree.leaves(sol)]
                if folder is not None:
                    folder.save_chunk(i, held, leaves)
                computed.append(i)
                if callback is not None:
                    callback(i, assemble(leaves))
            parts.append(leaves)
            if throw:
                _raise_on_failure(assemble(leaves), i * batch)
            if bar is not None:
                bar.update(real)
    finally:
        if folder is not None:
            folder.close()
    if bar is not None:
        bar.close()
    joined = [
        asarray(np.concatenate([p[j] for p in parts]))
        for j in range(len(out_leaves_shape))
    ]
    obj0 = objectives[0]
    is_data = getattr(obj0, "is_data_term", None)
    names = getattr(obj0, "names", ())
    data_names = (
        tuple(nm for nm, d in zip(names, is_data) if d) if is_data is not None else ()
    )
    return SurveyResult(
        solutions=assemble(joined),
        data_names=data_names,
        chunk_size=chunk_size,
        computed_chunks=tuple(computed),
        loaded_chunks=tuple(loaded),
        gains_tables=gains_tables,
    )
