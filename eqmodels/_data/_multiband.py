"""`MultiBandData`: several bands of one observation, each a single-frequency
data set (`VisData` or `PolVisData`), on one station table."""

import math
from collections.abc import Iterator, Sequence

import equinox as eqx
import numpy as np

from .._custom_types import RealScalar
from ._polvisdata import concatenate, PolVisData
from ._table import DEFAULT_SCAN_GAP_S
from ._visdata import VisData


BandData = VisData | PolVisData


def _check_bands(bands) -> tuple[BandData, ...]:
    if isinstance(bands, VisData | PolVisData):
        raise TypeError(
            "`bands` is one data set: give a sequence of data sets, one per band, "
            "or split a concatenated one with `MultiBandData.from_data(data)`."
        )
    bands = tuple(bands)
    if not bands:
        raise ValueError("`bands` is empty: give at least one band's data set.")
    kinds = {type(b) for b in bands}
    for b in bands:
        if not isinstance(b, VisData | PolVisData):
            raise TypeError(
                f"every band must be a VisData or a PolVisData, got {type(b).__name__}."
            )
    if len(kinds) > 1:
        raise TypeError(
            "`bands` mixes VisData and PolVisData: give every band in one kind "
            "(`PolVisData.stokes_i()` gives a polarimetric band's Stokes I)."
        )
    for k, b in enumerate(bands):
        if len(b.band_freqs) != 1:
            raise ValueError(
                f"band {k} holds {len(b.band_freqs)} frequencies "
                f"{[f / 1e9 for f in b.band_freqs]} GHz: each band is one frequency; "
                "split a concatenated data set with `MultiBandData.from_data(data)`."
            )
    freqs = [b.band_freqs[0] for b in bands]
    for k, f in enumerate(freqs):
        for j in range(k):
            if math.isclose(f, freqs[j], rel_tol=1e-12):
                raise ValueError(
                    f"bands {j} and {k} are both at {f / 1e9:.6g} GHz: each band "
                    "is one distinct frequency (concatenate the data of one "
                    "frequency first, `eqmodels.concatenate`)."
                )
    return bands


class MultiBandData(eqx.Module):
    """Several bands of one observation (e.g. the four 2018 EHT bands b1–b4 of a
    day), each a single-frequency [`eqmodels.VisData`][] (or
    [`eqmodels.PolVisData`][]) at its own frequency, all on **one station table**
    (the bands' tables merged by name, as [`eqmodels.concatenate`][] does, so
    station indices mean the same in every band). Bands are sorted by frequency.

    Per band, the usual operations: `select`, `scan_average`, `time_average`
    (each applied band by band), `summary()` (one line per band); `data[k]`,
    `len(data)`, `for band in data`. `freqs` are the bands' frequencies (Hz).
    Build the objective band by band with [`eqmodels.AtFrequency`][].
    """

    bands: tuple[BandData, ...]

    def __init__(self, bands: Sequence[BandData]):
        """**Arguments:** `bands`, one single-frequency data set per band (each
        at a distinct frequency; all `VisData` or all `PolVisData`, of one
        source)."""
        bands = _check_bands(bands)
        same = all(b.station_names == bands[0].station_names for b in bands)
        same = same and all(b.mjd == bands[0].mjd for b in bands)
        if len(bands) > 1 and not same:
            # One station table (and one time origin) for all: merged by name.
            joined = concatenate(bands)
            bands = _split(joined)
        order = np.argsort([b.band_freqs[0] for b in bands], kind="stable")
        self.bands = tuple(bands[int(k)] for k in order)

    @classmethod
    def from_data(cls, data: BandData) -> "MultiBandData":
        """Split a multi-band data set (e.g. [`eqmodels.concatenate`][] of
        per-band files) into its bands.

        **Arguments:** `data`, a `VisData` or `PolVisData`.
        """
        if not isinstance(data, VisData | PolVisData):
            raise TypeError(
                f"`data` must be a VisData or a PolVisData, got {type(data).__name__}."
            )
        return cls(_split(data))

    @property
    def freqs(self) -> tuple[float, ...]:
        """The bands' frequencies (Hz), ascending."""
        return tuple(b.band_freqs[0] for b in self.bands)

    @property
    def ref_freq(self) -> float:
        """The mean of the bands' frequencies (Hz): a natural reference `ν₀`."""
        return float(np.mean(self.freqs))

    @property
    def station_names(self) -> tuple[str, ...]:
        """The station table every band shares."""
        return self.bands[0].station_names

    def __len__(self) -> int:
        return len(self.bands)

    def __getitem__(self, k: int) -> BandData:
        return self.bands[k]

    def __iter__(self) -> Iterator[BandData]:
        return iter(self.bands)

    def _each(self, what: str, fn) -> "MultiBandData":
        out = []
        for k, b in enumerate(self.bands):
            try:
                out.append(fn(b))
            except ValueError as e:
                raise ValueError(
                    f"band {k} ({self.freqs[k] / 1e9:.4f} GHz): {what}: {e}"
                ) from None
        return MultiBandData(out)

    def select(self, **kwargs) -> "MultiBandData":
        """Every band's rows that pass the criteria of
        [`eqmodels.VisData.select`][] (`stations`, `exclude_stations`,
        `time_range`, `uv_range`, `snr_min`). Bands are chosen with
        [`eqmodels.MultiBandData.take_bands`][]."""
        if "bands" in kwargs:
            raise TypeError(
                "`bands` is not a criterion here: every band has band index 0; "
                "choose bands with `data.take_bands([0, 2])`."
            )
        return self._each("select", lambda b: b.select(**kwargs))

    def take_bands(self, index: Sequence[int]) -> "MultiBandData":
        """The bands `index` (positions in `freqs` order).

        **Arguments:** `index`, a sequence of band positions.
        """
        if isinstance(index, int | np.integer):
            index = [index]
        index = [int(k) for k in index]
        bad = [k for k in index if not -len(self) <= k < len(self)]
        if bad:
            raise IndexError(
                f"`index` {bad[0]} is out of range: there are {len(self)} bands."
            )
        return MultiBandData([self.bands[k] for k in index])

    def scan_average(self, gap: RealScalar = DEFAULT_SCAN_GAP_S) -> "MultiBandData":
        """Each band scan-averaged ([`eqmodels.VisData.scan_average`][])."""
        return self._each("scan_average", lambda b: b.scan_average(gap))

    def time_average(self, seconds: RealScalar) -> "MultiBandData":
        """Each band time-averaged ([`eqmodels.VisData.time_average`][])."""
        return self._each("time_average", lambda b: b.time_average(seconds))

    def concatenate(self) -> BandData:
        """All bands as one data set, one band index per frequency
        ([`eqmodels.concatenate`][])."""
        return concatenate(self.bands)

    def summary(self) -> str:
        """A multi-line description: the observation, then one line per band."""
        first = self.bands[0]
        kind = type(first).__name__
        lines = [
            f"MultiBandData: {len(self)} bands of {kind}, {first.source}, MJD "
            f"{first.mjd}; stations {', '.join(self.station_names)}"
        ]
        for k, b in enumerate(self.bands):
            uvd = b.uvdist
            lines.append(
                f"  band {k}: {b.band_freqs[0] / 1e9:.4f} GHz, {b.n_rows} rows, "
                f"{len(b.timestamps())} timestamps, {len(b.baselines())} baselines, "
                f"stations {', '.join(b.stations_present())}; |uv| "
                f"{uvd.min() / 1e9:.4g} – {uvd.max() / 1e9:.4g} Gλ"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        freqs = ", ".join(f"{f / 1e9:.4f}" for f in self.freqs)
        return (
            f"MultiBandData({type(self.bands[0]).__name__} × {len(self)}, "
            f"freqs=[{freqs}] GHz, rows={[b.n_rows for b in self.bands]})"
        )


def _split(data: BandData) -> list[BandData]:
    """Each band of `data` as a single-frequency data set (band index 0, the
    station table and time origin of `data`)."""
    band = np.asarray(data.band)
    out = []
    for k, f in enumerate(data.band_freqs):
        rows = np.flatnonzero(band == k)
        if rows.size == 0:
            continue
        part = data.take(rows)
        out.append(part.replace(band=np.zeros(rows.size, np.int64), freq=f))
    return out
