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


def check_grad_fd(f, x, *, n_dirs=4, rel_h=1e-5, rtol=1e-6, seed=0):
    """Compare `jax.grad(f)(x)` projected on random directions with central finite
    differences ([`eqmodels.testing.check_grad_fd`][])."""
    emt.check_grad_fd(
        f, np.asarray(x), n_directions=n_dirs, rel_step=rel_h, rtol=rtol, seed=seed
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
