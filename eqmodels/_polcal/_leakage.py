"""Leakage calibration: the D-terms that bring polarimetric data closest to a
polarimetric model image.

The objective is eht-imaging's `leakage_cal` (`ehtim.calibrating.pol_cal`,
`dtype='vis'`, `const_fpol=False`, `inverse=False`), checked against it on M87
2017 data: the D-terms `d = (d_R, d_L)` of the calibrated stations minimise

`(1/P) Σ_p Σ_rows |C'_p − Ĉ_p|² / (2 N σ'_p²) + Σ |d / τ|²`

over the correlations `p` fitted (`P` of them; RL and LR by default), where
`C' = D'_a⁻¹ C D'_b⁻ᴴ` is the data with the trial D-terms removed
([`eqmodels.DTermTable`][]: `D' = [[1, d_R w], [d_L w̄, 1]]`, `w = e^{2iφ}` for
field-rotation-corrected data), `σ'` its propagated σ, `Ĉ` the model's
correlations (`RR = I + V`, `LL = I − V`, `RL = Q + iU`, `LR = Q − iU`), `N` the
number of rows and `τ` the `leakage_tol` (a Gaussian prior). Every station and
every interval are fitted at once, in one compiled Levenberg-Marquardt solve of
these residuals ([`eqmodels.solve`][]).
"""

from collections.abc import Callable, Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int

from .._data._polvisdata import check_polvisdata, CIRCULAR, PolVisData
from .._data._visdata import DEFAULT_SCAN_GAP_S
from .._gains._dterm_table import (
    derotate,
    DTermTable,
    FIELD_ROTATION_MODES,
    leakage_transform,
    rotation_weights,
)
from .._gains._intervals import band_range, check_interval, solution_intervals
from .._gains._selfcal import _forward_model
from .._grid import ImageGrid
from .._image._base import AbstractImageModel, evaluated_on
from .._numerics import asarray
from .._solvers._least_squares import LevenbergMarquardt
from .._solvers._solve import solve
from .._validation import warn_user


class LeakageParams(eqx.Module):
    """The D-terms being fitted: real and imaginary parts, `(n_intervals,
    n_stations, 2)` (R, L last)."""

    d_real: Float[Array, "*batch k s 2"]
    d_imag: Float[Array, "*batch k s 2"]


class LeakageChi2(eqx.Module):
    """eht-imaging's `leakage_cal` objective (see the module docstring) as a
    function of [`LeakageParams`][]: `__call__` the value, `residuals` the
    weighted residuals (`Σ r² = value`) for the least-squares solvers. Built by
    `leakage_problem`."""

    corr: Complex[Array, "m 4"]
    var: Float[Array, "m 4"]
    model: Complex[Array, "m 4"]
    interval: Int[Array, " m"]
    ant1: Int[Array, " m"]
    ant2: Int[Array, " m"]
    w: Complex[Array, "m 2"]
    free: Float[Array, "k s 2"]
    tol: Float[Array, ""]
    scale: Float[Array, " m"]
    pols: tuple[int, ...] = eqx.field(static=True)

    def dterms(self, params: LeakageParams) -> Complex[Array, "k s 2"]:
        """The complex D-terms (0 where not fitted)."""
        return self.free * (params.d_real + 1j * params.d_imag)

    def calibrated(self, params: LeakageParams):
        """`(C', σ'²)` of the rows at `params`."""
        d = self.dterms(params)
        da = d[self.interval, self.ant1]
        db = d[self.interval, self.ant2]
        return leakage_transform(
            self.corr, self.var, da, db, self.w[:, 0], self.w[:, 1]
        )

    def residuals(self, params: LeakageParams) -> Float[Array, " r"]:
        out, var = self.calibrated(params)
        p = np.asarray(self.pols)
        r = (out[:, p] - self.model[:, p]) * (self.scale[:, None] / jnp.sqrt(var[:, p]))
        return jnp.concatenate(
            [
                r.real.reshape(-1),
                r.imag.reshape(-1),
                (self.free * params.d_real / self.tol).reshape(-1),
                (self.free * params.d_imag / self.tol).reshape(-1),
            ]
        )

    def __call__(self, params: LeakageParams) -> Float[Array, ""]:
        r = self.residuals(params)
        return jnp.sum(r * r)


def _positive_float(name, x) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float | np.integer | np.floating):
        raise TypeError(f"`{name}` must be a number, got {x!r}.")
    if not (np.isfinite(x) and x > 0):
        raise ValueError(f"`{name}` must be finite and > 0, got {x!r}.")
    return float(x)


def _check_correlations(correlations) -> tuple[int, ...]:
    if isinstance(correlations, str):
        correlations = (correlations,)
    corr = tuple(correlations)
    bad = [c for c in corr if c not in CIRCULAR]
    if not corr or bad or len(set(corr)) != len(corr):
        raise ValueError(
            f"`correlations` must name distinct correlations among {list(CIRCULAR)}, "
            f"e.g. ('RL', 'LR') (eht-imaging's `pol_fit`), got {correlations!r}."
        )
    return tuple(CIRCULAR.index(c) for c in corr)


def model_correlations(data, model, grid, model_vis, pulse, forward) -> np.ndarray:
    """The model's correlations `(n, 4)` (RR, LL, RL, LR) at `data`'s rows, from a
    polarimetric image (array `(4, ny, nx)` with `grid`, or a polarimetric model)
    or from Stokes visibilities `model_vis` `(n, 4)`."""
    if model_vis is not None:
        if model is not None:
            raise TypeError("give `model` or `model_vis`, not both.")
        if forward is not None or pulse is not None:
            raise TypeError(
                "`forward` and `pulse` compute the model visibilities from `model`: "
                "give them with `model`, not with `model_vis`."
            )
        sv = np.asarray(model_vis)
        if sv.shape != (data.n_rows, 4) or not np.issubdtype(sv.dtype, np.number):
            raise ValueError(
                f"`model_vis` must be the Stokes visibilities (I, Q, U, V last) at "
                f"the rows of `data`, shape ({data.n_rows}, 4), got {sv.dtype} "
                f"{sv.shape}."
            )
        if not np.all(np.isfinite(sv)):
            raise ValueError("`model_vis` has non-finite values.")
        sv = sv.astype(np.complex128)
    else:
        if model is None:
            raise TypeError(
                "`model` is required: a polarimetric image model, or a `(4, ny, nx)` "
                "array (I, Q, U, V) with `grid`."
            )
        if isinstance(model, AbstractImageModel):
            if not getattr(model, "polarimetric", False):
                raise ValueError(
                    f"`model` is a Stokes I model ({type(model).__name__}): leakage "
                    "is fitted against a polarimetric model (four Stokes planes), "
                    "e.g. `em.PolPixelImage` or a `(4, ny, nx)` array."
                )
            img = evaluated_on(
                model, grid, "model", f"`grid` is {grid!r}: give no `grid` (the "
                "model's own is used) or the model's."
            )  # fmt: skip
            grid = model.grid if grid is None else grid
        else:
            img = asarray(model)
            if img.ndim == 2:
                raise ValueError(
                    f"`model` is a Stokes I image {tuple(img.shape)}: leakage is "
                    "fitted against a polarimetric image, the planes I, Q, U, V "
                    "`(4, ny, nx)`."
                )
            if grid is None:
                raise TypeError(
                    "`grid` is required when `model` is an array: "
                    "`leakage_calibrate(data, stokes, grid=ImageGrid(...))`."
                )
        if not isinstance(grid, ImageGrid):
            raise TypeError(f"`grid` must be an ImageGrid, got {type(grid).__name__}.")
        if tuple(img.shape) != (4, grid.ny, grid.nx):
            raise ValueError(
                f"`model` has shape {tuple(img.shape)} but `grid` is "
                f"({grid.ny}, {grid.nx}): give the four Stokes planes (4, "
                f"{grid.ny}, {grid.nx})."
            )
        if not np.all(np.isfinite(np.asarray(img))):
            raise ValueError("`model` has non-finite pixels (NaN or inf).")
        fwd = _forward_model(forward, grid, data.u, data.v, pulse)
        sv = np.asarray(fwd.batched(img.astype(fwd.dtype))).T.astype(np.complex128)
    i, q, u, v = sv.T
    return np.stack([i + v, i - v, q + 1j * u, q - 1j * u], axis=1)


class LeakageProblem(NamedTuple):
    """What `leakage_problem` sets up: the objective, the start (D-terms 0), and
    the bookkeeping to make a table of the solution (which D-terms are fitted,
    the intervals' bounds, the rows of `data` used)."""

    objective: LeakageChi2
    start: LeakageParams
    solved: np.ndarray
    bounds: np.ndarray
    rows: np.ndarray


def leakage_problem(
    data,
    model=None,
    *,
    grid: ImageGrid | None = None,
    model_vis: ArrayLike | None = None,
    stations: Sequence[str] | str | None = None,
    interval: str | float | int = "track",
    leakage_tol=0.1,
    correlations: Sequence[str] = ("RL", "LR"),
    field_rotation: str = "corrected",
    pulse=None,
    scan_gap: float | int = DEFAULT_SCAN_GAP_S,
    forward: str | type | Callable | None = None,
) -> LeakageProblem:
    """The objective of [`eqmodels.leakage_calibrate`][] (same arguments),
    checked and built on the host."""
    check_polvisdata(data)
    if any(f != "circular" for f in data.feeds):
        lin = [s for s, f in zip(data.station_names, data.feeds) if f != "circular"]
        raise ValueError(
            f"`data` has stations with linear feeds ({lin}): leakage calibration "
            "fits the D-terms of circular feeds (R, L) only."
        )
    if field_rotation not in FIELD_ROTATION_MODES:
        raise ValueError(
            f"`field_rotation` must be one of {list(FIELD_ROTATION_MODES)}, got "
            f"{field_rotation!r}: 'corrected' for data whose field rotation was "
            "removed but not their leakage (the EHT's released files), 'raw' for "
            "data as the telescopes record them, 'none' to ignore it."
        )
    tol = _positive_float("leakage_tol", leakage_tol)
    pols = _check_correlations(correlations)
    interval = check_interval(interval)
    names = data.station_names
    flag = np.asarray(data.flag)
    full = ~flag.any(axis=1)
    if not full.any():
        raise ValueError(
            "no row of `data` has all four correlations (RR, LL, RL, LR): the "
            "leakage fit needs them (eht-imaging's `leakage_cal` would be NaN)."
        )
    a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
    has_full = np.zeros(len(names), bool)
    has_full[a1[full]] = True
    has_full[a2[full]] = True
    if stations is None:
        calibrated = has_full
    else:
        if not isinstance(stations, str) and len(stations) == 0:
            raise ValueError(
                "`stations` is empty, so nothing would be calibrated: give the "
                "stations to solve for, or None for all of them."
            )
        idx = data._rows()._station_indices("stations", stations)
        missing = [names[i] for i in idx if not has_full[i]]
        if missing:
            raise ValueError(
                f"`stations`: {missing} have no row with all four correlations "
                "(single-polarization, or flagged): their D-terms cannot be "
                "fitted; leave them out."
            )
        calibrated = np.zeros(len(names), bool)
        calibrated[idx] = True
    if field_rotation != "none":
        data.field_rotation()  # refuses stations without positions or mounts
    mc = model_correlations(data, model, grid, model_vis, pulse, forward)
    if not np.any(mc[full] != 0):
        raise ValueError(
            "the model's visibilities are all zero (an empty image?): there is "
            "nothing to calibrate against; give a model with flux."
        )
    rows_vd = data._rows()
    slot, bounds = solution_intervals(rows_vd, interval, scan_gap=scan_gap)
    n_int = bounds.shape[0]
    k_row = np.asarray(slot)[np.asarray(data.time_index)]
    lo, hi = band_range(rows_vd, k_row, n_int)
    mixed = np.flatnonzero(lo < hi)
    if mixed.size:
        raise ValueError(
            f"{mixed.size} of {n_int} leakage intervals hold rows of more than one "
            f"band (bands at {list(data.band_freqs)} Hz), whose D-terms differ: "
            "calibrate each band on its own (`data.select(bands=[b])`) and carry "
            "a table to the other band with `table.calibrate(other)`."
        )
    rows = np.flatnonzero(full)
    present = np.zeros((n_int, len(names)), bool)
    present[k_row[rows], a1[rows]] = True
    present[k_row[rows], a2[rows]] = True
    solved = present & calibrated[None, :]
    w, e = rotation_weights(data, field_rotation)
    corr = np.asarray(data.corr)
    if field_rotation == "raw":
        corr = derotate(corr, e[:, 0], e[:, 1])
    m = rows.size
    objective = LeakageChi2(
        corr=asarray(corr[rows]),
        var=asarray(np.asarray(data.sigma)[rows] ** 2),
        model=asarray(mc[rows]),
        interval=asarray(k_row[rows]),
        ant1=asarray(a1[rows]),
        ant2=asarray(a2[rows]),
        w=asarray(w[rows]),
        free=asarray(np.repeat(solved[:, :, None], 2, axis=2).astype(np.float64)),
        tol=asarray(tol),
        scale=asarray(np.full(m, np.sqrt(1.0 / (2.0 * m * len(pols))))),
        pols=pols,
    )
    zero = asarray(np.zeros((n_int, len(names), 2)))
    return LeakageProblem(
        objective, LeakageParams(zero, zero), solved, np.asarray(bounds), rows
    )


def leakage_calibrate(
    data,
    model=None,
    *,
    grid: ImageGrid | None = None,
    model_vis: ArrayLike | None = None,
    stations: Sequence[str] | str | None = None,
    interval: str | float | int = "track",
    leakage_tol=0.1,
    correlations: Sequence[str] = ("RL", "LR"),
    field_rotation: str = "corrected",
    max_steps: int = 100,
    pulse=None,
    scan_gap: float | int = DEFAULT_SCAN_GAP_S,
    forward: str | type | Callable | None = None,
) -> tuple[PolVisData, DTermTable]:
    """Leakage calibration: solve the D-terms `d_R`, `d_L` of the chosen stations
    against a polarimetric model, and remove them from the data.

    The objective is eht-imaging's `leakage_cal` (see the module docstring and
    docs/polarimetry.md): the χ² of the leakage-corrected correlations against
    the model's, plus a Gaussian prior `Σ |d / leakage_tol|²`. All stations and
    intervals are fitted at once (one compiled Levenberg-Marquardt solve).

    **Arguments:**

    - `data`: a [`eqmodels.PolVisData`][] of circular feeds, one band per
      interval. Rows with a flagged correlation do not enter the fit.
    - `model`: the polarimetric model: an `AbstractPolImageModel`, or a
      `(4, ny, nx)` array (I, Q, U, V, Jy/pixel) with `grid`; or give its
      Stokes visibilities at `data`'s rows as `model_vis` `(n, 4)` instead.
    - `stations`: names of the stations whose D-terms are fitted (default every
      station with rows of all four correlations); the others keep D = 0.
    - `interval`: `"track"` (default, one set per station, as eht-imaging),
      `"scan"`, or a number of seconds.
    - `leakage_tol`: the prior's σ on the real and imaginary parts of each
      D-term (eht-imaging's `leakage_tol`).
    - `correlations`: the correlations fitted (eht-imaging's `pol_fit`),
      default `("RL", "LR")`.
    - `field_rotation`: how `data` carries the field rotation: `"corrected"`
      (default: removed, leakage not, as the EHT's released files: the D-terms
      turn by `e^{±2iφ}`), `"raw"` (not removed: removed first, then as
      `"corrected"`; the calibrated data carry none), `"none"` (ignored:
      D-terms unrotated).
    - `max_steps`: the most Levenberg-Marquardt steps; a warning says when the
      solve stops there.
    - `pulse`, `forward`, `scan_gap`: as [`eqmodels.self_calibrate`][].

    **Returns:** `(calibrated, table)`: the data with the D-terms removed
    (`table.calibrate(data)`) and the [`eqmodels.DTermTable`][] found.
    """
    if (
        isinstance(max_steps, bool)
        or not isinstance(max_steps, int | np.integer)
        or max_steps < 1
    ):
        raise ValueError(f"`max_steps` must be a positive integer, got {max_steps!r}.")
    problem = leakage_problem(
        data,
        model,
        grid=grid,
        model_vis=model_vis,
        stations=stations,
        interval=interval,
        leakage_tol=leakage_tol,
        correlations=correlations,
        field_rotation=field_rotation,
        pulse=pulse,
        scan_gap=scan_gap,
        forward=forward,
    )
    d, steps, converged, reason = _solve_intervals(problem, int(max_steps))
    if not converged:
        warn_user(
            f"leakage calibration stopped ({reason}) after {steps} steps before "
            "converging: raise `max_steps` (the D-terms are not the objective's "
            "minimum)."
        )
    table = DTermTable(
        d,
        problem.solved,
        problem.bounds,
        data.station_names,
        interval=check_interval(interval),
        field_rotation=field_rotation,
        mjd=data.mjd,
        freq=float(data.freq),
    )
    return table.calibrate(data), table


def split_intervals(problem: LeakageProblem) -> tuple[LeakageChi2, LeakageParams]:
    """The objective split into one independent objective per interval (the
    D-terms of an interval touch only its rows), stacked along a leading axis:
    rows padded to one length with weight 0, each member's D-terms `(1, s, 2)`.
    Their values sum to the objective's (same `N`, same prior)."""
    obj = problem.objective
    k_row = np.asarray(obj.interval)
    n_int = problem.solved.shape[0]
    counts = np.bincount(k_row, minlength=n_int)
    r_max = max(int(counts.max()), 1)
    order = np.argsort(k_row, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.arange(k_row.size) - np.repeat(starts, counts)
    live = np.zeros((n_int, r_max), bool)
    live[k_row[order], pos] = True
    take = np.zeros((n_int, r_max), np.int64)
    take[k_row[order], pos] = order

    def pad(x, fill):
        x = np.asarray(x)
        out = x[take]
        shape = live.shape + (1,) * (x.ndim - 1)
        return np.where(live.reshape(shape), out, fill)

    free = np.asarray(obj.free)
    arrays = {
        "corr": pad(obj.corr, 0.0),
        "var": pad(obj.var, 1.0),
        "model": pad(obj.model, 0.0),
        "ant1": pad(obj.ant1, 0),
        "ant2": pad(obj.ant2, 0),
        "w": pad(obj.w, 1.0),
        "scale": pad(obj.scale, 0.0),
    }
    members = [
        LeakageChi2(
            **{name: asarray(a[k]) for name, a in arrays.items()},
            interval=asarray(np.zeros(r_max, np.int64)),
            free=asarray(free[k : k + 1]),
            tol=obj.tol,
            pols=obj.pols,
        )
        for k in range(n_int)
    ]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *members)
    zero = asarray(np.zeros((n_int, 1) + free.shape[1:]))
    return stacked, LeakageParams(zero, zero)


def _solve_intervals(problem: LeakageProblem, max_steps: int):
    """Every interval's D-terms at once: one compiled Levenberg-Marquardt solve
    `vmap`ped over the intervals. **Returns:** `(dterms (k, s, 2), most steps,
    all converged, a reason)`."""
    stacked, start = split_intervals(problem)
    n_par = 2 * int(np.prod(start.d_real.shape[1:]))
    sol = _batched_solve(stacked, start, max_steps, n_par)
    d = np.asarray(stacked.free[:, 0]) * (
        np.asarray(sol.model.d_real[:, 0]) + 1j * np.asarray(sol.model.d_imag[:, 0])
    )
    # The stopping test (`converged` also asks every direction to be constrained:
    # an interval's held or absent stations are directions the data do not see).
    conv = np.isin(np.atleast_1d(sol.reason), ("gtol", "ftol"))
    reasons = np.atleast_1d(sol.reason)
    bad = reasons[~conv]
    return d, int(np.max(sol.steps)), bool(conv.all()), str(bad[0]) if bad.size else ""


@eqx.filter_jit
def _batched_solve(stacked, start, max_steps, n_par):
    def one(obj, p):
        return solve(
            obj,
            p,
            LevenbergMarquardt(chunk_size=n_par),
            max_steps=max_steps,
            ftol=1e-13,
            gtol=1e-12,
        )

    return jax.vmap(one)(stacked, start)
