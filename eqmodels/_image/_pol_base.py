"""The polarimetric image-model interface."""

import abc
from typing import ClassVar

from jaxtyping import Array, Float

from ._base import AbstractImageModel


class AbstractPolImageModel(AbstractImageModel):
    """Base class of polarimetric image models: `__call__()` returns the four Stokes
    planes, shape `(4, ny, nx)` in Jy/pixel, in the order I, Q, U, V (EVPA
    `χ = ½ arg(Q + iU)` east of north; see docs/conventions.md), on a fixed
    [`eqmodels.ImageGrid`][].

    A polarimetric model works everywhere an image model does: polarimetric terms
    and regularizers use all four planes, Stokes I ones the I plane. Subclass it
    by declaring a `grid` field and implementing `__call__`.
    """

    polarimetric: ClassVar[bool] = True

    @abc.abstractmethod
    def __call__(self) -> Float[Array, "4 ny nx"]:
        """**Returns:** the Stokes planes I, Q, U, V, shape `(4, ny, nx)`, Jy/pixel."""
