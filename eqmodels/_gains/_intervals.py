"""Solution intervals: which gain applies at which time slot.

A table built once on the host from a data set: every time slot (an entry of
[`eqmodels.VisData.timestamps`][], what a term's `time_index` points into) gets the
index of its solution interval, and every interval its time span `[start, end]`
(hours), so that gains solved on one data set can be looked up at the times of
another (nearest interval in time, constant beyond the ends).
"""

import math
import numbers

import numpy as np

from .._data._visdata import check_visdata, DEFAULT_SCAN_GAP_S, VisData


def check_interval(interval) -> str | float:
    """`interval` as `"timestamp"`, `"scan"`, `"track"` or a positive number of
    seconds."""
    if isinstance(interval, str):
        if interval not in ("timestamp", "scan", "track"):
            raise ValueError(
                f"`interval` must be 'timestamp', 'scan', 'track' or a number of "
                f"seconds > 0, got {interval!r}."
            )
        return interval
    if isinstance(interval, bool) or not isinstance(interval, numbers.Real):
        raise TypeError(
            "`interval` must be 'timestamp', 'scan', 'track' or a number of seconds, "
            f"got {interval!r}."
        )
    if not (math.isfinite(interval) and interval > 0):
        raise ValueError(
            f"`interval` in seconds must be finite and > 0, got {interval!r}; use "
            "'timestamp' for one solution per timestamp."
        )
    return float(interval)


def solution_intervals(
    data: VisData,
    interval: str | float | int = "scan",
    *,
    scan_gap: float | int = DEFAULT_SCAN_GAP_S,
) -> tuple[np.ndarray, np.ndarray]:
    """The solution intervals of a data set.

    **Arguments:**

    - `data`: a [`eqmodels.VisData`][].
    - `interval`: `"scan"` (scans found by [`eqmodels.VisData.scans`][]),
      `"timestamp"` (one per distinct timestamp: eht-imaging's
      `solution_interval=0`), `"track"` (one for the whole data set), or a number of
      seconds (fixed bins aligned on 0 h, as eht-imaging's `solution_interval`).
    - `scan_gap`: the gap (s) that separates scans.

    **Returns:** `(slot_interval, bounds)`: numpy arrays, the interval of each time
    slot `(n_slots,)` and each interval's `[start, end]` in hours `(n_intervals, 2)`.
    """
    check_visdata(data)
    interval = check_interval(interval)
    ts = data.timestamps()
    if interval == "timestamp":
        return np.arange(ts.size), np.stack([ts, ts], axis=1)
    if interval == "track":
        return np.zeros(ts.size, np.int64), np.array([[ts[0], ts[-1]]])
    if interval == "scan":
        scans = data.scans(scan_gap)
        slot = np.searchsorted(scans[:, 0], ts, side="right") - 1
        return slot.astype(np.int64), np.asarray(scans, np.float64)
    width = interval / 3600.0
    bins = np.floor(edge_hours(ts) / width).astype(np.int64)
    used, slot = np.unique(bins, return_inverse=True)
    bounds = np.stack([used * width, (used + 1) * width], axis=1)
    return slot.reshape(-1).astype(np.int64), bounds


def edge_hours(ts: np.ndarray) -> np.ndarray:
    """Times (hours) as float64, moved up by one unit in the last place of their
    own dtype: a record stamped on a bin edge and stored just below it (float32
    times, x64 off: ~1 ms at 10 h) still starts the bin the edge starts, as
    `VisData.time_average` places it (without the nudge, 10-s records in 60-s
    intervals would come out 5, 6 and 7 to an interval in float32)."""
    ts = np.asarray(ts)
    return ts.astype(np.float64) + np.abs(np.spacing(ts)).astype(np.float64)


def nearest_interval(bounds: np.ndarray, times: np.ndarray) -> np.ndarray:
    """For each time, the interval that contains it, else the nearest one in time:
    constant extrapolation beyond the ends. `bounds` are sorted by start. A time
    on the shared boundary of two intervals (bins of a fixed number of seconds,
    `[0, 60]` and `[60, 120]`) takes the later one, the bin that `floor` puts it
    in; a time midway between two intervals takes the earlier one."""
    times = np.asarray(times, np.float64)[:, None]
    dist = np.maximum(
        np.maximum(bounds[None, :, 0] - times, times - bounds[None, :, 1]), 0
    )
    best = np.argmin(dist, axis=1)
    inside = dist == 0
    last_inside = bounds.shape[0] - 1 - np.argmax(inside[:, ::-1], axis=1)
    return np.where(inside.any(axis=1), last_inside, best).astype(np.int64)


def slot_presence(data: VisData, slot_interval: np.ndarray, n_intervals: int):
    """`(n_intervals, n_stations)` booleans: which stations have a row in each
    interval (where a solution can be determined)."""
    k = np.asarray(slot_interval)[np.asarray(data.time_index)]
    present = np.zeros((n_intervals, data.n_stations), bool)
    present[k, np.asarray(data.ant1)] = True
    present[k, np.asarray(data.ant2)] = True
    return present


def band_range(data: VisData, group: np.ndarray, n_groups: int):
    """`(lo, hi)`: the lowest and highest band index among the rows of each group
    (`group[i]` the group of row `i`); `lo == hi` where a group holds one band.
    A group without rows gets `lo > hi`."""
    band = np.asarray(data.band)
    lo = np.full(n_groups, band.max())
    hi = np.full(n_groups, band.min())
    np.minimum.at(lo, group, band)
    np.maximum.at(hi, group, band)
    return lo, hi


def interval_band_freqs(data: VisData, slot_interval: np.ndarray, n_intervals: int):
    """Each interval's band frequency (Hz), or `None` where its rows span several
    bands (what `StationGains.at` matches another data set's bands against)."""
    k = np.asarray(slot_interval)[np.asarray(data.time_index)]
    lo, hi = band_range(data, k, n_intervals)
    freqs = np.asarray(data.band_freqs, np.float64)
    return tuple(float(freqs[a]) if a == b else None for a, b in zip(lo, hi))
