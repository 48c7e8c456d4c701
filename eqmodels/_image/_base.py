"""The image-model interface."""

import abc

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
    """

    grid: eqx.AbstractVar[ImageGrid]

    @abc.abstractmethod
    def __call__(self) -> Float[Array, "ny nx"]:
        """**Returns:** the image, shape `(ny, nx)`, Jy/pixel."""


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
    if tuple(jnp.shape(out)) != tuple(image.grid.shape):
        raise ValueError(
            f"{type(image).__name__}() returned an image of shape "
            f"{tuple(jnp.shape(out))}, but its grid is {tuple(image.grid.shape)} "
            "(ny, nx): an image model returns one value per pixel of its grid."
        )
    return out
