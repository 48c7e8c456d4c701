"""The forward-model interface: image → complex visibilities at fixed (u, v)."""

import abc
import math
from collections.abc import Sequence
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float

from .._custom_types import PointsLike
from .._grid import ImageGrid
from .._image._base import AbstractImageModel, evaluated_on
from .._numerics import asarray
from .._pulse import AbstractPulse, TrianglePulse
from .._validation import (
    as_real,
    check_grid,
    check_nonempty,
    check_same_shape,
    is_concrete,
    refuse_nonfinite_image,
    resolve_float_dtype,
)
from ._aliasing import warn_beyond_nyquist, warn_unresolved_field


class AbstractForwardModel(eqx.Module):
    """Base class of forward models: a linear map from an image on `grid` to complex
    visibilities at the points `(u, v)` (wavelengths), any leading shape.

    `model(image)` takes a real image of shape `(ny, nx)` in Jy/pixel and returns
    `V[...] = P(u, v) Σ_p img_p exp(+2πi (u x_p + v y_p))` with the shape of `u`.

    Subclasses hold `grid`, `u`, `v` and `pulse` and implement `__call__` and
    `at(u, v)` (the same model at other points).

    **Point-major leaves.** A subclass whose per-point arrays (beyond `u`, `v`) all
    have the flattened points as their leading axis lists them in the class
    attribute `point_fields` (e.g. `DirectFT.point_fields = ("a_re", "a_im")`:
    one matrix row per point). That is all [`eqmodels.AbstractForwardModel.take`][]
    needs to gather points without recomputing anything (on traced indices too), and
    what lets an [`eqmodels.Objective`][] serve several data terms from one model at
    their distinct points. A model that leaves `point_fields = None` still works
    everywhere, evaluated per term.

    **Hermitian points.** The class attribute `hermitian_points` (default `False`)
    declares that the per-point leaves are functions of `(u, v)` alone and that
    `V(−u, −v) = conj V(u, v)` for a real image (given an even pulse, see
    [`eqmodels.AbstractPulse`][]). A shared transform then merges points equal up
    to sign (one point for a baseline and its reverse); a model that does not
    declare it (a per-point gain of its own, say) has its points merged only where
    every point leaf is equal, in the same orientation. `DirectFT`, `SeparableFT`
    and `NUFFT` declare it.
    """

    grid: eqx.AbstractVar[ImageGrid]
    u: eqx.AbstractVar[Float[Array, "*points"]]
    v: eqx.AbstractVar[Float[Array, "*points"]]
    pulse: eqx.AbstractVar[AbstractPulse]

    point_fields: ClassVar[tuple[str, ...] | None] = None
    hermitian_points: ClassVar[bool] = False

    @abc.abstractmethod
    def __call__(
        self, image: Float[Array, "ny nx"] | AbstractImageModel
    ) -> Complex[Array, "*points"]:
        """**Arguments:**

        - `image`: real image, shape `(ny, nx)`, Jy per pixel, or an image model
          on the same grid (its image; as the terms take one). A concrete image
          with NaN or infinite pixels is refused (`ValueError`).

        **Returns:** complex visibilities with the shape of `u`.
        """

    @abc.abstractmethod
    def at(self, u: PointsLike, v: PointsLike) -> "AbstractForwardModel":
        """The same model (grid, pulse, options) evaluated at other points."""

    def take(self, index: ArrayLike | Sequence[int]) -> "AbstractForwardModel":
        """The same model at the points `u[index]`, `v[index]` (a gather along the
        leading axis of the points; nothing is recomputed, and `index` may be
        traced).

        **Arguments:** `index`, integer indices into the leading axis of `u`.

        **Returns:** a model of the same class with points of shape
        `(m, *u.shape[1:])`.
        """
        if self.point_fields is None:
            raise NotImplementedError(
                f"{type(self).__name__} does not declare `point_fields` (its per-point "
                "leaves), so its points cannot be gathered; declare them (see "
                "`AbstractForwardModel`) or rebuild the model with `at(u, v)`."
            )
        shape = tuple(self.u.shape)
        if not shape:
            raise ValueError(
                "`take` gathers along the points' leading axis, but this model's "
                "points are 0-d (one point): build it with `u`, `v` of shape (1,)."
            )
        idx = gather_index(index, shape[0], "index")
        if len(shape) == 1:
            flat = idx
        else:  # the legs of row i are the flat points i*k ... i*k + k - 1
            k = math.prod(shape[1:])
            flat = (idx[:, None] * k + _arange(k, idx)[None, :]).reshape(-1)
        names = ("u", "v") + tuple(self.point_fields)
        new = [
            take_rows(getattr(self, n), idx if n in ("u", "v") else flat) for n in names
        ]
        return eqx.tree_at(
            lambda m: tuple(getattr(m, n) for n in names), self, tuple(new)
        )

    def batched(self, images: Float[Array, "b ny nx"]) -> Complex[Array, " b *points"]:
        """The visibilities of several images on the grid at once (the Stokes planes
        of a polarimetric image): one batched transform, `jax.vmap(self)` (one
        matrix product for the dense models, one batched NUFFT). Override it where
        a model has a faster batched path.

        **Arguments:** `images`, shape `(b, ny, nx)`.

        **Returns:** `(b, *points)`.
        """
        return jax.vmap(lambda image: self(image))(images)

    @property
    def dtype(self) -> np.dtype:
        """The real floating dtype of the model (float32 or float64)."""
        return np.dtype(self.u.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        """Leading shape of the points (and of the returned visibilities)."""
        return tuple(self.u.shape)

    def _check_image(self, image) -> jax.Array:
        # Constructor inputs are annotated loosely (`ArrayLike`) on purpose: the
        # constructors validate shapes/dtypes themselves with errors that name the
        # argument and the fix, which a generic type-checker message would pre-empt.
        if isinstance(image, AbstractImageModel):
            # As the terms take one: the model's image, on this model's grid.
            image = evaluated_on(
                image,
                self.grid,
                "image",
                f"the forward model is built on {self.grid!r}: build the image "
                "model on the forward model's grid (same shape and pixel size).",
            )
        image = asarray(image)
        refuse_nonfinite_image("image", image, f"{type(self).__name__}")
        if image.shape != self.grid.shape:
            raise ValueError(
                f"`image` has shape {image.shape} but the model's grid is "
                f"{self.grid.shape} (ny, nx); a batch of images goes through `jax.vmap`."
            )
        if jnp.iscomplexobj(image):
            raise TypeError("`image` must be real (Jy/pixel), got a complex array.")
        if image.dtype != self.dtype:
            if self.dtype == jnp.float64 and not jax.config.read("jax_enable_x64"):
                # No cast makes float64 then: the model predates switching x64 off.
                raise TypeError(
                    f"`image` is {image.dtype} but the model computes in float64, "
                    "which JAX's 32-bit mode (x64 off) cannot: the model was built "
                    "with x64 on. Turn it back on (`jax.config.update("
                    "'jax_enable_x64', True)`) or rebuild the model and terms with "
                    "x64 off (they then compute in float32)."
                )
            other = (
                f" or build the model with `dtype=jnp.{image.dtype}`"
                if image.dtype in (jnp.float32, jnp.float64)
                else ""  # integer, bool, float16 or bfloat16 models do not exist
            )
            raise TypeError(
                f"`image` is {image.dtype} but the model computes in {self.dtype}; "
                f"cast the image (`image.astype(jnp.{self.dtype})`){other}."
            )
        return image


def prepare_points(grid, u, v, dtype, who: str):
    """Validate the constructor arguments shared by every forward model (`who`
    names it in messages); warn (`AliasingWarning`) about concrete points beyond
    the grid's Nyquist limit, and about points too short to resolve anything in
    its field of view (u, v in Gλ by mistake).

    Returns `(u, v, dtype)` with `u`, `v` as numpy arrays of `dtype` (or tracers).
    """
    check_grid(grid)
    dtype = resolve_float_dtype(dtype, u, v)
    u = as_real("u", u)
    v = as_real("v", v)
    check_same_shape(("u", "v"), u, v)
    check_nonempty("u", u)
    if is_concrete(u) and is_concrete(v):
        u = np.asarray(u, dtype)
        v = np.asarray(v, dtype)
        warn_beyond_nyquist(grid, u, v, who)
        warn_unresolved_field(grid, u, v, who)
    else:  # traced: the model's dtype all the same (a float32 model's `.at`)
        u = jnp.asarray(u, dtype)
        v = jnp.asarray(v, dtype)
    return u, v, dtype


def require_concrete_points(u, v, who: str) -> None:
    """Refuse traced points for models that build their matrices on the host."""
    if not (is_concrete(u) and is_concrete(v)):
        raise TypeError(
            f"{who} builds its matrices from `u`, `v` on the host, so the points "
            "cannot be traced: build the model outside `jit`/`vmap` (and pass it in), "
            "or use `NUFFT`, which takes traced points."
        )


def check_pulse(pulse):
    if pulse is None:
        return TrianglePulse()
    if not isinstance(pulse, AbstractPulse):
        raise TypeError(
            f"`pulse` must be an `AbstractPulse` (e.g. `TrianglePulse()`), got "
            f"{type(pulse).__name__}."
        )
    return pulse


def _arange(k: int, like):
    return np.arange(k) if isinstance(like, np.ndarray) else jnp.arange(k)


def gather_index(index, n: int, name: str):
    """`index` as a 1-d integer array into an axis of length `n`: a numpy array
    when concrete (checked to lie in `[0, n)`), else the tracer."""
    if not is_concrete(index):
        if not jnp.issubdtype(jnp.result_type(index), jnp.integer):
            raise TypeError(f"`{name}` must be integer indices.")
        return asarray(index).reshape(-1)
    idx = np.asarray(index)
    if idx.dtype == np.bool_ or not np.issubdtype(idx.dtype, np.integer):
        if idx.size == 0:
            idx = idx.astype(np.int64)
        else:
            raise TypeError(
                f"`{name}` must be integer indices (e.g. `np.arange(...)`), got dtype "
                f"{idx.dtype}; for a boolean mask use `np.flatnonzero(mask)`."
            )
    if idx.ndim != 1:
        raise ValueError(f"`{name}` must be 1-d, got shape {idx.shape}.")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(
            f"`{name}` must lie in [0, {n}) (there are {n} rows), got values from "
            f"{int(idx.min())} to {int(idx.max())}."
        )
    return idx


def take_rows(x, idx):
    """`x[idx]` along the leading axis: on the host (one numpy gather, no kernel
    compiled per shape) when everything is concrete and on the CPU, else `jnp`."""
    if (
        isinstance(idx, np.ndarray)
        and is_concrete(x)
        and getattr(x, "is_fully_addressable", True)  # not spread over processes
        and all(d.platform == "cpu" for d in getattr(x, "devices", lambda: [])())
    ):
        return asarray(np.asarray(x)[idx])
    return jnp.take(x, asarray(idx), axis=0)


def stokes_vis(
    forward: "AbstractForwardModel", stokes: Float[Array, "4 ny nx"]
) -> Complex[Array, "*points 4"]:
    """The Stokes visibilities of a polarimetric image, `(*points, 4)` (I, Q, U, V
    last, so that rows stay the leading axis), from one batched transform of its
    four planes."""
    return jnp.moveaxis(forward.batched(stokes), 0, -1)
