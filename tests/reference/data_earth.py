"""Earth-rotation (u, v, w) by explicit rotations (an independent derivation of
Thompson, Moran & Swenson eq. 4.1).

The baseline vector in the Earth-fixed frame is rotated into the frame of the
source: first about the z axis by the Greenwich hour angle H (bringing the
source's meridian to the x-z plane), then about the y axis so that the new z axis
points to the source. w is along the source direction, v toward the north
celestial pole projected on the sky, u toward the east.
"""

import numpy as np


def rot_z(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def uvw(b, hour_angle, dec):
    """(u, v, w) of the Earth-fixed baseline `b` (3,) at hour angle H, dec δ."""
    # Source direction in the Earth-fixed frame: (cos δ cos(-H), cos δ sin(-H), sin δ)
    # since a source at Greenwich hour angle H has longitude -H.
    s = np.array(
        [
            np.cos(dec) * np.cos(-hour_angle),
            np.cos(dec) * np.sin(-hour_angle),
            np.sin(dec),
        ]
    )
    pole = np.array([0.0, 0.0, 1.0])
    east = np.cross(pole, s)
    east /= np.linalg.norm(east)
    north = np.cross(s, east)
    return float(b @ east), float(b @ north), float(b @ s)


def gmst_iau1982(mjd, hours):
    """GMST (radians) from the IAU 1982 formula (Aoki et al. 1982), UT1 = UTC:
    GMST(0h) = 24110.54841 + 8640184.812866 T + 0.093104 T² - 6.2e-6 T³ (s),
    plus 1.002737909350795 × UT."""
    t = (mjd - 51544.5) / 36525.0
    g0 = 24110.54841 + 8640184.812866 * t + 0.093104 * t**2 - 6.2e-6 * t**3
    sec = g0 + 1.002737909350795 * hours * 3600.0
    return (sec % 86400.0) / 86400.0 * 2 * np.pi
