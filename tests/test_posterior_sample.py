"""`sample` (NUTS, blackjax) recovers a linear-Gaussian posterior's closed-form mean
and covariance within Monte-Carlo error."""

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em

from .test_posterior import NX, NY, Problem


pytest.importorskip("blackjax")


def batch_means_se(x, n_batches=20):
    """Monte-Carlo standard error of the mean of each column of `x`
    `(chains, draws, k)` by batch means (robust to autocorrelation)."""
    c, d, k = x.shape
    b = d // n_batches
    means = x[:, : b * n_batches].reshape(c, n_batches, b, k).mean(axis=2)
    means = means.reshape(-1, k)
    return means.std(axis=0, ddof=1) / np.sqrt(means.shape[0])


@pytest.mark.slow
def test_nuts_recovers_the_exact_linear_gaussian_posterior():
    problem = Problem()
    mean, cov, _ = problem.exact()
    t0 = time.perf_counter()
    res = em.sample(
        problem.posterior,
        key=jax.random.key(0),
        num_warmup=400,
        num_samples=1000,
        num_chains=4,
    )
    elapsed = time.perf_counter() - t0
    x = np.asarray(res.draws.params)  # (chains, samples, 16)
    assert x.shape == (4, 1000, NY * NX)
    np.testing.assert_array_equal(x, np.asarray(res.positions))  # no transform
    flat = x.reshape(-1, NY * NX)
    # The mean: z-scores against the batch-means standard error.
    z = (flat.mean(axis=0) - mean) / batch_means_se(x)
    # The variances: relative error, and the correlations.
    var = flat.var(axis=0, ddof=1)
    rel_var = var / np.diag(cov) - 1
    corr_hat = np.corrcoef(flat.T)
    corr = cov / np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
    print(
        f"NUTS {elapsed:.1f}s; max |z| of the mean {np.abs(z).max():.2f} "
        f"(rms {np.sqrt(np.mean(z**2)):.2f}); variance rel. error max "
        f"{np.abs(rel_var).max():.3f}; correlation max abs error "
        f"{np.abs(corr_hat - corr).max():.3f}; acceptance "
        f"{float(res.stats['acceptance_rate'].mean()):.2f}"
    )
    assert np.abs(z).max() < 4.5
    assert np.sqrt(np.mean(z**2)) < 2.0  # z's scatter like N(0, 1) (16 of them)
    assert np.abs(rel_var).max() < 0.2
    assert np.abs(corr_hat - corr).max() < 0.12
    assert int(res.divergences.sum()) == 0
    rhat, n_eff = res.rhat(), res.ess()
    print(f"R-hat max {rhat.max():.4f}; ESS min {n_eff.min():.0f} of 4000")
    assert rhat.shape == n_eff.shape == (NY * NX,)
    assert rhat.max() < 1.02 and n_eff.min() > 400
    assert 0.6 < float(res.stats["acceptance_rate"].mean()) < 0.98
    assert res.stats["step_size"].shape == (4,)
    assert res.stats["inverse_mass_matrix"].shape == (4, NY * NX)
    # The recorded log densities are the posterior's at the draws.
    lp = eqx.filter_vmap(problem.posterior.log_density_unconstrained)(
        res.positions[0, :5]
    )
    np.testing.assert_allclose(res.log_density[0, :5], lp, rtol=1e-12)


@pytest.mark.slow
def test_nuts_positive_parameter_through_log():
    """A positive leaf (`support="positive"`): the chain samples `ln θ`, the draws
    are `θ`, all positive, and the mean matches the Laplace-free reference: a
    log-normal prior alone (a data term that constrains nothing here is replaced
    by a very wide Gaussian) has mean `exp(m + s²/2)`."""
    problem = Problem()
    m, s = np.log(0.1), 0.3

    def log_prob(x):
        return jnp.sum(
            -jnp.log(x)
            - jnp.log(s * jnp.sqrt(2 * jnp.pi))
            - (jnp.log(x) - m) ** 2 / (2 * s**2)
        )

    prior = em.ParameterPrior(lambda mod: mod.params, log_prob, support="positive")
    wide = em.VisChi2(
        problem.term.forward, problem.vis, np.full(problem.vis.shape, 1e6)
    )
    post = em.Posterior(wide, [prior], problem.model)
    res = em.sample(
        post, key=jax.random.key(1), num_warmup=300, num_samples=600, num_chains=2
    )
    x = np.asarray(res.draws.params)
    assert np.all(x > 0)
    np.testing.assert_allclose(np.exp(res.positions), x, rtol=1e-12)
    se = batch_means_se(x)
    z = (x.reshape(-1, x.shape[-1]).mean(axis=0) - np.exp(m + s**2 / 2)) / se
    assert np.abs(z).max() < 4.5


def test_sample_errors():
    problem = Problem()
    post = problem.posterior
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="`method` must be one of"):
        em.sample(post, key=key, method="gibbs")
    with pytest.raises(ValueError, match="`num_samples` must be an int"):
        em.sample(post, key=key, num_samples=0)
    with pytest.raises(ValueError, match="`jitter` must be finite"):
        em.sample(post, key=key, jitter=-1.0)
    with pytest.raises(ValueError, match="`target_acceptance_rate`"):
        em.sample(post, key=key, target_acceptance_rate=1.0)
    with pytest.raises(TypeError, match="posterior"):
        em.sample(problem.term, key=key)
    with pytest.raises(ValueError, match="`chain_method` must be one of"):
        em.sample(post, key=key, chain_method="parallel")
    with pytest.raises(ValueError, match="cannot spread the chains over a `mesh`"):
        em.sample(
            post,
            key=key,
            num_chains=1,
            chain_method="sequential",
            mesh=jax.make_mesh((1,), ("chains",)),
        )
    with pytest.raises(TypeError, match="dense_mass"):  # (the type checker, or ours)
        em.sample(post, key=key, dense_mass="yes")
    with pytest.raises(ValueError, match="`dense_mass` is the samplers'"):
        em.sample(post, key=key, method="meanfield", dense_mass=True)
    with pytest.raises(ValueError, match="`chain_method` is the samplers'"):
        em.sample(post, key=key, method="pathfinder", chain_method="sequential")


@pytest.mark.slow
def test_chain_methods_give_the_same_draws():
    """`chain_method="sequential"` (`lax.map`) and `"vectorized"` (`vmap`) run
    the same arithmetic per chain: the same draws up to the rounding that NUTS
    steps amplify (as the mesh test below)."""
    problem = Problem()
    kw = dict(key=jax.random.key(5), num_warmup=40, num_samples=20, num_chains=3)
    seq = em.sample(problem.posterior, chain_method="sequential", **kw)
    vec = em.sample(problem.posterior, chain_method="vectorized", **kw)
    np.testing.assert_allclose(seq.positions, vec.positions, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(
        seq.stats["num_integration_steps"], vec.stats["num_integration_steps"]
    )
    np.testing.assert_allclose(
        seq.stats["step_size"], vec.stats["step_size"], rtol=1e-8
    )
    # The default on a CPU without a mesh is the sequential one.
    if jax.default_backend() == "cpu":
        default = em.sample(problem.posterior, **kw)
        np.testing.assert_array_equal(default.positions, seq.positions)


@pytest.mark.slow
def test_nuts_dense_mass_recovers_the_exact_posterior():
    """`dense_mass=True` on the linear-Gaussian posterior (correlated pixels): the
    draws' mean and covariance are the closed form's within Monte-Carlo error,
    and the adapted dense inverse mass matrix is the posterior covariance (the
    warm-up's estimate from a few hundred draws: it whitens the posterior)."""
    problem = Problem()
    mean, cov, _ = problem.exact()
    res = em.sample(
        problem.posterior,
        key=jax.random.key(2),
        num_warmup=500,
        num_samples=600,
        num_chains=2,
        dense_mass=True,
    )
    x = np.asarray(res.positions)
    flat = x.reshape(-1, NY * NX)
    z = (flat.mean(axis=0) - mean) / batch_means_se(x)
    assert np.abs(z).max() < 4.5
    assert np.abs(flat.var(axis=0, ddof=1) / np.diag(cov) - 1).max() < 0.25
    assert int(res.divergences.sum()) == 0
    imm = np.asarray(res.stats["inverse_mass_matrix"])
    assert imm.shape == (2, NY * NX, NY * NX)

    for m in imm:
        # The posterior seen through the adapted metric, `L⁻¹ Σ L⁻ᵀ` (`m = L Lᵀ`),
        # is nearly white: condition number ~4 here, where the posterior's own
        # (and a diagonal metric's) is 25.
        li = np.linalg.inv(np.linalg.cholesky(m))
        ev = np.linalg.eigvalsh(li @ cov @ li.T)
        assert ev.max() / ev.min() < 8
        np.testing.assert_allclose(np.diag(m), np.diag(cov), rtol=0.5)
    # so NUTS needs fewer leapfrog steps than with a diagonal one (14 here)
    assert float(np.mean(res.stats["num_integration_steps"])) < 10


@pytest.mark.slow
def test_chains_spread_over_a_mesh():
    """4 chains on a 4-device mesh: the draws live on the 4 devices (one chain
    each) and are the unsharded run's (same keys, same arithmetic per chain, up
    to rounding that 100 NUTS steps amplify: ~5e-9 measured)."""
    if jax.device_count() < 4:
        pytest.skip("needs 4 devices")
    problem = Problem()
    mesh = jax.make_mesh((4,), ("chains",))
    kw = dict(key=jax.random.key(3), num_warmup=60, num_samples=40, num_chains=4)
    spread = em.sample(problem.posterior, mesh=mesh, **kw)
    plain = em.sample(problem.posterior, **kw)
    assert len(spread.positions.sharding.device_set) == 4
    assert spread.positions.sharding.shard_shape(spread.positions.shape)[0] == 1
    np.testing.assert_allclose(spread.positions, plain.positions, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="must be a multiple of the mesh axis"):
        em.sample(problem.posterior, mesh=mesh, key=jax.random.key(0), num_chains=6)
    with pytest.raises(ValueError, match="no axis named"):
        em.sample(problem.posterior, mesh=mesh, axis_name="rows", key=jax.random.key(0))


MULTIHOST_SETTINGS = dict(num_warmup=60, num_samples=40, num_chains=4)
MULTIHOST_VI = dict(method="meanfield", num_samples=20, num_chains=4, num_steps=50)


@pytest.mark.slow
def test_chains_spread_over_two_processes(tmp_path):
    """Two `jax.distributed` processes (two virtual CPU devices each, gloo), one
    4-device mesh across them: each process runs two of the four chains, and the
    gathered draws are the single-process, unsharded run's (same keys; up to the
    rounding that NUTS amplifies, as on one host); so are mean-field VI's, fitted
    on the same mesh (to rounding)."""
    import pathlib

    from tests.helpers import run_two_processes

    worker = pathlib.Path(__file__).resolve().parent / "multihost" / "sample_worker.py"
    out = tmp_path / "result"
    run_two_processes(worker, out, timeout=300)
    got = [np.load(f"{out}.{pid}.npz") for pid in (0, 1)]
    assert got[0]["local"].tolist() == [0, 1] and got[1]["local"].tolist() == [2, 3]
    np.testing.assert_array_equal(got[0]["positions"], got[1]["positions"])
    plain = em.sample(Problem().posterior, key=jax.random.key(3), **MULTIHOST_SETTINGS)
    np.testing.assert_allclose(got[0]["positions"], plain.positions, rtol=0, atol=1e-6)
    # Mean-field VI over the same mesh: each process fits its devices' chains.
    np.testing.assert_array_equal(got[0]["vi_positions"], got[1]["vi_positions"])
    vi = em.sample(Problem().posterior, key=jax.random.key(3), **MULTIHOST_VI)
    np.testing.assert_allclose(got[0]["vi_positions"], vi.positions, rtol=1e-10)
