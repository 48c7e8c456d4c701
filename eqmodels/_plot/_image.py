"""Images on the sky: µas axes with east to the left, a colour bar in Jy/µas² or
brightness temperature, an optional beam, one colour scale across panels."""

import math
from collections.abc import Sequence

import numpy as np
from jaxtyping import ArrayLike, Float

from .._custom_types import RealLike
from .._data._fitsimage import as_image_array
from .._grid import ImageGrid
from .._image._base import AbstractImageModel, evaluated_on
from .._units import RAD_PER_UAS
from .._validation import check_flag, host_real
from ._mpl import new_axes, pyplot


#: Speed of light (m/s) and Boltzmann's constant (J/K), exact SI values.
SPEED_OF_LIGHT: float = 299_792_458.0
BOLTZMANN: float = 1.380_649e-23
#: One jansky in W m⁻² Hz⁻¹.
JANSKY: float = 1e-26

UNITS = ("Jy/uas2", "Jy/pixel", "Tb")
_LABELS = {
    "Jy/uas2": "Jy / µas²",
    "Jy/pixel": "Jy / pixel",
    "Tb": "brightness temperature (K)",
}


def _image_and_grid(image, grid, name="image") -> tuple[np.ndarray, ImageGrid]:
    if isinstance(image, AbstractImageModel):
        model_grid = image.grid
        image = evaluated_on(
            image,
            grid,
            name,
            f"`grid` is {grid!r}: leave `grid` out for an image model.",
        )
        grid = model_grid if grid is None else grid
    if grid is None:
        raise TypeError(
            f"`grid` is required with an image array `{name}` (an "
            "`eqmodels.ImageGrid`: the pixel size sets the axes and the units)."
        )
    if not isinstance(grid, ImageGrid):
        raise TypeError(f"`grid` must be an eqmodels.ImageGrid, got {grid!r}.")
    return as_image_array(image, grid, name), grid


def image_in_units(
    image: Float[ArrayLike, "ny nx"],
    grid: ImageGrid,
    units: str = "Jy/uas2",
    freq: RealLike | int | None = None,
) -> np.ndarray:
    """An image in Jy/pixel converted to the units a plot shows.

    - `"Jy/pixel"`: unchanged.
    - `"Jy/uas2"`: divided by the pixel area in µas², `psize_µas²`.
    - `"Tb"`: Rayleigh–Jeans brightness temperature in kelvin,
      `T_b = I_ν c² / (2 k ν²)` with `I_ν` the specific intensity in
      W m⁻² Hz⁻¹ sr⁻¹ (`I_ν = image · 10⁻²⁶ / psize²`, `psize` in radians).

    **Arguments:**

    - `image`: the `(ny, nx)` image, Jy per pixel.
    - `grid`: its [`eqmodels.ImageGrid`][].
    - `units`: `"Jy/uas2"`, `"Jy/pixel"` or `"Tb"`.
    - `freq`: observing frequency in Hz (needed for `"Tb"` only).

    **Returns:** a numpy array of the image in `units`.
    """
    img = np.asarray(image, np.float64)
    if units == "Jy/pixel":
        return img
    if units == "Jy/uas2":
        return img / (grid.psize / RAD_PER_UAS) ** 2
    if units == "Tb":
        if freq is None:
            raise TypeError(
                '`freq` (Hz) is required for `units="Tb"`: the brightness '
                "temperature depends on the observing frequency (e.g. `freq=230e9`, "
                "or `data.freq`)."
            )
        freq = _scalar(freq)  # a 0-d numpy or JAX array is a number too
        if isinstance(freq, bool) or not isinstance(freq, int | float | np.number):
            raise TypeError(f"`freq` must be a frequency in Hz, got {freq!r}.")
        if not (math.isfinite(freq) and freq > 0):
            raise ValueError(f"`freq` must be finite and > 0 (Hz), got {freq!r}.")
        intensity = img * JANSKY / grid.psize**2  # W m⁻² Hz⁻¹ sr⁻¹
        return intensity * SPEED_OF_LIGHT**2 / (2.0 * BOLTZMANN * float(freq) ** 2)
    raise ValueError(f"`units` must be one of {UNITS}, got {units!r}.")


def image_extent(grid: ImageGrid) -> tuple[float, float, float, float]:
    """`(left, right, bottom, top)` of the image in µas relative to the phase
    centre, for `imshow(..., origin="upper")`: the left edge is the east edge
    (`+nx/2 · psize`), so x (east, RA offset) decreases to the right."""
    half_x = 0.5 * grid.nx * grid.psize / RAD_PER_UAS
    half_y = 0.5 * grid.ny * grid.psize / RAD_PER_UAS
    return (half_x, -half_x, -half_y, half_y)


def _scalar(x):
    """A 0-d numpy or JAX array as its Python number (so that it is not refused
    as "not a frequency"); anything else as is."""
    if hasattr(x, "shape") and hasattr(x, "dtype") and np.shape(x) == ():
        if np.issubdtype(np.asarray(x).dtype, np.number):
            return np.asarray(x).item()
    return x


def _beam_shape(beam) -> tuple[float, float, float]:
    """`(major, minor, pa_deg)` from a FWHM (µas) or a `(major, minor, pa)` tuple."""
    beam = _scalar(beam)
    if isinstance(beam, int | float | np.number) and not isinstance(beam, bool):
        shape = (float(beam), float(beam), 0.0)
    else:
        try:
            major, minor, pa = beam
            shape = (float(major), float(minor), float(pa))
        except (TypeError, ValueError):
            raise TypeError(
                "`beam` must be a FWHM in µas or a tuple (fwhm_major_uas, "
                f"fwhm_minor_uas, position_angle_deg), got {beam!r}."
            ) from None
    if not all(math.isfinite(s) for s in shape) or shape[0] <= 0 or shape[1] <= 0:
        raise ValueError(f"`beam` FWHMs must be finite and > 0 (µas), got {beam!r}.")
    if min(shape[:2]) < 1e-3:
        # The one angle of the package in µas (a plot's axes are in µas): a FWHM
        # in radians (~1e-10) would draw an invisible beam.
        raise ValueError(
            f"`beam` is in µas here (the plots' unit), got {beam!r}: a FWHM in "
            "radians? Convert it with `eqmodels.rad_to_uas`."
        )
    return shape


def _draw_beam(ax, grid, beam, color="white"):
    from matplotlib.patches import Ellipse

    major, minor, pa = _beam_shape(beam)
    left, right, bottom, top = image_extent(grid)
    pad = 0.6 * max(major, minor) + 0.04 * (left - right)
    # Lower-left corner as displayed: x is large and positive there (east).
    centre = (left - pad, bottom + pad)
    # Position angle east of north: the major axis points along
    # (east, north) = (sin pa, cos pa), i.e. 90° - pa from +x in data coordinates.
    ellipse = Ellipse(
        centre,
        width=major,
        height=minor,
        angle=90.0 - pa,
        fill=False,
        edgecolor=color,
        linewidth=1.5,
    )
    ax.add_patch(ellipse)
    return ellipse


def _style_axes(ax, title):
    ax.set_xlabel("Δα (µas, east ←)")
    ax.set_ylabel("Δδ (µas, north ↑)")
    if title is not None:
        ax.set_title(title)


def plot_image(
    image: Float[ArrayLike, "ny nx"] | AbstractImageModel,
    grid: ImageGrid | None = None,
    *,
    ax=None,
    units: str = "Jy/uas2",
    freq: RealLike | int | None = None,
    beam: RealLike | int | tuple[float, float, float] | None = None,
    title: str | None = None,
    cmap: str = "afmhot",
    vmin: float | int | None = None,
    vmax: float | int | None = None,
    colorbar: bool = True,
):
    """One image on the sky, east to the left.

    The axes are in µas relative to the phase centre: pixel `(iy, ix)` is drawn
    centred on `x = (nx/2 - 1/2 - ix) · psize`, `y = (ny/2 - 1/2 - iy) · psize`
    (the grid's convention); row 0 (north) is at the top and the x axis is
    inverted (x, the RA offset, grows to the left). Never calls `plt.show()`.

    **Arguments:**

    - `image`: an `(ny, nx)` image in Jy/pixel, or an
      [`eqmodels.AbstractImageModel`][] (its grid is used).
    - `grid`: the image's [`eqmodels.ImageGrid`][] (required for an array).
    - `ax`: the matplotlib Axes to draw on (default: a new figure).
    - `units`: colour-bar units, `"Jy/uas2"` (Jy/µas², default), `"Jy/pixel"` or
      `"Tb"` (Rayleigh–Jeans brightness temperature in K; needs `freq`); see
      [`eqmodels.image_in_units`][].
    - `freq`: observing frequency in Hz, for `units="Tb"`.
    - `beam`: draw a beam in the lower-left corner: a FWHM in µas (a circle) or
      `(fwhm_major_uas, fwhm_minor_uas, position_angle_deg)` (east of north).
    - `title`: the panel title.
    - `cmap`, `vmin`, `vmax`: the colour map and limits (in `units`).
    - `colorbar`: add a colour bar labelled with the units.

    **Returns:** the matplotlib `Axes` (its `images[0]` is the drawn image).
    """
    img, grid = _image_and_grid(image, grid)
    shown = image_in_units(img, grid, units, freq)  # checked before any figure
    if beam is not None:
        _beam_shape(beam)
    _check_limits(vmin, vmax)
    ax = new_axes(ax)
    artist = ax.imshow(
        shown,
        cmap=cmap,
        origin="upper",
        extent=image_extent(grid),
        vmin=vmin,
        vmax=vmax,
        interpolation="nearest",
    )
    _style_axes(ax, title)
    if beam is not None:
        _draw_beam(ax, grid, beam)
    if check_flag("colorbar", colorbar):
        cbar = ax.figure.colorbar(artist, ax=ax)
        cbar.set_label(_LABELS[units])
    return ax


#: The EHT's 230 GHz bands by centre frequency (GHz): the 2017 and 2018 low and
#: high bands, and the two lower bands of 2021 on.
EHT_BANDS_GHZ = {"b1": 213.1, "b2": 215.1, "lo": 227.1, "hi": 229.1}


def band_name(freq: float | int) -> str | None:
    """The EHT band (`"lo"`, `"hi"`, `"b1"`, `"b2"`) of an observing frequency in
    Hz, within 0.5 GHz of its centre; `None` for any other frequency."""
    ghz = float(freq) / 1e9
    for name, centre in EHT_BANDS_GHZ.items():
        if abs(ghz - centre) <= 0.5:
            return name
    return None


def observation_title(source: str, mjd: float | int, freqs) -> str:
    """A plot title naming an observation as the EHT's figures do: the source, the
    calendar date of `mjd` (a Modified Julian Date, UTC), the band(s) and the
    frequency in GHz, e.g. `"M87 2017-04-10, lo band, 227.1 GHz"`.

    **Arguments:**

    - `source`: the source's name (`data.source`).
    - `mjd`: the day (`data.mjd`; a fraction of a day is ignored).
    - `freqs`: the bands' frequencies in Hz (`data.band_freqs`), or one frequency.

    **Returns:** the title (bands outside the EHT's named ones are given by their
    frequency only).
    """
    import datetime

    freqs = [float(f) for f in np.atleast_1d(np.asarray(freqs, np.float64))]
    if not freqs or not all(math.isfinite(f) and f > 0 for f in freqs):
        raise ValueError(f"`freqs` must be frequencies in Hz, > 0, got {freqs!r}.")
    mjd = float(mjd)
    if not math.isfinite(mjd):
        raise ValueError(f"`mjd` must be a finite Modified Julian Date, got {mjd!r}.")
    day = datetime.date(1858, 11, 17) + datetime.timedelta(days=math.floor(mjd))
    parts = [f"{source} {day.isoformat()}"]
    names = [band_name(f) for f in freqs]
    if all(names):
        parts.append(f"{'+'.join(names)} band{'s' if len(names) > 1 else ''}")
    parts.append("+".join(f"{f / 1e9:.1f}" for f in freqs) + " GHz")
    return ", ".join(parts)


def _check_limits(vmin, vmax):
    """Refuse colour limits that are not finite numbers, or not in order."""
    for name, lim in (("vmin", vmin), ("vmax", vmax)):
        value = None if lim is None else host_real(lim)
        if lim is not None and (value is None or not math.isfinite(value)):
            raise TypeError(f"`{name}` must be a finite number or None, got {lim!r}.")
    if vmin is not None and vmax is not None and host_real(vmin) > host_real(vmax):
        raise ValueError(f"`vmin` ({vmin!r}) is above `vmax` ({vmax!r}).")


def plot_images(
    images: Sequence[Float[ArrayLike, "ny nx"] | AbstractImageModel],
    grid: ImageGrid | None = None,
    *,
    titles: Sequence[str] | None = None,
    ncols: int | np.integer | None = None,
    units: str = "Jy/uas2",
    freq: RealLike | int | None = None,
    beam: RealLike | int | tuple[float, float, float] | None = None,
    cmap: str = "afmhot",
    vmin: float | int | None = None,
    vmax: float | int | None = None,
    panel_size: float = 3.5,
):
    """Several images side by side with **one** colour scale and one colour bar
    (e.g. truth and reconstruction), each drawn as [`eqmodels.plot_image`][] does.

    **Arguments:**

    - `images`: a sequence of `(ny, nx)` images (Jy/pixel) or image models (arrays
      share `grid`). With `units="Jy/pixel"` all must have one pixel size (a
      colour scale in Jy per pixel compares nothing across pixel sizes); the
      other units are per area.
    - `grid`: the [`eqmodels.ImageGrid`][] of the image arrays.
    - `titles`: one title per image.
    - `ncols`: panels per row (default: all in one row).
    - `units`, `freq`, `beam`, `cmap`: as [`eqmodels.plot_image`][].
    - `vmin`, `vmax`: the shared colour limits (default: the smallest and largest
      value over all images, in `units`).
    - `panel_size`: width of one panel in inches.

    **Returns:** the matplotlib `Figure`; `figure.axes[:len(images)]` are the panels
    (the last axes is the colour bar).
    """
    if hasattr(images, "ndim") and images.ndim == 2:
        raise TypeError(
            "`images` is one 2-d image: `plot_images` draws several side by side; "
            "pass a list (`[image]`) or use `plot_image`."
        )
    if isinstance(images, np.ndarray) and images.ndim == 3:
        images = list(images)
    try:
        images = list(images)
    except TypeError:
        raise TypeError(
            f"`images` must be a sequence of images, got {type(images).__name__}."
        ) from None
    if not images:
        raise ValueError("`images` is empty: give at least one image.")
    pairs = [_image_and_grid(im, grid, f"images[{i}]") for i, im in enumerate(images)]
    # Checked here: unchecked, these would reach matplotlib (or be read wrongly).
    psizes = sorted({g.psize for _, g in pairs})
    if units == "Jy/pixel" and len(psizes) > 1:
        raise ValueError(
            f"`images` are on grids of {len(psizes)} pixel sizes, which one colour "
            'scale in Jy/pixel cannot compare: use `units="Jy/uas2"` (or '
            '`"Tb"`), per area.'
        )
    if isinstance(titles, str):
        raise TypeError(
            f"`titles` must be a list of strings, one per image, got the string "
            f"{titles!r}."
        )
    if not (isinstance(panel_size, int | float) and 0 < panel_size < math.inf):
        raise ValueError(
            f"`panel_size` must be a positive number of inches, got {panel_size!r}."
        )
    _check_limits(vmin, vmax)
    if titles is not None:
        titles = list(titles)
        if len(titles) != len(images):
            raise ValueError(
                f"`titles` has {len(titles)} entries for {len(images)} images."
            )
    n = len(images)
    if ncols is None:
        ncols = n
    if isinstance(ncols, bool) or not isinstance(ncols, int | np.integer) or ncols < 1:
        raise ValueError(f"`ncols` must be a positive integer, got {ncols!r}.")
    ncols = min(int(ncols), n)
    nrows = -(-n // ncols)
    shown = [image_in_units(img, g, units, freq) for img, g in pairs]
    if beam is not None:
        _beam_shape(beam)  # checked before any figure
    lo = min(float(np.min(s)) for s in shown) if vmin is None else vmin
    hi = max(float(np.max(s)) for s in shown) if vmax is None else vmax
    plt = pyplot()
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(panel_size * ncols + 1.0, panel_size * nrows),
        squeeze=False,
        layout="constrained",
    )
    axes = list(axes.ravel())
    for ax in axes[n:]:
        ax.remove()
    for i, (ax, (img, g)) in enumerate(zip(axes, pairs)):
        plot_image(
            img,
            g,
            ax=ax,
            units=units,
            freq=freq,
            beam=beam,
            title=None if titles is None else titles[i],
            cmap=cmap,
            vmin=lo,
            vmax=hi,
            colorbar=False,
        )
    artists = [ax.images[0] for ax in axes[:n]]
    norm = artists[0].norm
    for artist in artists[1:]:
        artist.set_norm(norm)  # one Normalize object: one colour scale
    cbar = fig.colorbar(artists[0], ax=axes[:n])
    cbar.set_label(_LABELS[units])
    return fig
