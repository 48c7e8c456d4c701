"""`sample`: NUTS with window adaptation (blackjax) over a `Posterior`, chains
vmapped; `Samples`, what it returns."""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree

from .._sharding._mesh import check_mesh
from ._diagnostics import ess, split_rhat
from ._posterior import Posterior
from ._vi import check_vi_args, sample_vi, VI_METHODS


METHODS = ("nuts", *VI_METHODS)


class Samples(eqx.Module):
    """What [`eqmodels.sample`][] returns.

    - `draws`: the model at every draw, its leaves stacked with leading axes
      `(num_chains, num_samples)` (`eqx.filter_vmap` over both axes evaluates
      anything of a model, e.g. `eqx.filter_vmap(eqx.filter_vmap(lambda m: m()))`).
    - `positions`: the flat unconstrained vectors sampled, `(chains, samples, n)`
      (see [`eqmodels.Posterior.to_unconstrained`][]).
    - `log_density`: the sampled density (unconstrained, with the log-Jacobian)
      at each draw, `(chains, samples)`.
    - `stats`: `acceptance_rate`, `is_divergent`, `num_integration_steps`
      (each `(chains, samples)`), and the adapted `step_size` `(chains,)` and
      `inverse_mass_matrix` `(chains, n)`. For `method="meanfield"`: `elbo`
      `(chains, num_steps)` (the ELBO estimate at each step), the fitted
      Gaussian's `mean` and `scale` (its standard deviations) `(chains, n)`,
      and `log_q` `(chains, samples)` (its log density at the draws). For
      `method="pathfinder"`: `elbo` `(chains,)` (of the approximation drawn
      from), `elbo_path` `(chains, num_steps + 1)` (at each point of the
      L-BFGS path, `-inf` past its end), `num_iterations` and
      `best_iteration` `(chains,)`, the approximation's `mean` and `scale`
      (the square root of its covariance's diagonal) `(chains, n)`, and
      `log_q` `(chains, samples)`.
    """

    draws: PyTree
    positions: Float[Array, "chains samples n"]
    log_density: Float[Array, "chains samples"]
    stats: dict

    @property
    def divergences(self) -> Int[Array, " chains"]:
        """The number of divergent transitions of each chain (NUTS)."""
        if "is_divergent" not in self.stats:
            raise ValueError(
                "these draws are from variational inference (no transitions, no "
                "divergences): compare `stats['elbo']` across chains instead."
            )
        return jnp.sum(self.stats["is_divergent"], axis=1)

    def rhat(self) -> np.ndarray:
        """Split R̂ of each unconstrained coordinate (`positions`, `(n,)`, numpy):
        below about 1.01 when the chains agree (BDA3 §11.4; needs ≥ 4 draws)."""
        return split_rhat(np.asarray(self.positions))

    def ess(self) -> np.ndarray:
        """The effective sample size of each unconstrained coordinate (`(n,)`,
        numpy; Geyer's initial monotone sequence over the split chains, BDA3
        §11.5)."""
        return ess(np.asarray(self.positions))


def sample(
    posterior: Posterior,
    init: PyTree | None = None,
    *,
    key: PRNGKeyArray,
    method: str = "nuts",
    num_warmup: int = 500,
    num_samples: int = 500,
    num_chains: int = 4,
    jitter: float = 0.1,
    target_acceptance_rate: float = 0.8,
    mesh: Mesh | None = None,
    axis_name: str = "chains",
    num_steps: int | None = None,
    learning_rate: float | Callable | None = None,
    num_mc: int | None = None,
    history_size: int | None = None,
) -> Samples:
    """Draw from a [`eqmodels.Posterior`][] with NUTS (blackjax's `nuts`, with
    `window_adaptation` of the step size and a diagonal mass matrix), the chains
    vmapped in one compiled program. Sampling is in the posterior's flat
    unconstrained coordinates (positive leaves as `ln θ`, their Jacobian
    included); the draws are returned as models.

    **Arguments:**

    - `posterior`: the [`eqmodels.Posterior`][].
    - `init`: the starting model (default: the posterior's `model`); each chain
      starts at it plus a uniform jitter in `[−jitter, jitter]` on every
      unconstrained coordinate.
    - `key`: a `jax.random.key`.
    - `method`: `"nuts"`, or variational inference: `"meanfield"` (mean-field
      Gaussian VI) or `"pathfinder"` (Pathfinder; both below).
    - `num_warmup`: adaptation steps (discarded); `num_samples`: draws kept per
      chain; `num_chains`: independent chains.
    - `jitter`: the half-width of the starting jitter (0: all chains start at
      `init`).
    - `target_acceptance_rate`: the dual-averaging target of the adaptation.
    - `mesh`, `axis_name`: to spread the chains over devices, a
      `jax.sharding.Mesh` with an axis `axis_name` whose size divides
      `num_chains`: the chains' starts and keys are sharded along it (the
      posterior replicated), and the one compiled program runs each device's
      chains there (the mesh's axes are used as automatic ones). Default: no
      sharding.

    Variational inference (`method="meanfield"` or `"pathfinder"`, see
    [Variational inference](posteriors.md#variational-inference)): each chain
    fits its own Gaussian approximation from its start and draws `num_samples`
    independent draws from it; `num_warmup`, `target_acceptance_rate`, `mesh`
    and `axis_name` are NUTS's and refused there. Their arguments (refused by
    the other methods; `None`: the default):

    - `num_steps`: Adam steps (meanfield, default 2000) or the most L-BFGS
      iterations (pathfinder, default 100).
    - `learning_rate` (meanfield): Adam's initial step size, decayed to 0 over
      `num_steps` (cosine; default 0.02), or an optax schedule `step -> rate`
      used as it is.
    - `num_mc`: the draws of each ELBO estimate (meanfield: per gradient step,
      default 10; pathfinder: per point of the path, default 100).
    - `history_size` (pathfinder): the L-BFGS history (default 10).

    **Returns:** [`eqmodels.Samples`][] (draws, log densities, statistics).
    """
    vi_options = check_vi_args(
        method,
        dict(
            num_steps=num_steps,
            learning_rate=learning_rate,
            num_mc=num_mc,
            history_size=history_size,
        ),
        dict(
            num_warmup=num_warmup,
            target_acceptance_rate=target_acceptance_rate,
            mesh=mesh,
            axis_name=axis_name,
        ),
        sample,
    )
    if method in VI_METHODS:
        positions, logdens, stats = sample_vi(
            posterior,
            init,
            key=key,
            method=method,
            num_samples=num_samples,
            num_chains=num_chains,
            jitter=jitter,
            options=vi_options,
        )
        draws = eqx.filter_vmap(eqx.filter_vmap(posterior.from_unconstrained))(
            positions
        )
        return Samples(draws, positions, logdens, stats)
    try:
        import blackjax
    except ImportError as e:
        raise ImportError(
            "`sample` needs blackjax: `pip install blackjax` (or the "
            "`eqmodels[posterior]` extra)."
        ) from e
    if not isinstance(posterior, Posterior):
        raise TypeError(
            f"`posterior` must be an eqmodels.Posterior, got {type(posterior).__name__}."
        )
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}, got {method!r}.")
    for name, v, lo in (
        ("num_warmup", num_warmup, 1),
        ("num_samples", num_samples, 1),
        ("num_chains", num_chains, 1),
    ):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < lo:
            raise ValueError(f"`{name}` must be an int ≥ {lo}, got {v!r}.")
    if not (np.isfinite(jitter) and jitter >= 0):
        raise ValueError(f"`jitter` must be finite and ≥ 0, got {jitter!r}.")
    if not 0 < target_acceptance_rate < 1:
        raise ValueError(
            "`target_acceptance_rate` must be in (0, 1), got "
            f"{target_acceptance_rate!r}."
        )
    z0 = posterior.to_unconstrained(init)
    if not np.isfinite(np.asarray(posterior.log_density_unconstrained(z0))):
        raise ValueError(
            "the posterior's log density at `init` is not finite: start from a "
            "point of the prior's support with finite likelihood."
        )
    k_init, k_run = jax.random.split(key)
    z0s = z0[None, :] + jitter * jax.random.uniform(
        k_init, (num_chains, z0.shape[0]), z0.dtype, -1.0, 1.0
    )
    keys = jax.random.split(k_run, num_chains)
    if mesh is not None:
        mesh, axis_name, size = check_mesh(mesh, axis_name)
        if num_chains % size:
            raise ValueError(
                f"`num_chains` ({num_chains}) must be a multiple of the mesh axis "
                f"{axis_name!r}'s size ({size}): every device runs as many chains."
            )
        # Sharded by placement (GSPMD): the mesh's devices and names on automatic
        # axes (an explicit-axes mesh would need the samplers' code sharding-aware).
        auto = Mesh(mesh.devices, mesh.axis_names)
        spread = NamedSharding(auto, P(axis_name))
        z0s, keys = jax.device_put((z0s, keys), spread)
    positions, logdens, stats = _run(
        posterior,
        z0s,
        keys,
        blackjax,
        int(num_warmup),
        int(num_samples),
        float(target_acceptance_rate),
    )
    draws = eqx.filter_vmap(eqx.filter_vmap(posterior.from_unconstrained))(positions)
    return Samples(draws, positions, logdens, stats)


@eqx.filter_jit
def _run(posterior, z0s, keys, blackjax, num_warmup, num_samples, target):
    def logdensity(z):
        return posterior.log_density_unconstrained(z)

    def chain(z0, key):
        k_warm, k_draw = jax.random.split(key)
        warmup = blackjax.window_adaptation(
            blackjax.nuts, logdensity, target_acceptance_rate=target
        )
        (state, parameters), _ = warmup.run(k_warm, z0, num_steps=num_warmup)
        kernel = blackjax.nuts(logdensity, **parameters)

        def step(state, k):
            state, info = kernel.step(k, state)
            return state, (
                state.position,
                state.logdensity,
                info.acceptance_rate,
                info.is_divergent,
                info.num_integration_steps,
            )

        _, out = jax.lax.scan(step, state, jax.random.split(k_draw, num_samples))
        return out, parameters["step_size"], parameters["inverse_mass_matrix"]

    (pos, lp, acc, div, nsteps), step_size, imm = jax.vmap(chain)(z0s, keys)
    stats = {
        "acceptance_rate": acc,
        "is_divergent": div,
        "num_integration_steps": nsteps,
        "step_size": step_size,
        "inverse_mass_matrix": imm,
    }
    return pos, lp, stats
