"""`StationGains`: complex station gains per solution interval, as a module."""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int

from .._data._visdata import DEFAULT_SCAN_GAP_S, VisData
from .._numerics import asarray
from .._validation import is_concrete
from ._intervals import nearest_interval, solution_intervals


class StationGains(eqx.Module, strict=True):
    r"""Complex gains of every station in every solution interval,
    `g = exp(log_amp + i·phase)`, applied to model visibilities as

    `V_ab → g_a · conj(g_b) · V̂_ab`

    for a leg from station `a` to station `b` (the orientation of the leg's
    `(u, v)`, as a data term's `stations` records it). Gains are the *forward*
    corruption (true sky → measured data), eht-imaging's convention; calibrating
    data divides by them.

    The parameters are array leaves (`log_amp`, `phase`, shape
    `(n_intervals, n_stations)`) that `eqx.filter_grad` differentiates; the interval
    table (`slot_interval`, which interval each of the data set's time slots
    belongs to, and `bounds`, each interval's `[start, end]` in hours) is integer /
    float data built once on the host. Use [`eqmodels.StationGains.from_data`][] to
    build gains for a data set, [`eqmodels.GainCorrected`][] to put them in front
    of a data term, [`eqmodels.StationGains.at`][] to carry them to another data
    set (nearest interval in time, constant beyond the ends).
    """

    log_amp: Float[Array, "k s"]
    phase: Float[Array, "k s"]
    slot_interval: Int[Array, " t"]
    bounds: Float[Array, "k 2"]
    station_names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        log_amp: ArrayLike,
        phase: ArrayLike,
        slot_interval: ArrayLike,
        bounds: ArrayLike,
        station_names: Sequence[str],
    ):
        """**Arguments:**

        - `log_amp`: `ln|g|` per interval and station, shape `(n_intervals,
          n_stations)`.
        - `phase`: `arg g` (radians), same shape.
        - `slot_interval`: the interval of each time slot of the data set
          (`VisData.timestamps()` order), shape `(n_slots,)`, values in
          `[0, n_intervals)`.
        - `bounds`: each interval's `[start, end]` (hours), shape `(n_intervals, 2)`.
        - `station_names`: the data set's station table (column order).
        """
        names = tuple(station_names) if not isinstance(station_names, str) else ()
        if not names or not all(isinstance(s, str) for s in names):
            raise TypeError(
                "`station_names` must be a non-empty sequence of station codes, got "
                f"{station_names!r}."
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
            if si.ndim != 1 or si.size == 0 or not np.issubdtype(si.dtype, np.integer):
                raise ValueError(
                    "`slot_interval` must be a non-empty 1-d integer array (the "
                    f"interval of each time slot), got {si.dtype} {si.shape}."
                )
            if si.min() < 0 or si.max() >= k:
                raise ValueError(
                    f"`slot_interval` must lie in [0, {k}) (there are {k} intervals)."
                )
            slot_interval = si
        if is_concrete(bounds):
            b = np.asarray(bounds, np.float64)
            if (
                b.shape != (k, 2)
                or not np.all(np.isfinite(b))
                or np.any(b[:, 1] < b[:, 0])
            ):
                raise ValueError(
                    f"`bounds` must be finite `[start, end]` pairs (hours, start <= "
                    f"end), shape ({k}, 2), got {np.shape(bounds)}."
                )
            bounds = b
        self.log_amp, self.phase = arrays
        self.slot_interval = asarray(slot_interval, jnp.int32)
        self.bounds = asarray(bounds, jnp.float64 if dtype == np.float64 else dtype)
        self.station_names = names

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
        return cls(la, ph, slot, bounds, data.station_names)

    @property
    def n_intervals(self) -> int:
        """Number of solution intervals."""
        return int(self.log_amp.shape[0])

    @property
    def n_stations(self) -> int:
        """Number of stations (columns)."""
        return len(self.station_names)

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
        k = xp.asarray(self.slot_interval)[xp.where(t >= 0, t, 0)]
        a, b = xp.where(a >= 0, a, 0), xp.where(b >= 0, b, 0)
        la = log_amp[k, a] + log_amp[k, b]
        ph = phase[k, a] - phase[k, b]
        zero = xp.zeros((), la.dtype)
        la, ph = xp.where(known, la, zero), xp.where(known, ph, zero)
        if host:
            return asarray(np.exp(la) * (np.cos(ph) + 1j * np.sin(ph)))
        return jnp.exp(jax.lax.complex(la, ph))

    def apply(
        self,
        vis: Complex[Array, "*points"],
        stations: Int[ArrayLike, "*points 2"],
        time_index: Int[ArrayLike, " n"],
    ) -> Complex[Array, "*points"]:
        """The corrupted model visibilities `g_a conj(g_b) V̂_ab`.

        **Arguments:** `vis` (shaped like the points), each leg's `stations`
        `(*points, 2)` and each row's `time_index` `(n,)`.
        """
        f = self.factor(stations, time_index)
        return vis * f.astype(vis.dtype)

    # ------------------------------------------------------------ on data sets
    def at(self, data: VisData) -> "StationGains":
        """These gains on the time slots and station table of another data set
        (e.g. the other band, or the unaveraged data): each of its timestamps takes
        the interval that contains it, else the nearest interval in time (constant
        extrapolation beyond the ends); stations are matched by name, and a station
        these gains do not know gets gain 1.

        **Arguments:** `data`, a [`eqmodels.VisData`][].

        **Returns:** a `StationGains` whose `slot_interval` indexes `data`'s slots.
        """
        if not isinstance(data, VisData):
            raise TypeError(f"`data` must be a VisData, got {type(data).__name__}.")
        bounds = np.asarray(self.bounds)
        slot = nearest_interval(bounds, data.timestamps())
        cols = [
            self.station_names.index(s) if s in self.station_names else -1
            for s in data.station_names
        ]
        cols_arr = np.maximum(cols, 0)
        known = (np.asarray(cols) >= 0)[None, :]
        # On the host when concrete (no eager device programs), as `factor`.
        xp = np if is_concrete(self.log_amp) and is_concrete(self.phase) else jnp
        log_amp, phase = xp.asarray(self.log_amp), xp.asarray(self.phase)
        zero = xp.zeros((), log_amp.dtype)
        la = xp.where(known, log_amp[:, cols_arr], zero)
        ph = xp.where(known, phase[:, cols_arr], zero)
        return StationGains(la, ph, slot, bounds, data.station_names)

    def _row_factor(self, data: VisData) -> np.ndarray:
        g = self.at(data)
        st = np.stack([np.asarray(data.ant1), np.asarray(data.ant2)], axis=1)
        return np.asarray(g.factor(st, data.time_index))

    def corrupt(self, data: VisData) -> VisData:
        """`data` with the gains applied: `V → g_a conj(g_b) V`, `σ → |g_a g_b| σ`
        (looked up with [`eqmodels.StationGains.at`][]).

        **Arguments:** `data`, a [`eqmodels.VisData`][].
        """
        f = self._row_factor(data)
        return data.replace(
            vis=f * np.asarray(data.vis), sigma=np.abs(f) * np.asarray(data.sigma)
        )

    def calibrate(self, data: VisData) -> VisData:
        """`data` with the gains divided out: `V → V / (g_a conj(g_b))`,
        `σ → σ / |g_a g_b|` (so SNRs, and closure quantities, are unchanged).

        **Arguments:** `data`, a [`eqmodels.VisData`][].
        """
        f = self._row_factor(data)
        return data.replace(
            vis=np.asarray(data.vis) / f, sigma=np.asarray(data.sigma) / np.abs(f)
        )


def with_gains(tree, gains: StationGains):
    """`tree` (a term, an objective, any PyTree) with every `StationGains` inside it
    replaced by `gains`: how a joint image + gain solve puts its current gains into
    the objective (`with_gains(objective, gains)(image)`).

    **Arguments:** `tree`, any PyTree; `gains`, a [`eqmodels.StationGains`][].
    """
    if not isinstance(gains, StationGains):
        raise TypeError(f"`gains` must be a StationGains, got {type(gains).__name__}.")
    is_g = lambda x: isinstance(x, StationGains)  # noqa: E731
    return jax.tree_util.tree_map(lambda x: gains if is_g(x) else x, tree, is_leaf=is_g)
