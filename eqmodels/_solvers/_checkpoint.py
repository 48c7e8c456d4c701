"""Survey checkpoints: a folder of finished chunks, and the fingerprint that tells
one survey's folder from another's."""

import functools
import hashlib
import json
import os
import pathlib
import re
import types

import equinox as eqx
import jax
import numpy as np


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


def fingerprint(shared, stacked, spec) -> str:
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
    since. The code, not its position: a comment added above it
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


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
    # A name of this process's own, so that two processes writing into one
    # folder do not remove each other's temporary file.
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


def open_folder(checkpoint, meta: dict) -> pathlib.Path:
    """The checkpoint folder (created), its record `survey.json` written; a folder
    holding finished chunks of another survey is refused."""
    folder = pathlib.Path(checkpoint)
    if folder.exists() and not folder.is_dir():
        raise ValueError(
            f"`checkpoint` {str(folder)!r} is a file: pass a folder (it is created "
            "if missing)."
        )
    folder.mkdir(parents=True, exist_ok=True)
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
    return folder


def chunk_path(folder: pathlib.Path | None, i: int) -> pathlib.Path | None:
    return None if folder is None else folder / f"chunk_{i:05d}.npz"


def load_chunk(path: pathlib.Path, n_leaves: int) -> list[np.ndarray]:
    """The result leaves of a finished chunk."""
    with np.load(path) as f:
        return [f[f"leaf_{j}"] for j in range(n_leaves)]


def save_chunk(path: pathlib.Path, leaves) -> None:
    """Write a chunk's result leaves (atomically: a killed process leaves none)."""
    _save_npz(path, leaves)
