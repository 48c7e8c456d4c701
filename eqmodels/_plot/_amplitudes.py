"""Visibility amplitudes against baseline length, with a model overlaid."""

import numpy as np
from jaxtyping import ArrayLike, Complex, Float

from .._data._visdata import VisData
from .._grid import ImageGrid
from .._image._base import AbstractImageModel
from .._validation import check_flag
from ._model import model_visibilities
from ._mpl import new_axes
from ._uv import _check_data


def plot_amplitudes(
    data: VisData,
    model: Complex[ArrayLike, " n"]
    | Float[ArrayLike, "ny nx"]
    | AbstractImageModel
    | None = None,
    grid: ImageGrid | None = None,
    *,
    ax=None,
    errorbars: bool = True,
    model_label: str = "model",
):
    """Visibility amplitudes `|V|` (Jy) against baseline length `|uv|` (Gλ), with
    error bars `σ`, and a model's amplitudes at the same points overlaid.

    **Arguments:**

    - `data`: an [`eqmodels.VisData`][].
    - `model`: the model: complex visibilities, one per row (e.g. a forward model's
      output at `data.u, data.v`), or an image (an `(ny, nx)` array in Jy/pixel with
      `grid`, or an image model), transformed exactly at the data's points.
      `None`: the data only.
    - `grid`: the image's [`eqmodels.ImageGrid`][], for an image array.
    - `ax`: the matplotlib Axes to draw on (default: a new figure).
    - `errorbars`: draw `±σ` bars on the data.
    - `model_label`: the legend entry of the model.

    **Returns:** the matplotlib `Axes`.
    """
    _check_data(data)
    vis = None if model is None else model_visibilities(model, grid, data.u, data.v)
    ax = new_axes(ax, figsize=(6.0, 4.0))
    uvd = data.uvdist / 1e9
    amp = np.abs(np.asarray(data.vis))
    sigma = np.asarray(data.sigma)
    ax.errorbar(
        uvd,
        amp,
        yerr=sigma if check_flag("errorbars", errorbars) else None,
        fmt="o",
        markersize=2.5,
        elinewidth=0.8,
        color="0.3",
        label="data",
    )
    if vis is not None:
        # Above the data (an errorbar's markers sit at zorder 2.1, a line at 2):
        # where they overlap, the data would hide the model.
        ax.plot(
            uvd,
            np.abs(vis),
            "o",
            markersize=2.5,
            color="tab:red",
            label=model_label,
            zorder=3,
        )
        ax.legend(fontsize="small")
    ax.set_xlabel("|uv| (Gλ)")
    ax.set_ylabel("amplitude (Jy)")
    ax.set_xlim(left=0)
    return ax
