"""`PolVisData`: one observation's four correlations per row, as a PyTree."""

from collections.abc import Sequence

import equinox as eqx
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Complex, Float, Int

from .._custom_types import RealScalar
from .._numerics import asarray
from ._averaging import scan_average, time_average
from ._field_rotation import (
    field_rotation_coefficients,
    MOUNT_COEFFICIENTS,
    MOUNTS,
    row_angles,
)
from ._table import AbstractVisTable
from ._visdata import (
    _int,
    _real,
    band_map,
    check_first_rows,
    check_row_metadata,
    check_row_shapes,
    check_station_names,
    concatenate as concatenate_vis,
    DEFAULT_SCAN_GAP_S,
    merge_tables,
    row_tint,
    VisData,
)


#: The correlations of circular and of linear feeds, in the file's order.
CIRCULAR: tuple[str, ...] = ("RR", "LL", "RL", "LR")
LINEAR: tuple[str, ...] = ("XX", "YY", "XY", "YX")
FEEDS: tuple[str, ...] = ("circular", "linear")
STOKES: tuple[str, ...] = ("I", "Q", "U", "V")


class PolVisData(AbstractVisTable):
    """Calibrated visibilities of one observation with all four correlations per
    row (polarimetric data), one row per baseline and timestamp.

    **Conventions** (as [`eqmodels.VisData`][] for everything but the
    visibilities, and eht-imaging's for polarimetry):

    - `corr` `(n, 4)` complex Jy: the products of the two stations' feeds in the
      order of `basis`, `("RR", "LL", "RL", "LR")` for circular feeds
      (`("XX", "YY", "XY", "YX")` when every station has linear feeds); with
      mixed feeds each column pairs each station's own first (R or X) and second
      (L or Y) feed. In Stokes terms (circular) `RR = I + V`, `LL = I − V`,
      `RL = Q + iU`, `LR = Q − iU`; (linear) `XX = I + Q`, `YY = I − Q`,
      `XY = U + iV`, `YX = U − iV`.
    - `sigma` `(n, 4)`: the thermal noise of each real and imaginary part.
    - `flag` `(n, 4)`: True where a correlation is missing; its `corr` and
      `sigma` are then NaN (as eht-imaging keeps them). Every row has at least
      one correlation.
    - `feeds` per station: `"circular"` or `"linear"`; `mounts` per station:
      `"altaz"`, `"equatorial"`, `"nasmyth_r"`, `"nasmyth_l"` (or `"orbiting"`,
      `"xy"`, which have no field-rotation coefficients); `fr_offset` per station
      the field-rotation offset in degrees.
    - Rows are oriented with `ant1 < ant2`: a row given the other way round is
      conjugated with its cross-hands swapped (`RL ↔ conj(LR)`).
    """

    u: Float[Array, " n"]
    v: Float[Array, " n"]
    corr: Complex[Array, "n 4"]
    sigma: Float[Array, "n 4"]
    flag: Bool[Array, "n 4"]
    time: Float[Array, " n"]
    tint: Float[Array, " n"]
    ant1: Int[Array, " n"]
    ant2: Int[Array, " n"]
    band: Int[Array, " n"]
    station_xyz: Float[Array, "n_st 3"]
    station_names: tuple[str, ...] = eqx.field(static=True)
    feeds: tuple[str, ...] = eqx.field(static=True)
    mounts: tuple[str, ...] = eqx.field(static=True)
    fr_offset: tuple[float, ...] = eqx.field(static=True)
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
        corr: ArrayLike,
        sigma: ArrayLike,
        time: ArrayLike,
        ant1: ArrayLike,
        ant2: ArrayLike,
        *,
        flag: ArrayLike | None = None,
        station_names,
        freq: float | int | tuple | list | ArrayLike,
        station_xyz: ArrayLike | None = None,
        feeds: Sequence[str] | None = None,
        mounts: Sequence[str] | None = None,
        fr_offset: Sequence[float] | ArrayLike | None = None,
        tint: ArrayLike | None = None,
        band: ArrayLike | None = None,
        bandwidth: float | int = 0.0,
        source: str = "unknown",
        ra: float | int | np.number = 0.0,
        dec: float | int | np.number = 0.0,
        mjd: int = 51544,
        n_flagged: int = 0,
    ):
        """Every array is checked here, with an error that names it.

        **Arguments:**

        - `u`, `v`, `time`, `ant1`, `ant2`, `station_names`, `freq`,
          `station_xyz`, `tint`, `band`, `bandwidth`, `source`, `ra`, `dec`,
          `mjd`, `n_flagged`: as [`eqmodels.VisData`][].
        - `corr`: complex `(n, 4)`, the four correlations (see the class).
        - `sigma`: `(n, 4)`, noise per real/imaginary part (> 0 where present).
        - `flag`: bool `(n, 4)`, True where a correlation is missing; by default
          the entries whose `corr` or `sigma` is not finite.
        - `feeds`: per station `"circular"` (default) or `"linear"`.
        - `mounts`: per station, see the class (default all `"altaz"`).
        - `fr_offset`: per station, field-rotation offset in degrees (default 0).
        """
        names = check_station_names(station_names)
        n_st = len(names)
        u, n = check_first_rows(u)
        v = _real("v", v)
        time = _real("time", time)
        corr = np.asarray(corr)
        if not np.issubdtype(corr.dtype, np.number):
            raise TypeError(f"`corr` must be a numeric array, got dtype {corr.dtype}.")
        corr = corr.astype(np.complex128)
        sig = np.asarray(sigma)
        if np.iscomplexobj(sig) or not np.issubdtype(sig.dtype, np.number):
            raise TypeError(f"`sigma` must be a real array, got dtype {sig.dtype}.")
        sig = sig.astype(np.float64)
        if flag is None:
            if corr.shape == sig.shape:
                flag_arr = ~(np.isfinite(corr) & np.isfinite(sig))
            else:
                flag_arr = np.zeros(corr.shape, bool)
        else:
            flag_arr = np.asarray(flag)
            if flag_arr.dtype != bool:
                raise TypeError(
                    f"`flag` must be a boolean array (True where a correlation is "
                    f"missing), got dtype {flag_arr.dtype}."
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
                ("corr", corr, (n, 4)),
                ("sigma", sig, (n, 4)),
                ("flag", flag_arr, (n, 4)),
                ("time", time, (n,)),
                ("tint", tint, (n,)),
                ("ant1", ant1, (n,)),
                ("ant2", ant2, (n,)),
                ("band", band, (n,)),
            ),
        )
        present = ~flag_arr
        bad = present & ~(np.isfinite(corr) & np.isfinite(sig))
        if bad.any():
            r, k = np.argwhere(bad)[0]
            raise ValueError(
                f"`corr` or `sigma` has {int(bad.sum())} non-finite value(s) that "
                f"`flag` does not mark, first at row {r}, correlation {k}: set "
                "`flag` True there (or leave `flag` out to flag them)."
            )
        low = present & ~(sig > 0)
        if low.any():
            r, k = np.argwhere(low)[0]
            raise ValueError(
                f"`sigma` has {int(low.sum())} zero or negative value(s) where "
                f"`flag` is False, first at row {r}, correlation {k}: sigmas must "
                "be > 0 (flag those correlations)."
            )
        empty = ~present.any(axis=1)
        if empty.any():
            raise ValueError(
                f"{int(empty.sum())} row(s) have every correlation flagged, first "
                f"row {int(np.argmax(empty))}: drop those rows (a row needs at "
                "least one correlation)."
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
            holder="PolVisData",
        )
        feeds = _per_station("feeds", feeds, n_st, "circular", FEEDS)
        mounts = _per_station("mounts", mounts, n_st, "altaz", MOUNTS)
        if fr_offset is None:
            offsets = (0.0,) * n_st
        else:
            off = _real("fr_offset", fr_offset)
            if off.shape != (n_st,):
                raise ValueError(
                    f"`fr_offset` must give one offset (degrees) per station, shape "
                    f"({n_st},), got {off.shape}."
                )
            offsets = tuple(float(x) for x in off)

        corr = np.where(present, corr, np.nan + 1j * np.nan)
        sig = np.where(present, sig, np.nan)
        # Orient every row with ant1 < ant2: conjugate, and swap the cross-hands
        # (the baseline b-a holds RL_ab = conj(LR_ba)).
        flip = ant1 > ant2
        if np.any(flip):
            swap = [0, 1, 3, 2]
            f2 = flip[:, None]
            ant1, ant2 = np.where(flip, ant2, ant1), np.where(flip, ant1, ant2)
            u = np.where(flip, -u, u)
            v = np.where(flip, -v, v)
            corr = np.where(f2, np.conj(corr[:, swap]), corr)
            sig = np.where(f2, sig[:, swap], sig)
            flag_arr = np.where(f2, flag_arr[:, swap], flag_arr)
        else:
            flag_arr = ~present

        self.u = asarray(u)
        self.v = asarray(v)
        self.corr = asarray(corr)
        self.sigma = asarray(sig)
        self.flag = asarray(np.asarray(flag_arr, bool))
        self.time = asarray(time)
        self.tint = asarray(np.array(tint, np.float64))
        self.ant1 = asarray(ant1)
        self.ant2 = asarray(ant2)
        self.band = asarray(band)
        self.station_xyz = asarray(meta["xyz"])
        self.station_names = names
        self.feeds = feeds
        self.mounts = mounts
        self.fr_offset = offsets
        self.band_freqs = meta["freqs"]
        self.bandwidth = float(bandwidth)
        self.source = source
        self.ra = meta["ra"]
        self.dec = meta["dec"]
        self.mjd = int(mjd)
        self.n_flagged = int(n_flagged)

    # ------------------------------------------------------------------ basics
    @property
    def basis(self) -> tuple[str, ...]:
        """The correlations' names, in the order of `corr`'s columns:
        `("XX", "YY", "XY", "YX")` when every station has linear feeds, else
        `("RR", "LL", "RL", "LR")`."""
        return LINEAR if all(f == "linear" for f in self.feeds) else CIRCULAR

    def _rows(self) -> VisData:
        """A `VisData` with the same rows, holding Stokes I where it is known
        (0 with σ 1 elsewhere): what row bookkeeping (baselines, duplicates,
        scans, selections) reads."""
        vis, sig = self.stokes()
        ok = np.isfinite(vis[:, 0]) & np.isfinite(sig[:, 0])
        a = self._arrays()
        return VisData(
            a["u"],
            a["v"],
            np.where(ok, vis[:, 0], 0.0),
            np.where(ok, sig[:, 0], 1.0),
            a["time"],
            a["ant1"],
            a["ant2"],
            tint=a["tint"],
            band=a["band"],
            **self._visdata_meta(),
        )

    def _visdata_meta(self) -> dict:
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

    def _arrays(self) -> dict:
        return {
            "u": np.asarray(self.u),
            "v": np.asarray(self.v),
            "corr": np.asarray(self.corr),
            "sigma": np.asarray(self.sigma),
            "flag": np.asarray(self.flag),
            "time": np.asarray(self.time),
            "tint": np.asarray(self.tint),
            "ant1": np.asarray(self.ant1),
            "ant2": np.asarray(self.ant2),
            "band": np.asarray(self.band),
        }

    def _meta(self) -> dict:
        return {
            **self._visdata_meta(),
            "feeds": self.feeds,
            "mounts": self.mounts,
            "fr_offset": self.fr_offset,
        }

    def replace(self, **changes) -> "PolVisData":
        """A copy with some per-row arrays or metadata replaced (validated again),
        e.g. `data.replace(sigma=new_sigma)`."""
        kw = {**self._arrays(), **self._meta()}
        unknown = set(changes) - set(kw)
        if unknown:
            raise TypeError(
                f"unknown PolVisData field(s) {sorted(unknown)}; choose from "
                f"{sorted(kw)}."
            )
        kw.update(changes)
        pos = [kw.pop(k) for k in ("u", "v", "corr", "sigma", "time", "ant1", "ant2")]
        return PolVisData(*pos, **kw)

    def take(self, index: ArrayLike | Sequence[int] | Sequence[bool]) -> "PolVisData":
        """The rows `index` (an integer array or a boolean mask), as a new
        `PolVisData` (the checks of [`eqmodels.VisData.take`][])."""
        index = np.asarray(index)
        if index.size == 0 and index.dtype != bool:
            index = index.astype(np.int64)
        # The row proxy checks the index (shape, dtype, range) with VisData's
        # errors.
        self._rows().take(index)
        return self.replace(**{k: a[index] for k, a in self._arrays().items()})

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
    ) -> "PolVisData":
        """Rows that pass every given criterion, as [`eqmodels.VisData.select`][]
        (the same arguments and errors); `snr_min` compares the Stokes I
        signal-to-noise ratio of [`eqmodels.PolVisData.stokes`][] (a row without
        Stokes I has 0)."""
        keep = self._rows()._select_mask(
            stations=stations,
            exclude_stations=exclude_stations,
            time_range=time_range,
            uv_range=uv_range,
            snr_min=snr_min,
            bands=bands,
        )
        return self.take(keep)

    def scan_average(self, gap: RealScalar = DEFAULT_SCAN_GAP_S) -> "PolVisData":
        """Coherent average of each baseline over each scan, per correlation:
        [`eqmodels.VisData.scan_average`][]'s estimators (`mean`,
        `sqrt(Σ σ²) / N`) over that correlation's unflagged entries (`N` counts
        them); a correlation flagged in every averaged row stays flagged."""
        return scan_average(self, gap)

    def time_average(self, seconds: RealScalar) -> "PolVisData":
        """Coherent average over fixed bins of `seconds` (as
        [`eqmodels.VisData.time_average`][]), per correlation as
        [`eqmodels.PolVisData.scan_average`][]."""
        return time_average(self, seconds)

    # ---------------------------------------------------------------- products
    def correlations(self) -> tuple[Array, Array]:
        """The four correlations and their sigmas, each `(n, 4)` in the order of
        `basis` (the file's: RR, LL, RL, LR); NaN where flagged."""
        return self.corr, self.sigma

    def stokes(self) -> tuple[np.ndarray, np.ndarray]:
        """Stokes I, Q, U, V visibilities and their sigmas, each `(n, 4)` numpy,
        as eht-imaging's `switch_polrep('stokes')` converts them.

        Circular feeds: `I = (RR + LL)/2`, `Q = (RL + LR)/2`, `U = i(LR − RL)/2`,
        `V = (RR − LL)/2`; `σ_I = σ_V = ½ sqrt(σ_RR² + σ_LL²)`,
        `σ_Q = σ_U = ½ sqrt(σ_RL² + σ_LR²)`. A flagged correlation (NaN) makes
        what uses it NaN, except Stokes I: with one parallel hand flagged, the
        other is taken for I (and its σ for σ_I), as eht-imaging does.
        Linear feeds: `I = (XX + YY)/2`, `Q = (XX − YY)/2`, `U = (XY + YX)/2`,
        `V = −i(XY − YX)/2`, `σ_I = σ_Q`, `σ_U = σ_V` likewise (no single-hand
        Stokes I: XX alone is I + Q). Rows of a mixed baseline (one circular, one
        linear station) are NaN: they need the feeds' conversion first.
        """
        c = np.asarray(self.corr)
        s = np.asarray(self.sigma)
        c1, c2, c3, c4 = c.T
        s1, s2, s3, s4 = s.T
        feed = np.array([f == "linear" for f in self.feeds])
        lin1, lin2 = feed[np.asarray(self.ant1)], feed[np.asarray(self.ant2)]
        circ = ~lin1 & ~lin2
        lin = lin1 & lin2
        with np.errstate(invalid="ignore"):
            s_par = 0.5 * np.sqrt(s1**2 + s2**2)
            s_cross = 0.5 * np.sqrt(s3**2 + s4**2)
            # Circular (eht-imaging's `switch_polrep`).
            i_c = 0.5 * (c1 + c2)
            si_c = s_par.copy()
            miss1, miss2 = np.isnan(c1), np.isnan(c2)
            i_c[miss1], si_c[miss1] = c2[miss1], s2[miss1]
            i_c[miss2], si_c[miss2] = c1[miss2], s1[miss2]
            circ_vis = np.stack(
                [i_c, 0.5 * (c4 + c3), 0.5j * (c4 - c3), 0.5 * (c1 - c2)], axis=1
            )
            circ_sig = np.stack([si_c, s_cross, s_cross, s_par], axis=1)
            lin_vis = np.stack(
                [0.5 * (c1 + c2), 0.5 * (c1 - c2), 0.5 * (c3 + c4), -0.5j * (c3 - c4)],
                axis=1,
            )
            lin_sig = np.stack([s_par, s_par, s_cross, s_cross], axis=1)
        nan_c = np.full_like(circ_vis, np.nan + 1j * np.nan)
        vis = np.where(circ[:, None], circ_vis, np.where(lin[:, None], lin_vis, nan_c))
        sig = np.where(circ[:, None], circ_sig, np.where(lin[:, None], lin_sig, np.nan))
        return vis, sig

    def stokes_i(self) -> VisData:
        """Stokes I as a [`eqmodels.VisData`][] (I and σ_I of
        [`eqmodels.PolVisData.stokes`][]): the rows without Stokes I are dropped
        and counted in `n_flagged`. For a file,
        `load_uvfits(path, polarization="full").stokes_i()` equals
        `load_uvfits(path)` row for row (exactly with JAX's float64, `x64`;
        without it the correlations are float32 and I agrees to float32
        rounding), unless the file mixes feeds: its mixed baselines have no Stokes
        I here, while `load_uvfits(path)` averages their parallel-hand columns."""
        vis, sig = self.stokes()
        ok = np.isfinite(vis[:, 0]) & np.isfinite(sig[:, 0])
        if not ok.any():
            raise ValueError(
                "no row has Stokes I (every row lacks both parallel hands, or is a "
                "mixed-feed baseline): there is no Stokes I data set."
            )
        a = self._arrays()
        meta = self._visdata_meta()
        meta["n_flagged"] = self.n_flagged + int(np.sum(~ok))
        return VisData(
            a["u"][ok],
            a["v"][ok],
            vis[ok, 0],
            sig[ok, 0],
            a["time"][ok],
            a["ant1"][ok],
            a["ant2"][ok],
            tint=a["tint"][ok],
            band=a["band"][ok],
            **meta,
        )

    # ---------------------------------------------------------- field rotation
    def parallactic_angle(self) -> np.ndarray:
        """The parallactic angle (radians) of each row's two stations, `(n, 2)`
        numpy for `(ant1, ant2)`, as eht-imaging's `unpack(['par_ang1',
        'par_ang2'])` (geocentric station latitude; NaN for a station without a
        position)."""
        return row_angles(self)[0]

    def elevation(self) -> np.ndarray:
        """The source's elevation (radians) at each row's two stations, `(n, 2)`
        numpy, as eht-imaging's `unpack(['el1', 'el2'])` (geocentric: the angle
        to the plane normal to the station's radius vector)."""
        return row_angles(self)[1]

    def field_rotation(self) -> np.ndarray:
        """The field-rotation angle (radians) of each row's two stations,
        `(n, 2)` numpy: `φ = f_par·parallactic + f_el·elevation + offset`, with
        eht-imaging's coefficients per mount (alt-az 1, 0; Nasmyth-R 1, +1;
        Nasmyth-L 1, −1; equatorial 0, 0) and `fr_offset` (degrees).

        **Raises:** `ValueError` when a row's station has an orbiting or X-Y
        mount (no coefficients; set its `mounts` entry) or no position."""
        par, el = row_angles(self)
        coef = field_rotation_coefficients(self.mounts, self.fr_offset)
        a = np.stack([np.asarray(self.ant1), np.asarray(self.ant2)], axis=1)
        bad = np.isnan(coef[a, 0])
        if bad.any():
            name = self.station_names[int(a[bad][0])]
            raise ValueError(
                f"station {name!r} has mount {self.mounts[int(a[bad][0])]!r}, which "
                "has no field-rotation coefficients: give it one of "
                f"{sorted(MOUNT_COEFFICIENTS)} in `mounts` (`data.replace(mounts=...)`)."
            )
        if np.isnan(par).any():
            i = int(a[np.isnan(par)][0])
            raise ValueError(
                f"station {self.station_names[i]!r} has no position (`station_xyz` "
                "is 0): its field rotation is unknown; give its ECEF position."
            )
        return coef[a, 0] * par + coef[a, 1] * el + coef[a, 2]

    # ------------------------------------------------------------ description
    def summary(self) -> str:
        """A multi-line human-readable description."""
        rows = self._rows()
        text = rows.summary().split("\n")
        flag = np.asarray(self.flag)
        counts = ", ".join(
            f"{name} {int(flag[:, k].sum())}" for k, name in enumerate(self.basis)
        )
        feeds = sorted(set(self.feeds))
        mounts = ", ".join(f"{s} {m}" for s, m in zip(self.station_names, self.mounts))
        text[0] = text[0].replace("VisData:", "PolVisData:", 1)
        text[-1] = text[-1].replace("|V|", "|I|").replace("SNR", "Stokes I SNR")
        text += [
            f"  correlations {', '.join(self.basis)} ({'/'.join(feeds)} feeds); "
            f"flagged entries: {counts}",
            f"  mounts: {mounts}",
        ]
        return "\n".join(text)

    def __repr__(self) -> str:
        return (
            f"PolVisData({self.source!r}, mjd={self.mjd}, n_rows={self.n_rows}, "
            f"stations={list(self.stations_present())}, "
            f"freq={self.freq / 1e9:.4f} GHz, basis={''.join(self.basis)})"
        )


def _per_station(name, values, n_st, default, allowed) -> tuple[str, ...]:
    if values is None:
        return (default,) * n_st
    if isinstance(values, str):
        raise TypeError(
            f"`{name}` must give one entry per station (a sequence of {n_st} "
            f"strings), got the string {values!r}: pass `[{values!r}] * {n_st}`."
        )
    values = tuple(values)
    if len(values) != n_st:
        raise ValueError(
            f"`{name}` must give one entry per station ({n_st}), got {len(values)}."
        )
    bad = [x for x in values if x not in allowed]
    if bad:
        raise ValueError(
            f"`{name}` has unknown entries {bad}: choose from {list(allowed)}."
        )
    return values


def check_polvisdata(data, name: str = "data") -> None:
    """Refuse what is not a `PolVisData`."""
    if isinstance(data, PolVisData):
        return
    hint = (
        ": read the file with `em.load_uvfits(path, polarization='full')`"
        if isinstance(data, VisData)
        else ""
    )
    raise TypeError(f"`{name}` must be a PolVisData, got {type(data).__name__}{hint}.")


def concatenate(datasets) -> VisData | PolVisData:
    """Concatenate observations: bands of one day, or several days.

    Station tables are merged by name (a station must have the same position,
    within 1 m, in every data set). Each distinct frequency becomes a band (rows
    keep their band, so closures never mix bands). Times are shifted to hours since
    0 h of the earliest `mjd`. Source and position must agree.

    **Arguments:**

    - `datasets`: a sequence of [`eqmodels.VisData`][], or of
      [`eqmodels.PolVisData`][] (all of one kind; for polarimetric data sets a
      station must have the same feeds, mount and field-rotation offset in each).

    **Returns:** one `VisData` (a `PolVisData` for polarimetric data sets);
    `n_flagged` is the sum.

    **Raises:** `ValueError` when two rows share time, band and baseline (e.g. a
    data set concatenated with itself): see [`eqmodels.VisData.duplicate_rows`][].
    """
    datasets = list(datasets)
    pol = [isinstance(d, PolVisData) for d in datasets]
    if datasets and all(pol):
        return concatenate_pol(datasets)
    if any(pol):
        raise TypeError(
            "`datasets` mixes PolVisData and other data sets: concatenate "
            "PolVisData only, or take Stokes I of each first (`d.stokes_i()`)."
        )
    return concatenate_vis(datasets)


def concatenate_pol(datasets) -> PolVisData:
    """[`eqmodels.concatenate`][] of polarimetric data sets."""
    for d in datasets:
        check_polvisdata(d, "datasets")
    first = datasets[0]
    names, xyz, freqs, mjd0 = merge_tables(datasets)
    station = {}
    for d in datasets:
        for s, f, m, o in zip(d.station_names, d.feeds, d.mounts, d.fr_offset):
            if s in station and station[s] != (f, m, o):
                raise ValueError(
                    f"station {s!r} has different feeds, mounts or field-rotation "
                    f"offsets in the data sets ({station[s]} vs {(f, m, o)}): make "
                    "them agree (`data.replace(feeds=..., mounts=..., fr_offset=...)`)."
                )
            station.setdefault(s, (f, m, o))
    keys = ("u", "v", "corr", "sigma", "flag", "time", "tint", "ant1", "ant2", "band")
    parts = {k: [] for k in keys}
    for d in datasets:
        a = d._arrays()
        remap = np.array([names.index(s) for s in d.station_names])
        for k in ("u", "v", "corr", "sigma", "flag", "tint"):
            parts[k].append(a[k])
        parts["time"].append(a["time"] + 24.0 * (d.mjd - mjd0))
        parts["ant1"].append(remap[a["ant1"]])
        parts["ant2"].append(remap[a["ant2"]])
        parts["band"].append(band_map(d, freqs)[a["band"]])
    cat = {k: np.concatenate(p) for k, p in parts.items()}
    order = np.lexsort((cat["ant2"], cat["ant1"], cat["band"], cat["time"]))
    cat = {k: a[order] for k, a in cat.items()}
    pos = [cat.pop(k) for k in ("u", "v", "corr", "sigma", "time", "ant1", "ant2")]
    out = PolVisData(
        *pos,
        **cat,
        station_names=tuple(names),
        station_xyz=np.array(xyz),
        feeds=[station[s][0] for s in names],
        mounts=[station[s][1] for s in names],
        fr_offset=[station[s][2] for s in names],
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
