"""`sample(method="meanfield" | "pathfinder")`: variational inference on the
linear-Gaussian problem of tests/test_posterior.py, whose posterior is known in
closed form (mean `m`, precision `P`, evidence `Z`), against numpy written from
the formulas:

- mean-field Gaussian VI's optimum on a Gaussian target is known: the exact mean
  and the variances `1/P_ii` (the KL(q‖p)-optimal factorised Gaussian), with
  `ELBO* = ln Z − ½(Σ ln P_ii − ln det P)`;
- any Gaussian `q = N(μ, diag s²)` has `ELBO(q) = ln Z − n/2 ln 2π + ½ ln det P
  − ½[(μ−m)ᵀP(μ−m) + Σ P_ii s_i²] + Σ ln s_i + n/2 (1 + ln 2π)`;
- Pathfinder's Gaussian is exact where the L-BFGS inverse Hessian is (an
  isotropic unit-variance target), and an approximation otherwise.

The runs compile blackjax's optimisers (20-60 s on a loaded 2-core machine):
slow; the argument errors (refused before anything compiles) are core."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em

from .test_posterior import NX, NY, Problem
from .unchecked import unchecked_error


pytest.importorskip("blackjax")

N = NY * NX


def log_evidence(problem):
    """`ln Z = ln N(y; A μ_prior, W⁻¹ + A Q⁻¹ Aᵀ)` (real and imaginary parts
    stacked), the normalising constant of `ln L + ln π`."""
    ar, y, w = problem.real_design()
    _, _, prec = problem.exact()
    q = prec - ar.T @ (w[:, None] * ar)  # the prior precision
    c = np.diag(1 / w) + ar @ np.linalg.solve(q, ar.T)
    r = y - ar @ np.ravel(problem.mu)
    sign, logdet = np.linalg.slogdet(c)
    assert sign > 0
    return -0.5 * (r @ np.linalg.solve(c, r) + logdet + y.size * np.log(2 * np.pi))


def elbo_of_diagonal_gaussian(mu, s, mean, prec, log_z):
    """The exact ELBO of `q = N(mu, diag s²)` against the posterior
    `ln Z + ln N(z; mean, prec⁻¹)`."""
    n = mean.size
    d = mu - mean
    e_logp = (
        log_z
        - 0.5 * n * np.log(2 * np.pi)
        + 0.5 * np.linalg.slogdet(prec)[1]
        - 0.5 * (d @ prec @ d + np.sum(np.diag(prec) * s**2))
    )
    entropy = np.sum(np.log(s)) + 0.5 * n * (1 + np.log(2 * np.pi))
    return e_logp + entropy


def normal_logpdf(x, mu, s):
    return np.sum(-0.5 * ((x - mu) / s) ** 2 - np.log(s) - 0.5 * np.log(2 * np.pi), -1)


def isotropic_target():
    """`(m, posterior)`: an isotropic unit-variance Gaussian `N(m, I)` (a prior
    alone, the data uninformative), on which every point of an L-BFGS path gives
    the target itself (its inverse Hessian is the identity from the start)."""
    problem = Problem()
    m = np.linspace(-1.0, 1.0, N)

    def log_prob(x):
        return jnp.sum(-0.5 * (jnp.ravel(x) - m) ** 2 - 0.5 * jnp.log(2 * jnp.pi))

    prior = em.ParameterPrior(lambda mod: mod.params, log_prob)
    wide = em.VisChi2(
        problem.term.forward, problem.vis, np.full(problem.vis.shape, 1e9)
    )
    return m, em.Posterior(wide, [prior], problem.model)


def mesh_of(n):
    return jax.sharding.Mesh(np.array(jax.devices()[:n]), ("chains",))


# --- the arguments, refused at the call --------------------------------------------


def test_vi_argument_errors():
    problem = Problem()
    post = problem.posterior
    key = jax.random.key(0)
    for method in ("meanfield", "pathfinder"):
        with pytest.raises(ValueError, match="`num_steps` must be an int ≥ 1"):
            em.sample(post, key=key, method=method, num_steps=0)
        with pytest.raises(ValueError, match="`num_mc` must be an int ≥ 1"):
            em.sample(post, key=key, method=method, num_mc=0)
        with pytest.raises(ValueError, match="`num_samples` must be an int ≥ 1"):
            em.sample(post, key=key, method=method, num_samples=0)
        with pytest.raises(ValueError, match="`num_chains` must be an int ≥ 1"):
            em.sample(post, key=key, method=method, num_chains=0)
        with pytest.raises(ValueError, match="`jitter` must be finite"):
            em.sample(post, key=key, method=method, jitter=np.inf)
        with pytest.raises(ValueError, match="`num_warmup` is the samplers'"):
            em.sample(post, key=key, method=method, num_warmup=100)
        with pytest.raises(
            ValueError, match="`target_acceptance_rate` is the samplers'"
        ):
            em.sample(post, key=key, method=method, target_acceptance_rate=0.9)
        with pytest.raises(ValueError, match="no axis named 'rows'"):
            em.sample(post, key=key, method=method, mesh=mesh_of(2), axis_name="rows")
        with pytest.raises(ValueError, match="must be a multiple of the mesh axis"):
            em.sample(post, key=key, method=method, mesh=mesh_of(2), num_chains=3)
        with pytest.raises(ValueError, match="`checkpoint` is the samplers'"):
            em.sample(post, key=key, method=method, checkpoint="run")
        with pytest.raises(ValueError, match="`progress` is the samplers'"):
            em.sample(post, key=key, method=method, progress=True)
        with pytest.raises(
            ValueError, match="`num_integration_steps` is the samplers'"
        ):
            em.sample(post, key=key, method=method, num_integration_steps=5)
        with pytest.raises(TypeError, match="posterior"):
            em.sample(problem.term, key=key, method=method)
    for lr in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="`learning_rate` must be a finite"):
            em.sample(post, key=key, method="meanfield", learning_rate=lr)
    with pytest.raises(ValueError, match="`history_size` must be an int ≥ 1"):
        em.sample(post, key=key, method="pathfinder", history_size=0)
    with pytest.raises(
        ValueError, match="`learning_rate` is an argument of method 'meanfield'"
    ):
        em.sample(post, key=key, method="pathfinder", learning_rate=0.1)
    with pytest.raises(
        ValueError, match="`history_size` is an argument of method 'pathfinder'"
    ):
        em.sample(post, key=key, method="meanfield", history_size=5)
    with pytest.raises(ValueError, match="not of method='nuts'"):
        em.sample(post, key=key, num_steps=100)
    with pytest.raises(ValueError, match="`method` must be one of"):
        em.sample(post, key=key, method="advi")
    # A start outside a prior's support (here: all pixels > 0.5).
    support = em.ParameterPrior(
        lambda m: m.params, lambda x: jnp.where(jnp.all(x > 0.5), 0.0, -jnp.inf)
    )
    outside = em.Posterior(problem.term, [support], problem.model)
    with pytest.raises(ValueError, match="log density at `init` is not finite"):
        em.sample(outside, key=key, method="meanfield")


_SETUP = (
    "import jax; jax.config.update('jax_enable_x64', True); "
    "g = em.ImageGrid.from_fov(2, 20.0); "
    "m = em.PixelImage(g, np.ones((2, 2)), transform='identity'); "
    "t = em.VisChi2(em.DirectFT(g, np.array([1e9]), np.array([1e9])), "
    "np.array([1.0 + 0j]), np.array([0.1])); "
    "pr = em.ParameterPrior(lambda m: m.params, lambda x: -0.5 * (x**2).sum()); "
    "post = em.Posterior(t, [pr], m)"
)
_NUM_MC_FLOAT = unchecked_error(
    "em.sample(post, key=jax.random.key(0), method='meanfield', num_mc=2.5)",
    "ValueError",
    setup=_SETUP,
)
_LR_STRING = unchecked_error(
    "em.sample(post, key=jax.random.key(0), method='meanfield', learning_rate='1')",
    "ValueError",
    setup=_SETUP,
)


def test_vi_argument_types_without_the_type_checker(unchecked):
    assert "`num_mc` must be an int ≥ 1, got 2.5" in unchecked[_NUM_MC_FLOAT]
    assert "`learning_rate` must be a finite float > 0" in unchecked[_LR_STRING]


def test_divergences_of_vi_draws_are_refused():
    z = jnp.zeros((2, 3, N))
    res = em.Samples(z, z, jnp.zeros((2, 3)), {"elbo": jnp.zeros((2, 5))})
    with pytest.raises(ValueError, match="from variational inference"):
        res.divergences


# --- mean-field VI -------------------------------------------------------------------


@pytest.mark.slow
def test_meanfield_recovers_the_exact_mean_and_the_meanfield_variances():
    """16 independent fits (chains): their average fitted mean and log scale
    against the known optimum, as t-scores with the spread over the chains as
    the error (the fits' stochastic-optimisation noise), and each chain's
    draws, log densities and ELBO against numpy."""
    problem = Problem()
    mean, cov, prec = problem.exact()
    log_z = log_evidence(problem)
    chains, draws = 16, 500
    res = em.sample(
        problem.posterior,
        key=jax.random.key(0),
        method="meanfield",
        num_chains=chains,
        num_samples=draws,
    )
    st = {k: np.asarray(v) for k, v in res.stats.items()}
    assert st["elbo"].shape == (chains, 2000)
    assert st["mean"].shape == st["scale"].shape == (chains, N)
    assert st["log_q"].shape == (chains, draws)
    x = np.asarray(res.positions)
    assert x.shape == (chains, draws, N)
    np.testing.assert_array_equal(np.asarray(res.draws.params).reshape(x.shape), x)
    # The optimum: the exact mean and the mean-field scales 1/sqrt(P_ii).
    mf_scale = 1 / np.sqrt(np.diag(prec))
    se = st["mean"].std(axis=0, ddof=1) / np.sqrt(chains)
    t_mean = (st["mean"].mean(axis=0) - mean) / se
    log_s = np.log(st["scale"])
    t_scale = (log_s.mean(axis=0) - np.log(mf_scale)) / (
        log_s.std(axis=0, ddof=1) / np.sqrt(chains)
    )
    print(
        f"meanfield: fitted mean err max {np.abs(st['mean'] - mean).max() / mf_scale.min():.3f} "
        f"mean-field σ; t of the mean max {np.abs(t_mean).max():.2f} "
        f"(rms {np.sqrt(np.mean(t_mean**2)):.2f}); scale / (1/sqrt(P_ii)) in "
        f"[{(st['scale'] / mf_scale).min():.4f}, {(st['scale'] / mf_scale).max():.4f}]; "
        f"t of ln scale max {np.abs(t_scale).max():.2f} "
        f"(rms {np.sqrt(np.mean(t_scale**2)):.2f})"
    )
    # 16 t-scores with 15 degrees of freedom each: |t| > 5 has p ≈ 2e-4.
    assert np.abs(t_mean).max() < 5 and np.sqrt(np.mean(t_mean**2)) < 2
    assert np.abs(t_scale).max() < 5 and np.sqrt(np.mean(t_scale**2)) < 2
    # One fit's optimisation noise (the defaults: 2000 Adam steps of 10-draw
    # gradients) is small against the posterior's σ; its scales are within 3%.
    assert np.all(np.abs(st["mean"] - mean) < 0.25 * np.sqrt(np.diag(cov)))
    assert np.abs(st["scale"] / mf_scale - 1).max() < 0.03
    # ... which are not the posterior's marginal σ (mean-field underestimates).
    assert np.all(mf_scale < 0.9 * np.sqrt(np.diag(cov)))
    # The draws: each chain's Gaussian (z of its sample mean, its variances).
    z = (x.mean(axis=1) - st["mean"]) / (st["scale"] / np.sqrt(draws))
    assert np.abs(z).max() < 4.5
    rel_var = x.var(axis=1, ddof=1) / st["scale"] ** 2 - 1
    assert np.abs(rel_var).max() < 4.5 * np.sqrt(2 / (draws - 1))
    # Their recorded densities: the posterior's and the fitted q's (numpy).
    lp = jax.vmap(problem.posterior.log_density_unconstrained)(res.positions[0, :5])
    np.testing.assert_allclose(res.log_density[0, :5], lp, rtol=1e-12)
    np.testing.assert_allclose(
        st["log_q"],
        normal_logpdf(x, st["mean"][:, None], st["scale"][:, None]),
        rtol=1e-12,
    )
    # The ELBO: of each fitted q, exactly, against its Monte-Carlo estimate from
    # the draws; never above ln Z, at the optimum ln Z − ½(Σ ln P_ii − ln det P).
    exact = np.array(
        [
            elbo_of_diagonal_gaussian(m, s, mean, prec, log_z)
            for m, s in zip(st["mean"], st["scale"])
        ]
    )
    optimum = log_z - 0.5 * (np.sum(np.log(np.diag(prec))) - np.linalg.slogdet(prec)[1])
    assert np.all(exact <= optimum + 1e-12) and optimum < log_z
    ratio = np.asarray(res.log_density) - st["log_q"]
    z_elbo = (ratio.mean(axis=1) - exact) / (ratio.std(axis=1) / np.sqrt(draws))
    assert np.abs(z_elbo).max() < 4.5
    assert np.all(optimum - exact < 0.05)  # within 0.05 nats of the optimum
    # The last tenth of the ELBO trace (10-draw estimates) averages to it.
    tail = st["elbo"][:, -200:]
    z_tail = (tail.mean() - exact.mean()) / (tail.std() / np.sqrt(tail.size))
    print(f"ELBO optimum {optimum:.4f}, ln Z {log_z:.4f}; tail z {z_tail:.2f}")
    assert abs(z_tail) < 4.5


@pytest.mark.slow
def test_meanfield_with_a_schedule_and_a_positive_leaf():
    """An optax schedule as the learning rate; a positive leaf sampled as `ln θ`:
    the draws are `θ = exp(z)`, all positive. A log-normal prior alone (the data
    made uninformative) is a Gaussian in `z`: the fit is its mean and σ."""
    import optax

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
        post,
        key=jax.random.key(1),
        method="meanfield",
        learning_rate=optax.cosine_decay_schedule(0.05, 1500),
        num_steps=1500,
        num_chains=2,
        num_samples=200,
    )
    x = np.asarray(res.draws.params)
    assert np.all(x > 0)
    np.testing.assert_allclose(np.exp(res.positions), x.reshape(2, 200, N), rtol=1e-12)
    # z = ln θ has density N(m, s²) (the Jacobian cancels the log-normal's 1/θ).
    np.testing.assert_allclose(res.stats["mean"], m, atol=0.05 * s)
    np.testing.assert_allclose(res.stats["scale"], s, rtol=0.05)


# --- Pathfinder ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("devices", [None, 2], ids=["one-device", "mesh"])
def test_pathfinder_is_exact_where_its_inverse_hessian_is(devices):
    """An isotropic unit-variance Gaussian target `N(m, I)` (a prior alone, the
    data uninformative): L-BFGS's inverse Hessian is the identity from the first
    point of the path, so every approximation on it is the target itself: mean
    `m` (the Newton step `θ + H ∇ln p` from any point) and scale 1. Also with the
    chains on a 2-device mesh (`shard_map` over the chains axis; a path is not
    compared step by step with the one-device run's there: the line search's
    branch decisions follow rounding, which differs between the two
    compilations, so paths can part after a step or two, both valid)."""
    m, post = isotropic_target()
    mesh = None if devices is None else mesh_of(devices)
    res = em.sample(
        post,
        key=jax.random.key(2),
        method="pathfinder",
        num_chains=2,
        num_samples=300,
        jitter=1.0,
        mesh=mesh,
    )
    if mesh is not None:
        shards = {s.device for s in res.positions.addressable_shards}
        assert shards == set(mesh.devices.flat)
    st = {k: np.asarray(v) for k, v in res.stats.items()}
    np.testing.assert_allclose(st["mean"], np.broadcast_to(m, (2, N)), atol=1e-6)
    np.testing.assert_allclose(st["scale"], 1.0, atol=1e-6)
    x = np.asarray(res.positions)
    z = (x.mean(axis=1) - m) * np.sqrt(300)
    assert np.abs(z).max() < 4.5
    # q is the target: ln p − ln q is ln Z at every draw (here the uninformative
    # data term's normalisation; its χ² vanishes), and so is the ELBO.
    ratio = np.asarray(res.log_density) - st["log_q"]
    np.testing.assert_allclose(ratio, ratio[0, 0], atol=1e-6)
    np.testing.assert_allclose(st["elbo"], ratio[0, 0], atol=1e-6)


@pytest.mark.slow
def test_pathfinder_on_the_linear_gaussian_problem():
    """The correlated 16-pixel posterior: Pathfinder's Gaussian is L-BFGS's
    low-rank-plus-diagonal inverse Hessian at the best point of the path (an
    approximation: its scales are not the posterior's). Its draws follow the
    Gaussian it reports (numpy), its ELBO is below ln Z, and its mean is near
    the exact one (within 0.15 of the posterior's σ)."""
    problem = Problem()
    mean, cov, prec = problem.exact()
    log_z = log_evidence(problem)
    chains, draws = 4, 1000
    res = em.sample(
        problem.posterior,
        key=jax.random.key(0),
        method="pathfinder",
        num_chains=chains,
        num_samples=draws,
    )
    st = {k: np.asarray(v) for k, v in res.stats.items()}
    assert st["elbo_path"].shape == (chains, 101)
    assert st["mean"].shape == st["scale"].shape == (chains, N)
    n_it, best = st["num_iterations"], st["best_iteration"]
    assert np.all((1 <= n_it) & (n_it < 100)) and np.all(best <= n_it)
    assert np.all(np.isinf(st["elbo_path"][np.arange(101) > n_it[:, None]]))
    np.testing.assert_array_equal(st["elbo"], st["elbo_path"].max(axis=1))
    sd = np.sqrt(np.diag(cov))
    err = np.abs(st["mean"] - mean) / sd
    print(
        f"pathfinder: iterations {n_it}, best {best}; mean err max per chain "
        f"{err.max(axis=1).round(3)} σ; scale/σ in "
        f"[{(st['scale'] / sd).min():.3f}, {(st['scale'] / sd).max():.3f}]; "
        f"ELBO {st['elbo'].round(3)} (ln Z {log_z:.3f})"
    )
    assert err.max() < 0.15
    x = np.asarray(res.positions)
    z = (x.mean(axis=1) - st["mean"]) / (st["scale"] / np.sqrt(draws))
    assert np.abs(z).max() < 4.5
    rel_var = x.var(axis=1, ddof=1) / st["scale"] ** 2 - 1
    assert np.abs(rel_var).max() < 4.5 * np.sqrt(2 / (draws - 1))
    lp = jax.vmap(problem.posterior.log_density_unconstrained)(res.positions[:, 0])
    np.testing.assert_allclose(res.log_density[:, 0], lp, rtol=1e-12)
    ratio = np.asarray(res.log_density) - st["log_q"]
    upper = ratio.mean(axis=1) - 4.5 * ratio.std(axis=1) / np.sqrt(draws)
    assert np.all(upper < log_z)


@pytest.mark.slow
def test_meanfield_chains_over_a_mesh_equal_one_device():
    """With `mesh=`, each of 4 virtual devices fits its own chains (`shard_map`
    over the chains axis): the draws, log densities and statistics equal the
    one-device run's to rounding, and the draws live on the mesh."""
    problem = Problem()
    kw = dict(key=jax.random.key(3), method="meanfield", num_chains=4)
    kw |= dict(num_samples=20, num_steps=50)
    plain = em.sample(problem.posterior, **kw)
    mesh = mesh_of(4)
    spread = em.sample(problem.posterior, mesh=mesh, **kw)
    np.testing.assert_allclose(spread.positions, plain.positions, rtol=1e-10)
    np.testing.assert_allclose(spread.log_density, plain.log_density, rtol=1e-10)
    for k in plain.stats:
        np.testing.assert_allclose(spread.stats[k], plain.stats[k], rtol=1e-10)
    devices = {s.device for s in spread.positions.addressable_shards}
    assert devices == set(mesh.devices.flat)
