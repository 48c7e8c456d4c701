"""One process of the 2-process `jax.distributed` run of
tests/test_multifreq_sharding.py's multi-host test.

Usage: `python bands_worker.py PROCESS_ID PORT OUT.json` (two processes on
127.0.0.1, two virtual CPU devices each, gloo collectives). Builds the two-band
objective of the test module with `shard_bands` on a (2, 2) mesh whose band groups
are the two processes (each process holds one band's rows, split over its two
devices), evaluates value and gradient, and (process 0) writes them to OUT.json.
"""

import json
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
    import equinox as eqx
    import numpy as np
    from jax.sharding import Mesh

    import eqmodels as em
    from tests.test_multifreq_sharding import _model, _terms, FREQS, GRID

    mesh = Mesh(np.array(devices).reshape(2, 2), ("bands", "rows"))
    model = _model()[0]
    terms = _terms(FREQS[:2])
    objective = em.shard_bands([*terms, em.SpectralTV(GRID, "alpha")], mesh)
    value, grad = eqx.filter_jit(eqx.filter_value_and_grad(lambda m, o: o(m)))(
        model, objective
    )
    vis = objective.terms[-2].term.weight
    result = {
        "value": float(value),
        "grad_i0": np.asarray(grad.base.params).tolist(),
        "grad_alpha": np.asarray(grad.alpha).tolist(),
        # This process's shards: the band index each holds.
        "local_bands": sorted(
            {int(s.index[0].start or 0) for s in vis.addressable_shards}
        ),
    }
    pathlib.Path(f"{out}.{pid}").write_text(json.dumps(result))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
