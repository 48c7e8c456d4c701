"""`evidence` (nested sampling, blackjax) and `laplace_evidence`, against the
closed-form evidence of a linear-Gaussian problem: with real data `y = A x + n`,
`n ~ N(0, S)` and a prior `x ~ N(μ, P⁻¹)`, `Z = N(y; A μ, A P⁻¹ Aᵀ + S)`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em

from .reference.numpy_ft import dft_matrix
from .test_posterior import gmrf_reference, NX, NY, Problem


def log_normal(y, mean, cov):
    r = y - mean
    _, logdet = np.linalg.slogdet(2 * np.pi * cov)
    return -0.5 * r @ np.linalg.solve(cov, r) - 0.5 * logdet


def pixels(model):
    """`where` of the test priors: one function, so that posteriors built alike
    share one compiled nested sampler."""
    return model.params


class GaussianPrior(em.AbstractPrior):
    """A user's prior that can be drawn from: independent normals on the pixels."""

    where: object = eqx.field(static=True)
    support: str = eqx.field(static=True)
    mean: jax.Array
    std: float

    def log_density(self, x):
        z = (x - self.mean) / self.std
        return jnp.sum(-0.5 * z**2 - jnp.log(self.std) - 0.5 * jnp.log(2 * jnp.pi))

    def sample(self, key):
        return self.mean + self.std * jax.random.normal(key, self.mean.shape)


class WrongSampler(em.AbstractPrior):
    """A prior whose `sample` returns the wrong shape."""

    where: object = eqx.field(static=True)
    support: str = eqx.field(static=True)
    mean: jax.Array
    std: float

    def log_density(self, x):
        return jnp.sum(-0.5 * ((x - self.mean) / self.std) ** 2)

    def sample(self, key):
        return jax.random.normal(key, (4,))


class Small:
    """3 pixels seen at 3 visibilities: a linear-Gaussian problem small enough
    for nested sampling in a test."""

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.grid = em.ImageGrid.from_fov((1, 3), 60.0)
        m = 3
        u = rng.uniform(-0.4, 0.4, m) / self.grid.psize
        v = rng.uniform(-0.4, 0.4, m) / self.grid.psize
        a = dft_matrix(1, 3, self.grid.psize, u, v)
        self.sigma = np.full(m, 0.05)
        truth = np.array([0.1, 0.2, 0.15])
        self.vis = a @ truth + self.sigma * (
            rng.normal(size=m) + 1j * rng.normal(size=m)
        )
        self.ar = np.concatenate([a.real, a.imag])
        self.y = np.concatenate([self.vis.real, self.vis.imag])
        self.s = np.concatenate([self.sigma, self.sigma])
        self.term = em.VisChi2(em.DirectFT(self.grid, u, v), self.vis, self.sigma)
        self.model = em.PixelImage(self.grid, truth.reshape(1, 3), transform="identity")

    def posterior(self, mean, std, sampled=True):
        mean = np.full(3, mean)
        if sampled:
            prior = GaussianPrior(pixels, "real", jnp.asarray(mean), std)
        else:
            prior = em.ParameterPrior(
                lambda m: m.params,
                lambda x: jnp.sum(
                    -0.5 * ((x - mean) / std) ** 2
                    - jnp.log(std)
                    - 0.5 * jnp.log(2 * jnp.pi)
                ),
            )
        return em.Posterior(self.term, [prior], self.model)

    def log_evidence(self, mean, std):
        cov = std**2 * self.ar @ self.ar.T + np.diag(self.s**2)
        return log_normal(self.y, self.ar @ np.full(3, mean), cov)

    def posterior_moments(self, mean, std):
        prec = self.ar.T @ (self.ar / self.s[:, None] ** 2) + np.eye(3) / std**2
        cov = np.linalg.inv(prec)
        return cov @ (self.ar.T @ (self.y / self.s**2) + mean / std**2), cov


@pytest.mark.slow  # ~7 s on 2 busy cores (a Hessian compiles)
def test_laplace_evidence_is_exact_for_a_small_linear_gaussian_problem():
    s = Small()
    post = s.posterior(0.1, 0.1)
    mean, _ = s.posterior_moments(0.1, 0.1)
    at = em.PixelImage(s.grid, mean.reshape(1, 3), transform="identity")
    exact = s.log_evidence(0.1, 0.1)
    np.testing.assert_allclose(float(em.laplace_evidence(post, at)), exact, rtol=1e-12)


@pytest.mark.slow  # ~10 s: an L-BFGS solve compiles
def test_laplace_evidence_of_a_solution():
    """The MAP found by `solve` (a Solution) gives the exact evidence too."""
    s = Small()
    post = s.posterior(0.1, 0.1)
    exact = s.log_evidence(0.1, 0.1)
    sol = em.solve(post, s.model, em.LBFGS(), max_steps=500, ftol=0.0, gtol=1e-10)
    np.testing.assert_allclose(float(em.laplace_evidence(post, sol)), exact, rtol=1e-8)


@pytest.mark.slow  # ~10 s: the 16-parameter Hessian compiles slowly
def test_laplace_evidence_is_exact_for_a_linear_gaussian_problem():
    """4×4 pixels, a GMRF prior: the Laplace evidence is the exact one."""
    p = Problem()
    mean, _, _ = p.exact()
    ar, y, w = p.real_design()
    q = gmrf_reference(np.zeros(NY * NX), p.mu, p.tau, p.kappa, NY, NX)[2]
    exact = log_normal(
        y, ar @ np.ravel(p.mu), ar @ np.linalg.inv(q) @ ar.T + np.diag(1 / w)
    )
    at = em.PixelImage(p.grid, mean.reshape(NY, NX), transform="identity")
    lz = em.laplace_evidence(p.posterior, at)
    np.testing.assert_allclose(float(lz), exact, rtol=1e-10)
    # away from the optimum it is not (the formula is evaluated at the given point)
    off = em.PixelImage(p.grid, mean.reshape(NY, NX) + 0.01, transform="identity")
    assert abs(float(em.laplace_evidence(p.posterior, off)) - exact) > 1e-3


def _z(ev, exact):
    return (float(ev.log_evidence) - exact) / float(ev.log_evidence_std)


@pytest.mark.slow  # ~45 s on 2 busy cores (mostly compiling the nested sampler)
def test_nested_sampling_recovers_the_analytic_evidence():
    s = Small()
    post = s.posterior(0.1, 0.1)
    ev = em.evidence(post, jax.random.key(0), num_live=200)
    exact = s.log_evidence(0.1, 0.1)
    z = _z(ev, exact)
    print(
        f"\nln Z = {float(ev.log_evidence):.4f} ± {float(ev.log_evidence_std):.4f}, "
        f"exact {exact:.4f} (z = {z:.2f}), ESS {float(ev.ess):.0f}, "
        f"{ev.num_steps} steps"
    )
    assert ev.converged
    assert abs(z) < 4
    assert 0.02 < float(ev.log_evidence_std) < 0.5
    # the weighted draws are the posterior's
    w = np.exp(np.asarray(ev.log_weights))
    np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-10)
    x = np.asarray(ev.draws.params).reshape(-1, 3)
    mean, cov = s.posterior_moments(0.1, 0.1)
    got = w @ x
    zs = (got - mean) / np.sqrt(np.diag(cov) / float(ev.ess))
    assert np.all(np.abs(zs) < 5), zs
    got_cov = (x - got).T @ (w[:, None] * (x - got))
    np.testing.assert_allclose(
        np.sqrt(np.diag(got_cov)), np.sqrt(np.diag(cov)), rtol=0.15
    )
    # equally weighted resampling
    draws = ev.resample(jax.random.key(1), 500)
    assert draws.params.shape == (500, 3)
    # the Laplace evidence is exact here
    at = em.PixelImage(s.grid, mean.reshape(1, 3), transform="identity")
    np.testing.assert_allclose(float(em.laplace_evidence(post, at)), exact, rtol=1e-12)


@pytest.mark.slow  # ~1 min: two nested sampling runs (one compilation)
def test_model_comparison_picks_the_better_prior():
    """Two priors for one data set: centred on the truth (0.15 ± 0.1) or far off
    (0.6 ± 0.1). ln B = ln Z₁ − ln Z₂ agrees with the analytic one; the second
    run starts from `initial` draws (numpy draws of its prior)."""
    s = Small(1)
    good = em.evidence(s.posterior(0.15, 0.1), jax.random.key(2), num_live=200)
    rng = np.random.default_rng(3)
    draws = 0.6 + 0.1 * rng.normal(size=(200, 3))
    bad = em.evidence(
        s.posterior(0.6, 0.1), jax.random.key(3), num_live=200, initial=draws
    )
    exact = s.log_evidence(0.15, 0.1) - s.log_evidence(0.6, 0.1)
    got = float(good.log_evidence - bad.log_evidence)
    std = float(np.hypot(good.log_evidence_std, bad.log_evidence_std))
    print(f"\nln B = {got:.3f} ± {std:.3f}, exact {exact:.3f}")
    assert exact > 5  # the comparison is decisive ...
    assert got > 0  # ... and nested sampling prefers the right model
    assert abs(got - exact) < 4 * std


def test_evidence_errors():
    s = Small()
    post = s.posterior(0.1, 0.1)
    key = jax.random.key(0)
    with pytest.raises(TypeError, match="posterior"):
        em.evidence(s.term, key)
    with pytest.raises(TypeError, match="posterior"):
        em.laplace_evidence(s.term, s.model)
    flat = em.Posterior(s.term, [], s.model)
    with pytest.raises(ValueError, match="have no prior, i.e. a flat, improper one"):
        em.evidence(flat, key)
    with pytest.raises(ValueError, match="have no prior, i.e. a flat, improper one"):
        em.laplace_evidence(flat, s.model)
    no_sampler = s.posterior(0.1, 0.1, sampled=False)
    with pytest.raises(ValueError, match=r"cannot be drawn from .*`initial=`"):
        em.evidence(no_sampler, key)
    with pytest.raises(ValueError, match=r"`initial` must have shape .*\(50, 3\)"):
        em.evidence(no_sampler, key, num_live=50, initial=np.zeros((49, 3)))
    with pytest.raises(ValueError, match="`initial` holds non-finite"):
        em.evidence(no_sampler, key, num_live=2, initial=np.full((2, 3), np.nan))
    two = em.Posterior(s.term, [post.priors[0], no_sampler.priors[0]], s.model)
    with pytest.raises(ValueError, match="are both on one leaf"):
        em.evidence(two, key)
    wrong = WrongSampler(lambda m: m.params, "real", jnp.zeros(3), 0.1)
    with pytest.raises(ValueError, match=r"returned shape \(4,\), but its leaf"):
        em.evidence(em.Posterior(s.term, [wrong], s.model), key)
    for kw, match in (
        ({"num_live": 1}, "`num_live` must be an int ≥ 2"),
        ({"num_live": 10, "num_delete": 10}, "must be below `num_live`"),
        ({"live_fraction": 0.0}, r"`live_fraction` must be in \(0, 1\)"),
        ({"num_volume_draws": 1}, "`num_volume_draws` must be an int ≥ 2"),
        ({"max_steps": 0}, "`max_steps` must be an int ≥ 1"),
    ):
        with pytest.raises(ValueError, match=match):
            em.evidence(post, key, **kw)


class LogNormalFlux(em.AbstractPrior):
    """A log-normal prior on the pixels, `support="positive"`, with a sampler."""

    where: object = eqx.field(static=True)
    support: str = eqx.field(static=True)
    mu: float
    s: float

    def log_density(self, x):
        return jnp.sum(
            -jnp.log(x * self.s * jnp.sqrt(2 * jnp.pi))
            - (jnp.log(x) - self.mu) ** 2 / (2 * self.s**2)
        )

    def sample(self, key):
        return jnp.exp(self.mu + self.s * jax.random.normal(key, (1,)))


@pytest.mark.slow  # ~45 s: nested sampling compiles
def test_nested_sampling_of_a_positive_parameter():
    """One pixel (a flux) with a log-normal prior, sampled as `ln θ` (with the
    Jacobian): `ln Z` against a quadrature of `∫ L(x) π(x) dx` in numpy."""
    rng = np.random.default_rng(4)
    grid = em.ImageGrid.from_fov((1, 1), 20.0)
    u = rng.uniform(-0.3, 0.3, 4) / grid.psize
    v = rng.uniform(-0.3, 0.3, 4) / grid.psize
    a = dft_matrix(1, 1, grid.psize, u, v)[:, 0]
    sigma = np.full(4, 0.2)
    vis = a * 0.5 + sigma * (rng.normal(size=4) + 1j * rng.normal(size=4))
    term = em.VisChi2(em.DirectFT(grid, u, v), vis, sigma)
    mu, s = np.log(0.4), 0.5
    model = em.PixelImage(grid, np.full((1, 1), 0.4), transform="identity")
    post = em.Posterior(term, [LogNormalFlux(pixels, "positive", mu, s)], model)
    x = np.linspace(1e-6, 5.0, 400_001)
    r = vis[:, None] - a[:, None] * x[None, :]
    log_l = (
        -0.5 * np.sum(np.abs(r) ** 2, 0) / 0.2**2
        - 8 * np.log(0.2)
        - 4 * np.log(2 * np.pi)
    )
    log_p = -np.log(x * s * np.sqrt(2 * np.pi)) - (np.log(x) - mu) ** 2 / (2 * s**2)
    f = np.exp(log_l + log_p - np.max(log_l + log_p))
    exact = np.log(np.trapezoid(f, x)) + np.max(log_l + log_p)
    ev = em.evidence(post, jax.random.key(5), num_live=200)
    z = _z(ev, exact)
    print(
        f"\nln Z = {float(ev.log_evidence):.4f} ± {float(ev.log_evidence_std):.4f}, "
        f"quadrature {exact:.4f} (z = {z:.2f})"
    )
    assert ev.converged
    assert abs(z) < 4
    assert np.all(np.asarray(ev.draws.params) > 0)


def test_evidence_with_joint_priors():
    """A joint prior (`where` selecting a tuple of leaves) covers each of them;
    with `sample` returning the tuple, nested sampling starts from its draws."""
    s = Small()
    disk = em.Disk(s.grid, 1.0, em.uas_to_rad(10.0))

    def log_prob(v):
        return jnp.sum(-0.5 * jnp.stack(v) ** 2)

    joint = em.ParameterPrior(lambda m: (m.flux, m.radius), log_prob)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="cannot be drawn from"):
        em.evidence(em.Posterior(s.term, [joint], disk), key)
    one = em.ParameterPrior(lambda m: m.flux, lambda f: -0.5 * f**2)
    with pytest.raises(ValueError, match="are both on one leaf"):
        em.evidence(em.Posterior(s.term, [joint, one], disk), key)
    with pytest.raises(ValueError, match=r"1 parameter leaves of the model"):
        em.evidence(em.Posterior(s.term, [one], disk), key)
