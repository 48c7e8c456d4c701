"""`survey`: many reconstructions in one compiled program, chunked, split over
devices, checkpointed chunk by chunk."""

import functools
import hashlib
import json
import operator
import os
import pathlib
import re
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array, Float, Int, PyTree

from .._gains._survey import restore_gains, stack_gains
from .._numerics import asarray
from .._sharding._mesh import sharded_parts, split_explicitly
from .._tree import structure_difference
from ._common import is_real_float_array
from ._jacobian import (
    auto_chunk,
    check_memory_budget,
    DEFAULT_MEMORY_BUDGET,
    structure_key,
)
from ._solve import (
    _param_dtype,
    check_objective,
    make_options,
    Solution,
    solve_traced,
)
from ._solvers import AbstractLeastSquaresSolver, AbstractSolver, as_solver


_AXIS = "survey"  # the device mesh axis
_VMAP_AXIS = "survey_batch"  # the vmap axis (its loop condition is psum-reduced)


class SurveyResult(eqx.Module):
    """What [`eqmodels.survey`][] returns.

    - `solutions`: one [`eqmodels.Solution`][] whose leaves carry a leading axis of
      the `n` configurations, in the order given (`solutions.model`,
      `solutions.value`, `solutions.report["cphase"]`, `solutions.steps`, ...).
    - `data_names`: the report keys of the data terms (what `chi2` and `top_set`
      use).
    - `chunk_size`: configurations per device per chunk (as chosen for `"auto"`).
    - `computed_chunks`, `loaded_chunks`: which chunks this call computed and
      which it read back from the checkpoint folder.
    - `gains_tables`: `None`, or, when the configurations held station gains of
      different data sets, each configuration's gains tables (shapes, interval
      bounds, station names, bands). The survey runs such gains padded to one
      shape under placeholder tables (what `solutions.model` and a `callback`
      hold); `result[i]` gives configuration `i`'s gains back as its own.
    """

    solutions: Solution
    data_names: tuple[str, ...] = eqx.field(static=True)
    chunk_size: int = eqx.field(static=True)
    computed_chunks: tuple[int, ...] = eqx.field(static=True)
    loaded_chunks: tuple[int, ...] = eqx.field(static=True)
    gains_tables: tuple | None = eqx.field(static=True, default=None)

    def __len__(self) -> int:
        return int(np.shape(self.solutions.value)[0])

    def __getitem__(self, i: int) -> Solution:
        """The solution of configuration `i` (negative: from the end), its station
        gains, if any, on its own data set's tables."""
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError(
                f"index a survey's result by one configuration (an int), got "
                f"{type(i).__name__}; the whole batch is `result.solutions`."
            ) from None
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"configuration {i} of a survey of {n} configurations.")
        i %= n
        sol = jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, self.solutions)
        if self.gains_tables is None:
            return sol
        model = restore_gains(sol.model, self.gains_tables[i])
        return eqx.tree_at(lambda s: s.model, sol, model, is_leaf=lambda x: x is None)

    def chi2(self, names: Sequence[str] | None = None) -> Float[Array, " n"]:
        """The mean χ² over data terms per configuration (over `names`, default all
        data terms): the figure configurations are ranked by."""
        names = tuple(self.data_names if names is None else names)
        if not names and not self.solutions.report:
            raise ValueError(
                "no data terms to rank by: the objectives report no terms (bare "
                "terms, or callables without `report`). Wrap each term in an "
                "objective, `eqmodels.Objective([term])`, whose report names it, or "
                "rank by `solutions.value`."
            )
        if not names:
            raise ValueError(
                "no data terms to rank by: pass `names` (report keys), e.g. "
                f"`chi2(['cphase', 'logcamp'])`; the keys are "
                f"{tuple(self.solutions.report)}."
            )
        missing = [n for n in names if n not in self.solutions.report]
        if missing:
            raise ValueError(
                f"`names` {missing} are not report keys {tuple(self.solutions.report)}."
            )
        return jnp.mean(jnp.stack([self.solutions.report[n] for n in names]), axis=0)

    def ranking(self, names: Sequence[str] | None = None) -> Int[Array, " n"]:
        """Configuration indices, best (lowest `chi2`) first."""
        return jnp.argsort(self.chi2(names))

    def top_set(
        self, thresholds: float | dict[str, float], names: Sequence[str] | None = None
    ) -> np.ndarray:
        """The "top set": configurations whose χ² are all below thresholds, ranked.

        **Arguments:**

        - `thresholds`: one threshold for every data term, or `{name: threshold}`.
        - `names`: the data terms a scalar threshold applies to (default all).

        **Returns:** indices of the selected configurations, best first (by the
        mean χ² of the data terms among the thresholds' keys; of all data terms if
        there are none).
        """
        if not isinstance(thresholds, dict):
            names = tuple(self.data_names if names is None else names)
            thresholds = {n: float(thresholds) for n in names}
        for n in thresholds:
            if n not in self.solutions.report:
                raise ValueError(
                    f"threshold for {n!r}, which is not a report key "
                    f"{tuple(self.solutions.report)}."
                )
        ok = np.ones(len(self), bool)
        for n, t in thresholds.items():
            ok &= np.asarray(self.solutions.report[n]) <= t
        # Ranked by the data terms' χ² among the thresholds (a regularizer's
        # threshold selects, but its penalty is no χ²), else by all data terms.
        ranked = tuple(n for n in thresholds if n in self.data_names)
        order = np.asarray(self.ranking(ranked or None))
        return order[ok[order]]


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


def _differences(old: dict, new: dict) -> str:
    """What differs between two checkpoint records, in words."""
    out = []
    if old.get("fingerprint") != new.get("fingerprint"):
        out.append(
            "other configurations: objectives, models, solvers or optimised leaves"
        )
    if old.get("n_configurations") != new.get("n_configurations"):
        out.append(
            f"{old.get('n_configurations')} configurations there, "
            f"{new.get('n_configurations')} here"
        )
    o, n = old.get("options", {}), new.get("options", {})
    for k in sorted(set(o) | set(n)):
        if o.get(k) != n.get(k):
            out.append(f"{k} {o.get(k)!r} there, {n.get(k)!r} here")
    return "; ".join(out) or "a record of another version"


def _fingerprint(shared, stacked, spec) -> str:
    """A digest of the configurations that decide a survey's results: the shared
    and stacked configurations (objectives, models, solvers: array leaves by their
    bytes, everything else by `_describe`) and which model leaves are optimised
    (`spec`)."""
    h = hashlib.sha256()
    for tree in (shared, stacked, spec):
        leaves, treedef = jax.tree.flatten(tree)
        h.update(_describe_structure(treedef).encode())
        for x in leaves:
            if eqx.is_array(x):
                a = np.ascontiguousarray(np.asarray(x))
                h.update(f"{a.shape}{a.dtype}".encode())
                h.update(a.tobytes())
            else:
                h.update(_describe(x).encode())
    return h.hexdigest()


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MAX_DEPTH = 100


def _strip_addresses(text: str) -> str:
    return _ADDRESS.sub("", text)


def _describe(x, depth: int = 0, seen=None) -> str:
    """A description of a non-array leaf that is the same in every process: a
    function by its qualified name and, recursively, the values it closes over and
    its defaults (an `optax.adam(0.01)` differs from an `optax.adam(0.5)` only
    there), never by its memory address."""
    seen = set() if seen is None else seen
    if id(x) in seen:  # a cycle
        return "..."
    if depth > _MAX_DEPTH:
        # Returning a constant here would let two different solvers (an optax
        # schedule's rate sits some 15 levels down) share a checkpoint folder.
        raise ValueError(
            f"the survey's settings nest deeper than {_MAX_DEPTH} levels (at a "
            f"{type(x).__name__}), too deep to fingerprint its checkpoints: run it "
            "without `checkpoint=`, or with a flatter solver."
        )
    if eqx.is_array(x) or isinstance(x, np.generic):
        a = np.ascontiguousarray(np.asarray(x))
        return f"array{a.shape}{a.dtype}:{hashlib.sha256(a.tobytes()).hexdigest()}"
    if x is None or isinstance(x, bool | int | float | complex | str | bytes):
        return repr(x)
    seen = seen | {id(x)}
    sub = lambda y: _describe(y, depth + 1, seen)  # noqa: E731
    if isinstance(x, list | tuple):
        return f"{type(x).__name__}(" + ",".join(sub(y) for y in x) + ")"
    if isinstance(x, dict):
        items = sorted((repr(k), sub(v)) for k, v in x.items())
        return "dict(" + ",".join(f"{k}:{v}" for k, v in items) + ")"
    if isinstance(x, functools.partial):
        return f"partial({sub(x.func)},{sub(x.args)},{sub(x.keywords)})"
    if isinstance(x, types.MethodType):
        return f"method({sub(x.__func__)},{sub(x.__self__)})"
    if isinstance(x, types.FunctionType):
        cells = tuple(
            c.cell_contents if _has_contents(c) else None for c in x.__closure__ or ()
        )
        name = f"{x.__module__}.{x.__qualname__}"
        return (
            f"function({name}{_code_digest(x)},{sub(cells)},{sub(x.__defaults__)},"
            f"{sub(_globals_read(x))})"
        )
    wrapped = getattr(x, "__wrapped__", None)  # jax.jit'ed functions
    if wrapped is not None:
        return f"{type(x).__name__}({sub(wrapped)})"
    if isinstance(x, eqx.Module):
        leaves, treedef = jax.tree.flatten(x)
        return f"{_describe_structure(treedef)}({sub(tuple(leaves))})"
    if isinstance(x, types.ModuleType):
        return f"module({x.__name__})"
    if isinstance(x, type):
        return f"type({x.__module__}.{x.__qualname__})"
    state = getattr(x, "__dict__", None)
    if isinstance(state, dict) and not _from_a_library(type(x)):
        # A user's plain object: its attributes hold its data. (A library's, such
        # as a `jax.sharding.Mesh`, is described by its repr: its `__dict__` may
        # fill with caches as it is used.)
        return f"{type(x).__module__}.{type(x).__qualname__}({sub(state)})"
    return _strip_addresses(repr(x))


def _from_a_library(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] in _LIBRARIES


# Functions of these packages read no user data through their globals.
_LIBRARIES = ("jax", "jaxlib", "numpy", "equinox", "optax", "eqmodels", "scipy")


def _globals_read(fn: types.FunctionType) -> dict:
    """The module-level names a user's function (and the functions defined in it)
    reads, with their values: an objective written as a function of a global data
    term changes with that term."""
    if _from_a_library(fn):
        return {}
    names, codes = set(), [fn.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    g = fn.__globals__
    return {k: g[k] for k in sorted(names) if k in g}


def _describe_structure(treedef) -> str:
    """A tree structure with its nodes' static data (an Equinox module's static
    fields: an `OptaxSolver`'s transformation) described by `_describe`."""
    data = treedef.node_data()
    if data is None:
        return "*"
    typ, aux = data
    children = ",".join(_describe_structure(c) for c in treedef.children())
    return (
        f"{typ.__module__}.{typ.__qualname__}{_code_digest(typ)}"
        f"[{_describe(aux)}]({children})"
    )


def _code_digest(obj) -> str:
    """`@<digest>` of a user's function's or class's code (a class's: the code of
    the functions it defines, its `__call__` among them), `""` for a library's: a
    checkpoint folder must not serve results of a model whose code has changed
    since (from a review). The code, not its position: a comment added above it
    keeps the digest."""
    if _from_a_library(obj):
        return ""
    if isinstance(obj, type):
        functions = []
        for klass in obj.__mro__:
            if _from_a_library(klass) or klass is object:
                continue
            for name, member in sorted(vars(klass).items()):
                member = getattr(member, "__func__", member)  # static/classmethod
                member = getattr(member, "fget", member)  # property
                if isinstance(member, types.FunctionType):
                    functions.append((klass.__qualname__, name, member.__code__))
    elif isinstance(obj, types.FunctionType):
        functions = [("", "", obj.__code__)]
    else:
        return ""
    h = hashlib.sha256()
    for owner, name, code in functions:
        h.update(f"{owner}.{name}:{_code_text(code)}".encode())
    return "@" + h.hexdigest()[:16]


def _code_text(code: types.CodeType) -> str:
    """A code object's instructions, constants and names (nested code included),
    without file names or line numbers."""
    consts = ",".join(
        _code_text(c) if isinstance(c, types.CodeType) else repr(c)
        for c in code.co_consts
    )
    return f"{code.co_code.hex()}|{consts}|{code.co_names}|{code.co_varnames}"


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


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


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _TextProgress(total)
    return tqdm(total=total, unit="config", desc="survey")


class _TextProgress:
    def __init__(self, total):
        self.total, self.n = total, 0

    def update(self, k):
        self.n += k
        print(f"survey: {self.n}/{self.total} configurations", file=sys.stderr)

    def close(self):
        pass


def _term_meshes(objectives) -> list:
    """The meshes of the sharded terms and shared transforms in `objectives`."""
    return [x.mesh for x in sharded_parts(objectives)]


def _survey_devices(objectives, devices) -> list:
    """The devices a survey splits its configurations over: `devices`, else those
    of the objectives' sharded terms (their rows stay split over them), else every
    device. Sharded terms on other devices than `devices` are refused."""
    meshes = _term_meshes(objectives)
    if not meshes:
        return _local(list(jax.local_devices() if devices is None else devices))
    term_devices = list(meshes[0].devices.flat)
    if any(set(m.devices.flat) != set(term_devices) for m in meshes[1:]):
        raise ValueError(
            "the objectives' sharded terms are split over different sets of devices: "
            "build them on one mesh (or meshes of the same devices)."
        )
    if devices is not None and set(devices) != set(term_devices):
        raise ValueError(
            f"`devices` ({list(devices)}) are not the devices the sharded terms are "
            f"split over ({term_devices}): pass `devices=None` (the terms' devices), "
            "or build the terms on a mesh of the survey's devices."
        )
    return _local(term_devices)


def _local(devices: list) -> list:
    """`devices`, refused when some belong to other processes (`jax.distributed`):
    a survey gathers each chunk's results to its host and writes them there."""
    others = [d for d in devices if d.process_index != jax.process_index()]
    if others:
        raise ValueError(
            f"the survey's devices include {len(others)} of other processes "
            f"(process {jax.process_index()} of {jax.process_count()}): a survey "
            "runs one process's configurations on that process's devices. Give "
            "each process `devices=jax.local_devices()` (the default without "
            "sharded terms), sharded terms on a mesh of its local devices, its own "
            "configurations and its own `checkpoint` folder."
        )
    return devices


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
    same). A folder holding another survey is refused.

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

    **Returns:** a [`eqmodels.SurveyResult`][].
    """
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
    devices = _survey_devices(objectives, devices)
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
    # stacked on the host (losing their sharding) by `_split` (from a review).
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
        chunk_size = _auto_chunk(
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

    folder = None
    record = {
        "max_steps": int(max_steps),
        "ftol": float(ftol),
        "gtol": float(gtol),
        "chunk_size": chunk_size,
        "devices": n_dev,
    }
    if checkpoint is not None:
        folder = pathlib.Path(checkpoint)
        if folder.exists() and not folder.is_dir():
            raise ValueError(
                f"`checkpoint` {str(folder)!r} is a file: pass a folder (it is created "
                "if missing)."
            )
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "n_configurations": n,
            "batch": batch,
            "n_chunks": n_chunks,
            "options": record,
            "fingerprint": _fingerprint(shared, stacked, _selected(models[0], params)),
        }
        meta_path = folder / "survey.json"
        old = json.loads(meta_path.read_text()) if meta_path.exists() else None
        finished = [p for p in folder.glob("chunk_*.npz") if ".tmp" not in p.name]
        if old is not None and old != meta and finished:
            raise ValueError(
                f"`checkpoint` folder {str(folder)!r} holds another survey "
                f"({_differences(old, meta)}): use a new folder, or delete it to "
                "start again."
            )
        if old != meta:  # new, or a folder whose first call finished no chunk
            _atomic_write(meta_path, json.dumps(meta, indent=1).encode())

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

    bar = _progress(n, progress)
    parts: list[list[np.ndarray]] = []
    computed, loaded = [], []
    for i in range(n_chunks):
        real = min(batch, n - i * batch)
        path = None if folder is None else folder / f"chunk_{i:05d}.npz"
        if path is not None and path.exists():
            with np.load(path) as f:
                leaves = [f[f"leaf_{j}"] for j in range(len(out_leaves_shape))]
            loaded.append(i)
        else:
            sol = _run_chunk(
                shared_dev, chunk_inputs(i), batch, opts, params, jac_chunk
            )
            sol = eqx.filter(sol, eqx.is_array)
            leaves = [np.asarray(x)[:real] for x in jax.tree.leaves(sol)]
            if path is not None:
                _save_npz(path, leaves)
            computed.append(i)
            if callback is not None:
                callback(i, assemble(leaves))
        parts.append(leaves)
        if bar is not None:
            bar.update(real)
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


_MEMORY: dict = {}  # measured chunk memory, per problem structure and chunk size


def _auto_chunk(shared_dev, stacked, rows, n_dev, per_device, budget, rest) -> int:
    """The largest chunk (per device) whose temporary memory, modelled as
    `m0 + m1·chunk` from XLA's memory analysis of two compiled chunk sizes, fits
    `budget` bytes per device."""
    dyn, static = eqx.partition(shared_dev, eqx.is_array)

    def run(d, b, size):
        return _run_chunk(eqx.combine(d, static), b, size, *rest)

    def temp(c):
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(
                (c * n_dev, *x.shape[1:]), x.dtype, sharding=rows
            ),
            stacked,
        )
        analysis = (
            jax.jit(run, static_argnums=2)
            .lower(dyn, abstract, c * n_dev)
            .compile()
            .memory_analysis()
        )
        if analysis is None:
            return None
        return analysis.temp_size_in_bytes + analysis.output_size_in_bytes

    key = (structure_key(shared_dev, stacked, *rest), n_dev)

    def measured(c):
        if (key, c) not in _MEMORY:
            _MEMORY[(key, c)] = temp(c)
        return _MEMORY[(key, c)]

    c1, c2 = 1, 2
    b1, b2 = measured(c1), measured(c2)
    if b1 is None or b2 is None:  # no memory analysis on this backend
        return min(per_device, 64)
    m1 = max((b2 - b1) / (c2 - c1), 1.0)
    m0 = max(b1 - m1 * c1, 0.0)
    return int(np.clip((budget - m0) // m1, 1, per_device))


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
    # A name of this process's own: two processes writing into one folder
    # removed each other's temporary file (from a review).
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _save_npz(path: pathlib.Path, leaves) -> None:
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
    with open(tmp, "wb") as f:
        np.savez(f, **{f"leaf_{j}": x for j, x in enumerate(leaves)})
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
