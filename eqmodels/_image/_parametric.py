"""Helpers shared by the parametric image models."""

import jax.numpy as jnp

from .._grid import ImageGrid


def pixel_offsets(grid: ImageGrid, x0, y0, dtype):
    """`(dx, dy)` = pixel-centre coordinates minus `(x0, y0)`, in **pixels** (so
    that squared distances stay well inside float32's range)."""
    xx, yy = grid.coords()
    p = grid.psize
    dx = jnp.asarray(xx / p, dtype) - x0 / p
    dy = jnp.asarray(yy / p, dtype) - y0 / p
    return dx, dy
