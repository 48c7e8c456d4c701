"""Synthetic observations: Earth-rotation uv tracks, elevation limits, thermal
noise from SEFDs, optional station gain and phase errors."""

import math
import numbers
from collections.abc import Mapping, Sequence

import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike

from .._forward._direct import DirectFT
from .._forward._select import ForwardLike, make_forward
from .._grid import ImageGrid
from .._image._base import AbstractImageModel, evaluated_on
from .._numerics import asarray
from .._validation import (
    check_flag,
    is_concrete,
    positive_number,
    refuse_julian_date,
    warn_user,
)
from ._earth import baseline_uvw, elevation, gmst
from ._observe_pol import observe_polarimetric, station_gain_draws
from ._polvisdata import PolVisData
from ._stations import StationTable
from ._visdata import check_freq, check_ra_dec, VisData


#: Speed of light (m/s).
C_LIGHT = 299792458.0
# Matrix entries per DirectFT block when `forward` is not given.
_BLOCK_ENTRIES = 2**22
# Plausibility limits on `observe`'s units, against the usual slips (times in
# seconds, bandwidth in GHz, an integration in hours): times are hours of day, a
# track may cross midnight; a continuum bandwidth is at least a kHz; an
# integration under 0.1 s is unusual for imaging (a warning, not an error).
_MAX_HOURS = 24.0
_MIN_BANDWIDTH = 1e3
_SHORT_INTEGRATION = 0.1


def thermal_sigma(
    sefd1: ArrayLike,
    sefd2: ArrayLike,
    bandwidth: ArrayLike,
    tint: ArrayLike,
    *,
    efficiency: ArrayLike = 0.88,
    n_pol: int | np.integer = 2,
) -> ArrayLike:
    """Radiometer equation: the noise of each of the real and imaginary parts of a
    Stokes I visibility, `σ = sqrt(SEFD1 SEFD2 / (2 Δν τ)) / η / sqrt(n_pol)`
    (Thompson, Moran & Swenson eq. 6.50, with `η` the digitisation efficiency —
    0.88 for 2-bit sampling — and `n_pol` parallel hands averaged into Stokes I).

    **Arguments:** `sefd1`, `sefd2` (Jy), `bandwidth` (Hz) and `tint` (s), positive
    numbers or arrays that broadcast; `efficiency` in (0, 1]; `n_pol` 1 or 2.
    Anything else raises a `ValueError` naming the argument.
    """
    checks = {"sefd1": sefd1, "sefd2": sefd2, "bandwidth": bandwidth, "tint": tint}
    checks["efficiency"] = efficiency
    for name, x in checks.items():
        if not is_concrete(x):
            continue  # traced: nothing to look at
        arr = np.asarray(x)
        if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
            raise TypeError(f"`{name}` must be a positive number, got {x!r}.")
        high = 1.0 if name == "efficiency" else np.inf
        if not np.all(np.isfinite(arr) & (arr > 0) & (arr <= high)):
            limits = "in (0, 1] (0.88 for 2-bit sampling)" if high == 1 else "> 0"
            raise ValueError(
                f"`{name}` must be finite and {limits} everywhere, got {x!r} "
                "(SEFDs in Jy, bandwidth in Hz, tint in s)."
            )
    if isinstance(n_pol, bool) or n_pol not in (1, 2):
        raise ValueError(f"`n_pol` must be 1 or 2 (hands averaged), got {n_pol!r}.")
    return (
        np.sqrt(sefd1 * sefd2 / (2.0 * bandwidth * tint))
        / efficiency
        / math.sqrt(n_pol)
    )


def uv_tracks(
    array: StationTable,
    *,
    ra: float | int | np.number,
    dec: float | int | np.number,
    freq: float | int,
    mjd: int,
    times: ArrayLike | list | tuple,
    elevation_limit: bool = True,
) -> dict:
    """Earth-rotation (u, v) of every baseline `i < j` of `array` at `times`
    (hours UTC of day `mjd`) for a source at (`ra`, `dec`) degrees (`ra` in
    [0, 360], `dec` in [-90, 90]), keeping the rows where both stations are above
    their elevation limit. `times` must be distinct (each gives one row per
    baseline) and within [−24, 48] h; `freq` in Hz, within 1e6–1e13.

    `(u, v)` of row `(i, j)` is the projection of `(r_i - r_j) / λ` (the uvfits
    convention), Thompson, Moran & Swenson eq. 4.1 with the Greenwich hour angle
    `H = GMST - RA`.

    **Returns:** a dict of numpy arrays `u`, `v`, `w`, `time`, `ant1`, `ant2`,
    `el1`, `el2` (elevations, degrees).
    """
    if not isinstance(array, StationTable):
        raise TypeError(
            f"`array` must be a StationTable (e.g. eqmodels.EHT2017), got "
            f"{type(array).__name__}."
        )
    freq = check_freq(freq)
    ra, dec = check_ra_dec(ra, dec)
    if isinstance(mjd, bool) or not isinstance(mjd, numbers.Integral):
        raise TypeError(f"`mjd` must be an integer day, got {mjd!r}.")
    refuse_julian_date("mjd", mjd)
    times = np.atleast_1d(np.asarray(times, np.float64))
    if times.ndim != 1 or times.size == 0 or not np.all(np.isfinite(times)):
        raise ValueError("`times` must be a non-empty 1-d array of finite hours.")
    if times.min() < -_MAX_HOURS or times.max() > 2 * _MAX_HOURS:
        far = times.max() if times.max() > 2 * _MAX_HOURS else times.min()
        raise ValueError(
            f"`times` reaches {far:g}: times are hours UTC of day `mjd`, within "
            f"[-{_MAX_HOURS:g}, {2 * _MAX_HOURS:g}] (a track may cross midnight). "
            "Seconds of day are hours × 3600: divide them by 3600. A track of "
            "several days: observe each day with its own `mjd` and join them with "
            "`eqmodels.concatenate`."
        )
    uniq, counts = np.unique(times, return_counts=True)
    if uniq.size < times.size:
        raise ValueError(
            f"`times` has {times.size - uniq.size} repeated value(s) (e.g. "
            f"{float(uniq[np.argmax(counts > 1)])!r} h): each time gives one row per "
            "baseline, so a repeat would duplicate rows; give distinct times "
            "(`np.unique(times)`)."
        )
    if len(array) < 2:
        raise ValueError("`array` needs at least two stations to form a baseline.")
    lam = C_LIGHT / freq
    ra_r, dec_r = math.radians(ra), math.radians(dec)
    xyz = np.asarray(array.xyz, np.float64)
    g = gmst(mjd, times)
    el = np.degrees(elevation(xyz, g, ra_r, dec_r))  # (t, n_st)
    up = el >= np.asarray(array.el_min)[None, :]
    if not check_flag("elevation_limit", elevation_limit):
        up[:] = True
    i, j = np.triu_indices(len(array), k=1)
    ti = np.repeat(np.arange(times.size), i.size)
    ai = np.tile(i, times.size)
    aj = np.tile(j, times.size)
    keep = up[ti, ai] & up[ti, aj]
    ti, ai, aj = ti[keep], ai[keep], aj[keep]
    u, v, w = baseline_uvw((xyz[ai] - xyz[aj]) / lam, g[ti] - ra_r, dec_r)
    return {
        "u": u,
        "v": v,
        "w": w,
        "time": times[ti],
        "ant1": ai,
        "ant2": aj,
        "el1": el[ti, ai],
        "el2": el[ti, aj],
    }


def check_errors_and_seed(gain_sigma, seed) -> None:
    """`observe`'s and `observe_same`'s `gain_sigma` (a number >= 0) and `seed` (an
    integer >= 0)."""
    if isinstance(gain_sigma, bool) or not isinstance(gain_sigma, numbers.Real):
        raise TypeError(f"`gain_sigma` must be a number, got {gain_sigma!r}.")
    if not (math.isfinite(gain_sigma) and gain_sigma >= 0):
        raise ValueError(f"`gain_sigma` must be finite and >= 0, got {gain_sigma!r}.")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(
            f"`seed` must be an integer (a numpy random seed), got {seed!r}."
        )
    if seed < 0:
        raise ValueError(f"`seed` must be >= 0 (a numpy random seed), got {seed!r}.")


def is_polarimetric(image) -> bool:
    """Whether `image` (an array or an image model) holds the four Stokes planes."""
    if isinstance(image, AbstractImageModel):
        return bool(image.polarimetric)
    return np.ndim(image) == 3


def image_planes(image, grid: ImageGrid):
    """`image` (an array or an image model on `grid`) as a checked, finite,
    floating array of shape `grid.shape` (Stokes I) or `(4, *grid.shape)`, and
    whether it is polarimetric."""
    polarimetric = is_polarimetric(image)
    if isinstance(image, AbstractImageModel):
        image = evaluated_on(
            image,
            grid,
            "image",
            f"`grid` is {grid!r}: observe the model on its own grid "
            "(`grid=image.grid`), or the visibilities would be those of another "
            "pixel size.",
        )
    image = asarray(image)
    if not jnp.issubdtype(image.dtype, jnp.floating):  # integer or bool pixels
        image = image.astype(jnp.result_type(float))
    want = (4, *grid.shape) if polarimetric else grid.shape
    if image.shape != want:
        raise ValueError(
            f"`image` has shape {image.shape} but `grid` is {grid.shape}"
            + (
                ": a polarimetric image is (4, ny, nx), the planes I, Q, U, V."
                if polarimetric
                else "."
            )
        )
    if is_concrete(image) and not np.all(np.isfinite(np.asarray(image))):
        raise ValueError(
            "`image` has non-finite pixels (NaN or inf): observe a finite image."
        )
    return image, polarimetric


def model_visibilities(planes, grid: ImageGrid, u, v, forward) -> np.ndarray:
    """The visibilities `(n_planes, n)` (complex128) of the image planes
    `(n_planes, ny, nx)` at `(u, v)`: `forward` as `make_forward` takes it, or
    `None` for a `DirectFT` built in row blocks."""
    u, v = np.asarray(u), np.asarray(v)
    n = u.size
    if forward is None:
        block = max(1, _BLOCK_ENTRIES // grid.npix)
        parts = [
            np.asarray(
                DirectFT(
                    grid, u[s : s + block], v[s : s + block], dtype=planes.dtype
                ).batched(planes)
            )
            for s in range(0, n, block)
        ]
        vis = np.concatenate(parts, axis=1)
    else:
        # In the image's precision, as the default path: float64 points would ask
        # a 32-bit JAX for float64 (`forward=` would fail without x64).
        np_dtype = np.dtype(planes.dtype)
        model = make_forward(forward, grid, u.astype(np_dtype), v.astype(np_dtype))
        vis = np.asarray(model.batched(planes))
    return vis.astype(np.complex128)


def observe(
    image,
    grid: ImageGrid,
    array: StationTable,
    *,
    ra: float | int | np.number,
    dec: float | int | np.number,
    freq: float | int = 230e9,
    mjd: int = 57854,
    times: ArrayLike | list | tuple,
    integration: float | int | np.number = 10.0,
    bandwidth: float | int = 2e9,
    seed: int = 0,
    add_noise: bool = True,
    efficiency: float | int = 0.88,
    n_pol: int = 2,
    gain_sigma: float | int = 0.0,
    random_phases: bool = False,
    elevation_limit: bool = True,
    forward: ForwardLike | None = None,
    source: str = "SIM",
    dterms: Mapping | ArrayLike | None = None,
    feeds: str | Mapping[str, str] | Sequence[str] | None = None,
    mounts: str | Mapping[str, str] | Sequence[str] | None = None,
    field_rotation: str = "corrected",
) -> VisData | PolVisData:
    """A synthetic observation of `image` with the station table `array`.

    1. (u, v) tracks by Earth rotation (see [`eqmodels.uv_tracks`][]) at `times`,
       keeping baselines with both stations above their elevation limit.
    2. Model visibilities from an eqmodels forward model: `forward(grid, u, v)`
       (default [`eqmodels.DirectFT`][] built in row blocks; pass e.g.
       `eqmodels.NUFFT` for large problems).
    3. Optional station errors per timestamp: amplitude
       `|g| = |1 + gain_sigma·N(0,1)|` and, with `random_phases`, a uniform random
       phase per station: `V_ij → g_i conj(g_j) V_ij`. (eht-imaging's `gainp`
       draws `|g| = sqrt(|1 + gainp·N(0,1)|)`, so `gain_sigma ≈ gainp / 2` for
       small values.) The absolute value keeps amplitudes >= 0; it changes a
       draw only when `1 + gain_sigma·N(0,1) < 0`, with probability
       `Φ(-1/gain_sigma)` per station and timestamp: 3e-7 at `gain_sigma = 0.2`,
       2% at 0.5, 31% at 2. So
       for `gain_sigma ≲ 0.25` the amplitude errors are Gaussian with standard
       deviation `gain_sigma`; larger values give a folded Gaussian (mean above 1,
       amplitudes near 0 possible). For another distribution, observe without
       errors and apply your own gains with [`eqmodels.apply_gains`][].
    4. Thermal noise from the radiometer equation,
       `σ = sqrt(SEFD_i SEFD_j / (2 Δν τ)) / η / sqrt(n_pol)` on each of the real
       and imaginary parts.

    **Arguments:**

    - `image`: `(ny, nx)` array (Jy/pixel) or an image model; `grid` its grid.
    - `array`: a [`eqmodels.StationTable`][] such as `eqmodels.EHT2017`.
    - `ra`, `dec`: source position in degrees (taken as coordinates of date).
    - `freq` (Hz), `mjd` (day), `times` (hours UTC of that day, the integration
      midpoints), `integration` (s, per row), `bandwidth` (Hz). Checked against
      the usual unit slips: `freq` within 1e6–1e13 Hz, `bandwidth` at least 1 kHz
      and below `freq`, `times` within [−24, 48] h (errors); an `integration`
      under 0.1 s warns.
    - `seed`: numpy random seed, an integer >= 0 (noise and gains).
    - `add_noise`: add thermal noise (sigmas are set either way).
    - `efficiency`: digitisation efficiency `η`; `n_pol`: parallel hands averaged
      into Stokes I (2 for RR and LL).
    - `gain_sigma`, `random_phases`: station gain errors (see 3.; `gain_sigma`
      is the standard deviation of the gain amplitudes around 1).
    - `elevation_limit`: apply the stations' `el_min`.
    - `forward`: how to build the forward model, as [`eqmodels.make_forward`][]
      takes it: `"direct"`, `"separable"`, `"nufft"`, a forward-model class or
      a callable `(grid, u, v) -> forward model`.
    - `source`: source name.

    **Polarimetric images.** Given the four Stokes planes (a `(4, ny, nx)` array
    or a polarimetric image model) it returns a [`eqmodels.PolVisData`][]: the
    four correlations each station pair records, `C_obs = J_a C J_bᴴ` with each
    station's Jones matrix `J = G D T Φ` (eht-imaging's `make_jones`; see
    docs/polarimetry.md): gains `G` drawn as in 3. for each hand on its own,
    leakage `D` from `dterms`, the feed basis `T` from `feeds` and the field
    rotation `Φ` from the stations' `mounts`, the source position and the
    times; thermal noise on each correlation with `n_pol = 1` (one hand each).

    - `dterms`: `{station: (d_R, d_L)}` (complex; others 0) or a complex array
      `(n_stations, 2)`; default no leakage.
    - `feeds`: `"circular"` (default) or `"linear"`, for every station, as a
      mapping `{station: feed}` or one per station.
    - `mounts`: `"altaz"` (default), `"nasmyth_r"`, `"nasmyth_l"` or
      `"equatorial"`, given as `feeds`.
    - `field_rotation`: `"corrected"` (default, as eht-imaging's `observe` with
      `frcal=True` and the EHT's released files: the rotation removed after the
      leakage, `J = R⁻¹ G D R T`, so without leakage the data carry none),
      `"raw"` (as the telescopes record it, `J = G D T Φ`) or `"none"` (`Φ = 1`).

    **Returns:** a [`eqmodels.VisData`][] (a [`eqmodels.PolVisData`][] for a
    polarimetric image).
    """
    if not isinstance(grid, ImageGrid):
        raise TypeError(f"`grid` must be an ImageGrid, got {type(grid).__name__}.")
    add_noise = check_flag("add_noise", add_noise)
    random_phases = check_flag("random_phases", random_phases)
    check_flag("elevation_limit", elevation_limit)
    freq = check_freq(freq)  # before the tracks: a frequency in GHz named first
    integration = positive_number("integration", integration)
    bandwidth = positive_number("bandwidth", bandwidth)
    if bandwidth < _MIN_BANDWIDTH or bandwidth >= freq:
        raise ValueError(
            f"`bandwidth` {bandwidth:g} Hz is outside [{_MIN_BANDWIDTH:g} Hz, `freq`): "
            "bandwidths are in Hz (2 GHz is `2e9`)."
        )
    if integration < _SHORT_INTEGRATION:
        warn_user(
            f"`integration` is {integration:g} s per row: integrations are in "
            "seconds (10 s is `10.0`, not `10 / 3600`); the thermal noise grows "
            "as 1/sqrt(integration)."
        )
    efficiency = positive_number("efficiency", efficiency)
    if isinstance(n_pol, bool) or n_pol not in (1, 2):
        raise ValueError(f"`n_pol` must be 1 or 2, got {n_pol!r}.")
    check_errors_and_seed(gain_sigma, seed)
    if not is_polarimetric(image):
        given = {"dterms": dterms, "feeds": feeds, "mounts": mounts}
        given = [k for k, x in given.items() if x is not None]
        if field_rotation != "corrected":
            given.append("field_rotation")
        if given:
            raise ValueError(
                f"{', '.join(f'`{k}`' for k in given)} describe(s) a polarimetric "
                "observation, but `image` is a Stokes I image: observe the four "
                "Stokes planes, a `(4, ny, nx)` array or a polarimetric image model."
            )
    image, polarimetric = image_planes(image, grid)
    tracks = uv_tracks(
        array,
        ra=ra,
        dec=dec,
        freq=freq,
        mjd=mjd,
        times=times,
        elevation_limit=elevation_limit,
    )
    n = tracks["u"].size
    stored = jnp.result_type(float)  # VisData's float dtype: float32 without x64
    if np.unique(tracks["time"].astype(stored)).size < np.unique(tracks["time"]).size:
        raise ValueError(
            f"`times` has values closer than {stored} resolves (hours of day): they "
            "would become repeated rows; space them further apart, or enable "
            "`jax_enable_x64`."
        )
    if n == 0:
        raise ValueError(
            "no baseline has both stations above their elevation limit at the given "
            "`times`: check `ra`, `dec`, `mjd` and `times` (hours UTC)."
        )
    u, v = tracks["u"], tracks["v"]
    vis = model_visibilities(
        image if polarimetric else image[None], grid, u, v, forward
    )

    rng = np.random.default_rng(seed)
    a1, a2 = tracks["ant1"], tracks["ant2"]
    sefd = np.asarray(array.sefd)
    meta = dict(
        freq=freq,
        tint=integration,
        bandwidth=bandwidth,
        source=source,
        ra=ra,
        dec=dec,
        mjd=mjd,
    )
    if polarimetric:
        return observe_polarimetric(
            vis.T,
            tracks,
            names=array.names,
            xyz=np.asarray(array.xyz),
            sigma=thermal_sigma(
                sefd[a1],
                sefd[a2],
                bandwidth,
                integration,
                efficiency=efficiency,
                n_pol=1,
            ),  # fmt: skip
            rng=rng,
            gain_sigma=gain_sigma,
            random_phases=random_phases,
            add_noise=add_noise,
            dterms=dterms,
            feeds=feeds,
            mounts=mounts,
            field_rotation=field_rotation,
            meta=meta,
        )
    vis = vis[0]
    if gain_sigma > 0 or random_phases:
        g, k = station_gain_draws(
            tracks["time"], len(array), 1, rng, gain_sigma, random_phases
        )
        vis = g[k, a1, 0] * np.conj(g[k, a2, 0]) * vis
    sigma = thermal_sigma(
        sefd[a1], sefd[a2], bandwidth, integration, efficiency=efficiency, n_pol=n_pol
    )
    if add_noise:
        vis = vis + sigma * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    return VisData(
        u,
        v,
        vis,
        sigma,
        tracks["time"],
        a1,
        a2,
        station_names=array.names,
        station_xyz=np.asarray(array.xyz),
        **meta,
    )
