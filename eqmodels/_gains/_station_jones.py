"""`StationJones`: per-station gains, leakage D-terms and field rotation, as a
module of 2×2 Jones matrices."""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Complex, Float, Int

from .._coherency import FEEDS, station_jones
from .._data._visdata import DEFAULT_SCAN_GAP_S, find_scans
from .._numerics import asarray
from .._terms._common import index_key_leaf
from .._validation import is_concrete
from ._intervals import check_interval, edge_hours
from ._jones_abstract import AbstractJones


class StationJones(AbstractJones):
    r"""Station Jones matrices `J = G D T Φ`, applied to the sky's coherency on a
    leg from station `a` to station `b` as

    `C_obs,ab = J_a C_ab J_bᴴ`,

    with, per station (eht-imaging's simulator, `make_jones`, term by term):

    - `G = diag(g_R, g_L)`: complex gains of the two feeds (R, L; X, Y for
      linear feeds) per solution interval,
      `g = exp(log_amp + i·phase)`;
    - `D = [[1, d_R], [d_L, 1]]`: leakage (D-terms), per station and
      leakage interval (the track, or each scan);
    - `T`: the feed basis, the identity for circular feeds,
      `[[1, 1], [−i, i]]/√2` for linear ones (see docs/polarimetry.md);
    - `Φ = diag(e^{−iφ}, e^{+iφ})`: field rotation by the angle `φ` of the
      station at that time (`fr_par·parallactic + fr_elev·elevation + offset`,
      what `PolVisData.field_rotation()` gives).

    For circular feeds `J = [[g_R e^{−iφ}, g_R d_R e^{iφ}], [g_L d_L e^{−iφ},
    g_L e^{iφ}]]`, eht-imaging's matrix exactly. With
    `field_rotation_corrected=True` (data whose field rotation was removed but
    not their leakage, eht-imaging's `frcal=True, dcal=False`),
    `J = R⁻¹ G D R T`, `R = T Φ Tᴴ`: the D-terms turn by twice the angle.

    The parameters are real array leaves (`log_amp`, `phase`, `(n_intervals,
    n_stations, 2)`; `d_real`, `d_imag`, `(n_dterm_intervals, n_stations, 2)`;
    the last axis is R, L) that `eqx.filter_grad` differentiates and the solvers
    move (`em.is_real_float_array`); the tables are integer, boolean or complex
    leaves that no solver moves: `slot_interval` and `slot_dterm` (the gain and
    leakage interval of each of the data set's time slots), `rotation`
    (`e^{iφ}` per time slot and station, `(n_slots, n_stations)`, a data
    quantity held as a complex leaf so that it is never fitted), `present` and
    `dterm_present` (where a station has data).

    Build it with [`eqmodels.StationJones.from_data`][]; put it in front of a
    polarimetric term with [`eqmodels.JonesCorrected`][]; solve it with the image
    through [`eqmodels.WithGains`][], with [`eqmodels.DTermPrior`][] and
    [`eqmodels.JonesGainPrior`][].
    """

    log_amp: Float[Array, "k s 2"]
    phase: Float[Array, "k s 2"]
    d_real: Float[Array, "kd s 2"]
    d_imag: Float[Array, "kd s 2"]
    slot_interval: Int[Array, " t"]
    slot_dterm: Int[Array, " t"]
    rotation: Complex[Array, "t s"]
    present: Bool[Array, "k s"]
    dterm_present: Bool[Array, "kd s"]
    index_key: Int[Array, ""]
    station_names: tuple[str, ...] = eqx.field(static=True)
    feeds: tuple[str, ...] = eqx.field(static=True)
    field_rotation_corrected: bool = eqx.field(static=True)

    def __init__(
        self,
        log_amp: ArrayLike,
        phase: ArrayLike,
        d_real: ArrayLike,
        d_imag: ArrayLike,
        slot_interval: ArrayLike,
        slot_dterm: ArrayLike,
        station_names: Sequence[str],
        *,
        field_rotation: ArrayLike | None = None,
        feeds: Sequence[str] | None = None,
        present: ArrayLike | None = None,
        dterm_present: ArrayLike | None = None,
        index_key: int | ArrayLike | None = None,
        field_rotation_corrected: bool = False,
    ):
        """**Arguments:**

        - `log_amp`, `phase`: `ln|g|` and `arg g` (radians) of the R and L (X, Y)
          gains, shape `(n_intervals, n_stations, 2)`.
        - `d_real`, `d_imag`: real and imaginary parts of `d_R`, `d_L`, shape
          `(n_dterm_intervals, n_stations, 2)`.
        - `slot_interval`, `slot_dterm`: the gain and leakage interval of each
          time slot of the data set (`timestamps()` order), shape `(n_slots,)`.
        - `station_names`: the data set's station table.
        - `field_rotation`: the field-rotation angle `φ` (radians) of each station
          at each time slot, `(n_slots, n_stations)`; default 0 (no rotation).
        - `feeds`: per station `"circular"` (default) or `"linear"`.
        - `present`, `dterm_present`: where each station has data (boolean,
          shaped like the gains' and the D-terms' first two axes); default all.
        - `index_key`: the fingerprint of the data set's time slots and station
          table (`data.index_key`), checked against the terms'; default unknown.
        - `field_rotation_corrected`: the data had their field rotation removed
          (but not their leakage): `J = R⁻¹ G D R T` (see above).
        """
        names = tuple(station_names) if not isinstance(station_names, str) else ()
        if not names or not all(isinstance(s, str) for s in names):
            raise TypeError(
                "`station_names` must be a non-empty sequence of station codes, got "
                f"{station_names!r}."
            )
        if len(set(names)) != len(names):
            raise ValueError("`station_names` names a station more than once.")
        names = tuple(str(x) for x in names)  # numpy strings are not static-safe
        n_st = len(names)
        if feeds is None:
            feeds = ("circular",) * n_st
        feeds = tuple(feeds) if not isinstance(feeds, str) else (feeds,) * n_st
        feeds = tuple(str(f) if isinstance(f, str) else f for f in feeds)
        if len(feeds) != n_st or any(f not in FEEDS for f in feeds):
            raise ValueError(
                f"`feeds` must give one of {FEEDS} per station ({n_st} stations), "
                f"got {feeds!r}."
            )
        dtype = jnp.result_type(float)
        arrays = []
        for name, x in (
            ("log_amp", log_amp),
            ("phase", phase),
            ("d_real", d_real),
            ("d_imag", d_imag),
        ):
            if is_concrete(x):
                arr = np.asarray(x)
                if np.iscomplexobj(arr) or not np.issubdtype(arr.dtype, np.number):
                    raise TypeError(
                        f"`{name}` must be real, got dtype {arr.dtype}"
                        + (
                            " (give complex D-terms or gains to `from_data`, or "
                            "their real and imaginary parts here)."
                            if np.iscomplexobj(arr)
                            else "."
                        )
                    )
                if arr.ndim != 3 or arr.shape[1:] != (n_st, 2):
                    raise ValueError(
                        f"`{name}` must have shape (n_intervals, {n_st}, 2) (one "
                        f"column per station, R and L last), got {arr.shape}."
                    )
                if not np.all(np.isfinite(arr)):
                    raise ValueError(f"`{name}` has non-finite values.")
                x = arr.astype(dtype) if np.issubdtype(arr.dtype, np.integer) else arr
            arrays.append(asarray(x))
        if arrays[0].shape != arrays[1].shape or arrays[2].shape != arrays[3].shape:
            raise ValueError(
                "`log_amp` and `phase`, and `d_real` and `d_imag`, must have the same "
                f"shapes, got {arrays[0].shape}, {arrays[1].shape}, "
                f"{arrays[2].shape}, {arrays[3].shape}."
            )
        k, kd = arrays[0].shape[0], arrays[2].shape[0]
        slots = []
        for name, x, top in (
            ("slot_interval", slot_interval, k),
            ("slot_dterm", slot_dterm, kd),
        ):
            if is_concrete(x):
                si = np.asarray(x)
                if (
                    si.ndim != 1
                    or si.size == 0
                    or not np.issubdtype(si.dtype, np.integer)
                ):
                    raise ValueError(
                        f"`{name}` must be a non-empty integer array of shape "
                        f"(n_slots,), got {si.dtype} {si.shape}."
                    )
                if si.min() < 0 or si.max() >= top:
                    raise ValueError(
                        f"`{name}` must lie in [0, {top}) (there are {top} intervals)."
                    )
                x = si
            slots.append(asarray(x, jnp.int32))
        n_slots = slots[0].shape[0]
        if slots[1].shape != (n_slots,):
            raise ValueError(
                f"`slot_interval` {slots[0].shape} and `slot_dterm` {slots[1].shape} "
                "must cover the same time slots."
            )
        if field_rotation is None:
            field_rotation = np.zeros((n_slots, n_st))
        if is_concrete(field_rotation):
            fr = np.asarray(field_rotation)
            if fr.shape != (n_slots, n_st) or np.iscomplexobj(fr):
                raise ValueError(
                    "`field_rotation` must be real angles (radians) of shape "
                    f"(n_slots, n_stations) = ({n_slots}, {n_st}), got {fr.dtype} "
                    f"{fr.shape}; for per-row angles `(n, 2)` use `from_data`."
                )
            if not np.all(np.isfinite(fr)):
                raise ValueError("`field_rotation` has non-finite values.")
            ctype = np.complex128 if dtype == np.float64 else np.complex64
            rotation = asarray(np.exp(1j * fr.astype(np.float64)).astype(ctype))
        else:
            rotation = jnp.exp(1j * jnp.asarray(field_rotation))
        masks = []
        for name, x, rows in (
            ("present", present, k),
            ("dterm_present", dterm_present, kd),
        ):
            if x is None:
                x = np.ones((rows, n_st), bool)
            elif is_concrete(x):
                x = np.asarray(x)
                if x.shape != (rows, n_st) or x.dtype != np.bool_:
                    raise ValueError(
                        f"`{name}` must be a boolean array of shape ({rows}, {n_st}),"
                        f" got {x.dtype} {x.shape}."
                    )
            masks.append(asarray(x, bool))
        self.log_amp, self.phase, self.d_real, self.d_imag = arrays
        self.slot_interval, self.slot_dterm = slots
        self.rotation = rotation
        self.present, self.dterm_present = masks
        self.index_key = index_key_leaf(index_key)
        self.station_names = names
        self.feeds = feeds
        self.field_rotation_corrected = bool(field_rotation_corrected)

    @classmethod
    def from_data(
        cls,
        data,
        interval: str | float | int = "scan",
        dterm_interval: str = "track",
        *,
        field_rotation: ArrayLike | float | None = None,
        feeds: Sequence[str] | None = None,
        gains: ArrayLike | None = None,
        dterms: ArrayLike | None = None,
        field_rotation_corrected: bool = False,
        scan_gap: float | int = DEFAULT_SCAN_GAP_S,
    ) -> "StationJones":
        """Jones matrices for the time slots and stations of a data set (gains 1
        and D-terms 0 by default).

        **Arguments:**

        - `data`: a polarimetric data set (`PolVisData`), or anything with `time`,
          `time_index`, `ant1`, `ant2`, `station_names`, `timestamps()` (a
          `VisData` too).
        - `interval`: the gains' solution interval: `"scan"`, `"timestamp"`,
          `"track"` or seconds (as [`eqmodels.solution_intervals`][]).
        - `dterm_interval`: the D-terms': `"track"` (default) or `"scan"`.
        - `field_rotation`: each row's field-rotation angles `(n, 2)` (radians, for
          `ant1` and `ant2`); default `data.field_rotation()` when the data has
          it, else 0. Rows of one time slot must agree per station.
        - `feeds`: per station `"circular"` or `"linear"`; default `data.feeds`
          when the data has it, else circular.
        - `gains`: initial complex gains `(n_intervals, n_stations, 2)` (R, L).
        - `dterms`: initial complex D-terms `(n_dterm_intervals, n_stations, 2)`.
        - `field_rotation_corrected`: as in the constructor.
        - `scan_gap`: the gap (s) separating scans.
        """
        for name in ("time", "time_index", "ant1", "ant2", "station_names"):
            if not hasattr(data, name):
                raise TypeError(
                    "`data` must be a polarimetric data set (`PolVisData`) or a "
                    f"`VisData`; got {type(data).__name__}, which has no `{name}`."
                )
        if dterm_interval not in ("track", "scan"):
            raise ValueError(
                f"`dterm_interval` must be 'track' or 'scan', got {dterm_interval!r}."
            )
        stamps = getattr(data, "timestamps", None)
        ts = np.asarray(stamps() if callable(stamps) else np.unique(data.time))
        ti = np.asarray(data.time_index)
        if ti.size and (ti.min() < 0 or ti.max() >= ts.size):
            raise ValueError(
                f"`data.time_index` points outside its {ts.size} timestamps: a data "
                "set's time slots index its distinct timestamps."
            )
        a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
        names = tuple(data.station_names)
        n_st = len(names)
        slot, k = _intervals(ts, interval, scan_gap)
        dslot, kd = _intervals(ts, dterm_interval, scan_gap)
        if feeds is None:
            feeds = getattr(data, "feeds", None)
        if field_rotation is None and callable(getattr(data, "field_rotation", None)):
            field_rotation = data.field_rotation()
        table = np.zeros((ts.size, n_st))
        if field_rotation is not None:
            table = _rotation_table(field_rotation, ti, a1, a2, ts.size, n_st)
        log_amp, phase = np.zeros((k, n_st, 2)), np.zeros((k, n_st, 2))
        if gains is not None:
            g = np.asarray(gains)
            if g.shape != (k, n_st, 2) or not np.all(np.isfinite(g)) or np.any(g == 0):
                raise ValueError(
                    f"`gains` must be finite, non-zero, of shape ({k}, {n_st}, 2) "
                    f"for interval={interval!r}, got {g.shape}."
                )
            log_amp, phase = np.log(np.abs(g)), np.angle(g)
        d = np.zeros((kd, n_st, 2), complex)
        if dterms is not None:
            d = np.asarray(dterms)
            if d.shape != (kd, n_st, 2) or not np.all(np.isfinite(d)):
                raise ValueError(
                    f"`dterms` must be finite, of shape ({kd}, {n_st}, 2) for "
                    f"dterm_interval={dterm_interval!r}, got {d.shape}."
                )
            d = d.astype(complex)
        present = _presence(slot[ti], a1, a2, k, n_st)
        dpresent = _presence(dslot[ti], a1, a2, kd, n_st)
        return cls(
            log_amp,
            phase,
            d.real.copy(),
            d.imag.copy(),
            slot,
            dslot,
            names,
            field_rotation=table,
            feeds=feeds,
            present=present,
            dterm_present=dpresent,
            index_key=getattr(data, "index_key", None),
            field_rotation_corrected=field_rotation_corrected,
        )

    @property
    def n_intervals(self) -> int:
        """Number of gain solution intervals."""
        return int(self.log_amp.shape[0])

    @property
    def n_dterm_intervals(self) -> int:
        """Number of leakage intervals."""
        return int(self.d_real.shape[0])

    @property
    def n_time_slots(self) -> int:
        """Number of the data set's time slots covered."""
        return int(self.slot_interval.shape[0])

    def complex_gains(self) -> Complex[Array, "k s 2"]:
        """The gains `exp(log_amp + i·phase)`, `(n_intervals, n_stations, 2)`."""
        return jnp.exp(jax.lax.complex(self.log_amp, self.phase))

    def dterms(self) -> Complex[Array, "kd s 2"]:
        """The D-terms `d_R`, `d_L`, `(n_dterm_intervals, n_stations, 2)`."""
        return jax.lax.complex(self.d_real, self.d_imag)

    def field_rotation(self) -> Float[Array, "t s"]:
        """The field-rotation angles (radians, wrapped to `(−π, π]`) per time slot
        and station."""
        return jnp.angle(self.rotation)

    def matrices(
        self,
        stations: Int[ArrayLike, "*points 2"],
        time_index: Int[ArrayLike, " n"],
    ) -> Complex[Array, "*points 2 2 2"]:
        """`J_a` and `J_b` of every leg (see the class docstring); a leg with an
        unknown station or time slot (`-1`) gets identity matrices.

        **Arguments:** each leg's `stations` `(*points, 2)` and each row's
        `time_index` `(n,)`.

        **Returns:** `(*points, 2, 2, 2)`, `[..., 0, :, :]` = `J_a`.
        """
        stations = jnp.asarray(stations)
        points = stations.shape[:-1]
        t = jnp.asarray(time_index).reshape(points[:1] + (1,) * (len(points) - 1))
        t = jnp.broadcast_to(t, points)
        known = (t >= 0) & jnp.all(stations >= 0, axis=-1)
        t = jnp.where(known, t, 0)
        s = jnp.where(known[..., None], stations, 0)
        g = self.complex_gains()[self.slot_interval[t][..., None], s]  # (*p, 2, 2)
        d = self.dterms()[self.slot_dterm[t][..., None], s]
        e = jax.lax.stop_gradient(self.rotation)[t[..., None], s]  # (*p, 2)
        linear = np.asarray([f == "linear" for f in self.feeds])
        lin = jnp.asarray(linear)[s] if linear.any() else None
        j = station_jones(
            g, d, e, lin, field_rotation_corrected=self.field_rotation_corrected
        )
        one = jnp.ones_like(g[..., 0])
        zero = jnp.zeros_like(g[..., 0])
        eye = jnp.stack([jnp.stack([one, zero], -1), jnp.stack([zero, one], -1)], -2)
        return jnp.where(known[..., None, None, None], j, eye)


def _intervals(ts: np.ndarray, interval, scan_gap) -> tuple[np.ndarray, int]:
    """Each time slot's interval (as [`eqmodels.solution_intervals`][], from the
    sorted distinct timestamps `ts`) and the number of intervals."""
    interval = check_interval(interval)
    if interval == "timestamp":
        return np.arange(ts.size), int(ts.size)
    if interval == "track":
        return np.zeros(ts.size, np.int64), 1
    if interval == "scan":
        scans = find_scans(ts, scan_gap)[0]
        slot = np.searchsorted(scans[:, 0], ts, side="right") - 1
        return slot.astype(np.int64), int(scans.shape[0])
    bins = np.floor(edge_hours(ts) / (interval / 3600.0)).astype(np.int64)
    used, slot = np.unique(bins, return_inverse=True)
    return slot.reshape(-1).astype(np.int64), int(used.size)


def _presence(k, a1, a2, n, n_st) -> np.ndarray:
    out = np.zeros((n, n_st), bool)
    out[k, a1] = True
    out[k, a2] = True
    return out


def _rotation_table(fr, ti, a1, a2, n_slots, n_st) -> np.ndarray:
    """Per-row angles `(n, 2)` as a table `(n_slots, n_stations)`; rows of one time
    slot must agree per station (to 1e-6 rad, modulo 2π)."""
    fr = np.asarray(fr, np.float64)
    if np.ndim(fr) == 0:
        return np.full((n_slots, n_st), float(fr))
    if fr.shape != (ti.size, 2) or not np.all(np.isfinite(fr)):
        raise ValueError(
            f"`field_rotation` must be finite angles (radians) of shape (n, 2) = "
            f"({ti.size}, 2), one per row and station (ant1, ant2), got {fr.shape}."
        )
    table = np.zeros((n_slots, n_st))
    table[ti, a1] = fr[:, 0]
    table[ti, a2] = fr[:, 1]
    for col, ant in ((0, a1), (1, a2)):
        gap = np.angle(np.exp(1j * (fr[:, col] - table[ti, ant])))
        if np.any(np.abs(gap) > 1e-6):
            i = int(np.argmax(np.abs(gap)))
            raise ValueError(
                f"`field_rotation` gives station {int(ant[i])} two angles at time "
                f"slot {int(ti[i])} (rows disagree by {abs(gap[i]):.3g} rad): one "
                "angle per station and time (`data.field_rotation()`)."
            )
    return table
