"""Child process of tests/test_survey.py: runs the small survey with a checkpoint
folder and a compilation cache, optionally killing itself with SIGKILL after a
given chunk; writes what it saw as JSON.

Usage: python tests/survey_child.py CHECKPOINT CACHE OUT [KILL_AFTER_CHUNK [write]]

With `write`, the process kills itself while writing chunk KILL_AFTER_CHUNK's file
(half of it written), instead of after the chunk.
"""

import json
import os
import signal
import sys


os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402


jax.config.update("jax_enable_x64", True)
jax.config.update("jax_num_cpu_devices", 4)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import eqmodels as em  # noqa: E402


def main():
    checkpoint, cache, out = sys.argv[1:4]
    kill_after = int(sys.argv[4]) if len(sys.argv) > 4 else None
    in_write = len(sys.argv) > 5 and sys.argv[5] == "write"
    if in_write:
        import numpy as np

        savez, target = np.savez, f"chunk_{kill_after:05d}.npz"

        def savez_then_die(f, *args, **kwargs):
            savez(f, *args, **kwargs)
            if target in str(getattr(f, "name", "")):
                f.flush()
                os.ftruncate(f.fileno(), os.fstat(f.fileno()).st_size // 2)
                os.kill(os.getpid(), signal.SIGKILL)

        np.savez = savez_then_die
        kill_after = None
    em.enable_compilation_cache(cache)  # before the first compilation
    hits = []
    jax.monitoring.register_event_listener(
        lambda name, **kw: (
            hits.append(name) if name == "/jax/compilation_cache/cache_hits" else None
        )
    )
    from tests.problems.survey import configurations, MAX_STEPS, SOLVER

    objectives, model = configurations()

    def callback(i, sol):
        if kill_after is not None and i == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    res = em.survey(
        objectives,
        model,
        SOLVER,
        max_steps=MAX_STEPS,
        chunk_size=1,
        devices=jax.devices()[:2],
        checkpoint=checkpoint,
        callback=callback,
    )
    with open(out, "w") as f:
        json.dump(
            {
                "computed": list(res.computed_chunks),
                "loaded": list(res.loaded_chunks),
                "cache_hits": len(hits),
                "params": res.solutions.model.params.tolist(),
            },
            f,
        )


if __name__ == "__main__":
    main()
