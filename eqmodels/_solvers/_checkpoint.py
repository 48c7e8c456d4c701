"""Survey checkpoints: a folder of finished chunks, and the fingerprint that tells
one survey's folder from another's."""

import contextlib
import functools
import hashlib
import json
import os
import pathlib
import re
import socket
import sys
import sysconfig
import time
import types

import equinox as eqx
import jax
import numpy as np


try:
    import fcntl
except ImportError:  # Windows: take-overs are not serialised
    fcntl = None

from .._atomic import atomic_open, atomic_write_bytes, TMP_PREFIX


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
    function by its qualified name, its code and, recursively, the values it
    closes over, its defaults and the globals it reads (an `optax.adam(0.01)`
    differs from an `optax.adam(0.5)` only there), never by its memory address; a
    user's object by its class's code, the globals its methods read, and its
    attributes (`__dict__` and `__slots__`). An object that can be described only
    by its identity is refused (`ValueError`): its data would escape the
    fingerprint."""
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
    if isinstance(x, set | frozenset):
        return f"{type(x).__name__}(" + ",".join(sorted(sub(y) for y in x)) + ")"
    if isinstance(x, functools.partial):
        return f"partial({sub(x.func)},{sub(x.args)},{sub(x.keywords)})"
    if isinstance(x, types.MethodType):
        return f"method({sub(x.__func__)},{sub(x.__self__)})"
    if isinstance(x, types.FunctionType) and _type_checker_wrapper(x):
        # A runtime type checker's wrapper (jaxtyping's import hook): the function
        # it checks, not its bookkeeping (which describes itself by address).
        return sub(x.__wrapped__)
    if isinstance(x, types.FunctionType):
        names = _names_read(x)
        cells = tuple(
            _module_view(c.cell_contents, names) if _has_contents(c) else None
            for c in x.__closure__ or ()
        )
        name = f"{x.__module__}.{x.__qualname__}"
        return (
            f"function({name}{_code_digest(x)},{sub(cells)},{sub(x.__defaults__)},"
            f"{sub(x.__kwdefaults__)},{sub(_globals_read(x))})"
        )
    wrapped = getattr(x, "__wrapped__", None)  # jax.jit'ed functions
    if wrapped is not None:
        return f"{type(x).__name__}({sub(wrapped)})"
    if isinstance(x, eqx.Module):
        leaves, treedef = jax.tree.flatten(x)
        return f"{_describe_structure(treedef, depth + 1, seen)}({sub(tuple(leaves))})"
    if isinstance(x, types.ModuleType):
        return f"module({x.__name__})"
    if isinstance(x, type):
        return f"type({x.__module__}.{x.__qualname__})"
    if not _from_a_library(type(x)):
        # A user's plain object: its attributes hold its data, its class's code
        # (and the globals that code reads) what it does with them.
        state = dict(getattr(x, "__dict__", None) or {})
        for klass in type(x).__mro__:
            for slot in _slots(klass):
                if slot not in ("__dict__", "__weakref__") and hasattr(x, slot):
                    state[f"slot:{slot}"] = getattr(x, slot)
        return (
            f"{type(x).__module__}.{type(x).__qualname__}{_code_digest(type(x))}"
            f"({sub(_class_globals(type(x)))},{sub(state)})"
        )
    # A library's object, such as a `jax.sharding.Mesh`, by its repr (its
    # `__dict__` may fill with caches as it is used) — unless that repr says no
    # more than its identity.
    text = repr(x)
    if _ADDRESS.search(text):
        raise ValueError(
            f"the survey holds a {type(x).__module__}.{type(x).__qualname__} "
            f"({_strip_addresses(text)}) that cannot be fingerprinted (it describes "
            "itself by its memory address only), so a checkpoint folder could not "
            "tell its results from another's: hold its data in an Equinox module "
            "or a function's closure, or run the survey without `checkpoint=`."
        )
    return text


_TYPE_CHECKERS = ("jaxtyping", "beartype", "typeguard")


def _type_checker_wrapper(fn: types.FunctionType) -> bool:
    """Whether `fn` is a runtime type checker's wrapper of a function."""
    if not isinstance(getattr(fn, "__wrapped__", None), types.FunctionType):
        return False
    file = fn.__code__.co_filename
    return any(f"{os.sep}{name}{os.sep}" in file for name in _TYPE_CHECKERS)


def _slots(klass) -> tuple[str, ...]:
    slots = vars(klass).get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


_LIBRARY_CACHE: dict[str, bool] = {}


def _library_module(name: str) -> bool:
    """Whether the module `name` is a library's: one of `_LIBRARIES`, or any
    module installed in site-packages or the standard library (not a user's own
    code, whose data a fingerprint must see)."""
    if name in _LIBRARY_CACHE:
        return _LIBRARY_CACHE[name]
    if name.split(".")[0] in _LIBRARIES or name in ("builtins", "__builtin__"):
        out = True
    else:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if module is None:
            out = False
        elif file is None:  # built in, made at run time, or a namespace package
            out = name in sys.builtin_module_names
        else:
            file = os.path.realpath(file)
            out = any(file.startswith(p + os.sep) for p in _library_paths())
    _LIBRARY_CACHE[name] = out
    return out


@functools.cache
def _library_paths() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(
        {
            os.path.realpath(paths[k])
            for k in ("stdlib", "platstdlib", "purelib", "platlib")
            if k in paths
        }
    )


def _from_a_library(obj) -> bool:
    return _library_module(getattr(obj, "__module__", None) or "")


# Functions of these packages read no user data through their globals.
_LIBRARIES = ("jax", "jaxlib", "numpy", "equinox", "optax", "eqmodels", "scipy")


def _globals_read(fn: types.FunctionType) -> dict:
    """The module-level names a user's function (and the functions defined in it)
    reads, with their values: an objective written as a function of a global data
    term changes with that term. A user's module read as a global is described by
    the attributes of it that the function names (`mydata.vis`)."""
    if _from_a_library(fn):
        return {}
    names = _names_read(fn)
    g = fn.__globals__
    return {k: _module_view(g[k], names) for k in sorted(names) if k in g}


def _names_read(fn: types.FunctionType) -> set[str]:
    """The global and attribute names a function's code (nested code included)
    reads."""
    names, codes = set(), [fn.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return names


def _module_view(value, names: set[str]):
    """A user's module as the attributes of it that a function names
    (`mydata.vis`); anything else as it is."""
    if isinstance(value, types.ModuleType) and not _library_module(value.__name__):
        return (
            f"module({value.__name__})",
            {a: getattr(value, a) for a in sorted(names) if hasattr(value, a)},
        )
    return value


def _class_functions(typ: type) -> list[tuple[str, str, types.FunctionType]]:
    """The functions a user's class defines (and its user base classes): methods,
    static and class methods, property getters."""
    functions = []
    for klass in typ.__mro__:
        if _from_a_library(klass) or klass is object:
            continue
        for name, member in sorted(vars(klass).items()):
            member = getattr(member, "__func__", member)  # static/classmethod
            member = getattr(member, "fget", member)  # property
            if isinstance(member, types.FunctionType):
                functions.append((klass.__qualname__, name, member))
    return functions


def _class_globals(typ: type) -> dict:
    """The globals a user's class's functions read (`{}` for a library's)."""
    if _from_a_library(typ):
        return {}
    out = {}
    for owner, name, fn in _class_functions(typ):
        for k, v in _globals_read(fn).items():
            out[f"{fn.__module__}.{k}"] = v
    return out


def _describe_structure(treedef, depth: int = 0, seen=None) -> str:
    """A tree structure with its nodes' static data (an Equinox module's static
    fields: an `OptaxSolver`'s transformation) and, for a user's class, the code
    of its methods and the globals they read, described by `_describe`."""
    seen = set() if seen is None else seen
    data = treedef.node_data()
    if data is None:
        return "*"
    typ, aux = data
    children = ",".join(
        _describe_structure(c, depth + 1, seen) for c in treedef.children()
    )
    extra = ""
    if not _from_a_library(typ) and id(typ) not in seen:
        extra = _describe(_class_globals(typ), depth + 1, seen | {id(typ)})
    return (
        f"{typ.__module__}.{typ.__qualname__}{_code_digest(typ)}{extra}"
        f"[{_describe(aux, depth + 1, seen)}]({children})"
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
        functions = [(o, n, f.__code__) for o, n, f in _class_functions(obj)]
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


# ---------------------------------------------------------------------------
# The folder: `survey.json` (the survey's record: its fingerprint, written before
# the first chunk, and the finished chunks with their hashes), `survey.lock`
# (the process using the folder) and `chunk_NNNNN.npz` (each chunk's results, the
# configurations it holds, the survey's fingerprint and its content hash).

_FORMAT = 2  # of `survey.json` and the chunk files
RECORD = "survey.json"
LOCK = "survey.lock"
# The keys of a record that say which survey a folder belongs to.
_IDENTITY = (
    "format",
    "n_configurations",
    "batch",
    "n_chunks",
    "options",
    "fingerprint",
)


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be trusted (or is in use)."""


def _refuse(folder: pathlib.Path, what: str) -> CheckpointError:
    return CheckpointError(
        f"`checkpoint` folder {str(folder)!r}: {what} A survey's folder is read "
        "back only when every file in it is the one that survey wrote; use a new "
        "folder, or delete this one to start again."
    )


def _sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_record(folder: pathlib.Path) -> dict | None:
    path = folder / RECORD
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise _refuse(folder, f"its record {RECORD} is unreadable or corrupt ({e}).")
    if not isinstance(record, dict) or not all(k in record for k in _IDENTITY[1:]):
        raise _refuse(
            folder, f"its record {RECORD} is corrupt (not a survey's record)."
        )
    if record.get("format") != _FORMAT:
        raise _refuse(
            folder,
            f"its record {RECORD} was written by another version of eqmodels "
            f"(format {record.get('format')!r}, this one writes {_FORMAT}).",
        )
    chunks = record.get("chunks", {})
    if not isinstance(chunks, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("sha256"), str)
        for v in chunks.values()
    ):
        raise _refuse(folder, f"its record {RECORD} is corrupt (its chunk list).")
    return record


def _write_record(folder: pathlib.Path, record: dict) -> None:
    atomic_write_bytes(folder / RECORD, json.dumps(record, indent=1).encode())


def _chunk_files(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(folder.glob("chunk_*.npz"))


def open_locked(path: pathlib.Path, lock: "_Lock", check, record: str) -> None:
    """Take `lock`, remove the temporary files of writes a kill cut off (of the
    record file `record` and of `.npz` files: the folder is this process's now)
    and run `check()`; the lock is released again if anything fails. Shared by
    the survey's and `sample`'s folders."""
    lock.acquire()
    try:
        for tmp in path.glob(f"{TMP_PREFIX}*"):
            if tmp.name.endswith(("-" + record, ".npz")):
                with contextlib.suppress(OSError):
                    tmp.unlink()
        check()
    except BaseException:
        lock.release()
        raise


class Folder:
    """An open checkpoint folder: locked by this process, its record checked
    against this survey's. `close()` releases the lock."""

    def __init__(self, path: pathlib.Path, meta: dict):
        self.path = path
        self.meta = {"format": _FORMAT, **meta}
        self.record: dict = {}
        self._lock = _Lock(path / LOCK)

    def open(self) -> "Folder":
        open_locked(self.path, self._lock, self._check, RECORD)
        return self

    def close(self) -> None:
        self._lock.release()

    def _check(self) -> None:
        folder = self.path
        old = _read_record(folder)
        files = _chunk_files(folder)
        if old is None:
            if files:
                raise _refuse(
                    folder,
                    f"it holds chunk files ({files[0].name}, ...) but no record "
                    f"{RECORD} saying which survey wrote them.",
                )
        else:
            same = all(old.get(k) == self.meta.get(k) for k in _IDENTITY)
            if not same and (files or old.get("chunks")):
                raise CheckpointError(
                    f"`checkpoint` folder {str(folder)!r} holds another survey "
                    f"({_differences(old, self.meta)}): use a new folder, or "
                    "delete it to start again."
                )
            if same:
                self.record = old
                for key in sorted(old.get("chunks", {})):
                    if not (folder / f"chunk_{key}.npz").exists():
                        raise _refuse(
                            folder,
                            f"chunk_{key}.npz is missing ({RECORD} records it "
                            "finished).",
                        )
        if not self.record:
            # The fingerprint is on disk before the first chunk is.
            self.record = {**self.meta, "chunks": {}}
            _write_record(folder, self.record)

    def chunk_path(self, i: int) -> pathlib.Path:
        return self.path / f"chunk_{i:05d}.npz"

    def load_chunk(
        self, i: int, configurations: range, shapes
    ) -> list[np.ndarray] | None:
        """Chunk `i`'s result leaves, checked (`None`: not finished yet). `shapes`:
        the `(shape, dtype)` of each leaf for one configuration."""
        path = self.chunk_path(i)
        if not path.exists():
            return None
        name = path.name
        try:
            # An open file of our own: `np.load` of a path leaks its handle when
            # the file is no zip.
            with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as f:
                content = {k: f[k] for k in f.files}
        except Exception as e:  # noqa: BLE001 - zip, npy and OS errors alike
            raise _refuse(
                self.path,
                f"{name} is unreadable, truncated or corrupt "
                f"({type(e).__name__}: {e}).",
            ) from None
        n = len(shapes)
        expected = {"configurations", "fingerprint", "content_sha256"} | {
            f"leaf_{j}" for j in range(n)
        }
        if set(content) != expected:
            raise _refuse(
                self.path,
                f"{name} is not a chunk of this survey (it holds "
                f"{sorted(content)[:6]}, expected {n} result leaves with the "
                "configurations, fingerprint and content hash).",
            )
        if str(content["fingerprint"]) != self.meta["fingerprint"]:
            raise _refuse(self.path, f"{name} holds results of another survey.")
        held = content["configurations"]
        want = np.arange(configurations.start, configurations.stop)
        if held.shape != want.shape or not np.array_equal(held, want):
            got = (
                f"{int(held[0])}..{int(held[-1])}"
                if held.ndim == 1 and held.size
                else f"{held.size} entries"
            )
            raise _refuse(
                self.path,
                f"{name} holds configurations {got}, not "
                f"{want[0]}..{want[-1]} (a chunk file renamed or swapped).",
            )
        leaves = [content[f"leaf_{j}"] for j in range(n)]
        for j, (x, (shape, dtype)) in enumerate(zip(leaves, shapes)):
            if x.shape != (len(want), *shape) or x.dtype != dtype:
                raise _refuse(
                    self.path,
                    f"{name}'s result leaf {j} is {x.dtype}{list(x.shape)}, not "
                    f"{np.dtype(dtype)}{[len(want), *shape]}.",
                )
        if _content_hash(leaves, held, self.meta["fingerprint"]) != str(
            content["content_sha256"]
        ):
            raise _refuse(
                self.path, f"{name}'s content does not match its hash (corrupt)."
            )
        key = f"{i:05d}"
        digest = _sha256_file(path)
        recorded = self.record["chunks"].get(key)
        if recorded is None:  # written, and killed before it was recorded
            self._record_chunk(key, configurations, digest)
        elif recorded["sha256"] != digest:
            raise _refuse(
                self.path,
                f"{name} is not the file this survey wrote (its hash differs from "
                f"the one {RECORD} records).",
            )
        return leaves

    def save_chunk(self, i: int, configurations: range, leaves) -> None:
        """Write chunk `i` (atomically: a killed process leaves none, or a whole
        one) and record it."""
        held = np.arange(configurations.start, configurations.stop)
        fp = self.meta["fingerprint"]
        content = {f"leaf_{j}": np.asarray(x) for j, x in enumerate(leaves)}
        path = self.chunk_path(i)
        with atomic_open(path, "wb") as f:
            np.savez(
                f,
                configurations=held,
                fingerprint=np.asarray(fp),
                content_sha256=np.asarray(_content_hash(leaves, held, fp)),
                **content,
            )
        self._record_chunk(f"{i:05d}", configurations, _sha256_file(path))

    def _record_chunk(self, key: str, configurations: range, digest: str) -> None:
        chunks = {
            **self.record["chunks"],
            key: {
                "configurations": [configurations.start, configurations.stop],
                "sha256": digest,
            },
        }
        self.record = {**self.record, "chunks": chunks}
        _write_record(self.path, self.record)


def _content_hash(leaves, configurations, fp: str) -> str:
    h = hashlib.sha256(fp.encode())
    for a in (configurations, *leaves):
        a = np.ascontiguousarray(np.asarray(a))
        h.update(f"{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


class _Lock:
    """`survey.lock`: created exclusively (`O_EXCL`) by the process using the
    folder, holding its pid and host name; removed when the survey returns or
    raises. A lock left by a process that no longer runs on this host (one killed
    with SIGKILL) is stale and taken over; one of another host, or of a running
    process, refuses the folder."""

    def __init__(self, path: pathlib.Path, what: str = "survey"):
        self.path = path
        self.what = what  # who uses such folders, in messages
        self.held = False
        self.mine = json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
        )

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(self.mine)
            f.flush()
            os.fsync(f.fileno())
        return True

    def _owner(self) -> dict | None:
        """The lock's holder, or None if the file is gone or unreadable."""
        try:
            owner = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return None
        return owner if isinstance(owner, dict) else None

    def acquire(self) -> None:
        folder, lock, what = self.path.parent, self.path.name, self.what
        for _ in range(3):
            if self._create():
                self.held = True
                return
            owner = self._owner()
            if owner == {}:  # released meanwhile
                continue
            if owner is None:
                raise CheckpointError(
                    f"`checkpoint` folder {str(folder)!r}: its lock {lock} is "
                    f"unreadable: if no {what} runs on this folder, delete it."
                )
            pid, host = owner.get("pid"), owner.get("host")
            if host != socket.gethostname() or not isinstance(pid, int):
                raise CheckpointError(
                    f"`checkpoint` folder {str(folder)!r} is in use by process "
                    f"{pid} on {host} ({lock}): wait for that {what}, or use "
                    f"another folder (if it no longer runs, delete {lock})."
                )
            if pid == os.getpid() or _alive(pid):
                raise CheckpointError(
                    f"`checkpoint` folder {str(folder)!r} is in use by "
                    f"{'this process' if pid == os.getpid() else f'process {pid}'} "
                    f"({lock}): two {what}s cannot share a folder; wait for it, or "
                    "use another folder."
                )
            self._take_over(owner)
        raise CheckpointError(
            f"`checkpoint` folder {str(folder)!r}: could not take its lock {lock}."
        )

    def _take_over(self, stale: dict) -> None:
        """Remove a dead process's lock, serialised with other processes doing
        the same (so that one of them cannot remove the lock another has just
        taken)."""
        guard = self.path.with_name(self.path.name + ".guard")
        with open(guard, "a") as g:
            if fcntl is not None:
                fcntl.flock(g.fileno(), fcntl.LOCK_EX)
            try:
                if self._owner() == stale:
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()
            finally:
                if fcntl is not None:
                    fcntl.flock(g.fileno(), fcntl.LOCK_UN)

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        try:
            if self.path.read_text() == self.mine:
                self.path.unlink()
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def open_folder(checkpoint, meta: dict) -> Folder:
    """The checkpoint folder (created), locked, its record `survey.json` checked
    or written; a folder holding finished chunks of another survey, in use by
    another survey, or with a file that is not the one its survey wrote is
    refused. Call `close()` on the result when done."""
    folder = pathlib.Path(checkpoint)
    if folder.exists() and not folder.is_dir():
        raise ValueError(
            f"`checkpoint` {str(folder)!r} is a file: pass a folder (it is created "
            "if missing)."
        )
    folder.mkdir(parents=True, exist_ok=True)
    return Folder(folder, meta).open()
