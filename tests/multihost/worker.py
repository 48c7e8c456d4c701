"""One process of the 2-process `jax.distributed` run of tests/test_multihost.py.

Usage: `python worker.py PROCESS_ID PORT OUT.json FORWARDS [REPEATS]` (FORWARDS a
comma list, e.g. `direct,nufft`; REPEATS timed calls for benchmarks/sharding.py; two processes on
127.0.0.1, two virtual CPU devices each, gloo collectives). Builds the round-1
objective on M87 2017-04-10 lo with every data term a `ShardedChi2` over the
4-device global mesh (each process building only its own rows), evaluates value and
gradient, and (process 0) writes them to OUT.json.
"""

import json
import os
import pathlib
import sys
import time


ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

from tests.multihost.distributed import initialize  # noqa: E402


def main():
    pid, port, out, forward = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    repeats = int(sys.argv[5]) if len(sys.argv) > 5 else 0  # timed calls
    initialize(pid, port)
    import equinox as eqx
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests"))
    from multihost.problem import build, image, least_squares, pixel_model

    x = image()
    result = {}
    for name in forward.split(","):
        obj = build(name, sharded=True)
        vg = eqx.filter_jit(jax.value_and_grad(lambda x, o: o(x)))
        val, grad = vg(x, obj)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(vg(x, obj))
            times.append(time.perf_counter() - t0)
        report = eqx.filter_jit(lambda x, o: o.report(x))(x, obj)
        weight = obj.terms[0].term.weight
        result[name] = {
            "value": float(val),
            "grad": np.asarray(grad).tolist(),
            "report": {k: float(v) for k, v in report.items()},
            "n_shared": len(obj.shared),
            "local_rows": [int(s.data.shape[0]) for s in weight.addressable_shards],
            "global_rows": int(weight.shape[0]),
            "times": times,
        }
    from multihost.problem import DATA, data_terms

    import eqmodels as em

    # Inputs that differ between the processes are refused on every process (a
    # process passing only "its" half of the rows silently built a term of pieces
    # of both: 121.7 instead of 93.0).
    amp = data_terms("direct", sharded=False)[0]
    k = amp.rows // 2
    half = amp.take_rows(np.arange(pid * k, (pid + 1) * k), n_rows=k)
    refused = {}
    try:
        em.ShardedChi2(half)
    except ValueError as e:
        refused["term"] = str(e)
    data = em.load_uvfits(DATA).scan_average()
    grid = em.ImageGrid.from_fov(32, 128.0)
    mine = em.amplitudes(data.take(np.arange(40 + 5 * pid)))
    try:
        em.ShardedChi2.from_data(em.AmpChi2, mine, grid)
    except ValueError as e:
        refused["data"] = str(e)
    # Row counts that differ so much that one process's term alone would be
    # refused (3 rows on the 4-device mesh): every process gets the comparison's
    # refusal (the short one refused alone, leaving the other in the collective).
    try:
        em.ShardedChi2(amp.take_rows(np.arange(3 if pid == 0 else 40), n_rows=3))
    except ValueError as e:
        refused["rows"] = str(e)
    result["refused"] = refused
    # Padding sharded terms to one length (`pad_to_match`, for a survey over data
    # sets) on a mesh spanning both processes: it fetched the rows to the host,
    # which no process holds whole.
    short = em.amplitudes(data.take(np.arange(20)))
    a = em.ShardedChi2.from_data(em.AmpChi2, em.amplitudes(data), grid)
    b = em.ShardedChi2.from_data(em.AmpChi2, short, grid)
    _, pb = em.pad_to_match([a, b])
    value = eqx.filter_jit(lambda t, x: t(x))
    result["pad_to_match"] = {
        "rows": [int(b.term.weight.shape[0]), int(pb.term.weight.shape[0])],
        "values": [float(value(b, x)), float(value(pb, x))],
    }

    # Gauss-Newton with `chunk_size="auto"`, which measures the Jacobian's memory
    # by compiling it: closing over arrays that span both processes was refused.
    gn = em.solve(
        least_squares(forward.split(",")[0], sharded=True),
        pixel_model(),
        em.GaussNewton(),
        max_steps=1,
    )
    result["gauss_newton"] = float(gn.value)
    # A survey over every process's devices is refused (it computed a chunk, then
    # failed fetching other processes' results).
    try:
        em.survey(
            [least_squares(forward.split(",")[0], sharded=False)],
            pixel_model(),
            devices=jax.devices(),
            max_steps=1,
        )
    except ValueError as e:
        result["survey_refused"] = str(e)
    if pid == 0:
        pathlib.Path(out).write_text(json.dumps(result))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
