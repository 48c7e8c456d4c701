"""Type aliases used on public signatures."""

from typing import TypeAlias

import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Shaped


RealLike: TypeAlias = float | np.floating | Float[ArrayLike, ""]
ImageArray: TypeAlias = Float[Array, "ny nx"]
Points: TypeAlias = Float[ArrayLike, "*points"]
Visibilities: TypeAlias = Complex[Array, "*points"]

__all__ = [
    "Array",
    "ArrayLike",
    "Complex",
    "Float",
    "ImageArray",
    "Points",
    "RealLike",
    "Shaped",
    "Visibilities",
]
