"""Normalised closure-phase residuals."""

import numpy as np
from jaxtyping import ArrayLike, Float

from .._data._products import ClosurePhaseProducts
from .._grid import ImageGrid
from .._image._base import AbstractImageModel
from ._model import model_visibilities
from ._mpl import new_axes


X_AXES = ("time", "uvdist")


def closure_phase_residuals(
    products: ClosurePhaseProducts,
    model: Float[ArrayLike, " n"] | Float[ArrayLike, "ny nx"] | AbstractImageModel,
    grid: ImageGrid | None = None,
) -> np.ndarray:
    """`wrap(ψ − ψ̂) / σ_ψ` per closure phase, with the difference wrapped into
    `(−π, π]`.

    **Arguments:** as [`eqmodels.plot_closure_phase_residuals`][].

    **Returns:** a numpy array, one residual per row of `products`.
    """
    if not isinstance(products, ClosurePhaseProducts):
        raise TypeError(
            "`products` must be eqmodels.ClosurePhaseProducts (from "
            f"`eqmodels.closure_phases`), got {type(products).__name__}."
        )
    psi = np.asarray(products.cphase)
    u = np.asarray(products.u)
    is_image = isinstance(model, AbstractImageModel) or np.ndim(model) == 2
    if is_image:
        vis = model_visibilities(model, grid, u, np.asarray(products.v))
        model_psi = np.angle(vis[:, 0] * vis[:, 1] * vis[:, 2])
    else:
        model_psi = np.asarray(model)
        if np.iscomplexobj(model_psi) or model_psi.shape != psi.shape:
            raise ValueError(
                f"`model` must be model closure phases in radians, shape {psi.shape} "
                f"(one per row of `products`), or an image with its `grid`; got "
                f"{model_psi.dtype} of shape {model_psi.shape}."
            )
    diff = np.angle(np.exp(1j * (psi - model_psi)))
    return diff / np.asarray(products.sigma)


def plot_closure_phase_residuals(
    products: ClosurePhaseProducts,
    model: Float[ArrayLike, " n"] | Float[ArrayLike, "ny nx"] | AbstractImageModel,
    grid: ImageGrid | None = None,
    *,
    x: str = "time",
    ax=None,
):
    """Closure-phase residuals normalised by their sigmas,
    `wrap(ψ − ψ̂) / σ_ψ` (the phase difference wrapped into `(−π, π]`), against
    time or baseline length, with the ±1 band and the RMS in the title (the RMS
    of these wrapped residuals; the closure-phase χ² of eht-imaging and of
    [`eqmodels.closure_score`][] uses `2(1 − cos Δψ) / σ²`, which is below RMS²
    where residuals are large: 0.722 against 0.737 for the EHT pipeline's
    2017-04-11 image).

    **Arguments:**

    - `products`: [`eqmodels.ClosurePhaseProducts`][] (from
      [`eqmodels.closure_phases`][]).
    - `model`: the model closure phases in **radians**, one per row of
      `products`, or an image (an `(ny, nx)` array in Jy/pixel with `grid`, or an
      image model) whose closure phases are computed exactly at the products' legs.
    - `grid`: the image's [`eqmodels.ImageGrid`][], for an image array.
    - `x`: `"time"` (hours UTC) or `"uvdist"` (the triangle's longest leg, Gλ).
    - `ax`: the matplotlib Axes to draw on (default: a new figure).

    **Returns:** the matplotlib `Axes`.
    """
    if x not in X_AXES:
        raise ValueError(f"`x` must be one of {X_AXES}, got {x!r}.")
    res = closure_phase_residuals(products, model, grid)
    ax = new_axes(ax, figsize=(6.0, 4.0))
    if x == "time":
        xs = np.asarray(products.time)
        ax.set_xlabel("time (h UTC)")
    else:
        xs = np.max(np.hypot(np.asarray(products.u), np.asarray(products.v)), axis=1)
        xs = xs / 1e9
        ax.set_xlabel("longest leg |uv| (Gλ)")
    ax.axhspan(-1.0, 1.0, color="0.9", zorder=0)
    ax.axhline(0.0, color="0.5", linewidth=0.8)
    ax.plot(xs, res, "o", markersize=3, color="tab:blue")
    ax.set_ylabel("(ψ − ψ̂) / σ_ψ")
    rms = float(np.sqrt(np.mean(res**2)))
    ax.set_title(f"closure-phase residuals ({res.size} closure phases, RMS {rms:.3g})")
    return ax
