"""Systematic noise added to visibility sigmas (eht-imaging conventions).

- `add_systematic_noise(data, f)`: a per-station fractional error `f` on each
  visibility. A scalar `f` (the same at every station) gives
  `σ' = sqrt(σ² + (√2 f |V|)²)`; a per-site dict gives
  `σ' = sqrt(σ² + (f_s1² + f_s2²) |V|²)` (stations absent from the dict: 0;
  entries for stations absent from the data are ignored).
  `|V|` is the debiased amplitude by default, as eht-imaging's `vis`/`amp` terms.
  This is eht-imaging's `systematic_noise` imager option.
- `add_fractional_noise(data, f)`: `σ' = sqrt(σ² + (f |V|)²)` with the raw `|V|`
  — eht-imaging's `Obsdata.add_fractional_noise`, used before forming closures.
"""

import math

import numpy as np
from jaxtyping import ArrayLike, Float

from .._validation import check_flag, host_real
from ._stations import station_entries
from ._visdata import VisData


def debiased_amplitude(amp, sigma, *, force_nonzero: bool = False):
    """`sqrt(|V|² - σ²)` where `|V| > σ`, else 0 (or `σ` where `|V| < σ` when
    `force_nonzero`, as eht-imaging does before forming closure amplitudes)."""
    amp = np.abs(amp)
    deb2 = np.where(amp > sigma, amp**2 - sigma**2, 0.0)
    if force_nonzero:
        deb2 = deb2 + np.where(amp < sigma, sigma**2, 0.0)
    return np.sqrt(deb2)


def check_fraction(name, f):
    value = host_real(f)
    if value is None:
        raise TypeError(
            f"`{name}` must be a number (a fraction, e.g. 0.02), got {f!r}."
        )
    f = value
    if not (math.isfinite(f) and f >= 0):
        raise ValueError(f"`{name}` must be finite and >= 0, got {f!r}.")
    if f > 1:
        # Refused: a percentage (2.0 for 2 %) would be taken as 200 %.
        raise ValueError(
            f"`{name}` must be a fraction in [0, 1], got {f!r}: 2 % is `0.02`, not "
            "`2.0`."
        )
    return float(f)


def systematic_level(data: VisData, systematic_noise) -> np.ndarray:
    """Per-row fractional level: `√2 f` for a scalar, `sqrt(f1² + f2²)` for a
    dict of station name → fraction."""
    n = data.n_rows
    if isinstance(systematic_noise, dict):
        table = station_entries(
            systematic_noise,
            data.station_names,
            "systematic_noise",
            check_fraction,
            active=data.stations_present(),
        )
        per = np.zeros(data.n_stations)
        for k, f in table.items():
            per[data.station_names.index(k)] = f
        a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
        return np.sqrt(per[a1] ** 2 + per[a2] ** 2)
    f = check_fraction("systematic_noise", systematic_noise)
    return np.full(n, math.sqrt(2.0) * f)


def add_systematic_noise(
    data: VisData, systematic_noise, *, debias: bool = True
) -> VisData:
    """Inflate the sigmas by a per-station fractional systematic error.

    **Arguments:**

    - `data`: a [`eqmodels.VisData`][].
    - `systematic_noise`: a fraction `f` for every station (`σ' = sqrt(σ² + 2 f²
      |V|²)`), or a dict `{station: f}` (`σ' = sqrt(σ² + (f_1² + f_2²) |V|²)`;
      stations it does not name: 0; entries for stations absent from `data` are
      ignored, so one table such as [`eqmodels.m87_systematic_noise`][] serves
      every day of one naming of the array; a table that drops entries and leaves
      out stations with data is refused as another naming's).
    - `debias`: use the debiased amplitude for `|V|` (eht-imaging's default for its
      `vis` and `amp` terms).

    **Returns:** a new `VisData` with the inflated `sigma`.
    """
    level = systematic_level(data, systematic_noise)
    sigma = np.asarray(data.sigma)
    amp = np.abs(np.asarray(data.vis))
    if check_flag("debias", debias):
        amp = debiased_amplitude(amp, sigma)
    return data.replace(sigma=np.sqrt(sigma**2 + (level * amp) ** 2))


def add_fractional_noise(
    data: VisData, fraction: float | int | np.number | Float[ArrayLike, ""]
) -> VisData:
    """Add a fraction of each visibility amplitude to its sigma in quadrature,
    `σ' = sqrt(σ² + (f |V|)²)` (raw `|V|`), as eht-imaging's
    `add_fractional_noise`; apply it before forming closure quantities.

    **Arguments:**

    - `data`: a [`eqmodels.VisData`][].
    - `fraction`: `f` in [0, 1] (2 % is `0.02`).

    **Returns:** a new `VisData`.
    """
    f = check_fraction("fraction", fraction)
    sigma = np.asarray(data.sigma)
    amp = np.abs(np.asarray(data.vis))
    return data.replace(sigma=np.sqrt(sigma**2 + (f * amp) ** 2))
