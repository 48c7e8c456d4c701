"""Field rotation of each station's feeds: parallactic angle, elevation and the
field-rotation angle `φ = f_par·parallactic + f_el·elevation + offset`.

Computed as eht-imaging computes them (`Obsdata.unpack(['par_ang1', 'el1'])` and the
field-rotation angle of its simulator and polarimetric calibration), so that the
angles agree with it to rounding:

- Greenwich mean sidereal time from `astropy.time` (`sidereal_time('mean',
  'greenwich')`, IAU 2006, with UT1 from astropy's bundled IERS tables; no download
  is attempted, and dates beyond the tables use their nearest value);
- **geocentric** latitude and longitude of the ECEF position (`atan2(z, √(x²+y²))`),
  not the geodetic latitude of the WGS84 ellipsoid (they differ by up to 0.19°);
- elevation: the angle between the source direction and the plane normal to the
  station's geocentric radius vector (again geocentric);
- parallactic angle: `atan2(sin H cos φ, sin φ cos δ − cos φ sin δ cos H)` with the
  local hour angle `H = GMST + λ − α` (east longitude λ).
"""

import warnings

import numpy as np


#: eht-imaging's field-rotation coefficients `(f_par, f_el)` per mount type
#: (its `fr_par`, `fr_elev`): an alt-azimuth mount rotates with the parallactic
#: angle, a Nasmyth focus adds (right) or subtracts (left) the elevation, an
#: equatorial mount does not rotate.
MOUNT_COEFFICIENTS: dict[str, tuple[float, float]] = {
    "altaz": (1.0, 0.0),
    "equatorial": (0.0, 0.0),
    "nasmyth_r": (1.0, 1.0),
    "nasmyth_l": (1.0, -1.0),
}

#: The AIPS AN table's `MNTSTA` codes (AIPS memo 117).
MOUNT_CODES: dict[int, str] = {
    0: "altaz",
    1: "equatorial",
    2: "orbiting",
    3: "xy",
    4: "nasmyth_r",
    5: "nasmyth_l",
}

#: Every mount type a data set may name.
MOUNTS: tuple[str, ...] = tuple(MOUNT_CODES.values())


def gmst_hours(mjd: int, hours) -> np.ndarray:
    """Greenwich mean sidereal time (hours, in [0, 24)) at `hours` UTC of day
    `mjd`, as eht-imaging's `utc_to_gmst` computes it (astropy, IAU 2006)."""
    import erfa
    from astropy.time import Time
    from astropy.utils import iers

    hours = np.asarray(hours, np.float64)
    with (
        iers.conf.set_temp("auto_download", False),
        iers.conf.set_temp("auto_max_age", None),
        iers.conf.set_temp("iers_degraded_accuracy", "ignore"),
        warnings.catch_warnings(),
    ):
        # ERFA calls a date beyond its leap-second table "dubious": UTC is then
        # taken to continue without new leap seconds, which is what we want.
        warnings.simplefilter("ignore", erfa.ErfaWarning)
        t = Time(hours / 24.0 + np.floor(mjd), format="mjd", scale="utc")
        return np.asarray(t.sidereal_time("mean", "greenwich").hour, np.float64)


def geocentric_lat_lon(xyz) -> tuple[np.ndarray, np.ndarray]:
    """Geocentric latitude and east longitude (radians) of ECEF positions."""
    xyz = np.asarray(xyz, np.float64)
    x, y, z = xyz[..., 0], xyz[..., 1], xyz[..., 2]
    return np.arctan2(z, np.sqrt(x**2 + y**2)), np.arctan2(y, x)


def station_angles(xyz, mjd: int, hours, ra_deg: float, dec_deg: float):
    """Parallactic angle and elevation (radians) of stations at ECEF `xyz`
    (`(n_st, 3)`, m) at `hours` UTC of day `mjd` (`(n_t,)`), for a source at
    (`ra_deg`, `dec_deg`).

    **Returns:** `(parallactic, elevation)`, each `(n_t, n_st)`; NaN for a station
    at the Earth's centre (position unknown).
    """
    xyz = np.asarray(xyz, np.float64).reshape(-1, 3)
    gst = gmst_hours(mjd, hours)[:, None]  # (n_t, 1), hours
    hour = np.pi / 12.0
    ra_h = ra_deg * 12.0 / 180.0  # eht-imaging's hours
    dec = dec_deg * np.pi / 180.0
    lat, lon = geocentric_lat_lon(xyz)
    with np.errstate(invalid="ignore", divide="ignore"):
        # Elevation: the station's position rotated by the Greenwich hour angle of
        # the source, against the source direction (cos δ, 0, sin δ).
        theta = np.mod((gst - ra_h) * hour, 2.0 * np.pi)
        x, y, z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
        xr = np.cos(theta) * x - np.sin(theta) * y
        norm = np.sqrt(x**2 + y**2 + z**2)
        cos_angle = (xr * np.cos(dec) + z * np.sin(dec)) / norm
        el = 0.5 * np.pi - np.arccos(cos_angle)
        h = np.mod(gst * hour + lon - ra_h * hour, 2.0 * np.pi)
        par = np.arctan2(
            np.sin(h) * np.cos(lat),
            np.sin(lat) * np.cos(dec) - np.cos(lat) * np.sin(dec) * np.cos(h),
        )
    unknown = ~(norm > 0)
    el = np.where(unknown, np.nan, el)
    par = np.where(unknown, np.nan, par)
    return par, el


def row_angles(data) -> tuple[np.ndarray, np.ndarray]:
    """Parallactic angle and elevation (radians) of each row's two stations,
    each `(n, 2)` for `(ant1, ant2)`."""
    time = np.asarray(data.time, np.float64)
    uniq, inverse = np.unique(time, return_inverse=True)
    par, el = station_angles(
        np.asarray(data.station_xyz), data.mjd, uniq, data.ra, data.dec
    )
    a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
    inverse = inverse.reshape(-1)
    par_rows = np.stack([par[inverse, a1], par[inverse, a2]], axis=1)
    el_rows = np.stack([el[inverse, a1], el[inverse, a2]], axis=1)
    return par_rows, el_rows


def field_rotation_coefficients(mounts, fr_offset) -> np.ndarray:
    """`(n_st, 3)`: `f_par`, `f_el` and the offset (radians) of each station; NaN
    for a mount without field-rotation coefficients (orbiting, X-Y)."""
    out = np.full((len(mounts), 3), np.nan)
    for i, (m, off) in enumerate(zip(mounts, fr_offset)):
        if m in MOUNT_COEFFICIENTS:
            out[i, :2] = MOUNT_COEFFICIENTS[m]
            out[i, 2] = off * np.pi / 180.0
    return out
