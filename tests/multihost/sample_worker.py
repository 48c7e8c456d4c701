"""One process of the 2-process `jax.distributed` run of
tests/test_posterior_sample.py's multi-host test.

Usage: `python sample_worker.py PROCESS_ID PORT OUT` (two processes on 127.0.0.1,
two virtual CPU devices each, gloo collectives). Samples the linear-Gaussian
posterior of tests/test_posterior.py with 4 NUTS chains on a 4-device mesh that
spans both processes (each process runs two chains), then mean-field VI's 4
chains on the same mesh, gathers the draws to every process and writes them to
`OUT.<pid>.npz`.
"""

import os
import pathlib
import sys


ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

from tests.multihost.distributed import initialize  # noqa: E402


def main():
    pid, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    devices = initialize(pid, port)
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh

    import eqmodels as em
    from tests.test_posterior import Problem
    from tests.test_posterior_sample import MULTIHOST_SETTINGS, MULTIHOST_VI

    mesh = Mesh(np.array(devices), ("chains",))
    res = em.sample(
        Problem().posterior, mesh=mesh, key=jax.random.key(3), **MULTIHOST_SETTINGS
    )
    local = sorted(
        {int(s.index[0].start or 0) for s in res.positions.addressable_shards}
    )
    positions = multihost_utils.process_allgather(res.positions, tiled=True)
    # Mean-field VI's chains on the same mesh: each device fits its own.
    vi = em.sample(
        Problem().posterior, mesh=mesh, key=jax.random.key(3), **MULTIHOST_VI
    )
    vi_positions = multihost_utils.process_allgather(vi.positions, tiled=True)
    np.savez(
        f"{out}.{pid}.npz",
        positions=np.asarray(positions),
        local=np.asarray(local),
        vi_positions=np.asarray(vi_positions),
    )
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
