"""Angle units used in interferometric imaging."""

import math

import numpy as np
from jax.typing import ArrayLike


#: Radians per microarcsecond (exact π; eht-imaging truncates π to 3.141592653589,
#: a 2e-13 relative difference, far below any measured quantity).
RAD_PER_UAS: float = math.pi / 180.0 / 3600.0 / 1e6
#: Radians per degree.
RAD_PER_DEG: float = math.pi / 180.0


def _angle(x, fn: str, unit: str):
    """`x` as a number or array: a list or tuple of numbers becomes a numpy
    array (Python would repeat a list, `[40] * 2.0` fails, and a tuple of numbers
    times a float is refused obscurely); a string is refused (a number read from
    a file or the command line, not converted)."""
    if isinstance(x, str | bytes):
        raise TypeError(
            f"`{fn}` takes a number or an array of angles in {unit}, got the string "
            f"{x!r}: convert it first (`{fn}(float(x))`)."
        )
    if isinstance(x, list | tuple):
        try:
            arr = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(
                f"`{fn}` takes a number or an array of angles in {unit}, got a "
                f"{type(x).__name__} that is not all numbers: {x!r}."
            ) from None
        return arr
    return x


def uas_to_rad(x: ArrayLike | list | tuple) -> ArrayLike:
    """Convert microarcseconds to radians.

    **Arguments:**

    - `x`: an angle (float or array; a list or tuple of numbers becomes a numpy
      array) in µas. A string is refused with a `TypeError`.

    **Returns:** the angle in radians.
    """
    return _angle(x, "uas_to_rad", "µas") * RAD_PER_UAS


def rad_to_uas(x: ArrayLike | list | tuple) -> ArrayLike:
    """Convert radians to microarcseconds.

    **Arguments:**

    - `x`: an angle (float or array; a list or tuple of numbers becomes a numpy
      array) in radians. A string is refused with a `TypeError`.

    **Returns:** the angle in µas.
    """
    return _angle(x, "rad_to_uas", "radians") / RAD_PER_UAS
