"""`GMRFImage` + `GMRFHyperPrior` (a GMRF on the log image with sampled
hyperparameters σ, ρ; centred and non-centred) against plain numpy written from the
formulas: dense Laplacian, dense inverse and log-determinant, the DCT-II basis
built from its definition, and the analytic derivatives in σ and ρ."""

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em

from .reference.numpy_ft import dft_matrix
from .test_dirichlet_prior import batch_means_se
from .test_posterior import grid_laplacian


LOG2PI = np.log(2 * np.pi)


def dct2_matrix(n):
    """The orthonormal DCT-II matrix, row k = basis vector k:
    C[k, i] = sqrt(2/n) w_k cos(π k (2i + 1) / 2n), w_0 = 1/√2."""
    k = np.arange(n)[:, None]
    i = np.arange(n)[None, :]
    c = np.sqrt(2.0 / n) * np.cos(np.pi * k * (2 * i + 1) / (2 * n))
    c[0] /= np.sqrt(2.0)
    return c


def eigenbasis(ny, nx):
    """V (columns: the 2-D DCT-II basis, row-major pixels × row-major (j, k)) and
    the Laplacian's eigenvalues in it, diag(Vᵀ L V), from the dense Laplacian."""
    v = np.kron(dct2_matrix(ny), dct2_matrix(nx)).T
    lap = grid_laplacian(ny, nx)
    return v, np.einsum("pi,pq,qi->i", v, lap, v), lap


def hyper(sigma, rho, ny, nx):
    """κ, A = κ²I + L, A⁻¹, c = tr(A⁻¹)/n, τ = c/σ² (mean diag (τA)⁻¹ = σ²), dense."""
    n = ny * nx
    kappa = 1.0 / rho
    a = kappa**2 * np.eye(n) + grid_laplacian(ny, nx)
    ainv = np.linalg.inv(a)
    c = np.trace(ainv) / n
    return kappa, a, ainv, c, c / sigma**2


def centred_reference(x, mu, sigma, rho):
    """ln p(x | σ, ρ) = ½ ln det Q − ½ dᵀQd − (n/2) ln 2π, Q = τA, and its
    gradients in x, σ and ρ (chain rule through τ(σ, κ) and κ = 1/ρ)."""
    ny, nx = x.shape
    n = ny * nx
    kappa, a, ainv, c, tau = hyper(sigma, rho, ny, nx)
    d = np.ravel(x - mu)
    sign, logdet_a = np.linalg.slogdet(a)
    assert sign > 0
    quad = d @ a @ d
    value = 0.5 * (n * np.log(tau) + logdet_a) - 0.5 * tau * quad - 0.5 * n * LOG2PI
    g_x = -tau * (a @ d)
    d_tau = n / (2 * tau) - 0.5 * quad  # ∂/∂τ at fixed κ
    dtau_dsigma = -2 * tau / sigma
    dc_dkappa = -2 * kappa * np.trace(ainv @ ainv) / n
    dtau_dkappa = tau * dc_dkappa / c
    d_kappa = kappa * np.trace(ainv) - tau * kappa * (d @ d)  # ∂/∂κ at fixed τ
    g_sigma = d_tau * dtau_dsigma
    g_rho = (d_kappa + d_tau * dtau_dkappa) * (-1.0 / rho**2)
    return value, g_x.reshape(ny, nx), g_sigma, g_rho


def noncentred_reference(zeta, mu, sigma, rho, w):
    """x = μ + V diag(a) ζ, a = 1/sqrt(τ(κ² + λ)) = σ/sqrt(c(κ² + λ)); the image exp(x), and the
    gradient of f = Σ w·exp(x) in ζ, σ and ρ."""
    ny, nx = zeta.shape
    n = ny * nx
    v, lam, _ = eigenbasis(ny, nx)
    kappa, _, ainv, c, tau = hyper(sigma, rho, ny, nx)
    amp = 1.0 / np.sqrt(tau * (kappa**2 + lam))
    x = np.ravel(mu) + v @ (amp * np.ravel(zeta))
    img = np.exp(x)
    g_x = np.ravel(w) * img
    g_zeta = amp * (v.T @ g_x)
    g_sigma = g_x @ (x - np.ravel(mu)) / sigma
    dc_dkappa = -2 * kappa * np.sum((kappa**2 + lam) ** -2.0) / n
    dlog_amp = -0.5 * dc_dkappa / c - kappa / (kappa**2 + lam)  # a = σ/√(c(κ²+λ))
    dx_dkappa = v @ (amp * dlog_amp * np.ravel(zeta))
    g_rho = (g_x @ dx_dkappa) * (-1.0 / rho**2)
    return img.reshape(ny, nx), g_zeta.reshape(ny, nx), g_sigma, g_rho


def rand_case(ny, nx, seed):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(ny, nx)),
        rng.normal(scale=0.3, size=(ny, nx)),
        rng.uniform(0.5, 2.0),
        rng.uniform(0.7, 4.0),
    )


SHAPES = [(4, 4), (3, 5), (1, 6), (5, 2)]


@pytest.mark.parametrize("ny,nx", SHAPES)
def test_dct_basis_diagonalises_the_laplacian(ny, nx):
    v, lam, lap = eigenbasis(ny, nx)
    np.testing.assert_allclose(v.T @ v, np.eye(ny * nx), atol=1e-12)
    np.testing.assert_allclose(v @ np.diag(lam) @ v.T, lap, atol=1e-12)
    np.testing.assert_allclose(
        lam.reshape(ny, nx),
        em._posterior._gmrf.laplacian_eigenvalues(ny, nx),
        rtol=1e-12,
        atol=1e-13,
    )


@pytest.mark.parametrize("ny,nx", SHAPES)
def test_centred_density_and_gradients_match_numpy(ny, nx):
    x, mu, sigma, rho = rand_case(ny, nx, ny * 7 + nx)
    grid = em.ImageGrid.from_fov((ny, nx), 50.0)
    model = em.GMRFImage(grid, sigma=sigma, rho=rho, mean=mu, params=x, centred=True)
    prior = em.GMRFHyperPrior()
    value, g = eqx.filter_jit(jax.value_and_grad(prior.log_density))(model)
    ref, g_x, g_sigma, g_rho = centred_reference(x, mu, sigma, rho)
    np.testing.assert_allclose(value, ref, rtol=1e-12)
    np.testing.assert_allclose(g.params, g_x, rtol=1e-12, atol=1e-12 * abs(g_x).max())
    np.testing.assert_allclose(g.sigma, g_sigma, rtol=1e-12)
    np.testing.assert_allclose(g.rho, g_rho, rtol=1e-12)
    # The image is exp(x).
    np.testing.assert_allclose(model(), np.exp(x), rtol=1e-14)


@pytest.mark.parametrize("ny,nx", SHAPES)
def test_noncentred_image_and_gradients_match_numpy(ny, nx):
    zeta, mu, sigma, rho = rand_case(ny, nx, ny * 11 + nx)
    w = np.random.default_rng(5).uniform(-1, 1, (ny, nx))
    grid = em.ImageGrid.from_fov((ny, nx), 50.0)
    model = em.GMRFImage(grid, sigma=sigma, rho=rho, mean=mu, params=zeta)
    img, g_zeta, g_sigma, g_rho = noncentred_reference(zeta, mu, sigma, rho, w)
    np.testing.assert_allclose(model(), img, rtol=1e-12)
    g = eqx.filter_jit(jax.grad(lambda m: jnp.sum(w * m())))(model)
    np.testing.assert_allclose(g.params, g_zeta, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g.sigma, g_sigma, rtol=1e-12)
    np.testing.assert_allclose(g.rho, g_rho, rtol=1e-12)
    # Its prior: white noise, independent of σ and ρ.
    prior = em.GMRFHyperPrior()
    value, gp = eqx.filter_jit(jax.value_and_grad(prior.log_density))(model)
    ref = -0.5 * np.sum(zeta**2) - 0.5 * ny * nx * LOG2PI
    np.testing.assert_allclose(value, ref, rtol=1e-12)
    np.testing.assert_allclose(gp.params, -zeta, rtol=1e-12)
    assert float(gp.sigma) == 0.0 and float(gp.rho) == 0.0


@pytest.mark.parametrize("ny,nx", [(4, 4), (3, 5)])
def test_noncentred_map_has_the_centred_covariance_and_sigma_is_the_marginal_std(
    ny, nx
):
    """x − μ = M ζ with ζ ~ N(0, I): Cov x = M Mᵀ must be Q⁻¹ (the two
    parametrisations give one distribution), and mean(diag Q⁻¹) = σ²."""
    sigma, rho = 0.8, 2.5
    grid = em.ImageGrid.from_fov((ny, nx), 50.0)
    n = ny * nx

    def log_image(zeta):
        m = em.GMRFImage(grid, sigma=sigma, rho=rho, params=zeta.reshape(ny, nx))
        return m.log_image().reshape(-1)

    mmat = np.asarray(jax.jacfwd(log_image)(jnp.zeros(n)))  # linear in ζ
    _, a, _, _, tau = hyper(sigma, rho, ny, nx)
    cov = np.linalg.inv(tau * a)
    np.testing.assert_allclose(mmat @ mmat.T, cov, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.mean(np.diag(cov)), sigma**2, rtol=1e-12)
    tau_m, kappa_m = em.GMRFImage(grid, sigma=sigma, rho=rho).tau_kappa()
    np.testing.assert_allclose([tau_m, kappa_m], [tau, 1 / rho], rtol=1e-12)


def test_gradients_match_finite_differences():
    ny, nx = 3, 4
    x, mu, sigma, rho = rand_case(ny, nx, 3)
    grid = em.ImageGrid.from_fov((ny, nx), 50.0)
    prior = em.GMRFHyperPrior()
    w = np.random.default_rng(9).uniform(-1, 1, (ny, nx))
    for centred in (True, False):
        model = em.GMRFImage(
            grid, sigma=sigma, rho=rho, mean=mu, params=x, centred=centred
        )

        @eqx.filter_jit
        def f(m):
            return prior.log_density(m) + jnp.sum(w * m())

        g = eqx.filter_jit(jax.grad(f))(model)
        h = 1e-6
        for name in ("sigma", "rho"):
            up = eqx.tree_at(
                lambda m: getattr(m, name), model, getattr(model, name) + h
            )
            dn = eqx.tree_at(
                lambda m: getattr(m, name), model, getattr(model, name) - h
            )
            fd = (f(up) - f(dn)) / (2 * h)
            np.testing.assert_allclose(getattr(g, name), fd, rtol=1e-6)
        e = np.zeros((ny, nx))
        e[1, 2] = h
        up = eqx.tree_at(lambda m: m.params, model, model.params + e)
        dn = eqx.tree_at(lambda m: m.params, model, model.params - e)
        np.testing.assert_allclose(g.params[1, 2], (f(up) - f(dn)) / (2 * h), rtol=1e-6)


DATA = {}  # seed -> (u, v, vis, sigma) of `hyper_posterior`'s data


def hyper_posterior(centred, seed=0):
    """A 3×3 log image seen at 6 visibilities, GMRF with log-normal hyperpriors."""
    ny = nx = 3
    rng = np.random.default_rng(seed)
    grid = em.ImageGrid.from_fov((ny, nx), 60.0)
    u = rng.uniform(-0.3, 0.3, 6) / grid.psize
    v = rng.uniform(-0.3, 0.3, 6) / grid.psize
    truth = np.exp(rng.normal(-2.0, 0.3, (ny, nx)))
    a = dft_matrix(ny, nx, grid.psize, u, v)
    sig = np.full(6, 0.02)
    vis = a @ truth.ravel() + sig * rng.normal(size=6)
    DATA[seed] = (u, v, vis, sig)
    term = em.VisChi2(em.DirectFT(grid, u, v), vis, sig)
    model = em.GMRFImage(grid, sigma=0.5, rho=1.5, mean=-2.0, centred=centred)

    def log_normal(x, m, s):
        return jnp.sum(
            -jnp.log(x * s * jnp.sqrt(2 * jnp.pi)) - (jnp.log(x) - m) ** 2 / (2 * s**2)
        )

    priors = [
        em.GMRFHyperPrior(),
        em.ParameterPrior(
            lambda m: m.sigma,
            lambda s: log_normal(s, np.log(0.5), 0.5),
            support="positive",
        ),
        em.ParameterPrior(
            lambda m: m.rho,
            lambda r: log_normal(r, np.log(1.5), 0.5),
            support="positive",
        ),
    ]
    return em.Posterior(term, priors, model), log_normal


@pytest.mark.parametrize("centred", [True, False])
def test_posterior_unconstrained_density_with_hyperpriors(centred):
    post, log_normal = hyper_posterior(centred)
    model = eqx.tree_at(
        lambda m: (m.params, m.sigma, m.rho),
        post.model,
        (post.model.params + 0.1, jnp.asarray(0.7), jnp.asarray(2.2)),
    )
    z = post.to_unconstrained(model)
    # ravel_pytree order is the fields': params (9), sigma, rho; σ, ρ as logs.
    np.testing.assert_allclose(z[:9], np.ravel(model.params), rtol=1e-14)
    np.testing.assert_allclose(z[9:], np.log([0.7, 2.2]), rtol=1e-14)
    back = post.from_unconstrained(z)
    np.testing.assert_allclose(back.sigma, 0.7, rtol=1e-14)
    np.testing.assert_allclose(back.rho, 2.2, rtol=1e-14)
    # numpy: the image, the Gaussian log-likelihood of its visibilities, the
    # pixels' prior, the two log-normal hyperpriors and the log-Jacobian.
    params, mu = np.asarray(model.params), np.full((3, 3), -2.0)
    if centred:
        image = np.exp(params)
        log_prior = centred_reference(params, mu, 0.7, 2.2)[0]
    else:
        image = noncentred_reference(params, mu, 0.7, 2.2, np.ones((3, 3)))[0]
        log_prior = -0.5 * np.sum(params**2) - 4.5 * LOG2PI
    grid, (u, v, vis, sig) = post.model.grid, DATA[0]
    r = dft_matrix(3, 3, grid.psize, u, v) @ image.ravel() - vis
    loglik = -0.5 * np.sum(np.abs(r) ** 2 / sig**2) - 2 * np.sum(np.log(sig))
    loglik -= vis.size * LOG2PI
    expected = (
        loglik
        + log_prior
        + float(log_normal(0.7, np.log(0.5), 0.5))
        + float(log_normal(2.2, np.log(1.5), 0.5))
        + np.log(0.7)
        + np.log(2.2)  # the log-Jacobian of σ = e^{z_σ}, ρ = e^{z_ρ}
    )
    # jit and vmap of the unconstrained density and its gradient.
    # (one compiled program gives the value and the gradient: `ld` is its value)
    value_and_grad = jax.jit(
        jax.value_and_grad(lambda z: post.log_density_unconstrained(z))
    )

    def ld(z):
        return value_and_grad(z)[0]

    np.testing.assert_allclose(ld(z), expected, rtol=1e-12)
    val, grad = value_and_grad(z)
    np.testing.assert_allclose(val, expected, rtol=1e-12)
    zs = jnp.stack([z, z + 0.01, z - 0.02])
    vals = jax.jit(jax.vmap(lambda z: post.log_density_unconstrained(z)))(zs)
    for k in range(3):
        np.testing.assert_allclose(vals[k], ld(zs[k]), rtol=1e-12)
    # The gradient against central differences in the two hyper-coordinates.
    h = 1e-6
    for k in (z.size - 2, z.size - 1):
        e = jnp.zeros_like(z).at[k].set(h)
        np.testing.assert_allclose(
            grad[k], (ld(z + e) - ld(z - e)) / (2 * h), rtol=1e-6
        )


def test_prior_under_jit_and_vmap():
    grid = em.ImageGrid.from_fov((4, 3), 50.0)
    prior = em.GMRFHyperPrior()
    model = em.GMRFImage(
        grid, sigma=1.0, rho=2.0, params=np.ones((4, 3)) * 0.3, centred=True
    )
    sigmas = jnp.array([0.5, 1.0, 2.0])
    stacked = jax.vmap(lambda s: eqx.tree_at(lambda m: m.sigma, model, s))(sigmas)
    vals = eqx.filter_vmap(prior.log_density)(stacked)
    jitted = eqx.filter_jit(prior.log_density)
    for k, s in enumerate(sigmas):
        m = eqx.tree_at(lambda m: m.sigma, model, s)
        ref = centred_reference(np.full((4, 3), 0.3), np.zeros((4, 3)), float(s), 2.0)[
            0
        ]
        np.testing.assert_allclose(vals[k], ref, rtol=1e-12)
        np.testing.assert_allclose(jitted(m), ref, rtol=1e-12)
    images = eqx.filter_vmap(lambda m: m())(
        jax.vmap(
            lambda s: eqx.tree_at(
                lambda m: m.sigma,
                em.GMRFImage(grid, sigma=1.0, rho=2.0, params=np.ones((4, 3))),
                s,
            )
        )(sigmas)
    )
    assert images.shape == (3, 4, 3) and np.all(np.isfinite(images))


@pytest.mark.slow  # blackjax's warm-up and NUTS compile: ~10 s on a loaded CPU
@pytest.mark.parametrize("centred", [False, True])
def test_sample_runs_with_sampled_hyperparameters(centred):
    pytest.importorskip("blackjax")
    post, _ = hyper_posterior(centred)
    t0 = time.perf_counter()
    res = em.sample(
        post, key=jax.random.key(1), num_warmup=40, num_samples=20, num_chains=2
    )
    elapsed = time.perf_counter() - t0
    print(f"sample (centred={centred}): {elapsed:.2f}s")
    assert res.draws.params.shape == (2, 20, 3, 3)
    assert res.draws.sigma.shape == res.draws.rho.shape == (2, 20)
    sig, rho = np.asarray(res.draws.sigma), np.asarray(res.draws.rho)
    assert np.all(sig > 0) and np.all(rho > 0) and np.all(np.isfinite(res.log_density))
    # The chains move in the hyperparameters (not stuck at the start).
    assert np.std(np.log(sig)) > 1e-3 and np.std(np.log(rho)) > 1e-3
    # The recorded log densities are the posterior's at the draws.
    lp = jax.vmap(post.log_density_unconstrained)(res.positions[0, :3])
    np.testing.assert_allclose(res.log_density[0, :3], lp, rtol=1e-10)


def test_construction_errors():
    grid = em.ImageGrid.from_fov((3, 4), 50.0)
    with pytest.raises(TypeError, match="grid"):  # ours, or the type checker's
        em.GMRFImage((3, 4), sigma=1.0, rho=1.0)
    with pytest.raises(ValueError, match="`sigma` must be finite and > 0"):
        em.GMRFImage(grid, sigma=0.0, rho=1.0)
    with pytest.raises(ValueError, match="`rho` must be finite and > 0"):
        em.GMRFImage(grid, sigma=1.0, rho=np.nan)
    with pytest.raises(ValueError, match="`rho` must be a scalar"):
        em.GMRFImage(grid, sigma=1.0, rho=np.ones(2))
    with pytest.raises(ValueError, match="`mean` has shape"):
        em.GMRFImage(grid, sigma=1.0, rho=1.0, mean=np.zeros((4, 3)))
    with pytest.raises(ValueError, match="`mean` has .*non-finite"):
        em.GMRFImage(grid, sigma=1.0, rho=1.0, mean=np.full((3, 4), -np.inf))
    with pytest.raises(TypeError, match="`mean` must be concrete"):
        jax.jit(lambda mu: em.GMRFImage(grid, sigma=1.0, rho=1.0, mean=mu).params)(
            jnp.zeros((3, 4))
        )
    with pytest.raises(ValueError, match="`params` has shape"):
        em.GMRFImage(grid, sigma=1.0, rho=1.0, params=np.zeros(12))
    with pytest.raises(TypeError, match="centred"):
        em.GMRFImage(grid, sigma=1.0, rho=1.0, centred="yes")
    with pytest.raises(TypeError, match="where"):
        em.GMRFHyperPrior("image")


def test_posterior_errors_for_joint_priors():
    post, _ = hyper_posterior(True)
    term, model = post.likelihood[0], post.model
    pixel = em.PixelImage(model.grid, np.zeros((3, 3)))
    with pytest.raises(TypeError, match="not a GMRFImage"):
        em.Posterior(term, [em.GMRFHyperPrior(lambda m: m.params)], model)
    with pytest.raises(TypeError, match="not a GMRFImage"):
        em.GMRFHyperPrior().log_density(pixel)
    fresh = em.GMRFHyperPrior(
        lambda m: eqx.tree_at(lambda g: g.sigma, m, jnp.asarray(1.0))
    )
    with pytest.raises(ValueError, match="not a parameter leaf"):
        em.Posterior(term, [fresh], model)
    joint = em.ParameterPrior(
        lambda m: (m.sigma, m.rho), lambda sr: -sr[0] - sr[1], support="positive"
    )
    with pytest.raises(ValueError, match="selects 2 leaves"):
        em.Posterior(term, [joint], model)
    # A joint prior on a tuple of leaves is accepted.
    ok = em.ParameterPrior(lambda m: (m.sigma, m.rho), lambda sr: -sr[0] * sr[1])
    p = em.Posterior(term, [ok], model)
    np.testing.assert_allclose(p.log_prior(model), -0.5 * 1.5, rtol=1e-14)


@pytest.mark.slow  # NUTS: 4000 draws and blackjax's compile
def test_nuts_with_uninformative_data_recovers_the_hierarchical_prior():
    """Non-centred, the data uninformative (σ_vis = 1e6): the draws of (σ, ρ) follow
    their log-normal hyperpriors, and the log image's pixel-averaged squared
    deviation from μ has the mean E[σ²] = exp(2m + 2s²) (σ² being its
    conditional mean exactly)."""
    pytest.importorskip("blackjax")
    grid = em.ImageGrid.from_fov((3, 3), 60.0)
    term = em.VisChi2(
        em.DirectFT(grid, np.zeros(1), np.zeros(1)),
        np.array([1.0 + 0j]),
        np.array([1e6]),
    )
    m_s, m_r, s = np.log(0.5), np.log(2.0), 0.4

    def log_normal(x, m):
        return jnp.sum(
            -jnp.log(x * s * jnp.sqrt(2 * jnp.pi)) - (jnp.log(x) - m) ** 2 / (2 * s**2)
        )

    priors = [
        em.GMRFHyperPrior(),
        em.ParameterPrior(
            lambda m: m.sigma, lambda x: log_normal(x, m_s), support="positive"
        ),
        em.ParameterPrior(
            lambda m: m.rho, lambda x: log_normal(x, m_r), support="positive"
        ),
    ]
    model = em.GMRFImage(grid, sigma=0.5, rho=2.0, mean=-3.0)
    post = em.Posterior(term, priors, model)
    res = em.sample(
        post, key=jax.random.key(7), num_warmup=300, num_samples=1000, num_chains=4
    )
    logs = np.log(np.stack([res.draws.sigma, res.draws.rho], axis=-1))  # (4, 1000, 2)
    x = np.asarray(eqx.filter_vmap(eqx.filter_vmap(lambda m: m.log_image()))(res.draws))
    dev2 = np.mean((x + 3.0) ** 2, axis=(2, 3))[..., None]  # (4, 1000, 1)
    stats = np.concatenate([logs, dev2], axis=-1)
    flat = stats.reshape(-1, 3)
    want = np.array([m_s, m_r, np.exp(2 * m_s + 2 * s**2)])
    z = (flat.mean(axis=0) - want) / batch_means_se(stats)
    sd_rel = flat[:, :2].std(axis=0, ddof=1) / s - 1
    print(
        f"z (ln σ, ln ρ, mean dev²) {np.round(z, 2)}; sd rel. error {np.round(sd_rel, 3)}"
    )
    assert np.abs(z).max() < 4.5
    assert np.abs(sd_rel).max() < 0.15
    assert int(res.divergences.sum()) == 0
