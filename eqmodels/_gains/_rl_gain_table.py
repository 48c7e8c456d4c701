"""`RLGainTable`: the ratio of the R to the L gain of every station per
interval, as [`eqmodels.polgains_calibrate`][] solves it."""

import equinox as eqx
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Complex, Float

from .._data._polvisdata import check_polvisdata
from .._numerics import asarray
from ._intervals import edge_hours, nearest_interval


class RLGainTable(eqx.Module):
    """R/L gain ratios `g = g_R / g_L` per interval and station (the reference
    station and the stations not solved: 1), applied to circular-feed data as

    `RR → RR / (g_a ḡ_b)`, `RL → RL / g_a`, `LR → LR / ḡ_b`, `LL → LL`

    (eht-imaging's `polgains_cal`: the R feeds aligned on the L feeds), each σ
    divided by the same modulus.

    - `ratios`: complex `(n_intervals, n_stations)`.
    - `solved`: boolean `(n_intervals, n_stations)`.
    - `bounds`: `(n_intervals, 2)` start and end (hours of the day `mjd`).
    - `station_names`, `reference` (the station held at 1), `mjd`.
    """

    ratios: Complex[Array, "k s"]
    solved: Bool[Array, "k s"]
    bounds: Float[Array, "k 2"]
    station_names: tuple[str, ...] = eqx.field(static=True)
    reference: str = eqx.field(static=True)
    mjd: int = eqx.field(static=True)

    def __init__(
        self,
        ratios: ArrayLike,
        solved: ArrayLike,
        bounds: ArrayLike,
        station_names,
        *,
        reference: str = "",
        mjd: int = -1,
    ):
        """**Arguments:** the fields above."""
        names = tuple(str(s) for s in station_names)
        r = np.asarray(ratios)
        if r.ndim != 2 or r.shape[1] != len(names):
            raise ValueError(
                f"`ratios` must have shape (n_intervals, {len(names)}), got {r.shape}."
            )
        if not np.all(np.isfinite(r)) or np.any(r == 0):
            raise ValueError("`ratios` must be finite and non-zero.")
        sv = np.asarray(solved)
        if sv.shape != r.shape or sv.dtype != bool:
            raise ValueError(f"`solved` must be boolean of shape {r.shape}.")
        b = np.asarray(bounds, np.float64)
        if b.shape != (r.shape[0], 2):
            raise ValueError(f"`bounds` must have shape ({r.shape[0]}, 2).")
        self.ratios = asarray(r.astype(np.complex128))
        self.solved = asarray(sv)
        self.bounds = asarray(b)
        self.station_names = names
        self.reference = str(reference)
        self.mjd = int(mjd)

    def row_ratios(self, data) -> np.ndarray:
        """`(n, 2)`: the ratio of each row's two stations (1 where not solved),
        per station from the interval holding the row's time, else the nearest
        solved one (same day only, unless the table has one interval)."""
        check_polvisdata(data)
        if self.ratios.shape[0] > 1 and data.mjd != self.mjd:
            raise ValueError(
                f"these R/L gains were solved per interval on MJD {self.mjd}; "
                f"`data` is of MJD {data.mjd}: they apply to their own day."
            )
        r, solved = np.asarray(self.ratios), np.asarray(self.solved)
        bounds = np.asarray(self.bounds)
        ts = edge_hours(data.timestamps())
        per_slot = np.ones((ts.size, data.n_stations), np.complex128)
        for j, s in enumerate(data.station_names):
            if s not in self.station_names:
                continue
            c = self.station_names.index(s)
            ks = np.flatnonzero(solved[:, c])
            if ks.size:
                per_slot[:, j] = r[ks[nearest_interval(bounds[ks], ts)], c]
        ti = np.asarray(data.time_index)
        return np.stack(
            [per_slot[ti, np.asarray(data.ant1)], per_slot[ti, np.asarray(data.ant2)]],
            axis=1,
        )

    def calibrate(self, data):
        """`data` (a [`eqmodels.PolVisData`][] of circular feeds) with the
        ratios divided out (see the class)."""
        g = self.row_ratios(data)
        f = np.stack(
            [g[:, 0] * np.conj(g[:, 1]), np.ones(len(g)), g[:, 0], np.conj(g[:, 1])],
            axis=1,
        )
        return data.replace(
            corr=np.asarray(data.corr) / f, sigma=np.asarray(data.sigma) / np.abs(f)
        )

    def to_dict(self) -> dict:
        """`{station: [(start_h, end_h, ratio), ...]}` over the solved
        intervals."""
        r, solved, b = (np.asarray(x) for x in (self.ratios, self.solved, self.bounds))
        out = {}
        for j, s in enumerate(self.station_names):
            ks = np.flatnonzero(solved[:, j])
            if ks.size:
                out[s] = [
                    (float(b[k, 0]), float(b[k, 1]), complex(r[k, j])) for k in ks
                ]
        return out

    def __str__(self) -> str:
        r, solved, b = (np.asarray(x) for x in (self.ratios, self.solved, self.bounds))
        lines = [
            f"RLGainTable: reference {self.reference}, {r.shape[0]} interval(s), "
            f"MJD {self.mjd}",
            f"  {'station':8s}{'interval (h)':>17s}  {'|g_R/g_L|':>9s} {'phase':>8s}",
        ]
        for j, s in enumerate(self.station_names):
            for k in np.flatnonzero(solved[:, j]):
                lines.append(
                    f"  {s:8s}{b[k, 0]:8.3f}–{b[k, 1]:<8.3f}  {abs(r[k, j]):9.4f} "
                    f"{np.degrees(np.angle(r[k, j])):7.2f}°"
                )
        return "\n".join(lines)
