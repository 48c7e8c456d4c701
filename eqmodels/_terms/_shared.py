"""One transform serving several data terms.

The data terms of an objective often evaluate the model at the same baselines: the
legs of closure phases and closure amplitudes are the visibilities' own (u, v),
some walked backwards. `SharedForward` holds one forward model at the **distinct**
points of a group of terms (points equal up to sign are merged, using
`V(−u, −v) = conj V(u, v)` for a real image) and, for every member term, the
gather (`index`, shaped like the member's points) and conjugation (`conj`) that
rebuild its visibilities. For the NUFFT this is one transform instead of one per
term; for the dense models a matrix with one row per distinct baseline instead of
one row per leg.

Any forward model that declares its per-point leaves (`point_fields`) can be shared;
models share when they agree on everything else (class, grid, pulse, static options,
dtype, every other leaf). Groups merge: `merge` takes raw terms' models and existing
groups alike, so adding terms to an objective never needs the members' own models
again.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Complex, Float, Int

from .._forward._base import AbstractForwardModel, stokes_vis, take_rows
from .._numerics import asarray
from .._sharding._forward import ShardedForward
from .._sharding._mesh import host_array, replicate
from .._validation import is_concrete


def _point_names(forward: AbstractForwardModel) -> tuple[str, ...]:
    return ("u", "v") + tuple(forward.point_fields or ())


def unwrap(forward) -> tuple[AbstractForwardModel | None, object]:
    """`(model, wrapping)`: a [`eqmodels.ShardedForward`][]'s inner model and its
    `(mesh, axis_name)`, or the model itself and `None`."""
    if isinstance(forward, ShardedForward):
        return forward.inner, (forward.mesh, forward.axis_name)
    return forward, None


def share_key(forward: AbstractForwardModel | None):
    """What must be equal for two forward models to share a transform (a hashable
    key), or `None` when `forward` cannot share: no `point_fields` declared, or
    traced leaves (the distinct points are found on the host)."""
    if not isinstance(forward, AbstractForwardModel) or forward.point_fields is None:
        return None
    names = _point_names(forward)
    if not all(is_concrete(getattr(forward, n)) for n in names):
        return None
    # Everything but the per-point leaves must agree: the tree structure holds the
    # class, grid, pulse and static options; other leaves (e.g. a pulse's
    # parameters) are compared by value.
    others = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(forward)[0]:
        first = path[0]
        if isinstance(first, jax.tree_util.GetAttrKey) and first.name in names:
            continue
        if not is_concrete(leaf):
            return None
        arr = host_array(leaf)
        others.append((arr.dtype.str, arr.shape, arr.tobytes()))
    return (
        type(forward),
        jax.tree_util.tree_structure(forward),
        forward.dtype,
        tuple(others),
    )


class SharedForward(eqx.Module):
    """One forward model at the distinct points of several data terms (its points
    are flat, `(m,)`), and for each member term the gather `index` and the
    conjugation mask `conj` (both shaped like the member's points) that rebuild its
    visibilities: `vis_member = where(conj, conj(V[index]), V[index])`.

    `members` are the positions of the member terms in their
    [`eqmodels.Objective`][].
    """

    forward: AbstractForwardModel
    index: tuple[Int[Array, "..."], ...]
    conj: tuple[Bool[Array, "..."], ...]
    members: tuple[int, ...] = eqx.field(static=True)

    def __call__(
        self, image: Float[Array, "ny nx"]
    ) -> tuple[Complex[Array, "..."], ...]:
        """The visibilities of each member (shaped like its points), in `members`
        order, from one evaluation of the shared model."""
        return self.gather(self.forward(image))

    def gather(self, vis: Complex[Array, " m"]) -> tuple[Complex[Array, "..."], ...]:
        """Each member's visibilities (in `members` order) from the visibilities
        `vis` at the shared points (of a real image: a merged point's conjugate
        serves its reverse)."""
        return tuple(
            jnp.where(cj, jnp.conj(vis[idx]), vis[idx])
            for idx, cj in zip(self.index, self.conj)
        )

    def stokes(
        self, stokes: Float[Array, "4 ny nx"]
    ) -> tuple[Complex[Array, "... 4"], ...]:
        """The Stokes visibilities `(*points, 4)` of each member, in `members`
        order, from one batched transform of the four planes (each plane is real,
        so a merged point's conjugate serves its reverse plane by plane)."""
        vis = stokes_vis(self.forward, stokes)
        return tuple(
            jnp.where(cj[..., None], jnp.conj(vis[idx]), vis[idx])
            for idx, cj in zip(self.index, self.conj)
        )

    @property
    def n_points(self) -> int:
        """Number of distinct points transformed."""
        return int(self.forward.u.shape[0])

    def shifted(self, offset: int) -> "SharedForward":
        """The same group with member positions shifted by `offset` (when its
        objective's terms are appended after `offset` others)."""
        return SharedForward(
            self.forward,
            self.index,
            self.conj,
            tuple(m + offset for m in self.members),
        )


def merge(
    sources: list[tuple[AbstractForwardModel, tuple[int, ...], tuple, tuple]],
    wrapping=None,
) -> SharedForward | None:
    """One shared model for several sources with the same `share_key`.

    Each source is `(forward, members, index, conj)`: a raw term's own model
    (`members` its one position, `index = arange(n).reshape(points)`, `conj` all
    False) or an existing `SharedForward`'s fields. Returns `None` when there is a
    single raw source with no repeated point (nothing to save).
    """
    us, vs = [], []
    for fwd, *_ in sources:
        us.append(host_array(fwd.u).astype(np.float64).reshape(-1))
        vs.append(host_array(fwd.v).astype(np.float64).reshape(-1))
    u, v = np.concatenate(us), np.concatenate(vs)
    proto = sources[0][0]
    if _point_fields_follow_uv(proto):
        flip = (u < 0) | ((u == 0) & (v < 0))
        canon = np.stack([np.where(flip, -u, u), np.where(flip, -v, v)], axis=1)
    else:
        flip = np.zeros(u.shape, bool)
        canon = _point_bytes([fwd for fwd, *_ in sources], u, v)
    _, first, inverse = np.unique(canon, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if len(sources) == 1 and wrapping is None:
        # A term alone is shared only when its rows have several points (closure
        # legs) that repeat. One point a row is never merged, even where points
        # repeat (a padded term's rows copy row 0), so that a term and its padded
        # copy share alike: a survey over data sets padded to one length needs
        # their terms of one structure.
        index = sources[0][2][0]  # the one member's point indices
        if np.ndim(index) <= 1 or first.size == u.size:
            return None
    sizes = [x.size for x in us]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    # Shared point k is the first occurrence of that baseline, in that occurrence's
    # orientation: its leaves are gathered from the source that holds it (no
    # recomputation); a member's point is its conjugate when orientations differ.
    owner = np.searchsorted(offsets, first, side="right") - 1
    row = first - offsets[owner]
    parts = [np.flatnonzero(owner == s) for s in range(len(sources))]
    names = _point_names(proto)
    on_host = wrapping is not None or all(
        d.platform == "cpu"
        for fwd, *_ in sources
        for n in names
        for d in getattr(fwd, n).devices()
    )
    gathered = []
    for name in names:
        flat = [getattr(fwd, name) for fwd, *_ in sources]
        if on_host:  # on the host: an eager reshape or gather compiles
            flat = [host_array(x) for x in flat]
        # Point fields are already point-major.
        flat = [x.reshape(-1) if name in ("u", "v") else x for x in flat]
        if on_host:
            out = np.empty((first.size, *flat[0].shape[1:]), flat[0].dtype)
            for x, p in zip(flat, parts):
                out[p] = x[row[p]]
            gathered.append(asarray(out))
        else:
            out = jnp.concatenate([take_rows(x, row[p]) for x, p in zip(flat, parts)])
            gathered.append(out[np.argsort(np.concatenate(parts))])
    forward = eqx.tree_at(
        lambda m: tuple(getattr(m, n) for n in names), proto, tuple(gathered)
    )
    members, index, conj = [], [], []
    for s, (_, mem, idx, cj) in enumerate(sources):
        for m, i, c in zip(mem, idx, cj):
            glob = offsets[s] + host_array(i)
            new = inverse[glob]
            members.append(m)
            index.append(asarray(new, jnp.int32))
            conj.append(asarray(host_array(c) ^ (flip[glob] != flip[first[new]])))
    order = np.argsort(members, kind="stable")
    index = tuple(index[k] for k in order)
    conj = tuple(conj[k] for k in order)
    if wrapping is not None:
        mesh, axis_name = wrapping
        forward = ShardedForward(forward, mesh, axis_name)
        index, conj = replicate((index, conj), mesh)
    return SharedForward(forward, index, conj, tuple(members[k] for k in order))


def _point_fields_follow_uv(forward: AbstractForwardModel) -> bool:
    """Whether `forward`'s points may be merged up to sign: its class declares
    `hermitian_points` (per-point leaves functions of `(u, v)` alone, with
    `V(−u, −v) = conj V(u, v)` for a real image) and its pulse, if any, declares
    `even` (`P(−u, −v) = P(u, v)`). Both default to `False`: an undeclared model
    or pulse has its points merged only where every point leaf is equal, in the
    same orientation (an odd pulse would make a shared objective differ from its
    terms)."""
    if not type(forward).hermitian_points:
        return False
    pulse = getattr(forward, "pulse", None)
    return pulse is None or bool(getattr(type(pulse), "even", False))


def _point_bytes(forwards, u, v) -> np.ndarray:
    """One row of bytes per point: `u`, `v` and every other point leaf's row."""
    cols = [np.stack([u, v], axis=1).view(np.uint8)]
    for name in forwards[0].point_fields or ():
        rows = [host_array(getattr(f, name)) for f in forwards]
        rows = np.concatenate([r.reshape(r.shape[0], -1) for r in rows])
        cols.append(np.ascontiguousarray(rows).view(np.uint8).reshape(u.size, -1))
    return np.concatenate(cols, axis=1)


def raw_source(forward: AbstractForwardModel, member: int):
    """A term's own model as a `merge` source."""
    shape = tuple(forward.u.shape)
    n = int(np.prod(shape))
    return (
        forward,
        (member,),
        (np.arange(n).reshape(shape),),
        (np.zeros(shape, bool),),
    )
