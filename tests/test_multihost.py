"""`ShardedChi2` across processes: two `jax.distributed` processes on 127.0.0.1, two
virtual CPU devices each (gloo collectives), evaluate the sharded round-1 objective
and its gradient; they equal the single-process, unsharded ones. Bounded in time;
the processes are always cleaned up."""

import json
import pathlib

import jax
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose, run_two_processes
from tests.multihost.problem import (
    build,
    DATA,
    image,
    least_squares,
    pixel_model,
)


pytestmark = pytest.mark.slow  # child processes (`jax.distributed`)


WORKER = pathlib.Path(__file__).resolve().parent / "multihost" / "worker.py"
FORWARDS = ("direct", "nufft")
TIMEOUT_S = 240


def test_two_processes_equal_one(tmp_path):
    pytest.importorskip("astropy")
    out = tmp_path / "result.json"
    run_two_processes(WORKER, out, ",".join(FORWARDS), timeout=TIMEOUT_S)
    result = json.loads(out.read_text())
    x = image()
    for forward in FORWARDS:
        got = result[forward]
        obj = build(forward, sharded=False)
        val, grad = jax.value_and_grad(obj)(x)
        assert_allclose(got["value"], val, rtol=1e-14)
        assert_allclose(np.array(got["grad"]), grad, rtol=1e-13)
        for name, v in obj.report(x).items():
            assert_allclose(got["report"][name], v, rtol=1e-13)
        # One shared transform over the 4-device mesh; each process held half the
        # rows (2 devices × 1/4 of the padded rows).
        assert got["n_shared"] == 1
        assert got["local_rows"] == [got["global_rows"] // 4] * 2
    gn = em.solve(
        least_squares(FORWARDS[0], sharded=False),
        pixel_model(),
        em.GaussNewton(),
        max_steps=1,
    )
    assert_allclose(result["gauss_newton"], gn.value, rtol=1e-9)
    assert "devices=jax.local_devices()" in result["survey_refused"]
    for what in ("term", "data", "rows"):
        assert "differs between the processes" in result["refused"].get(what, "")
    data = em.load_uvfits(DATA).scan_average()
    grid = em.ImageGrid.from_fov(32, 128.0)
    short = em.AmpChi2.from_data(em.amplitudes(data.take(np.arange(20))), grid)
    padded = result["pad_to_match"]
    assert padded["rows"][1] > padded["rows"][0] >= 20
    for got in padded["values"]:
        assert_allclose(got, short(x), rtol=1e-14)
