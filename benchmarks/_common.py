"""Helpers shared by the benchmarks in this folder (timing, memory, bandwidth, BLAS
control, environment record, JSON and tables).

Import it from a benchmark script as `import _common` (the script's folder is on
`sys.path` when it runs as `python benchmarks/<name>.py`).

This module imports neither numpy nor jax at import time: a benchmark must be able
to set BLAS environment variables (`prepare_blas_env`) *before* numpy is loaded,
because OpenBLAS reads them once, when the library is loaded.

Conventions used by every benchmark here:

- A timed callable takes no arguments and returns its result; `time_call` blocks on
  it (`jax.block_until_ready` on every JAX leaf), so asynchronous dispatch on a GPU
  is never mistaken for speed. The first call (the warm-up) includes compilation
  and is reported separately.
- Times are reported as the median (the figure ratios are computed from) and the
  minimum of the repeats.
- Bandwidth follows the STREAM convention: a copy of `B` bytes moves `2·B` bytes
  (one read, one write).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import datetime
import json
import math
import os
import pathlib
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any


# ---------------------------------------------------------------------------
# BLAS environment and introspection
# ---------------------------------------------------------------------------

#: Variables that pin OpenBLAS to a kernel or cache size chosen for another machine.
OPENBLAS_PINNING_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def prepare_blas_env(
    threads: int | None, *, unset_pinning: bool = True
) -> dict[str, Any]:
    """Set the BLAS environment for this process. Call it before numpy is imported.

    **Arguments:**

    - `threads`: value for `OPENBLAS_NUM_THREADS` / `MKL_NUM_THREADS` (the size of
      the BLAS thread pool); `None` leaves them as they are.
    - `unset_pinning`: remove `OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE` so that
      OpenBLAS picks the kernel for the CPU it runs on.

    **Returns:** a record of what was changed (for the JSON output), including
    `numpy_already_imported`: if true the changes came too late for numpy's BLAS.
    """
    record: dict[str, Any] = {
        "numpy_already_imported": "numpy" in sys.modules,
        "set": {},
        "removed": {},
    }
    if threads is not None:
        for name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(int(threads))
            record["set"][name] = str(int(threads))
    if unset_pinning:
        for name in OPENBLAS_PINNING_VARS:
            if name in os.environ:
                record["removed"][name] = os.environ.pop(name)
    return record


def _loaded_blas_paths() -> list[str]:
    """Paths of loaded shared libraries that look like OpenBLAS (Linux only)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/") and ".so" in p)


def _openblas_symbol(lib, stem: str):
    """`stem` (e.g. `openblas_get_corename`) under the names OpenBLAS builds use:
    plain, `scipy_`-prefixed and 64-bit-integer suffixed."""
    for prefix in ("", "scipy_"):
        for suffix in ("", "64_", "_64"):
            fn = getattr(lib, f"{prefix}{stem}{suffix}", None)
            if fn is not None:
                return fn
    return None


def _openblas_libs():
    libs = []
    for path in _loaded_blas_paths():
        try:
            libs.append((path, ctypes.CDLL(path)))
        except OSError:
            pass
    return libs


def blas_info() -> list[dict[str, Any]]:
    """What BLAS is loaded and how it is configured (kernel, threads).

    Uses `threadpoolctl` when installed, else asks OpenBLAS directly through
    `ctypes` (same symbols `threadpoolctl` reads). Import numpy first.
    """
    try:
        import threadpoolctl

        return [
            {**info, "source": "threadpoolctl"}
            for info in threadpoolctl.threadpool_info()
        ]
    except ImportError:
        pass
    out = []
    for path, lib in _openblas_libs():
        info: dict[str, Any] = {
            "internal_api": "openblas",
            "filepath": path,
            "source": "ctypes",
        }
        for key, stem, restype in (
            ("architecture", "openblas_get_corename", ctypes.c_char_p),
            ("version", "openblas_get_config", ctypes.c_char_p),
            ("num_threads", "openblas_get_num_threads", ctypes.c_int),
        ):
            fn = _openblas_symbol(lib, stem)
            if fn is not None:
                fn.restype = restype
                value = fn()
                info[key] = value.decode() if isinstance(value, bytes) else value
        out.append(info)
    return out


@contextlib.contextmanager
def blas_threads(n: int | None):
    """Limit the BLAS thread pools to `n` threads inside the block (`None`: no-op).

    Uses `threadpoolctl` when installed, else OpenBLAS's `openblas_set_num_threads`.
    Yields `True` if a limit could be applied.
    """
    if n is None:
        yield True
        return
    try:
        import threadpoolctl
    except ImportError:
        threadpoolctl = None
    if threadpoolctl is not None:
        with threadpoolctl.threadpool_limits(limits=int(n), user_api="blas"):
            yield True
        return
    setters, previous = [], []
    for _, lib in _openblas_libs():
        get = _openblas_symbol(lib, "openblas_get_num_threads")
        put = _openblas_symbol(lib, "openblas_set_num_threads")
        if get is None or put is None:
            continue
        get.restype = ctypes.c_int
        previous.append(get())
        put.argtypes = [ctypes.c_int]
        setters.append(put)
    for put in setters:
        put(int(n))
    try:
        yield bool(setters)
    finally:
        for put, p in zip(setters, previous):
            put(p)


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


def block(out):
    """Wait for every JAX array in `out` (no-op for numpy results)."""
    if "jax" in sys.modules:
        import jax

        leaves = [x for x in jax.tree_util.tree_leaves(out) if isinstance(x, jax.Array)]
        if leaves:
            jax.block_until_ready(leaves)
    return out


@dataclasses.dataclass
class Timing:
    """Result of `time_call` (all times in seconds)."""

    median: float
    min: float
    max: float
    repeats: int
    first: float  # the first (warm-up) call: includes compilation for jitted code
    samples: list[float]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class TimingConfig:
    """How long to time: at least `min_repeats` calls and `min_time` seconds,
    at most `max_repeats` calls, after `warmup` untimed calls."""

    warmup: int = 1
    min_repeats: int = 3
    max_repeats: int = 50
    min_time: float = 0.3


QUICK_TIMING = TimingConfig(warmup=1, min_repeats=3, max_repeats=20, min_time=0.2)
FULL_TIMING = TimingConfig(warmup=2, min_repeats=7, max_repeats=200, min_time=1.0)


def time_call(
    fn: Callable[[], Any], config: TimingConfig = TimingConfig()
) -> tuple[Timing, Any]:
    """Time `fn()` (blocking on its result).

    **Returns:** `(timing, result of the last call)`.
    """
    first = math.nan
    out = None
    for i in range(max(1, config.warmup)):
        t0 = time.perf_counter()
        out = block(fn())
        if i == 0:
            first = time.perf_counter() - t0
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < config.max_repeats and (
        len(samples) < config.min_repeats
        or time.perf_counter() - start < config.min_time
    ):
        t0 = time.perf_counter()
        out = block(fn())
        samples.append(time.perf_counter() - t0)
    timing = Timing(
        median=statistics.median(samples),
        min=min(samples),
        max=max(samples),
        repeats=len(samples),
        first=first,
        samples=samples,
    )
    return timing, out


def time_interleaved(
    fns: dict[str, Callable[[], Any]],
    config: TimingConfig = TimingConfig(),
    *,
    warm_cache: bool = False,
) -> dict[str, tuple[Timing, Any]]:
    """Time several callables round-robin (one call of each per round), so that
    drifting machine load affects them alike and their ratios stay fair; no
    callable finds its data still in cache from its own previous call.

    With `warm_cache=True` each round calls each callable twice in a row and
    times the second call: its data are in cache, as in a user's loop of calls to
    one function, and as [`time_call`][] times a baseline (consecutive calls).
    Without it, a small problem timed beside large ones (a dense matrix of tens
    of MB) is timed with its data evicted by theirs.

    Each callable is warmed up (compiled) first. Rounds continue until every
    callable has `min_repeats` samples and the rounds took `min_time` seconds per
    callable, or `max_repeats` rounds.

    **Returns:** `{name: (timing, result of its last call)}`.
    """
    names = list(fns)
    first: dict[str, float] = {}
    outs: dict[str, Any] = {}
    for name in names:
        for i in range(max(1, config.warmup)):
            t0 = time.perf_counter()
            outs[name] = block(fns[name]())
            if i == 0:
                first[name] = time.perf_counter() - t0
    samples: dict[str, list[float]] = {name: [] for name in names}
    start = time.perf_counter()
    rounds = 0
    while rounds < config.max_repeats and (
        rounds < config.min_repeats
        or time.perf_counter() - start < config.min_time * len(names)
    ):
        for name in names:
            if warm_cache:
                block(fns[name]())
            t0 = time.perf_counter()
            outs[name] = block(fns[name]())
            samples[name].append(time.perf_counter() - t0)
        rounds += 1
    return {
        name: (
            Timing(
                median=statistics.median(s),
                min=min(s),
                max=max(s),
                repeats=len(s),
                first=first[name],
                samples=s,
            ),
            outs[name],
        )
        for name, s in samples.items()
    }


# ---------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------


def peak_rss_bytes() -> int:
    """The process's peak resident set size so far (`ru_maxrss`), in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def current_rss_bytes() -> int | None:
    """The process's current resident set size in bytes (Linux; else `None`)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def device_memory_stats(device=None) -> dict[str, int] | None:
    """`device.memory_stats()` of a JAX device (GPUs report `bytes_in_use`,
    `peak_bytes_in_use`, `bytes_limit`, ...); `None` where the backend has none
    (CPU)."""
    import jax

    device = device if device is not None else jax.devices()[0]
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - backends without memory stats
        return None
    return {k: int(v) for k, v in stats.items()} if stats else None


# ---------------------------------------------------------------------------
# Bandwidth
# ---------------------------------------------------------------------------


def copy_bandwidth_numpy(nbytes: int, config: TimingConfig) -> dict[str, Any]:
    """Host memory bandwidth from `np.copyto` into a preallocated array
    (STREAM convention: `2·nbytes` moved per copy)."""
    import numpy as np

    src = np.ones(nbytes // 8, np.float64)
    dst = np.zeros_like(src)
    timing, _ = time_call(lambda: np.copyto(dst, src), config)
    return _bandwidth_record("numpy np.copyto (host)", src.nbytes, timing)


def copy_bandwidth_jax(
    nbytes: int, config: TimingConfig, device=None
) -> dict[str, Any]:
    """Device memory bandwidth from a jitted copy on a JAX device (STREAM
    convention). On CPU this includes the cost of faulting in a fresh output
    buffer on every call, so it can read well below the hardware figure; on a GPU
    the output comes from the allocator's pool."""
    import jax
    import jax.numpy as jnp

    device = device if device is not None else jax.devices()[0]
    src = jax.device_put(
        jnp.ones(nbytes // 8, jnp.float32 if _x32() else jnp.float64), device
    )
    copy = jax.jit(lambda a: a * 1.0)
    timing, _ = time_call(lambda: copy(src), config)
    return _bandwidth_record(f"jax jitted copy ({device.platform})", src.nbytes, timing)


def read_bandwidth_jax(
    nbytes: int, config: TimingConfig, device=None
) -> dict[str, Any]:
    """Read-only bandwidth of a jitted sum on a JAX device (`nbytes` moved)."""
    import jax
    import jax.numpy as jnp

    device = device if device is not None else jax.devices()[0]
    src = jax.device_put(
        jnp.ones(nbytes // 8, jnp.float32 if _x32() else jnp.float64), device
    )
    total = jax.jit(jnp.sum)
    timing, _ = time_call(lambda: total(src), config)
    record = _bandwidth_record(
        f"jax jitted sum ({device.platform})", src.nbytes, timing
    )
    record["gbps"] = src.nbytes / timing.median / 1e9  # one read, no write
    record["gbps_best"] = src.nbytes / timing.min / 1e9
    record["bytes_per_call"] = src.nbytes
    return record


def _x32() -> bool:
    import jax

    return not jax.config.jax_enable_x64


def _bandwidth_record(method: str, nbytes: int, timing: Timing) -> dict[str, Any]:
    return {
        "method": method,
        "array_bytes": int(nbytes),
        "bytes_per_call": 2 * int(nbytes),
        "gbps": 2 * nbytes / timing.median / 1e9,
        "gbps_best": 2 * nbytes / timing.min / 1e9,
        "timing": timing.as_dict(),
    }


# ---------------------------------------------------------------------------
# Numerics
# ---------------------------------------------------------------------------


def rel_err(value, ref) -> float:
    """Max-norm relative difference `max|value − ref| / max|ref|` (inputs are
    anything numpy can read; JAX arrays are copied to the host)."""
    import numpy as np

    a = np.asarray(value, np.complex128 if np.iscomplexobj(value) else np.float64)
    b = np.asarray(ref, np.complex128 if np.iscomplexobj(ref) else np.float64)
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    return diff / scale if scale > 0 else diff


# ---------------------------------------------------------------------------
# Child processes (for memory measurements in a fresh process)
# ---------------------------------------------------------------------------

CHILD_MARKER = "@@BENCH-JSON@@"


def emit_child_result(obj: Any) -> None:
    """Print `obj` as the child's result (one marked JSON line on stdout)."""
    print(CHILD_MARKER + json.dumps(obj, default=_json_default), flush=True)


def run_child(
    argv: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 1200
) -> dict[str, Any]:
    """Run `python argv...` in a fresh process and return the JSON it emitted with
    `emit_child_result`; on failure, `{"error": ..., "stderr_tail": ...}`.

    The child does not preallocate GPU memory (`XLA_PYTHON_CLIENT_PREALLOCATE=false`
    unless `env` says otherwise): the parent already holds JAX's default 75 % of
    the card, and a child asking for as much fails to start cuBLAS."""
    full_env = dict(os.environ)
    full_env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    full_env.update(env or {})
    try:
        proc = subprocess.run(
            [sys.executable, *argv],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(CHILD_MARKER):
            return json.loads(line[len(CHILD_MARKER) :])
    return {
        "error": f"child exited with status {proc.returncode} and no result",
        "stderr_tail": proc.stderr[-2000:],
    }


# ---------------------------------------------------------------------------
# Environment record
# ---------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment_info() -> dict[str, Any]:
    """Machine, versions, backend and relevant environment variables."""
    import jax

    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    devices = jax.devices()
    env_names = (
        "OPENBLAS_NUM_THREADS",
        "OPENBLAS_CORETYPE",
        "OPENBLAS_L2_SIZE",
        "MKL_NUM_THREADS",
        "OMP_NUM_THREADS",
        "XLA_FLAGS",
        "JAX_PLATFORMS",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
    )
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus_available": cpus,
        "backend": jax.default_backend(),
        "devices": [f"{d.platform}:{d.device_kind}" for d in devices],
        "versions": {
            name: _version(name)
            for name in ("jax", "jaxlib", "jax-finufft", "equinox", "numpy", "eqmodels")
        },
        "x64": bool(jax.config.jax_enable_x64),
        "loadavg": loadavg(),
        "env": {name: os.environ.get(name) for name in env_names},
    }


def loadavg() -> list[float] | None:
    """1, 5 and 15 minute load averages (other processes competing for the cores
    make timings noisy: record it)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def is_gpu_backend() -> bool:
    """Whether JAX's default backend is an accelerator (GPU/TPU)."""
    import jax

    return jax.default_backend() not in ("cpu",)


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def _json_default(obj):
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:
        pass
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    if isinstance(obj, pathlib.Path):
        return str(obj)
    return repr(obj)


def write_json(path: str | os.PathLike, obj: Any) -> pathlib.Path:
    """Write `obj` as indented JSON, creating the parent folder on demand."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, default=_json_default, allow_nan=True)
        f.write("\n")
    return path


def format_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None
) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    rows = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]

    def line(cells):
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    out = [title] if title else []
    out += [line(headers), line(["-" * w for w in widths])]
    out += [line(row) for row in rows]
    return "\n".join(out)


def print_table(headers, rows, *, title: str | None = None) -> str:
    text = format_table(headers, rows, title=title)
    print(text, flush=True)
    return text


def fmt_time(seconds: float | None) -> str:
    """Seconds as a short string in ms (or µs below 0.1 ms, s above 10 s)."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 1e-4:
        return f"{seconds * 1e6:.1f}µs"
    if seconds >= 10:
        return f"{seconds:.1f}s"
    ms = seconds * 1e3
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def fmt_ratio(x: float | None, digits: int = 2) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.{digits}g}" if x < 10 else f"{x:.0f}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"
