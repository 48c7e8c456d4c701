"""Self-calibration: station gains that bring the data closest to a model image.

In every solution interval `k`, independently, the gains minimise eht-imaging's
self-calibration objective (`eh.selfcal`, checked against it on M87 2017 data):

`Σ_rows |V_ab − g_a conj(g_b) V̂_ab|² / σ'² + Σ_s (ln|g_s| / τ_s)²`

(`σ'² = σ² + (pad_amp |V|)²`; `τ_s` the `gain_tol` above / below 1). With
`method="amp"` the residual is `A_ab − |g_a||g_b| |V̂_ab|` with `A` the debiased
amplitude; with `method="phase"` only phases are free. Since the data only see
`φ_a − φ_b`, the common phase of an interval is fixed by a reference (the mean
phase of the calibrated stations present, or a named station) that does not change
the fit.

The solver is a damped Newton method (Levenberg-Marquardt damping of the exact
Hessian) in `(ln|g|, arg g)` on every interval at once:
the rows are padded to one length per interval (weight 0), and the steps are
`jax.vmap`ped over intervals inside one compiled program.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from .._compile import run_once_jit
from .._data._noise import check_fraction, debiased_amplitude
from .._data._visdata import check_visdata, DEFAULT_SCAN_GAP_S, VisData
from .._forward._base import AbstractForwardModel
from .._forward._select import make_forward
from .._grid import ImageGrid
from .._image._base import AbstractImageModel, evaluated_on
from .._numerics import asarray
from .._validation import warn_user
from ._intervals import band_range, solution_intervals
from ._priors import station_tolerances
from ._station_gains import StationGains


_METHODS = ("both", "phase", "amp")


def _forward_model(forward, grid, u, v, pulse) -> AbstractForwardModel:
    """The forward model `forward` names or builds at `(u, v)`, resolved as the
    terms' `forward=` is ([`eqmodels.make_forward`][]: a name, a forward model
    class, or a callable `(grid, u, v) -> forward model`); `None` is `"direct"`."""
    if (
        pulse is not None
        and callable(forward)
        and not isinstance(forward, type | AbstractForwardModel)
    ):
        raise TypeError(
            "`pulse` is passed to a forward model that `self_calibrate` builds "
            "(a name or a class): a callable `forward` builds its own, give "
            "the pulse to it."
        )
    kw = {} if pulse is None else {"pulse": pulse}
    return make_forward("direct" if forward is None else forward, grid, u, v, **kw)


def _model_vis(data, image, grid, model_vis, pulse, forward):
    if model_vis is not None:
        if image is not None:
            raise TypeError("give `image` or `model_vis`, not both.")
        if forward is not None:
            raise TypeError(
                "`forward` computes the model visibilities from `image`: give it "
                "with `image`, not with `model_vis`."
            )
        mv = np.asarray(model_vis)
        if mv.shape != (data.n_rows,) or not np.issubdtype(mv.dtype, np.number):
            raise ValueError(
                f"`model_vis` must be {data.n_rows} complex visibilities (one per row "
                f"of `data`), got {mv.dtype} {mv.shape}."
            )
        if not np.all(np.isfinite(mv)):
            raise ValueError("`model_vis` has non-finite values.")
        return mv.astype(np.complex128)
    if image is None:
        raise TypeError(
            "`image` is required (an image model, or an array with `grid`)."
        )
    if isinstance(image, AbstractImageModel):
        img = evaluated_on(
            image, grid, "image", f"`grid` is {grid!r}: give no `grid` (the model's "
            "own is used) or the model's."
        )  # fmt: skip
        grid = image.grid if grid is None else grid
    else:
        img = asarray(image)
        if grid is None:
            raise TypeError(
                "`grid` is required when `image` is an array: "
                "`self_calibrate(data, image, grid=ImageGrid(...))`."
            )
    if not isinstance(grid, ImageGrid):
        raise TypeError(f"`grid` must be an ImageGrid, got {type(grid).__name__}.")
    bad = ~np.isfinite(np.asarray(img))
    if bad.any():
        raise ValueError(
            f"`image` has {int(bad.sum())} non-finite pixel(s) (NaN or inf): "
            "self-calibrate against a finite model image."
        )
    fwd = _forward_model(forward, grid, data.u, data.v, pulse)
    if tuple(img.shape) != (grid.ny, grid.nx):
        raise ValueError(
            f"`image` has shape {tuple(img.shape)} but `grid` is "
            f"({grid.ny}, {grid.nx})."
        )
    return np.asarray(fwd(img.astype(fwd.dtype)))


def _interval_table(data, slot_interval, n_intervals):
    """`(rows, live)`: the row indices of each interval, padded with row 0 to one
    length `(n_intervals, r_max)`, and the mask of real rows."""
    k_of_row = np.asarray(slot_interval)[data.time_index]
    order = np.argsort(k_of_row, kind="stable")
    counts = np.bincount(k_of_row, minlength=n_intervals)
    r_max = max(int(counts.max()), 1)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.arange(data.n_rows) - np.repeat(starts, counts)
    rows = np.zeros((n_intervals, r_max), np.int64)
    live = np.zeros((n_intervals, r_max), bool)
    rows[k_of_row[order], pos] = order
    live[k_of_row[order], pos] = True
    return rows, live


def self_calibrate(
    data: VisData,
    image: Float[ArrayLike, "ny nx"] | AbstractImageModel | None = None,
    *,
    grid: ImageGrid | None = None,
    model_vis: ArrayLike | None = None,
    method: str = "both",
    stations=None,
    interval: str | float | int = "scan",
    gain_tol: float | tuple | list | dict | ArrayLike = 0.2,
    pad_amp: float | int = 0.0,
    debias: bool = True,
    phase_reference: str | None = None,
    max_steps: int = 200,
    pulse=None,
    scan_gap: float | int = DEFAULT_SCAN_GAP_S,
    forward: str | type | Callable | None = None,
) -> tuple[VisData, StationGains]:
    """Self-calibrate `data` against a model image.

    **Arguments:**

    - `data`: a [`eqmodels.VisData`][].
    - `image`: the model, an `(ny, nx)` array (with `grid`) or an image model; or
      give the model visibilities at `data`'s rows as `model_vis` instead.
    - `method`: `"both"` (amplitude and phase), `"phase"` or `"amp"`.
    - `stations`: names of the stations to calibrate (default all); the others
      keep gain 1.
    - `interval`: `"scan"`, `"timestamp"` (eht-imaging's default
      `solution_interval=0`), `"track"`, or a number of seconds.
    - `gain_tol`: the amplitude prior's tolerance: a number, a pair
      `(above 1, below 1)` as eht-imaging's `gain_tol=[0.02, 0.2]`, or a dict
      `{station: number or pair, "default": ...}`; stations the dict does not
      name take its `"default"`, else 0.2 (unlike
      [`eqmodels.GainAmplitudePrior`][], which leaves them free: a per-interval
      fit with a free amplitude absorbs the noise); entries for stations absent
      from `data` are ignored (one dict serves every day of an array).
    - `pad_amp`: fractional noise added to σ in the fit, `σ'² = σ² + (pad_amp |V|)²`,
      in [0, 1].
    - `debias`: with `method="amp"`, fit the debiased amplitudes.
    - `phase_reference`: a station whose phase is 0 in every interval where it has
      data (default: the mean phase of the calibrated stations is 0). Only where
      every station present is calibrated: where a calibrated station shares a
      baseline with one that is not (gain 1), that one sets the phase reference
      and the calibrated phases are all fitted (`stations=["LM"]` fits the
      LMT's phase).
    - `max_steps`: the most Levenberg-Marquardt steps per interval; each interval
      stops when a step changes its cost by less than 1e-10 relatively (or its
      model predicts no such decrease), and a warning names the intervals that
      reach `max_steps` first.
    - `pulse`: the pixel pulse of the transform (default triangle).
    - `scan_gap`: the gap (s) separating scans.
    - `forward`: the transform from `image` to the model visibilities, as the
      terms' `forward=` takes it: `"direct"` (the default, exact),
      `"separable"`, `"nufft"`, a forward model class (built as `cls(grid,
      data.u, data.v, pulse=pulse)`), or a callable `(grid, u, v) -> forward
      model` (e.g. `lambda g, u, v: em.NUFFT(g, u, v, eps=1e-9)`).

    **Returns:** `(calibrated, gains)`: the calibrated data (`V / (g_a conj g_b)`,
    `σ / |g_a g_b|`: SNRs and closure quantities unchanged) and the
    [`eqmodels.StationGains`][] found (forward gains; apply them to other data
    with `gains.at(other)` / `gains.calibrate(other)`).
    """
    check_visdata(data)
    if method not in _METHODS:
        raise ValueError(f"`method` must be one of {_METHODS}, got {method!r}.")
    if (
        isinstance(max_steps, bool)
        or not isinstance(max_steps, int | np.integer)
        or max_steps < 1
    ):
        raise ValueError(f"`max_steps` must be a positive integer, got {max_steps!r}.")
    pad_amp = check_fraction("pad_amp", pad_amp)
    names = data.station_names
    if stations is None:
        calibrated = np.ones(len(names), bool)
    else:
        if not isinstance(stations, str) and len(stations) == 0:
            raise ValueError(
                "`stations` is empty, so nothing would be calibrated: give the "
                "stations to solve for, or None for all of them."
            )
        idx = data._station_indices("stations", stations)
        calibrated = np.zeros(len(names), bool)
        calibrated[idx] = True
    ref = -1
    if phase_reference is not None:
        if phase_reference not in names:
            raise ValueError(
                f"`phase_reference`={phase_reference!r} is not one of the data's "
                f"stations {list(names)}."
            )
        ref = names.index(phase_reference)
        if phase_reference not in data.stations_present():
            # Absent from the data: it would fix no phase anywhere.
            raise ValueError(
                f"`phase_reference`={phase_reference!r} has no data here (its rows "
                "are flagged or it did not observe): pick a station with data "
                f"{list(data.stations_present())}, or drop the argument."
            )
    if isinstance(gain_tol, dict):
        gain_tol = {"default": 0.2, **gain_tol}
    above, below = station_tolerances(gain_tol, names, "gain_tol")
    mv = _model_vis(data, image, grid, model_vis, pulse, forward)
    if not np.any(mv != 0):
        raise ValueError(
            "the model's visibilities are all zero (an empty image?): there is "
            "nothing to calibrate against; give a model with flux."
        )

    slot, bounds = solution_intervals(data, interval, scan_gap=scan_gap)
    n_int = bounds.shape[0]
    k_of_row = np.asarray(slot)[np.asarray(data.time_index)]  # slot: per timestamp
    lo, hi = band_range(data, k_of_row, n_int)
    mixed = np.flatnonzero(lo != hi)
    if mixed.size:
        # The gains have no band axis: one gain per station and interval would be
        # fitted to both bands' (different) phases.
        raise ValueError(
            f"{mixed.size} of {n_int} solution intervals hold rows of more than one "
            f"band (bands at {list(data.band_freqs)} Hz), whose gains differ: "
            "self-calibrate each band on its own, e.g. `[em.self_calibrate("
            "data.select(bands=[b]), ...) for b in range(len(data.band_freqs))]`."
        )
    rows, live = _interval_table(data, slot, n_int)
    vis = np.asarray(data.vis)
    sigma = np.asarray(data.sigma)
    if method == "amp":
        obs = debiased_amplitude(vis, sigma) if debias else np.abs(vis)
        obs = obs.astype(np.complex128)
        mod = np.abs(mv).astype(np.complex128)
    else:
        obs, mod = vis, mv
    sinv = 1.0 / np.sqrt(sigma**2 + (pad_amp * np.abs(obs)) ** 2)
    a1, a2 = np.asarray(data.ant1)[rows], np.asarray(data.ant2)[rows]
    present = np.zeros((n_int, len(names)), bool)
    np.logical_or.at(
        present,
        (np.repeat(np.arange(n_int), rows.shape[1]), a1.reshape(-1)),
        live.reshape(-1),
    )
    np.logical_or.at(
        present,
        (np.repeat(np.arange(n_int), rows.shape[1]), a2.reshape(-1)),
        live.reshape(-1),
    )
    free = present & calibrated[None, :]
    # An interval whose free stations share a live baseline with a fixed station
    # (gain 1, phase 0) has no free overall phase: no gauge there. Only where every
    # station present is calibrated do the data leave the phases' sum undetermined.
    k = np.arange(n_int)[:, None]
    anchored = np.any(live & (free[k, a1] != free[k, a2]), axis=1)
    if ref >= 0 and method != "amp":
        _check_reference(names[ref], present[:, ref], calibrated[ref], anchored)
    # Padded to bucketed shapes (empty intervals with nothing free, dead rows with
    # weight 0: they change nothing), so that the calls of a recipe, whose interval
    # counts and lengths differ a little from band to band and round to round,
    # share a few compiled programs instead of tracing one each.
    shape = (_bucket(n_int), _bucket(rows.shape[1]))
    sinv_rows = _pad_to(np.where(live, sinv[rows], 0.0), shape)
    la, ph, converged = _solve(
        asarray(_pad_to(obs[rows], shape)),
        asarray(_pad_to(mod[rows], shape)),
        asarray(sinv_rows),
        asarray(_pad_to(a1, shape)),
        asarray(_pad_to(a2, shape)),
        asarray(_pad_to(free, (shape[0], free.shape[1]))),
        asarray(np.pad(anchored, (0, shape[0] - n_int))),
        asarray(above),
        asarray(below),
        asarray(ref),
        asarray([method != "phase", method != "amp"]),
        max_steps=int(max_steps),
    )
    unconverged = np.flatnonzero(~np.asarray(converged)[:n_int])
    if unconverged.size:
        named = ", ".join(
            f"{k} ({bounds[k, 0]:.4f}–{bounds[k, 1]:.4f} h)" for k in unconverged[:5]
        )
        more = f" and {unconverged.size - 5} more" if unconverged.size > 5 else ""
        warn_user(
            f"self-calibration stopped at `max_steps`={max_steps} before converging "
            f"in {unconverged.size} of {n_int} solution intervals (intervals "
            f"{named}{more}): raise `max_steps` (the gains there are not the "
            "objective's minimum).",
        )
    gains = StationGains(
        la[:n_int], ph[:n_int], slot, bounds, names, present, data.index_key,
        data.mjd, tuple(float(data.band_freqs[b]) for b in lo),
    )  # fmt: skip
    return gains.calibrate(data), gains


_RTOL = 1e-10  # relative cost change at which an interval's fit has converged


def _check_reference(name, present, calibrated, anchored) -> None:
    """Warn when `phase_reference` fixes the phase in no solution interval: it
    is then ignored, which must not pass without a word."""
    if not present.any():
        why = "it has no data"
    elif calibrated and anchored[present].all():
        why = (
            "in every interval where it has data, a station not calibrated "
            "(`stations`) shares a baseline with the calibrated ones and sets the "
            "phases, its own included"
        )
    else:
        return
    warn_user(
        f"`phase_reference`={name!r} fixes the phase in no solution interval: "
        f"{why}. The gains are as without a reference; pick a station with data, "
        "or drop the argument."
    )


def _bucket(n: int) -> int:
    """`n` rounded up to the next of 1, 2, 3, 4, 6, 8, 12, 16, 24, …: at most
    1.5× larger."""
    k = 1
    while True:
        for size in (k, k + k // 2):
            if size >= n:
                return size
        k *= 2


def _pad_to(x: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """`x` (2-d) padded with zeros (or `False`) at the end of both axes."""
    return np.pad(x, [(0, shape[0] - x.shape[0]), (0, shape[1] - x.shape[1])])


@run_once_jit
def _solve(
    obs, mod, sinv, a1, a2, free, anchored, above, below, ref, fit, *, max_steps
):
    # `fit` = (amplitudes free, phases free): traced, so the three methods share
    # one compiled program per problem shape.
    n_st = free.shape[1]
    fit_amp, fit_phase = fit[0], fit[1]

    def one(obs, mod, sinv, a1, a2, free, anchored):
        free_p = jnp.concatenate([free & fit_amp, free & fit_phase]).astype(
            obs.real.dtype
        )
        has_ref = (ref >= 0) & free[jnp.maximum(ref, 0)]
        # The gauge: which phases sum to 0 (none where a fixed station anchors
        # the phases).
        ref_w = jnp.where(
            has_ref,
            jnp.zeros(n_st).at[jnp.maximum(ref, 0)].set(1.0),
            free / jnp.maximum(jnp.sum(free), 1),
        )
        ref_w = jnp.where(anchored, 0.0, ref_w).astype(obs.real.dtype)

        def residuals(p):
            la, ph = p[:n_st], p[n_st:]
            g = jnp.exp(jax.lax.complex(la[a1] + la[a2], ph[a1] - ph[a2]))
            d = (obs - g * mod) * sinv
            tol = jnp.where(la > 0, above, below)
            prior = jnp.where(free, la / tol, 0.0)
            gauge = jnp.sum(ref_w * ph)[None] * fit_phase.astype(ph.dtype)
            return jnp.concatenate([d.real, d.imag, prior, gauge])

        def cost(p):
            r = residuals(p)
            return jnp.sum(r * r)

        eps = jnp.finfo(obs.real.dtype).eps

        def step(state):
            # Levenberg-Marquardt on the exact Hessian (16-odd parameters: cheap),
            # with Nielsen's damping update: Gauss-Newton alone crawls on
            # self-calibration's large-residual problems (model flux far from the
            # data's), Newton converges in a few steps.
            p, lam, nu, c, k, _ = state
            grad = 0.5 * jax.grad(cost)(p) * free_p
            hess = 0.5 * jax.hessian(cost)(p) * jnp.outer(free_p, free_p)
            h = hess + jnp.diag(lam * free_p + (1.0 - free_p))
            dp = -jnp.linalg.solve(h, grad) * free_p
            new = p + dp
            c_new = cost(new)
            pred = -(2 * grad @ dp + dp @ hess @ dp)
            rho = (c - c_new) / jnp.where(pred > 0, pred, 1.0)
            ok = jnp.isfinite(c_new) & (c_new < c) & (pred > 0)
            shrink = jnp.maximum(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
            # Converged: an accepted step that changed the cost by less than
            # `_RTOL`, a model that predicts no decrease worth it, or a damping
            # so large that no step changes the parameters at this precision.
            # (The exact Hessian may be indefinite far from the minimum: a negative
            # prediction there is not convergence, only a reason to damp more.)
            small = _RTOL * jnp.maximum(c, 1.0)
            done = (ok & (c - c_new <= small)) | (~ok & (jnp.abs(pred) <= small))
            lam_new = jnp.where(ok, lam * shrink, lam * nu)
            scale = jnp.max(jnp.abs(jnp.diag(hess))) + jnp.finfo(c.dtype).tiny
            done = done | ~(lam_new * eps < scale)
            return (
                jnp.where(ok, new, p),
                lam_new,
                jnp.where(ok, 2.0, 2.0 * nu),
                jnp.where(ok, c_new, c),
                k + 1,
                done,
            )

        def running(state):
            return (state[4] < max_steps) & ~state[5]

        p0 = jnp.zeros(2 * n_st, obs.real.dtype)
        # Start the phases from an unregularised complex-gain solution
        # (alternating least squares, StEFCal: Salvini & Wijnholds 2014): the
        # phase objective has local minima that a start at 0 falls into.
        g0 = _stefcal(obs, mod, sinv, a1, a2, free, n_st)
        p0 = p0.at[n_st:].set(jnp.where(free & fit_phase, jnp.angle(g0), 0.0))
        jac0 = jax.jacfwd(residuals)(p0) * free_p[None, :]
        lam0 = 1e-3 * jnp.maximum(jnp.max(jnp.sum(jac0 * jac0, axis=0)), 1e-30)
        one_ = asarray(2.0, p0.dtype)
        state = (p0, lam0, one_, cost(p0), jnp.zeros((), jnp.int32), asarray(False))
        p, _, _, _, _, converged = jax.lax.while_loop(running, step, state)
        # The reference phase exactly 0 (the data do not see it).
        ph = p[n_st:] - (ref_w @ p[n_st:]) * (free & fit_phase)
        # An interval with nothing to fit has nothing to converge.
        return p[:n_st], ph, converged | ~jnp.any(free_p > 0)

    return jax.vmap(one)(obs, mod, sinv, a1, a2, free, anchored)


def _stefcal(obs, mod, sinv, a1, a2, free, n_st, n_iter=60):
    """Complex gains `g` minimising `Σ w |V_ab − g_a conj(g_b) V̂_ab|²` over the free
    stations (others fixed at 1), by StEFCal's damped alternating updates."""
    w = sinv * sinv
    y = jnp.concatenate([obs, jnp.conj(obs)])
    src = jnp.concatenate([a1, a2])
    other = jnp.concatenate([a2, a1])
    vhat = jnp.concatenate([mod, jnp.conj(mod)])
    ww = jnp.concatenate([w, w])

    def body(i, g):
        z = jnp.conj(g[other]) * vhat
        num = jax.ops.segment_sum(ww * jnp.conj(z) * y, src, num_segments=n_st)
        den = jax.ops.segment_sum(ww * (z.real**2 + z.imag**2), src, num_segments=n_st)
        new = jnp.where(free & (den > 0), num / jnp.where(den > 0, den, 1.0), 1.0)
        new = jnp.where(jnp.abs(new) > 0, new, 1.0)
        return jnp.where(i % 2 == 1, 0.5 * (g + new), new)

    g = jnp.ones(n_st, obs.dtype)
    return jax.lax.fori_loop(0, n_iter, body, g)
