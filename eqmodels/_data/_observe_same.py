"""A synthetic observation with the coverage of a real one: an image observed at
the rows (baselines, times, frequencies, noise, flags) of an existing data set, as
eht-imaging's `Obsdata.observe_same`."""

from collections.abc import Mapping

import numpy as np
from jaxtyping import ArrayLike

from .._forward._select import ForwardLike
from .._grid import ImageGrid
from .._validation import check_flag
from ._observe import (
    check_errors_and_seed,
    image_planes,
    is_polarimetric,
    model_visibilities,
)
from ._observe_pol import corrupt_polarimetric, station_gain_draws
from ._polvisdata import PolVisData
from ._visdata import VisData


def observe_same(
    image,
    grid: ImageGrid,
    data: VisData | PolVisData,
    *,
    seed: int = 0,
    add_noise: bool = True,
    gain_sigma: float | int = 0.0,
    random_phases: bool = False,
    dterms: Mapping | ArrayLike | None = None,
    field_rotation: str = "corrected",
    forward: ForwardLike | None = None,
) -> VisData | PolVisData:
    """`image` observed with the coverage of `data`: the same rows (baselines,
    times, `(u, v)` in wavelengths of each row's band, stations, mounts and feeds),
    the same thermal noise `σ` and the same flags, with the model in place of the
    measurements (eht-imaging's `Obsdata.observe_same`). The synthetic data of a
    real array and night, e.g. to test an imaging recipe on a known image.

    - A Stokes I image and a [`eqmodels.VisData`][]: `V = g_a conj(g_b) V_model +
      noise`, the station gains drawn as [`eqmodels.observe`][] draws them.
    - The four Stokes planes and a [`eqmodels.PolVisData`][]: the four
      correlations `J_a C J_bᴴ` of each row through each station's Jones matrix
      (gains per hand, leakage `dterms`, the data's feeds, the field rotation of
      the data's mounts and source position; see [`eqmodels.observe`][]), and
      noise of each correlation's `σ`. Flagged correlations stay flagged (their
      recorded values are kept).

    **Arguments:**

    - `image`: `(ny, nx)` (Stokes I data) or `(4, ny, nx)` (polarimetric data)
      array in Jy/pixel, or an image model; `grid` its grid.
    - `data`: the data set whose coverage and noise are used.
    - `seed`: numpy random seed, an integer >= 0 (noise and gains).
    - `add_noise`: add thermal noise of the data's `σ` (the `σ` are kept either
      way).
    - `gain_sigma`, `random_phases`: station gain errors per timestamp, as
      [`eqmodels.observe`][].
    - `dterms`: polarimetric data only: `{station: (d_R, d_L)}` (others 0) or a
      complex array `(n_stations, 2)`.
    - `field_rotation`: polarimetric data only: `"corrected"` (default, as the
      EHT's released files), `"raw"` or `"none"` (see [`eqmodels.observe`][]).
    - `forward`: the forward model, as [`eqmodels.observe`][] takes it (default
      an exact [`eqmodels.DirectFT`][]).

    **Returns:** a data set of `data`'s type, `data` with the model's
    visibilities (or correlations) in place of its own.
    """
    if not isinstance(grid, ImageGrid):
        raise TypeError(f"`grid` must be an ImageGrid, got {type(grid).__name__}.")
    if not isinstance(data, VisData | PolVisData):
        raise TypeError(
            "`data` must be a VisData or a PolVisData (e.g. from "
            f"`eqmodels.load_uvfits`), got {type(data).__name__}."
        )
    add_noise = check_flag("add_noise", add_noise)
    random_phases = check_flag("random_phases", random_phases)
    check_errors_and_seed(gain_sigma, seed)
    polarimetric_data = isinstance(data, PolVisData)
    if is_polarimetric(image) != polarimetric_data:
        raise ValueError(
            "`image` holds the four Stokes planes but `data` is a Stokes I VisData: "
            "observe the Stokes I plane (`image[0]`), or give polarimetric data."
            if not polarimetric_data
            else "`image` is a Stokes I image but `data` is a PolVisData: observe "
            "the four Stokes planes (a `(4, ny, nx)` array or a polarimetric image "
            "model), or give the Stokes I data (`data.stokes_i()`)."
        )
    if not polarimetric_data:
        given = [k for k, x in {"dterms": dterms}.items() if x is not None]
        if field_rotation != "corrected":
            given.append("field_rotation")
        if given:
            raise ValueError(
                f"{', '.join(f'`{k}`' for k in given)} describe(s) a polarimetric "
                "observation, but `data` is a Stokes I VisData: give a PolVisData "
                "and the four Stokes planes."
            )
    planes, _ = image_planes(image, grid)
    if not polarimetric_data:
        planes = planes[None]
    vis = model_visibilities(planes, grid, data.u, data.v, forward)  # (planes, n)
    rng = np.random.default_rng(seed)
    a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
    n = a1.size
    if polarimetric_data:
        corr = corrupt_polarimetric(
            vis.T, data, rng=rng, gain_sigma=gain_sigma,
            random_phases=random_phases, dterms=dterms,
            field_rotation=field_rotation,
        )  # fmt: skip
        flag = np.asarray(data.flag)
        sigma = np.where(flag, 0.0, np.asarray(data.sigma))
        if add_noise:
            corr = corr + sigma * (
                rng.standard_normal((n, 4)) + 1j * rng.standard_normal((n, 4))
            )
        return data.replace(corr=np.where(flag, np.asarray(data.corr), corr))
    out = vis[0]
    if gain_sigma > 0 or random_phases:
        g, k = station_gain_draws(
            np.asarray(data.time),
            len(data.station_names),
            1,
            rng,
            gain_sigma,
            random_phases,
        )
        out = g[k, a1, 0] * np.conj(g[k, a2, 0]) * out
    if add_noise:
        sigma = np.asarray(data.sigma)
        out = out + sigma * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    return data.replace(vis=out)
