"""Priors on station gains, as terms of an objective.

Each prior is a sum of squares of its own gains' parameters (`value = Σ r²`,
`residuals(image)` gives `r`), so it composes with data terms into an
[`eqmodels.Objective`][] (`chi2 + prior`), works with least-squares solvers, and
ignores the image. [`eqmodels.with_gains`][] replaces the gains of the data terms
and the priors of an objective at once.
"""

import abc
import math
import numbers
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, Scalar

from .._data._stations import station_entries
from .._numerics import asarray
from .._terms._base import AbstractTerm, ImageLike
from .._validation import is_concrete
from ._abstract import AbstractGains
from ._station_gains import StationGains


class AbstractGainPrior(AbstractTerm):
    """Base class of gain priors: a penalty `Σ r²` on the field `gains`.

    Subclasses declare `gains` (a [`eqmodels.StationGains`][], or gains of the
    user's own, an [`eqmodels.AbstractGains`][]) and implement
    `gain_residuals(gains)`.

    A [`eqmodels.survey`][] over data sets whose gains differ in solution
    intervals or station table pads all their gains to one shape (gain 1,
    `log_amp = phase = 0`, `present` False, where a data set has none) under
    placeholder tables. It does so under a prior only when the class declares
    `reads_gain_tables = False`: its arithmetic reads the gains' arrays alone
    (not `bounds`, `station_names`, `interval_freqs`, nor the number of
    intervals or stations), gives entries without data nothing (as the built-in
    priors weigh by `present`), and it holds no per-station or per-interval
    array of its own. The default, `True`, makes such a survey refuse, naming
    the class.
    """

    gains: eqx.AbstractVar[AbstractGains]
    reads_gain_tables: ClassVar[bool] = True

    @abc.abstractmethod
    def gain_residuals(self, gains: AbstractGains) -> Float[Array, " m"]:
        """**Arguments:** `gains`, of the class of the prior's `gains`.

        **Returns:** the residual vector `r` (the penalty is `Σ r²`).
        """

    def residuals(self, image: ImageLike | None = None) -> Float[Array, " m"]:
        """**Arguments:** `image` (ignored: a gain prior does not look at it).

        **Returns:** the residual vector `r` of the current `gains`.
        """
        return self.gain_residuals(self.gains)

    def __call__(self, image: ImageLike | None = None) -> Scalar:
        """**Arguments:** `image` (ignored).

        **Returns:** the penalty `Σ r²`.
        """
        r = self.residuals(image)
        return jnp.sum(r * r)


def check_station_gains(prior: type, gains) -> None:
    """Refuse anything but `StationGains` for a built-in prior, whose arithmetic
    reads their per-interval, per-station tables. (The priors' `__init__` take
    any `AbstractGains`, so that a user's gains meet this message, which says
    what they lack, rather than the type checker's.)"""
    if isinstance(gains, StationGains):
        return
    if isinstance(gains, AbstractGains):
        raise TypeError(
            f"`{prior.__name__}` reads the per-interval, per-station tables of a "
            "StationGains (`log_amp`, `phase`, `present`, `station_names`); "
            f"`gains` is a {type(gains).__name__}, which does not have that "
            "layout. Write a prior for it: subclass `eqmodels.AbstractGainPrior` "
            "with a `gain_residuals(gains)` of your own."
        )
    raise TypeError(
        "`gains` must be a StationGains (`StationGains.from_data(data)`), got "
        f"{type(gains).__name__}."
    )


def _tol(name, x):
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(
            f"`{name}` must be a number (e.g. 0.2) or, where a pair is taken, a "
            f"tuple or list `(above 1, below 1)` such as (0.02, 0.2); got {x!r}."
        )
    if not (x > 0):
        raise ValueError(
            f"`{name}` must be > 0 (math.inf leaves a side free), got {x!r}."
        )
    return float(x)


def tolerance_pair(name, tol) -> tuple[float, float]:
    """`tol` (a number, or a pair `(above, below)`) as two positive floats."""
    if isinstance(tol, np.ndarray | np.generic | jax.Array) and np.ndim(tol) <= 1:
        tol = np.asarray(tol).tolist()  # a numpy or JAX number or pair
    if isinstance(tol, tuple | list):
        if len(tol) != 2:
            raise ValueError(
                f"`{name}` must be a number or a pair (above 1, below 1), got {tol!r}."
            )
        return _tol(f"{name}[0]", tol[0]), _tol(f"{name}[1]", tol[1])
    t = _tol(name, tol)
    return t, t


def station_tolerances(
    tol, station_names, name: str = "tol", active=None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-station `(above, below)` tolerances from a number, a pair, or a dict
    `{station: number or pair}` (key `"default"` for the others, else ∞;
    entries for stations absent from `station_names` are ignored)."""
    n = len(station_names)
    if isinstance(tol, dict):
        tol = station_entries(
            tol,
            station_names,
            name,
            tolerance_pair,
            reserved=("default",),
            active=active,
            unnamed='`"default": math.inf` leaves them free',
        )
        default = tol.get("default", (math.inf, math.inf))
        pairs = [tol.get(s, default) for s in station_names]
    else:
        pairs = [tolerance_pair(name, tol)] * n
    arr = np.array(pairs, np.float64)
    return arr[:, 0], arr[:, 1]


class GainAmplitudePrior(AbstractGainPrior):
    r"""A log-normal prior on the gain amplitudes (eht-imaging's self-calibration
    prior, `gain_tol`):

    `penalty = Σ_{k,s} (ln|g_ks| / τ_s)²`, with `τ_s = tol_above_s` where
    `|g| > 1` and `tol_below_s` where `|g| ≤ 1`.

    eht-imaging's `gain_tol=[0.02, 0.2]` is `tol=(0.02, 0.2)`: forward gains above 1
    (data brighter than the model) are held to 2 %, below 1 allowed 20 %.
    """

    report_name = "gain_amp"
    reads_gain_tables: ClassVar[bool] = False
    gains: StationGains
    tol_above: Float[Array, " s"]
    tol_below: Float[Array, " s"]

    def __init__(
        self,
        gains: AbstractGains,
        tol: float | tuple | list | dict | ArrayLike = 0.2,
    ):
        """**Arguments:**

        - `gains`: the [`eqmodels.StationGains`][] it constrains.
        - `tol`: a fractional tolerance (a number), an asymmetric pair
          `(above 1, below 1)`, or a dict `{station: number or pair}` with an
          optional `"default"` (stations not named are free, `τ = ∞`, without it);
          entries for stations absent from `gains` are ignored (one dict serves
          every day of an array), but without `"default"` a dict that drops
          entries and leaves out stations with data is refused (another naming
          of the array?).
        """
        check_station_gains(type(self), gains)
        active = None  # stations with a solution somewhere (all, when traced)
        if is_concrete(gains.present):
            has = np.asarray(gains.present).any(axis=0)
            active = [s for s, h in zip(gains.station_names, has) if h]
        above, below = station_tolerances(tol, gains.station_names, active=active)
        self.gains = gains
        self.tol_above = asarray(above)
        self.tol_below = asarray(below)

    def gain_residuals(self, gains: StationGains) -> Float[Array, " m"]:
        a = gains.log_amp
        tol = jnp.where(a > 0, self.tol_above[None, :], self.tol_below[None, :])
        tol = tol.astype(a.dtype)
        return (a / tol).reshape(-1)


class GainPhaseReference(AbstractGainPrior):
    """Fixes the overall phase of the gains in every interval (visibilities only
    see phase differences `φ_a − φ_b`, so the common phase is free):

    `penalty = Σ_k (φ_ref,k / σ)²`, with `φ_ref,k` the phase of station `station`
    in interval `k`, or the mean phase of the stations present in interval `k`
    when `station` is `None` or absent there. (The field `station` holds the
    station's column as an integer array, `-1` for the mean.)
    """

    report_name = "gain_ref"
    reads_gain_tables: ClassVar[bool] = False
    gains: StationGains
    sigma: Float[Array, ""]
    station: Int[Array, ""]

    def __init__(
        self,
        gains: AbstractGains,
        station: str | None = None,
        *,
        sigma: float = 1.0,
    ):
        """**Arguments:**

        - `gains`: the [`eqmodels.StationGains`][].
        - `station`: the reference station's name (default: the mean phase).
        - `sigma`: the phase scale (radians, > 0).
        """
        check_station_gains(type(self), gains)
        if station is not None and station not in gains.station_names:
            raise ValueError(
                f"`station`={station!r} is not one of the gains' stations "
                f"{list(gains.station_names)}."
            )
        self.gains = gains
        # The column (an integer leaf, -1: the mean phase), so that the priors of
        # data sets whose station tables differ stack in one survey.
        index = -1 if station is None else gains.station_names.index(station)
        self.station = asarray(np.int32(index))
        self.sigma = asarray(_tol("sigma", sigma))

    def gain_residuals(self, gains: StationGains) -> Float[Array, " m"]:
        ph = gains.phase
        # Over the stations present in each interval: an absent station's phase
        # is unconstrained by the data and would cancel the mean (as
        # `self_calibrate`'s own gauge, which averages the present stations).
        w = jnp.asarray(gains.present, ph.dtype)
        mean = jnp.sum(w * ph, axis=1) / jnp.maximum(jnp.sum(w, axis=1), 1.0)
        # The named station where it has data, else the present stations' mean
        # (nothing else pins that interval's phase); no station named: the mean.
        col = jnp.maximum(self.station, 0)
        here = (self.station >= 0) & (w[:, col] > 0)
        ref = jnp.where(here, ph[:, col], mean)
        return ref / self.sigma.astype(ph.dtype)


class GainSmoothness(AbstractGainPrior):
    r"""Smoothness of the gains from one solution interval to the next:

    `penalty = Σ_{k,s} (Δ ln|g| / σ_amp)² + (2 sin(Δφ / 2) / σ_phase)²`,

    `Δ` the difference between a station's interval and its previous interval
    **with data** (`present`; `2 sin(Δφ/2)` is `|Δ e^{iφ}|`, so phase wraps cost
    nothing). An interval where the station has no data is skipped: its gain
    reaches no visibility, and linking it would let another prior on it (e.g.
    [`eqmodels.GainAmplitudePrior`][] pulling it to 1) drag the neighbouring
    real gains.
    """

    report_name = "gain_smooth"
    reads_gain_tables: ClassVar[bool] = False
    gains: StationGains
    amp_sigma: Float[Array, ""]
    phase_sigma: Float[Array, ""]

    def __init__(
        self,
        gains: AbstractGains,
        amp_sigma: float = 0.1,
        phase_sigma: float = math.inf,
    ):
        """**Arguments:**

        - `gains`: the [`eqmodels.StationGains`][] (at least two intervals).
        - `amp_sigma`: the scale of a log-amplitude step (> 0; `math.inf` frees it).
        - `phase_sigma`: the scale of a phase step (radians, > 0; `math.inf`, the
          default, frees it: atmospheric phases are not smooth between scans).
        """
        check_station_gains(type(self), gains)
        if gains.n_intervals < 2:
            raise ValueError(
                "`gains` has a single solution interval: smoothness in time needs at "
                "least two (use interval='scan' or a number of seconds)."
            )
        self.gains = gains
        self.amp_sigma = asarray(_tol("amp_sigma", amp_sigma))
        self.phase_sigma = asarray(_tol("phase_sigma", phase_sigma))

    def gain_residuals(self, gains: StationGains) -> Float[Array, " m"]:
        # Per station, the previous interval with data (-1: none): a running
        # maximum of the present intervals' indices, shifted by one. (Differences
        # through intervals without data would bias real gains towards the
        # amplitude prior's 1.)
        la, ph = gains.log_amp, gains.phase
        k = jnp.arange(la.shape[0])[:, None]
        last = jax.lax.cummax(jnp.where(gains.present, k, -1), axis=0)
        prev = jnp.concatenate([jnp.full_like(last[:1], -1), last[:-1]], axis=0)
        linked = gains.present & (prev >= 0)
        prev = jnp.maximum(prev, 0)
        da = la - jnp.take_along_axis(la, prev, axis=0)
        dp = ph - jnp.take_along_axis(ph, prev, axis=0)
        da = jnp.where(linked, da, 0.0) / self.amp_sigma.astype(la.dtype)
        dp = jnp.where(linked, 2 * jnp.sin(dp / 2), 0.0)
        dp = dp / self.phase_sigma.astype(dp.dtype)
        return jnp.concatenate([da.reshape(-1), dp.reshape(-1)])
