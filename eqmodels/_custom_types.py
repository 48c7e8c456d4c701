"""Type aliases used on public signatures."""

from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Real, Shaped


RealLike: TypeAlias = float | np.floating | Float[ArrayLike, ""]
#: A real number given as a Python or numpy scalar or a 0-d array (host-side
#: arguments: averaging intervals, thresholds, fluxes).
RealScalar: TypeAlias = float | int | np.number | Real[np.ndarray | Array, ""]
ImageArray: TypeAlias = Float[Array, "ny nx"]
Points: TypeAlias = Float[ArrayLike, "*points"]
Visibilities: TypeAlias = Complex[Array, "*points"]
#: What constructors accept for an array argument: an array or a (nested) list /
#: tuple of numbers. Converted with `np.asarray` and validated with errors that name
#: the argument (the annotation only admits sequences).
ArraySequence: TypeAlias = Sequence[Any]
#: What forward models accept for `u`, `v`: an array, or a (nested) list / tuple
#: of numbers. Annotated loosely on purpose: the constructors check dtype (real),
#: shape (`u` and `v` alike) and values with errors that name the argument and the
#: fix, which a type checker's generic message would pre-empt.
PointsLike: TypeAlias = ArrayLike | ArraySequence

__all__ = [
    "Array",
    "ArrayLike",
    "ArraySequence",
    "Complex",
    "Float",
    "ImageArray",
    "Points",
    "PointsLike",
    "RealLike",
    "RealScalar",
    "Shaped",
    "Visibilities",
]
