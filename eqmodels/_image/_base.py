"""The image-model interface."""

import abc
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._grid import ImageGrid, same_grid


class AbstractImageModel(eqx.Module):
    """Base class of image models: a module whose `__call__()` returns the image,
    shape `(ny, nx)` in Jy/pixel, on a fixed [`eqmodels.ImageGrid`][].

    The image model is what a training loop optimises:
    `eqx.filter_grad(objective)(image_model)`. Subclass it (pixels, parametric
    shapes, a neural field) by declaring a `grid` field and implementing
    `__call__`.

    **Polarimetric models** declare the class attribute `polarimetric = True` and
    return the four Stokes planes, `(4, ny, nx)` (I, Q, U, V); subclass
    [`eqmodels.AbstractPolImageModel`][], which declares it. A Stokes I term or
    regularizer given one uses its I plane.
    """

    grid: eqx.AbstractVar[ImageGrid]

    polarimetric: ClassVar[bool] = False

    @abc.abstractmethod
    def __call__(self) -> Float[Array, "ny nx"]:
        """**Returns:** the image, shape `(ny, nx)`, Jy/pixel."""

    @property
    def image_shape(self) -> tuple[int, ...]:
        """What `__call__()` returns: `(ny, nx)`, or `(4, ny, nx)` for a
        polarimetric model."""
        return (4, *self.grid.shape) if self.polarimetric else tuple(self.grid.shape)


def evaluated_on(image, grid: ImageGrid | None, name: str, fix: str):
    """`image()` for an image model on `grid` (the same pixels; any grid when
    `grid` is None); anything else is returned as it is. A model on another grid
    raises `ValueError("`name` is a <Model> on <its grid> but " + fix)`."""
    if not isinstance(image, AbstractImageModel):
        return image
    if grid is not None and not same_grid(image.grid, grid):
        raise ValueError(
            f"`{name}` is a {type(image).__name__} on {image.grid!r} but {fix}"
        )
    out = image()
    if tuple(jnp.shape(out)) != image.image_shape:
        what = (
            "a polarimetric image model returns the four Stokes planes of its grid, "
            "(4, ny, nx)"
            if image.polarimetric
            else "an image model returns one value per pixel of its grid"
        )
        raise ValueError(
            f"{type(image).__name__}() returned an image of shape "
            f"{tuple(jnp.shape(out))}, but its grid is {tuple(image.grid.shape)} "
            f"(ny, nx): {what}."
        )
    return out
