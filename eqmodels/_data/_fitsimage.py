"""FITS images: writing (and reading back) an image on an `ImageGrid`."""

import math
import os
from typing import Any

import numpy as np
from astropy.io import fits
from jaxtyping import ArrayLike

from .._atomic import atomic_path
from .._custom_types import RealScalar
from .._grid import ImageGrid
from .._image._base import AbstractImageModel, evaluated_on
from .._units import RAD_PER_UAS
from .._validation import (
    check_flag,
    file_path,
    positive_number,
    refuse_julian_date,
)
from ._visdata import check_ra_dec, check_visdata, VisData


def as_image_array(
    image, grid, name: str = "image", *, stokes: bool = False
) -> np.ndarray:
    """A real, finite float64 numpy image of `grid`'s shape (an image model is
    evaluated, and must be on `grid`), or a clear error naming `name`. Shared by FITS
    output and plots. With `stokes=True` a polarimetric image, `(4, ny, nx)` (I, Q,
    U, V), is accepted too."""
    image = evaluated_on(
        image,
        grid,
        name,
        f"`grid` is {grid!r}: pass the model's own grid (`{name}.grid`), or the "
        "pixel size written would not be the model's.",
    )
    if isinstance(image, np.ma.MaskedArray):
        raise TypeError(
            f"`{name}` is a masked array: fill it first (`{name}.filled(0.0)`); its "
            "masked pixels would be used as they are."
        )
    arr = np.asarray(image)
    if np.iscomplexobj(arr) or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"`{name}` must be a real array (Jy/pixel), got {arr.dtype}.")
    if arr.shape != grid.shape and not (stokes and arr.shape == (4, *grid.shape)):
        also = f" or (4, {grid.ny}, {grid.nx}) (I, Q, U, V)" if stokes else ""
        raise ValueError(
            f"`{name}` has shape {arr.shape} but `grid` is {grid.shape} (ny, nx): "
            f"give an image of shape {grid.shape}{also}."
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"`{name}` has non-finite pixels (NaN or inf).")
    return arr.astype(np.float64)


def save_fits(
    image: ArrayLike | AbstractImageModel,
    grid: ImageGrid,
    path: str | os.PathLike,
    *,
    data: VisData | None = None,
    ra: float | int | None = None,
    dec: float | int | None = None,
    freq: RealScalar | None = None,
    mjd: RealScalar | None = None,
    source: str | None = None,
    overwrite: bool = False,
) -> None:
    """Write an image as a FITS primary HDU that standard tools (astropy.wcs,
    ds9, eht-imaging) read with the right orientation and scale.

    The array is stored with FITS axis 1 = RA (`CTYPE1 = 'RA---SIN'`,
    `CDELT1 = -psize` in degrees: RA grows to the left) and axis 2 = Dec
    (`CDELT2 = +psize`, north up), i.e. our `img[iy, ix]` flipped vertically.
    The phase centre (`CRVAL1/2` = `ra`, `dec`) sits at
    `CRPIX = n/2 + 1/2` (1-based), matching the pixel-centre convention of
    [`eqmodels.ImageGrid`][]. Units `BUNIT = 'JY/PIXEL'`.

    **Arguments:**

    - `image`: `(ny, nx)` array (Jy/pixel) or an image model; or a polarimetric
      image, `(4, ny, nx)` (I, Q, U, V) or a polarimetric image model, written as
      a cube with a third axis `CTYPE3 = 'STOKES'` (values 1–4: I, Q, U, V), the
      FITS standard's Stokes axis, which eht-imaging, CASA, ds9 and `load_fits`
      read as the four planes.
    - `grid`: its [`eqmodels.ImageGrid`][].
    - `path`: output file.
    - `data`: the [`eqmodels.VisData`][] the image was made from: the defaults of
      the five below (its `ra`, `dec`, `source`, first band's frequency, and day
      with its first timestamp's time of day, as eht-imaging dates its images).
      Without it (nor those keywords) the header says RA = Dec = 0, and
      eht-imaging refuses to observe the image with the real data's coordinates.
    - `ra`, `dec`: phase-centre position in degrees (default `data`'s, else 0).
    - `freq`: observing frequency in Hz, 1e6–1e13 (a value in GHz is refused;
      written as the `FREQ` header keyword);
      `mjd`: the date as a modified Julian date, whole (a `VisData.mjd`) or with
      the time of day as its fraction (`data.mjd + t / 24` for `t` hours, as
      eht-imaging dates its images), written as `MJD-OBS` (and `MJD`, which
      eht-imaging reads); `source`: `OBJECT` (default `data`'s, else
      `"unknown"`). Each given overrides `data`'s.
    - `overwrite`: replace an existing file (`True` or `False`). The file is
      written to a temporary file in the same folder and renamed into place, so
      that a process killed while writing leaves the previous file intact.
    """
    if not isinstance(grid, ImageGrid):
        raise TypeError(f"`grid` must be an ImageGrid, got {type(grid).__name__}.")
    arr = as_image_array(image, grid, stokes=True)
    if data is not None:
        check_visdata(data)
    meta = {} if data is None else image_metadata(data)
    ra = meta.get("ra", 0.0) if ra is None else ra
    dec = meta.get("dec", 0.0) if dec is None else dec
    freq = meta.get("freq") if freq is None else freq
    mjd = meta.get("mjd") if mjd is None else mjd
    source = meta.get("source", "unknown") if source is None else source
    ra, dec = check_ra_dec(ra, dec)  # degrees, ra in [0, 360], |dec| <= 90
    if freq is not None:
        # A number or a 0-d array (a `VisData.freq`).
        freq = positive_number("freq", freq)
        if not 1e6 <= freq <= 1e13:
            # As `VisData` and `load_uvfits` refuse: a frequency in GHz (230.0)
            # would be written as 230 Hz.
            raise ValueError(
                f"`freq`={freq!r} Hz is outside 1e6-1e13 Hz: give it in Hz (230 GHz "
                f"is 230e9; {freq!r} GHz would be {freq * 1e9:.6g})."
            )
    if mjd is not None:
        # A modified Julian date: a `VisData.mjd`, plus the time of day / 24 if
        # wanted.
        mjd = positive_number("mjd", mjd, allow_zero=True)
        refuse_julian_date("mjd", mjd)
    if not isinstance(source, str):
        raise TypeError(f"`source` must be a string (the OBJECT name), got {source!r}.")
    overwrite = check_flag("overwrite", overwrite)
    path = file_path(path)
    if os.path.isdir(path):
        raise IsADirectoryError(
            f"`path` {path!r} is a folder: give the FITS file's name (e.g. "
            f"{os.path.join(path, 'image.fits')!r})."
        )
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path!r} exists; pass `overwrite=True` to replace it.")
    psize_deg = math.degrees(grid.psize)
    hdu = fits.PrimaryHDU(np.ascontiguousarray(arr[..., ::-1, :]))
    h = hdu.header
    h["OBJECT"] = source
    h["CTYPE1"] = "RA---SIN"
    h["CRVAL1"] = float(ra)
    h["CDELT1"] = -psize_deg
    h["CRPIX1"] = grid.nx / 2 + 0.5
    h["CUNIT1"] = "deg"
    h["CTYPE2"] = "DEC--SIN"
    h["CRVAL2"] = float(dec)
    h["CDELT2"] = psize_deg
    h["CRPIX2"] = grid.ny / 2 + 0.5
    h["CUNIT2"] = "deg"
    if arr.ndim == 3:  # the Stokes axis: planes 1, 2, 3, 4 = I, Q, U, V
        h["CTYPE3"] = "STOKES"
        h["CRVAL3"] = 1.0
        h["CDELT3"] = 1.0
        h["CRPIX3"] = 1.0
    h["BUNIT"] = "JY/PIXEL"
    h["EQUINOX"] = 2000.0
    h["RADESYS"] = "FK5"
    h["PSIZE"] = (grid.psize, "pixel size (radians)")
    # Float cards keep 16 significant digits, one short of a float64's round trip
    # (a loaded grid could differ from the saved one by 1 ulp, so that the two
    # would not compare equal, nor share transforms): the exact value as text.
    h["EQPSIZE"] = (float(grid.psize).hex(), "PSIZE exactly (float.hex, eqmodels)")
    if freq is not None:
        h["FREQ"] = freq
    if mjd is not None:
        h["MJD-OBS"] = float(mjd)
        h["MJD"] = (float(mjd), "date (eht-imaging reads this key)")
    # Atomically: a process killed while writing leaves the previous file intact.
    with atomic_path(path) as tmp:
        hdu.writeto(tmp, overwrite=True)


def image_metadata(data: VisData) -> dict[str, Any]:
    """`save_fits`'s keyword arguments for an image of `data`: source, position,
    the first band's frequency, and the day with the first timestamp's time of day
    (as eht-imaging dates its images: the pipeline's 2017-04-11 image has MJD
    57854.02228)."""
    return dict(
        ra=data.ra,
        dec=data.dec,
        freq=data.band_freqs[0],
        mjd=data.mjd + float(np.min(np.asarray(data.time))) / 24.0,
        source=data.source,
    )


def load_fits(
    path: str | os.PathLike,
    *,
    metadata: bool = False,
    stokes: str = "auto",
) -> tuple[np.ndarray, ImageGrid] | tuple[np.ndarray, ImageGrid, dict[str, Any]]:
    """Read an image written by [`eqmodels.save_fits`][] (or any FITS image with
    square pixels, `CDELT1 < 0 < CDELT2`), in Jy/pixel.

    The header is honoured, not assumed: the pixel size comes from `CDELT1/2`
    (or a diagonal `CD` matrix) in the axes' `CUNIT` (degrees by default) and must
    agree with a `PSIZE` card if present. The reference pixel `CRPIX1/2` (the
    phase centre) becomes the grid's centre `n/2 + 1/2`, where an `ImageGrid` puts
    it (and eht-imaging writes it): a reference pixel elsewhere on a whole or half
    pixel inside the image is centred by padding the far side with zero pixels,
    exactly — DIFMAP, CASA and AIPS write `n/2 + 1` for even `n`, so their `256²`
    image loads as `257²`, the extra row and column 0. Any other reference pixel,
    rotated axes or non-square pixels raise a `ValueError` rather than load an
    image that is silently shifted or rescaled. A header without `CRPIX1/2` is
    taken as centred (eht-imaging's reading; the FITS default, pixel 0, would put
    the phase centre off the image).

    Units (`BUNIT`): `JY/PIXEL` (or none, as eht-imaging writes it) is read as is;
    `JY/BEAM` (DIFMAP, CASA, AIPS) is converted to Jy/pixel with the header's
    restoring beam, dividing by its area in pixels `π BMAJ BMIN / (4 ln 2 psize²)`
    (as eht-imaging does); any other unit, a Jy/beam image without `BMAJ`/`BMIN`,
    and blanked (NaN) pixels raise a `ValueError`.

    **Arguments:**

    Polarimetric images: a `STOKES` axis (the FITS standard's, values 1–4 = I, Q,
    U, V, as [`eqmodels.save_fits`][] writes it) or eht-imaging's `Q`, `U`, `V`
    image extensions give the four planes, `(4, ny, nx)`; a plane the file lacks
    is zero. Correlation planes (RR, LL, ...) and any other axis longer than 1
    (frequency) are refused.

    **Arguments:**

    - `path`: the FITS file.
    - `metadata`: also return the header's observation metadata (below).
    - `stokes`: `"auto"` (the default): the four Stokes planes `(4, ny, nx)` when
      the file holds Q, U or V, else the `(ny, nx)` image; `"I"`: the I image
      `(ny, nx)` always; `"IQUV"`: the four planes always (Q = U = V = 0 for a
      Stokes I file, e.g. to start polarimetric imaging from it).

    **Returns:** `(image, grid)`: the `(ny, nx)` array (or the `(4, ny, nx)` Stokes
    planes, above) in our orientation (row 0
    north, column 0 east) and its [`eqmodels.ImageGrid`][]. With `metadata=True`,
    `(image, grid, meta)`: `meta` holds [`eqmodels.save_fits`][]'s keyword arguments
    that the header gives, so `save_fits(image, grid, out, **meta)` writes them
    back: `ra`, `dec` (degrees; `OBSRA`/`OBSDEC` as eht-imaging writes them, else
    `CRVAL1/2` of the RA/Dec axes; `ra` wrapped into [0, 360]), `freq` (Hz; the
    `FREQ` card, else the reference value of a `FREQ` axis), `mjd` (`MJD-OBS`, else `MJD`:
    with the time of day as its fraction where the header gives one, as
    eht-imaging writes it, so a round trip keeps it; an `int` for a whole day) and `source` (`OBJECT`).
    A key the header does not give is left out.
    """
    path = file_path(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such FITS file: {path!r}")
    try:
        with fits.open(path, memmap=False) as hdul:
            data = hdul[0].data
            header = hdul[0].header
            if data is None:
                raise ValueError("the primary HDU has no image")
            data = np.asarray(data, np.float64)
            # eht-imaging's own polarimetric files: Q, U, V as image extensions.
            extensions = {
                h.name: np.asarray(h.data, np.float64)
                for h in hdul[1:]
                if h.name in ("Q", "U", "V") and h.data is not None
            }
    except Exception as e:
        raise ValueError(f"{path!r} could not be read as a FITS image ({e}).") from e
    if stokes not in ("auto", "I", "IQUV"):
        raise ValueError(
            f"`stokes` must be 'auto', 'I' or 'IQUV', got {stokes!r}: 'auto' gives the "
            "Stokes planes the file holds, 'I' the I plane, 'IQUV' all four."
        )
    data = _stokes_planes(data, header, extensions, path)  # (k, ny, nx), I first
    if stokes == "I" or (stokes == "auto" and len(data) == 1):
        data = data[:1]
    elif len(data) == 1:  # "IQUV" of a Stokes I image: Q = U = V = 0
        data = np.concatenate([data, np.zeros((3, *data.shape[1:]))])
    bad = ~np.isfinite(data)
    if bad.any():
        p, iy, ix = np.argwhere(bad)[0]
        plane = "" if len(data) == 1 else f" of the {'IQUV'[p]} plane"
        raise ValueError(
            f"{path!r}: {int(bad.sum())} non-finite (blanked) pixels, the first at "
            f"index [{iy}, {ix}]{plane} of the stored array: replace them (e.g. "
            "`np.nan_to_num`) and save the image again."
        )
    d1, d2 = _pixel_steps(header, path)
    if d1 is None or d2 is None:
        raise ValueError(
            f"{path!r}: the header gives no pixel size (CDELT1/CDELT2 or CD1_1/CD2_2)."
        )
    if not math.isclose(abs(d1), abs(d2), rel_tol=1e-9):
        raise ValueError(f"{path!r}: needs square pixels (CDELT1 = -CDELT2).")
    if d1 == 0:
        raise ValueError(f"{path!r}: the pixel size CDELT1 is 0.")
    psize = abs(d1)
    stated = header.get("PSIZE")  # written by save_fits (and eht-imaging), radians
    if stated is not None and not math.isclose(float(stated), psize, rel_tol=1e-6):
        raise ValueError(
            f"{path!r}: the header's PSIZE ({float(stated)!r} rad) and CDELT1 "
            f"({psize!r} rad) disagree: fix the header."
        )
    if stated is not None:  # radians as written
        psize = float(stated)
    exact = header.get("EQPSIZE")  # save_fits's exact PSIZE: a bit-exact round trip
    if isinstance(exact, str):
        try:
            value = float.fromhex(exact)
        except ValueError:
            value = None
        if value is not None and math.isclose(value, psize, rel_tol=1e-12):
            psize = value
    _check_reference_position(header, psize, path)
    pads = [
        _centring_pad(header.get(f"CRPIX{k}"), n, k, path)
        for k, n in ((2, data.shape[1]), (1, data.shape[2]))
    ]
    if any(any(p) for p in pads):
        data = np.pad(data, [(0, 0), *pads])
    data = data * _to_jy_per_pixel(header, psize, path)
    img = data[:, ::-1, :] if d2 > 0 else data
    img = img[:, :, ::-1] if d1 > 0 else img
    img = img[0] if len(img) == 1 else img
    try:
        grid = ImageGrid(img.shape[-2], img.shape[-1], psize)
    except ValueError as e:
        # ImageGrid's message speaks of an argument the reader never saw.
        raise ValueError(
            f"{path!r}: pixels of {math.degrees(psize):.6g} degrees "
            f"({psize:.6g} rad; CDELT1/CDELT2 in degrees) are not an image eqmodels "
            f"can place ({e}) Check the header's CDELT1/CDELT2 (degrees) and CUNIT."
        ) from None
    if metadata:
        return np.ascontiguousarray(img), grid, _metadata(header, path)
    return np.ascontiguousarray(img), grid


# The FITS standard's Stokes axis values (Greisen & Calabretta 2002, table 7).
_STOKES_CODES = {1: "I", 2: "Q", 3: "U", 4: "V"}
_CORRELATION_CODES = {-1: "RR", -2: "LL", -3: "RL", -4: "LR"} | {
    -5: "XX",
    -6: "YY",
    -7: "XY",
    -8: "YX",
}


def _stokes_planes(data, header, extensions, path: str) -> np.ndarray:
    """The Stokes planes of a FITS image, `(k, ny, nx)` with I first and then Q, U,
    V in that order where the file has them (`k` = 1 or 4; planes of Q, U, V that
    the file lacks are zero when it has any): from a `STOKES` axis of the primary
    array, or eht-imaging's Q, U, V image extensions. Any other axis longer than 1,
    or a cube whose third axis is not named, is refused."""
    if data.ndim < 2:
        raise ValueError(f"{path!r}: expected a 2-d image, got shape {data.shape}.")
    stokes_axis = None
    for k in range(3, data.ndim + 1):  # FITS axis k is numpy axis ndim - k
        n = data.shape[data.ndim - k]
        ctype = str(header.get(f"CTYPE{k}", "")).strip().upper()
        if ctype == "STOKES":
            stokes_axis = k
        elif n != 1:
            name = f"'{ctype}'" if ctype else "with no CTYPE"
            raise ValueError(
                f"{path!r}: axis {k} ({name}) has {n} planes; load_fits reads one "
                "image, or the Stokes planes of a 'STOKES' axis: cut the cube to one "
                f"plane first (array shape {data.shape})."
            )
    if stokes_axis is None:
        planes = {"I": data.reshape(data.shape[-2:])}
    else:
        k = stokes_axis
        n = data.shape[data.ndim - k]
        values = float(header.get(f"CRVAL{k}", 1.0)) + (
            np.arange(n) + 1 - float(header.get(f"CRPIX{k}", 1.0))
        ) * float(header.get(f"CDELT{k}", 1.0))
        codes = [int(round(v)) for v in values]
        if any(c not in _STOKES_CODES for c in codes) or "I" not in {
            _STOKES_CODES[c] for c in codes
        }:
            names = [
                _STOKES_CODES.get(c, _CORRELATION_CODES.get(c, str(c))) for c in codes
            ]
            raise ValueError(
                f"{path!r}: its STOKES axis holds {names}; load_fits reads images of "
                "the Stokes parameters I (and Q, U, V), not correlation images (RR, "
                "LL, ...): convert them to I, Q, U, V first."
            )
        moved = np.moveaxis(data, data.ndim - k, 0).reshape(n, *data.shape[-2:])
        planes = {_STOKES_CODES[c]: moved[j] for j, c in enumerate(codes)}
    for name, plane in extensions.items():
        if name in planes:
            continue
        if plane.shape[-2:] != planes["I"].shape or any(
            m != 1 for m in plane.shape[:-2]
        ):
            raise ValueError(
                f"{path!r}: its {name} extension has shape {plane.shape}, the I image "
                f"{planes['I'].shape}: the planes must match."
            )
        planes[name] = plane.reshape(plane.shape[-2:])
    if len(planes) == 1:
        return planes["I"][None]
    zero = np.zeros_like(planes["I"])
    return np.stack([planes.get(s, zero) for s in "IQUV"])


def _centring_pad(crpix, n: int, k: int, path: str) -> tuple[int, int]:
    """Zero pixels to add `(before, after)` along FITS axis `k` (`n` pixels) so that
    the reference pixel `crpix` (1-based) becomes the centre `m/2 + 1/2` of the
    padded axis, where an `ImageGrid` puts the phase centre: a reference pixel on
    a whole or half pixel inside the image (DIFMAP, CASA and AIPS write `n/2 + 1`
    for even `n`) is honoured exactly, pixel for pixel."""
    if crpix is None:
        return 0, 0
    c = float(crpix)
    if math.isclose(c, n / 2 + 0.5, rel_tol=0, abs_tol=1e-6):
        return 0, 0
    twice = round(2 * c)
    if not (abs(2 * c - twice) <= 2e-6 and 1 <= twice / 2 <= n):
        raise ValueError(
            f"{path!r}: the reference pixel CRPIX{k} = {c!r} is neither the image "
            f"centre {n / 2 + 0.5!r} (= n/2 + 1/2, where an `ImageGrid` puts the "
            "phase centre) nor a whole or half pixel inside the image (which "
            "`load_fits` centres by padding with zero pixels): regrid the image so "
            "that its phase centre falls on a pixel or between two, then load it."
        )
    if twice / 2 > n / 2 + 0.5:  # right of the centre: pad after
        return 0, twice - 1 - n
    return n + 1 - twice, 0


def _check_reference_position(header, psize: float, path: str) -> None:
    """Refuse an image whose reference pixel (CRVAL of the RA and Dec axes) is not
    at the observation's phase centre (`OBSRA`/`OBSDEC`, as eht-imaging writes
    both): centred on its reference pixel, as `load_fits` places it, the image
    would sit off the data's phase centre by that offset."""

    def value(key):
        v = header.get(key)
        if v is None or isinstance(v, bool | str):
            return None
        v = float(v)
        return v if math.isfinite(v) else None

    axes = {}
    for k in range(1, int(header.get("NAXIS", 0)) + 1):
        kind = str(header.get(f"CTYPE{k}", "")).strip().upper()
        for prefix in ("RA", "DEC"):
            if kind.startswith(prefix) and prefix not in axes:
                axes[prefix] = k
    if "RA" not in axes or "DEC" not in axes:
        return
    ra, dec = value(f"CRVAL{axes['RA']}"), value(f"CRVAL{axes['DEC']}")
    obs_ra, obs_dec = value("OBSRA"), value("OBSDEC")
    if None in (ra, dec, obs_ra, obs_dec):
        return
    d_ra = ((ra - obs_ra + 180.0) % 360.0 - 180.0) * math.cos(math.radians(obs_dec))
    offset = math.radians(math.hypot(d_ra, dec - obs_dec))
    if offset > psize / 2:
        raise ValueError(
            f"{path!r}: the reference pixel's position (CRVAL{axes['RA']}, "
            f"CRVAL{axes['DEC']} = {ra!r}, {dec!r} degrees) is "
            f"{offset / RAD_PER_UAS:.4g} µas ({offset / psize:.3g} pixels) from the "
            f"phase centre (OBSRA, OBSDEC = {obs_ra!r}, {obs_dec!r}): `load_fits` "
            "centres the image on its reference pixel, so it would sit that far off "
            "the data's phase centre. Shift the image so that its reference pixel "
            "is the phase centre (or set CRVAL to OBSRA/OBSDEC if the header is "
            "wrong), then load it."
        )


def _metadata(header, path: str) -> dict[str, Any]:
    """`save_fits`'s keyword arguments that `header` gives (see `load_fits`)."""

    def number(*keys):
        for key in keys:
            value = header.get(key)
            if value is None or isinstance(value, bool | str):
                continue
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"{path!r}: the header's {key} is {value!r}.")
            return value
        return None

    def axis(prefix):
        for k in range(1, int(header.get("NAXIS", 0)) + 1):
            if str(header.get(f"CTYPE{k}", "")).strip().upper().startswith(prefix):
                return k
        return None

    meta: dict[str, Any] = {}
    k_ra, k_dec, k_freq = axis("RA"), axis("DEC"), axis("FREQ")
    ra = number("OBSRA", *([f"CRVAL{k_ra}"] if k_ra else []))
    dec = number("OBSDEC", *([f"CRVAL{k_dec}"] if k_dec else []))
    if ra is not None:
        meta["ra"] = ra % 360.0
    if dec is not None:
        if not -90.0 <= dec <= 90.0:
            raise ValueError(
                f"{path!r}: the header's declination {dec!r} is not in [-90, 90] "
                "degrees."
            )
        meta["dec"] = dec
    freq = number("FREQ", *([f"CRVAL{k_freq}"] if k_freq else []))
    # FREQ = 0 is eht-imaging's "unknown" (it writes its `rf`, 0 when it read
    # no frequency): left out, as a missing card is.
    if freq is not None and freq != 0:
        if freq < 0:
            raise ValueError(
                f"{path!r}: the header's frequency {freq!r} Hz is not > 0."
            )
        meta["freq"] = freq
    mjd = number("MJD-OBS", "MJD")
    if mjd is not None:
        # With its fraction (the time of day, as eht-imaging dates its images),
        # so that `save_fits(..., **meta)` keeps it; an int for a whole day.
        meta["mjd"] = int(mjd) if float(mjd).is_integer() else float(mjd)
    source = header.get("OBJECT")
    if isinstance(source, str) and source.strip():
        meta["source"] = source.strip()
    return meta


def _to_jy_per_pixel(header, psize: float, path: str) -> float:
    """The factor taking the image's `BUNIT` to Jy/pixel (see `load_fits`)."""
    unit = str(header.get("BUNIT", "JY/PIXEL")).strip().upper().replace(" ", "")
    if unit in ("", "JY/PIXEL", "JY/PIX", "JY/PX"):
        return 1.0
    if unit == "JY/BEAM":
        try:
            bmaj, bmin = (math.radians(float(header[k])) for k in ("BMAJ", "BMIN"))
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"{path!r}: BUNIT is JY/BEAM but the header has no valid BMAJ/BMIN "
                "(the restoring beam, degrees) to convert to Jy/pixel: add them to "
                "the header."
            ) from None
        if not (bmaj > 0 and bmin > 0 and math.isfinite(bmaj * bmin)):
            raise ValueError(
                f"{path!r}: the beam BMAJ/BMIN must be > 0 (degrees), got "
                f"{header['BMAJ']!r}, {header['BMIN']!r}."
            )
        beam_pixels = math.pi * bmaj * bmin / (4 * math.log(2) * psize**2)
        return 1.0 / beam_pixels
    raise ValueError(
        f"{path!r}: unsupported image unit BUNIT = {header['BUNIT']!r}: expected "
        "JY/PIXEL or JY/BEAM (with BMAJ/BMIN)."
    )


_ANGLE_UNITS = {
    "deg": math.pi / 180,
    "arcmin": math.pi / 180 / 60,
    "arcsec": math.pi / 180 / 3600,
    "mas": math.pi / 180 / 3600e3,
    "uas": math.pi / 180 / 3600e6,
    "rad": 1.0,
}


def _pixel_steps(header, path):
    """`(CDELT1, CDELT2)` in radians, from CDELTi (or a diagonal CDi_j matrix) in
    the axes' CUNITi (degrees by default). Rotated axes are refused."""
    for key in ("CROTA1", "CROTA2", "PC1_2", "PC2_1", "CD1_2", "CD2_1"):
        if float(header.get(key, 0.0) or 0.0) != 0.0:
            raise ValueError(
                f"{path!r}: the image axes are rotated ({key} = {header[key]!r}); "
                "only images with RA along axis 1 and Dec along axis 2 are supported."
            )
    ctype = [str(header.get(f"CTYPE{k}", "")).strip().upper() for k in (1, 2)]
    if ctype[0].startswith("DEC") or ctype[1].startswith("RA"):
        raise ValueError(
            f"{path!r}: axis 1 is {ctype[0]!r} and axis 2 {ctype[1]!r}: only images "
            "with RA along axis 1 and Dec along axis 2 are supported (transpose the "
            "array and swap the axes' cards)."
        )
    out = []
    for k in (1, 2):
        step = header.get(f"CDELT{k}", header.get(f"CD{k}_{k}"))
        if step is None:
            out.append(None)
            continue
        step = float(step) * float(header.get(f"PC{k}_{k}", 1.0))
        unit = str(header.get(f"CUNIT{k}", "deg")).strip().lower() or "deg"
        if unit not in _ANGLE_UNITS:
            raise ValueError(
                f"{path!r}: unknown angle unit CUNIT{k} = {unit!r}; expected one of "
                f"{sorted(_ANGLE_UNITS)}."
            )
        out.append(step * _ANGLE_UNITS[unit])
    return tuple(out)
