"""Helpers shared by the parametric image models."""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._grid import ImageGrid
from .._validation import as_real, is_concrete


FWHM_PER_SIGMA = float(np.sqrt(8.0 * np.log(2.0)))


def param(name: str, x, dtype, *, positive: bool = False) -> Float[Array, ""]:
    """A scalar parameter, held as an array leaf of `dtype`."""
    x = as_real(name, x)
    if is_concrete(x):
        if np.ndim(x) != 0:
            raise ValueError(f"`{name}` must be a scalar, got shape {np.shape(x)}.")
        if positive and not float(x) > 0:
            raise ValueError(f"`{name}` must be > 0, got {float(x)}.")
    return jnp.asarray(x, dtype)


def pixel_offsets(grid: ImageGrid, x0, y0, dtype):
    """`(dx, dy)` = pixel-centre coordinates minus `(x0, y0)`, in **pixels** (so
    that squared distances stay well inside float32's range)."""
    xx, yy = grid.coords()
    p = grid.psize
    dx = jnp.asarray(xx / p, dtype) - x0 / p
    dy = jnp.asarray(yy / p, dtype) - y0 / p
    return dx, dy
