"""Draws from the built-in priors (what `evidence` starts nested sampling from):
`GMRFPrior.sample` has covariance `Q⁻¹` (exactly, through the DCT eigenbasis, and
in Monte Carlo), `DirichletPrior.sample` gives Dirichlet(α) fractions,
`ParameterPrior(sampler=)`; errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.unchecked import unchecked_error


GRID = em.ImageGrid(3, 4, em.uas_to_rad(5.0))


def _precision(ny, nx, tau, kappa):
    """`Q = τ (κ² I + Δ)`, Δ the 4-neighbour graph Laplacian (free boundaries)."""
    n = ny * nx
    lap = np.zeros((n, n))
    for i in range(ny):
        for j in range(nx):
            for di, dj in ((0, 1), (1, 0)):
                a, b = i + di, j + dj
                if a < ny and b < nx:
                    p, q = i * nx + j, a * nx + b
                    lap[p, p] += 1
                    lap[q, q] += 1
                    lap[p, q] -= 1
                    lap[q, p] -= 1
    return tau * (kappa**2 * np.eye(n) + lap)


def _dct(n):
    k, i = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    c = np.sqrt(2.0 / n) * np.cos(np.pi * k * (i + 0.5) / n)
    c[0] /= np.sqrt(2.0)
    return c


def test_gmrf_draw_map_has_covariance_q_inverse_exactly():
    """The draw `μ + Cyᵀ (a ⊙ ζ) Cx` is linear in ζ: its matrix A (written here
    from the formula in numpy) satisfies `A Aᵀ = Q⁻¹` (1e-12)."""
    tau, kappa = 2.5, 0.7
    ny, nx = GRID.shape
    ly = 4 * np.sin(np.pi * np.arange(ny) / (2 * ny)) ** 2
    lx = 4 * np.sin(np.pi * np.arange(nx) / (2 * nx)) ** 2
    amp = 1 / np.sqrt(tau * (kappa**2 + ly[:, None] + lx[None, :]))
    a = np.kron(_dct(ny).T, _dct(nx).T) @ np.diag(amp.ravel())
    np.testing.assert_allclose(
        a @ a.T, np.linalg.inv(_precision(ny, nx, tau, kappa)), rtol=1e-12, atol=1e-14
    )


def test_gmrf_prior_draws_mean_and_covariance():
    tau, kappa = 2.5, 0.7
    mean = np.arange(12.0).reshape(3, 4) / 10
    prior = em.GMRFPrior(GRID, tau=tau, kappa=kappa, mean=mean)
    n = 40_000
    x = jax.jit(jax.vmap(prior.sample))(jax.random.split(jax.random.key(1), n))
    assert x.shape == (n, 3, 4)
    x = np.asarray(x).reshape(n, -1)
    cov = np.linalg.inv(_precision(3, 4, tau, kappa))
    sd = np.sqrt(np.diag(cov))
    z = (x.mean(0) - mean.ravel()) / (sd / np.sqrt(n))
    assert np.all(np.abs(z) < 4.5), z
    emp = np.cov(x, rowvar=False)
    # Each covariance's Monte-Carlo error is about sqrt((C_ii C_jj + C_ij²)/n).
    err = np.sqrt((np.outer(sd**2, sd**2) + cov**2) / n)
    assert np.all(np.abs(emp - cov) < 5 * err)
    # The draws are the prior's: their mean log density is E[ln p] of a Gaussian.
    lp = jax.vmap(prior.log_density)(jnp.asarray(x[:2000].reshape(-1, 3, 4)))
    want = -0.5 * 12 * (1 + np.log(2 * np.pi)) - 0.5 * np.linalg.slogdet(cov)[1]
    assert abs(float(jnp.mean(lp)) - want) < 5 * np.sqrt(12 / 2 / 2000)


def test_dirichlet_prior_draws_are_dirichlet():
    grid = em.ImageGrid(2, 2, em.uas_to_rad(5.0))
    alpha = np.array([[0.3, 1.0], [2.0, 3.5]])
    prior = em.DirichletPrior(grid, alpha)
    n = 40_000
    y = jax.jit(jax.vmap(prior.sample))(jax.random.split(jax.random.key(2), n))
    assert y.shape == (n, 3) and bool(jnp.all(jnp.isfinite(y)))
    s = np.asarray(jax.nn.softmax(jnp.concatenate([y, jnp.zeros((n, 1))], 1), axis=1))
    a = alpha.ravel()
    a0 = a.sum()
    mean, var = a / a0, a * (a0 - a) / (a0**2 * (a0 + 1))
    z = (s.mean(0) - mean) / np.sqrt(var / n)
    assert np.all(np.abs(z) < 4.5), z
    np.testing.assert_allclose(s.var(0), var, rtol=0.05)


SAMPLER_NOT_CALLABLE = unchecked_error(
    "em.ParameterPrior(lambda m: m.flux, lambda f: -0.5 * f**2, sampler=3.0)",
    "TypeError",
)


def test_parameter_prior_sampler_and_errors(unchecked):
    prior = em.ParameterPrior(
        lambda m: m.flux,
        lambda f: -0.5 * f**2,
        sampler=lambda k: jax.random.normal(k, ()),
    )
    draws = jax.vmap(prior.sample)(jax.random.split(jax.random.key(3), 5000))
    assert abs(float(draws.mean())) < 0.07 and abs(float(draws.std()) - 1) < 0.05
    bare = em.ParameterPrior(lambda m: m.flux, lambda f: -0.5 * f**2)
    with pytest.raises(NotImplementedError, match="without `sampler=`"):
        bare.sample(jax.random.key(0))
    assert "`sampler` must be a function" in unchecked[SAMPLER_NOT_CALLABLE]
