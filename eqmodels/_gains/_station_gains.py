"""`StationGains`: complex station gains per solution interval, as a module."""

import math
from collections.abc import Sequence
from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Complex, Float, Int

from .._data._visdata import check_visdata, DEFAULT_SCAN_GAP_S, VisData
from .._numerics import asarray
from .._terms._common import index_key_leaf
from .._validation import check_flag, is_concrete, refuse_julian_date
from ._abstract import AbstractGains
from ._intervals import (
    band_range,
    edge_hours,
    interval_band_freqs,
    nearest_interval,
    slot_presence,
    solution_intervals,
)


class StationGains(AbstractGains):
    r"""Complex gains of every station in every solution interval,
    `g = exp(log_amp + i·phase)`, applied to model visibilities as

    `V_ab → g_a · conj(g_b) · V̂_ab`

    for a leg from station `a` to station `b` (the orientation of the leg's
    `(u, v)`, as a data term's `stations` records it). Gains are the *forward*
    corruption (true sky → measured data), eht-imaging's convention; calibrating
    data divides by them.

    eqmodels' own [`eqmodels.AbstractGains`][] (final: for another model of the
    gains, subclass `AbstractGains`).

    The parameters are array leaves (`log_amp`, `phase`, shape
    `(n_intervals, n_stations)`) that `eqx.filter_grad` differentiates; the interval
    table is data built once on the host, never a float leaf (an optimiser cannot
    move it): `slot_interval` (integer), which interval each of the data set's
    time slots belongs to — per station, `(n_slots, n_stations)`, after
    [`eqmodels.StationGains.at`][], with `-1` for "no solution: gain 1"; `present`
    (boolean), which stations had data in each interval (where a solution was
    determined); and `bounds` (static), each interval's `(start, end)` in hours.
    Use [`eqmodels.StationGains.from_data`][] to build gains for a data set,
    [`eqmodels.GainCorrected`][] to put them in front of a data term,
    [`eqmodels.StationGains.at`][] to carry them to another data set (per station,
    the nearest interval in time where that station has a solution, as
    eht-imaging's `applycal(interp="nearest", extrapolate=True)`).
    """

    log_amp: Float[Array, "k s"]
    phase: Float[Array, "k s"]
    slot_interval: Int[Array, "t ..."]
    present: Bool[Array, "k s"]
    index_key: Int[Array, ""]
    mjd: Int[Array | np.ndarray, ""]
    bounds: tuple[tuple[float, float], ...] = eqx.field(static=True)
    station_names: tuple[str, ...] = eqx.field(static=True)
    interval_freqs: tuple[float | None, ...] | None = eqx.field(static=True)

    survey_hint: ClassVar[str] = (
        "gains of different data sets have their own solution intervals and "
        "station tables: `survey` and `pad_and_stack` pad them to one table "
        "themselves, a `vmap` by hand needs gains of one table"
    )

    def __init__(
        self,
        log_amp: ArrayLike,
        phase: ArrayLike,
        slot_interval: ArrayLike,
        bounds: ArrayLike | Sequence[Sequence[float]],
        station_names: Sequence[str],
        present: ArrayLike | None = None,
        index_key: int | ArrayLike | None = None,
        mjd: int | ArrayLike | None = None,
        interval_freqs: Sequence[float | None] | None = None,
    ):
        """**Arguments:**

        - `log_amp`: `ln|g|` per interval and station, shape `(n_intervals,
          n_stations)`.
        - `phase`: `arg g` (radians), same shape.
        - `slot_interval`: the interval of each time slot of the data set
          (`VisData.timestamps()` order), shape `(n_slots,)`, values in
          `[0, n_intervals)`; or per station, `(n_slots, n_stations)`, where `-1`
          means no solution (gain 1).
        - `bounds`: each interval's `[start, end]` (hours), shape `(n_intervals, 2)`.
        - `station_names`: the data set's station table (column order).
        - `present`: which stations have a solution in each interval (boolean,
          `(n_intervals, n_stations)`), what [`eqmodels.StationGains.at`][] looks
          for; default all.
        - `index_key`: the fingerprint of the data set's time slots and station
          table ([`eqmodels.VisData.index_key`][]) that these gains' rows and
          columns follow, checked by [`eqmodels.GainCorrected`][] and
          [`eqmodels.with_gains`][] against the terms'; default unknown (`-1`,
          not checked). `from_data` and `at` set it.
        - `mjd`: the day (`VisData.mjd`) whose 0 h UTC `bounds` count hours from,
          so that [`eqmodels.StationGains.at`][] places another data set's times
          (counted from its own `mjd`) correctly; default unknown (`-1`: times are
          taken as they are). `from_data` and `at` set it.
        - `interval_freqs`: the band frequency (Hz) of each interval's rows, or
          `None` for an interval whose rows span several bands: what
          [`eqmodels.StationGains.at`][] matches another data set's bands against,
          so that one band's gains never calibrate another. Default unknown
          (`None`: any band). `from_data`, `self_calibrate` and `at` set it.
        """
        names = tuple(station_names) if not isinstance(station_names, str) else ()
        if not names or not all(isinstance(s, str) for s in names):
            raise TypeError(
                "`station_names` must be a non-empty sequence of station codes, got "
                f"{station_names!r}."
            )
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(
                f"`station_names` names {twice} more than once: one column per "
                "station (a data set's station table)."
            )
        dtype = jnp.result_type(float)
        arrays = []
        for name, x in (("log_amp", log_amp), ("phase", phase)):
            if is_concrete(x):
                arr = np.asarray(x)
                if np.iscomplexobj(arr) or not np.issubdtype(arr.dtype, np.number):
                    raise TypeError(f"`{name}` must be real, got dtype {arr.dtype}.")
                if arr.shape[-1:] != (len(names),) or arr.ndim != 2:
                    raise ValueError(
                        f"`{name}` must have shape (n_intervals, n_stations) with "
                        f"n_stations = {len(names)} (one column per station name), "
                        f"got {arr.shape}."
                    )
                if not np.all(np.isfinite(arr)):
                    raise ValueError(f"`{name}` has non-finite values.")
                x = arr.astype(dtype) if np.issubdtype(arr.dtype, np.integer) else arr
            arrays.append(asarray(x))
        if is_concrete(arrays[0]) and is_concrete(arrays[1]):
            if arrays[0].shape != arrays[1].shape:
                raise ValueError(
                    f"`log_amp` {arrays[0].shape} and `phase` {arrays[1].shape} must "
                    "have the same shape."
                )
        k = arrays[0].shape[0]
        if is_concrete(slot_interval):
            si = np.asarray(slot_interval)
            if (
                si.ndim not in (1, 2)
                or (si.ndim == 2 and si.shape[1] != len(names))
                or si.size == 0
                or not np.issubdtype(si.dtype, np.integer)
            ):
                raise ValueError(
                    "`slot_interval` must be a non-empty integer array of shape "
                    f"(n_slots,) or (n_slots, {len(names)}) (the interval of each time "
                    f"slot, per station), got {si.dtype} {si.shape}."
                )
            low = -1 if si.ndim == 2 else 0
            if si.min() < low or si.max() >= k:
                raise ValueError(
                    f"`slot_interval` must lie in [{low}, {k}) (there are {k} "
                    "intervals; -1, per station only, for no solution)."
                )
            slot_interval = si
        if not is_concrete(bounds):
            raise TypeError(
                "`bounds` must be concrete (hours, from the host): build gains "
                "outside `jit`, or carry them in as an argument."
            )
        b = np.asarray(bounds, np.float64)
        if b.shape != (k, 2) or not np.all(np.isfinite(b)) or np.any(b[:, 1] < b[:, 0]):
            raise ValueError(
                f"`bounds` must be finite `[start, end]` pairs (hours, start <= "
                f"end), shape ({k}, 2), got {np.shape(bounds)}."
            )
        if np.any(np.diff(b[:, 0]) < 0):
            raise ValueError(
                "`bounds` must be sorted by start time (the intervals in time order, "
                "as `slot_interval` numbers them): `at` looks the nearest one up."
            )
        if interval_freqs is not None:
            freqs = tuple(interval_freqs)
            if len(freqs) != k or not all(
                f is None or (isinstance(f, float | int) and 0 < f < math.inf)
                for f in freqs
            ):
                raise ValueError(
                    f"`interval_freqs` must give {k} band frequencies (Hz, > 0; "
                    f"None where an interval spans several bands), got {interval_freqs!r}."
                )
            interval_freqs = tuple(None if f is None else float(f) for f in freqs)
        if present is None:
            present = np.ones((k, len(names)), bool)
        elif is_concrete(present):
            pr = np.asarray(present)
            if pr.shape != (k, len(names)) or pr.dtype != np.bool_:
                raise ValueError(
                    f"`present` must be a boolean array of shape ({k}, {len(names)}) "
                    f"(n_intervals, n_stations), got {pr.dtype} {pr.shape}."
                )
            present = pr
        self.log_amp, self.phase = arrays
        self.slot_interval = asarray(slot_interval, jnp.int32)
        self.present = asarray(present, bool)
        self.index_key = index_key_leaf(index_key)
        self.mjd = _mjd_leaf(mjd)
        self.bounds = tuple((float(lo), float(hi)) for lo, hi in b)
        self.station_names = names
        self.interval_freqs = interval_freqs

    @classmethod
    def from_data(
        cls,
        data: VisData,
        interval: str | float | int = "scan",
        *,
        gains: ArrayLike | None = None,
        scan_gap: float | int = DEFAULT_SCAN_GAP_S,
    ) -> "StationGains":
        """Gains for the time slots and stations of `data` (all 1 by default).

        **Arguments:**

        - `data`: a [`eqmodels.VisData`][] (terms built from it or from its products
          index the same time slots).
        - `interval`: the solution interval: `"scan"`, `"timestamp"`, `"track"` or a
          number of seconds (see [`eqmodels.solution_intervals`][]).
        - `gains`: initial complex gains `(n_intervals, n_stations)` (non-zero).
        - `scan_gap`: the gap (s) separating scans.

        **Returns:** a `StationGains`.
        """
        slot, bounds = solution_intervals(data, interval, scan_gap=scan_gap)
        shape = (bounds.shape[0], data.n_stations)
        if gains is None:
            la, ph = np.zeros(shape), np.zeros(shape)
        else:
            g = np.asarray(gains)
            if g.shape != shape:
                raise ValueError(
                    f"`gains` must have shape (n_intervals, n_stations) = {shape} for "
                    f"interval={interval!r}, got {g.shape}."
                )
            if not np.all(np.isfinite(g)) or np.any(g == 0):
                raise ValueError("`gains` must be finite and non-zero.")
            la, ph = np.log(np.abs(g)), np.angle(g)
        present = slot_presence(data, slot, bounds.shape[0])
        return cls(
            la,
            ph,
            slot,
            bounds,
            data.station_names,
            present,
            data.index_key,
            data.mjd,
            interval_band_freqs(data, slot, bounds.shape[0]),
        )

    @property
    def n_intervals(self) -> int:
        """Number of solution intervals."""
        return int(self.log_amp.shape[0])

    @property
    def n_time_slots(self) -> int:
        """Number of the data set's time slots that `slot_interval` covers."""
        return int(self.slot_interval.shape[0])

    def complex_gains(self) -> Complex[Array, "k s"]:
        """The gains `exp(log_amp + i·phase)`, `(n_intervals, n_stations)`."""
        return jnp.exp(jax.lax.complex(self.log_amp, self.phase))

    def factor(
        self,
        stations: Int[ArrayLike, "*points 2"],
        time_index: Int[ArrayLike, " n"],
    ) -> Complex[Array, "*points"]:
        """`g_a · conj(g_b)` for every leg.

        **Arguments:**

        - `stations`: each leg's station pair `(a, b)`, shape `(*points, 2)`.
        - `time_index`: each row's time slot, shape `(n,)` (`points[0] == n`).

        **Returns:** the complex factor, shape `points`. A leg with an unknown
        station or time slot (`-1`) gets factor 1.
        """
        # Concrete inputs (calibrating a data set) are looked up on the host:
        # eager device operations would compile a program per new shape.
        host = all(
            is_concrete(x)
            for x in (
                self.log_amp,
                self.phase,
                self.slot_interval,
                stations,
                time_index,
            )
        )
        xp = np if host else jnp
        stations = xp.asarray(stations)
        points = stations.shape[:-1]
        t = xp.asarray(time_index).reshape(points[:1] + (1,) * (len(points) - 1))
        t = xp.broadcast_to(t, points)
        a, b = stations[..., 0], stations[..., 1]
        known = (a >= 0) & (b >= 0) & (t >= 0)
        log_amp, phase = xp.asarray(self.log_amp), xp.asarray(self.phase)
        slots = xp.asarray(self.slot_interval)
        t = xp.where(t >= 0, t, 0)
        a, b = xp.where(a >= 0, a, 0), xp.where(b >= 0, b, 0)
        zero = xp.zeros((), log_amp.dtype)
        if slots.ndim == 1:
            ka = kb = slots[t]
        else:  # per station; -1: no solution, gain 1
            ka, kb = slots[t, a], slots[t, b]
        sa, sb = ka >= 0, kb >= 0
        ka, kb = xp.where(sa, ka, 0), xp.where(sb, kb, 0)
        la = xp.where(sa, log_amp[ka, a], zero) + xp.where(sb, log_amp[kb, b], zero)
        ph = xp.where(sa, phase[ka, a], zero) - xp.where(sb, phase[kb, b], zero)
        la, ph = xp.where(known, la, zero), xp.where(known, ph, zero)
        if host:
            return asarray(np.exp(la) * (np.cos(ph) + 1j * np.sin(ph)))
        return jnp.exp(jax.lax.complex(la, ph))

    # ------------------------------------------------------------ on data sets
    def at(
        self,
        data: VisData,
        *,
        bands: Literal["same", "any"] = "same",
        extrapolate: bool = False,
    ) -> "StationGains":
        """These gains on the time slots and station table of another data set
        (e.g. the other band, the unaveraged data, or the data with more baselines
        than the gains were solved on), station by station, as eht-imaging's
        `caltable.applycal(interp="nearest", extrapolate=True)`: each timestamp of
        `data` takes, for each station, the interval that contains it among those
        where that station has a solution (`present`), else the nearest such
        interval in time (constant beyond the ends; a time on the boundary of two
        intervals takes the later one, as the binning does). Stations are matched by
        name; a station with no solution anywhere, or unknown to these gains, gets
        gain 1.

        **Arguments:**

        - `data`: a [`eqmodels.VisData`][].
        - `bands`: `"same"` (default): a row of one band takes solutions of that
          band only (`interval_freqs`; intervals spanning several bands, or gains
          that do not know their bands, serve any), since the bands' phases differ;
          a band with no solution is an error. `"any"`: the nearest solution of
          any band, as eht-imaging's `applycal` on merged bands (what
          [`eqmodels.image_m87`][] reproduces), or to carry one band's gains to
          the other on purpose.
        - `extrapolate`: `False` (default): a timestamp of `data` more than
          1 h before the first interval or after the
          last (another day, another year: counted from the gains' `mjd`) is an
          error, since those gains did not calibrate it. `True`: take the
          nearest interval all the same (eht-imaging's `extrapolate=True`).

        **Returns:** a `StationGains` on `data`'s station table whose
        `slot_interval` (`(n_slots, n_stations)`) indexes `data`'s time slots.
        """
        check_visdata(data)
        if bands not in ("same", "any"):
            raise ValueError(f'`bands` must be "same" or "any", got {bands!r}.')
        if not is_concrete(self.present):
            raise TypeError(
                "`StationGains.at` looks the intervals up on the host: call it "
                "outside `jit` (on concrete gains), and pass the result in."
            )
        bounds = np.asarray(self.bounds, np.float64).reshape(-1, 2)
        present = np.asarray(self.present)
        # `data`'s times in hours from 0 h of these gains' day, and back.
        mjd = int(np.asarray(self.mjd))
        shift_h = 24.0 * (data.mjd - mjd) if mjd >= 0 else 0.0
        times = edge_hours(data.timestamps()) + shift_h
        if check_flag("extrapolate", extrapolate) is False:
            _refuse_outside(times, bounds, shift_h, mjd, data.mjd)
        cols = [
            self.station_names.index(s) if s in self.station_names else -1
            for s in data.station_names
        ]
        slot = np.full((times.size, len(cols)), -1, np.int64)
        for slots, serving in self._by_band(data, bands):
            for j, c in enumerate(cols):
                ks = np.flatnonzero(present[:, c] & serving) if c >= 0 else ()
                if len(ks):
                    slot[slots, j] = ks[nearest_interval(bounds[ks], times[slots])]
        cols_arr = np.maximum(cols, 0)
        known = (np.asarray(cols) >= 0)[None, :]
        # On the host when concrete (no eager device programs), as `factor`.
        xp = np if is_concrete(self.log_amp) and is_concrete(self.phase) else jnp
        log_amp, phase = xp.asarray(self.log_amp), xp.asarray(self.phase)
        zero = xp.zeros((), log_amp.dtype)
        la = xp.where(known, log_amp[:, cols_arr], zero)
        ph = xp.where(known, phase[:, cols_arr], zero)
        return StationGains(
            la,
            ph,
            slot,
            bounds - shift_h,
            data.station_names,
            present[:, cols_arr] & known,
            data.index_key,
            data.mjd,
            self.interval_freqs,
        )

    def _by_band(self, data: VisData, bands: str):
        """`(slots, serving)` pairs: `data`'s time slots of one band and the
        intervals whose solutions may serve them (same band frequency, or an
        interval spanning several bands); one pair of everything for
        `bands="any"` or gains that do not know their bands."""
        n_slots = data.timestamps().size
        k = self.n_intervals
        freqs = self.interval_freqs
        if bands == "any" or freqs is None or all(f is None for f in freqs):
            return [(np.arange(n_slots), np.ones(k, bool))]
        lo, hi = band_range(data, np.asarray(data.time_index), n_slots)
        if np.any(lo != hi):
            raise ValueError(
                "`data` holds rows of several bands at one timestamp, but these "
                "gains were solved per band (their phases differ): calibrate each "
                "band on its own (`gains.calibrate(data.select(bands=[b]))`), shift "
                'one band\'s times as the recipe does, or pass `bands="any"` to '
                "take the nearest solution of any band."
            )
        mine = np.array([np.nan if f is None else f for f in self.interval_freqs])
        any_band = np.isnan(mine)
        out = []
        for b in np.unique(lo):
            f = float(data.band_freqs[b])
            serving = any_band | np.isclose(mine, f, rtol=1e-9, atol=0.0)
            if not serving.any():
                have = sorted({x for x in self.interval_freqs if x is not None})
                raise ValueError(
                    f"`data` has a band at {f:.10g} Hz, and these gains have no "
                    f"solution there (they were solved at {have} Hz): one band's "
                    "gains do not calibrate another (their phases differ). "
                    "Self-calibrate that band, build gains for it with "
                    '`StationGains.from_data`, or pass `bands="any"` to carry '
                    "these gains over on purpose."
                )
            out.append((np.flatnonzero(lo == b), serving))
        return out

    def _row_factor(self, data: VisData, bands: str, extrapolate) -> np.ndarray:
        g = self.at(data, bands=bands, extrapolate=extrapolate)
        st = np.stack([np.asarray(data.ant1), np.asarray(data.ant2)], axis=1)
        return np.asarray(g.factor(st, data.time_index))

    def corrupt(
        self,
        data: VisData,
        *,
        bands: Literal["same", "any"] = "same",
        extrapolate: bool = False,
    ) -> VisData:
        """`data` with the gains applied: `V → g_a conj(g_b) V`, `σ → |g_a g_b| σ`
        (looked up with [`eqmodels.StationGains.at`][]).

        **Arguments:** `data`, a [`eqmodels.VisData`][]; `bands` and
        `extrapolate` as in `at`.
        """
        f = self._row_factor(data, bands, extrapolate)
        return data.replace(
            vis=f * np.asarray(data.vis), sigma=np.abs(f) * np.asarray(data.sigma)
        )

    def calibrate(
        self,
        data: VisData,
        *,
        bands: Literal["same", "any"] = "same",
        extrapolate: bool = False,
    ) -> VisData:
        """`data` with the gains divided out: `V → V / (g_a conj(g_b))`,
        `σ → σ / |g_a g_b|` (so SNRs, and closure quantities, are unchanged).

        **Arguments:** `data`, a [`eqmodels.VisData`][]; `bands` and
        `extrapolate` as in `at`.
        """
        f = self._row_factor(data, bands, extrapolate)
        return data.replace(
            vis=np.asarray(data.vis) / f, sigma=np.asarray(data.sigma) / np.abs(f)
        )


#: How far (hours) beyond its first or last interval `StationGains.at` carries
#: gains without `extrapolate=True`: the edges of the unaveraged records of the
#: same scans, not another part of the night, day or year.
EXTRAPOLATE_LIMIT_H = 1.0


def _refuse_outside(times, bounds, shift_h, mjd, data_mjd) -> None:
    """Refuse times (hours from the gains' day) beyond the gains' span by more
    than `EXTRAPOLATE_LIMIT_H`."""
    if times.size == 0 or bounds.size == 0:
        return
    lo, hi = float(bounds[:, 0].min()), float(bounds[:, 1].max())
    early = lo - float(times.min())
    late = float(times.max()) - hi
    if max(early, late) <= EXTRAPOLATE_LIMIT_H:
        return
    far = float(times.min()) if early >= late else float(times.max())
    day = (
        f" (`data` is of MJD {data_mjd}, the gains of MJD {mjd})"
        if mjd >= 0 and data_mjd != mjd
        else ""
    )
    raise ValueError(
        f"`data` has a timestamp {abs(far - (lo if early >= late else hi)):.4g} h "
        f"{'before' if early >= late else 'after'} these gains' intervals "
        f"[{lo - shift_h:.4g}, {hi - shift_h:.4g}] h{day}: they were not solved "
        "there, and the nearest interval's gains would be applied as if they were. "
        "Apply gains to the data they were solved on (or its other band, its "
        "unaveraged records), or pass `extrapolate=True` to carry the nearest "
        "interval's gains on purpose."
    )


def _mjd_leaf(mjd) -> Int[Array | np.ndarray, ""]:
    """`mjd` (a whole day number, or `None`: unknown, `-1`) as a 0-d int32 leaf."""
    if mjd is None:
        return np.asarray(-1, np.int32)
    if is_concrete(mjd):
        arr = np.asarray(mjd)
        if not np.issubdtype(arr.dtype, np.integer) or arr.shape != () or arr < 0:
            raise TypeError(
                f"`mjd` must be one whole day number ≥ 0 (a `VisData.mjd`), got {mjd!r}."
            )
        refuse_julian_date("mjd", arr)
        return np.asarray(arr, np.int32)
    return jnp.asarray(mjd, jnp.int32)
