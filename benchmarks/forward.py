"""Benchmark of the forward models: jitted `value_and_grad` of `VisChi2` w.r.t. the
image, for `DirectFT`, `SeparableFT` and `NUFFT`, against three yardsticks:

- (a) plain numpy the eht-imaging way: `A @ x` with a dense complex128 matrix, then
  `A.conj().T @ r` for the gradient (which copies the whole matrix on every call),
  in numpy's best configuration (`OPENBLAS_NUM_THREADS=1` by default, see
  `--blas-threads`);
- (b) the memory-bandwidth bound of the dense path: two reads of the (real + imag)
  matrix at the copy bandwidth measured in the same run;
- (c) the bare jax-finufft `nufft2` + `nufft1` pair on the same points (jitted), the
  physical limit of the `NUFFT` model.

It also measures the peak memory of `NUFFT` value_and_grad at 1024² pixels with 1e5
points in a fresh subprocess, and checks that every variant gives the same value and
gradient as the numpy reference (a fast-but-wrong path shows up as a large
difference).

Usage:

    python benchmarks/forward.py --quick          # < 2 min on 2 CPU cores
    python benchmarks/forward.py                  # full grid, npix 32-256, 1e3-1e5 pts
    python benchmarks/forward.py --dtype float32
    python benchmarks/forward.py --no-numpy --max-dense-gb 40   # e.g. on a GPU

See benchmarks/README.md for the method and how to read the output.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import pathlib
import sys
import time
import traceback
from typing import Any

import _common as C  # imports neither numpy nor jax (BLAS env is set first)


HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "forward.json"

# Targets from issue 2 ("Show").
TARGET_DIRECT_VS_BOUND = 1.5  # DirectFT time / (b) <= 1.5
TARGET_DIRECT_VS_NUMPY = 5.0  # ... which puts DirectFT >= 5x ahead of (a)
TARGET_EXACT_VS_NUMPY = 10.0  # fastest exact path >= 10x ahead of (a)
TARGET_NUFFT_VS_PAIR = 1.3  # NUFFT time / (c) <= 1.3
TARGET_PEAK_BYTES = 2e9  # NUFFT value_and_grad at 1024^2 x 1e5 points < 2 GB

PSIZE_UAS = 2.0  # pixel size; only |u|·psize matters for the benchmark
UV_FRACTION = 0.4  # |u|·psize, |v|·psize < 0.4: inside the grid's Nyquist limit
ANCHOR = (64, 7447)  # the reference size (M87 2017-04-11 lo band, raw rows)

SKIP_MEMORY = "skipped (memory)"
SKIP_NUMPY = "skipped (--no-numpy)"


# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
    return [int(float(t)) for t in text.split(",") if t.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="small grid, short timings")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    p.add_argument(
        "--eps",
        type=float,
        default=None,
        help="NUFFT tolerance (default 1e-12 in float64, 1e-6 in float32)",
    )
    p.add_argument("--npix", type=_int_list, default=None, help="e.g. 32,64,128,256")
    p.add_argument("--npoints", type=_int_list, default=None, help="e.g. 1e3,1e4,1e5")
    p.add_argument(
        "--no-anchor",
        action="store_true",
        help=f"do not add the issue's reference size {ANCHOR[0]}² x {ANCHOR[1]}",
    )
    p.add_argument(
        "--max-dense-gb",
        type=float,
        default=None,
        help="skip dense variants (numpy, DirectFT) whose matrix exceeds this many GB "
        "(1e9 bytes); default 4 (2 with --quick). numpy transiently needs twice it.",
    )
    p.add_argument(
        "--blas-threads",
        default="1",
        help="numpy's BLAS threads: one value, or a comma list to time each and keep "
        "the fastest (default 1: on 2 cores more threads oversubscribe)",
    )
    p.add_argument(
        "--keep-openblas-env",
        action="store_true",
        help="keep OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (by default they are removed "
        "so that OpenBLAS picks the kernel for this CPU)",
    )
    p.add_argument(
        "--omp-threads",
        type=int,
        default=None,
        help="set OMP_NUM_THREADS (FINUFFT's OpenMP pool) for the whole run; default: "
        "leave the environment as it is",
    )
    p.add_argument("--no-numpy", action="store_true", help="skip baseline (a)")
    p.add_argument(
        "--no-peak", action="store_true", help="skip the 1024² x 1e5 peak-memory run"
    )
    p.add_argument("--peak-npix", type=int, default=1024)
    p.add_argument("--peak-npoints", type=lambda s: int(float(s)), default=100_000)
    p.add_argument(
        "--bandwidth-mb",
        type=float,
        default=None,
        help="array size for the copy-bandwidth measurement (default 256 MB on CPU, "
        "2048 MB on a GPU)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="JSON path")
    p.add_argument("--peak-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.blas_threads = _int_list(args.blas_threads)
    if not args.blas_threads or min(args.blas_threads) < 1:
        p.error("--blas-threads takes positive integers, e.g. 1 or 1,2")
    if args.eps is None:
        args.eps = 1e-12 if args.dtype == "float64" else 1e-6
    if args.npix is None:
        args.npix = [32, 64, 128, 256]
    if args.npoints is None:
        args.npoints = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    if args.max_dense_gb is None:
        args.max_dense_gb = 2.0 if args.quick else 4.0
    return args


# ---------------------------------------------------------------------------
# Problems
# ---------------------------------------------------------------------------


def make_problem(npix: int, npoints: int, seed: int, dtype) -> dict[str, Any]:
    """Random points inside the Nyquist limit, a random positive image normalised to
    1 Jy, random data of the same order and noise."""
    import numpy as np

    import eqmodels as eqm

    rng = np.random.default_rng([seed, npix, npoints])
    grid = eqm.ImageGrid.from_fov(npix, npix * PSIZE_UAS)
    lim = UV_FRACTION / grid.psize
    # Points in the benchmark dtype; every variant (numpy included) sees these values.
    u = rng.uniform(-lim, lim, npoints).astype(dtype)
    v = rng.uniform(-lim, lim, npoints).astype(dtype)
    img = rng.uniform(0.05, 1.0, (npix, npix))
    img = (img / img.sum()).astype(dtype)
    vis = 0.05 * (rng.normal(size=npoints) + 1j * rng.normal(size=npoints))
    sigma = rng.uniform(0.5, 1.5, npoints) * 0.01
    return dict(grid=grid, u=u, v=v, img=img, vis=vis, sigma=sigma)


def numpy_dft_matrix(grid, u, v) -> Any:
    """`A[k, p] = sinc²(u psize) sinc²(v psize) exp(+2πi (u_k x_p + v_k y_p))`,
    complex128, pixels row-major, written from CONVENTIONS.md (independent of the
    package's own matrix build)."""
    import numpy as np

    ny, nx, psize = grid.ny, grid.nx, grid.psize
    x = (nx / 2 - 0.5 - np.arange(nx)) * psize
    y = (ny / 2 - 0.5 - np.arange(ny)) * psize
    xx, yy = np.tile(x, ny), np.repeat(y, nx)
    u = np.asarray(u, np.float64)
    v = np.asarray(v, np.float64)
    pulse = np.sinc(u * psize) ** 2 * np.sinc(v * psize) ** 2
    a = np.empty((u.size, ny * nx), np.complex128)
    rows = max(1, (64 << 20) // (16 * ny * nx))
    for s in range(0, u.size, rows):
        sl = slice(s, s + rows)
        a[sl] = np.exp(2j * np.pi * (np.outer(u[sl], xx) + np.outer(v[sl], yy)))
        a[sl] *= pulse[sl, None]
    return a


def numpy_value_and_grad(a, x, vis, sigma):
    """Chi² of visibilities and its gradient, the way eht-imaging computes them:
    `χ² = Σ |(V − A x)/σ|² / (2N)`, `∇χ² = −Re(A^H ((V − A x)/σ²)) / N`; the
    `A.conj()` copies the whole matrix on every call."""
    import numpy as np

    n = vis.size
    samples = a @ x
    chi2 = np.sum(np.abs((vis - samples) / sigma) ** 2) / (2 * n)
    wdiff = (vis - samples) / sigma**2
    grad = -np.real(a.conj().T @ wdiff) / n
    return chi2, grad


# ---------------------------------------------------------------------------
# Variants
# ---------------------------------------------------------------------------


def _loss(image, term):
    return term(image)


_VALUE_AND_GRAD = None


def value_and_grad_fn():
    """`jax.jit(jax.value_and_grad(term(image)))`, the term passed as an argument
    (never closed over, so that its arrays are not baked in as constants)."""
    global _VALUE_AND_GRAD
    if _VALUE_AND_GRAD is None:
        import jax

        _VALUE_AND_GRAD = jax.jit(jax.value_and_grad(_loss))
    return _VALUE_AND_GRAD


_PAIR = None


def finufft_pair_fn():
    """The bare jax-finufft pair a NUFFT value_and_grad needs: `c = nufft2(f)`,
    then `nufft1(c)` (same points, `iflag=-1`, same eps), jitted."""
    global _PAIR
    if _PAIR is None:
        import functools

        import jax
        import jax_finufft

        @functools.partial(jax.jit, static_argnames=("shape", "eps"))
        def pair(f, py, px, *, shape, eps):
            c = jax_finufft.nufft2(f, py, px, iflag=-1, eps=eps)
            g = jax_finufft.nufft1(shape, c, py, px, iflag=-1, eps=eps)
            return c, g

        _PAIR = pair
    return _PAIR


def prepare_numpy(prob, args):
    """Baseline (a): build the complex128 matrix; return `(record, fn)`."""
    import numpy as np

    grid = prob["grid"]
    nbytes = prob["u"].size * grid.npix * 16
    if args.no_numpy:
        return {"status": SKIP_NUMPY}, None
    if nbytes > args.max_dense_gb * 1e9:
        return {"status": SKIP_MEMORY, "matrix_bytes": nbytes}, None
    t0 = time.perf_counter()
    a = numpy_dft_matrix(grid, prob["u"], prob["v"])
    build = time.perf_counter() - t0
    x = np.asarray(prob["img"], np.float64).reshape(-1)
    vis, sigma = prob["vis"], prob["sigma"]

    def fn():
        return numpy_value_and_grad(a, x, vis, sigma)

    return {"matrix_bytes": nbytes, "build_s": build}, fn


def time_numpy(fn, args, timing_cfg):
    """Time (a) alone (not interleaved with JAX, whose idle threads could slow it),
    once per requested BLAS thread count; keep the fastest."""
    best, best_threads, out, per_threads = None, None, None, {}
    for threads in args.blas_threads:
        # A single value is already in the environment; a list is applied at run time.
        limit = None if len(args.blas_threads) == 1 else threads
        with C.blas_threads(limit) as applied:
            timing, res = C.time_call(fn, timing_cfg)
        per_threads[str(threads)] = {
            "median": timing.median,
            "min": timing.min,
            "limit_applied": applied,
        }
        if best is None or timing.median < best.median:
            best, best_threads, out = timing, threads, res
    return best, out, {"blas_threads": best_threads, "per_blas_threads": per_threads}


def prepare_model(name, prob, args):
    """`DirectFT`, `SeparableFT` or `NUFFT` inside a `VisChi2`; return
    `(record, fn)` with `fn()` = jitted value_and_grad w.r.t. the image."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import eqmodels as eqm

    grid, dtype = prob["grid"], np.dtype(args.dtype)
    if name == "DirectFT":
        nbytes = prob["u"].size * grid.npix * 2 * dtype.itemsize
        if nbytes > args.max_dense_gb * 1e9:
            return {"status": SKIP_MEMORY, "matrix_bytes": nbytes}, None
    t0 = time.perf_counter()
    if name == "DirectFT":
        model = eqm.DirectFT(grid, prob["u"], prob["v"], dtype=dtype)
    elif name == "SeparableFT":
        model = eqm.SeparableFT(grid, prob["u"], prob["v"], dtype=dtype)
    else:
        model = eqm.NUFFT(grid, prob["u"], prob["v"], eps=args.eps, dtype=dtype)
    term = jax.block_until_ready(eqm.VisChi2(model, prob["vis"], prob["sigma"]))
    build = time.perf_counter() - t0
    leaf_bytes = sum(
        x.nbytes for x in jax.tree_util.tree_leaves(term) if isinstance(x, jax.Array)
    )
    img = jax.device_put(jnp.asarray(prob["img"], dtype))
    vg = value_and_grad_fn()

    def fn():
        return vg(img, term)

    return {"build_s": build, "model_bytes": leaf_bytes}, fn


def prepare_pair(prob, args):
    """(c): the bare jax-finufft pair on the same points."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    grid, dtype = prob["grid"], np.dtype(args.dtype)
    ctype = jnp.complex64 if dtype == np.float32 else jnp.complex128
    psize = grid.psize
    py = jax.device_put(jnp.asarray(2 * math.pi * psize * prob["v"], dtype))
    px = jax.device_put(jnp.asarray(2 * math.pi * psize * prob["u"], dtype))
    f = jax.device_put(jnp.asarray(prob["img"], ctype))
    pair = finufft_pair_fn()

    def fn():
        return pair(f, py, px, shape=grid.shape, eps=args.eps)

    return {}, fn


def _guard(what, fn, *a):
    """Run `fn(*a)`; a failure is recorded, not fatal (e.g. a backend without a
    jax-finufft build)."""
    try:
        return fn(*a)
    except Exception as e:  # noqa: BLE001
        print(f"  {what} failed: {type(e).__name__}: {e}", flush=True)
        return {
            "status": "failed",
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(limit=4),
        }, None


def tolerance(name: str, args) -> float:
    """Largest max-norm relative difference accepted as 'the same numbers' (a
    wrong implementation is off by O(1))."""
    if args.dtype == "float32":
        return 1e-3
    if name == "NUFFT":
        return max(1e-9, 1e3 * args.eps)
    return 1e-9


def run_case(npix, npoints, args, timing_cfg, bandwidth) -> dict[str, Any]:
    import numpy as np

    prob = make_problem(npix, npoints, args.seed, np.dtype(args.dtype))
    case: dict[str, Any] = {"npix": npix, "npoints": npoints, "variants": {}}
    results: dict[str, Any] = {}

    # (a) numpy, timed on its own.
    rec, fn = _guard("numpy (a)", prepare_numpy, prob, args)
    if fn is not None:
        try:
            timing, out, extra = time_numpy(fn, args, timing_cfg)
            rec.update(
                status="ok", timing=timing.as_dict(), value=float(out[0]), **extra
            )
            results["numpy"] = (
                float(out[0]),
                np.asarray(out[1]).reshape(prob["grid"].shape),
            )
        except Exception as e:  # noqa: BLE001
            rec.update(status="failed", error=f"{type(e).__name__}: {e}")
        del fn
        gc.collect()
    case["variants"]["numpy"] = rec
    print(f"  numpy (a): {_status_text(rec)}", flush=True)

    # The JAX variants, built first, then timed round-robin.
    fns = {}
    for name in ("DirectFT", "SeparableFT", "NUFFT", "finufft_pair"):
        if name == "finufft_pair":
            rec, fn = _guard(name, prepare_pair, prob, args)
        else:
            rec, fn = _guard(name, prepare_model, name, prob, args)
        case["variants"][name] = rec
        if fn is not None:
            fns[name] = fn
    timed = {}
    while fns:
        try:
            timed.update(C.time_interleaved(fns, timing_cfg))
            break
        except Exception as e:  # noqa: BLE001 - find the failing one, drop it, retry
            bad = _first_failing(fns)
            if bad is None:
                raise
            print(f"  {bad} failed: {type(e).__name__}: {e}", flush=True)
            case["variants"][bad].update(
                status="failed",
                error=f"{type(e).__name__}: {e}",
                traceback=traceback.format_exc(limit=4),
            )
            del fns[bad]
    for name, (timing, out) in timed.items():
        rec = case["variants"][name]
        rec.update(status="ok", timing=timing.as_dict())
        if name != "finufft_pair":
            value, grad = out
            rec["value"] = float(value)
            results[name] = (float(value), np.asarray(grad, np.float64))
    del fns, timed
    gc.collect()
    for name in ("DirectFT", "SeparableFT", "NUFFT", "finufft_pair"):
        print(f"  {name}: {_status_text(case['variants'][name])}", flush=True)

    # (b): two reads of the real + imaginary matrix at the measured copy bandwidth.
    itemsize = np.dtype(args.dtype).itemsize
    bound_bytes = 2 * npoints * npix * npix * 2 * itemsize
    case["bound"] = {
        "bytes": bound_bytes,
        "gbps": bandwidth["gbps"],
        "seconds": bound_bytes / (bandwidth["gbps"] * 1e9),
        "seconds_best": bound_bytes / (bandwidth["gbps_best"] * 1e9),
    }

    # Agreement with the most trusted reference that ran.
    ref_name = next(
        (n for n in ("numpy", "DirectFT", "SeparableFT") if results.get(n)), None
    )
    case["reference"] = ref_name
    if ref_name is not None:
        ref_val, ref_grad = results[ref_name]
        for name in ("DirectFT", "SeparableFT", "NUFFT"):
            if results.get(name) is None or name == ref_name:
                continue
            val, grad = results[name]
            ev = abs(val - ref_val) / abs(ref_val)
            eg = C.rel_err(grad, ref_grad)
            rec = case["variants"][name]
            rec["err_value"], rec["err_grad"] = ev, eg
            rec["err"] = max(ev, eg)
            rec["err_tolerance"] = tolerance(name, args)
            rec["agrees"] = rec["err"] <= rec["err_tolerance"]
    if C.is_gpu_backend():
        case["device_memory"] = C.device_memory_stats()
    case["ratios"] = ratios(case, "median")
    case["ratios_min"] = ratios(case, "min")
    return case


def _first_failing(fns):
    for name, fn in fns.items():
        try:
            C.block(fn())
        except Exception:  # noqa: BLE001
            return name
    return None


def _status_text(rec) -> str:
    if rec.get("status") == "ok":
        t = rec["timing"]
        return f"{C.fmt_time(t['median'])} ms (first call {C.fmt_time(t['first'])} ms)"
    return rec.get("status", "?")


def _time(case, name, stat="median") -> float | None:
    rec = case["variants"].get(name, {})
    return rec["timing"][stat] if rec.get("status") == "ok" else None


def ratios(case, stat="median") -> dict[str, Any]:
    """The ratios of the tables from the `stat` ("median" or "min") of each
    variant's times; with "min", bound (b) uses the best copy bandwidth."""
    a = _time(case, "numpy", stat)
    d = _time(case, "DirectFT", stat)
    s = _time(case, "SeparableFT", stat)
    n = _time(case, "NUFFT", stat)
    c = _time(case, "finufft_pair", stat)
    b = case["bound"]["seconds" if stat == "median" else "seconds_best"]

    def div(x, y):
        return x / y if x is not None and y is not None and y > 0 else None

    exact = {k: t for k, t in (("DirectFT", d), ("SeparableFT", s)) if t is not None}
    best = min(exact, key=exact.get) if exact else None
    return {
        "numpy_over_DirectFT": div(a, d),
        "numpy_over_SeparableFT": div(a, s),
        "numpy_over_NUFFT": div(a, n),
        "fastest_exact": best,
        "numpy_over_fastest_exact": div(a, exact.get(best)) if best else None,
        "DirectFT_over_bound": div(d, b),
        "NUFFT_over_pair": div(n, c),
        "DirectFT_over_SeparableFT": div(d, s),
    }


# ---------------------------------------------------------------------------
# Peak memory (fresh subprocess)
# ---------------------------------------------------------------------------


def peak_child(args) -> None:
    """Runs in a fresh process: NUFFT value_and_grad at `peak_npix`² x
    `peak_npoints`, reporting process peak RSS (ru_maxrss) and, on a GPU, the
    device's peak bytes in use."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    import eqmodels as eqm

    dtype = np.dtype(args.dtype)
    prob = make_problem(args.peak_npix, args.peak_npoints, args.seed, dtype)
    jax.block_until_ready(jnp.zeros(8) + 1)  # initialise the backend
    rss_before = C.current_rss_bytes()
    hwm_before = C.peak_rss_bytes()
    model = eqm.NUFFT(prob["grid"], prob["u"], prob["v"], eps=args.eps, dtype=dtype)
    term = eqm.VisChi2(model, prob["vis"], prob["sigma"])
    img = jnp.asarray(prob["img"], dtype)
    fn = value_and_grad_fn()
    t0 = time.perf_counter()
    compiled = fn.lower(img, term).compile()
    compile_s = time.perf_counter() - t0
    hwm_compiled = C.peak_rss_bytes()
    timing, (value, _) = C.time_call(
        lambda: compiled(img, term),
        C.TimingConfig(warmup=1, min_repeats=3, max_repeats=3, min_time=0.0),
    )
    hwm_after = C.peak_rss_bytes()
    out = {
        "npix": args.peak_npix,
        "npoints": args.peak_npoints,
        "dtype": args.dtype,
        "eps": args.eps,
        "backend": jax.default_backend(),
        "value": float(value),
        "compile_s": compile_s,
        "timing": timing.as_dict(),
        "host": {
            "method": "ru_maxrss of a fresh process (high-water mark of its "
            "resident set); 'delta' subtracts the resident set after importing "
            "jax/eqmodels and building the data, before compiling",
            "rss_before_bytes": rss_before,
            "peak_before_bytes": hwm_before,
            "peak_after_compile_bytes": hwm_compiled,
            "peak_bytes": hwm_after,
            "delta_bytes": hwm_after - (rss_before or hwm_before),
        },
    }
    stats = C.device_memory_stats()
    if stats is not None and jax.default_backend() != "cpu":
        out["device"] = {
            "method": "device.memory_stats() peak_bytes_in_use (fresh process, "
            "XLA_PYTHON_CLIENT_PREALLOCATE=false)",
            **stats,
        }
    C.emit_child_result(out)


def run_peak(args) -> dict[str, Any]:
    argv = [
        str(pathlib.Path(__file__).resolve()),
        "--peak-child",
        "--dtype",
        args.dtype,
        "--eps",
        repr(args.eps),
        "--peak-npix",
        str(args.peak_npix),
        "--peak-npoints",
        str(args.peak_npoints),
        "--seed",
        str(args.seed),
        "--blas-threads",
        ",".join(map(str, args.blas_threads)),
    ]
    if args.keep_openblas_env:
        argv.append("--keep-openblas-env")
    if args.omp_threads is not None:
        argv += ["--omp-threads", str(args.omp_threads)]
    res = C.run_child(argv, env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    if "error" in res:
        return res
    if "device" in res:
        peak, method = res["device"].get("peak_bytes_in_use"), res["device"]["method"]
    else:
        peak, method = res["host"]["peak_bytes"], res["host"]["method"]
    res["judged_bytes"] = peak
    res["judged_method"] = method
    res["target_bytes"] = TARGET_PEAK_BYTES
    res["meets_target"] = peak is not None and peak < TARGET_PEAK_BYTES
    return res


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------


def _cell(case, name) -> str:
    rec = case["variants"].get(name, {})
    if rec.get("status") == "ok":
        return C.fmt_time(rec["timing"]["median"])
    return rec.get("status", "-")


def _err_cell(case, name) -> str:
    rec = case["variants"].get(name, {})
    if "err" not in rec:
        return "ref" if case.get("reference") == name else "-"
    mark = "" if rec["agrees"] else " MISMATCH"
    return f"{rec['err']:.1e}{mark}"


def _size(case) -> tuple[str, str]:
    return f"{case['npix']}²", f"{case['npoints']:,}"


def report(cases, bandwidth, peak, args) -> str:
    texts = []
    head = ["npix", "points"]
    rows = []
    for case in cases:
        rows.append(
            [
                *_size(case),
                _cell(case, "numpy"),
                C.fmt_time(case["bound"]["seconds"]),
                _cell(case, "finufft_pair"),
                _cell(case, "DirectFT"),
                _cell(case, "SeparableFT"),
                _cell(case, "NUFFT"),
            ]
        )
    texts.append(
        C.print_table(
            head
            + ["(a) numpy", "(b) bound", "(c) nufft pair", "DirectFT", "SeparableFT"]
            + ["NUFFT"],
            rows,
            title=f"\nvalue_and_grad of VisChi2, median ms ({args.dtype}, NUFFT eps "
            f"{args.eps:g}; (b) at {bandwidth['gbps']:.1f} GB/s)",
        )
    )
    rows = []
    for case in cases:
        r = case["ratios"]
        fastest = r["fastest_exact"]
        best = (
            f"{C.fmt_ratio(r['numpy_over_fastest_exact'])} ({fastest[:3]})"
            if r["numpy_over_fastest_exact"] is not None
            else "-"
        )
        rows.append(
            [
                *_size(case),
                C.fmt_ratio(r["numpy_over_DirectFT"]),
                C.fmt_ratio(r["numpy_over_SeparableFT"]),
                C.fmt_ratio(r["numpy_over_NUFFT"]),
                best,
                C.fmt_ratio(r["DirectFT_over_bound"]),
                C.fmt_ratio(r["NUFFT_over_pair"]),
                C.fmt_ratio(r["DirectFT_over_SeparableFT"]),
            ]
        )
    texts.append(
        C.print_table(
            head
            + ["(a)/Direct", "(a)/Sep", "(a)/NUFFT", "(a)/best exact ≥10"]
            + ["Direct/(b) ≤1.5", "NUFFT/(c) ≤1.3", "Direct/Sep"],
            rows,
            title="\nratios (speed-ups over (a) are (a) time / variant time; "
            "Direct/Sep > 1 means SeparableFT is faster)",
        )
    )
    rows = []
    for case in cases:
        rows.append(
            [
                *_size(case),
                case.get("reference") or "-",
                _err_cell(case, "DirectFT"),
                _err_cell(case, "SeparableFT"),
                _err_cell(case, "NUFFT"),
            ]
        )
    texts.append(
        C.print_table(
            head + ["reference", "DirectFT", "SeparableFT", "NUFFT"],
            rows,
            title="\nagreement: max relative difference of value and gradient vs the "
            "reference (numpy (a) where it ran)",
        )
    )
    texts.append(targets_text(cases, peak))
    return "\n".join(texts)


def _first_error(cases, names) -> str:
    for case in cases:
        for name in names:
            rec = case["variants"].get(name, {})
            if rec.get("status") == "failed":
                return f"{name} failed: {rec['error'].splitlines()[0][:160]}"
            if rec.get("status", "ok") != "ok":
                return f"{name} {rec['status']}"
    return ""


def _target_line(label, items, ok, why="", items_min=()) -> str:
    """`items`: list of (case, value) from median times, `items_min` the same from
    minimum times; `ok(value)` decides pass/fail."""
    items = [(c, v) for c, v in items if v is not None]
    if not items:
        return f"  {label}: not measured" + (f" ({why})" if why else "")
    passed = [(c, v) for c, v in items if ok(v)]
    status = (
        "MET"
        if len(passed) == len(items)
        else ("NOT MET" if not passed else "PARTLY MET")
    )
    detail = ", ".join(f"{c['npix']}²×{c['npoints']:,}: {v:.2f}" for c, v in items)
    line = f"  {label}: {status} in {len(passed)}/{len(items)} sizes [{detail}]"
    items_min = [(c, v) for c, v in items_min if v is not None]
    if items_min:
        n_ok = sum(ok(v) for _, v in items_min)
        line += f" (from minimum times: {n_ok}/{len(items_min)})"
    return line


def targets_text(cases, peak) -> str:
    def pick(key, which="ratios"):
        return [(c, c[which][key]) for c in cases]

    lines = ["\ntargets (issue 2):"]
    lines.append(
        _target_line(
            f"DirectFT within {TARGET_DIRECT_VS_BOUND}× of (b)",
            pick("DirectFT_over_bound"),
            lambda v: v <= TARGET_DIRECT_VS_BOUND,
            _first_error(cases, ["DirectFT"]),
            pick("DirectFT_over_bound", "ratios_min"),
        )
    )
    lines.append(
        _target_line(
            f"DirectFT ≥ {TARGET_DIRECT_VS_NUMPY:g}× ahead of (a)",
            pick("numpy_over_DirectFT"),
            lambda v: v >= TARGET_DIRECT_VS_NUMPY,
            _first_error(cases, ["numpy", "DirectFT"]),
            pick("numpy_over_DirectFT", "ratios_min"),
        )
    )
    lines.append(
        _target_line(
            f"fastest exact path ≥ {TARGET_EXACT_VS_NUMPY:g}× ahead of (a)",
            pick("numpy_over_fastest_exact"),
            lambda v: v >= TARGET_EXACT_VS_NUMPY,
            _first_error(cases, ["numpy", "SeparableFT", "DirectFT"]),
            pick("numpy_over_fastest_exact", "ratios_min"),
        )
    )
    lines.append(
        _target_line(
            f"NUFFT within {TARGET_NUFFT_VS_PAIR}× of (c)",
            pick("NUFFT_over_pair"),
            lambda v: v <= TARGET_NUFFT_VS_PAIR,
            _first_error(cases, ["NUFFT", "finufft_pair"]),
            pick("NUFFT_over_pair", "ratios_min"),
        )
    )
    if peak is None:
        lines.append("  NUFFT peak memory: not measured (--no-peak)")
    elif "error" in peak:
        tail = [ln for ln in peak.get("stderr_tail", "").splitlines() if ln.strip()]
        cause = next(
            (ln.strip() for ln in reversed(tail) if "Error" in ln.split(":")[0]), ""
        )
        lines.append(
            f"  NUFFT peak memory: FAILED ({peak['error']}"
            + (f"; {cause[:160]}" if cause else "")
            + ")"
        )
    else:
        host = peak["host"]
        status = "MET" if peak["meets_target"] else "NOT MET"
        judged = C.fmt_bytes(peak["judged_bytes"])
        lines.append(
            f"  NUFFT value_and_grad {peak['npix']}²×{peak['npoints']:,} peak < "
            f"{TARGET_PEAK_BYTES / 1e9:g} GB: {status}: {judged}"
            f" (process peak RSS {C.fmt_bytes(host['peak_bytes'])}, "
            f"+{C.fmt_bytes(host['delta_bytes'])} over the process before compiling; "
            f"time {C.fmt_time(peak['timing']['median'])} ms, compile "
            f"{peak['compile_s']:.1f} s)"
        )
        if "device" in peak:
            dev_peak = C.fmt_bytes(peak["device"].get("peak_bytes_in_use"))
            lines.append(f"    (judged on device peak_bytes_in_use: {dev_peak})")
    bad = [
        f"{name} at {c['npix']}²×{c['npoints']:,} ({c['variants'][name]['err']:.1e})"
        for c in cases
        for name in ("DirectFT", "SeparableFT", "NUFFT")
        if c["variants"][name].get("agrees") is False
    ]
    lines.append(
        "  agreement with the reference: "
        + ("all variants agree" if not bad else "MISMATCH: " + "; ".join(bad))
    )
    text = "\n".join(lines)
    print(text, flush=True)
    return text


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def measure_bandwidth(args, timing_cfg) -> dict[str, Any]:
    gpu = C.is_gpu_backend()
    mb = args.bandwidth_mb or (2048 if gpu else 256)
    nbytes = int(mb * 1e6)
    records = [C.copy_bandwidth_jax(nbytes, timing_cfg)]
    if not gpu:
        records.append(C.copy_bandwidth_numpy(nbytes, timing_cfg))
    read = C.read_bandwidth_jax(nbytes, timing_cfg)
    best = max(records, key=lambda r: r["gbps"])
    for r in records + [read]:
        print(f"  {r['method']}: {r['gbps']:.1f} GB/s (best {r['gbps_best']:.1f})")
    print(f"  -> bound (b) uses {best['method']}: {best['gbps']:.1f} GB/s", flush=True)
    return {
        "gbps": best["gbps"],
        "gbps_best": best["gbps_best"],
        "method": best["method"],
        "copies": records,
        "read_only": read,
        "convention": "STREAM: a copy of B bytes moves 2B; bound (b) = 2 reads of "
        "the real+imag matrix / copy bandwidth (the highest copy figure measured on "
        "the device that runs DirectFT; on CPU that includes numpy's)",
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    blas_env = C.prepare_blas_env(
        max(args.blas_threads), unset_pinning=not args.keep_openblas_env
    )
    if args.omp_threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(args.omp_threads)
    if args.peak_child:
        peak_child(args)
        return 0
    t_start = time.perf_counter()

    peak = None
    if not args.no_peak:
        # First, before this process touches the backend (a GPU preallocates).
        print(
            f"peak memory: NUFFT value_and_grad at {args.peak_npix}² x "
            f"{args.peak_npoints:,} points in a subprocess ...",
            flush=True,
        )
        peak = run_peak(args)

    import jax
    import numpy as np  # noqa: F401  (loads BLAS with the environment set above)

    jax.config.update("jax_enable_x64", True)
    timing_cfg = C.QUICK_TIMING if args.quick else C.FULL_TIMING
    env = C.environment_info()
    blas = C.blas_info()
    print(
        f"backend {env['backend']} {env['devices']}, {env['cpus_available']} CPUs "
        f"({env['cpu']}), jax {env['versions']['jax']}, jax-finufft "
        f"{env['versions']['jax-finufft']}, numpy {env['versions']['numpy']}"
    )
    for b in blas:
        print(
            f"numpy BLAS: {b.get('internal_api')} {b.get('version', '')} kernel "
            f"{b.get('architecture')} threads {b.get('num_threads')} "
            f"[{b.get('source')}]"
        )
    if blas_env["removed"]:
        print(f"removed for this run: {blas_env['removed']}")

    if env["loadavg"] and env["loadavg"][0] > 1.0:
        print(
            f"note: load average {env['loadavg']} - other processes are using the "
            "cores; timings will be noisy (ratios are fairer: variants are timed "
            "round-robin)"
        )
    print("copy bandwidth:", flush=True)
    bw_cfg = C.TimingConfig(
        warmup=1, min_repeats=5, max_repeats=100, min_time=0.5 if args.quick else 2.0
    )
    bandwidth = measure_bandwidth(args, bw_cfg)

    sizes = [(p, n) for p in args.npix for n in args.npoints]
    if not args.no_anchor and ANCHOR not in sizes:
        sizes.append(ANCHOR)
    sizes.sort()
    cases = []
    for npix, npoints in sizes:
        print(f"case {npix}² x {npoints:,} points", flush=True)
        cases.append(run_case(npix, npoints, args, timing_cfg, bandwidth))

    text = report(cases, bandwidth, peak, args)
    elapsed = time.perf_counter() - t_start
    result = {
        "benchmark": "forward",
        "mode": "quick" if args.quick else "full",
        "args": {k: v for k, v in vars(args).items() if k != "peak_child"},
        "environment": env,
        "blas": {"env_changes": blas_env, "libraries": blas},
        "bandwidth": bandwidth,
        "targets": {
            "DirectFT_over_bound_max": TARGET_DIRECT_VS_BOUND,
            "numpy_over_DirectFT_min": TARGET_DIRECT_VS_NUMPY,
            "numpy_over_fastest_exact_min": TARGET_EXACT_VS_NUMPY,
            "NUFFT_over_pair_max": TARGET_NUFFT_VS_PAIR,
            "nufft_peak_bytes_max": TARGET_PEAK_BYTES,
        },
        "cases": cases,
        "peak_memory": peak,
        "device_memory_end": C.device_memory_stats() if C.is_gpu_backend() else None,
        "loadavg_end": C.loadavg(),
        "report": text,
        "elapsed_s": elapsed,
    }
    path = C.write_json(args.out, result)
    print(f"\nwrote {path} ({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
