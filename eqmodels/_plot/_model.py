"""Model visibilities for the data plots: given directly, or from an image."""

import numpy as np

from .._forward._separable import SeparableFT
from .._image._base import AbstractImageModel
from .._numerics import asarray
from ._image import _image_and_grid


def model_visibilities(model, grid, u, v, name="model") -> np.ndarray:
    """Complex model visibilities at `(u, v)` (any shape): `model` is either those
    visibilities already (a complex array shaped like `u`) or an image (an array
    with `grid`, or an image model), transformed exactly by a `SeparableFT`."""
    u = np.asarray(u)
    if isinstance(model, AbstractImageModel) or (
        not np.iscomplexobj(np.asarray(model))
        and np.ndim(model) == 2
        and np.shape(model) != u.shape
    ):
        img, grid = _image_and_grid(model, grid, name)
        fwd = SeparableFT(grid, u, np.asarray(v))
        return np.asarray(fwd(asarray(img)))
    vis = np.asarray(model)
    if not np.iscomplexobj(vis):
        raise TypeError(
            f"`{name}` must be complex model visibilities (one per data row, shape "
            f"{u.shape}) or an image with its `grid`, got a real array of shape "
            f"{vis.shape}."
        )
    if vis.shape != u.shape:
        raise ValueError(
            f"`{name}` has shape {vis.shape} but the data have {u.shape} points: give "
            "one model visibility per point, or an image with its `grid`."
        )
    return vis
