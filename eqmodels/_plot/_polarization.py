"""A polarimetric image on the sky, the EHT way: Stokes I in colour, EVPA ticks
sized by the polarized intensity and coloured by the fractional polarization."""

import math

import numpy as np
from jaxtyping import ArrayLike, Float

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._image._base import AbstractImageModel, evaluated_on
from .._units import RAD_PER_UAS
from .._validation import check_flag, host_real
from ._image import _beam_shape, image_in_units, plot_image
from ._mpl import new_axes, pyplot


def _stokes_and_grid(stokes, grid) -> tuple[np.ndarray, ImageGrid]:
    """The planes I, Q, U, V as a float64 `(4, ny, nx)` numpy array, and the grid."""
    if isinstance(stokes, ImageGrid) and not isinstance(grid, ImageGrid):
        raise TypeError(
            "`plot_polarization(stokes, grid)`: the Stokes planes come first and the "
            "grid second."
        )
    if isinstance(stokes, AbstractImageModel):
        if not stokes.polarimetric:
            raise TypeError(
                f"`stokes` is a Stokes I model ({type(stokes).__name__}): "
                "`plot_polarization` needs the four Stokes planes (a polarimetric "
                "model or a (4, ny, nx) array); plot it with `plot_image`."
            )
        model_grid = stokes.grid
        stokes = evaluated_on(
            stokes, grid, "stokes", f"`grid` is {grid!r}: leave `grid` out."
        )
        grid = model_grid if grid is None else grid
    if grid is None:
        raise TypeError(
            "`grid` is required with a Stokes array (an `eqmodels.ImageGrid`: the "
            "pixel size sets the axes)."
        )
    if not isinstance(grid, ImageGrid):
        raise TypeError(f"`grid` must be an eqmodels.ImageGrid, got {grid!r}.")
    arr = np.asarray(stokes)
    if np.iscomplexobj(arr) or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"`stokes` must be a real array (Jy/pixel), got {arr.dtype}.")
    if arr.shape != (4, *grid.shape):
        raise ValueError(
            f"`stokes` has shape {arr.shape}; expected the four Stokes planes I, Q, "
            f"U, V on the grid, (4, {grid.ny}, {grid.nx})."
        )
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError("`stokes` has non-finite values (NaN or inf).")
    return arr, grid


def _fraction(name, x, upper=None):
    value = host_real(x)
    if value is None or not math.isfinite(value) or value < 0:
        raise ValueError(f"`{name}` must be a finite number >= 0, got {x!r}.")
    if upper is not None and value > upper:
        raise ValueError(f"`{name}` must be <= {upper}, got {x!r}.")
    return value


def evpa_ticks(
    stokes: Float[ArrayLike, "*stokes ny nx"],
    grid: ImageGrid,
    *,
    i_cut: RealLike | int = 0.1,
    p_cut: RealLike | int = 0.2,
    stride: int | None = None,
    length: RealLike | int | None = None,
) -> dict[str, np.ndarray]:
    """The EVPA ticks [`eqmodels.plot_polarization`][] draws, as numbers.

    A tick sits at the centre of every `stride`-th pixel (rows and columns
    `stride // 2, stride // 2 + stride, ...`) where `I ≥ i_cut · max I` and
    `|P| ≥ p_cut · max |P|` (`P = Q + iU`; the maxima over the whole image). Its
    direction is the EVPA `χ = ½ arg(Q + iU)`, east of north: the unit vector
    `(east, north) = (sin χ, cos χ)`. Its length is `length · |P| / max |P|` (µas;
    the pixel of largest `|P|` would get `length`).

    **Arguments:**

    - `stokes`: the planes I, Q, U, V, `(4, ny, nx)` Jy/pixel.
    - `grid`: their [`eqmodels.ImageGrid`][].
    - `i_cut`, `p_cut`: the cuts, fractions of the peak I and peak |P|.
    - `stride`: one tick per `stride × stride` pixels (default: about 20 ticks
      across the image, `max(1, round(nx / 20))`).
    - `length`: the longest possible tick in µas (default: `stride` pixels).

    **Returns:** a dict of numpy arrays, one entry per tick: `x`, `y` (µas, the
    pixel centre: `x` east, `y` north), `evpa` (radians east of north, in
    `(−π/2, π/2]`), `p` (|P|, Jy/pixel), `m` (|P| / I), `length` (µas), and
    `row`, `col` (the pixel).
    """
    arr, grid = _stokes_and_grid(stokes, grid)
    i_cut = _fraction("i_cut", i_cut, 1.0)
    p_cut = _fraction("p_cut", p_cut, 1.0)
    if stride is None:
        stride = max(1, round(grid.nx / 20))
    if isinstance(stride, bool) or not isinstance(stride, int | np.integer):
        raise TypeError(f"`stride` must be a positive integer, got {stride!r}.")
    if stride < 1:
        raise ValueError(f"`stride` must be >= 1, got {stride!r}.")
    psize_uas = grid.psize / RAD_PER_UAS
    if length is None:
        length = stride * psize_uas
    length = host_real(length)
    if length is None or not (math.isfinite(length) and length > 0):
        raise ValueError(f"`length` must be a positive number of µas, got {length!r}.")
    i, q, u = arr[0], arr[1], arr[2]
    p = np.hypot(q, u)
    i_max, p_max = float(i.max()), float(p.max())
    rows = np.arange(stride // 2, grid.ny, stride)
    cols = np.arange(stride // 2, grid.nx, stride)
    keep = np.zeros(grid.shape, bool)
    keep[np.ix_(rows, cols)] = True
    if i_max <= 0 or p_max <= 0:
        keep[:] = False  # nothing polarized (or no emission): no ticks
    else:
        keep &= (i >= i_cut * i_max) & (p >= p_cut * p_max) & (p > 0) & (i > 0)
    row, col = np.nonzero(keep)
    chi = 0.5 * np.arctan2(u[row, col], q[row, col])
    chi = np.where(chi <= -0.5 * np.pi, chi + np.pi, chi)
    x = np.asarray(grid.x) / RAD_PER_UAS
    y = np.asarray(grid.y) / RAD_PER_UAS
    pk = p[row, col]
    return {
        "x": x[col],
        "y": y[row],
        "evpa": chi,
        "p": pk,
        "m": pk / i[row, col],
        "length": length * pk / (p_max if p_max > 0 else 1.0),
        "row": row,
        "col": col,
    }


def plot_polarization(
    stokes: Float[ArrayLike, "*stokes ny nx"] | AbstractImageModel,
    grid: ImageGrid | None = None,
    ax=None,
    *,
    beam: RealLike | int | tuple[float, float, float] | None = None,
    title: str | None = None,
    units: str = "Jy/uas2",
    cmap: str = "afmhot",
    tick_cmap: str = "rainbow",
    i_cut: RealLike | int = 0.1,
    p_cut: RealLike | int = 0.2,
    stride: int | None = None,
    length: RealLike | int | None = None,
    m_range: tuple[float | int, float | int] | None = None,
    linewidth: float | int = 1.5,
    colorbar: bool = True,
):
    """A polarimetric image on the sky in the style of the EHT's M87* polarization
    figures (Paper VII): Stokes I in a colour map, and EVPA ticks where the source
    is bright and polarized, their length proportional to the polarized intensity
    `|P| = |Q + iU|` and their colour the fractional polarization `|m| = |P| / I`,
    with a colour bar for `|m|`.

    Orientation: the axes are [`eqmodels.plot_image`][]'s (µas, east to the
    left, north up). A tick's direction is the EVPA `χ = ½ arg(Q + iU)`, east of
    north: `χ = 0` is vertical (north–south), `χ = 45°` runs from lower right to
    upper left (north-east), as on the sky.

    **Cuts (defaults as in Paper VII's figures):** ticks only where
    `I ≥ 10 %` of the peak of I (`i_cut=0.1`) and `|P| ≥ 20 %` of the peak of
    `|P|` (`p_cut=0.2`). One tick per `stride × stride` pixels (default: about 20
    across the image); [`eqmodels.evpa_ticks`][] returns them as numbers.

    Never calls `plt.show()`; save with `ax.figure.savefig(path)`.

    **Arguments:**

    - `stokes`: the planes I, Q, U, V, `(4, ny, nx)` Jy/pixel, or a polarimetric
      image model (an [`eqmodels.AbstractPolImageModel`][]; its grid is used).
    - `grid`: the [`eqmodels.ImageGrid`][] (required for an array).
    - `ax`: the matplotlib Axes to draw on (default: a new figure).
    - `beam`: draw a beam in the lower-left corner: a FWHM in µas or
      `(fwhm_major_uas, fwhm_minor_uas, position_angle_deg)`.
    - `title`: the panel title.
    - `units`, `cmap`: Stokes I's units (`"Jy/uas2"`, `"Jy/pixel"`; see
      [`eqmodels.image_in_units`][]) and colour map.
    - `tick_cmap`: the ticks' colour map (of `|m|`).
    - `i_cut`, `p_cut`, `stride`, `length`: which ticks and how long, as
      [`eqmodels.evpa_ticks`][].
    - `m_range`: the `|m|` colour limits (default `(0, largest |m| drawn)`).
    - `linewidth`: the ticks' width in points.
    - `colorbar`: add the `|m|` colour bar.

    **Returns:** the matplotlib `Axes`: `images[0]` is Stokes I, `collections[0]`
    the ticks (a `LineCollection`, one segment per tick, whose array is `|m|`).
    """
    arr, grid = _stokes_and_grid(stokes, grid)
    if units == "Tb":
        raise ValueError(
            '`units="Tb"` is not offered here (it needs the frequency): use '
            '"Jy/uas2" or "Jy/pixel".'
        )
    image_in_units(arr[0], grid, units)  # checks `units`
    if beam is not None:
        _beam_shape(beam)
    ticks = evpa_ticks(
        arr, grid, i_cut=i_cut, p_cut=p_cut, stride=stride, length=length
    )
    if m_range is None:
        top = float(ticks["m"].max()) if ticks["m"].size else 1.0
        m_range = (0.0, top if top > 0 else 1.0)
    else:
        try:
            lo, hi = (float(host_real(v)) for v in m_range)
        except (TypeError, ValueError):
            raise TypeError(
                f"`m_range` must be two numbers (low, high), got {m_range!r}."
            ) from None
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"`m_range` must be finite with low < high: {m_range!r}.")
        m_range = (lo, hi)
    check_flag("colorbar", colorbar)
    from matplotlib.collections import LineCollection
    from matplotlib.colors import Normalize

    ax = new_axes(ax, figsize=(5.6, 4.5))
    plot_image(
        arr[0], grid, ax=ax, units=units, beam=beam, title=title, cmap=cmap,
        colorbar=False,
    )  # fmt: skip
    half = 0.5 * ticks["length"]
    dx = half * np.sin(ticks["evpa"])  # east: +x (drawn to the left)
    dy = half * np.cos(ticks["evpa"])  # north: +y
    segments = np.stack(
        [
            np.stack([ticks["x"] - dx, ticks["y"] - dy], axis=-1),
            np.stack([ticks["x"] + dx, ticks["y"] + dy], axis=-1),
        ],
        axis=1,
    )
    norm = Normalize(*m_range)
    lines = LineCollection(
        segments, cmap=pyplot().get_cmap(tick_cmap), norm=norm,
        linewidths=linewidth, capstyle="round", zorder=3,
    )  # fmt: skip
    lines.set_array(ticks["m"])
    ax.add_collection(lines, autolim=False)
    if colorbar:
        cbar = ax.figure.colorbar(lines, ax=ax)
        cbar.set_label("fractional polarization |m|")
    ax.set_facecolor("black")
    return ax
