"""Posteriors from real data: M87 2017 closure quantities sampled with NUTS.

Three shows of `em.Posterior` + `em.sample` (docs/posteriors.md, "M87: posteriors
from real data" and "Simulation-based calibration"):

1. **ring**: a thick m-ring + a concentric Gaussian fitted to the closure phases
   and log closure amplitudes of M87 2017-04-06 (low band, scan-averaged): the
   posterior of the ring's diameter, against the EHT's 42 ± 3 µas (Paper VI).
2. **image**: a 32×32 log-image posterior of M87 2017-04-11 (low band) from
   closures, under a Gaussian Markov random field prior, sampled whitened (white
   noise ζ, ln I = μ + L ζ): NUTS with 4 chains, split R̂ of every pixel's ln I,
   the posterior mean and standard-deviation images.
3. **sbc**: simulation-based calibration of the ring model on the 2017-04-06
   coverage: θ drawn from the prior, closure data simulated with the file's σ,
   the posterior sampled, the rank of θ among the draws; a χ² test of the rank
   histograms' uniformity.

Closure quantities do not constrain the total flux (they are ratios of
visibilities) nor the position (closure phases are shift-invariant): the models
fix both (0.6 Jy, centred) or put a prior on them; the docs say which.

Run:

    python examples/m87_posterior.py --figures docs/images
    python examples/m87_posterior.py --quick          # what the tests run
    python examples/m87_posterior.py --only sbc --set sbc_reps=100

The data are the EHT's public 2017 M87 release (`--data`, default
`../shared/data/eht/m87_2017` beside the repository). Figures need matplotlib.
"""

import argparse
import functools
import json
import math
import os
import pathlib
import time

import jax


jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

import eqmodels as em  # noqa: E402


ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "eht" / "m87_2017"
FILE = "SR1_M87_2017_{day}_lo_hops_netcal_StokesI.uvfits"
FLUX = 0.6  # Jy: the compact flux, fixed (closures do not constrain it)
UV_MIN = 0.1e9  # λ: closures with an intra-site baseline (< 0.1 Gλ) are left out
FRACTIONAL_NOISE = 0.02  # added in quadrature to every visibility's σ
uas = em.uas_to_rad


# --8<-- [start:model]
class RingGaussian(eqx.Module):
    """A thick m-ring (`β_1`) plus a concentric circular Gaussian, in µas: the
    posterior's parameters. The total flux is fixed (a static field, not a
    parameter) and both parts are centred on the phase centre: closures see
    neither flux nor position."""

    diameter: jax.Array  # µas, the thin ring's 2R
    width: jax.Array  # µas, the FWHM of the Gaussian blur of the ring
    beta_re: jax.Array  # Re β_1 (shape (1,))
    beta_im: jax.Array  # Im β_1
    ratio: jax.Array  # Gaussian flux / ring flux
    gauss_fwhm: jax.Array  # µas
    flux: float = eqx.field(static=True, default=FLUX)

    def image_model(self, grid):
        """The eqmodels geometric model (radians, Jy)."""
        ring_flux = self.flux / (1.0 + self.ratio)
        beta = self.beta_re + 1j * self.beta_im
        ring = em.MRing(grid, ring_flux, uas(self.diameter / 2), beta)
        gauss = em.EllipticalGaussian(grid, self.flux - ring_flux, uas(self.gauss_fwhm))
        return em.Blurred(ring, uas(self.width)) + gauss


class OnGeometric(eqx.Module):
    """The closure terms' log-likelihood of the geometric model `RingGaussian`
    builds (a `Posterior` takes anything with `log_likelihood(model)`)."""

    objective: em.Objective
    grid: em.ImageGrid

    def log_likelihood(self, params):
        return self.objective.log_likelihood(params.image_model(self.grid))


def lognormal(median, s):
    """ln of a log-normal density (median, σ of ln x), summed over the leaf."""
    m = math.log(median)
    return lambda x: jnp.sum(
        -jnp.log(x * s * math.sqrt(2 * math.pi)) - (jnp.log(x) - m) ** 2 / (2 * s * s)
    )


def normal(mean, s):
    return lambda x: jnp.sum(
        -math.log(s * math.sqrt(2 * math.pi)) - (x - mean) ** 2 / (2 * s * s)
    )


# The priors (SBC draws θ from these): (leaf, median or mean, σ, support)
PRIORS = {
    "diameter": (40.0, 0.25, "positive"),  # log-normal: 24–66 µas at 2σ
    "width": (10.0, 0.4, "positive"),
    "beta_re": (0.0, 0.2, "real"),  # normal
    "beta_im": (0.0, 0.2, "real"),
    "ratio": (0.3, 0.7, "positive"),
    "gauss_fwhm": (60.0, 0.5, "positive"),
}


@functools.cache
def ring_priors():
    """The priors, built once: their functions are static fields, so a new set
    would make `sample` compile again."""
    out = []
    for name, (centre, s, support) in PRIORS.items():
        density = lognormal(centre, s) if support == "positive" else normal(centre, s)
        where = lambda p, name=name: getattr(p, name)  # noqa: E731
        out.append(em.ParameterPrior(where, density, support=support))
    return tuple(out)


def prior_median():
    return RingGaussian(*(jnp.full((1,) if n.startswith("beta") else (), c, float)
                          for n, (c, _, _) in PRIORS.items()))  # fmt: skip


def closure_objective(path, grid):
    """Closure phases and log closure amplitudes of one scan-averaged file, with 2 %
    fractional noise and no intra-site baselines, as one objective (its shared
    transform evaluates each distinct baseline once)."""
    data = em.add_fractional_noise(
        em.load_uvfits(path).scan_average(), FRACTIONAL_NOISE
    )
    cp = em.closure_phases(data, uv_min=UV_MIN)
    lca = em.log_closure_amplitudes(data, uv_min=UV_MIN)
    terms = [
        em.ClosurePhaseChi2.from_data(cp, grid),
        em.LogClosureAmpChi2.from_data(lca, grid),
    ]
    return em.Objective(terms), data


# --8<-- [end:model]


# ------------------------------------------------------------------- 1. the ring
def fit_ring(path, q, key, figures):
    t0 = time.perf_counter()
    # --8<-- [start:ring]
    # The grid only renders the model: the terms use its analytic visibilities.
    grid = em.ImageGrid.from_fov(32, 160.0)
    objective, data = closure_objective(path, grid)
    posterior = em.Posterior(
        OnGeometric(objective, grid), ring_priors(), prior_median()
    )
    samples = em.sample(posterior, key=key, num_warmup=q["ring_warmup"],
                        num_samples=q["ring_draws"], num_chains=q["ring_chains"])  # fmt: skip
    d = np.asarray(samples.draws.diameter).ravel()
    lo, median, hi = np.percentile(d, [2.5, 50, 97.5])  # 95 % credible interval
    # --8<-- [end:ring]
    seconds = time.perf_counter() - t0
    mean = jax.tree.map(lambda x: jnp.mean(x, axis=(0, 1)), samples.draws)
    report = objective.report(mean.image_model(grid))
    out = {
        "mjd": int(data.mjd),
        "n_cphase": int(objective.terms[0].n_rows),
        "n_logcamp": int(objective.terms[1].n_rows),
        "diameter_median": float(median),
        "diameter_mean": float(d.mean()),
        "diameter_std": float(d.std()),
        "diameter_95": [float(lo), float(hi)],
        "rhat_max": float(samples.rhat().max()),
        "ess_min": float(samples.ess().min()),
        "divergences": int(np.sum(samples.divergences)),
        "chi2_at_mean": {k: float(v) for k, v in report.items()},
        "params_mean": {
            k: np.asarray(getattr(mean, k)).ravel().tolist() for k in PRIORS
        },
        "seconds": seconds,
    }
    z = (out["diameter_mean"] - 42.0) / math.hypot(out["diameter_std"], 3.0)
    out["z_vs_paper_vi"] = float(z)
    print(
        f"ring: diameter {median:.1f} µas (95 %: {lo:.1f}–{hi:.1f}), "
        f"mean {d.mean():.2f} ± {d.std():.2f}; Paper VI 42 ± 3 (z = {z:+.2f}); "
        f"R̂ max {out['rhat_max']:.4f}, ESS min {out['ess_min']:.0f}, "
        f"{out['divergences']} divergences; χ² at the mean {out['chi2_at_mean']}; "
        f"{seconds:.1f} s"
    )
    if figures:
        fig, (ax_h, ax_i) = figures.subplots(1, 2, figsize=(10, 4.2))
        ax_h.hist(d, bins=40, color="C0", alpha=0.8, density=True)
        ax_h.axvspan(39.0, 45.0, color="C1", alpha=0.25, label="Paper VI: 42 ± 3 µas")
        ax_h.axvline(median, color="k", lw=1, label=f"median {median:.1f} µas")
        ax_h.set_xlabel("ring diameter (µas)")
        ax_h.set_title("posterior, M87 2017-04-06 closures")
        ax_h.legend(fontsize=8)
        em.plot_image(mean.image_model(grid), grid, ax=ax_i,
                      title="the model at the posterior mean")  # fmt: skip
        figures.save(fig, "ring")
    return out


# ------------------------------------------------------------------ 2. the image
def image_posterior(path, q, key, figures):
    t0, cpu0 = time.perf_counter(), time.process_time()
    # --8<-- [start:image]
    npix = q["npix"]
    grid = em.ImageGrid.from_fov(npix, 128.0)  # 4 µas pixels at 32²
    objective, data = closure_objective(path, grid)
    # The prior: a GMRF on the log image around the log of a 50 µas Gaussian of
    # 0.6 Jy, with a correlation length ρ of 12 µas (3 pixels at 32²) and a
    # pixel-averaged marginal σ of 1.5 in ln I (a factor e^1.5 ≈ 4.5 either way),
    # both fixed. Whitened (non-centred): the parameters are white noise ζ and
    # ln I = μ + L ζ with L Lᵀ = Q⁻¹, so the GMRF prior is ζ ~ N(0, I).
    mean_image = np.asarray(em.GaussianImage(grid, FLUX, uas(50.0))())
    model = em.GMRFImage(grid, sigma=1.5, rho=12.0 / (128.0 / npix),
                         mean=np.log(mean_image))  # fmt: skip

    def white_noise(leaf):  # the parameters: ζ only (σ, ρ held fixed)
        return em.is_real_float_array(leaf) and leaf.ndim == 2

    # The total flux: ln Σ I ~ N(ln 0.6, 0.02²), a soft constraint on the one
    # direction closures do not see (a prior on ζ through the image it makes).
    def flux_prior(zeta):
        log_image = eqx.tree_at(lambda m: m.params, model, zeta).log_image()
        return normal(math.log(FLUX), 0.02)(jax.nn.logsumexp(log_image))

    priors = [em.ParameterPrior(lambda m: m.params, normal(0.0, 1.0)),  # the GMRF
              em.ParameterPrior(lambda m: m.params, flux_prior)]  # fmt: skip
    posterior = em.Posterior(objective, priors, model, params=white_noise)
    start = em.solve(posterior, model, params=white_noise,
                     max_steps=q["map_steps"]).model  # the MAP  # fmt: skip
    samples = em.sample(posterior, start, key=key, num_warmup=q["image_warmup"],
                        num_samples=q["image_draws"], num_chains=4)  # fmt: skip
    rhat = samples.rhat(lambda m: m.log_image())  # one per pixel, of ln I
    ess = samples.ess(lambda m: m.log_image())
    images = np.asarray(eqx.filter_vmap(eqx.filter_vmap(lambda m: m()))(samples.draws))
    mean = images.mean(axis=(0, 1))  # (chains, draws, ny, nx) → Jy/pixel
    std = images.std(axis=(0, 1))
    # --8<-- [end:image]
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    report = objective.report(mean)
    tau, kappa = model.tau_kappa()
    out = {
        "npix": npix,
        "tau": float(tau),
        "kappa": float(kappa),
        "rhat_of": "ln I per pixel",
        "rhat_max": float(rhat.max()),
        "rhat_median": float(np.median(rhat)),
        "rhat_below_1.01": float(np.mean(rhat < 1.01)),
        "rhat_below_1.05": float(np.mean(rhat < 1.05)),
        "rhat_max_white_noise": float(samples.rhat().max()),
        "ess_min": float(ess.min()),
        "ess_median": float(np.median(ess)),
        "divergences": int(np.sum(samples.divergences)),
        "mean_steps": float(np.mean(samples.stats["num_integration_steps"])),
        "step_size": np.asarray(samples.stats["step_size"]).tolist(),
        "flux_mean": float(mean.sum()),
        "chi2_at_mean": {k: float(v) for k, v in report.items()},
        "seconds": seconds,
        "cpu_seconds": cpu,
        "load_average": list(os.getloadavg()),
        "mean_image": mean.tolist(),
        "std_image": std.tolist(),
        "rhat_image": rhat.tolist(),
    }
    print(
        f"image: {npix}² whitened log pixels, R̂ of ln I max {out['rhat_max']:.4f}, "
        f"median {out['rhat_median']:.4f}, {100 * out['rhat_below_1.01']:.1f} % of "
        f"pixels below 1.01; ESS min {out['ess_min']:.0f}, median "
        f"{out['ess_median']:.0f}; {out['divergences']} divergences; "
        f"{out['mean_steps']:.0f} leapfrog steps per draw; flux "
        f"{out['flux_mean']:.3f} Jy; χ² at the mean {out['chi2_at_mean']}; "
        f"{seconds:.1f} s wall, {cpu:.1f} s CPU, load {out['load_average']}"
    )
    if figures:
        fig, axes = figures.subplots(1, 3, figsize=(13, 3.9))
        em.plot_image(mean, grid, ax=axes[0], title="posterior mean")
        em.plot_image(std, grid, ax=axes[1], title="posterior std")
        extent = axes[0].get_images()[0].get_extent()
        shown = axes[2].imshow(rhat, extent=extent, cmap="viridis")
        fig.colorbar(shown, ax=axes[2], label="split R̂")
        axes[2].set_title(f"split R̂ per pixel (max {rhat.max():.3f})")
        axes[2].set_xlabel(axes[0].get_xlabel())
        figures.save(fig, "image")
    return out


# -------------------------------------------------------------------- 3. the SBC
def simulate(objective, truth, grid, rng):
    """Closure data drawn from the likelihood at `truth`: closure phases with von
    Mises noise of concentration 1/σ² (the term's `(1 − cos Δ)/σ²`), log closure
    amplitudes with Gaussian noise σ."""
    cp, lca = objective.terms
    fwd = objective.shared[0].forward  # the distinct baselines
    vis = np.asarray(truth.image_model(grid).visibility(fwd.u, fwd.v))
    idx, conj = objective.shared[0].index, objective.shared[0].conj
    legs = [np.where(c, np.conj(vis[i]), vis[i]) for i, c in zip(idx, conj)]
    phase = np.angle(np.prod(legs[0], axis=1))
    la = np.log(np.abs(legs[1]))
    logcamp = la[:, 0] + la[:, 1] - la[:, 2] - la[:, 3]
    w_cp, w_lca = np.asarray(cp.weight), np.asarray(lca.weight)
    noise_cp = rng.vonmises(0.0, np.where(w_cp > 0, w_cp, 1.0))
    noise_lca = rng.normal(size=logcamp.shape) / np.sqrt(
        np.where(w_lca > 0, w_lca, 1.0)
    )
    return eqx.tree_at(
        lambda o: (o.terms[0].cphase, o.terms[1].logcamp),
        objective,
        (jnp.asarray(phase + noise_cp), jnp.asarray(logcamp + noise_lca)),
    )


def prior_draw(rng):
    values = {}
    for name, (c, s, support) in PRIORS.items():
        shape = (1,) if name.startswith("beta") else ()
        x = rng.normal(size=shape)
        values[name] = jnp.asarray(
            c * np.exp(s * x) if support == "positive" else c + s * x
        )
    return RingGaussian(**values)


def sbc(path, q, seed, figures):
    t0 = time.perf_counter()
    # --8<-- [start:sbc]
    grid = em.ImageGrid.from_fov(32, 160.0)
    objective, _ = closure_objective(path, grid)  # the coverage and σ
    rng = np.random.default_rng(seed)
    keep = slice(None, None, q["sbc_thin"])
    ranks = []
    for i in range(q["sbc_reps"]):
        truth = prior_draw(rng)
        simulated = simulate(objective, truth, grid, rng)
        posterior = em.Posterior(
            OnGeometric(simulated, grid), ring_priors(), prior_median()
        )
        # Each chain starts at θ itself (`jitter=0`: `sample` jitters the start
        # by up to ±0.1 in every unconstrained coordinate by default, 4–30
        # posterior σ of the ring's log-diameter): a draw from this data's
        # posterior, so the chain starts in its stationary distribution (from
        # the prior's median, short chains get caught in the ring's other
        # likelihood modes).
        samples = em.sample(posterior, truth, key=jax.random.key(seed + i),
                            num_warmup=q["sbc_warmup"], num_samples=q["sbc_draws"],
                            num_chains=1, jitter=0.0)  # fmt: skip
        draws = np.asarray(samples.positions)[0, keep]  # (L, n), thinned
        ranks.append(np.sum(draws < np.asarray(posterior.to_unconstrained(truth)), 0))
        print(f"SBC replication {i}: ranks {ranks[-1].tolist()}", flush=True)
    ranks = np.array(ranks)  # (reps, n): each in 0..L, uniform if calibrated
    n_draws = draws.shape[0]
    bins = q["sbc_bins"]  # the L + 1 ranks 0..L grouped into `bins` bins
    group = np.arange(n_draws + 1) * bins // (n_draws + 1)  # rank → bin
    counts = np.stack([np.bincount(group[r], minlength=bins) for r in ranks.T])
    expected = len(ranks) * np.bincount(group) / (n_draws + 1)  # uniform ranks
    chi2, p = stats.chisquare(counts, expected, axis=1)  # bins − 1 dof
    # --8<-- [end:sbc]
    seconds = time.perf_counter() - t0
    names = ["diameter", "width", "beta_re", "beta_im", "ratio", "gauss_fwhm"]
    # ravel_pytree order of the module's leaves (field order): as `names`
    out = {
        "reps": int(q["sbc_reps"]),
        "draws_kept": int(n_draws),
        "bins": int(bins),
        "chi2": dict(zip(names, map(float, chi2))),
        "p_value": dict(zip(names, map(float, p))),
        "chi2_999": float(stats.chi2.ppf(0.999, bins - 1)),
        "counts": dict(zip(names, counts.tolist())),
        "ranks": ranks.tolist(),  # (reps, 6), in `names` order
        "expected": expected.tolist(),
        "seconds": seconds,
    }
    print(
        f"SBC: {out['reps']} replications, {n_draws} kept draws each, {bins} bins; "
        "χ² p-values "
        + ", ".join(f"{k} {v:.3f}" for k, v in out["p_value"].items())
        + f"; {seconds:.1f} s"
    )
    if figures:
        fig, axes = figures.subplots(1, len(names), figsize=(2.3 * len(names), 2.6))
        for ax, name, c, pv in zip(axes, names, counts, p):
            ax.bar(np.arange(bins), c, width=0.9, color="C0")
            ax.step(np.arange(bins + 1) - 0.5, np.r_[expected, expected[-1]],
                    where="post", color="k", lw=1)  # fmt: skip
            ax.set_title(f"{name}\np = {pv:.2f}", fontsize=9)
            ax.set_xticks([])
        figures.save(fig, "sbc")
    return out


# ---------------------------------------------------------------------- driver
# The default run is sized for a shared 2-core CPU (docs/posteriors.md gives its
# numbers and wall times); `--set NAME=INT` raises any of them.
FULL = dict(ring_warmup=100, ring_draws=150, ring_chains=4,
            npix=32, map_steps=200, image_warmup=500, image_draws=2000,
            sbc_reps=12, sbc_warmup=30, sbc_draws=30, sbc_thin=2, sbc_bins=4)  # fmt: skip
QUICK = dict(ring_warmup=60, ring_draws=60, ring_chains=2,
             npix=16, map_steps=100, image_warmup=40, image_draws=20,
             sbc_reps=10, sbc_warmup=20, sbc_draws=18, sbc_thin=2, sbc_bins=2)  # fmt: skip


class Figures:
    """Saves `<folder>/m87_posterior_<name>.png`; nothing without a folder or
    matplotlib."""

    def __init__(self, folder):
        self.folder, self.saved = None, []
        if folder is None:
            return
        try:
            import matplotlib
        except ImportError:
            print("(matplotlib is not installed: no figures)")
            return
        matplotlib.use("Agg")
        self.folder = pathlib.Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def __bool__(self):
        return self.folder is not None

    def subplots(self, *args, **kwargs):
        import matplotlib.pyplot as plt

        return plt.subplots(*args, layout="constrained", **kwargs)

    def save(self, fig, name):
        import matplotlib.pyplot as plt

        fig = getattr(fig, "figure", fig)
        path = self.folder / f"m87_posterior_{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        self.saved.append(str(path))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short chains (the tests)")
    ap.add_argument("--only", choices=["ring", "image", "sbc"], action="append",
                    help="run only these parts (repeatable; default all)")  # fmt: skip
    ap.add_argument("--data", default=str(DATA), help="the 2017 M87 uvfits folder")
    ap.add_argument("--figures", help="save the figures (PNG) in this folder")
    ap.add_argument("--json", help="write the numbers to this JSON file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=INT",
                    help="override a setting, e.g. --set sbc_reps=50")  # fmt: skip
    args = ap.parse_args(argv)
    folder = pathlib.Path(args.data)
    if not folder.is_dir():
        ap.error(f"--data {folder} is not a folder: give the 2017 M87 release's.")
    q = dict(QUICK if args.quick else FULL)
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in q or not value.isdigit() or int(value) < 1:
            ap.error(f"--set {item}: give NAME=INT, NAME one of {sorted(q)}.")
        q[name] = int(value)
    parts = args.only or ["ring", "image", "sbc"]
    figures = Figures(args.figures)
    key = jax.random.key(args.seed)
    result = {"quick": args.quick, "settings": q}
    t0 = time.perf_counter()
    if "ring" in parts:
        path = folder / FILE.format(day="096")
        result["ring"] = fit_ring(path, q, jax.random.fold_in(key, 1), figures)
    if "image" in parts:
        path = folder / FILE.format(day="101")
        result["image"] = image_posterior(path, q, jax.random.fold_in(key, 2), figures)
    if "sbc" in parts:
        path = folder / FILE.format(day="096")
        result["sbc"] = sbc(path, q, 1000 + args.seed, figures)
    result["seconds"] = time.perf_counter() - t0
    result["figures"] = figures.saved
    print(f"done in {result['seconds']:.1f} s")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
