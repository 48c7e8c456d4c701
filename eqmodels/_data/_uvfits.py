"""Reading calibrated uvfits (random-groups) files into `VisData`."""

import gzip
import io
import math
import os
import warnings
import zlib

import numpy as np
from astropy.io import fits
from astropy.utils.exceptions import AstropyUserWarning, AstropyWarning

from .._validation import check_flag, file_path
from ._field_rotation import MOUNT_CODES
from ._polvisdata import CIRCULAR, LINEAR, PolVisData
from ._uvfits_checks import (
    describe_rows,
    FREQ_TOLERANCE,
    geometry_mismatch,
    GEOMETRY_TOLERANCE,
    half_gaps,
    SIGMA_OUTLIER_FACTOR,
    sigma_outliers,
    tint_outliers,
    twin_hands_differ,
)
from ._visdata import VisData


# AIPS Stokes codes (AIPS memo 117).
_STOKES = {1: "I", 2: "Q", 3: "U", 4: "V", -1: "RR", -2: "LL", -3: "RL", -4: "LR"}
_STOKES.update({-5: "XX", -6: "YY", -7: "XY", -8: "YX"})


class UVFITSError(ValueError):
    """A file that is not a readable uvfits visibility file."""


class UVFITSWarning(UserWarning):
    """Rows of a uvfits file dropped or suspect (corrupt bytes), named."""


def load_uvfits(
    path: str | os.PathLike, *, check: bool = True, polarization: str = "I"
) -> VisData | PolVisData:
    """Read a calibrated uvfits file (random-groups visibilities) as Stokes I, or
    with `polarization="full"` as polarimetric data (all four correlations).

    What it does, following eht-imaging's `load_uvfits`:

    - per polarisation (RR, LL; or XX, YY; or a Stokes I file), an inverse-variance
      weighted average over IFs and channels of the entries with weight > 0;
      `σ_pol = 1/sqrt(Σ w)`;
    - Stokes `I = (RR + LL)/2` with `σ_I = ½ sqrt(σ_RR² + σ_LL²)` when both are
      present, the one present hand otherwise;
    - rows where no polarisation has weight > 0, or whose u, v, date,
      integration time or baseline is not finite or beyond float32's range (or
      the time negative), and
      autocorrelations, are **dropped and counted** in `VisData.n_flagged` (every
      row of the file is either loaded or counted);
    - with `check=True` (default), rows no real observation can produce — signs
      of corrupt bytes — are also dropped and counted in `n_flagged`: a
      projected baseline `|(u, v)|` longer than the baseline between the two
      stations' positions in the AN table (`|(u, v)| λ > |r1 − r2| (1 + 1e-3) +
      10 m`, Earth rotation only shortens it), `|V| > 1e6` Jy, a sigma below
      `1e-6` of the file's median, or a date more than 30 days from the median;
      if every row fails, or the `AIPS AN` table puts a station more than
      `MAX_STATION_RADIUS_M` (1e8 m) from the Earth's centre, the file is
      refused;
    - with `check=True`, the file's geometry is held against itself (issue 41;
      docs/data.md "What the reader checks"): each row's `u, v` against the
      projected baseline from the AN table's station positions, the source
      position and the row's date, where the AN table gives its `RDATE`
      (`GEOMETRY_TOLERANCE`, measured on every public EHT file): a few rows
      that disagree are dropped, most of one station's rows (its position or
      number is corrupt) or of the file's (a corrupt source position, date or
      u, v scale, or made-up coordinates) refuse the file; the AN table's
      `FREQ` must equal the FREQ axis' `CRVAL`; in a file storing Stokes I
      twice (RR = LL in 99 % of its rows) a row whose hands differ is dropped;
      a σ 50× off its baseline's neighbours and an `INTTIM` longer than its
      rows' spacing are reported;
    - every row dropped, other than those the file flags itself (no weight
      > 0), and every suspect row is named in one `UVFITSWarning` (a
      `UserWarning`) with the count, the reason and the rows (the file's
      groups, from 0); antenna numbers (`NOSTA`) must be unique and `GCOUNT`
      must agree with the data (both also with `check=False`);
    - `u, v` (stored in light-seconds) times the reference frequency (the AN
      table's `FREQ`, else the FREQ axis) give wavelengths;
    - `time` in hours since 0 h UTC of `mjd = floor(min JD - 2400000.5)`;
    - stations (names, ECEF positions plus the `ARRAYX/Y/Z` centre) from the
      `AIPS AN` table, in table order; rows are re-oriented so that
      `ant1 < ant2`, and sorted by time, then baseline (whichever way the file
      stores it);
    - a multi-source file (a `SOURCE` random parameter with several values) is
      refused: split it per source first. Duplicated rows (a baseline twice at one
      time, e.g. stored both ways) are all loaded, and refused by the averages and
      closures, which name them (`data.take(~data.duplicate_rows())`).
    - antennas from the `ANTENNA1` / `ANTENNA2` random parameters where the file
      has them, else from `BASELINE` (`256 a1 + a2`, or `65536 + 2048 a1 + a2`
      for antenna numbers beyond 255); rows of a subarray other than the first
      (a `SUBARRAY` parameter above 1, or a `BASELINE` with a fractional part:
      their stations are in another AN table) are refused: split the file per
      subarray first.
    - a gzip-compressed file (`.uvfits.gz`) is read as the file it holds.

    **Arguments:**

    - `path`: the file.
    - `check`: drop (and count) implausible rows and check the geometry, see
      above; `False` loads every finite, weighted row as it is.
    - `polarization`: `"I"` (default) for Stokes I as above; `"full"` for a
      [`eqmodels.PolVisData`][] with the four correlations of a correlation file
      (RR, LL, RL, LR or XX, YY, XY, YX), read as eht-imaging's
      `load_uvfits(path, polrep='circ')` reads them:

        - each correlation averaged over IFs and channels as the parallel hands
          above (`σ = 1/sqrt(Σ w)`), and flagged (NaN) where it has no entry with
          weight > 0: a row with RL flagged keeps its RR and LL;
        - the rows are those of Stokes I (a row with RR or LL; a row with only
          cross-hands is dropped and counted, as eht-imaging drops it), so
          `load_uvfits(path, polarization="full").stokes_i()` equals
          `load_uvfits(path)` row for row; with `check=True` a cross-hand with
          `|V| > 1e6` Jy or a sigma below `1e-6` of the median σ_I is flagged;
        - rows stored with `ant1 > ant2` are conjugated with their cross-hands
          swapped;
        - feeds per station from the AN table's `POLTYA` (X or Y: linear; R or
          L: circular; else the basis of the STOKES axis), mounts from its
          `MNTSTA` (0 alt-az, 1 equatorial, 2 orbiting, 3 X-Y, 4 Nasmyth right,
          5 Nasmyth left; alt-az without the column). A file of Stokes
          parameters (I, Q, U, V) is refused; missing correlations (a file with
          RR and LL only) are flagged on every row.

    **Returns:** a [`eqmodels.VisData`][] (`polarization="I"`) or a
    [`eqmodels.PolVisData`][] (`polarization="full"`).

    **Raises:** `FileNotFoundError` for a missing file; `ValueError` for a file
    that is not FITS, is truncated or corrupt, is not random-groups visibility
    data, lacks the `AIPS AN` table or a needed axis/parameter, gives a
    reference frequency outside 1 MHz–10 THz, or has no unflagged Stokes I data.
    The file is read by `astropy.io.fits`; what it refuses is named as this file's
    problem, with astropy's reason.
    """
    path = file_path(path)
    check = check_flag("check", check)
    if not isinstance(polarization, str) or polarization not in ("I", "full"):
        raise ValueError(
            f"`polarization` must be 'I' (Stokes I, a VisData) or 'full' (the four "
            f"correlations, a PolVisData), got {polarization!r}."
        )
    full = polarization == "full"
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such uvfits file: {path!r}")
    if os.path.isdir(path):
        raise UVFITSError(f"{path!r} is a directory, not a uvfits file.")
    # What astropy warns about while it reads (a card that does not follow the
    # standard, a file shorter than its padding) either leaves the values readable
    # or ends in an error, whose message then gives astropy's first warning about
    # the file (not its deprecations, which are astropy's own business).
    notes = []  # what the checks report about rows, warned once the file is read
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AstropyWarning)
        try:
            # Corrupt bytes can hold signalling NaNs (whose conversion to float64
            # sets numpy's "invalid" flag) and huge values; each such row is then
            # caught by the finiteness and plausibility checks, so the flags are
            # not warnings.
            with np.errstate(invalid="ignore", over="ignore"), _open(path) as hdul:
                parts = _read(hdul, path, check, full, notes)
            # Inside the `try`: what VisData refuses (a header's OBSDEC of 1e21)
            # is this file's problem, and says so.
            if full:
                parts.pop("vis")
                data = PolVisData(**parts)
            else:
                data = VisData(**parts)
        except UVFITSError:
            raise
        except Exception as e:
            # What astropy refuses (no SIMPLE card, a header it cannot parse: an
            # OSError, a ValueError, a VerifyError, an AssertionError for a column
            # name, by version), and whatever else corrupt cards or columns make
            # numpy raise: named as this file's problem.
            said = [
                str(w.message)
                for w in caught
                if issubclass(w.category, AstropyUserWarning)
            ]
            why = f"; astropy warned: {said[0]}" if said else ""
            raise UVFITSError(
                f"{path!r} could not be read as a uvfits file "
                f"({type(e).__name__}: {e}{why})."
            ) from e
    for w in caught:  # the warnings that are not astropy's reading, as they were
        if not issubclass(w.category, AstropyWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if notes:  # one warning: a caller expecting it sees all of it
        warnings.warn(" ".join(notes), UVFITSWarning, stacklevel=2)
    return data


def _open(path: str) -> fits.HDUList:
    """The HDUs of the file at `path`, read into memory (a gzip-compressed file
    decompressed first), or a `UVFITSError` for a truncated file: astropy opens a
    file cut inside a data unit (and fails later, reshaping it) or inside an
    extension's header (and leaves that HDU out) without an error."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise UVFITSError(
                f"{path!r} is gzip-compressed but does not decompress ({e})."
            ) from None
    try:
        hdul = fits.open(io.BytesIO(raw), memmap=False, lazy_load_hdus=False)
    except OSError:
        if raw.startswith(b"SIMPLE  =") and _end_card(raw, 0) is None:
            raise UVFITSError(
                f"{path!r} is truncated: the file ends inside its primary header "
                "(no END card)."
            ) from None
        raise
    _check_gcount(hdul, raw, path)
    last = len(hdul) - 1
    start, size = hdul.fileinfo(last)["datLoc"], hdul[last].size
    after = start + -(-size // _BLOCK) * _BLOCK  # where a next header would begin
    problem = None
    if start + size > len(raw):
        problem = (
            f"is truncated: the file ends inside the data of HDU {last} "
            f"({hdul[last].name}), {start + size - len(raw)} bytes short."
        )
    elif raw[after : after + 9] == b"XTENSION=":
        problem = (
            f"is truncated: the file ends inside the header of HDU {last + 1} "
            "(no END card)."
            if _end_card(raw, after) is None
            else f"has a header astropy cannot read: HDU {last + 1}, at byte {after}."
        )
    if problem is not None:
        hdul.close()
        raise UVFITSError(f"{path!r} {problem}")
    return hdul


_BLOCK = 2880  # FITS's block: headers and data units are padded to it


def _check_gcount(hdul, raw: bytes, path: str):
    """A `UVFITSError` when the primary header's group count (`GCOUNT`, with
    `PCOUNT`, `BITPIX` and `NAXISn`) puts the end of the random groups elsewhere
    than where the first extension (the AN table) begins: astropy then reads
    too few groups and misses the tables, or reads the tables as groups."""
    primary = hdul[0]
    if not isinstance(primary, fits.GroupsHDU):
        return
    start = hdul.fileinfo(0)["datLoc"]
    end = start + -(-primary.size // _BLOCK) * _BLOCK
    first = raw.find(b"XTENSION=", start)
    while first >= 0 and first % _BLOCK:
        first = raw.find(b"XTENSION=", first + 1)
    first = None if first < 0 else first
    h = primary.header
    count = int(h.get("GCOUNT", 1) or 1)
    group = primary.size // max(count, 1)
    if first is None or first == end:
        # Within the data's last block: FITS pads with zero bytes, so a group
        # left out (GCOUNT too small) leaves non-zero padding, and a group too
        # many is one of zero bytes (no observation has a date of 0).
        stop = start + primary.size
        pad = raw[stop : min(end, len(raw))]
        if pad.strip(b"\0"):
            raise UVFITSError(
                f"{path!r}: the {len(pad)} bytes of padding after the "
                f"{count} groups the header's GCOUNT counts are not zero: GCOUNT "
                "is smaller than the number of groups written, or the padding "
                "is corrupt."
            )
        last = raw[stop - group : stop] if group else b"x"
        if count > 0 and stop <= len(raw) and not last.strip(b"\0"):
            raise UVFITSError(
                f"{path!r}: the last of the {count} groups the header's GCOUNT "
                "counts is all zero bytes (padding, not an observation): GCOUNT "
                "is larger than the number of groups written."
            )
        return
    low = max(first - _BLOCK + 1 - start, 0) // group if group else 0
    high = (first - start) // group if group else 0
    held = f"{high}" if low == high else f"{low + 1} to {high}"
    raise UVFITSError(
        f"{path!r}: the header's GCOUNT ({h.get('GCOUNT')} groups of {group} "
        f"bytes) disagrees with the data: they end at byte {end}, but the first "
        f"extension begins at byte {first}, after {held} groups. The header "
        "(GCOUNT, PCOUNT, BITPIX or NAXISn) is corrupt."
    )


def _end_card(raw: bytes, start: int) -> int | None:
    """The offset of the header's END card after byte `start`, or None."""
    for i in range(start, len(raw), 80):
        if raw[i : i + 8].rstrip() == b"END":
            return i
    return None


def _number(header, key: str, default=None):
    """Card `key` as a float (`default` when absent or without a value), or a
    `ValueError` naming it when it holds something else (a string, a logical)."""
    value = header.get(key)
    if value is None or isinstance(value, fits.card.Undefined):
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"card {key} = {value!r} is not a number")
    return float(value)


def _table(hdul, name: str, path: str):
    """The binary table `name` (`EXTNAME`, case ignored), or None."""
    try:
        hdu = hdul[name]
    except KeyError:
        return None
    if not isinstance(hdu, fits.BinTableHDU):
        raise UVFITSError(f"{path!r}: the {name!r} HDU is not a binary table.")
    return hdu


def _has_column(table, name: str) -> bool:
    return name.upper() in (n.strip().upper() for n in table.columns.names)


def _groups_data(primary) -> np.ndarray:
    """The random groups' data array, `BSCALE · stored + BZERO` in float64 (astropy
    8 leaves out a random-groups `BZERO`; uvfits files are float and unscaled)."""
    stored = np.ndarray.view(primary.data, np.ndarray)
    stored = stored[stored.dtype.names[-1]]  # after the parameters: the data
    scale = _number(primary.header, "BSCALE", 1.0)
    zero = _number(primary.header, "BZERO", 0.0)
    return np.asarray(stored, np.float64) * scale + zero


def _read(hdul, path, check=True, full=False, notes=None) -> dict:
    notes = [] if notes is None else notes
    primary = hdul[0]
    if not isinstance(primary, fits.GroupsHDU) or primary.header.get("GCOUNT") == 0:
        raise UVFITSError(
            f"{path!r} is a FITS file but not uvfits: its primary HDU holds no "
            "random-groups visibility data (GROUPS = T)."
        )
    header = primary.header
    # The scalings astropy applies, checked first: astropy takes a malformed one
    # for a string and fails inside numpy.
    for key in ["BSCALE", "BZERO"] + [
        f"{c}{i}"
        for i in range(1, header.get("PCOUNT", 0) + 1)
        for c in ("PSCAL", "PZERO")
    ]:
        _number(header, key)
    an_hdu = _table(hdul, "AIPS AN", path)
    if an_hdu is None:
        raise UVFITSError(
            f"{path!r} has no 'AIPS AN' (antenna) table: station names and "
            "positions cannot be read."
        )
    for col in ("ANNAME", "STABXYZ", "NOSTA"):
        if not _has_column(an_hdu, col):
            raise UVFITSError(f"{path!r}: the AIPS AN table has no {col!r} column.")

    # -- axes of the DATA array (numpy order is reversed, axis 0 = groups) -----
    naxis = header["NAXIS"]
    ctypes = {}
    for k in range(2, naxis + 1):
        ctypes[str(header.get(f"CTYPE{k}", "")).strip().upper()] = k
    for needed in ("COMPLEX", "STOKES", "FREQ"):
        if needed not in ctypes:
            raise UVFITSError(f"{path!r}: the data have no {needed} axis (CTYPEn).")
    raw = _groups_data(primary)

    def np_axis(k):
        return 1 + naxis - k

    ax = {name: np_axis(k) for name, k in ctypes.items()}
    order = [0, ax.get("IF"), ax["FREQ"], ax["STOKES"], ax["COMPLEX"]]
    rest = [i for i in range(raw.ndim) if i not in order]
    for i in rest:
        if raw.shape[i] != 1:
            k = 1 + naxis - i  # the FITS axis number
            ctype = str(header.get(f"CTYPE{k}", "")).strip()
            named = f"(CTYPE{k} = {ctype!r})" if ctype else f"(no CTYPE{k})"
            raise UVFITSError(
                f"{path!r}: data axis {k} {named} has length {raw.shape[i]}; "
                "eqmodels reads the COMPLEX, STOKES, FREQ and IF axes, and every "
                "other axis must have length 1 (one pointing). If this axis holds "
                f"IFs, set CTYPE{k} = 'IF' in the header."
            )
    if ax.get("IF") is None:
        raw = np.expand_dims(raw, raw.ndim)
        order[1] = raw.ndim - 1
    raw = np.transpose(raw, order + [i for i in range(raw.ndim) if i not in order])
    raw = raw.reshape(raw.shape[:5])  # (n, n_if, n_chan, n_stokes, n_complex)
    if raw.shape[4] < 3:
        raise UVFITSError(
            f"{path!r}: the COMPLEX axis has {raw.shape[4]} entries; need "
            "(real, imaginary, weight)."
        )
    k = ctypes["STOKES"]
    crval = _number(header, f"CRVAL{k}", 1.0)
    cdelt = _number(header, f"CDELT{k}", 1.0)
    crpix = _number(header, f"CRPIX{k}", 1.0)
    codes = [int(round(crval + (i + 1 - crpix) * cdelt)) for i in range(raw.shape[3])]
    names = [_STOKES.get(c, str(c)) for c in codes]
    if "I" in names:
        hands = [names.index("I")]
    elif "RR" in names or "LL" in names:
        hands = [names.index(h) for h in ("RR", "LL") if h in names]
    elif "XX" in names or "YY" in names:
        hands = [names.index(h) for h in ("XX", "YY") if h in names]
    else:
        raise UVFITSError(
            f"{path!r}: no Stokes I, RR/LL or XX/YY data (polarisations {names})."
        )

    if full:
        if "I" in names:
            raise UVFITSError(
                f"{path!r} holds polarisations {names}, not correlations (RR, LL, "
                "RL, LR or XX, YY, XY, YX): `polarization='full'` reads correlation "
                "files; read it with `polarization='I'`."
            )
        basis = LINEAR if ("XX" in names or "YY" in names) else CIRCULAR

    n = raw.shape[0]
    vis_pol, sig_pol, ok_pol = [], [], []
    for h in hands:
        vis_h, sig_h, ok_h = _hand(raw, h)
        vis_pol.append(vis_h)
        sig_pol.append(sig_h)
        ok_pol.append(ok_h)
    if len(hands) == 2:
        both = ok_pol[0] & ok_pol[1]
        vis = np.where(
            both,
            0.5 * (vis_pol[0] + vis_pol[1]),
            np.where(ok_pol[0], vis_pol[0], vis_pol[1]),
        )
        sigma = np.where(
            both,
            0.5 * np.sqrt(sig_pol[0] ** 2 + sig_pol[1] ** 2),
            np.where(ok_pol[0], sig_pol[0], sig_pol[1]),
        )
        valid = ok_pol[0] | ok_pol[1]
    else:
        vis, sigma, valid = vis_pol[0], sig_pol[0], ok_pol[0]

    # -- random parameters -------------------------------------------------------
    groups = primary.data
    parnames = [p.strip().upper() for p in groups.parnames]

    def par(name_options):
        for name in name_options:
            idx = [i for i, p in enumerate(parnames) if p == name]
            if idx:
                return sum(np.asarray(groups.par(i), np.float64) for i in idx)
        raise UVFITSError(
            f"{path!r}: no {name_options[0]!r} random parameter (have {parnames})."
        )

    an_freq = _number(an_hdu.header, "FREQ")
    if an_freq is None or not np.isfinite(an_freq) or an_freq <= 0:
        an_freq = _number(header, f"CRVAL{ctypes['FREQ']}")
    freq = float(an_freq) if an_freq is not None else math.nan
    if not MIN_FREQ_HZ <= freq <= MAX_FREQ_HZ:
        raise UVFITSError(
            f"{path!r}: the reference frequency ({freq:g} Hz, the AIPS AN table's "
            "FREQ, else the FREQ axis' CRVAL) is not a radio frequency between "
            f"{MIN_FREQ_HZ:g} and {MAX_FREQ_HZ:g} Hz: the header is corrupt."
        )
    axis_freq = _number(header, f"CRVAL{ctypes['FREQ']}")
    if (
        check
        and axis_freq is not None
        and math.isfinite(axis_freq)
        and not abs(freq - axis_freq) <= FREQ_TOLERANCE * abs(axis_freq)
    ):
        raise UVFITSError(
            f"{path!r}: the AIPS AN table's FREQ ({freq:.15g} Hz) and the data's "
            f"frequency axis (CRVAL{ctypes['FREQ']} = {axis_freq:.15g} Hz) disagree: "
            "one of them is corrupt, and u, v in wavelengths would be scaled by "
            f"their ratio ({freq / axis_freq:.6g}); `check=False` loads it with the "
            "AN table's."
        )
    if "SOURCE" in parnames:
        ids = np.unique(par(["SOURCE"])[valid])
        if ids.size > 1:
            raise UVFITSError(
                f"{path!r} is a multi-source file: its rows belong to "
                f"{ids.size} sources (SOURCE ids {[int(i) for i in ids[:8]]}), "
                "which would be imaged as one. Split it into one file per source "
                "first (AIPS SPLIT, or CASA's `split`)."
            )
    u = par(["UU---SIN", "UU", "UU--", "UU---NCP"]) * freq
    v = par(["VV---SIN", "VV", "VV--", "VV---NCP"]) * freq
    jd = par(["DATE"])
    tint = par(["INTTIM"]) if "INTTIM" in parnames else np.zeros(n)
    # Rows of a subarray other than the first: a SUBARRAY parameter above 1, or
    # AIPS's fractional BASELINE (256 a1 + a2 + (subarray − 1)/100).
    other_subarray = np.zeros(n, bool)
    if "SUBARRAY" in parnames:
        sub_id, sub_ok = _as_index(par(["SUBARRAY"]))
        other_subarray |= sub_ok & (sub_id > 1)
    if "BASELINE" in parnames:
        raw_bl = par(["BASELINE"])
        bl, bl_ok = _as_index(raw_bl)
        other_subarray |= bl_ok & (np.abs(raw_bl - np.where(bl_ok, bl, 0)) > 1e-3)
    other_subarray &= valid
    if other_subarray.any():
        raise UVFITSError(
            f"{path!r}: {int(other_subarray.sum())} rows belong to a subarray other "
            "than the first, whose stations are in another AN table: split the file "
            "per subarray first."
        )
    if "ANTENNA1" in parnames and "ANTENNA2" in parnames:
        # Explicit antenna numbers (written beside BASELINE by some programs, e.g.
        # for more than 255 antennas) need no decoding.
        a1, ok1 = _as_index(par(["ANTENNA1"]))
        a2, ok2 = _as_index(par(["ANTENNA2"]))
        bl_ok = ok1 & ok2
    elif "BASELINE" in parnames:
        # AIPS: 256 a1 + a2; above 65535, 65536 + 2048 a1 + a2 (antenna numbers
        # beyond 255).
        big_bl = bl >= 65536
        a1 = np.where(big_bl, (bl - 65536) // 2048, bl // 256)
        a2 = np.where(big_bl, (bl - 65536) % 2048, bl % 256)
    else:
        raise UVFITSError(f"{path!r}: no BASELINE (or ANTENNA1/2) random parameter.")

    cross = a1 != a2
    # Finite, and within float32's range (VisData holds float32 without x64).
    big = float(np.finfo(np.float32).max)
    finite = (np.abs(u) <= big) & (np.abs(v) <= big) & (np.abs(jd) <= 1e37) & bl_ok
    finite &= (tint >= 0) & (tint <= big)
    good = valid & cross & finite
    # Every row not loaded is counted: no weight, a NaN/inf u, v, date, integration
    # time or baseline, or an autocorrelation (which a corrupt BASELINE can also
    # produce: one byte turns 2-3 = 515 into 2-2 = 514).
    n_flagged = int(np.sum(~good))
    if not np.any(good):
        raise UVFITSError(
            f"{path!r}: every row is flagged (weight <= 0, or a u, v, date, "
            "integration time or baseline that is not finite or beyond float32's "
            "range) or an autocorrelation: no Stokes I data left."
        )

    # -- stations -----------------------------------------------------------------
    st_names = tuple(str(s).strip() for s in an_hdu.data["ANNAME"])
    nosta, nosta_ok = _as_index(_real_column(an_hdu, "NOSTA", path))
    xyz = _real_column(an_hdu, "STABXYZ", path).reshape(-1, 3)
    if not (nosta_ok.all() and len(st_names) == len(nosta) == len(xyz)):
        raise UVFITSError(
            f"{path!r}: the AIPS AN table's ANNAME, NOSTA and STABXYZ columns do "
            "not give one name, number and position per station: the table is "
            "corrupt."
        )
    centre = np.array(
        [_number(an_hdu.header, k, 0.0) for k in ("ARRAYX", "ARRAYY", "ARRAYZ")]
    )
    xyz = xyz + centre
    far = ~(np.linalg.norm(xyz, axis=1) <= MAX_STATION_RADIUS_M)
    if check and far.any():
        i = int(np.flatnonzero(far)[0])
        raise UVFITSError(
            f"{path!r}: the AIPS AN table puts station {st_names[i]!r} at "
            f"{xyz[i].tolist()} m, more than {MAX_STATION_RADIUS_M:g} m from the "
            "Earth's centre: the table is corrupt; `check=False` loads it unchecked."
        )
    numbers, counts = np.unique(nosta, return_counts=True)
    if np.any(counts > 1):
        dup = [int(k) for k in numbers[counts > 1]]
        who = [st_names[i] for i in range(len(nosta)) if int(nosta[i]) in dup]
        raise UVFITSError(
            f"{path!r}: the AIPS AN table gives antenna number(s) {dup} to more "
            f"than one station ({who}): which station a row's BASELINE names is "
            "ambiguous, the table is corrupt."
        )
    lookup = {int(k): i for i, k in enumerate(nosta)}
    # Autocorrelations are dropped, but one naming an unknown antenna (a corrupt
    # BASELINE) must not vanish silently either.
    used = valid & finite
    missing = sorted(set(np.concatenate([a1[used], a2[used]]).tolist()) - set(lookup))
    if missing:
        raise UVFITSError(
            f"{path!r}: baselines refer to antenna number(s) {missing} that are not "
            "in the AIPS AN table."
        )
    ant1 = np.array([lookup[int(a)] for a in a1[good]], np.int64)
    ant2 = np.array([lookup[int(a)] for a in a2[good]], np.int64)

    # Degrees in [0, 360], as VisData takes them (a header may hold -10 for 350).
    ra = _header_angle(header, ctypes, "OBSRA", "RA") % 360.0
    dec = _header_angle(header, ctypes, "OBSDEC", "DEC")
    rows = np.arange(n)
    # Why each row not loaded was dropped, for the warning (rows the file itself
    # flags, with no weight > 0, are its choice and are only counted).
    dropped = [
        (
            "a u, v, date, integration time or baseline that is not finite",
            rows[valid & ~finite],
        ),
        ("an autocorrelation", rows[valid & finite & ~cross]),
    ]
    if check:
        bad = implausible_rows(
            u[good], v[good], vis[good], sigma[good], jd[good], xyz, ant1, ant2, freq
        )
        if bad.all():
            raise UVFITSError(
                f"{path!r}: every unflagged row fails the plausibility checks "
                "(|(u, v)| beyond its baseline's length, |V| > "
                f"{MAX_AMPLITUDE_JY:g} Jy, sigma far below the file's median, or a "
                f"date more than {MAX_DATE_SPREAD_DAYS:g} days from the median): the "
                "file is corrupt or its station table (AIPS AN) does not match; "
                "`check=False` loads it unchecked."
            )
        idx = np.flatnonzero(good)
        dropped.append(
            (
                f"implausible (|V| > {MAX_AMPLITUDE_JY:g} Jy, σ below "
                f"{MIN_SIGMA_FRACTION:g} of the median, a date more than "
                f"{MAX_DATE_SPREAD_DAYS:g} days from the median, or |(u, v)| "
                "beyond the baseline's length)",
                idx[bad],
            )
        )
        keep = ~bad
        if len(hands) == 2:
            differ = twin_hands_differ(raw, hands, ok_pol[0] & ok_pol[1])
            if differ is not None:
                twins = differ[idx] & keep
                dropped.append(
                    (
                        f"whose two hands ({names[hands[0]]}, {names[hands[1]]}) "
                        "differ, while every other row of this file holds the same "
                        "values in both (Stokes I stored twice)",
                        idx[twins],
                    )
                )
                keep &= ~twins
        # (A declination or right ascension no sky position has is VisData's
        # to refuse, below.)
        if "RDATE" in an_hdu.header and abs(dec) <= 90.0 and math.isfinite(ra):
            off = _geometry_check(
                path,
                u,
                v,
                jd,
                tint,
                freq,
                xyz,
                ant1,
                ant2,
                idx,
                keep,
                ra,
                dec,
                st_names,
            )
            dropped.append(
                (
                    "u, v disagree with the geometry the file states (AN "
                    "positions, source position, date)",
                    idx[off],
                )
            )
            keep &= ~off
        n_flagged += int((~keep).sum())
        good = np.zeros_like(good)
        good[idx[keep]] = True
        ant1, ant2 = ant1[keep], ant2[keep]
    lost = [(why, r) for why, r in dropped if r.size]
    if lost:
        total = sum(r.size for _, r in lost)
        parts = "; ".join(
            f"{r.size} {why} (rows {describe_rows(r)})" for why, r in lost
        )
        notes.append(
            f"{path!r}: {total} of {n} rows dropped (counted in n_flagged; rows "
            f"are the file's groups, from 0): {parts}."
        )
    if check:
        rows_kept = np.flatnonzero(good)
        pair = np.minimum(ant1, ant2) * 65536 + np.maximum(ant1, ant2)
        suspect = [
            (
                f"a σ more than {SIGMA_OUTLIER_FACTOR:g}× from the median σ of "
                "its baseline's neighbouring rows",
                sigma_outliers(sigma[good], tint[good], pair, jd[good]),
            ),
            (
                "an integration time (INTTIM) longer than 1.5 times the time to "
                "its baseline's next row",
                tint_outliers(tint[good], pair, jd[good]),
            ),
        ]
        found = [(why, rows_kept[m]) for why, m in suspect if m.any()]
        if found:
            parts = "; ".join(
                f"{r.size} with {why} (rows {describe_rows(r)})" for why, r in found
            )
            notes.append(
                ("Also " if notes else f"{path!r}: ")
                + "suspect rows, loaded as they are (corrupt bytes, or "
                f"an unusual observation; rows are the file's groups, from 0): "
                f"{parts}."
            )

    jd = jd[good]
    mjd = int(np.floor(np.min(jd) - 2400000.5))
    time = (jd - 2400000.5 - mjd) * 24.0

    # -- header metadata ----------------------------------------------------------
    source = str(header.get("OBJECT", "unknown")).strip() or "unknown"
    bandwidth = _bandwidth(hdul, path, header, ctypes, raw.shape[1], raw.shape[2])

    # By time, then baseline as VisData orients it (first station < second), so
    # that the order does not depend on which way the file stores a baseline.
    order = np.lexsort((np.maximum(ant1, ant2), np.minimum(ant1, ant2), time))
    extra = {}
    if full:
        n_good = int(good.sum())
        corr = np.full((n_good, 4), np.nan + 1j * np.nan)
        csig = np.full((n_good, 4), np.nan)
        for k, name in enumerate(basis):
            if name not in names:
                continue  # a correlation the file lacks: flagged on every row
            vis_k, sig_k, ok_k = _hand(raw, names.index(name))
            vis_k, sig_k, ok_k = vis_k[good], sig_k[good], ok_k[good]
            if check and k >= 2:
                ok_k &= ~(np.abs(vis_k) > MAX_AMPLITUDE_JY)
                ok_k &= ~(sig_k < MIN_SIGMA_FRACTION * np.median(sigma[good]))
            corr[ok_k, k] = vis_k[ok_k]
            csig[ok_k, k] = sig_k[ok_k]
        extra = dict(
            corr=corr[order],
            sigma=csig[order],
            feeds=_feeds(an_hdu, basis),
            mounts=_mounts(an_hdu, path),
        )
    return (
        dict(
            u=u[good][order],
            v=v[good][order],
            vis=vis[good][order],
            sigma=sigma[good][order],
            time=time[order],
            ant1=ant1[order],
            ant2=ant2[order],
            tint=tint[good][order],
            station_names=st_names,
            station_xyz=xyz,
            freq=freq,
            bandwidth=bandwidth,
            source=source,
            ra=ra,
            dec=dec,
            mjd=mjd,
            n_flagged=n_flagged,
        )
        | extra
    )


def _header_angle(header, ctypes, key, axis_name) -> float:
    """Header card `key` (degrees), else the CRVAL of axis `axis_name`, else 0."""
    val = _number(header, key)
    if val is None and axis_name in ctypes:
        val = _number(header, f"CRVAL{ctypes[axis_name]}")
    return float(val) if val is not None else 0.0


def _geometry_check(
    path, u, v, jd, tint, freq, xyz, ant1, ant2, idx, keep, ra, dec, st_names
) -> np.ndarray:
    """The rows (of `idx`, those still kept) whose u, v disagree with the file's
    geometry (`geometry_mismatch`), to be dropped; or a `UVFITSError` when the
    disagreement is the header's or a station's (most rows, or most of one
    station's rows, disagree): a corrupt source position, date, u, v scaling or
    station position, which no row can be trusted against."""
    known = np.any(xyz != 0, axis=1)
    judged = keep & known[ant1] & known[ant2]
    off = np.zeros(idx.size, bool)
    if not judged.any():
        return off
    j = np.flatnonzero(judged)
    rows = idx[j]
    pair = np.minimum(ant1[j], ant2[j]) * 65536 + np.maximum(ant1[j], ant2[j])
    # (The file's median: a row whose time is corrupt cannot widen its own.)
    slack = np.maximum(np.nan_to_num(tint[rows]), np.median(half_gaps(pair, jd[rows])))
    with np.errstate(all="ignore"):
        off[j] = geometry_mismatch(
            u[rows] / freq,
            v[rows] / freq,
            jd[rows],
            xyz[ant1[j]] - xyz[ant2[j]],
            ra,
            dec,
            slack,
        )
    n_off, n_judged = int(off.sum()), int(judged.sum())
    if n_off == 0:
        return off
    rel, abs_m = GEOMETRY_TOLERANCE
    how = (
        f"beyond {rel:g} of the baseline + {abs_m:g} m; `check=False` loads "
        "the file unchecked"
    )
    if 2 * n_off > n_judged:
        raise UVFITSError(
            f"{path!r}: the u, v of {n_off} of {n_judged} rows disagree with the "
            "geometry the file states (the AIPS AN table's station positions, the "
            "source position OBSRA/OBSDEC, the dates, and u, v in light-seconds "
            f"through their PSCALn; {how}): one of these is corrupt, or the file's "
            "u, v were not computed from them (a simulation with made-up "
            "coordinates)."
        )
    for s in range(len(st_names)):
        mine = judged & ((ant1 == s) | (ant2 == s))
        bad_s = int((off & mine).sum())
        if bad_s >= 3 and 2 * bad_s > int(mine.sum()):
            raise UVFITSError(
                f"{path!r}: the u, v of {bad_s} of {int(mine.sum())} rows of "
                f"station {st_names[s]!r} disagree with the geometry the file "
                f"states ({how}), while the other stations' agree: its "
                f"position in the AIPS AN table ({xyz[s].tolist()} m) or its "
                "antenna number (NOSTA) is corrupt."
            )
    return off


def _feeds(an_hdu, basis) -> list[str]:
    """Each station's feeds: linear where the AN table's `POLTYA` says X or Y,
    circular where it says R or L, else the basis of the data's STOKES axis."""
    default = "linear" if basis == LINEAR else "circular"
    if not _has_column(an_hdu, "POLTYA"):
        return [default] * len(an_hdu.data)
    out = []
    for p in an_hdu.data["POLTYA"]:
        p = (p.decode() if isinstance(p, bytes) else str(p)).strip().upper()
        out.append(
            "linear" if p in ("X", "Y") else "circular" if p in ("R", "L") else default
        )
    return out


def _mounts(an_hdu, path) -> list[str]:
    """Each station's mount from the AN table's `MNTSTA` (alt-az without it)."""
    if not _has_column(an_hdu, "MNTSTA"):
        return ["altaz"] * len(an_hdu.data)
    codes, ok = _as_index(_real_column(an_hdu, "MNTSTA", path))
    unknown = sorted(
        {int(c) for c, g in zip(codes, ok) if not g or c not in MOUNT_CODES}
    )
    if unknown:
        raise UVFITSError(
            f"{path!r}: the AIPS AN table's MNTSTA holds mount code(s) {unknown}; "
            f"known codes are {MOUNT_CODES}."
        )
    return [MOUNT_CODES[int(c)] for c in codes]


def _hand(raw, h):
    """One polarisation `h` of the data cube averaged over IFs and channels,
    inverse-variance weighted over the entries with finite values and weight > 0:
    `(vis, sigma, ok)` per row (`ok` False where no entry is left)."""
    re, im, w = raw[:, :, :, h, 0], raw[:, :, :, h, 1], raw[:, :, :, h, 2]
    good = np.isfinite(re) & np.isfinite(im) & np.isfinite(w) & (w > 0)
    wg = np.where(good, w, 0.0)
    wsum = wg.sum(axis=(1, 2))
    ok = wsum > 0
    safe = np.where(ok, wsum, 1.0)
    vr = np.where(good, re, 0.0)
    vi = np.where(good, im, 0.0)
    vis = ((wg * vr).sum(axis=(1, 2)) + 1j * (wg * vi).sum(axis=(1, 2))) / safe
    return vis, 1.0 / np.sqrt(safe), ok


#: Largest plausible |V| (Jy) in a loaded file; larger values are corrupt bytes.
MAX_AMPLITUDE_JY: float = 1e6
#: A row's sigma below this fraction of the file's median sigma is corrupt.
MIN_SIGMA_FRACTION: float = 1e-6
#: A row's date further than this from the file's median date is corrupt.
MAX_DATE_SPREAD_DAYS: float = 30.0
#: The reference frequencies (Hz) a file may give: radio, 1 MHz to 10 THz.
MIN_FREQ_HZ: float = 1e6
MAX_FREQ_HZ: float = 1e13
#: A station farther than this (m) from the Earth's centre is a corrupt AN table
#: (ground stations are at about 6.4e6 m; orbiting ones have position 0).
MAX_STATION_RADIUS_M: float = 1e8
#: Relative and absolute (m) tolerance of the check |(u, v)| λ <= |baseline|.
UV_TOLERANCE: tuple[float, float] = (1e-3, 10.0)
_C = 299792458.0


def implausible_rows(u, v, vis, sigma, jd, xyz, ant1, ant2, freq) -> np.ndarray:
    """The rows no real observation can produce (corrupt bytes): a projected
    baseline longer than the baseline itself (`|(u, v)| c / ν > |r1 − r2|`, up to
    `UV_TOLERANCE`; only where both stations' positions are known), `|V|` above
    `MAX_AMPLITUDE_JY`, `σ` below `MIN_SIGMA_FRACTION` of the median, or a date
    more than `MAX_DATE_SPREAD_DAYS` from the median date."""
    bad = np.abs(vis) > MAX_AMPLITUDE_JY
    bad |= sigma < MIN_SIGMA_FRACTION * np.median(sigma)
    bad |= np.abs(jd - np.median(jd)) > MAX_DATE_SPREAD_DAYS
    known = np.any(xyz != 0, axis=1)
    both = known[ant1] & known[ant2]
    length = np.linalg.norm(xyz[ant1] - xyz[ant2], axis=1)
    rel, abs_m = UV_TOLERANCE
    projected = np.hypot(u, v) * (_C / freq)
    bad |= both & (projected > length * (1.0 + rel) + abs_m)
    return bad


def _real_column(table, name, path) -> np.ndarray:
    """Column `name` of an AIPS table as float64, or a clear error when the table
    stores something else there (a corrupt `TFORMn`)."""
    col = np.asarray(table.data[name])
    if col.dtype.kind not in "iuf":
        raise UVFITSError(
            f"{path!r}: the AIPS AN table's {name!r} column holds {col.dtype} "
            "values, not numbers: the table is corrupt."
        )
    return np.asarray(col, np.float64)


def _as_index(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`x` (a float parameter) as int64, 0 where it is not a finite number below
    2³¹ in size (corrupt bytes), and the mask of the rows where it is."""
    ok = np.isfinite(x) & (np.abs(x) < 2.0**31)
    return np.where(ok, x, 0.0).astype(np.int64), ok


def _bandwidth(hdul, path, header, ctypes, n_if, n_chan) -> float:
    fq = _table(hdul, "AIPS FQ", path)
    if fq is not None:
        try:
            total = np.asarray(fq.data["TOTAL BANDWIDTH"])
        except KeyError:
            total = np.zeros(0)
        if total.dtype.kind not in "iuf":
            total = np.zeros(0)
        total = np.asarray(total, np.float64).reshape(-1)
        if total.size and np.all(np.isfinite(total)):
            return float(np.sum(total[:n_if]) if total.size >= n_if else total.sum())
    cdelt = _number(header, f"CDELT{ctypes['FREQ']}", 0.0)
    return float(abs(cdelt) * n_chan * n_if)
