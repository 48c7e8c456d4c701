"""A forward model whose points are split over the devices of a mesh."""

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P
from jaxtyping import Array, ArrayLike, Complex, Float

from .._forward._base import AbstractForwardModel, gather_index, take_rows
from .._image._base import AbstractImageModel
from .._validation import is_concrete
from ._mesh import (
    AbstractSharded,
    check_mesh,
    compiled,
    forward_prefixes,
    gathered,
    padded_length,
    place,
    split_specs,
)


class ShardedForward(AbstractForwardModel, AbstractSharded):
    """A forward model evaluated with its points split over one axis of a device
    mesh (`jax.shard_map`): each device transforms its share of the points (for
    `DirectFT` it holds `1/n` of the matrix), the image is replicated, and the
    visibilities come back as one array sharded over the mesh (a gather of them by
    any row index is left to XLA).

    The points are flattened and padded to a multiple of the axis size with copies
    of point 0 (their visibilities are cut off); the visibilities and `u`, `v` come
    back in the wrapped model's shape of points (`(n, 3)` for closure triangles). Built by
    [`eqmodels.ShardedChi2`][] inside an [`eqmodels.Objective`][] for a shared
    transform; any forward model that declares its `point_fields` can be wrapped.
    """

    inner: AbstractForwardModel
    n_points: int = eqx.field(static=True)
    point_shape: tuple[int, ...] = eqx.field(static=True)
    mesh: Mesh = eqx.field(static=True)
    axis_name: str = eqx.field(static=True)

    def __init__(
        self,
        inner: AbstractForwardModel,
        mesh: Any = None,
        axis_name: str = "rows",
    ):
        """**Arguments:**

        - `inner`: the forward model (must declare `point_fields`).
        - `mesh`: the device mesh (default: every device, one axis).
        - `axis_name`: the mesh axis the points are split over.
        """
        if not isinstance(inner, AbstractForwardModel):
            raise TypeError(
                f"`inner` must be a forward model, got {type(inner).__name__}."
            )
        if inner.point_fields is None:
            raise TypeError(
                f"{type(inner).__name__} does not declare `point_fields`, so its "
                "points cannot be split over devices."
            )
        mesh, axis_name, size = check_mesh(mesh, axis_name)
        n = int(np.prod(inner.u.shape))
        length = padded_length(n, size)
        flat = _flatten_points(inner, length)
        self.inner = place(flat, self._specs(flat, axis_name), mesh)
        self.n_points = n
        self.point_shape = tuple(inner.u.shape)
        self.mesh = mesh
        self.axis_name = axis_name

    @staticmethod
    def _specs(inner, axis_name):
        return split_specs(inner, forward_prefixes(inner), axis_name)

    @property
    def grid(self):
        return self.inner.grid

    @property
    def pulse(self):
        return self.inner.pulse

    @property
    def dtype(self) -> np.dtype:
        # The inner model's: no reshard of the points on every call.
        return self.inner.dtype

    @property
    def u(self) -> Float[Array, "*points"]:
        return self._points(self.inner.u)

    @property
    def v(self) -> Float[Array, "*points"]:
        return self._points(self.inner.v)

    def _points(self, x):
        """Gathered, unpadded, in the wrapped model's shape of points."""
        return gathered(x, self.mesh)[: self.n_points].reshape(self.point_shape)

    def __call__(
        self, image: Float[Array, "ny nx"] | AbstractImageModel
    ) -> Complex[Array, "*points"]:
        return compiled(_transform, self, self._check_image(image))

    def at(self, u: ArrayLike, v: ArrayLike) -> "ShardedForward":
        return ShardedForward(self.inner.at(u, v), self.mesh, self.axis_name)

    def take(self, index: ArrayLike | Sequence[int]) -> "ShardedForward":
        """The same model at the points `u[index]`, `v[index]`, split over the same
        mesh (padded again to a multiple of the axis size). Points of one axis
        only (a shared transform's distinct points).

        **Arguments:** `index`, concrete integer indices into the points.
        """
        if len(self.point_shape) != 1:
            raise NotImplementedError(
                f"`take` gathers points of one axis; this model's points have shape "
                f"{self.point_shape}: take from the unwrapped model and wrap it again."
            )
        if not is_concrete(index):
            raise TypeError(
                "`index` must be concrete (the points are split over the devices "
                "again), not traced: take points outside `jit`."
            )
        inner = self.inner.take(gather_index(index, self.n_points, "index"))
        return ShardedForward(inner, self.mesh, self.axis_name)


def _transform(model: ShardedForward, image):
    """The body of `ShardedForward.__call__` (module-level: `compiled` caches one
    program per structure of model)."""
    vis = jax.shard_map(
        lambda inner, img: inner(img),
        mesh=model.mesh,
        in_specs=(model._specs(model.inner, model.axis_name), P()),
        out_specs=P(model.axis_name),
        # Without replication tracking, the cotangent of the replicated image is
        # summed over the devices by shard_map's own transpose — right for every
        # backend (with tracking, nufftax's derivative loses the device-varying
        # type and jax-finufft's needs a `pcast`).
        check_vma=False,
    )(model.inner, image)
    return model._points(vis)


def _flatten_points(inner: AbstractForwardModel, length: int) -> AbstractForwardModel:
    """`inner` with its points flattened to `(n,)` and padded to `length` with copies
    of point 0 (point-major leaves are already flat)."""
    n = int(np.prod(inner.u.shape))
    idx = np.concatenate([np.arange(n), np.zeros(length - n, int)])
    names = ("u", "v") + tuple(inner.point_fields)
    new = []
    for name in names:
        x = getattr(inner, name)
        x = x.reshape(-1) if name in ("u", "v") else x
        new.append(take_rows(x, idx))
    return eqx.tree_at(lambda m: tuple(getattr(m, k) for k in names), inner, tuple(new))
