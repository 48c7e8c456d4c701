"""Checks shared by the polarimetric regularizers: the Stokes planes they are given
and the Stokes V flux of their normalisations."""

import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._custom_types import RealLike
from .._terms._inputs import as_stokes, ImageLike, term_grid
from .._validation import is_concrete, scalar_leaf


def check_stokes_shape(
    stokes: Float[Array, "..."], who: str, shape: tuple[int, int] | None = None
) -> None:
    """Refuse anything but `(4, ny, nx)` (and `(4, *shape)` when `shape` is given)."""
    bad = stokes.ndim != 3 or stokes.shape[0] != 4
    if not bad and shape is not None:
        bad = tuple(stokes.shape[1:]) != tuple(shape)
    if bad:
        want = "(4, ny, nx)" if shape is None else f"(4, {shape[0]}, {shape[1]})"
        raise ValueError(
            f"{who}: the Stokes image has shape {tuple(stokes.shape)}, expected "
            f"{want} (planes I, Q, U, V); a batch of images goes through `jax.vmap`."
        )


def stokes_of(reg, image: ImageLike) -> Float[Array, "4 ny nx"]:
    """The four planes of `image` as the regularizer's `__call__` takes them (for
    `residuals`)."""
    return as_stokes(image, term_grid(reg), type(reg).__name__)


def vflux_arg(
    vflux: RealLike | None, normalise: bool, *, required: bool = False
) -> Float[Array, ""] | None:
    """The Stokes V flux `F_V` (Jy, any sign) as a scalar leaf. The normalisations
    divide by `|F_V|` (eht-imaging's), so `normalise=True` needs one, non-zero."""
    if vflux is None:
        if required or normalise:
            why = "" if required else " when normalise=True"
            raise ValueError(
                f"`vflux` (the target total Stokes V flux F_V, Jy) is required{why}."
            )
        return None
    leaf = scalar_leaf("vflux", vflux)
    if normalise and is_concrete(leaf) and not abs(float(np.asarray(leaf))) > 0:
        raise ValueError(
            "`vflux` = 0 with normalise=True divides by |F_V| = 0: give the expected "
            "total Stokes V flux (non-zero, e.g. 0.01 × the total flux), or "
            "normalise=False."
        )
    return leaf


def abs_vflux(vflux: Float[Array, ""], like: Float[Array, "..."]) -> Float[Array, ""]:
    """`|F_V|` in the image's dtype."""
    return jnp.abs(jnp.asarray(vflux, like.dtype))


def check_positive_eps(eps: float) -> float:
    try:
        eps = float(eps)
    except (TypeError, ValueError):
        raise TypeError(f"`eps` must be a float, got {eps!r}.")
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(
            f"`eps` must be finite and > 0, got {eps}: the entropy's `ln m` is −∞ "
            "at zero polarization without it (the default 1e-16 changes values by "
            "less than 1e-12 relative where m >= 1e-2)."
        )
    return eps
