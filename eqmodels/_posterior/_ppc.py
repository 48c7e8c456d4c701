"""`closure_ppc`: posterior-predictive checks of closure phases and log closure
amplitudes (data replicated from the draws plus the data's thermal noise);
`ClosurePPC`, what it returns."""

import equinox as eqx
import numpy as np
from jaxtyping import Float, Int

from .._data._closures import check_closures, closure_index
from .._data._visdata import check_uv_limit, check_visdata, VisData
from .._forward._select import ForwardLike
from .._grid import ImageGrid
from .._terms._vis import VisChi2
from ._draws import (
    check_batch_size,
    check_num_draws,
    check_samples,
    draws_shape,
    flat_draws,
    map_draws,
    one_draw,
)
from ._sample import Samples


KINDS = ("cphase", "logcamp")


class ClosurePPC(eqx.Module):
    """What [`eqmodels.closure_ppc`][] returns (numpy arrays; `m` closures, `k`
    draws).

    - `kind`: `"cphase"` (radians) or `"logcamp"`.
    - `observed` `(m,)`: the closure quantities of the data; `sigma` `(m,)`
      their thermal sigmas from the data (`sqrt(Σ σ_i²/|V_i|²)` over the legs,
      radians for closure phases).
    - `model` `(k, m)`: each draw's noise-free closure quantities;
      `replicated` `(k, m)`: those of each draw's replicated data.
    - `p_values` `(m,)`: per closure, the fraction of draws whose replicated
      discrepancy is at least the observed one.
    - `chi2_observed`, `chi2_replicated` `(k,)`: the reduced χ² (mean discrepancy
      over the closures) of the data and of the replication, per draw;
      `p_value` the fraction of draws with `chi2_replicated ≥ chi2_observed`.
    - `stations` `(m, 3 or 4)` (indices into `station_names`) and `time` `(m,)`
      (hours) of each closure.
    """

    kind: str = eqx.field(static=True)
    observed: Float[np.ndarray, " m"]
    sigma: Float[np.ndarray, " m"]
    model: Float[np.ndarray, "k m"]
    replicated: Float[np.ndarray, "k m"]
    p_values: Float[np.ndarray, " m"]
    chi2_observed: Float[np.ndarray, " k"]
    chi2_replicated: Float[np.ndarray, " k"]
    p_value: float = eqx.field(static=True)
    stations: Int[np.ndarray, "m s"]
    time: Float[np.ndarray, " m"]
    station_names: tuple[str, ...] = eqx.field(static=True)


def closure_quantities(vis, rows, signs, kind: str) -> np.ndarray:
    """Closure phases (`arg V₁V₂V₃`, radians) or log closure amplitudes
    (`ln|V₁| + ln|V₂| − ln|V₃| − ln|V₄|`) of visibilities `vis` (`(..., n)`) at
    the closures' legs (`rows`, `signs`: `closure_index`'s); no debiasing."""
    legs = vis[..., rows]  # (..., m, L)
    legs = np.where(signs > 0, legs, np.conj(legs))
    if kind == "cphase":
        return np.angle(np.prod(legs, axis=-1))
    with np.errstate(divide="ignore"):
        la = np.log(np.abs(legs))
    return la[..., 0] + la[..., 1] - la[..., 2] - la[..., 3]


def discrepancy(x, mean, sigma, kind: str) -> np.ndarray:
    """Per-closure `2(1 − cos(x − μ))/σ²` for closure phases (the closure-phase
    χ²'s form: the phase difference wraps), `((x − μ)/σ)²` otherwise."""
    if kind == "cphase":
        return 2.0 * (1.0 - np.cos(x - mean)) / sigma**2
    return ((x - mean) / sigma) ** 2


def closure_ppc(
    samples: Samples,
    data: VisData,
    kind: str = "cphase",
    *,
    seed: int | np.random.Generator = 0,
    closures: str = "min",
    uv_min: float | int | None = None,
    grid: ImageGrid | None = None,
    forward: ForwardLike = "direct",
    num_draws: int | None = None,
    batch_size: int = 64,
) -> ClosurePPC:
    """A posterior-predictive check of closure quantities: for each draw `θ`,
    replicated visibilities `V_rep = V(θ) + σ (ε₁ + iε₂)` (the model's
    visibilities at the data's `(u, v)` plus the data's thermal noise,
    `ε = np.random.default_rng(seed).standard_normal((k, n, 2))`, `k` draws,
    `n` rows) give replicated closure phases or
    log closure amplitudes, which are compared with the observed ones through
    the discrepancy `D(y, θ) = 2(1 − cos(y − ŷ(θ)))/σ²` (closure phases) or
    `((y − ŷ(θ))/σ)²` (log closure amplitudes), `ŷ(θ)` the draw's noise-free
    closure quantity (Gelman, Meng & Stern 1996's realized discrepancies).

    The p-value of a closure is the fraction of draws with
    `D(y_rep, θ) ≥ D(y_obs, θ)`, the overall one the same for the reduced χ²
    (the mean of `D` over the closures): near 0 when the data are further from
    the model than its noise makes likely (a misfit or underestimated sigmas),
    near 1 when closer (overestimated sigmas, overfitting); a calibrated
    posterior spreads the per-closure p-values over `[0, 1]`. Observed and
    replicated closures are computed alike from visibilities, without debiasing
    or systematic noise, so the check holds at any SNR; the σ of each closure
    is the data's (`sqrt(Σ σ_i²/|V_i|²)` over its legs), the same for both.

    **Arguments:**

    - `samples`: [`eqmodels.Samples`][] of a model of the sky (a pixel image or
      a geometric model).
    - `data`: the [`eqmodels.VisData`][] the closures are formed from (one row
      per baseline and timestamp: average it first).
    - `kind`: `"cphase"` or `"logcamp"`.
    - `seed`: the replicated noise's seed or `numpy.random.Generator` (numpy's:
      the check runs on the host).
    - `closures`: `"min"` (a minimal independent set per timestamp) or `"all"`,
      as [`eqmodels.closure_phases`][]; `uv_min`: leave out shorter baselines
      (wavelengths) first.
    - `grid`, `forward`: the model's visibilities are those of
      `VisChi2.from_data(data, grid, forward=forward).model_vis(model)`
      (analytic for a geometric model); `grid` defaults to the model's.
    - `num_draws`: use this many draws, evenly spaced (default: all);
      `batch_size`: draws evaluated at once.

    **Returns:** [`eqmodels.ClosurePPC`][].
    """
    check_samples(samples)
    check_visdata(data)
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}, got {kind!r}.")
    check_closures(closures)
    batch_size = check_batch_size(batch_size)
    c, s = draws_shape(samples)
    index = check_num_draws(num_draws, c * s)
    models = flat_draws(samples, index)
    first = one_draw(models)
    if grid is None:
        grid = getattr(first, "grid", None)
        if not isinstance(grid, ImageGrid):
            raise TypeError(
                f"the draws' model ({type(first).__name__}) has no `grid`: give "
                "`grid=` (the image grid its visibilities are computed on)."
            )
    # Which rows enter closures, and each closure's legs.
    data._check_no_duplicates("closure quantities")
    allowed = np.ones(data.n_rows, bool)
    if uv_min is not None:
        if (
            isinstance(uv_min, bool)
            or not isinstance(uv_min, int | float | np.integer | np.floating)
            or not np.isfinite(uv_min)
            or uv_min < 0
        ):
            raise ValueError(
                f"`uv_min` must be a finite number ≥ 0 (wavelengths) or None, got "
                f"{uv_min!r}."
            )
        check_uv_limit("uv_min", uv_min)
        allowed = data.uvdist >= uv_min
    idx = np.flatnonzero(allowed)
    a = data._arrays()
    rows, signs, stations, times = closure_index(
        a["time"][idx],
        a["band"][idx],
        a["ant1"][idx],
        a["ant2"][idx],
        "triangle" if kind == "cphase" else "quadrangle",
        closures,
    )
    rows = idx[rows]
    vis_obs = np.asarray(a["vis"])
    sig_vis = np.asarray(a["sigma"], float)
    with np.errstate(divide="ignore", invalid="ignore"):
        sigma = np.sqrt(np.sum(sig_vis[rows] ** 2 / np.abs(vis_obs[rows]) ** 2, axis=1))
    keep = np.isfinite(sigma) & (sigma > 0)
    if not np.any(keep):
        raise ValueError(
            f"no {'closed triangles' if kind == 'cphase' else 'closed quadrangles'} "
            f"with a finite sigma can be formed from this data ({data.n_rows} rows, "
            f"stations {list(data.stations_present())})."
        )
    rows, signs, stations, times, sigma = (
        rows[keep],
        signs[keep],
        stations[keep],
        times[keep],
        sigma[keep],
    )
    # The model's visibilities at every draw, and the replicated data.
    term = VisChi2.from_data(data, grid, forward=forward)
    vis_model = np.asarray(map_draws(term.model_vis, models, batch_size))
    k, n = vis_model.shape
    if isinstance(seed, bool) or not isinstance(
        seed, int | np.integer | np.random.Generator
    ):
        raise TypeError(
            f"`seed` must be an int or a numpy.random.Generator, got {seed!r}."
        )
    eps = np.random.default_rng(seed).standard_normal((k, n, 2))
    vis_rep = vis_model + sig_vis * (eps[..., 0] + 1j * eps[..., 1])
    observed = closure_quantities(vis_obs, rows, signs, kind)
    model = closure_quantities(vis_model, rows, signs, kind)
    replicated = closure_quantities(vis_rep, rows, signs, kind)
    d_obs = discrepancy(observed, model, sigma, kind)
    d_rep = discrepancy(replicated, model, sigma, kind)
    chi2_obs = d_obs.mean(axis=1)
    chi2_rep = d_rep.mean(axis=1)
    return ClosurePPC(
        kind=kind,
        observed=observed,
        sigma=sigma,
        model=model,
        replicated=replicated,
        p_values=np.mean(d_rep >= d_obs, axis=0),
        chi2_observed=chi2_obs,
        chi2_replicated=chi2_rep,
        p_value=float(np.mean(chi2_rep >= chi2_obs)),
        stations=stations,
        time=times,
        station_names=tuple(data.station_names),
    )
