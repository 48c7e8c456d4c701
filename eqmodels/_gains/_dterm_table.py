"""`DTermTable`: leakage D-terms per station and interval, as
[`eqmodels.leakage_calibrate`][] solves them, to remove from (or add to) any
polarimetric data set.

The leakage enters the recorded correlations of circular feeds as
`C_obs,ab = D'_a C_ab D'_bᴴ` with, per station,

`D' = [[1, d_R w], [d_L w̄, 1]]`,

`w = e^{2iφ}` (`φ` the station's field-rotation angle at that time) for data
whose field rotation was removed but not their leakage (`"corrected"`, the EHT's
released files, eht-imaging's `frcal=True`), `w = 1` for `"none"` (no field
rotation anywhere). Calibration applies the exact inverse `D'⁻¹` on both sides,
and propagates the σ of each correlation as eht-imaging's `apply_jones_inverse`
does: `σ'²_ij = Σ_kl |M_a,ik|² σ²_kl |M_b,jl|²`, `M = D'⁻¹`.
"""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Complex, Float

from .._compile import run_once_jit
from .._data._polvisdata import check_polvisdata, PolVisData
from .._numerics import asarray
from ._intervals import edge_hours, nearest_interval
from ._station_jones import StationJones


#: How the data carry the field rotation (as `observe`'s `field_rotation`).
FIELD_ROTATION_MODES = ("corrected", "raw", "none")


def _leak_matrix(d, w, inverse: bool):
    """`D'` (or its inverse) per entry, `(..., 2, 2)`, from `d` `(..., 2)` (R, L)
    and `w` `(...)` (`e^{2iφ}`)."""
    r = d[..., 0] * w
    left = d[..., 1] * jnp.conj(w)
    one = jnp.ones_like(r)
    if not inverse:
        return jnp.stack([jnp.stack([one, r], -1), jnp.stack([left, one], -1)], -2)
    pref = 1.0 / (1.0 - r * left)
    return pref[..., None, None] * jnp.stack(
        [jnp.stack([one, -r], -1), jnp.stack([-left, one], -1)], -2
    )


def _mm(a, b):
    """Batched 2×2 products (real or complex), written out."""
    return jnp.stack(
        [
            jnp.stack(
                [
                    a[..., i, 0] * b[..., 0, j] + a[..., i, 1] * b[..., 1, j]
                    for j in range(2)
                ],
                -1,
            )
            for i in range(2)
        ],
        -2,
    )


def _as_matrix(x):
    """File order `(RR, LL, RL, LR)` `(..., 4)` → `[[RR, RL], [LR, LL]]`."""
    return jnp.stack(
        [jnp.stack([x[..., 0], x[..., 2]], -1), jnp.stack([x[..., 3], x[..., 1]], -1)],
        -2,
    )


def _as_file(m):
    return jnp.stack([m[..., 0, 0], m[..., 1, 1], m[..., 0, 1], m[..., 1, 0]], -1)


def leakage_transform(corr, var, da, db, wa, wb, inverse: bool = True):
    """`M_a C M_bᴴ` and `Σ_kl |M_a,ik|² var_kl |M_b,jl|²` per row, with
    `M = D'⁻¹` (`inverse`) or `D'`: the correlations `(n, 4)` (file order) and
    their variances after removing (adding) the leakage `da`, `db` `(n, 2)` of
    each row's two stations, rotated by `wa`, `wb` `(n,)` (`e^{2iφ}`)."""
    ma = _leak_matrix(da, wa, inverse)
    mb = _leak_matrix(db, wb, inverse)
    out = _mm(_mm(ma, _as_matrix(corr)), jnp.conj(jnp.swapaxes(mb, -1, -2)))
    aa = ma.real**2 + ma.imag**2
    bb = mb.real**2 + mb.imag**2
    v = _mm(_mm(aa, _as_matrix(var)), jnp.swapaxes(bb, -1, -2))
    return _as_file(out), _as_file(v)


@run_once_jit
def _transform_flagged(corr, var, flag, da, db, wa, wb, inverse):
    # Flagged entries enter as 0; an output entry that depends on one (a
    # non-zero coefficient) is flagged.
    c = jnp.where(flag, 0.0, corr)
    s = jnp.where(flag, 0.0, var)
    out, v = leakage_transform(c, s, da, db, wa, wb, inverse)
    _, dep = leakage_transform(c, flag.astype(var.dtype), da, db, wa, wb, inverse)
    return out, v, dep > 0


def derotate(corr, e1, e2):
    """Correlations `(n, 4)` with the field rotation `Φ` (`e = e^{iφ}` of each
    row's two stations) removed: `Φ_a⁻¹ C Φ_b⁻ᴴ`."""
    return np.stack(
        [
            corr[:, 0] * e1 * np.conj(e2),
            corr[:, 1] * np.conj(e1) * e2,
            corr[:, 2] * e1 * e2,
            corr[:, 3] * np.conj(e1) * np.conj(e2),
        ],
        axis=1,
    )


def rotation_weights(data: PolVisData, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """`(w, e)`: `e^{2iφ}` and `e^{iφ}` of each row's two stations `(n, 2)`
    (ones for `"none"`)."""
    if mode == "none":
        one = np.ones((data.n_rows, 2), np.complex128)
        return one, one
    phi = data.field_rotation()
    return np.exp(2j * phi), np.exp(1j * phi)


class DTermTable(eqx.Module):
    """Leakage D-terms `d_R`, `d_L` of every station in every leakage interval
    (the track, each scan, or bins of some seconds), and how they enter the
    data (`field_rotation`, see [`eqmodels.leakage_calibrate`][]).

    What [`eqmodels.leakage_calibrate`][] returns; apply it to other data (the
    other band, another day) with [`eqmodels.DTermTable.calibrate`][], print it
    (`print(table)`: one line per station and interval), or read it as a dict
    ([`eqmodels.DTermTable.to_dict`][]).

    - `dterms`: complex `(n_intervals, n_stations, 2)`, `[..., 0]` = `d_R`,
      `[..., 1]` = `d_L`; 0 where not solved.
    - `solved`: boolean `(n_intervals, n_stations)`: which were fitted.
    - `bounds`: `(n_intervals, 2)`, each interval's start and end (hours of the
      day `mjd`).
    - `station_names`, `interval` (`"track"`, `"scan"` or seconds),
      `field_rotation`, `mjd`, `freq` (Hz, of the data solved on).
    """

    dterms: Complex[Array, "k s 2"]
    solved: Bool[Array, "k s"]
    bounds: Float[Array, "k 2"]
    station_names: tuple[str, ...] = eqx.field(static=True)
    interval: str | float = eqx.field(static=True)
    field_rotation: str = eqx.field(static=True)
    mjd: int = eqx.field(static=True)
    freq: float = eqx.field(static=True)

    def __init__(
        self,
        dterms: ArrayLike,
        solved: ArrayLike,
        bounds: ArrayLike,
        station_names,
        *,
        interval: str | float = "track",
        field_rotation: str = "corrected",
        mjd: int = -1,
        freq: float = 0.0,
    ):
        """**Arguments:** the fields above (`dterms` complex
        `(n_intervals, n_stations, 2)`, `solved` boolean `(n_intervals,
        n_stations)`, `bounds` `(n_intervals, 2)` hours)."""
        names = tuple(str(s) for s in station_names)
        d = np.asarray(dterms)
        if d.ndim != 3 or d.shape[1:] != (len(names), 2):
            raise ValueError(
                f"`dterms` must have shape (n_intervals, {len(names)}, 2) (R, L "
                f"last), got {d.shape}."
            )
        if not np.all(np.isfinite(d)):
            raise ValueError("`dterms` has non-finite values.")
        sv = np.asarray(solved)
        if sv.shape != d.shape[:2] or sv.dtype != bool:
            raise ValueError(
                f"`solved` must be boolean of shape {d.shape[:2]}, got {sv.dtype} "
                f"{sv.shape}."
            )
        b = np.asarray(bounds, np.float64)
        if b.shape != (d.shape[0], 2):
            raise ValueError(
                f"`bounds` must have shape ({d.shape[0]}, 2), got {b.shape}."
            )
        if field_rotation not in FIELD_ROTATION_MODES:
            raise ValueError(
                f"`field_rotation` must be one of {list(FIELD_ROTATION_MODES)}, "
                f"got {field_rotation!r}."
            )
        self.dterms = asarray(d.astype(np.complex128))
        self.solved = asarray(sv)
        self.bounds = asarray(b)
        self.station_names = names
        self.interval = interval if isinstance(interval, str) else float(interval)
        self.field_rotation = field_rotation
        self.mjd = int(mjd)
        self.freq = float(freq)

    @property
    def n_intervals(self) -> int:
        """Number of leakage intervals."""
        return int(self.dterms.shape[0])

    # ------------------------------------------------------------ lookup
    def row_dterms(self, data) -> np.ndarray:
        """The D-terms of each row's two stations in `data`, `(n, 2, 2)`
        complex numpy (`[:, 0]` station `ant1`, `[:, 1]` `ant2`; R, L last):
        stations matched by name (0 for a station the table does not solve);
        a track table serves any data set, a table of several intervals the data
        of its own day (`mjd`), per station from the interval that contains the
        row's time, else the nearest one where that station was solved."""
        check_polvisdata(data)
        d = np.asarray(self.dterms)
        solved = np.asarray(self.solved)
        bounds = np.asarray(self.bounds)
        cols = [
            self.station_names.index(s) if s in self.station_names else -1
            for s in data.station_names
        ]
        ts = data.timestamps()
        per_slot = np.zeros((ts.size, len(cols), 2), np.complex128)
        if self.n_intervals > 1 and data.mjd != self.mjd:
            raise ValueError(
                f"these D-terms were solved per {self.interval!r} interval on MJD "
                f"{self.mjd}; `data` is of MJD {data.mjd}: per-interval D-terms "
                "apply to their own day. Solve with `interval='track'` to carry "
                "D-terms to another day."
            )
        times = edge_hours(ts)
        for j, c in enumerate(cols):
            if c < 0:
                continue
            ks = np.flatnonzero(solved[:, c])
            if ks.size:
                k = ks[nearest_interval(bounds[ks], times)]
                per_slot[:, j] = d[k, c]
        ti = np.asarray(data.time_index)
        a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
        return np.stack([per_slot[ti, a1], per_slot[ti, a2]], axis=1)

    def _transform(self, data, inverse: bool) -> PolVisData:
        check_polvisdata(data)
        if any(f != "circular" for f in data.feeds):
            raise ValueError(
                "`data` has linear feeds: D-term tables apply to circular feeds "
                "(R, L) only."
            )
        d = self.row_dterms(data)
        w, e = rotation_weights(data, self.field_rotation)
        corr = np.asarray(data.corr)
        if self.field_rotation == "raw" and inverse:
            corr = derotate(corr, e[:, 0], e[:, 1])
        flag = np.asarray(data.flag)
        out, var, dep = _transform_flagged(
            asarray(corr),
            asarray(np.asarray(data.sigma) ** 2),
            asarray(flag),
            asarray(d[:, 0]),
            asarray(d[:, 1]),
            asarray(w[:, 0]),
            asarray(w[:, 1]),
            inverse,
        )
        out, sig, dep = np.asarray(out), np.sqrt(np.asarray(var)), np.asarray(dep)
        if not inverse:
            sig = np.asarray(data.sigma)
            if self.field_rotation == "raw":
                out = derotate(out, np.conj(e[:, 0]), np.conj(e[:, 1]))
        out = np.where(dep, np.nan, out)
        sig = np.where(dep, np.nan, sig)
        keep = ~dep.all(axis=1)
        return data.replace(corr=out, sigma=sig, flag=dep).take(keep)

    def calibrate(self, data) -> PolVisData:
        """`data` with these D-terms removed: `C → D'_a⁻¹ C D'_b⁻ᴴ` and σ
        propagated (see the module docs), looked up with
        [`eqmodels.DTermTable.row_dterms`][]. With `field_rotation="raw"` the
        field rotation is removed first (the result carries none, as
        eht-imaging's). A correlation that depends on a flagged one is flagged
        (a row whose four become flagged is dropped).

        **Arguments:** `data`, a [`eqmodels.PolVisData`][] of circular feeds
        (another band, another day for a track table).
        """
        return self._transform(data, inverse=True)

    def corrupt(self, data) -> PolVisData:
        """`data` with these D-terms added, `C → D'_a C D'_bᴴ` (σ unchanged):
        the inverse of [`eqmodels.DTermTable.calibrate`][], for simulations."""
        return self._transform(data, inverse=False)

    def jones(
        self,
        data,
        interval: str | float | int = "scan",
    ) -> StationJones:
        """A [`eqmodels.StationJones`][] on `data` holding these D-terms (per
        track: a track table only) and gains 1 per `interval`, with this table's
        field rotation: the start of a joint solve of image, gains and D-terms
        (see docs/polarimetry.md).

        **Arguments:** `data`, a [`eqmodels.PolVisData`][]; `interval`, the
        gains' solution interval (as [`eqmodels.StationJones.from_data`][])."""
        if self.n_intervals != 1:
            raise ValueError(
                "`jones` builds track D-terms: this table has "
                f"{self.n_intervals} intervals ({self.interval!r}); solve with "
                "`interval='track'`."
            )
        if self.field_rotation == "raw":
            raise ValueError(
                "`jones` models data whose field rotation was removed ('corrected') "
                "or never present ('none'): calibrate 'raw' data first."
            )
        check_polvisdata(data)
        row = np.asarray(self.dterms)[0]
        d = np.zeros((1, data.n_stations, 2), np.complex128)
        for j, s in enumerate(data.station_names):
            if s in self.station_names:
                d[0, j] = row[self.station_names.index(s)]
        kw = {}
        if self.field_rotation == "none":
            kw["field_rotation"] = 0.0
        return StationJones.from_data(
            data,
            interval,
            "track",
            dterms=d,
            field_rotation_corrected=self.field_rotation == "corrected",
            **kw,
        )

    # ------------------------------------------------------------ reading
    def to_dict(self) -> dict:
        """The solved D-terms as a dict: for a track table
        `{station: (d_R, d_L)}` (Python complex numbers; the form
        [`eqmodels.observe`][]'s `dterms=` takes), else
        `{station: [(start_h, end_h, d_R, d_L), ...]}` over the intervals
        where the station was solved."""
        d = np.asarray(self.dterms)
        solved = np.asarray(self.solved)
        b = np.asarray(self.bounds)
        out = {}
        for j, s in enumerate(self.station_names):
            ks = np.flatnonzero(solved[:, j])
            if not ks.size:
                continue
            if self.n_intervals == 1:
                out[s] = (complex(d[0, j, 0]), complex(d[0, j, 1]))
            else:
                out[s] = [
                    (float(b[k, 0]), float(b[k, 1]), complex(d[k, j, 0]),
                     complex(d[k, j, 1]))
                    for k in ks
                ]  # fmt: skip
        return out

    def __str__(self) -> str:
        d = np.asarray(self.dterms)
        solved = np.asarray(self.solved)
        b = np.asarray(self.bounds)
        head = (
            f"DTermTable: {int(solved.any(axis=0).sum())} stations, "
            f"{self.n_intervals} interval(s) ({self.interval!r}), field rotation "
            f"{self.field_rotation!r}, MJD {self.mjd}, {self.freq / 1e9:.4f} GHz"
        )
        lines = [
            head,
            f"  {'station':8s}{'interval (h)':>17s}  {'d_R':>18s} {'|d_R|':>7s}  "
            f"{'d_L':>18s} {'|d_L|':>7s}",
        ]

        def c(z):
            return f"{z.real:+.4f}{z.imag:+.4f}j"

        for j, s in enumerate(self.station_names):
            for k in np.flatnonzero(solved[:, j]):
                r, left = d[k, j]
                lines.append(
                    f"  {s:8s}{b[k, 0]:8.3f}–{b[k, 1]:<8.3f}  {c(r):>18s} "
                    f"{abs(r):7.4f}  {c(left):>18s} {abs(left):7.4f}"
                )
        return "\n".join(lines)

    def __repr__(self) -> str:
        solved = np.asarray(self.solved).any(axis=0)
        names = [s for s, ok in zip(self.station_names, solved) if ok]
        return (
            f"DTermTable(stations={names}, "
            f"n_intervals={self.n_intervals}, interval={self.interval!r}, "
            f"field_rotation={self.field_rotation!r})"
        )
