"""Helpers shared by the polarimetric image models."""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._grid import ImageGrid
from .._validation import as_real, is_concrete, scalar_leaf
from ._pixel import PixelImage


def fraction_leaves(frac, evpa, vfrac, dtype):
    """`(frac, evpa, vfrac)` as scalar leaves of `dtype`, checked where concrete:
    `frac ≥ 0` and `frac² + vfrac² ≤ 1` (a constant-polarization model's
    fractions)."""
    frac = scalar_leaf("frac", frac, dtype)
    evpa = scalar_leaf("evpa", evpa, dtype)
    vfrac = scalar_leaf("vfrac", vfrac, dtype)
    if is_concrete(frac) and is_concrete(vfrac):
        m, v = float(frac), float(vfrac)
        if m < 0:
            raise ValueError(
                f"`frac` must be >= 0, got {m} (for the perpendicular direction "
                "add π/2 to `evpa`)."
            )
        if m * m + v * v > 1:
            raise ValueError(
                f"`frac`² + `vfrac`² must be <= 1 (Q² + U² + V² <= I²), got "
                f"frac={m}, vfrac={v} (polarized fraction {np.hypot(m, v):.4g})."
            )
    return frac, evpa, vfrac


def clip_fraction(fq, fu, fv):
    """The fractional polarization vector `(fq, fu, fv)` scaled onto the unit ball
    where it lies outside (`|f| > 1`), unchanged inside: the rendered image then
    obeys `Q² + U² + V² ≤ I²` whatever the parameters. Value and derivative are
    finite everywhere (the double-where pattern: the square root only sees
    `|f|² > 1`)."""
    n2 = fq * fq + fu * fu + fv * fv
    out = n2 > 1
    s = jnp.where(out, 1.0 / jnp.sqrt(jnp.where(out, n2, 1.0)), 1.0)
    return s * fq, s * fu, s * fv


def embed_planes(
    values: Float[Array, "k nfree"], intensity: PixelImage
) -> Float[Array, "k ny nx"]:
    """Per-free-pixel values `(k, nfree)` on the grid of `intensity` (0 off its
    embed mask)."""
    grid = intensity.grid
    k = values.shape[0]
    if intensity.indices.shape[0] == grid.npix:
        return values.reshape(k, *grid.shape)
    flat = jnp.zeros((k, grid.npix), values.dtype).at[:, intensity.indices].set(values)
    return flat.reshape(k, *grid.shape)


def check_intensity(intensity) -> PixelImage:
    if not isinstance(intensity, PixelImage):
        raise TypeError(
            "`intensity` must be a `PixelImage` (the Stokes I pixels), got "
            f"{type(intensity).__name__}: build it with `eqmodels.PixelImage(grid, "
            "log_pixels)`, `PixelImage.from_image(image, grid)` or "
            "`PixelImage.from_prior(prior, grid, clipfloor=..., flux=...)`."
        )
    return intensity


def free_pixel_planes(name: str, x, intensity: PixelImage, k: int, dtype):
    """`x` of shape `(k, ny, nx)` (of which the free pixels are taken) or
    `(k, nfree)`, as a `(k, nfree)` array of `dtype`; a clear error naming
    `name` otherwise."""
    x = as_real(name, x)
    if is_concrete(x):
        x = np.asarray(x)
    grid = intensity.grid
    nfree = int(intensity.indices.shape[0])
    shape = tuple(np.shape(x))
    if shape == (k, *grid.shape):
        flat = x.reshape(k, -1)
        x = flat if nfree == grid.npix else flat[:, np.asarray(intensity.indices)]
    elif shape != (k, nfree):
        raise ValueError(
            f"`{name}` has shape {shape}; expected ({k}, {grid.ny}, {grid.nx}) (one "
            f"{k}-vector per pixel)"
            + (
                f" or ({k}, {nfree}) (one per free pixel of the embed mask)"
                if nfree != grid.npix
                else ""
            )
            + "."
        )
    return jnp.asarray(x, dtype)


def check_order(stokes, grid, call: str) -> None:
    """A clear error for `call(grid, stokes)` (the Stokes planes come first, as
    `PixelImage.from_image(image, grid)` takes them)."""
    if isinstance(stokes, ImageGrid) and not isinstance(grid, ImageGrid):
        raise TypeError(
            f"`{call}(stokes, grid)`: the Stokes planes come first and the grid "
            f"second (as in `PixelImage.from_image(image, grid)`); got the grid "
            "first."
        )


def stokes_on_grid(stokes, grid, name: str = "stokes"):
    """`stokes` as a real `(4, ny, nx)` array (numpy when concrete), with a clear
    error naming `name`."""
    stokes = as_real(name, stokes)
    if is_concrete(stokes):
        stokes = np.asarray(stokes)
    if tuple(np.shape(stokes)) != (4, *grid.shape):
        raise ValueError(
            f"`{name}` has shape {tuple(np.shape(stokes))}; expected the four Stokes "
            f"planes I, Q, U, V on the grid, (4, {grid.ny}, {grid.nx})."
        )
    return stokes


def first_index(bad: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))
