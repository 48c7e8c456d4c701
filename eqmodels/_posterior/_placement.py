"""The chains' starting points and keys, placed on the devices of a mesh (one
process or several): shared by the samplers and the variational methods."""

from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from .._sharding._mesh import check_mesh


def chain_placement(mesh: Mesh | None, axis_name: str, num_chains: int):
    """`(place, mesh, axis_name)`: `place(x)` puts an array with a leading chains
    axis on the mesh, split along `axis_name` (every process holds the same
    values and places its own devices' shards, so a mesh over several
    `jax.distributed` processes works too); without a mesh, `jax.device_put`.
    The mesh's axes are used as automatic ones. Refuses a chain count that is
    not a multiple of the axis's size."""
    if mesh is None:
        return jax.device_put, None, axis_name  # numpy read back: no compile
    mesh, axis_name, size = check_mesh(mesh, axis_name)
    if num_chains % size:
        raise ValueError(
            f"`num_chains` ({num_chains}) must be a multiple of the mesh axis "
            f"{axis_name!r}'s size ({size}): every device runs as many chains."
        )
    auto = Mesh(mesh.devices, mesh.axis_names)
    spread = NamedSharding(auto, P(axis_name))

    def place(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return x  # already spread (a result of the chains)
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = place(jax.random.key_data(x))
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, spread, lambda i: host[i])

    return place, auto, axis_name


class Starts(NamedTuple):
    z0: jax.Array  # `init`, unconstrained
    z0s: jax.Array  # each chain's start, `(num_chains, n)`
    keys: jax.Array
    place: Callable
    mesh: Mesh | None
    axis_name: str


def chain_starts(posterior, init, key, num_chains: int, jitter, mesh, axis_name):
    """[`Starts`]: the chains' unconstrained starts (`init` plus a uniform
    `±jitter` per coordinate) and keys, on the mesh's
    devices when one is given (see `chain_placement`). Refuses an `init` where
    the posterior's log density is not finite."""
    # The mesh is checked first: argument errors before any evaluation.
    place, mesh, axis_name = chain_placement(mesh, axis_name, num_chains)
    z0 = posterior.to_unconstrained(init)
    if not np.isfinite(np.asarray(posterior.log_density_unconstrained(z0))):
        raise ValueError(
            "the posterior's log density at `init` is not finite: start from a "
            "point of the prior's support with finite likelihood."
        )
    k_init, k_run = jax.random.split(key)
    z0s = z0[None, :] + jitter * jax.random.uniform(
        k_init, (num_chains, z0.shape[0]), z0.dtype, -1.0, 1.0
    )
    keys = jax.random.split(k_run, num_chains)
    # Sharded by placement (GSPMD) on a mesh: an explicit-axes mesh would need the
    # samplers' code sharding-aware, so its axes are used as automatic ones.
    if mesh is not None:
        z0s, keys = place(z0s), place(keys)
    return Starts(z0, z0s, keys, place, mesh, axis_name)
