"""Variational inference for `sample`: mean-field Gaussian VI (blackjax's
`meanfield_vi` with Adam) and Pathfinder (blackjax's L-BFGS path and BFGS-sample),
in a `Posterior`'s flat unconstrained coordinates; mean-field's chains vmapped,
Pathfinder's fitted one after another."""

import inspect
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, PartitionSpec as P
from jaxtyping import PRNGKeyArray, PyTree

from ._placement import chain_starts
from ._posterior import Posterior
from ._requirements import check_posterior, import_blackjax


VI_METHODS = ("meanfield", "pathfinder")
# The VI-only arguments of `sample` and which method takes each.
VI_ARGS = {
    "num_steps": VI_METHODS,
    "learning_rate": ("meanfield",),
    "num_mc": VI_METHODS,
    "history_size": ("pathfinder",),
}
DEFAULTS = {
    "meanfield": {"num_steps": 2000, "learning_rate": 0.02, "num_mc": 10},
    "pathfinder": {"num_steps": 100, "num_mc": 100, "history_size": 10},
}
# NUTS's arguments of `sample`, refused (when changed from their defaults) by VI.
NUTS_ARGS = (
    "num_warmup",
    "target_acceptance_rate",
    "num_integration_steps",
    "dense_mass",
    "chain_method",
    "checkpoint",
    "checkpoint_every",
    "progress",
    "callback",
)
# The mean-field scale every coordinate starts at (blackjax's `rho = −2`).
INIT_LOG_SCALE = -2.0


def check_vi_args(method: str, given: dict, nuts_given: dict, sample: Callable) -> dict:
    """The VI arguments of `method` with its defaults filled in; refuses an
    argument of another method. `given`: the VI-only arguments as passed (None:
    not given); `nuts_given`: NUTS's arguments as passed, refused by VI where
    they differ from `sample`'s defaults."""
    if method not in VI_METHODS:
        extra = [k for k, v in given.items() if v is not None]
        if extra:
            raise ValueError(
                f"`{extra[0]}` is an argument of method "
                f"{' or '.join(repr(m) for m in VI_ARGS[extra[0]])}, not of "
                f"method={method!r}: leave it out."
            )
        return {}
    for k, v in given.items():
        if v is not None and method not in VI_ARGS[k]:
            raise ValueError(
                f"`{k}` is an argument of method "
                f"{' or '.join(repr(m) for m in VI_ARGS[k])}, not of "
                f"method={method!r}: leave it out."
            )
    params = inspect.signature(sample).parameters
    for k in NUTS_ARGS:
        v, d = nuts_given[k], params[k].default
        if not (v is d or (isinstance(v, int | float | str) and v == d)):
            raise ValueError(
                f"`{k}` is the samplers' (method='nuts' or 'hmc'); "
                f"method={method!r} has no warm-up, adaptation or "
                "checkpoints: leave it out (its optimisation length is "
                "`num_steps`)."
            )
    out = {
        k: (DEFAULTS[method][k] if given[k] is None else given[k])
        for k in DEFAULTS[method]
    }
    for k in ("num_steps", "num_mc", "history_size"):
        if method not in VI_ARGS[k]:
            continue
        v = out[k]
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise ValueError(f"`{k}` must be an int ≥ 1, got {v!r}.")
    if method == "meanfield":
        lr = out["learning_rate"]
        if not callable(lr) and not (
            isinstance(lr, int | float | np.floating)
            and not isinstance(lr, bool)
            and np.isfinite(lr)
            and lr > 0
        ):
            raise ValueError(
                "`learning_rate` must be a finite float > 0 (Adam's initial step, "
                "decayed to 0 over `num_steps`) or an optax schedule "
                f"(`step -> rate`), got {lr!r}."
            )
    return out


def sample_vi(
    posterior: Posterior,
    init: PyTree | None,
    *,
    key: PRNGKeyArray,
    method: str,
    num_samples: int,
    num_chains: int,
    jitter: float,
    options: dict,
    mesh: Mesh | None = None,
    axis_name: str = "chains",
):
    """`sample` for the VI methods: fit each chain's approximation from its start
    (`init` plus a uniform jitter, as NUTS's chains start) and draw `num_samples`
    from it; with a `mesh`, each device fits its own chains (`shard_map` over
    `axis_name`). **Returns:** `(positions, log_density, stats)`."""
    blackjax = import_blackjax("sample")
    check_posterior(posterior)
    for name, v in (("num_samples", num_samples), ("num_chains", num_chains)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise ValueError(f"`{name}` must be an int ≥ 1, got {v!r}.")
    if not (np.isfinite(jitter) and jitter >= 0):
        raise ValueError(f"`jitter` must be finite and ≥ 0, got {jitter!r}.")
    _, z0s, keys, _, mesh, axis_name = chain_starts(
        posterior, init, key, num_chains, jitter, mesh, axis_name
    )
    where = None if mesh is None else (mesh, axis_name)
    # blackjax's Gaussian samplers broadcast `(n,)` against `(draws, n)`: allowed
    # here whatever the caller's `jax_numpy_rank_promotion`.
    with jax.numpy_rank_promotion("allow"):
        return _run_vi(
            posterior, z0s, keys, blackjax, method, num_samples, options, where
        )


def _over_chains(batch, z0s, keys, where):
    """`batch(z0s, keys)` over every chain; with `where = (mesh, axis_name)`,
    each device runs its own chains (`shard_map`, the chains axis split)."""
    if where is None:
        return batch(z0s, keys)
    mesh, axis_name = where
    impl = jax.random.key_impl(keys)

    def local(z, key_data):
        return batch(z, jax.random.wrap_key_data(key_data, impl=impl))

    split = P(axis_name)
    return jax.shard_map(
        local, mesh=mesh, in_specs=(split, split), out_specs=split, check_vma=False
    )(z0s, jax.random.key_data(keys))


def _run_vi(posterior, z0s, keys, blackjax, method, num_samples, options, where):
    if method == "meanfield":
        lr = options["learning_rate"]
        return _meanfield(
            posterior,
            z0s,
            keys,
            blackjax,
            lr if callable(lr) else None,
            None if callable(lr) else jnp.asarray(lr, z0s.dtype),
            int(options["num_steps"]),
            int(options["num_mc"]),
            int(num_samples),
            where,
        )
    return _pathfinder(
        posterior,
        z0s,
        keys,
        blackjax,
        int(options["num_steps"]),
        int(options["num_mc"]),
        int(options["history_size"]),
        int(num_samples),
        where,
    )


@eqx.filter_jit
def _meanfield(
    posterior,
    z0s,
    keys,
    blackjax,
    schedule: Callable | None,
    lr0,
    num_steps: int,
    num_mc: int,
    num_samples: int,
    where,
):
    mfvi = blackjax.vi.meanfield_vi
    logdensity = posterior.log_density_unconstrained
    if schedule is None:
        schedule = optax.cosine_decay_schedule(lr0, num_steps)
    optimizer = optax.adam(schedule)
    algo = blackjax.meanfield_vi(logdensity, optimizer, num_samples=num_mc)

    def chain(z0, key):
        k_fit, k_draw = jax.random.split(key)
        rho = jnp.full_like(z0, INIT_LOG_SCALE)
        state = mfvi.MFVIState(z0, rho, optimizer.init((z0, rho)))

        def step(state, k):
            state, info = algo.step(k, state)
            return state, -info.elbo  # blackjax's `elbo` is the loss, −ELBO

        state, elbo = jax.lax.scan(step, state, jax.random.split(k_fit, num_steps))
        draws = algo.sample(k_draw, state, num_samples)
        logq = jax.vmap(mfvi.generate_meanfield_logdensity(state.mu, state.rho))(draws)
        logp = jax.vmap(logdensity)(draws)
        return draws, logp, elbo, state.mu, jnp.exp(state.rho), logq

    pos, lp, elbo, mu, scale, logq = _over_chains(jax.vmap(chain), z0s, keys, where)
    stats = {"elbo": elbo, "mean": mu, "scale": scale, "log_q": logq}
    return pos, lp, stats


@eqx.filter_jit
def _pathfinder(
    posterior,
    z0s,
    keys,
    blackjax,
    num_steps: int,
    num_mc: int,
    history_size: int,
    num_samples: int,
    where,
):
    # Pathfinder (Zhang et al. 2022, Alg. 1) from blackjax's public pieces: the
    # L-BFGS path (`minimize_lbfgs`), the inverse-Hessian factors at each point
    # (`lbfgs_inverse_hessian_factors`) and BFGS-sample. Chains and path points
    # run one after another (`lax.map`; the log densities of a point's draws
    # vmapped): batched LU and QR kernels running side by side deadlocked
    # jaxlib's CPU thread pool (blackjax's `pathfinder.approximate`, vmapped over
    # the path, vmapped over chains, on 2 cores: every pool thread waiting).
    lbfgs = blackjax.optimizers.lbfgs
    logdensity = posterior.log_density_unconstrained
    m = history_size

    def approximation(k, pos, grad, alpha, beta, gamma, n):
        # `grad` is the gradient of −ln p; BFGS-sample centres the Gaussian at
        # θ + H ∇ln p, so it is given negated (blackjax 1.7.1's `approximate`
        # passes ∇(−ln p): a Newton step away from the mode).
        return lbfgs.bfgs_sample(k, n, pos, -grad, alpha, beta, gamma)

    def chain(args):
        z0, key = args
        k_elbo, k_draw = jax.random.split(key)
        _, hist = lbfgs.minimize_lbfgs(
            lambda z: -logdensity(z), z0, maxiter=num_steps, maxcor=m
        )
        length = hist.x.shape[0]
        # Every L-BFGS step moves the point; after the stop the path repeats it.
        num_iter = jnp.sum(jnp.any(jnp.diff(hist.x, axis=0) != 0, axis=1))
        keep = hist.update_mask[1:]
        s = jnp.where(keep, jnp.diff(hist.x, axis=0), 0.0)
        z = jnp.where(keep, jnp.diff(hist.g, axis=0), 0.0)
        s = jnp.pad(s, ((m, 0), (0, 0)))
        z = jnp.pad(z, ((m, 0), (0, 0)))

        def factors(i):
            window = i + jnp.arange(m)
            return lbfgs.lbfgs_inverse_hessian_factors(
                s[window].T, z[window].T, hist.alpha[i]
            )

        def elbo_at(args):
            i, k = args
            beta, gamma = factors(i)
            phi, logq = approximation(
                k, hist.x[i], hist.g[i], hist.alpha[i], beta, gamma, num_mc
            )
            return jnp.mean(jax.vmap(logdensity)(phi) - logq)

        idx = jnp.arange(length)
        elbo = jax.lax.map(elbo_at, (idx, jax.random.split(k_elbo, length)))
        elbo = jnp.where((idx <= num_iter) & jnp.isfinite(elbo), elbo, -jnp.inf)
        best = jnp.argmax(elbo)
        pos, grad, alpha = hist.x[best], hist.g[best], hist.alpha[best]
        beta, gamma = factors(best)
        draws, logq = approximation(k_draw, pos, grad, alpha, beta, gamma, num_samples)
        logp = jax.vmap(logdensity)(draws)
        # The Gaussian's mean θ + H ∇ln p and the diagonal of H = diag(α) + βγβᵀ.
        mean = pos - alpha * grad - beta @ (gamma @ (beta.T @ grad))
        var = alpha + jnp.einsum("ij,jk,ik->i", beta, gamma, beta)
        return draws, logp, logq, elbo[best], elbo, num_iter, best, mean, var

    pos, lp, logq, elbo, elbo_path, num_iter, best, mean, var = _over_chains(
        lambda z, k: jax.lax.map(chain, (z, k)), z0s, keys, where
    )
    stats = {
        "elbo": elbo,
        "elbo_path": elbo_path,
        "num_iterations": num_iter,
        "best_iteration": best,
        "mean": mean,
        "scale": jnp.sqrt(var),
        "log_q": logq,
    }
    return pos, lp, stats
