"""The forward-model interface: image → complex visibilities at fixed (u, v)."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float

from .._grid import ImageGrid
from .._pulse import AbstractPulse, TrianglePulse
from .._validation import (
    as_real,
    check_grid,
    check_nonempty,
    check_same_shape,
    is_concrete,
    resolve_float_dtype,
)


class AbstractForwardModel(eqx.Module, strict=True):
    """Base class of forward models: a linear map from an image on `grid` to complex
    visibilities at the points `(u, v)` (wavelengths), any leading shape.

    `model(image)` takes a real image of shape `(ny, nx)` in Jy/pixel and returns
    `V[...] = P(u, v) Σ_p img_p exp(+2πi (u x_p + v y_p))` with the shape of `u`.

    Subclasses hold `grid`, `u`, `v` and `pulse` and implement `__call__` and
    `at(u, v)` (the same model at other points, used to pad and split rows).
    """

    grid: eqx.AbstractVar[ImageGrid]
    u: eqx.AbstractVar[Float[Array, "*points"]]
    v: eqx.AbstractVar[Float[Array, "*points"]]
    pulse: eqx.AbstractVar[AbstractPulse]

    @abc.abstractmethod
    def __call__(self, image: Float[Array, "ny nx"]) -> Complex[Array, "*points"]:
        """**Arguments:**

        - `image`: real image, shape `(ny, nx)`, Jy per pixel.

        **Returns:** complex visibilities with the shape of `u`.
        """

    @abc.abstractmethod
    def at(self, u: ArrayLike, v: ArrayLike) -> "AbstractForwardModel":
        """The same model (grid, pulse, options) evaluated at other points."""

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
        image = jnp.asarray(image)
        if image.shape != self.grid.shape:
            raise ValueError(
                f"`image` has shape {image.shape} but the model's grid is "
                f"{self.grid.shape} (ny, nx); a batch of images goes through `jax.vmap`."
            )
        if jnp.iscomplexobj(image):
            raise TypeError("`image` must be real (Jy/pixel), got a complex array.")
        if image.dtype != self.dtype:
            other = (
                f" or build the model with `dtype=jnp.{image.dtype}`"
                if jnp.issubdtype(image.dtype, jnp.floating)
                else ""  # an integer/bool model dtype does not exist
            )
            raise TypeError(
                f"`image` is {image.dtype} but the model computes in {self.dtype}; "
                f"cast the image (`image.astype(jnp.{self.dtype})`){other}."
            )
        return image


def prepare_points(grid, u, v, dtype):
    """Validate the constructor arguments shared by every forward model.

    Returns `(u, v, dtype)` with `u`, `v` as numpy arrays of `dtype` (or tracers).
    """
    check_grid(grid)
    dtype = resolve_float_dtype(dtype, u, v)
    u = as_real("u", u)
    v = as_real("v", v)
    check_same_shape(("u", "v"), u, v)
    check_nonempty("u", u)
    if is_concrete(u):
        u = np.asarray(u, dtype)
        v = np.asarray(v, dtype)
    return u, v, dtype


def check_pulse(pulse):
    if pulse is None:
        return TrianglePulse()
    if not isinstance(pulse, AbstractPulse):
        raise TypeError(
            f"`pulse` must be an `AbstractPulse` (e.g. `TrianglePulse()`), got "
            f"{type(pulse).__name__}."
        )
    return pulse
