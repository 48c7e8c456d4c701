"""Earth-rotation geometry: sidereal time, (u, v, w) of a baseline, elevations.

Plain numpy (data preparation runs once, on the host). Formulas:

- Earth rotation angle and GMST: IAU 2006 (Capitaine, Wallace & Chapront 2003,
  A&A 412, 567, eqs. 14 and 42), with UT1 ≈ UTC (|UT1 - UTC| < 0.9 s, i.e. an
  hour-angle error below 4e-3 degrees) and TT ≈ UT in the small polynomial term.
- (u, v, w) of a baseline: Thompson, Moran & Swenson, *Interferometry and
  Synthesis in Radio Astronomy* (3rd ed.), eq. 4.1, with the baseline in the
  Earth-fixed equatorial (ECEF) frame and the Greenwich hour angle `H = GMST - RA`.
- Geodetic latitude from ECEF: WGS84 ellipsoid, Bowring's method iterated to
  machine precision.
"""

import numpy as np


#: WGS84 semi-major axis (m) and flattening.
WGS84_A = 6378137.0
WGS84_F = 1.0 / 298.257223563

#: MJD of the J2000.0 epoch (2000-01-01 12:00 TT, taken as UT here).
MJD_J2000 = 51544.5


def earth_rotation_angle(mjd, hours):
    """Earth rotation angle (radians, in [0, 2π)) at `hours` UT1 on day `mjd`.

    `ERA = 2π (0.7790572732640 + 1.00273781191135448 Du)`, `Du` = days since
    J2000.0, evaluated with the integer and fractional days kept apart so that
    the result keeps ~1e-12 turn precision.
    """
    mjd = np.asarray(mjd, np.float64)
    hours = np.asarray(hours, np.float64)
    day = mjd - MJD_J2000  # a half-integer, exact in float64
    frac = hours / 24.0
    du = day + frac
    turns = 0.7790572732640 + 0.00273781191135448 * du + np.mod(day, 1.0) + frac
    return 2.0 * np.pi * np.mod(turns, 1.0)


def gmst(mjd, hours):
    """Greenwich mean sidereal time (radians, in [0, 2π)) at `hours` UTC of day
    `mjd` (IAU 2006; UT1 ≈ UTC)."""
    mjd = np.asarray(mjd, np.float64)
    hours = np.asarray(hours, np.float64)
    t = (mjd - MJD_J2000 + hours / 24.0) / 36525.0
    poly_arcsec = (
        0.014506
        + 4612.156534 * t
        + 1.3915817 * t**2
        - 0.00000044 * t**3
        - 0.000029956 * t**4
        - 0.0000000368 * t**5
    )
    out = earth_rotation_angle(mjd, hours) + poly_arcsec * np.pi / 180.0 / 3600.0
    return np.mod(out, 2.0 * np.pi)


def baseline_uvw(b_xyz, hour_angle, dec):
    """(u, v, w) in the units of `b_xyz` for baseline vectors `b_xyz` (`(..., 3)`,
    ECEF) at Greenwich hour angles `hour_angle` (radians) and declination `dec`
    (radians): Thompson, Moran & Swenson eq. 4.1 with `(X, Y, Z)` = ECEF
    (Y toward hour angle -6 h, i.e. east longitude 90°)."""
    b = np.asarray(b_xyz, np.float64)
    bx, by, bz = b[..., 0], b[..., 1], b[..., 2]
    sh, ch = np.sin(hour_angle), np.cos(hour_angle)
    sd, cd = np.sin(dec), np.cos(dec)
    u = sh * bx + ch * by
    v = -sd * ch * bx + sd * sh * by + cd * bz
    w = cd * ch * bx - cd * sh * by + sd * bz
    return u, v, w


def geodetic(xyz):
    """Geodetic latitude and east longitude (radians) and height (m) of ECEF
    positions `xyz` (`(..., 3)`, metres) on the WGS84 ellipsoid."""
    xyz = np.asarray(xyz, np.float64)
    x, y, z = xyz[..., 0], xyz[..., 1], xyz[..., 2]
    a = WGS84_A
    e2 = WGS84_F * (2.0 - WGS84_F)
    lon = np.arctan2(y, x)
    p = np.hypot(x, y)
    lat = np.arctan2(z, p * (1.0 - e2))
    for _ in range(8):
        n = a / np.sqrt(1.0 - e2 * np.sin(lat) ** 2)
        lat = np.arctan2(z + e2 * n * np.sin(lat), p)
    n = a / np.sqrt(1.0 - e2 * np.sin(lat) ** 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(
            np.abs(np.cos(lat)) > 1e-9,
            p / np.cos(lat) - n,
            np.abs(z) - n * (1.0 - e2),
        )
    return lat, lon, h


def elevation(xyz, gmst_rad, ra, dec):
    """Elevation (radians) of a source at (`ra`, `dec`) (radians) seen from
    stations at ECEF `xyz` (`(n_st, 3)`) at sidereal times `gmst_rad` (`(n_t,)`):
    returns `(n_t, n_st)`. `sin el = sin φ sin δ + cos φ cos δ cos h`, local hour
    angle `h = GMST + λ - RA` (geodetic latitude φ, east longitude λ)."""
    lat, lon, _ = geodetic(xyz)
    h = np.asarray(gmst_rad, np.float64)[:, None] + lon[None, :] - ra
    s = np.sin(lat)[None, :] * np.sin(dec) + np.cos(lat)[None, :] * np.cos(
        dec
    ) * np.cos(h)
    return np.arcsin(np.clip(s, -1.0, 1.0))
