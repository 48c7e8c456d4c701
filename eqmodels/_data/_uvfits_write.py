"""`save_uvfits`: a `VisData` as a random-groups uvfits file."""

import os

import numpy as np
from astropy.io import fits

from .._atomic import atomic_path
from .._validation import check_flag, file_path
from ._field_rotation import MOUNT_CODES
from ._polvisdata import LINEAR, PolVisData
from ._visdata import check_visdata, mjd_date, VisData


#: Julian date of MJD 0.
_MJD0 = 2400000.5


def save_uvfits(
    data: VisData | PolVisData, path: str | os.PathLike, *, overwrite: bool = False
):
    """Write `data` as a uvfits file (random groups, Stokes I) that
    [`eqmodels.load_uvfits`][] reads back as `data` and eht-imaging's
    `load_uvfits` reads as the same observation: after averaging, flagging,
    self-calibration ([`eqmodels.apply_gains`][]) or [`eqmodels.observe`][], to
    share the result or image it with another package.

    What is written, in float64 (`BITPIX = -64`), so that values come back to
    float64 rounding (`u`, `v` pass through light-seconds, `σ` through the weight
    `1/σ²`: one rounding each; stations, times of EHT files and integration times
    exactly):

    - one group per row: `UU`, `VV` (`u`, `v` over the frequency: light-seconds),
      `WW` = 0, `BASELINE` (`256 a1 + a2`, stations numbered from 1 in
      `station_names` order; `65536 + 2048 a1 + a2` beyond 255 stations), the date as two `DATE` parameters (the day's Julian
      date and the time of day: the time comes back to about 1e-8 h, the
      resolution of a float64 Julian date), `INTTIM` (`tint`);
    - the data axes `COMPLEX` (real, imaginary, weight `1/σ²`), `STOKES` (one
      entry, I), `FREQ` (`freq`, with the bandwidth as its step), `IF`, `RA`,
      `DEC` (`ra`, `dec`);
    - an `AIPS AN` table: `ANNAME`, `STABXYZ` (the ECEF positions, array centre
      0), `NOSTA`, with the frequency; an `AIPS FQ` table with the bandwidth;
      `OBJECT`, `OBSRA`, `OBSDEC` in the header.

    A [`eqmodels.PolVisData`][] is written with its four correlations: a STOKES
    axis of four entries (RR, LL, RL, LR: codes −1 … −4; XX, YY, XY, YX: −5 … −8
    when every station has linear feeds), a flagged correlation with value 0 and
    weight 0, and the AN table's `MNTSTA` (mount codes) and `POLTYA`/`POLTYB`
    (R/L or X/Y per station) from `mounts` and `feeds`; `fr_offset` is not
    written. [`eqmodels.load_uvfits`][] with `polarization="full"` reads it back
    as `data`, and eht-imaging's `load_uvfits(path, polrep='circ')` reads the
    circular correlations.

    Data of several bands (`band_freqs` with more than one entry: their `u, v`
    are in wavelengths at each band's frequency) are refused: save each band
    (`data.take(np.flatnonzero(np.asarray(data.band) == k))`). `n_flagged` is not
    written (it counts rows that are not in the file).

    **Arguments:**

    - `data`: a [`eqmodels.VisData`][] or [`eqmodels.PolVisData`][].
    - `path`: the file to write.
    - `overwrite`: replace an existing file.
    """
    pol = isinstance(data, PolVisData)
    if not pol:
        check_visdata(data)
    overwrite = check_flag("overwrite", overwrite)
    if len(data.band_freqs) != 1:
        raise ValueError(
            f"`data` hold {len(data.band_freqs)} bands ({data.band_freqs} Hz), whose "
            "u, v are in wavelengths at each band's own frequency: save each band "
            "on its own (`data.take(np.flatnonzero(np.asarray(data.band) == k))`)."
        )
    path = file_path(path)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path!r} exists; pass `overwrite=True` to replace it.")
    freq = float(data.band_freqs[0])
    n = int(np.shape(data.u)[0])
    f64 = np.float64
    if pol:
        flag = np.asarray(data.flag)
        vis = np.where(flag, 0.0, np.asarray(data.corr).astype(np.complex128))
        with np.errstate(invalid="ignore"):
            weight = np.where(flag, 0.0, 1.0 / np.asarray(data.sigma, f64) ** 2)
        linear = data.basis == LINEAR
        stokes_code = -5.0 if linear else -1.0
    else:
        vis = np.asarray(data.vis).astype(np.complex128)[:, None]
        weight = (1.0 / np.asarray(data.sigma, f64) ** 2)[:, None]
        stokes_code = 1.0
    n_corr = vis.shape[1]
    # (n, DEC, RA, IF, FREQ, STOKES, COMPLEX): numpy order of FITS axes 7..2.
    cube = np.zeros((n, 1, 1, 1, 1, n_corr, 3), f64)
    cube[..., 0] = vis.real.reshape(n, 1, 1, 1, 1, n_corr)
    cube[..., 1] = vis.imag.reshape(n, 1, 1, 1, 1, n_corr)
    cube[..., 2] = weight.reshape(n, 1, 1, 1, 1, n_corr)
    ant1 = np.asarray(data.ant1, np.int64) + 1
    ant2 = np.asarray(data.ant2, np.int64) + 1
    n_st = len(data.station_names)
    if n_st > 2047:
        raise ValueError(
            f"`data` have {n_st} stations; a uvfits BASELINE encodes at most 2047."
        )
    # AIPS's encoding, and beyond station 255 the one for larger arrays.
    baseline = 256 * ant1 + ant2 if n_st <= 255 else 65536 + 2048 * ant1 + ant2
    names = ["UU---SIN", "VV---SIN", "WW---SIN", "BASELINE", "DATE", "DATE", "INTTIM"]
    pars = [
        np.asarray(data.u, f64) / freq,
        np.asarray(data.v, f64) / freq,
        np.zeros(n),
        baseline.astype(f64),
        np.full(n, _MJD0 + data.mjd),
        np.asarray(data.time, f64) / 24.0,
        np.asarray(data.tint, f64),
    ]
    groups = fits.GroupData(cube, bitpix=-64, parnames=names, pardata=pars)
    hdu = fits.GroupsHDU(groups)
    h = hdu.header
    axes = [
        ("COMPLEX", 1.0, 1.0),
        ("STOKES", stokes_code, -1.0 if pol else 1.0),
        # (The bandwidth, possibly 0 = unknown, is exact in the FQ table; a FITS
        # axis step may not be 0.)
        ("FREQ", freq, float(data.bandwidth) or 1.0),
        ("IF", 1.0, 1.0),
        ("RA", float(data.ra), 1.0),
        ("DEC", float(data.dec), 1.0),
    ]
    for k, (ctype, crval, cdelt) in enumerate(axes, start=2):
        h[f"CTYPE{k}"] = ctype
        h[f"CRVAL{k}"] = crval
        h[f"CDELT{k}"] = cdelt
        h[f"CRPIX{k}"] = 1.0
        h[f"CROTA{k}"] = 0.0
    h["OBJECT"] = data.source
    h["OBSRA"] = float(data.ra)
    h["OBSDEC"] = float(data.dec)
    h["TELESCOP"] = "VLBA"  # AIPS's convention for a VLBI array
    h["INSTRUME"] = "VLBA"
    h["BUNIT"] = "JY"
    h["EQUINOX"] = 2000.0
    h["DATE-OBS"] = _date_obs(data.mjd)
    h["ORIGIN"] = "eqmodels"
    xyz = np.asarray(data.station_xyz, f64).reshape(-1, 3)
    if pol:
        codes = {m: c for c, m in MOUNT_CODES.items()}
        mntsta = np.array([codes[m] for m in data.mounts], np.int32)
        lin = [f == "linear" for f in data.feeds]
        polya = ["X" if x else "R" for x in lin]
        polyb = ["Y" if x else "L" for x in lin]
    else:
        mntsta = np.zeros(n_st, np.int32)
        polya, polyb = ["R"] * n_st, ["L"] * n_st
    an = fits.BinTableHDU.from_columns(
        [
            fits.Column("ANNAME", "8A", array=list(data.station_names)),
            fits.Column("STABXYZ", "3D", unit="METERS", array=xyz),
            fits.Column("NOSTA", "1J", array=np.arange(1, n_st + 1)),
            fits.Column("MNTSTA", "1J", array=mntsta),
            fits.Column("STAXOF", "1E", unit="METERS", array=np.zeros(n_st)),
            fits.Column("POLTYA", "1A", array=polya),
            fits.Column("POLAA", "1E", unit="DEGREES", array=np.zeros(n_st)),
            fits.Column("POLCALA", "2E", array=np.zeros((n_st, 2))),
            fits.Column("POLTYB", "1A", array=polyb),
            fits.Column("POLAB", "1E", unit="DEGREES", array=np.zeros(n_st)),
            fits.Column("POLCALB", "2E", array=np.zeros((n_st, 2))),
        ],
        name="AIPS AN",
    )
    ah = an.header
    for key in ("ARRAYX", "ARRAYY", "ARRAYZ"):
        ah[key] = 0.0
    ah["FREQ"] = freq
    ah["RDATE"] = _date_obs(data.mjd)
    ah["GSTIA0"] = 0.0
    ah["DEGPDY"] = 360.9856449733
    ah["POLARX"] = 0.0
    ah["POLARY"] = 0.0
    ah["UT1UTC"] = 0.0
    ah["DATUTC"] = 0.0
    ah["TIMSYS"] = "UTC"
    ah["ARRNAM"] = "EHT"
    ah["NUMORB"] = 0
    ah["NOPCAL"] = 2
    ah["POLTYPE"] = "APPROX"
    ah["FREQID"] = 1
    ah["EXTVER"] = 1
    fq = fits.BinTableHDU.from_columns(
        [
            fits.Column("FRQSEL", "1J", array=[1]),
            fits.Column("IF FREQ", "1D", unit="HZ", array=[0.0]),
            fits.Column("CH WIDTH", "1D", unit="HZ", array=[data.bandwidth]),
            fits.Column("TOTAL BANDWIDTH", "1D", unit="HZ", array=[data.bandwidth]),
            fits.Column("SIDEBAND", "1J", array=[1]),
        ],
        name="AIPS FQ",
    )
    fq.header["NO_IF"] = 1
    # Written to a temporary file in the same folder and renamed into place: a
    # kill leaves the old file or the new one, never a partial one.
    with atomic_path(path) as tmp:
        fits.HDUList([hdu, an, fq]).writeto(tmp, overwrite=True)


def _date_obs(mjd: int) -> str:
    """`YYYY-MM-DD` of the modified Julian date `mjd`."""
    return mjd_date(mjd).isoformat()
