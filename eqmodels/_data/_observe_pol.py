"""What the stations record of a polarimetric image: the four correlations of each
row through each station's Jones matrix (gains, leakage, feed basis, field
rotation), with thermal noise; the polarimetric branch of
[`eqmodels.observe`][]."""

from collections.abc import Mapping, Sequence

import numpy as np

from .._coherency import (
    coherency_to_correlations,
    dagger,
    matmul,
    station_jones,
    stokes_to_coherency,
)
from .._numerics import asarray
from ._polvisdata import PolVisData


FIELD_ROTATION = ("raw", "corrected", "none")


def check_dterms(dterms, names: tuple[str, ...]) -> np.ndarray:
    """`dterms` as a complex `(n_stations, 2)` array (`d_R`, `d_L` per station, 0
    where not given): a mapping `{station: (d_R, d_L)}` (every key a station of the
    table) or an array of that shape."""
    out = np.zeros((len(names), 2), np.complex128)
    if dterms is None:
        return out
    if isinstance(dterms, Mapping):
        for key, value in dterms.items():
            if key not in names:
                raise ValueError(
                    f"`dterms` has the key {key!r}, which is not a station of the "
                    f"array {list(names)}: key the D-terms by station code."
                )
            d = np.asarray(value)
            if d.shape != (2,) or not np.issubdtype(d.dtype, np.number):
                raise ValueError(
                    f"`dterms[{key!r}]` must be two complex numbers (d_R, d_L), got "
                    f"{value!r}."
                )
            out[names.index(key)] = d
    else:
        d = np.asarray(dterms)
        if d.shape != out.shape or not np.issubdtype(d.dtype, np.number):
            raise ValueError(
                f"`dterms` must be a mapping {{station: (d_R, d_L)}} or a complex "
                f"array of shape {out.shape} (stations, hands), got "
                f"{getattr(d, 'shape', d)!r}."
            )
        out[:] = d
    if not np.all(np.isfinite(out)):
        raise ValueError("`dterms` must be finite.")
    if np.any(np.abs(out) >= 1):
        raise ValueError(
            "`dterms` has a leakage of modulus >= 1: D-terms are fractions of the "
            "other hand (a few per cent, e.g. 0.05 + 0.02j)."
        )
    return out


def check_per_station(name: str, value, names: tuple[str, ...], allowed, default):
    """A per-station option (`feeds`, `mounts`): one string for every station, a
    mapping `{station: value}` (others `default`) or one per station."""
    if value is None:
        return (default,) * len(names)
    if isinstance(value, str):
        out = (value,) * len(names)
    elif isinstance(value, Mapping):
        for key in value:
            if key not in names:
                raise ValueError(
                    f"`{name}` has the key {key!r}, which is not a station of the "
                    f"array {list(names)}."
                )
        out = tuple(value.get(s, default) for s in names)
    elif isinstance(value, Sequence) and len(value) == len(names):
        out = tuple(value)
    else:
        raise ValueError(
            f"`{name}` must be one of {list(allowed)} for every station, a mapping "
            f"{{station: value}} or one value per station ({len(names)}), got "
            f"{value!r}."
        )
    for x in out:
        if x not in allowed:
            raise ValueError(f"`{name}` values must be in {list(allowed)}, got {x!r}.")
    return out


def station_gain_draws(
    time: np.ndarray,
    n_stations: int,
    hands: int,
    rng: np.random.Generator,
    gain_sigma: float,
    random_phases: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Complex station gains per timestamp, station and hand, `(n_times, n_stations,
    hands)` (`hands` 1 for Stokes I, 2 for R and L), `|g| = |1 + gain_sigma N(0,1)|`
    and, with `random_phases`, a uniform phase; and each row's timestamp index."""
    times_u, k = np.unique(time, return_inverse=True)
    shape = (times_u.size, n_stations, hands)
    amp = (
        np.abs(1.0 + gain_sigma * rng.standard_normal(shape))
        if gain_sigma > 0
        else np.ones(shape)
    )
    phase = rng.uniform(0.0, 2 * np.pi, shape) if random_phases else np.zeros(shape)
    return amp * np.exp(1j * phase), k


def corrupt_polarimetric(
    stokes_vis: np.ndarray,
    ideal: PolVisData,
    *,
    rng: np.random.Generator,
    gain_sigma: float,
    random_phases: bool,
    dterms,
    field_rotation: str,
) -> np.ndarray:
    """The four correlations `(n, 4)` that the rows of `ideal` (its stations,
    times, feeds, mounts) record of the Stokes visibilities `stokes_vis` `(n, 4)`:
    each station's Jones matrix `J = G D T Φ` applied, `C_obs = J_a C J_bᴴ`; no
    noise."""
    names = ideal.station_names
    d = check_dterms(dterms, names)
    if field_rotation not in FIELD_ROTATION:
        raise ValueError(
            f"`field_rotation` must be one of {list(FIELD_ROTATION)}, got "
            f"{field_rotation!r}: 'raw' as the telescopes record it, 'corrected' "
            "with the field rotation removed after the leakage (as the EHT's "
            "released files), 'none' without any."
        )
    n = stokes_vis.shape[0]
    a1, a2 = np.asarray(ideal.ant1), np.asarray(ideal.ant2)
    # Gains per timestamp, station and hand (R, L or X, Y), drawn as observe's
    # Stokes I gains are, each hand on its own.
    g, k = station_gain_draws(
        np.asarray(ideal.time), len(names), 2, rng, gain_sigma, random_phases
    )
    ends = np.stack([a1, a2], axis=1)  # (n, 2)
    g_rows = g[k[:, None], ends]  # (n, 2 ends, 2 hands)
    d_rows = d[ends]
    if field_rotation == "none":
        e = np.ones((n, 2), np.complex128)
    else:
        e = np.exp(1j * ideal.field_rotation())
    linear = np.asarray([f == "linear" for f in ideal.feeds])
    lin = linear[ends] if linear.any() else None
    j = station_jones(
        asarray(g_rows),
        asarray(d_rows),
        asarray(e),
        lin,
        field_rotation_corrected=field_rotation == "corrected",
    )
    c = stokes_to_coherency(asarray(stokes_vis))
    return np.asarray(
        coherency_to_correlations(matmul(matmul(j[:, 0], c), dagger(j[:, 1])))
    )


def observe_polarimetric(
    stokes_vis: np.ndarray,
    tracks: dict,
    *,
    names: tuple[str, ...],
    xyz: np.ndarray,
    sigma: np.ndarray,
    rng: np.random.Generator,
    gain_sigma: float,
    random_phases: bool,
    add_noise: bool,
    dterms,
    feeds,
    mounts,
    field_rotation: str,
    meta: dict,
) -> PolVisData:
    """The recorded correlations of the Stokes visibilities `stokes_vis` `(n, 4)`
    on `tracks` (`u`, `v`, `time`, `ant1`, `ant2`), each station's Jones matrix
    `J = G D T Φ` applied (`C_obs = J_a C J_bᴴ`), and noise `sigma` `(n,)` on each
    real and imaginary part of every correlation."""
    check_dterms(dterms, names)
    feeds = check_per_station("feeds", feeds, names, ("circular", "linear"), "circular")
    mounts = check_per_station(
        "mounts",
        mounts,
        names,
        ("altaz", "nasmyth_r", "nasmyth_l", "equatorial"),
        "altaz",
    )
    n = stokes_vis.shape[0]
    ideal = PolVisData(
        tracks["u"],
        tracks["v"],
        np.zeros((n, 4), np.complex128),
        np.ones((n, 4)),
        tracks["time"],
        tracks["ant1"],
        tracks["ant2"],
        station_names=names,
        station_xyz=xyz,
        feeds=feeds,
        mounts=mounts,
        **meta,
    )
    corr = corrupt_polarimetric(
        stokes_vis, ideal, rng=rng, gain_sigma=gain_sigma,
        random_phases=random_phases, dterms=dterms, field_rotation=field_rotation,
    )  # fmt: skip
    sig = np.repeat(np.asarray(sigma, np.float64)[:, None], 4, axis=1)
    if add_noise:
        corr = corr + sig * (
            rng.standard_normal((n, 4)) + 1j * rng.standard_normal((n, 4))
        )
    return ideal.replace(corr=corr, sigma=sig)
