"""Survey chunking: the devices a survey splits its configurations over, and the
chunk size (`"auto"`: from the one memory model of `_memory.py`)."""

import equinox as eqx
import jax

from .._sharding._mesh import sharded_parts
from ._jacobian import structure_key
from ._memory import compiled_bytes, largest_chunk


def _term_meshes(objectives) -> list:
    """The meshes of the sharded terms and shared transforms in `objectives`."""
    return [x.mesh for x in sharded_parts(objectives)]


def survey_devices(objectives, devices) -> list:
    """The devices a survey splits its configurations over: `devices`, else those
    of the objectives' sharded terms (their rows stay split over them), else every
    device. Sharded terms on other devices than `devices` are refused."""
    meshes = _term_meshes(objectives)
    if not meshes:
        return _local(list(jax.local_devices() if devices is None else devices))
    term_devices = list(meshes[0].devices.flat)
    if any(set(m.devices.flat) != set(term_devices) for m in meshes[1:]):
        raise ValueError(
            "the objectives' sharded terms are split over different sets of devices: "
            "build them on one mesh (or meshes of the same devices)."
        )
    if devices is not None and set(devices) != set(term_devices):
        raise ValueError(
            f"`devices` ({list(devices)}) are not the devices the sharded terms are "
            f"split over ({term_devices}): pass `devices=None` (the terms' devices), "
            "or build the terms on a mesh of the survey's devices."
        )
    return _local(term_devices)


def _local(devices: list) -> list:
    """`devices`, refused when some belong to other processes (`jax.distributed`):
    a survey gathers each chunk's results to its host and writes them there."""
    others = [d for d in devices if d.process_index != jax.process_index()]
    if others:
        raise ValueError(
            f"the survey's devices include {len(others)} of other processes "
            f"(process {jax.process_index()} of {jax.process_count()}): a survey "
            "runs one process's configurations on that process's devices. Give "
            "each process `devices=jax.local_devices()` (the default without "
            "sharded terms), sharded terms on a mesh of its local devices, its own "
            "configurations and its own `checkpoint` folder."
        )
    return devices


_MEMORY: dict = {}  # measured chunk memory, per problem structure and chunk size


def auto_chunk_size(
    run_chunk, shared_dev, stacked, rows, n_dev, per_device, budget, rest
) -> int:
    """The largest chunk (per device) whose temporary memory, modelled as
    `m0 + m1·chunk` (`_memory.py`) from XLA's memory analysis of
    `run_chunk(shared, batched, size, *rest)` compiled for chunks of 1 and 2,
    fits `budget` bytes per device."""
    dyn, static = eqx.partition(shared_dev, eqx.is_array)

    def run(d, b, size):
        return run_chunk(eqx.combine(d, static), b, size, *rest)

    def temp(c):
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(
                (c * n_dev, *x.shape[1:]), x.dtype, sharding=rows
            ),
            stacked,
        )
        return compiled_bytes(
            jax.jit(run, static_argnums=2).lower(dyn, abstract, c * n_dev).compile()
        )

    key = (structure_key(shared_dev, stacked, *rest), n_dev)

    def measured(c):
        if (key, c) not in _MEMORY:
            _MEMORY[(key, c)] = temp(c)
        return _MEMORY[(key, c)]

    return largest_chunk(measured, 1, 2, budget, per_device)
