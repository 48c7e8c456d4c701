"""examples/m87_posterior.py: the real-data posteriors and the simulation-based
calibration of issue 39 (docs/posteriors.md), in quick mode; and the pieces it is
built from against plain numpy."""

import importlib.util
import pathlib

import equinox as eqx
import numpy as np
import pytest
from scipy import stats


EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "m87_posterior.py"


def load():
    spec = importlib.util.spec_from_file_location("m87_posterior", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
