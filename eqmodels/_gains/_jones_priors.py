"""Priors on station Jones matrices (D-terms, R/L gains), as terms of an
objective: sums of squares of the Jones module's parameters, like the gain
priors ([`eqmodels.AbstractGainPrior`][]), so that [`eqmodels.with_gains`][] and
[`eqmodels.WithGains`][] put the current matrices into them."""

import numbers
from collections.abc import Mapping
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .._numerics import asarray
from ._priors import AbstractGainPrior
from ._station_jones import StationJones


def _check_jones(prior: type, jones) -> None:
    if not isinstance(jones, StationJones):
        raise TypeError(
            f"`{prior.__name__}` reads the tables of a StationJones (`d_real`, "
            f"`log_amp`, ...); got {type(jones).__name__}. Build them with "
            "`StationJones.from_data(data)`, or write a prior of your own "
            "(subclass `eqmodels.AbstractGainPrior`)."
        )


def _positive(name: str, x) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"`{name}` must be a number, got {x!r}.")
    if not (x > 0):
        raise ValueError(f"`{name}` must be > 0 (math.inf leaves it free), got {x!r}.")
    return float(x)


class DTermPrior(AbstractGainPrior):
    r"""A Gaussian prior on the leakage D-terms, centred on 0:

    `penalty = Σ_{k,s,p} |d_ksp|² / σ_s²` (real and imaginary parts each of
    standard deviation `σ_s`), over leakage intervals `k`, stations `s` and
    feeds `p` (R, L); `σ_s` is `sigma`, or the station's own in
    `station_sigma`.

    In an objective whose data terms are χ²/(2N)-normalised (as
    [`eqmodels.CorrelationChi2`][]), weigh it by `1/(2N)` to make it the
    Gaussian log-prior of the same likelihood (`chi2 + prior / (2 * N)`).
    """

    report_name = "dterm"
    reads_gain_tables: ClassVar[bool] = True
    gains: StationJones
    sigma: Float[Array, ""]
    inv_sigma: Float[Array, " s"]

    def __init__(
        self,
        jones: StationJones,
        sigma: float = 0.05,
        *,
        station_sigma: Mapping[str, float] | None = None,
    ):
        """**Arguments:**

        - `jones`: the [`eqmodels.StationJones`][] it constrains.
        - `sigma`: the standard deviation of the real and imaginary parts of
          each D-term (> 0; 0.05 for 5 % leakage; `math.inf` leaves them free).
        - `station_sigma`: a σ of their own for some stations, by name (e.g.
          `{"AA": 1e-3}` to hold the D-terms of stations already calibrated
          near 0); the others get `sigma`.
        """
        _check_jones(type(self), jones)
        self.gains = jones
        default = _positive("sigma", sigma)
        self.sigma = asarray(default)
        per = np.full(len(jones.station_names), default)
        if station_sigma is not None:
            if not isinstance(station_sigma, Mapping):
                raise TypeError(
                    "`station_sigma` must be a dict of station name -> σ, got "
                    f"{type(station_sigma).__name__}."
                )
            for name, value in station_sigma.items():
                if name not in jones.station_names:
                    raise ValueError(
                        f"`station_sigma` names {name!r}, which is not one of the "
                        f"stations {list(jones.station_names)}."
                    )
                per[jones.station_names.index(name)] = _positive(
                    f"station_sigma[{name!r}]", value
                )
        self.inv_sigma = asarray(1.0 / per)

    def gain_residuals(self, gains: StationJones) -> Float[Array, " m"]:
        w = self.inv_sigma.astype(gains.d_real.dtype)[None, :, None]
        return jnp.concatenate(
            [(gains.d_real * w).reshape(-1), (gains.d_imag * w).reshape(-1)]
        )


class JonesGainPrior(AbstractGainPrior):
    r"""A prior on the R and L (X, Y) gains of station Jones matrices:

    `penalty = Σ_{k,s,p} (ln|g_ksp| / τ)² + Σ_{k,p} (φ_ref,kp / σ_φ)²`,

    a log-normal prior on the amplitudes (tolerance `tol`) and a phase reference
    per interval: `φ_ref,kp` the phase of feed `p` of station `reference` in
    interval `k`, or the mean phase of feed `p` over the stations present there
    (`reference=None`, or the station absent). Correlations see only phase
    differences between stations, and a common R − L phase offset rotates the
    EVPA of the image: the reference fixes both.
    """

    report_name = "jones_gain"
    reads_gain_tables: ClassVar[bool] = True
    gains: StationJones
    tol: Float[Array, ""]
    phase_sigma: Float[Array, ""]
    station: Int[Array, ""]

    def __init__(
        self,
        jones: StationJones,
        tol: float = 0.2,
        *,
        reference: str | None = None,
        phase_sigma: float = 1.0,
    ):
        """**Arguments:**

        - `jones`: the [`eqmodels.StationJones`][].
        - `tol`: the fractional tolerance of the amplitudes (> 0; `math.inf`
          frees them).
        - `reference`: the reference station's name (default: the mean phase).
        - `phase_sigma`: the phase scale of the reference (radians, > 0).
        """
        _check_jones(type(self), jones)
        if reference is not None and reference not in jones.station_names:
            raise ValueError(
                f"`reference`={reference!r} is not one of the stations "
                f"{list(jones.station_names)}."
            )
        self.gains = jones
        self.tol = asarray(_positive("tol", tol))
        self.phase_sigma = asarray(_positive("phase_sigma", phase_sigma))
        index = -1 if reference is None else jones.station_names.index(reference)
        self.station = asarray(np.int32(index))

    def gain_residuals(self, gains: StationJones) -> Float[Array, " m"]:
        la, ph = gains.log_amp, gains.phase
        amp = la / self.tol.astype(la.dtype)  # 0 for tol = inf
        w = jnp.asarray(gains.present, ph.dtype)[..., None]  # (k, s, 1)
        mean = jnp.sum(w * ph, axis=1) / jnp.maximum(jnp.sum(w, axis=1), 1.0)
        col = jnp.maximum(self.station, 0)
        here = (self.station >= 0) & (w[:, col, 0] > 0)
        ref = jnp.where(here[:, None], ph[:, col, :], mean)  # (k, 2)
        return jnp.concatenate(
            [amp.reshape(-1), (ref / self.phase_sigma.astype(ph.dtype)).reshape(-1)]
        )
