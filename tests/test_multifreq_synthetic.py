"""The synthetic check of multi-frequency imaging (slow): a ring whose spectral
index has a known east-west gradient, observed on the uv coverage of the four
2018 M87 bands of one day (b1–b4, 213–229 GHz) with their thermal noise, is fitted
for its α map (I₀ held at the truth: this checks the recovery of α and its noise,
not imaging); the recovered α agrees with the truth within its posterior σ (the
Gauss-Newton covariance of the fitted objective, a weak Gaussian prior included)
where the ring is bright, and the gradient is detected."""

import glob

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em


pytestmark = pytest.mark.slow  # real data, a solve and a Jacobian


def test_ring_with_alpha_gradient_recovered_within_noise(shared_data):
    paths = [
        glob.glob(str(shared_data / f"eht/m87_2018/*_111_{b}_*.uvfits"))[0]
        for b in ("b1", "b2", "b3", "b4")
    ]
    coverage = em.MultiBandData([em.load_uvfits(p) for p in paths]).scan_average()
    assert len(coverage) == 4
    grid = em.ImageGrid.from_fov(16, 160.0)
    ring = em.RingImage(grid, 0.6, em.uas_to_rad(44.0), em.uas_to_rad(14.0))
    x = np.asarray(grid.coords()[0]) / em.uas_to_rad(25.0)
    alpha_true = -1.0 + 2.0 * x  # α rises by 2 every 25 µas along x
    truth = em.MultiFrequencyImage(ring, coverage.ref_freq, alpha=alpha_true)
    rng = np.random.default_rng(0)
    bands = []
    for d, nu in zip(coverage, coverage.freqs):
        v = np.asarray(em.DirectFT(grid, d.u, d.v)(truth.at(nu)))
        s = np.asarray(d.sigma)
        noise = s * (rng.normal(size=s.shape) + 1j * rng.normal(size=s.shape))
        bands.append(d.replace(vis=v + noise))
    data = em.MultiBandData(bands)

    i0 = np.asarray(ring())
    model = em.MultiFrequencyImage(
        em.PixelImage(grid, i0, transform="identity"),
        data.ref_freq,
        alpha=np.zeros(grid.shape),
    )
    # −2 ln L: the un-normalised χ² of every band (weights N_b), and a weak prior
    # α ~ N(0, 3²) per pixel (what keeps the faint pixels' α finite).
    terms = [
        em.AtFrequency(em.VisChi2.from_data(d, grid), nu)
        for d, nu in zip(data, data.freqs)
    ]
    obj = sum(float(t.n_rows) * t for t in terms) + (1 / 9) * em.SpectralL2(grid)
    alpha_only = eqx.tree_at(
        lambda m: m.alpha, jax.tree.map(lambda _: False, model), True
    )
    sol = em.solve(obj, model, max_steps=300, params=alpha_only)
    report = {k: float(v) for k, v in sol.report.items()}
    for name in ("vis", "vis_2", "vis_3", "vis_4"):
        assert 0.7 < report[name] < 1.3, report  # fitted to the noise
    a_hat = np.asarray(sol.model.alpha)

    def residuals(alpha):
        m = eqx.tree_at(lambda m: m.alpha, model, alpha.reshape(grid.shape))
        return obj.residuals(m)

    jac = np.asarray(jax.jacfwd(residuals)(jnp.asarray(a_hat).reshape(-1)))
    cov = np.linalg.inv(jac.T @ jac)  # the posterior covariance of α
    sigma = np.sqrt(np.diag(cov)).reshape(grid.shape)

    bright = i0 > 0.3 * i0.max()
    z = (a_hat - alpha_true)[bright] / sigma[bright]
    assert bright.sum() >= 20
    assert np.all(np.abs(z) < 4), z
    assert np.median(sigma[bright]) < 2.0  # the data constrain α there
    # The east-west gradient, fitted to the bright pixels with its propagated σ.
    design = np.stack([np.ones(bright.sum()), x[bright]], axis=1)
    proj = np.linalg.pinv(design)
    idx = np.flatnonzero(bright.ravel())
    coef = proj @ a_hat[bright]
    sd = np.sqrt(np.diag(proj @ cov[np.ix_(idx, idx)] @ proj.T))
    assert np.all(np.abs(coef - np.array([-1.0, 2.0])) < 4 * sd), (coef, sd)
    assert coef[1] / sd[1] > 4  # the gradient is detected
