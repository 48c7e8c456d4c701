"""Angle units used in interferometric imaging."""

import math

from jax.typing import ArrayLike


#: Radians per microarcsecond (exact π; eht-imaging truncates π to 3.141592653589,
#: a 2e-13 relative difference, far below any measured quantity).
RAD_PER_UAS: float = math.pi / 180.0 / 3600.0 / 1e6
#: Radians per degree.
RAD_PER_DEG: float = math.pi / 180.0


def uas_to_rad(x: ArrayLike) -> ArrayLike:
    """Convert microarcseconds to radians.

    **Arguments:**

    - `x`: an angle (float or array) in µas.

    **Returns:** the angle in radians.
    """
    return x * RAD_PER_UAS


def rad_to_uas(x: ArrayLike) -> ArrayLike:
    """Convert radians to microarcseconds.

    **Arguments:**

    - `x`: an angle (float or array) in radians.

    **Returns:** the angle in µas.
    """
    return x / RAD_PER_UAS
