"""`VisData`: one observation's calibrated Stokes I visibilities, as a PyTree."""

import datetime
import math
import numbers
from collections.abc import Sequence

import equinox as eqx
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int

from .._custom_types import RealScalar
from .._numerics import asarray
from .._validation import host_real, refuse_julian_date
from ._averaging import find_scans as find_scans, scan_average, time_average
from ._table import (
    AbstractVisTable,
    DEFAULT_SCAN_GAP_S as DEFAULT_SCAN_GAP_S,
    tables_key as tables_key,
)


def mjd_date(mjd: int) -> datetime.date:
    """The calendar date of the modified Julian day `mjd` (MJD 0 = 1858-11-17)."""
    return datetime.date(1858, 11, 17) + datetime.timedelta(days=int(mjd))


class VisData(AbstractVisTable):
    """Calibrated complex visibilities of one observation (or several bands / days
    concatenated), one row per baseline and timestamp.

    **Conventions.**

    - `u`, `v` in wavelengths; the row of baseline `(ant1, ant2)` holds
      `V = <E_ant1 E_ant2*>` and `(u, v)` is the projection of
      `(r_ant1 - r_ant2) / λ` (the uvfits / eht-imaging convention). Rows are
      oriented with `ant1 < ant2` (index order of `station_names`).
    - `vis` complex Jy (Stokes I), `sigma` the thermal noise of **each** of the real
      and imaginary parts (Jy).
    - `time` in hours UTC since 0 h of day `mjd`; `tint` integration time (s).
    - `ra`, `dec` in **degrees** (J2000, as in uvfits headers).
    - `band` is the per-row index into `band_freqs` (Hz): 0 for a single band;
      [`eqmodels.concatenate`][] of hi + lo bands gives two. Closures never mix
      bands. `freq` is the reference frequency (the mean of `band_freqs`).
    - `station_xyz` are ECEF positions in metres (zeros when unknown).
    - `n_flagged` counts the rows dropped at load time (weight ≤ 0, a non-finite
      u, v or date, an autocorrelation, or implausible values: see
      [`eqmodels.load_uvfits`][]).

    Array fields are leaves (a `VisData` can be passed through `jax.jit`);
    metadata are static. Build one with [`eqmodels.load_uvfits`][],
    [`eqmodels.observe`][], or directly from arrays.
    """

    u: Float[Array, " n"]
    v: Float[Array, " n"]
    vis: Complex[Array, " n"]
    sigma: Float[Array, " n"]
    time: Float[Array, " n"]
    tint: Float[Array, " n"]
    ant1: Int[Array, " n"]
    ant2: Int[Array, " n"]
    band: Int[Array, " n"]
    station_xyz: Float[Array, "n_st 3"]
    station_names: tuple[str, ...] = eqx.field(static=True)
    band_freqs: tuple[float, ...] = eqx.field(static=True)
    bandwidth: float = eqx.field(static=True)
    source: str = eqx.field(static=True)
    ra: float = eqx.field(static=True)
    dec: float = eqx.field(static=True)
    mjd: int = eqx.field(static=True)
    n_flagged: int = eqx.field(static=True)

    def __init__(
        self,
        u: ArrayLike,
        v: ArrayLike,
        vis: ArrayLike,
        sigma: ArrayLike,
        time: ArrayLike,
        ant1: ArrayLike,
        ant2: ArrayLike,
        *,
        station_names,
        freq: float | int | tuple | list | ArrayLike,
        station_xyz: ArrayLike | None = None,
        tint: ArrayLike | None = None,
        band: ArrayLike | None = None,
        bandwidth: float | int = 0.0,
        source: str = "unknown",
        ra: float | int | np.number = 0.0,
        dec: float | int | np.number = 0.0,
        mjd: int = 51544,
        n_flagged: int = 0,
    ):
        """Every per-row array is checked here (shape `(n,)`, finite, `sigma > 0`,
        station indices in range) with an error that names it.

        **Arguments:**

        - `u`, `v`: baseline coordinates in wavelengths, shape `(n,)`.
        - `vis`: complex visibilities (Jy).
        - `sigma`: thermal noise per real/imaginary part (Jy, > 0).
        - `time`: hours UTC since 0 h of `mjd`.
        - `ant1`, `ant2`: station indices into `station_names` (`ant1 != ant2`).
          Rows with `ant1 > ant2` are re-oriented (conjugated, `(u, v)` negated).
        - `station_names`: station codes, unique strings.
        - `freq`: observing frequency in Hz (a number or a 0-d array), or one
          frequency per band when `band` is given (several frequencies without
          `band` are refused: which rows belong to which band is unknown).
        - `station_xyz`: ECEF positions (m), shape `(n_stations, 3)`; zeros if
          omitted.
        - `tint`: integration time in seconds, one for every row or one per row
          (default 0).
        - `band`: band index per row (default all 0).
        - `bandwidth`: bandwidth in Hz (for the record).
        - `source`, `ra`, `dec`, `mjd`: source and date; `ra` in degrees in
          [0, 360] (not hours, eht-imaging's unit), `dec` in degrees in [-90, 90].
        - `n_flagged`: number of rows dropped before (for the record).
        """
        names = check_station_names(station_names)
        u, n = check_first_rows(u)
        v = _real("v", v)
        time = _real("time", time)
        sigma = _real("sigma", sigma)
        vis_arr = np.asarray(vis)
        if not np.issubdtype(vis_arr.dtype, np.number):
            raise TypeError(
                f"`vis` must be a numeric array, got dtype {vis_arr.dtype}."
            )
        vis_arr = vis_arr.astype(np.complex128)
        if not np.all(np.isfinite(vis_arr)):
            raise ValueError(
                f"`vis` has {int(np.sum(~np.isfinite(vis_arr)))} non-finite value(s): "
                "drop or flag those rows first."
            )
        tint = row_tint(tint, n)
        ant1 = _int("ant1", ant1)
        ant2 = _int("ant2", ant2)
        band_given = band is not None
        band = np.zeros(n, np.int64) if band is None else _int("band", band)
        check_row_shapes(
            n,
            (
                ("v", v, (n,)),
                ("vis", vis_arr, (n,)),
                ("sigma", sigma, (n,)),
                ("time", time, (n,)),
                ("tint", tint, (n,)),
                ("ant1", ant1, (n,)),
                ("ant2", ant2, (n,)),
                ("band", band, (n,)),
            ),
        )
        if np.any(sigma <= 0):
            raise ValueError(
                f"`sigma` has {int(np.sum(sigma <= 0))} zero or negative value(s), "
                f"first at row {int(np.argmax(sigma <= 0))}: sigmas must be > 0 "
                "(drop or flag those rows)."
            )
        meta = check_row_metadata(
            names,
            tint=tint,
            ant1=ant1,
            ant2=ant2,
            band=band,
            band_given=band_given,
            freq=freq,
            station_xyz=station_xyz,
            ra=ra,
            dec=dec,
            bandwidth=bandwidth,
            mjd=mjd,
            n_flagged=n_flagged,
            source=source,
            holder="VisData",
        )
        freqs, xyz, ra, dec = meta["freqs"], meta["xyz"], meta["ra"], meta["dec"]

        # Orient every row with ant1 < ant2.
        flip = ant1 > ant2
        if np.any(flip):
            ant1, ant2 = np.where(flip, ant2, ant1), np.where(flip, ant1, ant2)
            u = np.where(flip, -u, u)
            v = np.where(flip, -v, v)
            vis_arr = np.where(flip, np.conj(vis_arr), vis_arr)

        self.u = asarray(u)
        self.v = asarray(v)
        self.vis = asarray(vis_arr)
        self.sigma = asarray(sigma)
        self.time = asarray(time)
        self.tint = asarray(np.array(tint, np.float64))
        self.ant1 = asarray(ant1)
        self.ant2 = asarray(ant2)
        self.band = asarray(band)
        self.station_xyz = asarray(xyz)
        self.station_names = names
        self.band_freqs = freqs
        self.bandwidth = float(bandwidth)
        self.source = source
        self.ra = ra
        self.dec = dec
        self.mjd = int(mjd)
        self.n_flagged = int(n_flagged)

    @property
    def snr(self) -> np.ndarray:
        """`|V| / σ` per row, numpy."""
        return np.abs(np.asarray(self.vis)) / np.asarray(self.sigma)

    def _arrays(self) -> dict:
        return {
            "u": np.asarray(self.u),
            "v": np.asarray(self.v),
            "vis": np.asarray(self.vis),
            "sigma": np.asarray(self.sigma),
            "time": np.asarray(self.time),
            "tint": np.asarray(self.tint),
            "ant1": np.asarray(self.ant1),
            "ant2": np.asarray(self.ant2),
            "band": np.asarray(self.band),
        }

    def _meta(self) -> dict:
        return {
            "station_names": self.station_names,
            "station_xyz": np.asarray(self.station_xyz),
            "freq": self.band_freqs,
            "bandwidth": self.bandwidth,
            "source": self.source,
            "ra": self.ra,
            "dec": self.dec,
            "mjd": self.mjd,
            "n_flagged": self.n_flagged,
        }

    def replace(self, **changes) -> "VisData":
        """A copy with some per-row arrays or metadata replaced (validated again),
        e.g. `data.replace(sigma=new_sigma)`."""
        kw = {**self._arrays(), **self._meta()}
        unknown = set(changes) - set(kw)
        if unknown:
            raise TypeError(
                f"unknown VisData field(s) {sorted(unknown)}; choose from {sorted(kw)}."
            )
        kw.update(changes)
        pos = [kw.pop(k) for k in ("u", "v", "vis", "sigma", "time", "ant1", "ant2")]
        return VisData(*pos, **kw)

    def take(self, index: ArrayLike | Sequence[int] | Sequence[bool]) -> "VisData":
        """The rows `index` (an integer array or a boolean mask), as a new
        `VisData`. Raises if nothing is left."""
        index = np.asarray(index)
        if index.size == 0 and index.dtype != bool:
            index = index.astype(np.int64)  # `[]` is float64 to numpy
        if index.dtype == bool and index.shape != (self.n_rows,):
            raise ValueError(
                f"a boolean mask must have shape ({self.n_rows},), got {index.shape}."
            )
        if index.dtype != bool and not np.issubdtype(index.dtype, np.integer):
            raise TypeError(
                "`index` must be integer row indices or a boolean mask, got an array "
                f"of {index.dtype}: pass e.g. `np.flatnonzero(mask)` or the mask "
                "itself."
            )
        if index.ndim != 1:
            raise ValueError(
                f"`index` must be one-dimensional (row indices), got shape "
                f"{index.shape}."
            )
        if index.size and (index.min() < -self.n_rows or index.max() >= self.n_rows):
            raise IndexError(
                f"`index` runs from {int(index.min())} to {int(index.max())}, but the "
                f"data set has {self.n_rows} rows (valid: −{self.n_rows} to "
                f"{self.n_rows - 1})."
            )
        arrays = {k: a[index] for k, a in self._arrays().items()}
        if arrays["u"].size == 0:
            raise ValueError("the selection removed every row: nothing is left.")
        return self.replace(**arrays)

    # -------------------------------------------------------------- selection
    def select(
        self,
        *,
        stations: Sequence[str] | None = None,
        exclude_stations: Sequence[str] | None = None,
        time_range: tuple | None = None,
        uv_range: tuple | None = None,
        snr_min: RealScalar | None = None,
        bands: ArrayLike | Sequence[int] | None = None,
    ) -> "VisData":
        """Rows that pass every given criterion.

        **Arguments:**

        - `stations`: keep rows whose two stations are both in this list of names.
        - `exclude_stations`: drop rows touching any of these stations.
        - `time_range`: `(t_min, t_max)` in hours, inclusive.
        - `uv_range`: `(uv_min, uv_max)` in wavelengths, inclusive (`None` for an
          open end).
        - `snr_min`: keep rows with `|V|/σ >= snr_min` (eht-imaging's `flag_low_snr`
          keeps `>`: the two differ on rows exactly at the threshold).
        - `bands`: keep these band indices.

        **Returns:** a new `VisData` (the station table is unchanged). Raises
        `ValueError` if nothing is left.
        """
        keep = self._select_mask(
            stations=stations,
            exclude_stations=exclude_stations,
            time_range=time_range,
            uv_range=uv_range,
            snr_min=snr_min,
            bands=bands,
        )
        return self.take(keep)

    def _select_mask(
        self,
        *,
        stations=None,
        exclude_stations=None,
        time_range=None,
        uv_range=None,
        snr_min=None,
        bands=None,
    ) -> np.ndarray:
        """The mask of the rows `select` keeps (see there); raises if none."""
        a = self._arrays()
        keep = np.ones(self.n_rows, bool)
        if stations is not None:
            idx = self._station_indices("stations", stations)
            keep &= np.isin(a["ant1"], idx) & np.isin(a["ant2"], idx)
        if exclude_stations is not None:
            idx = self._station_indices("exclude_stations", exclude_stations)
            keep &= ~(np.isin(a["ant1"], idx) | np.isin(a["ant2"], idx))
        if time_range is not None:
            lo, hi = _range("time_range", time_range)
            t = a["time"].astype(np.float64)  # compare float32 times exactly
            _refuse_seconds("time_range", lo, hi, t)
            keep &= (t >= lo) & (t <= hi)
        if uv_range is not None:
            lo, hi = _range("uv_range", uv_range)
            lo = check_uv_limit("uv_range[0]", lo)
            hi = check_uv_limit("uv_range[1]", hi)
            uvd = self.uvdist
            keep &= (uvd >= lo) & (uvd <= hi)
        if snr_min is not None:
            value = host_real(snr_min)
            if value is None or not math.isfinite(value):
                raise ValueError(f"`snr_min` must be a finite number, got {snr_min!r}.")
            keep &= self.snr >= value
        if bands is not None:
            wanted = np.atleast_1d(np.asarray(bands))
            have = np.unique(a["band"])
            missing = wanted[~np.isin(wanted, have)]
            if missing.size:
                raise ValueError(
                    f"`bands`={np.asarray(bands).tolist()} names band(s) "
                    f"{missing.tolist()} that the data do not have: its bands are "
                    f"{have.tolist()} (indices into `band_freqs`)."
                )
            keep &= np.isin(a["band"], wanted)
        if not keep.any():
            given = [
                k
                for k, v in (
                    ("stations", stations),
                    ("exclude_stations", exclude_stations),
                    ("time_range", time_range),
                    ("uv_range", uv_range),
                    ("snr_min", snr_min),
                    ("bands", bands),
                )
                if v is not None
            ]
            raise ValueError(
                f"the selection ({', '.join(given)}) removed every row: nothing is "
                "left; loosen it."
            )
        return keep

    def select_uvdist(
        self, uv_min: float | int | None = None, uv_max: float | int | None = None
    ) -> "VisData":
        """Keep rows with `uv_min <= |uv| <= uv_max` (wavelengths)."""
        if uv_min is not None and uv_max is not None and uv_min > uv_max:
            raise ValueError(
                f"`uv_min`={uv_min!r} is above `uv_max`={uv_max!r}: no row can pass."
            )
        lo, hi = _range("(uv_min, uv_max)", (uv_min, uv_max))
        check_uv_limit("uv_min", lo)
        check_uv_limit("uv_max", hi)
        return self.select(uv_range=(uv_min, uv_max))

    def select_snr(self, snr_min: RealScalar) -> "VisData":
        """Keep rows with `|V|/σ >= snr_min`."""
        return self.select(snr_min=snr_min)

    def _station_indices(self, arg, names) -> np.ndarray:
        if isinstance(names, str):
            names = [names]
        names = list(names)
        unknown = [s for s in names if s not in self.station_names]
        if unknown:
            raise ValueError(
                f"`{arg}`: unknown station(s) {unknown}; this data has "
                f"{list(self.station_names)}."
            )
        return np.array([self.station_names.index(s) for s in names], np.int64)

    # ---------------------------------------------------------------- averaging
    def scan_average(self, gap: RealScalar = DEFAULT_SCAN_GAP_S) -> "VisData":
        """Coherent average of each baseline over each scan (eht-imaging's
        `avg_coherent(0, scan_avg=True)`): `V = mean(V_k)`, `σ = sqrt(Σ σ_k²) / N`,
        `(u, v)` the mean, `time` the first timestamp of that baseline in the scan,
        `tint` the summed integration time. Duplicated rows (see
        [`eqmodels.VisData.duplicate_rows`][]) are refused with a `ValueError`."""
        return scan_average(self, gap)

    def time_average(self, seconds: RealScalar) -> "VisData":
        """Coherent average of each baseline over fixed bins of `seconds` (bins
        aligned on 1960-01-01 0h UTC, as eht-imaging's `avg_coherent(dt)`); the
        averaged row's `time` is the bin centre. A record is placed by its time
        rounded to 0.1 s, as eht-imaging does (uvfits times are stored to ~5 ms,
        so a record stamped on a bin edge may be read just below it); intervals
        under 0.2 s use the stored times. Same estimators as
        [`eqmodels.VisData.scan_average`][]."""
        return time_average(self, seconds)

    # ------------------------------------------------------------ description
    def summary(self) -> str:
        """A multi-line human-readable description."""
        a = self._arrays()
        uvd = self.uvdist
        date = mjd_date(self.mjd)
        rows_per = np.bincount(
            np.concatenate([a["ant1"], a["ant2"]]), minlength=self.n_stations
        )
        st = ", ".join(
            f"{s} ({int(c)})" for s, c in zip(self.station_names, rows_per) if c > 0
        )
        unused = [s for s, c in zip(self.station_names, rows_per) if c == 0]
        freqs = ", ".join(f"{f / 1e9:.4f}" for f in self.band_freqs)
        lines = [
            f"VisData: {self.source} on {date.isoformat()} (MJD {self.mjd})",
            f"  RA {self.ra:.6f}°, Dec {self.dec:.6f}°; frequency {freqs} GHz, "
            f"bandwidth {self.bandwidth / 1e9:.4g} GHz",
            f"  {self.n_rows} rows, {len(self.timestamps())} timestamps, "
            f"{len(self.scans())} scans, {len(self.baselines())} baselines"
            + (f", {self.n_flagged} flagged rows dropped" if self.n_flagged else ""),
            f"  stations (rows): {st}" + (f"; no rows: {unused}" if unused else ""),
            f"  time {a['time'].min():.4f} – {a['time'].max():.4f} h UTC; "
            f"|uv| {uvd.min() / 1e9:.4g} – {uvd.max() / 1e9:.4g} Gλ",
            f"  |V| {np.abs(a['vis']).min():.4g} – {np.abs(a['vis']).max():.4g} Jy, "
            f"median SNR {np.median(self.snr):.4g}",
        ]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"VisData({self.source!r}, mjd={self.mjd}, n_rows={self.n_rows}, "
            f"stations={list(self.stations_present())}, "
            f"freq={self.freq / 1e9:.4f} GHz)"
        )


def check_station_names(station_names) -> tuple[str, ...]:
    """`station_names` as a tuple of unique strings, or a clear error."""
    try:
        names = None if isinstance(station_names, str) else tuple(station_names)
    except TypeError:
        names = None
    if names is None or not names or not all(isinstance(s, str) for s in names):
        raise TypeError(
            "`station_names` must be a non-empty sequence of strings, got "
            f"{station_names!r}."
        )
    if len(set(names)) != len(names):
        raise ValueError(f"`station_names` has repeated names: {list(names)}.")
    return names


def check_first_rows(u) -> tuple[np.ndarray, int]:
    """`u` (the first per-row array) as float64 and the number of rows."""
    u = _real("u", u)
    n = u.shape[0] if u.ndim == 1 else -1
    if u.ndim != 1 or n == 0:
        raise ValueError(
            f"`u` must be a non-empty 1-d array (one value per row), got shape "
            f"{u.shape}: a data set needs at least one row."
        )
    return u, n


def row_tint(tint, n: int) -> np.ndarray:
    """Integration times: 0 when `None`, one for every row, or one per row."""
    if tint is None:
        return np.zeros(n)
    tint = _real("tint", tint)
    if tint.ndim == 0:  # one integration time for every row
        tint = np.full(n, float(tint))
    return tint


def check_row_shapes(n: int, arrays) -> None:
    """Each `(name, array, shape)` has `shape`, or a shape-mismatch error."""
    for name, arr, shape in arrays:
        if arr.shape != shape:
            per = "" if len(shape) == 1 else f" (shape {shape})"
            raise ValueError(
                f"shape mismatch: `u` has shape ({n},) but `{name}` has shape "
                f"{arr.shape}; every per-row array must have one value per row"
                f"{per}."
            )


def check_row_metadata(
    names,
    *,
    tint,
    ant1,
    ant2,
    band,
    band_given,
    freq,
    station_xyz,
    ra,
    dec,
    bandwidth,
    mjd,
    n_flagged,
    source,
    holder: str,
) -> dict:
    """The checks a data set's rows and metadata share (`VisData`, `PolVisData`):
    integration times, station indices, bands and frequencies, station positions,
    source position, bandwidth, date and counts. Returns the normalised `freqs`,
    `xyz`, `ra` and `dec`."""
    n_st = len(names)
    if np.any(tint < 0):
        raise ValueError("`tint` (integration time, s) must be >= 0.")
    for name, arr in (("ant1", ant1), ("ant2", ant2)):
        if np.any((arr < 0) | (arr >= n_st)):
            raise ValueError(
                f"`{name}` has station indices outside [0, {n_st}) "
                f"(there are {n_st} station names)."
            )
    if np.any(ant1 == ant2):
        raise ValueError(
            f"{int(np.sum(ant1 == ant2))} row(s) have `ant1 == ant2` "
            f"(autocorrelations): drop them, {holder} holds cross-correlations."
        )

    freqs = _freqs(freq)
    if len(freqs) > 1 and not band_given:
        raise ValueError(
            f"`freq` gives {len(freqs)} frequencies but `band` is not given: "
            "pass `band` (each row's index into `freq`), or one frequency; "
            "`eqmodels.concatenate` combines single-band data sets into bands."
        )
    if np.any((band < 0) | (band >= len(freqs))):
        raise ValueError(
            f"`band` indices must lie in [0, {len(freqs)}): give one `freq` per band."
        )

    if station_xyz is None:
        xyz = np.zeros((n_st, 3))
    else:
        xyz = np.asarray(station_xyz)
        if np.iscomplexobj(xyz) or not np.issubdtype(xyz.dtype, np.number):
            raise TypeError(
                f"`station_xyz` must be real ECEF positions (m), got dtype {xyz.dtype}."
            )
        xyz = xyz.astype(np.float64)
        if xyz.shape != (n_st, 3):
            raise ValueError(
                f"`station_xyz` must have shape (n_stations, 3) = ({n_st}, 3), got "
                f"{xyz.shape}."
            )
        if not np.all(np.isfinite(xyz)):
            raise ValueError("`station_xyz` has non-finite values.")

    ra, dec = check_ra_dec(ra, dec)
    if (
        isinstance(bandwidth, bool)
        or not isinstance(bandwidth, int | float | np.number)
        or not math.isfinite(bandwidth)
    ):
        raise ValueError(f"`bandwidth` must be a finite number, got {bandwidth!r}.")
    if bandwidth < 0:
        raise ValueError(
            f"`bandwidth` must be >= 0 Hz (0 when unknown), got {bandwidth!r}."
        )
    if not isinstance(mjd, int | np.integer):
        raise TypeError(f"`mjd` must be an integer day, got {mjd!r}.")
    refuse_julian_date("mjd", mjd)
    if mjd < 0:
        raise ValueError(
            f"`mjd` must be a modified Julian day >= 0 (1858-11-17 or later), got "
            f"{mjd!r}."
        )
    if not isinstance(n_flagged, int | np.integer) or n_flagged < 0:
        raise ValueError(f"`n_flagged` must be an integer >= 0, got {n_flagged!r}.")
    if not isinstance(source, str):
        raise TypeError(f"`source` must be a string, got {source!r}.")
    return {"freqs": freqs, "xyz": xyz, "ra": ra, "dec": dec}


def _refuse_seconds(name: str, lo: float, hi: float, t: np.ndarray) -> None:
    """Refuse a range of hours `(lo, hi)` that reaches far beyond the data's times
    `t` (hours) when, read as seconds, it falls among them: a range in seconds."""
    if t.size == 0 or not math.isfinite(hi):
        return
    t_min, t_max = float(t.min()), float(t.max())
    far = hi > 2 * max(abs(t_max), abs(t_min)) + 24.0
    if far and lo / 3600.0 <= t_max and hi / 3600.0 >= t_min:
        raise ValueError(
            f"`{name}`=({lo:g}, {hi:g}) reaches far beyond the data's times "
            f"({t_min:.4g} to {t_max:.4g} h) and looks like seconds: times are "
            f"hours, ({lo / 3600:.6g}, {hi / 3600:.6g}) h."
        )


def check_visdata(data, name: str = "data") -> None:
    """Refuse what is not a `VisData`, naming eht-imaging's `Obsdata` route."""
    if isinstance(data, VisData):
        return
    hint = (
        ": save it with `obs.save_uvfits(path)` and read that with "
        "`em.load_uvfits(path)`"
        if callable(getattr(data, "save_uvfits", None))  # an eht-imaging Obsdata
        else ""
    )
    raise TypeError(f"`{name}` must be a VisData, got {type(data).__name__}{hint}.")


def check_freq(freq) -> float:
    """One observing frequency in Hz (a number or a 0-d array), in the range
    `load_uvfits` accepts (1e6–1e13 Hz: a frequency in GHz is refused)."""
    freqs = _freqs(freq)
    if len(freqs) != 1:
        raise ValueError(f"`freq` must be one frequency in Hz, got {freq!r}.")
    return freqs[0]


def _freqs(freq) -> tuple[float, ...]:
    """`freq` (a number, a 0-d array or a sequence) as a tuple of Hz."""
    arr = np.asarray(freq) if not isinstance(freq, str) else None
    if (
        arr is None
        or arr.ndim > 1
        or arr.dtype == bool
        or not np.issubdtype(arr.dtype, np.number)
        or np.iscomplexobj(arr)
    ):
        raise TypeError(
            "`freq` must be a frequency in Hz, or a list of one per band, got "
            f"{freq!r}."
        )
    freqs = tuple(float(f) for f in arr.reshape(-1))
    if not freqs or not all(math.isfinite(f) and f > 0 for f in freqs):
        raise ValueError(f"`freq` must be finite and > 0 (Hz), got {freq!r}.")
    # The range `load_uvfits` accepts (radio, 1 MHz to 10 THz): a frequency in GHz
    # (`230.0`) would otherwise be 230 Hz, and every wavelength-based quantity
    # (thermal noise, `observe`'s baselines) off by 1e9.
    out = [f for f in freqs if not 1e6 <= f <= 1e13]
    if out:
        raise ValueError(
            f"`freq` {out[0]:g} is outside 1e6–1e13 Hz: frequencies are in Hz "
            "(230 GHz is `230e9`)."
        )
    return freqs


def check_ra_dec(ra, dec) -> tuple[float, float]:
    """`(ra, dec)` as floats, checked: finite numbers of degrees, `ra` in [0, 360]
    and `dec` in [-90, 90]."""
    for name, val in (("ra", ra), ("dec", dec)):
        if isinstance(val, bool) or not isinstance(val, numbers.Real):
            raise TypeError(f"`{name}` must be a number of degrees, got {val!r}.")
        if not math.isfinite(val):
            raise ValueError(f"`{name}` must be a finite number, got {val!r}.")
    if not 0.0 <= ra <= 360.0:
        raise ValueError(
            f"`ra` must be a right ascension in degrees, in [0, 360], got {ra!r}: "
            "wrap it with `ra % 360` (eqmodels takes degrees, not eht-imaging's "
            "hours)."
        )
    if not -90.0 <= dec <= 90.0:
        raise ValueError(f"`dec` must be in degrees, in [-90, 90], got {dec!r}.")
    return float(ra), float(dec)


def _real(name, x) -> np.ndarray:
    arr = np.asarray(x)
    if np.iscomplexobj(arr):
        raise TypeError(f"`{name}` must be real, got a complex array.")
    if not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"`{name}` must be a numeric array, got dtype {arr.dtype}.")
    arr = arr.astype(np.float64)
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(
            f"`{name}` has {int(bad.sum())} non-finite value(s) (NaN or inf), first at "
            f"row {int(np.argmax(bad.reshape(-1)))}: drop or flag those rows first."
        )
    return arr


def _int(name, x) -> np.ndarray:
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr)):
            return arr.astype(np.int64)
        raise TypeError(
            f"`{name}` must hold integers (station indices), got {arr.dtype}."
        )
    return arr.astype(np.int64)


def check_uv_limit(name: str, x: float) -> float:
    """A uv-distance limit (wavelengths): one in (0, 1) is refused, as no baseline
    is shorter than a wavelength (a dish is many wavelengths across); it is a limit
    in Gλ (or Mλ), which would quietly cut nothing or everything."""
    if 0 < x < 1:
        raise ValueError(
            f"`{name}` {x:g} is below one wavelength, shorter than any baseline: uv "
            "distances are in wavelengths (0.1 Gλ is `1e8`)."
        )
    return x


def _range(name, rng) -> tuple[float, float]:
    try:
        lo, hi = rng
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be a pair (low, high), got {rng!r}.")
    lo = -np.inf if lo is None else float(lo)
    hi = np.inf if hi is None else float(hi)
    if lo > hi:
        raise ValueError(f"`{name}` = {rng!r} is empty (low > high).")
    return lo, hi


def merge_tables(datasets) -> tuple[list[str], list[np.ndarray], list[float], int]:
    """What concatenating `datasets` (VisData or PolVisData) shares: one source
    and position (checked), the station tables merged by name (positions within
    1 m), the distinct frequencies, and the earliest day.

    **Returns:** `(names, xyz, freqs, mjd0)`.
    """
    first = datasets[0]
    for d in datasets[1:]:
        if d.source != first.source or not (
            math.isclose(d.ra, first.ra, abs_tol=1e-6)
            and math.isclose(d.dec, first.dec, abs_tol=1e-6)
        ):
            raise ValueError(
                f"cannot concatenate different sources/positions: {first.source!r} "
                f"({first.ra}, {first.dec}) and {d.source!r} ({d.ra}, {d.dec})."
            )
    names: list[str] = []
    xyz: list[np.ndarray] = []
    for d in datasets:
        for s, p in zip(d.station_names, np.asarray(d.station_xyz)):
            if s in names:
                q = xyz[names.index(s)]
                if np.any(p != 0) and np.any(q != 0) and np.linalg.norm(p - q) > 1.0:
                    raise ValueError(
                        f"station {s!r} has different positions in the data sets "
                        f"({q} vs {p}); rename one of them."
                    )
                if not np.any(q != 0):
                    xyz[names.index(s)] = p
            else:
                names.append(s)
                xyz.append(p)
    freqs: list[float] = []
    for d in datasets:
        for f in d.band_freqs:
            if not any(math.isclose(f, g, rel_tol=1e-12) for g in freqs):
                freqs.append(f)
    mjd0 = min(d.mjd for d in datasets)
    return names, xyz, freqs, mjd0


def band_map(d, freqs) -> np.ndarray:
    """Each of `d`'s bands as an index into the merged `freqs`."""
    return np.array(
        [
            next(i for i, g in enumerate(freqs) if math.isclose(f, g, rel_tol=1e-12))
            for f in d.band_freqs
        ]
    )


def concatenate(datasets) -> VisData:
    """Concatenate observations: bands of one day, or several days.

    Station tables are merged by name (a station must have the same position,
    within 1 m, in every data set). Each distinct frequency becomes a band (rows
    keep their band, so closures never mix bands). Times are shifted to hours since
    0 h of the earliest `mjd`. Source and position must agree.

    **Arguments:**

    - `datasets`: a sequence of [`eqmodels.VisData`][].

    **Returns:** one `VisData`; `n_flagged` is the sum.

    **Raises:** `ValueError` when two rows share time, band and baseline (e.g. a
    data set concatenated with itself): see [`eqmodels.VisData.duplicate_rows`][].
    """
    datasets = list(datasets)
    if not datasets:
        raise ValueError("`datasets` is empty: give at least one VisData.")
    for d in datasets:
        if not isinstance(d, VisData):
            raise TypeError(f"`datasets` must hold VisData, got {type(d).__name__}.")
    first = datasets[0]
    names, xyz, freqs, mjd0 = merge_tables(datasets)
    parts = {k: [] for k in ("u", "v", "vis", "sigma", "time", "tint", "ant1", "ant2")}
    band = []
    for d in datasets:
        a = d._arrays()
        remap = np.array([names.index(s) for s in d.station_names])
        bmap = band_map(d, freqs)
        for k in ("u", "v", "vis", "sigma", "tint"):
            parts[k].append(a[k])
        parts["time"].append(a["time"] + 24.0 * (d.mjd - mjd0))
        parts["ant1"].append(remap[a["ant1"]])
        parts["ant2"].append(remap[a["ant2"]])
        band.append(bmap[a["band"]])
    cat = {k: np.concatenate(p) for k, p in parts.items()}
    order = np.lexsort((cat["ant2"], cat["ant1"], np.concatenate(band), cat["time"]))
    cat = {k: a[order] for k, a in cat.items()}
    out = VisData(
        cat.pop("u"),
        cat.pop("v"),
        cat.pop("vis"),
        cat.pop("sigma"),
        cat.pop("time"),
        cat.pop("ant1"),
        cat.pop("ant2"),
        tint=cat.pop("tint"),
        band=np.concatenate(band)[order],
        station_names=tuple(names),
        station_xyz=np.array(xyz),
        freq=tuple(freqs),
        bandwidth=first.bandwidth,
        source=first.source,
        ra=first.ra,
        dec=first.dec,
        mjd=mjd0,
        n_flagged=sum(d.n_flagged for d in datasets),
    )
    out._check_no_duplicates(
        "concatenating (the same data twice, or overlapping data sets)", "datasets"
    )
    return out
