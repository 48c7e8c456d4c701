"""The image-model interface."""

import abc

import equinox as eqx
from jaxtyping import Array, Float

from .._grid import ImageGrid


class AbstractImageModel(eqx.Module, strict=True):
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
