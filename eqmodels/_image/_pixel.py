"""Free pixels with a positivity transform."""

import math
import numbers
from typing import Literal

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, Real

from .._custom_types import ArraySequence, RealLike
from .._grid import ImageGrid
from .._numerics import asarray
from .._validation import as_real, check_grid, is_concrete, resolve_float_dtype
from ._base import AbstractImageModel, evaluated_on


_TRANSFORMS = ("log", "identity")
_SAME_GRID = "`grid` is {!r}: build it on the same grid."


class PixelImage(AbstractImageModel):
    """An image whose pixels are free parameters.

    With `transform="log"` (default) the parameters are `x = ln I` and the image is
    `exp(x)`, positive by construction (eht-imaging's `'log'` transform). With
    `"identity"` the parameters are the pixel values. With an embed `mask`, only
    the pixels where it is `True` are free; the others are exactly 0.

    Build one from an image with [`eqmodels.PixelImage.from_image`][].
    """

    grid: ImageGrid
    params: Float[Array, " nfree"]
    indices: Int[Array, " nfree"]  # flat pixel indices of the free pixels
    transform: Literal["log", "identity"] = eqx.field(static=True)

    def __init__(
        self,
        grid: ImageGrid,
        params: Real[ArrayLike, "..."] | ArraySequence,
        *,
        transform: str = "log",
        mask: Bool[ArrayLike, "ny nx"] | ArraySequence | None = None,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][].
        - `params`: the free parameters: shape `(ny, nx)` without a mask, or
          `(mask.sum(),)` (or `(ny, nx)`, of which the masked pixels are taken)
          with one.
        - `transform`: `"log"` (image = exp(params)) or `"identity"`.
        - `mask`: optional boolean `(ny, nx)` embed mask.
        - `dtype`: float32 / float64; default from `params`.
        """
        check_grid(grid)
        if transform not in _TRANSFORMS:
            raise ValueError(
                f"`transform` must be one of {_TRANSFORMS}, got {transform!r}."
            )
        dtype = resolve_float_dtype(dtype, params)
        indices = _mask_indices(mask, grid)
        params = as_real("params", params)
        if is_concrete(params):
            params = np.asarray(params)  # on the host: no eager program
        shape = tuple(np.shape(params))  # static, traced or not
        if shape == grid.shape:
            flat = params.reshape(-1)
            params = flat if mask is None else flat[indices]
        elif shape != (indices.size,):
            raise ValueError(
                f"`params` has shape {shape}; expected {grid.shape}"
                + (
                    f" or ({indices.size},) (the masked pixels)"
                    if mask is not None
                    else ""
                )
                + "."
            )
        self.grid = grid
        self.params = asarray(params, dtype)
        self.indices = asarray(indices, jnp.int32)
        self.transform = transform

    @classmethod
    def from_image(
        cls,
        image: Real[ArrayLike, "ny nx"] | ArraySequence | AbstractImageModel,
        grid: ImageGrid,
        *,
        transform: str = "log",
        mask: Bool[ArrayLike, "ny nx"] | ArraySequence | None = None,
        dtype=None,
    ) -> "PixelImage":
        """A `PixelImage` whose `__call__()` returns `image` (on the mask).

        **Arguments:**

        - `image`: `(ny, nx)` Jy/pixel, or an image model on `grid` (its image);
          strictly positive (on the mask) for the log transform.
        - `grid`, `transform`, `mask`, `dtype`: as for the constructor.
        """
        check_grid(grid)
        image = evaluated_on(image, grid, "image", _SAME_GRID.format(grid))
        indices = _mask_indices(mask, grid)
        # The dtype comes from the input as given (`as_real` computes in float64).
        dtype = resolve_float_dtype(dtype, image)
        image = as_real("image", image)
        if is_concrete(image):
            image = np.asarray(image)
            if image.shape != grid.shape:
                raise ValueError(
                    f"`image` has shape {image.shape}, the grid is {grid.shape}."
                )
            if transform == "log":
                sel = image if mask is None else image.reshape(-1)[indices]
                if np.any(sel <= 0):
                    raise ValueError(
                        "the log transform needs a strictly positive `image` (on the "
                        "mask); add a small floor (e.g. `np.maximum(image, 1e-10 * "
                        "image.max())`) or use `transform='identity'`."
                    )
        elif tuple(np.shape(image)) != grid.shape:  # traced: the shape is static
            raise ValueError(
                f"`image` has shape {tuple(np.shape(image))}, the grid is {grid.shape}."
            )
        if mask is not None:
            image = image.reshape(-1)[indices]
        if transform == "log":  # on the host when concrete: no eager program
            params = np.log(image) if is_concrete(image) else jnp.log(image)
        else:
            params = image
        return cls(grid, params, transform=transform, mask=mask, dtype=dtype)

    @classmethod
    def from_prior(
        cls,
        prior: Real[ArrayLike, "ny nx"] | ArraySequence | AbstractImageModel,
        grid: ImageGrid,
        *,
        clipfloor: float = 0.0,
        init: Real[ArrayLike, "ny nx"]
        | ArraySequence
        | AbstractImageModel
        | None = None,
        flux: RealLike | None = None,
        transform: Literal["log", "identity"] = "log",
        dtype=None,
    ) -> "PixelImage":
        """A `PixelImage` whose free pixels are where `prior > clipfloor`
        (eht-imaging's embed mask), starting from `init` (default: the prior).

        **Arguments:**

        - `prior`: the prior image `(ny, nx)`, Jy/pixel, or an image model on
          `grid` (e.g. a [`eqmodels.GaussianImage`][]). Concrete: the mask is
          chosen on the host, so build the model outside `jit`.
        - `grid`: the [`eqmodels.ImageGrid`][].
        - `clipfloor`: pixels where `prior <= clipfloor` are fixed at 0. eht-imaging
          compares with the prior as given; pass a floor relative to its peak
          (e.g. `1e-4 * prior.max()`) for a scale-free mask.
        - `init`: the initial image or image model (default `prior`); must be > 0
          on the mask for the log transform.
        - `flux`: if given, `init` is rescaled to sum to `flux` on the mask (as
          eht-imaging rescales its initial image to the total flux).
        - `transform`, `dtype`: as for the constructor.
        """
        check_grid(grid)
        prior = evaluated_on(prior, grid, "prior", _SAME_GRID.format(grid))
        init = (
            None
            if init is None
            else evaluated_on(init, grid, "init", _SAME_GRID.format(grid))
        )
        for name, x in (("prior", prior), ("init", init)):
            if x is not None and not is_concrete(x):
                raise TypeError(
                    f"`{name}` must be concrete: `from_prior` chooses the free pixels "
                    f"from it on the host. Build the model outside `jit`/`vmap`, or "
                    "use `PixelImage.from_image(..., mask=...)` with a fixed mask."
                )
        dtype = resolve_float_dtype(dtype, prior, *([] if init is None else [init]))
        prior = np.asarray(as_real("prior", prior))
        if prior.shape != grid.shape:
            raise ValueError(
                f"`prior` has shape {prior.shape}, the grid is {grid.shape}."
            )
        try:
            clipfloor = float(clipfloor)
        except (TypeError, ValueError):
            raise TypeError(f"`clipfloor` must be a float, got {clipfloor!r}.")
        if transform == "log" and clipfloor < 0 and np.any(prior <= 0):
            raise ValueError(
                f"`clipfloor`={clipfloor} frees pixels where `prior` is 0 or "
                "negative, which the log transform cannot represent: use "
                "`clipfloor` >= 0 (pixels at or below it stay 0), or "
                "`transform='identity'`."
            )
        mask = prior > clipfloor
        if not mask.any():
            raise ValueError(
                f"no pixel of `prior` is above `clipfloor`={clipfloor} (prior max "
                f"{prior.max():.4g}): lower the clip floor."
            )
        image = prior if init is None else np.asarray(as_real("init", init))
        if image.shape != grid.shape:
            raise ValueError(
                f"`init` has shape {image.shape}, the grid is {grid.shape}."
            )
        image = np.where(mask, image, 0.0)
        if flux is not None:
            if is_concrete(flux) and np.ndim(flux) == 0 and hasattr(flux, "item"):
                flux = flux.item()  # a 0-d numpy/JAX array, e.g. `prior.sum()`
            if isinstance(flux, bool) or not (
                isinstance(flux, numbers.Real) and math.isfinite(flux) and flux > 0
            ):
                raise ValueError(
                    f"`flux` must be a finite number > 0 (Jy), got {flux!r}."
                )
            total = image.sum()
            if not total > 0:
                raise ValueError("`init` has no positive flux on the mask to rescale.")
            image = image * (float(flux) / total)
        if transform == "log":
            if np.any(image[mask] <= 0):  # the prior is > 0 on its own mask
                raise ValueError(
                    "the log transform needs an `init` strictly positive on the mask "
                    "(the prior above its clip floor); add a small floor (e.g. "
                    "`np.maximum(init, 1e-10 * init.max())`) or use "
                    "`transform='identity'`."
                )
            image = np.where(mask, image, 1.0)  # unused off the mask
        return cls.from_image(image, grid, transform=transform, mask=mask, dtype=dtype)

    @property
    def mask(self) -> np.ndarray:
        """The boolean embed mask, `(ny, nx)` (a numpy array: on the host, outside
        `jit`)."""
        m = np.zeros(self.grid.npix, bool)
        m[np.asarray(self.indices)] = True
        return m.reshape(self.grid.shape)

    def __call__(self) -> Float[Array, "ny nx"]:
        vals = jnp.exp(self.params) if self.transform == "log" else self.params
        if self.indices.shape[0] == self.grid.npix:
            return vals.reshape(self.grid.shape)
        flat = jnp.zeros(self.grid.npix, vals.dtype).at[self.indices].set(vals)
        return flat.reshape(self.grid.shape)


def _mask_indices(mask, grid: ImageGrid) -> np.ndarray:
    """The flat indices of the free pixels of an embed `mask` (all pixels when
    `None`), or a clear error naming `mask`."""
    if mask is None:
        return np.arange(grid.npix)
    if not is_concrete(mask):
        raise TypeError(
            "`mask` must be concrete (a numpy or JAX array outside `jit`): it fixes "
            "which pixels are free, part of the model's structure."
        )
    mask = np.asarray(mask)
    if mask.shape != grid.shape or mask.dtype != np.bool_:
        raise ValueError(
            f"`mask` must be a boolean array of the grid's shape {grid.shape}, "
            f"got {mask.dtype} {mask.shape}."
        )
    if not mask.any():
        raise ValueError("`mask` selects no pixel: nothing would be free.")
    return np.flatnonzero(mask)
