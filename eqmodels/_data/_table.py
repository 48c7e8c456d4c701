"""`AbstractVisTable`: the row bookkeeping every table of visibility rows shares
(one row per baseline, timestamp and band: `VisData`, `PolVisData`), whatever it
holds per row."""

import abc
import zlib

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float, Int

from .._custom_types import RealScalar
from ._averaging import find_scans


#: ehtim's default gap between scans, 0.0165 h.
DEFAULT_SCAN_GAP_S = 59.4


def tables_key(timestamps, station_names) -> int:
    """The fingerprint of a data set's index tables: a CRC-32 of its timestamps'
    float64 bytes and its station names, in [0, 2³¹) (an int32 leaf; −1 means
    unknown)."""
    table = np.ascontiguousarray(np.asarray(timestamps, np.float64))
    key = zlib.crc32(table.tobytes())
    key = zlib.crc32("\x00".join(station_names).encode(), key)
    return key & 0x7FFFFFFF


class AbstractVisTable(eqx.Module):
    """Base class of tables of visibility rows ([`eqmodels.VisData`][],
    [`eqmodels.PolVisData`][]): each row a baseline `(ant1, ant2)` (indices into
    `station_names`) at a time `time` (hours) in a band `band` (index into
    `band_freqs`), at `(u, v)` (wavelengths). What a table holds per row beyond
    that is its own; the row bookkeeping here (time slots, baselines, duplicates,
    scans, station selections) is shared. Subclasses implement `select`.
    """

    u: eqx.AbstractVar[Float[Array, " n"]]
    v: eqx.AbstractVar[Float[Array, " n"]]
    time: eqx.AbstractVar[Float[Array, " n"]]
    ant1: eqx.AbstractVar[Int[Array, " n"]]
    ant2: eqx.AbstractVar[Int[Array, " n"]]
    band: eqx.AbstractVar[Int[Array, " n"]]
    station_names: eqx.AbstractVar[tuple[str, ...]]
    band_freqs: eqx.AbstractVar[tuple[float, ...]]

    @abc.abstractmethod
    def select(self, **kwargs) -> "AbstractVisTable":
        """The rows that pass every given criterion (see the subclasses)."""

    @property
    def freq(self) -> float:
        """Reference frequency in Hz (the mean of `band_freqs`)."""
        return float(np.mean(self.band_freqs))

    @property
    def n_rows(self) -> int:
        """Number of rows (visibilities)."""
        return int(self.u.shape[0])

    def __len__(self) -> int:
        return self.n_rows

    @property
    def n_stations(self) -> int:
        """Number of stations in the station table (some may have no rows)."""
        return len(self.station_names)

    @property
    def uvdist(self) -> np.ndarray:
        """`sqrt(u² + v²)` per row (wavelengths), numpy."""
        return np.hypot(np.asarray(self.u), np.asarray(self.v))

    @property
    def time_index(self) -> np.ndarray:
        """Each row's time slot: its index into the data set's distinct timestamps
        ([`eqmodels.VisData.timestamps`][]), numpy. Data terms built from this data
        set or its products carry it (`time_index`); station gains use it."""
        return np.searchsorted(self.timestamps(), np.asarray(self.time))

    def stations_present(self) -> tuple[str, ...]:
        """Names of the stations that appear in at least one row (table order)."""
        used = np.union1d(np.asarray(self.ant1), np.asarray(self.ant2))
        return tuple(self.station_names[i] for i in used)

    @property
    def index_key(self) -> int:
        """A fingerprint (a CRC) of the tables that the data set's indices point
        into: its time slots ([`eqmodels.VisData.timestamps`][], what
        [`eqmodels.VisData.time_index`][] indexes) and its station table
        (`station_names`, what `ant1`, `ant2` index). Data terms built from this
        data set or its products carry it, and [`eqmodels.GainCorrected`][] refuses
        a term and gains whose keys differ (e.g. a term from a time selection of the
        data the gains were built on, or from a data set whose stations are listed
        in another order)."""
        return tables_key(self.timestamps(), self.station_names)

    def timestamps(self) -> np.ndarray:
        """The distinct timestamps (hours), sorted: the data set's time slots (see
        [`eqmodels.VisData.time_index`][])."""
        return np.unique(np.asarray(self.time))

    def baselines(self) -> list[tuple[str, str]]:
        """The distinct baselines `(name1, name2)` present, sorted by index."""
        pairs = np.unique(
            np.stack([np.asarray(self.ant1), np.asarray(self.ant2)], axis=1), axis=0
        )
        return [(self.station_names[a], self.station_names[b]) for a, b in pairs]

    def duplicate_rows(self) -> np.ndarray:
        """A boolean mask of the rows that repeat an earlier row's timestamp,
        band and baseline (e.g. a data set concatenated with itself). Averaging
        such rows as independent measurements would shrink σ by up to √2, so
        [`eqmodels.VisData.scan_average`][], [`eqmodels.VisData.time_average`][],
        [`eqmodels.concatenate`][] and the closure products refuse them; drop them
        with `data.take(~data.duplicate_rows())`."""
        # `+ 0.0` maps -0.0 to 0.0: the same timestamp, as closures group them.
        keys = np.stack(
            [
                (np.asarray(self.time, np.float64) + 0.0).view(np.int64),
                np.asarray(self.band),
                np.asarray(self.ant1),
                np.asarray(self.ant2),
            ],
            axis=1,
        )
        _, first = np.unique(keys, axis=0, return_index=True)
        dup = np.ones(self.n_rows, bool)
        dup[first] = False
        return dup

    def _check_no_duplicates(self, what: str, arg: str = "data") -> None:
        dup = self.duplicate_rows()
        if dup.any():
            k = int(np.argmax(dup))
            raise ValueError(
                f"`{arg}` has {int(dup.sum())} duplicated row(s) (same time, band and "
                f"baseline as an earlier row; first at row {k}, time "
                f"{float(self.time[k])!r} h, stations "
                f"{self.station_names[int(self.ant1[k])]}-"
                f"{self.station_names[int(self.ant2[k])]}): {what} would treat copies "
                "as independent measurements. Drop them with "
                "`data.take(~data.duplicate_rows())`, or give separate bands or "
                "sub-bands distinct `band` indices."
            )

    def select_stations(self, stations) -> "AbstractVisTable":
        """Keep only baselines between the named stations."""
        return self.select(stations=stations)

    def flag_stations(self, stations) -> "AbstractVisTable":
        """Drop every baseline to the named stations."""
        return self.select(exclude_stations=stations)

    def select_time(self, t_min: float | int, t_max: float | int) -> "AbstractVisTable":
        """Keep rows with `t_min <= time <= t_max` (hours)."""
        return self.select(time_range=(t_min, t_max))

    def scans(self, gap: RealScalar = DEFAULT_SCAN_GAP_S) -> np.ndarray:
        """Scans found from gaps in the timestamps: a new scan starts wherever two
        consecutive timestamps are more than `gap` seconds apart (default 59.4 s,
        eht-imaging's `add_scans` default of 0.0165 h).

        **Returns:** a numpy array `(n_scans, 2)` of `[start, end]` times (hours).
        """
        return find_scans(np.asarray(self.time), gap)[0]

    def scan_ids(self, gap: RealScalar = DEFAULT_SCAN_GAP_S) -> np.ndarray:
        """The scan index of every row (see [`eqmodels.VisData.scans`][])."""
        return find_scans(np.asarray(self.time), gap)[1]
