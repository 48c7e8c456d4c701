"""examples/m87_posterior.py: the real-data posteriors and the simulation-based
calibration of issue 39 (docs/posteriors.md), in quick mode; and the pieces it is
built from against plain numpy."""

import importlib.util
import pathlib

import equinox as eqx
import numpy as np
import pytest
from scipy import stats

from tests.helpers import load_example


def load():
    return load_example("m87_posterior")


def test_whitened_image_prior_is_the_fixed_gmrf():
    """The image show's prior, a non-centred `GMRFImage` with σ, ρ held fixed,
    is the centred GMRF of fixed `τ`, `κ = 1/ρ` it replaced: its log image
    `μ + L ζ` (`ζ ~ N(0, I)`) has mean `μ` and covariance `L Lᵀ = Q⁻¹`,
    `Q = τ(κ²I + Δ)` with `Δ` the 4-neighbour graph Laplacian written out and `τ`
    set so that the mean diagonal of `Q⁻¹` is σ² (dense numpy)."""
    import jax

    import eqmodels as em

    jax.config.update("jax_enable_x64", True)
    ny, nx, rho, std = 5, 7, 3.0, 1.5
    kappa = 1.0 / rho
    grid = em.ImageGrid.from_fov((ny, nx), 50.0)
    mu = np.random.default_rng(0).normal(size=(ny, nx))
    model = em.GMRFImage(grid, sigma=std, rho=rho, mean=mu)
    n = ny * nx
    lap = np.zeros((n, n))
    for i in range(ny):
        for j in range(nx):
            for di, dj in ((0, 1), (1, 0)):
                if i + di < ny and j + dj < nx:
                    a, b = i * nx + j, (i + di) * nx + j + dj
                    lap[a, a] += 1
                    lap[b, b] += 1
                    lap[a, b] -= 1
                    lap[b, a] -= 1
    unit = np.linalg.inv(kappa**2 * np.eye(n) + lap)
    tau = np.mean(np.diag(unit)) / std**2
    cov = unit / tau  # Q⁻¹
    assert np.mean(np.diag(cov)) == pytest.approx(std**2, rel=1e-12)

    def log_image(zeta):
        return eqx.tree_at(lambda m: m.params, model, zeta).log_image().ravel()

    zeta0 = np.zeros((ny, nx))
    np.testing.assert_allclose(np.asarray(log_image(zeta0)), mu.ravel(), rtol=1e-12)
    # the map is affine: its columns are the images of the unit vectors, less μ
    basis = np.eye(n).reshape(n, ny, nx)
    lmat = (np.asarray(jax.vmap(log_image)(basis)) - mu.ravel()).T
    np.testing.assert_allclose(lmat @ lmat.T, cov, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(float(model.tau_kappa()[0]), tau, rtol=1e-12)


@pytest.mark.slow  # real data
def test_simulated_closures_follow_the_likelihood(shared_data):
    """Noise-free simulated closures are the model's (χ² 0 at the truth); with
    noise, each closure term's χ² at the truth is near 1 (its mean over n rows is
    1 with a spread of about sqrt(2/n): 5σ bounds)."""
    ex = load()
    import eqmodels as em

    grid = em.ImageGrid.from_fov(32, 160.0)
    path = shared_data / "eht" / "m87_2017" / ex.FILE.format(day="096")
    objective, _ = ex.closure_objective(path, grid)
    rng = np.random.default_rng(3)
    truth = ex.prior_draw(rng)

    class NoNoise:
        def vonmises(self, mu, kappa):
            return np.zeros_like(kappa)

        def normal(self, size):
            return np.zeros(size)

    exact = ex.simulate(objective, truth, grid, NoNoise())
    report = exact.report(truth.image_model(grid))
    assert float(report["cphase"]) < 1e-12 and float(report["logcamp"]) < 1e-12
    assert float(objective.report(truth.image_model(grid))["cphase"]) > 1.0
    noisy = ex.simulate(objective, truth, grid, rng).report(truth.image_model(grid))
    for name, term in zip(("cphase", "logcamp"), objective.terms):
        n = int(term.n_rows)
        assert abs(float(noisy[name]) - 1.0) < 5 * np.sqrt(2 / n)


@pytest.mark.slow  # real data
def test_likelihood_is_the_simulators_density(shared_data):
    """The posterior's likelihood is the density `simulate` draws from: between
    any two models, its `ln L` changes as the von Mises log density of
    concentration `1/σ²` of the closure phases plus the Gaussian log density of
    σ of the log closure amplitudes (scipy, from the closure products' own
    `(u, v)` and the model's visibilities there; rtol 1e-10 of the changes),
    and `simulate` passes those concentrations and σ to its random draws."""
    import jax.numpy as jnp

    ex = load()
    import eqmodels as em

    grid = em.ImageGrid.from_fov(32, 160.0)
    path = shared_data / "eht" / "m87_2017" / ex.FILE.format(day="096")
    objective, data = ex.closure_objective(path, grid)
    cpd = em.closure_phases(data, uv_min=ex.UV_MIN)
    lcd = em.log_closure_amplitudes(data, uv_min=ex.UV_MIN)
    rng = np.random.default_rng(7)
    simulated = ex.simulate(objective, ex.prior_draw(rng), grid, rng)
    cp, lca = simulated.terms

    def reference(params):
        image = params.image_model(grid)
        vis = np.asarray(image.visibility(jnp.asarray(cpd.u), jnp.asarray(cpd.v)))
        w = np.asarray(cp.weight)
        live = w > 0
        delta = (np.asarray(cp.cphase) - np.angle(np.prod(vis, axis=1)))[live]
        out = np.sum(stats.vonmises.logpdf(delta, w[live]))
        vis = np.asarray(image.visibility(jnp.asarray(lcd.u), jnp.asarray(lcd.v)))
        la = np.log(np.abs(vis))
        model = la[:, 0] + la[:, 1] - la[:, 2] - la[:, 3]
        w = np.asarray(lca.weight)
        live = w > 0
        sigma = 1 / np.sqrt(w[live])
        return out + np.sum(
            stats.norm.logpdf(np.asarray(lca.logcamp)[live], model[live], sigma)
        )

    # ... and `simulate` draws with those concentrations and σ
    class Recording:
        def __init__(self, normal):
            self.value = normal

        def vonmises(self, mu, kappa):
            self.kappa = kappa
            return np.zeros_like(kappa)

        def normal(self, size):
            return np.full(size, self.value)

    truth = ex.prior_draw(rng)
    unit_rng = Recording(1.0)
    unit = ex.simulate(objective, truth, grid, unit_rng).terms[1].logcamp
    zero = ex.simulate(objective, truth, grid, Recording(0.0)).terms[1].logcamp
    live = np.asarray(cp.weight) > 0
    np.testing.assert_array_equal(unit_rng.kappa[live], np.asarray(cp.weight)[live])
    live = np.asarray(lca.weight) > 0
    sigma = 1 / np.sqrt(np.asarray(lca.weight)[live])
    np.testing.assert_allclose(np.asarray(unit - zero)[live], sigma, rtol=1e-12)

    models = [ex.prior_draw(rng) for _ in range(4)]
    got = [float(simulated.log_likelihood(m.image_model(grid))) for m in models]
    ref = [reference(m) for m in models]
    changes, ref_changes = np.diff(got), np.diff(ref)
    assert np.all(np.abs(ref_changes) > 1.0)  # the models differ
    np.testing.assert_allclose(changes, ref_changes, rtol=1e-10)


@pytest.mark.slow  # NUTS on real data, minutes
def test_quick_run(shared_data, tmp_path):
    """The three shows in quick mode: the ring's diameter within 2σ of Paper VI's
    42 ± 3 µas, an image posterior near the 0.6 Jy the flux prior holds, and SBC
    rank histograms whose χ² is below the 99th percentile of χ²(bins − 1) for
    every parameter: not grossly non-uniform (10 replications in two bins of five
    ranks: only all ten in one bin exceeds it, a chance of 0.2 % per parameter
    when calibrated)."""
    ex = load()
    figures = tmp_path / "figures"
    result = ex.main(
        ["--quick", "--data", str(shared_data / "eht" / "m87_2017"),
         "--figures", str(figures)]
    )  # fmt: skip
    ring = result["ring"]
    lo, hi = ring["diameter_95"]
    assert lo <= ring["diameter_median"] <= hi
    assert abs(ring["diameter_median"] - 42.0) < 6.0
    assert ring["rhat_max"] < 1.1  # Gelman's conventional bound, short chains

    image = result["image"]
    assert abs(image["flux_mean"] - 0.6) < 0.06
    assert 0.0 <= image["rhat_below_1.01"] <= 1.0 and image["rhat_max"] >= 1.0
    assert all(np.isfinite(v) for v in image["chi2_at_mean"].values())

    sbc = result["sbc"]
    bins = sbc["bins"]
    bound = stats.chi2.ppf(0.99, bins - 1)
    assert len(sbc["chi2"]) == 6
    for name, chi2 in sbc["chi2"].items():
        assert sum(sbc["counts"][name]) == sbc["reps"]
        assert chi2 < bound, (name, sbc["counts"][name])

    if importlib.util.find_spec("matplotlib") is not None:
        names = sorted(pathlib.Path(p).name for p in result["figures"])
        assert names == [f"m87_posterior_{n}.png" for n in ("image", "ring", "sbc")]


def test_sbc_prior_draws_follow_the_posterior_priors():
    """SBC draws θ from the priors the posterior holds: `prior_draw` samples
    what `ring_priors()` puts in the posterior (each leaf's log density equals
    scipy's log-normal / normal, rtol 1e-12; 500 draws per leaf pass a
    Kolmogorov–Smirnov test against that distribution at the 0.1 % level), and
    the posterior's unconstrained density adds `ln θ` for the positive leaves
    (numpy, written from the formulas)."""
    import jax.numpy as jnp

    import eqmodels as em

    ex = load()
    rng = np.random.default_rng(11)
    draws = [ex.prior_draw(rng) for _ in range(500)]

    class Flat:  # a likelihood of 0: the posterior is its priors
        def log_likelihood(self, model):
            return jnp.zeros(())

    posterior = em.Posterior(Flat(), ex.ring_priors(), ex.prior_median())
    names = list(ex.PRIORS)
    for name, prior in zip(names, ex.ring_priors()):
        centre, s, support = ex.PRIORS[name]
        if support == "positive":
            dist = stats.lognorm(s, scale=centre)
        else:
            dist = stats.norm(centre, s)
        x = np.array([float(np.asarray(getattr(d, name)).ravel()[0]) for d in draws])
        assert stats.kstest(x, dist.cdf).pvalue > 1e-3, name
        for d in draws[:3]:
            value = getattr(d, name)
            assert prior.where(d) is value
            ref = np.sum(dist.logpdf(np.asarray(value)))
            np.testing.assert_allclose(float(prior.log_density(value)), ref, rtol=1e-12)
    for d in draws[:3]:
        theta = np.asarray(posterior.flatten(d))  # field order: `names`
        z = np.asarray(posterior.to_unconstrained(d))
        ref = 0.0
        for k, name in enumerate(names):
            centre, s, support = ex.PRIORS[name]
            if support == "positive":
                np.testing.assert_allclose(z[k], np.log(theta[k]), rtol=1e-12)
                ref += stats.lognorm.logpdf(theta[k], s, scale=centre) + z[k]
            else:
                assert z[k] == theta[k]
                ref += stats.norm.logpdf(theta[k], centre, s)
        got = float(posterior.log_density_unconstrained(jnp.asarray(z)))
        np.testing.assert_allclose(got, ref, rtol=1e-12)


@pytest.mark.slow  # real data (the coverage)
def test_sbc_ranks_start_at_the_truth(shared_data, monkeypatch):
    """`sbc` starts each chain at the truth itself (`jitter=0`: `sample`'s
    default jitter of up to ±0.1 per unconstrained coordinate would start it up
    to 4–30 posterior σ away in the ring's log-diameter), ranks the truth among every
    `sbc_thin`-th draw in unconstrained coordinates and bins the ranks. A stub
    sampler returns draws built to give replication `i` the rank `i mod (L + 1)`
    among the kept draws (the others all above the truth, so a wrong thinning
    shows)."""
    ex = load()
    truths, calls = [], []
    prior_draw = ex.prior_draw

    def recording_draw(rng):
        truths.append(prior_draw(rng))
        return truths[-1]

    q = dict(sbc_reps=10, sbc_warmup=1, sbc_draws=12, sbc_thin=3, sbc_bins=5)
    kept = len(range(0, q["sbc_draws"], q["sbc_thin"]))  # L = 4

    def stub(posterior, init, *, key, num_warmup, num_samples, num_chains,
             jitter=0.1):  # fmt: skip
        i = len(calls)
        calls.append(jitter)
        assert init is truths[-1]
        z0 = np.asarray(posterior.to_unconstrained(init))
        rank = i % (kept + 1)
        pos = np.tile(z0 + 1.0, (num_samples, 1))  # all above the truth
        offsets = np.where(np.arange(kept) < rank, -0.5, 0.5)
        pos[:: q["sbc_thin"]] = z0 + offsets[:, None]
        return type("S", (), {"positions": pos[None]})()

    monkeypatch.setattr(ex, "prior_draw", recording_draw)
    monkeypatch.setattr(ex.em, "sample", stub)
    path = shared_data / "eht" / "m87_2017" / ex.FILE.format(day="096")
    out = ex.sbc(path, q, 5, ex.Figures(None))
    assert calls == [0.0] * q["sbc_reps"]
    ranks = np.array(out["ranks"])
    want = np.arange(q["sbc_reps"]) % (kept + 1)
    np.testing.assert_array_equal(ranks, np.repeat(want[:, None], 6, axis=1))
    assert out["draws_kept"] == kept
    for name in out["counts"]:
        assert out["counts"][name] == [2] * 5
        assert out["chi2"][name] == 0.0
