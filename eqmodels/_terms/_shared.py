"""One transform serving several data terms.

The data terms of an objective often evaluate the model at the same baselines: the
legs of closure phases and closure amplitudes are the visibilities' own (u, v),
some walked backwards. `SharedForward` evaluates one forward model at the
**distinct** points of a group of terms (points equal up to sign are merged, using
`V(−u, −v) = conj V(u, v)` for a real image) and hands every term its
visibilities by a gather. For the NUFFT this is one transform instead of one per
term; for the dense models it is a matrix with as many rows as distinct baselines
instead of one row per leg.

The terms themselves are unchanged: `Objective` swaps each member's `forward` for a
[`GivenVis`][] holding the gathered visibilities (a data term evaluates
`self.forward(image)` once, on the image it is given).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Complex, Float, Int

from .._forward._base import AbstractForwardModel
from .._forward._direct import DirectFT
from .._forward._nufft import NUFFT
from .._forward._separable import SeparableFT
from .._grid import ImageGrid
from .._pulse import AbstractPulse
from .._validation import is_concrete


# Forward models whose array leaves are all "point-major" (leading axis = the
# flattened points), so that a model at a subset of points is a gather of rows.
_SHAREABLE_FORWARDS = (DirectFT, SeparableFT, NUFFT)


class GivenVis(AbstractForwardModel, strict=True):
    """A stand-in forward model returning visibilities computed elsewhere (by a
    [`SharedForward`][]); `__call__` ignores its argument."""

    grid: ImageGrid
    u: Float[Array, "*points"]
    v: Float[Array, "*points"]
    pulse: AbstractPulse
    vis: Complex[Array, "*points"]

    def __init__(self, forward: AbstractForwardModel, vis: Complex[Array, "*points"]):
        self.grid = forward.grid
        self.u = forward.u
        self.v = forward.v
        self.pulse = forward.pulse
        self.vis = vis

    def __call__(self, image: Float[Array, "ny nx"]) -> Complex[Array, "*points"]:
        return self.vis

    def at(self, u: Float[ArrayLike, "*q"], v: Float[ArrayLike, "*q"]) -> "GivenVis":
        raise NotImplementedError("`GivenVis` only exists inside an objective call.")


def share_key(forward: AbstractForwardModel):
    """What must be equal for two forward models to share a transform, or `None`
    when `forward` cannot share (a user model, a pulse with array leaves, traced
    points)."""
    if type(forward) not in _SHAREABLE_FORWARDS:
        return None
    if jax.tree_util.tree_leaves(forward.pulse):
        return None
    if not all(is_concrete(x) for x in jax.tree_util.tree_leaves(forward)):
        return None
    # The tree structure holds the type, the grid, the pulse and the static options
    # (e.g. the NUFFT's eps); the dtype is a property of the leaves.
    return (type(forward), jax.tree_util.tree_structure(forward), forward.dtype)


def _point_major_leaves(forward: AbstractForwardModel, xp) -> list | None:
    """The forward model's leaves as `xp` arrays (numpy views of host arrays, or
    device arrays), each reshaped to `(n_points, ...)`, or `None` when a leaf is
    not point-major."""
    shape = tuple(forward.u.shape)
    n = int(np.prod(shape))
    out = []
    for leaf in jax.tree_util.tree_leaves(forward):
        leaf = xp.asarray(leaf)
        if tuple(leaf.shape) == shape:
            leaf = leaf.reshape(n)
        if leaf.ndim == 0 or leaf.shape[0] != n:
            return None
        out.append(leaf)
    return out


class SharedForward(eqx.Module, strict=True):
    """One forward model at the distinct points of several data terms, and for each
    member term the gather (`index`) and conjugation (`conj`) that rebuild its
    visibilities."""

    forward: AbstractForwardModel
    index: tuple[Int[Array, " m"], ...]
    conj: tuple[Bool[Array, " m"], ...]
    members: tuple[int, ...] = eqx.field(static=True)

    def __init__(
        self,
        forward: AbstractForwardModel,
        index: tuple[Int[Array, " m"], ...],
        conj: tuple[Bool[Array, " m"], ...],
        members: tuple[int, ...],
    ):
        self.forward = forward
        self.index = index
        self.conj = conj
        self.members = members

    @classmethod
    def build(
        cls, forwards: list[AbstractForwardModel], members: list[int]
    ) -> "SharedForward | None":
        """Share one transform among `forwards` (all with the same `share_key`);
        `None` when nothing would be saved or the models cannot be split."""
        u = np.concatenate([np.asarray(f.u, np.float64).reshape(-1) for f in forwards])
        v = np.concatenate([np.asarray(f.v, np.float64).reshape(-1) for f in forwards])
        flip = (u < 0) | ((u == 0) & (v < 0))
        canon = np.stack([np.where(flip, -u, u), np.where(flip, -v, v)], axis=1)
        _, first, inverse = np.unique(
            canon, axis=0, return_index=True, return_inverse=True
        )
        inverse = inverse.reshape(-1)
        if len(forwards) == 1 and first.size == u.size:
            return None  # one term, no repeated point: nothing to share
        # On the host when the leaves live there (op-by-op device gathers would
        # compile one kernel per shape); on the device otherwise (no round trip).
        on_host = all(
            d.platform == "cpu"
            for f in forwards
            for x in jax.tree_util.tree_leaves(f)
            for d in x.devices()
        )
        xp = np if on_host else jnp
        leaves = [_point_major_leaves(f, xp) for f in forwards]
        if any(ls is None for ls in leaves):
            return None
        sizes = [int(np.prod(f.u.shape)) for f in forwards]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        # The shared model's point k is the first occurrence of that baseline, in
        # that occurrence's orientation: its rows are gathered (on the device, no
        # recomputation, no host round trip) from the member that holds it, and a
        # term's point is its conjugate when the two orientations differ.
        owner = np.searchsorted(offsets, first, side="right") - 1
        row = first - offsets[owner]
        # Gather each member's own rows, then put them in shared-point order.
        parts = [np.flatnonzero(owner == m) for m in range(len(forwards))]
        gathered = []
        for i in range(len(leaves[0])):
            proto = leaves[0][i]
            if xp is np:  # one copy of each row, straight into place
                out = np.empty((first.size, *proto.shape[1:]), proto.dtype)
                for ls, p in zip(leaves, parts):
                    out[p] = ls[i][row[p]]
            else:
                out = jnp.concatenate([ls[i][row[p]] for ls, p in zip(leaves, parts)])
                out = out[np.argsort(np.concatenate(parts))]
            gathered.append(jnp.asarray(out))
        treedef = jax.tree_util.tree_structure(forwards[0])
        shared = jax.tree_util.tree_unflatten(treedef, gathered)
        index, conj = [], []
        for m in range(len(forwards)):
            seg = inverse[offsets[m] : offsets[m + 1]]
            index.append(jnp.asarray(seg, jnp.int32))
            conj.append(
                jnp.asarray(flip[offsets[m] : offsets[m + 1]] != flip[first[seg]])
            )
        return cls(shared, tuple(index), tuple(conj), tuple(members))

    def __call__(
        self, image: Float[Array, "ny nx"]
    ) -> tuple[Complex[Array, " m"], ...]:
        """The flat visibilities of each member, in `members` order."""
        vis = self.forward(image)
        out = []
        for idx, cj in zip(self.index, self.conj):
            z = vis[idx]
            out.append(jnp.where(cj, jnp.conj(z), z))
        return tuple(out)

    @property
    def n_points(self) -> int:
        """Number of distinct points transformed."""
        return int(np.prod(self.forward.u.shape))
