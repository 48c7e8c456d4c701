"""R/L gain-ratio calibration: eht-imaging's `polgains_cal`.

In every solution interval the ratios `g_s = g_R / g_L` of the calibrated
stations (the reference station's phase held at 0; its amplitude too with
`method="phase"`) minimise

`Σ_rows |RR_ab − g_a ḡ_b ρ̂_ab LL_ab|² / (σ_RR² + σ_LL²)`

over the rows with both parallel hands, `ρ̂ = R̂R / L̂L` the model's ratio
(1 without a model: eht-imaging's assumption of zero Stokes V). With
`method="phase"` only the phases are free (`|g| = 1`). Every interval is solved
at once (one Levenberg-Marquardt `solve` `vmap`ped over the intervals).
"""

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int

from .._data._polvisdata import check_polvisdata
from .._data._visdata import DEFAULT_SCAN_GAP_S
from .._gains._intervals import check_interval, solution_intervals
from .._gains._rl_gain_table import RLGainTable
from .._grid import ImageGrid
from .._numerics import asarray
from .._solvers._least_squares import LevenbergMarquardt
from .._solvers._solve import solve
from .._validation import warn_user
from ._leakage import model_correlations


_RIDGE = 1e-6


class PolGainParams(eqx.Module):
    """`ln|g|` and `arg g` of the ratios, `(..., n_stations)`."""

    log_amp: Float[Array, "*batch s"]
    phase: Float[Array, "*batch s"]


class PolGainChi2(eqx.Module):
    """The objective of one interval (see the module docstring); padded rows
    have weight 0. `gauge` weighs the phases whose sum is fixed at 0 where the
    reference station is absent (the data see only phase differences)."""

    rr: Complex[Array, " m"]
    ll: Complex[Array, " m"]
    rho: Complex[Array, " m"]
    sinv: Float[Array, " m"]
    ant1: Int[Array, " m"]
    ant2: Int[Array, " m"]
    free_amp: Float[Array, " s"]
    free_phase: Float[Array, " s"]
    gauge: Float[Array, " s"]

    def ratios(self, p: PolGainParams) -> Complex[Array, " s"]:
        return jnp.exp(
            jax.lax.complex(self.free_amp * p.log_amp, self.free_phase * p.phase)
        )

    def residuals(self, p: PolGainParams) -> Float[Array, " r"]:
        g = self.ratios(p)
        d = (self.rr - g[self.ant1] * jnp.conj(g[self.ant2]) * self.rho * self.ll) * (
            self.sinv
        )
        gauge = jnp.sum(self.gauge * self.free_phase * p.phase)[None]
        # A faint ridge (1e-6) pins what the data leave undetermined (a group
        # of stations not connected to the reference: the ratio of their
        # amplitudes, their common phase) at the start, as eht-imaging's BFGS
        # from 1 leaves it; it moves determined ratios by ~1e-12 relatively.
        ridge = _RIDGE * jnp.concatenate(
            [self.free_amp * p.log_amp, self.free_phase * p.phase]
        )
        return jnp.concatenate([d.real, d.imag, gauge, ridge])

    def __call__(self, p: PolGainParams) -> Float[Array, ""]:
        r = self.residuals(p)
        return jnp.sum(r * r)


def polgains_calibrate(
    data,
    model=None,
    *,
    grid: ImageGrid | None = None,
    model_vis: ArrayLike | None = None,
    reference: str | None = None,
    stations: Sequence[str] | str | None = None,
    method: str = "phase",
    interval: str | float | int = "scan",
    max_steps: int = 100,
    pulse=None,
    scan_gap: float | int = DEFAULT_SCAN_GAP_S,
    forward: str | type | Callable | None = None,
):
    """R/L gain-ratio calibration (eht-imaging's `polgains_cal`; see the module
    docstring): align each station's R feed on its L feed so that RR/LL match
    the model's (or 1, zero Stokes V, without a model).

    **Arguments:**

    - `data`: a [`eqmodels.PolVisData`][] of circular feeds.
    - `model`: optional polarimetric model (as [`eqmodels.leakage_calibrate`][]),
      or `model_vis`; default none (`ρ̂ = 1`, eht-imaging's assumption).
    - `reference`: the station whose ratio has phase 0 (default the first
      station of the table with both parallel hands; eht-imaging's default is
      `"AA"`). With `method="both"` its amplitude is fitted (the data fix
      `|g_a||g_b|`, so every amplitude is determined; eht-imaging holds the
      reference at 1, which leaves its ratio's amplitude on the others).
    - `stations`: the stations solved (default all with both hands but the
      reference).
    - `method`: `"phase"` (default, eht-imaging's) or `"both"` (amplitude too).
    - `interval`: `"scan"` (default; eht-imaging's `scan_solutions=True`),
      `"timestamp"` (its default), `"track"`, or seconds.
    - `max_steps`, `pulse`, `scan_gap`, `forward`: as
      [`eqmodels.leakage_calibrate`][].

    **Returns:** `(calibrated, table)`: `table.calibrate(data)` and the
    [`eqmodels.RLGainTable`][].
    """
    check_polvisdata(data)
    if any(f != "circular" for f in data.feeds):
        raise ValueError(
            "`data` has linear feeds: R/L gain ratios are for circular feeds."
        )
    if method not in ("phase", "both"):
        raise ValueError(f"`method` must be 'phase' or 'both', got {method!r}.")
    if (
        isinstance(max_steps, bool)
        or not isinstance(max_steps, int | np.integer)
        or max_steps < 1
    ):
        raise ValueError(f"`max_steps` must be a positive integer, got {max_steps!r}.")
    interval = check_interval(interval)
    names = data.station_names
    flag = np.asarray(data.flag)
    both = ~flag[:, 0] & ~flag[:, 1]
    if not both.any():
        raise ValueError("no row of `data` has both RR and LL.")
    a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
    has = np.zeros(len(names), bool)
    has[a1[both]] = True
    has[a2[both]] = True
    if reference is None:
        ref = int(np.flatnonzero(has)[0])
    else:
        if reference not in names:
            raise ValueError(
                f"`reference`={reference!r} is not one of the data's stations "
                f"{list(names)}."
            )
        ref = names.index(reference)
        if not has[ref]:
            raise ValueError(
                f"`reference`={reference!r} has no row with both RR and LL: pick "
                "another station."
            )
    if stations is None:
        calibrated = has.copy()
    else:
        if not isinstance(stations, str) and len(stations) == 0:
            raise ValueError("`stations` is empty: give stations, or None for all.")
        idx = data._rows()._station_indices("stations", stations)
        calibrated = np.zeros(len(names), bool)
        calibrated[idx] = True
        missing = [names[i] for i in idx if not has[i]]
        if missing:
            raise ValueError(
                f"`stations`: {missing} have no row with both RR and LL "
                "(single polarization): their R/L ratio cannot be fitted."
            )
    calibrated[ref] = False
    if model is None and model_vis is None:
        rho = np.ones(data.n_rows, np.complex128)
    else:
        mc = model_correlations(data, model, grid, model_vis, pulse, forward)
        with np.errstate(divide="ignore", invalid="ignore"):
            rho = np.where(mc[:, 1] != 0, mc[:, 0] / mc[:, 1], 1.0)
    slot, bounds = solution_intervals(data._rows(), interval, scan_gap=scan_gap)
    n_int = bounds.shape[0]
    k_row = np.asarray(slot)[np.asarray(data.time_index)]
    rows = np.flatnonzero(both)
    kr = k_row[rows]
    counts = np.bincount(kr, minlength=n_int)
    r_max = max(int(counts.max()), 1)
    order = np.argsort(kr, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.arange(rows.size) - np.repeat(starts, counts)
    take = np.zeros((n_int, r_max), np.int64)
    live = np.zeros((n_int, r_max), bool)
    take[kr[order], pos] = rows[order]
    live[kr[order], pos] = True
    corr = np.asarray(data.corr)
    sig = np.asarray(data.sigma)
    present = np.zeros((n_int, len(names)), bool)
    present[kr, a1[rows]] = True
    present[kr, a2[rows]] = True
    free = present & calibrated[None, :]
    ref_in = present[:, ref]
    # The data fix products |g_a||g_b|: every present station's amplitude,
    # the reference's too, is determined (only the common phase is a gauge).
    amp_free = free.copy()
    amp_free[:, ref] = present[:, ref]
    gauge = np.where(
        ref_in[:, None], 0.0, free / np.maximum(free.sum(axis=1, keepdims=True), 1)
    )
    sinv = np.where(
        live, 1.0 / np.sqrt(sig[take, 0] ** 2 + sig[take, 1] ** 2), 0.0
    )  # fmt: skip
    members = [
        PolGainChi2(
            rr=asarray(np.where(live[k], corr[take[k], 0], 0.0)),
            ll=asarray(np.where(live[k], corr[take[k], 1], 0.0)),
            rho=asarray(np.where(live[k], rho[take[k]], 1.0)),
            sinv=asarray(sinv[k]),
            ant1=asarray(a1[take[k]]),
            ant2=asarray(a2[take[k]]),
            free_amp=asarray(amp_free[k] * float(method == "both")),
            free_phase=asarray(free[k].astype(np.float64)),
            gauge=asarray(gauge[k]),
        )
        for k in range(n_int)
    ]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *members)
    zero = asarray(np.zeros((n_int, len(names))))
    start = PolGainParams(zero, zero)
    if method == "both":
        # Phases first (amplitudes held at 1): from a start far in phase the
        # amplitudes would otherwise shrink toward 0, a poor local minimum.
        # The same compiled program (the masks are leaves).
        phase_only = eqx.tree_at(lambda o: o.free_amp, stacked, 0.0 * stacked.free_amp)
        first = _batched_solve(phase_only, start, int(max_steps))
        start = PolGainParams(zero, first.model.phase)
    sol = _batched_solve(stacked, start, int(max_steps))
    # The stopping test (`converged` also asks every direction to be constrained:
    # an interval's held or absent stations are directions the data do not see).
    conv = np.isin(np.atleast_1d(sol.reason), ("gtol", "ftol"))
    if not conv.all():
        warn_user(
            f"R/L gain calibration stopped before converging in {int((~conv).sum())} "
            f"of {n_int} intervals: raise `max_steps`."
        )
    g = np.asarray(jax.vmap(lambda o, p: o.ratios(p))(stacked, sol.model))
    solved = free | (amp_free & (method == "both"))
    table = RLGainTable(
        g, solved, np.asarray(bounds), names, reference=names[ref], mjd=data.mjd
    )
    return table.calibrate(data), table


@eqx.filter_jit
def _batched_solve(stacked, start, max_steps):
    def one(obj, p):
        return solve(
            obj,
            p,
            LevenbergMarquardt(chunk_size=2 * p.phase.shape[-1]),
            max_steps=max_steps,
            ftol=1e-13,
            gtol=1e-12,
        )

    return jax.vmap(one)(stacked, start)
