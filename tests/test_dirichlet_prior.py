"""`SimplexImage` + `DirichletPrior` (an image as flux × simplex, a Dirichlet on the
simplex as the density of the free logits) against plain numpy written from the
formulas: the Dirichlet density, the Jacobian of the logit → simplex map from its
matrix, the gradient, the normalisation, and NUTS recovering the Dirichlet's
moments."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em


def batch_means_se(x, n_batches=20):
    """Monte-Carlo standard error of the mean of each column of `x`
    `(chains, draws, k)` by batch means (robust to autocorrelation)."""
    c, d, k = x.shape
    b = d // n_batches
    means = x[:, : b * n_batches].reshape(c, n_batches, b, k).mean(axis=2)
    means = means.reshape(-1, k)
    return means.std(axis=0, ddof=1) / np.sqrt(means.shape[0])


def np_simplex(y):
    """s = softmax((y, 0)), numpy."""
    full = np.append(y, 0.0)
    e = np.exp(full - full.max())
    return e / e.sum()


def dirichlet_reference(y, alpha):
    """ln Dir(s(y); α) + ln |det ∂s_{<n}/∂y| with the Jacobian matrix
    diag(s_{<n}) − s_{<n} s_{<n}ᵀ and its slogdet, and the gradient α_{<n} − (Σα) s_{<n}."""
    s = np_simplex(y)
    log_b = sum(math.lgamma(a) for a in alpha) - math.lgamma(float(np.sum(alpha)))
    dens = np.sum((alpha - 1) * np.log(s)) - log_b
    jac = np.diag(s[:-1]) - np.outer(s[:-1], s[:-1])
    sign, logdet = np.linalg.slogdet(jac)
    assert sign > 0
    return dens + logdet, alpha[:-1] - np.sum(alpha) * s[:-1]


@pytest.mark.parametrize("shape", [(1, 2), (2, 2), (3, 4)])
def test_density_with_jacobian_and_gradient_match_numpy(shape):
    rng = np.random.default_rng(shape[0] * 10 + shape[1])
    n = shape[0] * shape[1]
    grid = em.ImageGrid.from_fov(shape, 40.0)
    alpha = rng.uniform(0.3, 3.0, shape)
    prior = em.DirichletPrior(grid, alpha)
    f = jax.jit(jax.value_and_grad(prior.log_density))
    for _ in range(3):
        y = rng.normal(scale=1.5, size=n - 1)
        value, grad = f(jnp.asarray(y))
        ref, ref_grad = dirichlet_reference(y, alpha.ravel())
        np.testing.assert_allclose(value, ref, rtol=1e-12)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-12, atol=1e-13)
        # ... and finite differences.
        h = 1e-6
        e = np.zeros(n - 1)
        e[0] = h
        fd = (f(jnp.asarray(y + e))[0] - f(jnp.asarray(y - e))[0]) / (2 * h)
        np.testing.assert_allclose(grad[0], fd, rtol=1e-6)


def test_jacobian_matrix_is_the_map_derivative():
    """The matrix `dirichlet_reference` takes the determinant of is ∂s/∂y (central
    differences of the numpy map), and its determinant is Π_{i ≤ n} s_i."""
    y = np.array([0.3, -1.2, 0.8])
    s = np_simplex(y)
    h = 1e-6
    fd = np.stack(
        [
            (np_simplex(y + h * e)[:-1] - np_simplex(y - h * e)[:-1]) / (2 * h)
            for e in np.eye(3)
        ],
        axis=1,
    )
    jac = np.diag(s[:-1]) - np.outer(s[:-1], s[:-1])
    np.testing.assert_allclose(fd, jac, atol=1e-9)
    np.testing.assert_allclose(np.linalg.det(jac), np.prod(s), rtol=1e-12)


def test_density_is_normalised_over_the_logits():
    """Two pixels: one logit; ∫ p(y) dy = 1 (trapezoid over a wide range)."""
    grid = em.ImageGrid.from_fov((1, 2), 40.0)
    prior = em.DirichletPrior(grid, np.array([[0.7, 1.8]]))
    y = np.linspace(-60.0, 60.0, 60001)
    dens = np.exp(
        np.asarray(jax.jit(jax.vmap(lambda t: prior.log_density(t[None])))(y))
    )
    np.testing.assert_allclose(np.trapezoid(dens, y), 1.0, rtol=1e-7)


def test_simplex_image_matches_numpy_and_round_trips():
    grid = em.ImageGrid.from_fov((3, 4), 40.0)
    rng = np.random.default_rng(1)
    y = rng.normal(size=11)
    model = em.SimplexImage(grid, y, flux=2.5)
    img = np.asarray(model())
    np.testing.assert_allclose(img, 2.5 * np_simplex(y).reshape(3, 4), rtol=1e-13)
    np.testing.assert_allclose(img.sum(), 2.5, rtol=1e-14)
    np.testing.assert_allclose(
        model.fractions(), np_simplex(y).reshape(3, 4), rtol=1e-13
    )
    back = em.SimplexImage.from_image(img, grid)
    np.testing.assert_allclose(back.logits, y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(back.flux, 2.5, rtol=1e-14)
    # The default: a flat image of flux 1.
    np.testing.assert_allclose(
        em.SimplexImage(grid)(), np.full((3, 4), 1 / 12), rtol=1e-14
    )
    # Gradient of Σ w·I against numpy: ∂/∂y_j = F s_j (w_j − Σ w s), ∂/∂F = Σ w s.
    w = rng.uniform(-1, 1, (3, 4))
    g = jax.grad(lambda m: jnp.sum(w * m()))(model)
    s = np_simplex(y)
    ws = np.sum(w.ravel() * s)
    np.testing.assert_allclose(
        g.logits, 2.5 * s[:-1] * (w.ravel()[:-1] - ws), rtol=1e-12
    )
    np.testing.assert_allclose(g.flux, ws, rtol=1e-12)


def test_jit_and_vmap():
    grid = em.ImageGrid.from_fov((2, 3), 40.0)
    alpha = np.arange(1.0, 7.0).reshape(2, 3)
    prior = em.DirichletPrior(grid, alpha)
    ys = np.random.default_rng(2).normal(size=(4, 5))
    vals = jax.vmap(prior.log_density)(jnp.asarray(ys))
    jitted = eqx.filter_jit(prior.log_density)
    for k in range(4):
        ref = dirichlet_reference(ys[k], alpha.ravel())[0]
        np.testing.assert_allclose(vals[k], ref, rtol=1e-12)
        np.testing.assert_allclose(jitted(jnp.asarray(ys[k])), ref, rtol=1e-12)
    models = jax.vmap(lambda t: em.SimplexImage(grid, t, flux=1.0))(jnp.asarray(ys))
    images = eqx.filter_vmap(lambda m: m())(models)
    np.testing.assert_allclose(images.sum(axis=(1, 2)), 1.0, rtol=1e-14)


def flux_problem(shape, alpha, vis=1.0, sigma=0.05):
    """A simplex image whose only datum is the zero-baseline visibility (the flux):
    the data say nothing about the shape. Flat-in-log flux prior."""
    grid = em.ImageGrid.from_fov(shape, 40.0)
    term = em.VisChi2(
        em.DirectFT(grid, np.zeros(1), np.zeros(1)),
        np.array([vis + 0j]),
        np.array([sigma]),
    )
    priors = [
        em.DirichletPrior(grid, alpha),
        em.ParameterPrior(lambda m: m.flux, lambda f: -jnp.log(f), support="positive"),
    ]
    return em.Posterior(term, priors, em.SimplexImage(grid, flux=vis))


def test_posterior_unconstrained_density_and_laplace():
    alpha = np.array([[0.8, 1.5], [2.0, 3.5]])
    vis, sigma = 1.0, 0.05
    post = flux_problem((2, 2), alpha, vis, sigma)
    y = np.array([0.2, -0.4, 0.9])
    model = em.SimplexImage(post.model.grid, y, flux=0.8)
    z = post.to_unconstrained(model)
    np.testing.assert_allclose(z, np.append(y, np.log(0.8)), rtol=1e-14)
    loglik = -0.5 * (vis - 0.8) ** 2 / sigma**2 - 2 * np.log(sigma) - np.log(2 * np.pi)
    expected = (
        loglik
        + dirichlet_reference(y, alpha.ravel())[0]
        - np.log(0.8)  # the flat-in-log prior
        + np.log(0.8)  # the Jacobian of F = e^{z_F}: flat in z_F
    )
    np.testing.assert_allclose(post.log_density_unconstrained(z), expected, rtol=1e-12)
    # The Laplace approximation at the exact mode: s = α/Σα (the mode of the
    # logits' density), F = (V + sqrt(V² − 4σ²))/2 (ln L − ln F stationary).
    a = alpha.ravel()
    s = a / a.sum()
    f_map = (vis + np.sqrt(vis**2 - 4 * sigma**2)) / 2
    at = em.SimplexImage(post.model.grid, np.log(s[:-1] / s[-1]), flux=f_map)
    lap = em.laplace(post, at)
    assert float(lap.grad_norm) < 1e-9
    prec = np.zeros((4, 4))
    prec[:3, :3] = a.sum() * (np.diag(s[:-1]) - np.outer(s[:-1], s[:-1]))
    prec[3, 3] = 1 / sigma**2 - 1 / f_map**2
    np.testing.assert_allclose(lap.precision, prec, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(
        lap.covariance, np.linalg.inv(prec), rtol=1e-9, atol=1e-12
    )


@pytest.mark.slow  # NUTS: ~4000 draws and blackjax's compile
def test_nuts_recovers_the_dirichlet_moments():
    pytest.importorskip("blackjax")
    alpha = np.array([[0.5, 1.0], [2.0, 3.5]])
    post = flux_problem((2, 2), alpha)
    res = em.sample(
        post, key=jax.random.key(3), num_warmup=300, num_samples=1000, num_chains=4
    )
    frac = np.asarray(
        eqx.filter_vmap(eqx.filter_vmap(lambda m: m.fractions()))(res.draws)
    )
    frac = frac.reshape(4, 1000, 4)
    a = alpha.ravel()
    mean = a / a.sum()
    var = a * (a.sum() - a) / (a.sum() ** 2 * (a.sum() + 1))
    z = (frac.reshape(-1, 4).mean(axis=0) - mean) / batch_means_se(frac)
    rel_var = frac.reshape(-1, 4).var(axis=0, ddof=1) / var - 1
    print(
        f"Dirichlet mean z {np.round(z, 2)}; variance rel. error {np.round(rel_var, 3)}"
    )
    assert np.abs(z).max() < 4.5
    assert np.abs(rel_var).max() < 0.2
    assert int(res.divergences.sum()) == 0
    assert res.rhat().max() < 1.02


def test_construction_errors():
    grid = em.ImageGrid.from_fov((2, 3), 40.0)
    one = em.ImageGrid.from_fov((1, 1), 40.0)
    with pytest.raises(ValueError, match="`alpha` must be finite and > 0"):
        em.DirichletPrior(grid, 0.0)
    with pytest.raises(ValueError, match="`alpha` must be finite and > 0"):
        em.DirichletPrior(grid, np.array([[1.0, -1.0, 1.0], [1.0, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="`alpha` has shape"):
        em.DirichletPrior(grid, np.ones(6))
    with pytest.raises(ValueError, match="one pixel"):
        em.DirichletPrior(one, 1.0)
    with pytest.raises(TypeError, match="where"):
        em.DirichletPrior(grid, 1.0, where="logits")
    with pytest.raises(ValueError, match="one pixel"):
        em.SimplexImage(one)
    with pytest.raises(ValueError, match=r"`logits` has shape \(6,\); expected \(5,\)"):
        em.SimplexImage(grid, np.zeros(6))
    with pytest.raises(ValueError, match="`flux` must be finite and > 0"):
        em.SimplexImage(grid, flux=-1.0)
    with pytest.raises(ValueError, match="`flux` must be a scalar"):
        em.SimplexImage(grid, flux=np.ones(2))
    with pytest.raises(ValueError, match="strictly positive"):
        em.SimplexImage.from_image(np.zeros((2, 3)), grid)
    # A prior on another grid's logits: refused when the posterior is built.
    post = flux_problem((2, 2), 1.0)
    with pytest.raises(ValueError, match="DirichletPrior on a 2×3 grid got logits"):
        em.Posterior(post.likelihood, [em.DirichletPrior(grid, 1.0)], post.model)
