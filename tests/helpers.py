"""Shared comparison helpers (the tolerances are `eqmodels.testing`'s)."""

import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys
import warnings

import jax
import numpy as np
from astropy.io import fits

import eqmodels.testing as emt


def assert_allclose(actual, desired, *, rtol=None, atol=0.0, err=""):
    """[`eqmodels.testing.assert_close`][]: relative to the scale of `desired`
    (its largest magnitude), `rtol` by dtype ([`eqmodels.testing.default_rtol`][]);
    `err` names what is compared."""
    emt.assert_close(
        np.asarray(actual),
        np.asarray(desired),
        rtol=None if rtol is None else float(rtol),
        atol=float(atol),
        name=str(err) or "value",
    )


def tree_allclose(a, b, **kw):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb, (ta, tb)
    for x, y in zip(la, lb):
        assert_allclose(x, y, **kw)


def central_fd(f, x, directions, h):
    """Central finite differences of scalar `f` at `x` along `directions`
    (a list of arrays the shape of `x`): returns a numpy vector."""
    x = np.asarray(x)
    return np.array(
        [(float(f(x + h * d)) - float(f(x - h * d))) / (2 * h) for d in directions]
    )


def check_grad_fd(f, x, *, n_dirs=4, rel_h=1e-5, rtol=1e-6, seed=0, grad=None):
    """Compare `jax.grad(f)(x)` (or `grad`, that gradient computed by the caller,
    e.g. by a program it compiled once) projected on random directions with central
    finite differences ([`eqmodels.testing.check_grad_fd`][]). The gradient is
    taken compiled (`eqmodels.testing` takes it op by op, one small compilation per
    operation)."""
    x = np.asarray(x)
    if grad is None:
        grad = jax.jit(jax.grad(f))(x)
    emt.check_grad_fd(
        f,
        x,
        grad=grad,
        n_directions=n_dirs,
        rel_step=rel_h,
        rtol=rtol,
        seed=seed,
    )


@contextlib.contextmanager
def quiet():
    """eht-imaging (the test-time oracle) prints progress and raises numpy
    RuntimeWarnings on the empty cross-hand products; neither is ours to fix."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(io.StringIO()):
            yield


def ehtim_row_index(obs, data) -> np.ndarray:
    """For each row of our `VisData`, the index of the eht-imaging `obs.data` row
    with the same time and station pair (in our orientation)."""
    table = {
        (float(r["time"]), str(r["t1"]), str(r["t2"])): i
        for i, r in enumerate(obs.data)
    }
    names = data.station_names
    return np.array(
        [
            table[(float(t), names[i], names[j])]
            for t, i, j in zip(
                np.asarray(data.time), np.asarray(data.ant1), np.asarray(data.ant2)
            )
        ]
    )


def run_without_x64(code: str, *args: str) -> dict:
    """Run `code` in a fresh interpreter of its own with JAX's default configuration
    (no x64, float32 arrays, no runtime type checker) and return the JSON it prints
    last: for checks of the process itself (which modules it imported). Everything
    else goes through one shared interpreter (tests/unchecked.py)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_ENABLE_X64", None)
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=pathlib.Path(__file__).resolve().parents[1],
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# The header cards a new random-groups HDU writes for itself.
_STRUCTURAL = (
    "SIMPLE",
    "BITPIX",
    "NAXIS",
    "GROUPS",
    "PCOUNT",
    "GCOUNT",
    "PTYPE",
    "PSCAL",
    "PZERO",
    "EXTEND",
    "BSCALE",
    "BZERO",
)


def float64_uvfits_copy(src, dst):
    """Write `src` (a uvfits file) to `dst` with its random parameters and data in
    float64 (the same values: float32 widens exactly). eht-imaging computes in a
    float32 file's precision; comparisons to 1e-9 read such a copy."""

    with fits.open(src) as h:
        g = h[0]
        names = list(g.data.parnames)
        pars = [np.asarray(g.data.par(i), np.float64) for i in range(len(names))]
        data = np.asarray(g.data["DATA"], np.float64)
        groups = fits.GroupData(data, parnames=names, pardata=pars, bitpix=-64)
        hdu = fits.GroupsHDU(groups)
        for card in g.header.cards:
            key = card.keyword
            if (
                key
                and not key.startswith(_STRUCTURAL)
                and key not in ("COMMENT", "HISTORY")
            ):
                hdu.header[key] = card.value
        fits.HDUList([hdu] + [x.copy() for x in h[1:]]).writeto(dst)


def run_two_processes(worker, *args, timeout: float = 240) -> None:
    """Run `python worker PID PORT *args` for PID 0 and 1 (a `jax.distributed`
    run on a free loopback port, tests/multihost/distributed.py) and wait for
    both; fails with the tail of each process's output if either exits non-zero
    (or kills both past `timeout` seconds)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(pid), str(port), *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for pid in (0, 1)
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs), "\n".join(
        f"--- process {i} (exit {p.returncode}):\n{log[-3000:]}"
        for i, (p, log) in enumerate(zip(procs, logs))
    )


def load_example(name: str):
    """The module of `examples/<name>.py`, loaded from its file (the examples are
    scripts, not a package)."""
    import importlib.util

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
