"""Integrity checks of a uvfits file against the geometry it states (issue 41).

A uvfits file states its geometry several times over: the stations' positions
(the `AIPS AN` table's `STABXYZ`, ITRF metres), the source's position (`OBSRA`,
`OBSDEC`), each row's date and time (`DATE`) and the two stations of each row
(`BASELINE`). From these the projected baseline `(u, v)` of every row follows
(Thompson, Moran & Swenson eq. 4.1, the Greenwich hour angle `GMST − α`); the
file also stores `(u, v)` itself (`UU`, `VV`, light-seconds). A flipped bit in
any of these makes the two disagree, which is what `geometry_mismatch` measures.

Two conventions are in use for the direction the stored `(u, v)` are computed
for, and a row is compared with the nearer: the J2000 position with the mean
sidereal time (the EHT's HOPS files: median residual 2e-6 to 1e-5 of the
baseline, at most 2e-4 on baselines over 100 km and 0.35 m on the intra-site
ones), and the position precessed and nutated to the date of observation with the
apparent sidereal time (the EHT's CASA files, at most 4.9e-4 of the baseline, 2
m intra-site; 4.7e-3 of the baseline in the first convention). Measured on every
public EHT file (48, `../shared/data`) and the shipped one; the tolerance
`GEOMETRY_TOLERANCE` is four times the largest relative residual and five times
the largest absolute one.
"""

import erfa
import numpy as np

from ._earth import gmst


_C = 299792458.0
#: Julian date of MJD 0.
_MJD0 = 2400000.5
#: The Earth's rotation rate (rad/s, sidereal).
OMEGA_EARTH: float = 7.2921150e-5

#: Relative and absolute (m) tolerance of `|(u, v)_file − (u, v)_geometry| c`:
#: a row disagrees beyond `(rel + ω T) |r1 − r2| + abs`, ω the Earth's
#: rotation rate and `T` (s) the larger of the row's integration time and the
#: file's median over rows of half the time to the nearer neighbouring row of the
#: same baseline: an averaged row (a scan or
#: time average, whose `(u, v)` is the mean along the track and whose time is
#: its bin's, not the mean time of the records averaged) may be that far off
#: (7e-4 of the baseline for a 10-s record, 2.2e-2 for 10-minute averages).
GEOMETRY_TOLERANCE: tuple[float, float] = (2e-3, 20.0)

#: Largest relative difference between the AN table's `FREQ` and the data's
#: frequency axis (`CRVAL` of `FREQ`): equal in every public EHT file.
FREQ_TOLERANCE: float = 1e-6


def _grouped(baseline_key, order_key):
    """Rows sorted by baseline, then `order_key`: `(order, start, size)`, each
    sorted row's group start (in sorted positions) and group size."""
    order = np.lexsort((order_key, baseline_key))
    key = np.asarray(baseline_key)[order]
    n = key.size
    first = np.r_[True, key[1:] != key[:-1]] if n else np.zeros(0, bool)
    starts = np.flatnonzero(first)
    sizes = np.diff(np.r_[starts, n])
    group = np.cumsum(first) - 1
    return order, starts[group], sizes[group]


def geometry_residual(u_s, v_s, jd, b_xyz, ra_deg, dec_deg) -> np.ndarray:
    """`|(u, v)_file − (u, v)_geometry|` in metres per row, the smaller of the two
    conventions (module docstring).

    **Arguments:**

    - `u_s`, `v_s`: the file's `(u, v)` in light-seconds, `(n,)`.
    - `jd`: each row's Julian date (UTC), `(n,)`.
    - `b_xyz`: each row's baseline `r1 − r2` (ECEF metres), `(n, 3)`.
    - `ra_deg`, `dec_deg`: the source's position (J2000, degrees).

    **Returns:** `(n,)` metres.
    """
    jd = np.asarray(jd, np.float64)
    # The sidereal time and its sines once per timestamp (rows share them).
    times, inverse = np.unique(jd, return_inverse=True)
    inverse = inverse.reshape(-1)
    mjd = np.floor(times - _MJD0)
    hours = (times - _MJD0 - mjd) * 24.0
    g = gmst(mjd, hours)
    ra, dec = np.deg2rad(ra_deg), np.deg2rad(dec_deg)
    u_m, v_m = np.asarray(u_s) * _C, np.asarray(v_s) * _C
    b = np.asarray(b_xyz, np.float64)
    bx, by, bz = b[..., 0], b[..., 1], b[..., 2]

    def distance(hour_angle, d):
        # Thompson, Moran & Swenson eq. 4.1 (`baseline_uvw`), per timestamp.
        sh, ch = np.sin(hour_angle)[inverse], np.cos(hour_angle)[inverse]
        sd, cd = np.sin(d), np.cos(d)
        u = sh * bx + ch * by
        v = -sd * ch * bx + sd * sh * by + cd * bz
        return np.hypot(u_m - u, v_m - v)

    # J2000 with the mean sidereal time.
    best = distance(g - ra, dec)
    # Of date: the direction precessed and nutated to the median date, with the
    # apparent sidereal time (the equation of the equinoxes added).
    day = float(np.median(jd - _MJD0)) if jd.size else 0.0
    rnpb = erfa.pnm06a(_MJD0, day)
    s = rnpb @ np.array(
        [np.cos(dec) * np.cos(ra), np.cos(dec) * np.sin(ra), np.sin(dec)]
    )
    ra_d, dec_d = np.arctan2(s[1], s[0]), np.arcsin(np.clip(s[2], -1.0, 1.0))
    ee = erfa.ee06a(_MJD0, day)
    return np.minimum(best, distance(g + ee - ra_d, dec_d))


def half_gaps(baseline_key, jd) -> np.ndarray:
    """Half the time (s) from each row to the nearer neighbouring row of its
    baseline (0 for a baseline's only row)."""
    order, start, size = _grouped(baseline_key, jd)
    t = np.asarray(jd, np.float64)[order] * 86400.0
    pos = np.arange(order.size) - start
    gap = np.diff(t)
    after = np.where(pos < size - 1, np.r_[gap, np.inf], np.inf)
    before = np.where(pos > 0, np.r_[np.inf, gap], np.inf)
    nearer = np.minimum(after, before)
    out = np.zeros(order.size)
    out[order] = np.where(np.isfinite(nearer), 0.5 * nearer, 0.0)
    return out


def geometry_mismatch(u_s, v_s, jd, b_xyz, ra_deg, dec_deg, slack_s) -> np.ndarray:
    """The rows whose `(u, v)` disagree with the geometry beyond
    `GEOMETRY_TOLERANCE` (see `geometry_residual`), `slack_s` the time `T` (s)
    each row's time may be off its `(u, v)`; rows with a non-finite residual
    disagree."""
    length = np.linalg.norm(b_xyz, axis=-1)
    rel, abs_m = GEOMETRY_TOLERANCE
    # A corrupt INTTIM cannot open the tolerance beyond a day's averaging.
    t = np.clip(np.nan_to_num(np.asarray(slack_s, np.float64)), 0.0, 86400.0)
    allowed = length * (rel + OMEGA_EARTH * t) + abs_m
    res = geometry_residual(u_s, v_s, jd, b_xyz, ra_deg, dec_deg)
    return ~(res <= allowed)


#: A row's σ more than this factor from the median σ of its baseline's
#: neighbouring rows (`SIGMA_WINDOW` each side, after its `tint` is taken into
#: account where the file gives one) is reported. The public EHT files reach 21
#: (M87 2018-04-21 band 2), 16 (M87 2017-04-06 lo), 9 (the CASA files).
SIGMA_OUTLIER_FACTOR: float = 50.0
SIGMA_WINDOW: int = 5


def sigma_outliers(sigma, tint, baseline_key, order_key) -> np.ndarray:
    """The rows whose σ is more than `SIGMA_OUTLIER_FACTOR` from the median σ of
    the `2 SIGMA_WINDOW` nearest rows (in `order_key`, mirrored at the ends) of
    the same baseline (`baseline_key`); σ is scaled by `sqrt(tint)` where every
    row of the file has `tint > 0` (σ ∝ 1/sqrt(tint)). Baselines with fewer
    than `2 SIGMA_WINDOW + 1` rows are not judged."""
    sigma = np.asarray(sigma, np.float64)
    tint = np.asarray(tint, np.float64)
    k = SIGMA_WINDOW
    if np.all((tint > 0) & np.isfinite(tint)):
        sigma = sigma * np.sqrt(tint)
    with np.errstate(all="ignore"):
        logs = np.log(sigma)
    order, start, size = _grouped(baseline_key, order_key)
    ls = logs[order]
    pos = np.arange(order.size) - start
    # The 2k rows around each (sorted) row; near a baseline's first and last
    # rows the window would reach another baseline's, so there the baseline's
    # own rows are mirrored instead.
    win = np.lib.stride_tricks.sliding_window_view(
        np.pad(ls, k, mode="edge"), 2 * k + 1
    )
    nbrs = np.concatenate([win[:, :k], win[:, k + 1 :]], axis=1)
    edge = (pos < k) | (pos > size - 1 - k)
    if edge.any():
        offsets = np.r_[np.arange(-k, 0), np.arange(1, k + 1)]
        j = np.abs(pos[edge][:, None] + offsets[None, :])  # mirrored at the start
        last = (size[edge] - 1)[:, None]
        j = np.clip(np.where(j > last, 2 * last - j, j), 0, last)  # and the end
        nbrs[edge] = ls[start[edge][:, None] + j]
    judged = size >= 2 * k + 1
    nbrs.sort(axis=1)
    med = 0.5 * (nbrs[:, k - 1] + nbrs[:, k])
    out = np.zeros(sigma.shape, bool)
    out[order] = judged & ~(np.abs(ls - med) <= np.log(SIGMA_OUTLIER_FACTOR))
    return out


def twin_hands_differ(raw, hands, valid) -> np.ndarray | None:
    """In a file that stores Stokes I as two identical hands (the EHT's HOPS
    Stokes I files: RR = LL in every entry of every row), the rows whose hands
    differ: one of them is corrupt. `None` for a file whose hands differ in more
    than 1 % of its rows (a polarimetric file), or with fewer than 20 rows.

    **Arguments:** `raw` `(n, n_if, n_chan, n_stokes, 3)`; `hands`, the two
    STOKES indices; `valid`, the rows judged: those where both hands have an
    entry of weight > 0 (a row with one hand flagged uses the other)."""
    a, b = raw[:, :, :, hands[0], :], raw[:, :, :, hands[1], :]
    same = np.all((a == b) | (np.isnan(a) & np.isnan(b)), axis=(1, 2, 3))
    if valid.sum() < 20 or same[valid].mean() < 0.99:
        return None
    return valid & ~same


def tint_outliers(tint, baseline_key, order_jd) -> np.ndarray:
    """The rows whose integration time (s) exceeds 1.5 times the larger gap to
    the previous or next row of the same baseline, plus 1 s: records do not
    overlap, and an average's summed integration time fits in its span (no
    public EHT file has one). A baseline's only row is not judged."""
    tint = np.asarray(tint, np.float64)
    order, start, size = _grouped(baseline_key, order_jd)
    t = np.asarray(order_jd, np.float64)[order] * 86400.0
    pos = np.arange(order.size) - start
    gap = np.diff(t)
    after = np.where(pos < size - 1, np.r_[gap, 0.0], 0.0)
    before = np.where(pos > 0, np.r_[0.0, gap], 0.0)
    wider = np.maximum(after, before)
    out = np.zeros(tint.shape, bool)
    out[order] = (size > 1) & ~(tint[order] <= 1.5 * wider + 1.0)
    return out


def describe_rows(rows, limit: int = 10) -> str:
    """`rows` (indices of the file's groups, from 0) as a short list."""
    rows = [int(r) for r in rows]
    head = ", ".join(str(r) for r in rows[:limit])
    return head + (f", … ({len(rows) - limit} more)" if len(rows) > limit else "")
