"""`Posterior`, `GMRFPrior`, `ParameterPrior`, `laplace` against plain numpy written
from the formulas (a linear-Gaussian problem has a closed-form posterior)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em

from .reference.numpy_ft import dft_matrix


NY, NX = 4, 4
FOV = 80.0  # µas


def grid_laplacian(ny, nx):
    """The grid graph's Laplacian, dense, from its edges (4-neighbours)."""
    n = ny * nx
    lap = np.zeros((n, n))
    for iy in range(ny):
        for ix in range(nx):
            p = iy * nx + ix
            for jy, jx in ((iy + 1, ix), (iy, ix + 1)):
                if jy < ny and jx < nx:
                    q = jy * nx + jx
                    lap[p, p] += 1
                    lap[q, q] += 1
                    lap[p, q] -= 1
                    lap[q, p] -= 1
    return lap


def gmrf_reference(x, mean, tau, kappa, ny, nx):
    """½ log det Q − ½ dᵀQd − n/2 log 2π with the dense Q = τ(κ²I + L), and its
    gradient −Q d."""
    q = tau * (kappa**2 * np.eye(ny * nx) + grid_laplacian(ny, nx))
    d = np.ravel(x) - np.ravel(mean)
    sign, logdet = np.linalg.slogdet(q)
    assert sign > 0
    n = ny * nx
    return 0.5 * logdet - 0.5 * d @ q @ d - 0.5 * n * np.log(2 * np.pi), -(q @ d), q


class Problem:
    """A 4×4 image observed at 10 visibilities through a DirectFT, Gaussian noise,
    and a GMRF prior on the pixel values (identity transform): linear-Gaussian."""

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.grid = em.ImageGrid.from_fov((NY, NX), FOV)
        psize = self.grid.psize
        m = 10
        self.u = rng.uniform(-0.4, 0.4, m) / psize
        self.v = rng.uniform(-0.4, 0.4, m) / psize
        self.a = dft_matrix(NY, NX, psize, self.u, self.v)
        truth = rng.uniform(0.05, 0.2, NY * NX)
        self.sigma = rng.uniform(0.03, 0.08, m)
        noise = self.sigma * (rng.normal(size=m) + 1j * rng.normal(size=m))
        self.vis = self.a @ truth + noise
        self.tau, self.kappa = 40.0, 0.8
        self.mu = np.full((NY, NX), 0.1)
        fwd = em.DirectFT(self.grid, self.u, self.v)
        self.term = em.VisChi2(fwd, self.vis, self.sigma)
        self.prior = em.GMRFPrior(
            self.grid, tau=self.tau, kappa=self.kappa, mean=self.mu
        )
        self.model = em.PixelImage(
            self.grid, truth.reshape(NY, NX), transform="identity"
        )
        self.posterior = em.Posterior(self.term, [self.prior], self.model)

    def real_design(self):
        ar = np.concatenate([self.a.real, self.a.imag])
        y = np.concatenate([self.vis.real, self.vis.imag])
        w = np.concatenate([self.sigma, self.sigma]) ** -2.0
        return ar, y, w

    def log_likelihood(self, x):
        ar, y, w = self.real_design()
        r = ar @ x - y
        s = np.concatenate([self.sigma, self.sigma])
        n = r.size
        value = (
            -0.5 * np.sum(w * r**2) - np.sum(np.log(s)) - 0.5 * n * np.log(2 * np.pi)
        )
        return value, -(ar.T @ (w * r))

    def exact(self):
        """The closed-form posterior: precision P = AᵀWA + Q, mean P⁻¹(AᵀWy + Qμ)."""
        ar, y, w = self.real_design()
        q = gmrf_reference(np.zeros(NY * NX), self.mu, self.tau, self.kappa, NY, NX)[2]
        prec = ar.T @ (w[:, None] * ar) + q
        mean = np.linalg.solve(prec, ar.T @ (w * y) + q @ np.ravel(self.mu))
        return mean, np.linalg.inv(prec), prec


@pytest.fixture(scope="module")
def problem():
    return Problem()


# --- GMRFPrior ----------------------------------------------------------------------


@pytest.mark.parametrize("ny,nx", [(4, 4), (3, 5), (1, 6), (6, 2)])
def test_gmrf_log_density_and_gradient_match_dense_numpy(ny, nx):
    rng = np.random.default_rng(ny * 10 + nx)
    grid = em.ImageGrid.from_fov((ny, nx), 50.0)
    mean = rng.normal(size=(ny, nx))
    tau, kappa = 2.7, 0.45
    prior = em.GMRFPrior(grid, tau=tau, kappa=kappa, mean=mean)
    x = rng.normal(size=(ny, nx))
    ref, ref_grad, _ = gmrf_reference(x, mean, tau, kappa, ny, nx)
    val, grad = eqx.filter_jit(lambda p, y: jax.value_and_grad(p.log_density)(y))(
        prior, jnp.asarray(x)
    )
    np.testing.assert_allclose(val, ref, rtol=1e-12)
    np.testing.assert_allclose(np.ravel(grad), ref_grad, rtol=1e-12, atol=1e-12)
    # A flat pixel vector is the same field.
    np.testing.assert_allclose(
        eqx.filter_jit(prior.log_density)(jnp.ravel(x)), ref, rtol=1e-12
    )
    # Normalised: at τ = 1, κ large it tends to the iid N(μ, 1/κ²) density.


def test_gmrf_normalisation_integrates_to_one_in_one_dimension_pair():
    """A 1×2 grid: Q = τ[[κ²+1, −1], [−1, κ²+1]]; the density integrates to 1
    (a 2-D quadrature on a fine grid)."""
    grid = em.ImageGrid.from_fov((1, 2), 10.0)
    prior = em.GMRFPrior(grid, tau=1.5, kappa=0.7, mean=0.3)
    t = np.linspace(-8, 8, 401)
    xx, yy = np.meshgrid(t, t, indexing="ij")
    pts = jnp.asarray(np.stack([xx.ravel(), yy.ravel()], axis=1))
    dens = np.exp(np.asarray(jax.vmap(prior.log_density)(pts)))
    total = dens.sum() * (t[1] - t[0]) ** 2
    np.testing.assert_allclose(total, 1.0, rtol=1e-6)


def test_gmrf_construction_errors():
    grid = em.ImageGrid.from_fov((4, 4), 50.0)
    with pytest.raises(ValueError, match="`tau` must be finite and > 0"):
        em.GMRFPrior(grid, tau=0.0, kappa=1.0)
    with pytest.raises(ValueError, match="improper prior"):
        em.GMRFPrior(grid, tau=1.0, kappa=0.0)
    with pytest.raises(ValueError, match="`kappa` must be a scalar"):
        em.GMRFPrior(grid, tau=1.0, kappa=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="`mean` has shape"):
        em.GMRFPrior(grid, tau=1.0, kappa=1.0, mean=np.zeros((3, 4)))
    with pytest.raises(TypeError, match="grid"):
        em.GMRFPrior((4, 4), tau=1.0, kappa=1.0)
    # A prior on another grid's image is refused when the posterior is built.
    other = em.ImageGrid.from_fov((5, 5), 50.0)
    model = em.PixelImage.from_image(np.ones((5, 5)), other)
    term = em.VisChi2(
        em.DirectFT(other, np.array([1e9]), np.array([1e9])),
        np.array([1.0 + 0j]),
        np.array([0.1]),
    )
    with pytest.raises(ValueError, match="needs every pixel"):
        em.Posterior(term, em.GMRFPrior(grid, tau=1.0, kappa=1.0), model)


# --- Posterior ----------------------------------------------------------------------


def test_log_density_and_gradient_match_numpy(problem):
    rng = np.random.default_rng(3)
    x = rng.uniform(0.0, 0.3, NY * NX)
    model = em.PixelImage(problem.grid, x.reshape(NY, NX), transform="identity")
    ll, ll_grad = problem.log_likelihood(x)
    lp, lp_grad, _ = gmrf_reference(x, problem.mu, problem.tau, problem.kappa, NY, NX)
    post = problem.posterior
    # No positive priors: the unconstrained vector is the parameters themselves.
    z = post.to_unconstrained(model)
    np.testing.assert_allclose(z, x, rtol=0, atol=0)

    @eqx.filter_jit  # every form in one compiled program (op by op took seconds)
    def forms(post, model, z):
        return (
            post.log_likelihood(model),
            post.log_prior(model),
            eqx.filter_value_and_grad(post.log_density)(model),
            post(model),  # the objective form: −ln p
            post.log_density_unconstrained(z),
        )

    got_ll, got_lp, (val, grad), objective, unconstrained = forms(post, model, z)
    np.testing.assert_allclose(got_ll, ll, rtol=1e-12)
    np.testing.assert_allclose(got_lp, lp, rtol=1e-12)
    np.testing.assert_allclose(val, ll + lp, rtol=1e-12)
    np.testing.assert_allclose(grad.params, ll_grad + lp_grad, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(objective, -(ll + lp), rtol=1e-12)
    np.testing.assert_allclose(unconstrained, ll + lp, rtol=1e-12)


def lognormal(m, s):
    def log_prob(x):
        return jnp.sum(
            -jnp.log(x)
            - jnp.log(s * jnp.sqrt(2 * jnp.pi))
            - (jnp.log(x) - m) ** 2 / (2 * s**2)
        )

    return log_prob


def test_unconstrained_density_includes_the_jacobian(problem):
    """A `support="positive"` log-normal prior on the pixels: the sampled density
    of `z = ln x` is `ln L(e^z) + ln π(e^z) + Σ z`; value and gradient against
    numpy (chain rule written out), and against finite differences."""
    m, s = np.log(0.1), 0.7
    prior = em.ParameterPrior(
        lambda mod: mod.params, lognormal(m, s), support="positive"
    )
    post = em.Posterior(problem.term, [prior], problem.model)
    rng = np.random.default_rng(5)
    x = rng.uniform(0.02, 0.3, NY * NX)
    z = np.log(x)
    ll, ll_grad = problem.log_likelihood(x)
    lp = np.sum(
        -np.log(x) - np.log(s * np.sqrt(2 * np.pi)) - (np.log(x) - m) ** 2 / (2 * s**2)
    )
    lp_grad = -1 / x - (np.log(x) - m) / (s**2 * x)
    ref = ll + lp + np.sum(z)
    ref_grad = (ll_grad + lp_grad) * x + 1.0
    val, grad = jax.value_and_grad(post.log_density_unconstrained)(jnp.asarray(z))
    np.testing.assert_allclose(val, ref, rtol=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12, atol=1e-9)
    # Round trip, and the model's values are e^z.
    mod = post.from_unconstrained(jnp.asarray(z))
    np.testing.assert_allclose(mod.params, x, rtol=1e-14)
    np.testing.assert_allclose(post.to_unconstrained(mod), z, rtol=1e-14)
    # Finite differences along a random direction.
    d = rng.normal(size=z.size)
    h = 1e-5
    f = post.log_density_unconstrained
    fd = (f(jnp.asarray(z + h * d)) - f(jnp.asarray(z - h * d))) / (2 * h)
    np.testing.assert_allclose(fd, grad @ d, rtol=1e-7)


def test_log_density_under_jit_and_vmap(problem):
    rng = np.random.default_rng(7)
    zs = jnp.asarray(rng.uniform(0.0, 0.3, (3, NY * NX)))
    post = problem.posterior
    batched = eqx.filter_jit(lambda p, z: jax.vmap(p.log_density_unconstrained)(z))(
        post, zs
    )
    for z, b in zip(zs, batched):
        x = np.asarray(z)
        ref = (
            problem.log_likelihood(x)[0]
            + gmrf_reference(x, problem.mu, problem.tau, problem.kappa, NY, NX)[0]
        )
        np.testing.assert_allclose(b, ref, rtol=1e-12)


def test_several_likelihoods_add(problem):
    post2 = em.Posterior([problem.term, problem.term], [], problem.model)
    ll = problem.log_likelihood(np.ravel(problem.model()))[0]
    np.testing.assert_allclose(post2.log_density(problem.model), 2 * ll, rtol=1e-12)
    # An Objective's data terms serve as well (regularizers are left out).
    obj = em.Objective([problem.term, em.TV(problem.grid)], [1.0, 5.0])
    post3 = em.Posterior(obj, [], problem.model)
    np.testing.assert_allclose(post3.log_density(problem.model), ll, rtol=1e-12)


def test_posterior_construction_errors(problem):
    term, model, prior = problem.term, problem.model, problem.prior
    with pytest.raises(TypeError, match=r"`likelihood\[0\]`.*has no `log_likelihood"):
        em.Posterior(object(), [prior], model)
    with pytest.raises(ValueError, match="`likelihood` is empty"):
        em.Posterior([], [prior], model)
    with pytest.raises(TypeError, match=r"`priors\[0\]` is a function"):
        em.Posterior(term, [lambda m: 0.0], model)
    with pytest.raises(TypeError, match="`model` is required"):
        em.Posterior(term, [prior])
    with pytest.raises(ValueError, match=r"`priors\[0\].where` failed"):
        em.Posterior(term, [em.ParameterPrior(lambda m: m.radius, jnp.sum)], model)
    with pytest.raises(ValueError, match="not a parameter leaf"):
        em.Posterior(term, [em.ParameterPrior(lambda m: m.indices, jnp.sum)], model)
    with pytest.raises(ValueError, match="returned shape"):
        em.Posterior(term, [em.ParameterPrior(lambda m: m.params, lambda x: x)], model)
    pos = em.ParameterPrior(lambda m: m.params, jnp.sum, support="positive")
    with pytest.raises(ValueError, match="transformed twice"):
        em.Posterior(term, [pos, pos], model)
    neg = em.PixelImage(problem.grid, -np.ones((NY, NX)), transform="identity")
    with pytest.raises(ValueError, match="not > 0"):
        em.Posterior(term, [pos], neg)
    with pytest.raises(ValueError, match="`support` must be one of"):
        em.ParameterPrior(lambda m: m.params, jnp.sum, support="interval")
    with pytest.raises(TypeError, match="log_prob"):
        em.ParameterPrior(lambda m: m.params, 3.0)
    with pytest.raises(TypeError, match="where"):
        em.ParameterPrior("params", jnp.sum)


# --- laplace ------------------------------------------------------------------------


def test_laplace_is_the_exact_posterior_of_a_linear_gaussian_problem(problem):
    mean, cov, prec = problem.exact()
    at = em.PixelImage(problem.grid, mean.reshape(NY, NX), transform="identity")
    lap = em.laplace(problem.posterior, at)
    # The numpy mean is the density's maximum (gradient ~ rounding) ...
    assert float(lap.grad_norm) <= 1e-8 * np.max(np.abs(prec @ mean))
    # ... and the Laplace covariance is the exact one.
    np.testing.assert_allclose(
        lap.precision, prec, rtol=1e-10, atol=1e-10 * np.abs(prec).max()
    )
    np.testing.assert_allclose(
        lap.covariance, cov, rtol=1e-10, atol=1e-10 * np.abs(cov).max()
    )
    np.testing.assert_allclose(lap.std.params, np.sqrt(np.diag(cov)), rtol=1e-10)
    np.testing.assert_allclose(lap.mean.params, mean, rtol=0, atol=0)


def test_laplace_after_solve(problem):
    """`solve(posterior, model)` finds the MAP (a posterior is its own objective),
    and `laplace` takes the Solution."""
    mean, cov, _ = problem.exact()
    sol = em.solve(
        problem.posterior,
        problem.model,
        em.LBFGS(),
        max_steps=1000,
        ftol=0.0,
        gtol=1e-9,
    )
    lap = em.laplace(problem.posterior, sol)
    np.testing.assert_allclose(lap.mean.params, mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(lap.covariance, cov, rtol=1e-8, atol=1e-12)


def test_laplace_errors(problem):
    with pytest.raises(TypeError, match="posterior"):
        em.laplace(problem.term, problem.model)
    with pytest.raises(ValueError, match="does not have the posterior's model"):
        em.laplace(problem.posterior, em.Disk(problem.grid, 1.0, 1e-10))


def test_blackjax_is_optional(problem, monkeypatch):
    """`import eqmodels` does not import blackjax (no module-level import of it in
    the package), and `sample` without it says how to install it."""
    import ast
    import pathlib
    import sys

    pkg = pathlib.Path(em.__file__).parent
    for path in pkg.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:  # module level only
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None)]
                assert not any(n and n.startswith("blackjax") for n in names), path
    monkeypatch.setitem(sys.modules, "blackjax", None)
    with pytest.raises(ImportError, match=r"pip install blackjax"):
        em.sample(problem.posterior, key=jax.random.key(0))


@pytest.mark.slow  # ~8-12 s: the Disk's Bessel function under a Hessian compiles slowly
def test_geometric_model_with_a_positive_radius():
    """A `Disk` fitted to visibilities: flux and radius positive (sampled as
    logs). The unconstrained density is `ln L(θ) + ln π(θ) + ln F + ln R`, and
    its gradient matches finite differences; the Laplace approximation near
    the truth has finite, positive standard deviations."""
    grid = em.ImageGrid.from_fov((16, 16), 100.0)
    rng = np.random.default_rng(11)
    u = rng.uniform(-6e9, 6e9, 30)
    v = rng.uniform(-6e9, 6e9, 30)
    r_true = em.uas_to_rad(20.0)
    truth = em.Disk(grid, 0.6, r_true)
    sigma = np.full(30, 0.02)
    vis = np.asarray(truth.visibility(u, v)) + 0.02 * rng.normal(size=30)
    term = em.VisChi2(em.DirectFT(grid, u, v), vis, sigma)

    def half_normal(scale):
        return lambda x: jnp.sum(
            np.log(2 / (scale * np.sqrt(2 * np.pi))) - 0.5 * (x / scale) ** 2
        )

    priors = [
        em.ParameterPrior(lambda m: m.flux, half_normal(2.0), support="positive"),
        em.ParameterPrior(lambda m: m.radius, half_normal(1e-10), support="positive"),
    ]
    start = em.Disk(grid, 0.5, em.uas_to_rad(25.0))
    post = em.Posterior(term, priors, start)
    z = post.to_unconstrained(start)
    np.testing.assert_allclose(z, np.log([0.5, em.uas_to_rad(25.0)]), rtol=1e-14)
    f = eqx.filter_jit(post.log_density_unconstrained)
    val = f(z)
    ref = post.log_density(start) + np.log(0.5) + np.log(em.uas_to_rad(25.0))
    np.testing.assert_allclose(val, ref, rtol=1e-12)
    grad = jax.grad(post.log_density_unconstrained)(z)
    h = 1e-6
    for i in range(2):
        e = np.zeros(2)
        e[i] = h
        fd = (
            post.log_density_unconstrained(z + e)
            - post.log_density_unconstrained(z - e)
        ) / (2 * h)
        np.testing.assert_allclose(grad[i], fd, rtol=1e-6)
    # Near the truth the Hessian is negative definite: a finite Gaussian whose
    # radius σ is a small fraction of the radius (30 visibilities at 2% noise).
    lap = em.laplace(post, truth)
    assert np.isfinite(lap.covariance).all() and np.isfinite(lap.grad_norm)
    assert np.all(np.linalg.eigvalsh(np.asarray(lap.precision)) > 0)
    assert 0 < float(lap.std.radius) < 0.1 * r_true
