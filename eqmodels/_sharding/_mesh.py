"""Meshes and partition specs for the sharded modules."""

import hashlib
import math

import equinox as eqx
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from .._validation import is_concrete


class AbstractSharded(eqx.Module):
    """Base class of modules split over one axis of a device mesh
    ([`eqmodels.ShardedChi2`][], [`eqmodels.ShardedForward`][]). The one rule for
    finding sharded parts in a tree of modules ([`eqmodels.sharded_parts`][]) is
    `isinstance(x, AbstractSharded)`: a sharded module of your own subclasses it
    (and holds `mesh`, `axis_name`) to be found by the objective's one-device-set
    check and by `survey`.
    """

    mesh: eqx.AbstractVar[Mesh]
    axis_name: eqx.AbstractVar[str]


def sharded_parts(tree) -> list[AbstractSharded]:
    """The sharded modules ([`eqmodels.AbstractSharded`][]) in `tree`, outermost
    first (a sharded module's own contents are not searched).

    **Arguments:** `tree`, any PyTree (a term, an objective, a forward model).

    **Returns:** the list of sharded modules, in tree order.
    """
    found = jax.tree_util.tree_leaves(
        tree, is_leaf=lambda x: isinstance(x, AbstractSharded)
    )
    return [x for x in found if isinstance(x, AbstractSharded)]


@eqx.filter_jit
def compiled(fn, *args):
    """`fn(*args)` as one compiled program, cached by `fn` and the arguments'
    structure (their array leaves' shapes and dtypes, their static fields).

    The sharded modules call their `shard_map`s through it: called eagerly (a
    term evaluated outside `jit`, an eager `jax.grad`), `shard_map` runs its body
    one operation at a time, orders of magnitude slower than the compiled program,
    which is compiled once. Inside a user's `jit` it is an inner call that XLA
    inlines.
    """
    return fn(*args)


def default_mesh(axis_name: str) -> Mesh:
    """A 1-d mesh over every device (of every process), named `axis_name`."""
    return Mesh(np.array(jax.devices()), (axis_name,))


def check_mesh(mesh, axis_name) -> tuple[Mesh, str, int]:
    """`(mesh, axis_name, size)` after checking that the mesh has the axis."""
    if not isinstance(axis_name, str) or not axis_name:
        raise TypeError(f"`axis_name` must be a non-empty string, got {axis_name!r}.")
    if mesh is None:
        mesh = default_mesh(axis_name)
    if not isinstance(mesh, Mesh):
        raise TypeError(
            "`mesh` must be a `jax.sharding.Mesh` (e.g. "
            "`jax.make_mesh((jax.device_count(),), ('rows',))`) or None for one over "
            f"every device, got {type(mesh).__name__}."
        )
    if axis_name not in mesh.axis_names:
        raise ValueError(
            f"the mesh has axes {tuple(mesh.axis_names)} but no axis named "
            f"{axis_name!r}: pass `axis_name=` one of them, or build the mesh with it."
        )
    return mesh, axis_name, int(mesh.shape[axis_name])


def check_same_on_every_process(tree, mesh: Mesh, what: str) -> None:
    """Refuse, on every process, a `tree` whose array leaves (shapes, dtypes and,
    where a process holds them whole, values) differ between the processes of a
    run whose `mesh` spans them all: each process places its own host copy as the
    global array, so a process passing other rows or values would silently make a
    term of pieces of both. A collective: every process calls it, in one order.
    Nothing to check in a one-process run, or on a mesh that spans fewer processes
    (terms built per process)."""
    n_proc = jax.process_count()
    if n_proc == 1 or len({d.process_index for d in mesh.devices.flat}) < n_proc:
        return
    digest = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(tree):
        if not hasattr(leaf, "shape") or not is_concrete(leaf):
            continue
        digest.update(repr((tuple(leaf.shape), str(leaf.dtype))).encode())
        if not isinstance(leaf, jax.Array) or leaf.is_fully_addressable:
            digest.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    from jax.experimental import multihost_utils

    mine = np.frombuffer(digest.digest(), np.uint8)
    every = np.asarray(multihost_utils.process_allgather(mine))
    if not (every == mine).all():
        raise ValueError(
            f"{what} differs between the processes of this multi-process run: every "
            "process must pass the same, whole, inputs (each keeps only its own "
            "devices' rows of them); do not split the data per process yourself."
        )


def padded_length(n: int, size: int) -> int:
    """The smallest multiple of `size` that is >= `n`."""
    return size * math.ceil(n / size)


def place(tree, specs, mesh: Mesh):
    """Put every concrete array leaf of `tree` on `mesh` with its spec: one global
    array per leaf, each process materialising only its addressable shards (so a
    multi-process run works with host arrays every process holds)."""

    def put(x, spec):
        if not (is_concrete(x) and hasattr(x, "shape")):
            return x
        sharding = NamedSharding(mesh, spec)
        if isinstance(x, jax.Array) and x.sharding == sharding:
            return x
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            # Spread over several processes (a padded sharded term): no process
            # holds it whole to slice on the host.
            return jax.device_put(x, sharding)
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda i: host[i])

    return jax.tree_util.tree_map(put, tree, specs, is_leaf=lambda s: s is None)


def split_specs(tree, prefixes: set[tuple[str, ...]], axis_name: str):
    """A tree of partition specs for `tree`: `P(axis_name)` (split along the leading
    axis) for every leaf under one of the attribute paths `prefixes` (e.g.
    `("weight",)`, `("forward", "a_re")`), `P()` (replicated) for every other."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    specs = []
    for path, _ in leaves:
        names = tuple(
            k.name if isinstance(k, jax.tree_util.GetAttrKey) else None for k in path
        )
        split = any(names[: len(p)] == p for p in prefixes)
        specs.append(P(axis_name) if split else P())
    return jax.tree_util.tree_unflatten(treedef, specs)


def forward_prefixes(forward, *head: str) -> set[tuple[str, ...]]:
    """The attribute paths of a forward model's per-point leaves, under `head`."""
    names = ("u", "v") + tuple(forward.point_fields or ())
    return {(*head, n) for n in names}


def host_array(x) -> np.ndarray:
    """A numpy copy of `x`; a global array spread over several processes is
    gathered from all of them first (every process must call this, in the same
    order, as for any collective)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        if x.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def has_explicit_axes(mesh: Mesh) -> bool:
    """Whether `mesh` has an axis of Explicit type (`jax.make_mesh`'s default)."""
    explicit = jax.sharding.AxisType.Explicit
    return any(t == explicit for t in getattr(mesh, "axis_types", ()))


def gathered(x, mesh: Mesh):
    """`x` resharded as replicated over `mesh` when the mesh has an Explicit axis
    (`jax.make_mesh`'s default): JAX refuses there to slice or gather a split
    dimension to a length the devices do not divide. Under Auto axes `x` is
    returned as is and XLA places the result."""
    if has_explicit_axes(mesh):
        return jax.sharding.reshard(x, NamedSharding(mesh, P()))
    return x


def split_explicitly(x) -> bool:
    """Whether `x` (concrete or traced) is split over a mesh axis of Explicit type:
    only such splits appear in its type (`jax.typeof(x).sharding`)."""
    spec = getattr(getattr(jax.typeof(x), "sharding", None), "spec", None)
    return spec is not None and any(p is not None for p in spec)


def unsplit(x):
    """`x` replicated over its mesh when it is split over an Explicit axis (where
    dense linear algebra refuses split operands); else `x` as is."""
    if not split_explicitly(x):
        return x
    return jax.sharding.reshard(x, NamedSharding(jax.typeof(x).sharding.mesh, P()))


def replicate(tree, mesh: Mesh):
    """Every concrete array leaf of `tree` as a global array replicated over `mesh`."""
    specs = jax.tree_util.tree_map(lambda _: P(), tree)
    return place(tree, specs, mesh)
