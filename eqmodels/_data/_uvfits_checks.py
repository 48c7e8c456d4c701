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

from ._earth import baseline_uvw, gmst


_C = 299792458.0
#: Julian date of MJD 0.
_MJD0 = 2400000.5
#: The Earth's rotation rate (rad/s, sidereal).
OMEGA_EARTH: float = 7.2921150e-5

#: Relative and absolute (m) tolerance of `|(u, v)_file − (u, v)_geometry| c`:
#: a row disagrees beyond `(rel + ω tint) |r1 − r2| + abs`, ω the Earth's
#: rotation rate and `tint` the row's integration time (s): an averaged row (a
#: scan or time average, whose `(u, v)` is the mean along the track and whose
#: time need not be the mean time of the rows averaged) may be `ω tint` of the
#: baseline off (7e-4 for a 10-s record, 2.6e-2 for a 6-minute scan average).
GEOMETRY_TOLERANCE: tuple[float, float] = (2e-3, 20.0)

#: Largest relative difference between the AN table's `FREQ` and the data's
#: frequency axis (`CRVAL` of `FREQ`): equal in every public EHT file.
FREQ_TOLERANCE: float = 1e-6


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
    mjd = np.floor(jd - _MJD0)
    hours = (jd - _MJD0 - mjd) * 24.0
    g = gmst(mjd, hours)
    ra, dec = np.deg2rad(ra_deg), np.deg2rad(dec_deg)
    u_m, v_m = np.asarray(u_s) * _C, np.asarray(v_s) * _C
    # J2000 with the mean sidereal time.
    u0, v0, _ = baseline_uvw(b_xyz, g - ra, dec)
    best = np.hypot(u_m - u0, v_m - v0)
    # Of date: the direction precessed and nutated to the median date, with the
    # apparent sidereal time (the equation of the equinoxes added).
    day = float(np.median(mjd + hours / 24.0))
    rnpb = erfa.pnm06a(_MJD0, day)
    s = rnpb @ np.array(
        [np.cos(dec) * np.cos(ra), np.cos(dec) * np.sin(ra), np.sin(dec)]
    )
    ra_d, dec_d = np.arctan2(s[1], s[0]), np.arcsin(np.clip(s[2], -1.0, 1.0))
    ee = erfa.ee06a(_MJD0, day)
    u1, v1, _ = baseline_uvw(b_xyz, g + ee - ra_d, dec_d)
    return np.minimum(best, np.hypot(u_m - u1, v_m - v1))


def geometry_mismatch(u_s, v_s, jd, b_xyz, ra_deg, dec_deg, tint) -> np.ndarray:
    """The rows whose `(u, v)` disagree with the geometry beyond
    `GEOMETRY_TOLERANCE` (see `geometry_residual`); rows with a non-finite
    residual disagree."""
    length = np.linalg.norm(b_xyz, axis=-1)
    rel, abs_m = GEOMETRY_TOLERANCE
    # A corrupt INTTIM cannot open the tolerance beyond a day's averaging.
    t = np.clip(np.nan_to_num(np.asarray(tint, np.float64)), 0.0, 86400.0)
    allowed = length * (rel + OMEGA_EARTH * t) + abs_m
    res = geometry_residual(u_s, v_s, jd, b_xyz, ra_deg, dec_deg)
    return ~(res <= allowed)


#: A row's σ more than this factor from the median σ of its baseline's
#: neighbouring rows (`SIGMA_WINDOW` each side, after its `tint` is taken into
#: account where the file gives one) is reported.
SIGMA_OUTLIER_FACTOR: float = 8.0
SIGMA_WINDOW: int = 5


def sigma_outliers(sigma, tint, baseline_key, order_key) -> np.ndarray:
    """The rows whose σ is more than `SIGMA_OUTLIER_FACTOR` from the median σ of
    the `2 SIGMA_WINDOW` nearest rows (in `order_key`) of the same baseline
    (`baseline_key`); σ is scaled by `sqrt(tint)` where every row of the
    baseline has `tint > 0` (σ ∝ 1/sqrt(tint)). Baselines with fewer than 5 rows
    are not judged."""
    sigma = np.asarray(sigma, np.float64)
    tint = np.asarray(tint, np.float64)
    out = np.zeros(sigma.shape, bool)
    k = SIGMA_WINDOW
    for key in np.unique(baseline_key):
        rows = np.flatnonzero(baseline_key == key)
        if rows.size < 5:
            continue
        rows = rows[np.argsort(order_key[rows], kind="stable")]
        s = sigma[rows]
        t = tint[rows]
        if np.all((t > 0) & np.isfinite(t)):
            s = s * np.sqrt(t)
        logs = np.log(s)
        n = rows.size
        padded = np.concatenate([np.full(k, np.nan), logs, np.full(k, np.nan)])
        windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * k + 1)
        windows = windows.copy()
        windows[:, k] = np.nan  # not the row itself
        with np.errstate(all="ignore"):
            med = np.nanmedian(windows, axis=1)
        bad = np.abs(logs - med) > np.log(SIGMA_OUTLIER_FACTOR)
        out[rows[: n][bad]] = True
    return out


def describe_rows(rows, limit: int = 10) -> str:
    """`rows` (indices of the file's groups, from 0) as a short list."""
    rows = [int(r) for r in rows]
    head = ", ".join(str(r) for r in rows[:limit])
    return head + (f", … ({len(rows) - limit} more)" if len(rows) > limit else "")
