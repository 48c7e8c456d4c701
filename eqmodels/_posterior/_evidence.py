"""`evidence`: the marginal likelihood `Z = ∫ L(θ) π(θ) dθ` of a `Posterior`, by
nested sampling (blackjax's nested slice sampling), and `laplace_evidence`, its
Laplace approximation."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, PyTree, Scalar

from .._solvers._solve import Solution
from ._laplace import laplace
from ._posterior import Posterior
from ._priors import ParameterPrior
from ._requirements import check_posterior, import_blackjax


class Evidence(eqx.Module):
    """What [`eqmodels.evidence`][] returns.

    - `log_evidence`: `ln Z`, the mean over `num_volume_draws` simulations of the
      prior volumes' shrinkage (Skilling's statistical uncertainty of nested
      sampling), and `log_evidence_std` their standard deviation: the
      uncertainty of `ln Z` (from the volumes; it does not cover an inner
      sampler that mixes badly).
    - `draws`: the model at every dead point and final live point, leaves
      stacked with a leading axis `m`; `log_weights` `(m,)` their normalised
      posterior weights (`exp` sums to 1): weighted draws of the posterior;
      `log_likelihood` `(m,)` each draw's `ln L`.
    - `ess`: the effective sample size of the weights (Kish).
    - `converged`: whether the stopping rule was met (the live points' share of
      `Z` below `live_fraction`) within `max_steps`; `num_steps` the nested
      sampling steps taken (each replaces `num_delete` live points).
    """

    log_evidence: Scalar
    log_evidence_std: Scalar
    draws: PyTree
    log_weights: Float[Array, " m"]
    log_likelihood: Float[Array, " m"]
    ess: Scalar
    converged: bool = eqx.field(static=True)
    num_steps: int = eqx.field(static=True)

    def resample(self, key: PRNGKeyArray, num: int = 1000) -> PyTree:
        """`num` equally weighted posterior draws (multinomial resampling of
        `draws` by their weights), leaves stacked with a leading axis `num`."""
        idx = jax.random.choice(
            key, self.log_weights.shape[0], (num,), p=jnp.exp(self.log_weights)
        )
        return jax.tree.map(
            lambda x: x[idx] if eqx.is_array(x) else x,
            self.draws,
        )


def _check_int(name, v, lo):
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < lo:
        raise ValueError(f"`{name}` must be an int ≥ {lo}, got {v!r}.")
    return int(v)


def _prior_leaves(posterior: Posterior) -> None:
    """Every parameter leaf has exactly one prior (a joint prior covers all the
    leaves its `where` selects); refused otherwise."""
    model = posterior.model
    leaves = jax.tree.leaves(eqx.filter(model, posterior.params))
    owner = {}
    for i, p in enumerate(posterior.priors):
        for x in jax.tree.leaves(p.where(model)):
            if id(x) in owner:
                raise ValueError(
                    f"`priors[{owner[id(x)]}]` and `priors[{i}]` are both on one "
                    "leaf: `evidence` draws each leaf from its one prior; combine "
                    "them into one (joint) prior."
                )
            owner[id(x)] = i
    free = [x for x in leaves if id(x) not in owner]
    if free:
        shapes = ", ".join(str(tuple(x.shape)) for x in free)
        raise ValueError(
            f"{len(free)} parameter leaves of the model (shapes {shapes}) have no "
            "prior, i.e. a flat, improper one: the evidence `∫ L π dθ` is then "
            "undefined. Give every parameter a proper prior (or make it a "
            "non-parameter with `params=`)."
        )


def _shapes(tree):
    return jax.tree.structure(tree), [tuple(x.shape) for x in jax.tree.leaves(tree)]


def _describe(tree) -> str:
    shapes = _shapes(tree)[1]
    return str(shapes[0]) if len(shapes) == 1 else str(shapes)


def _draw_prior(posterior: Posterior, key, num_live):
    """`(num_live, n)` unconstrained vectors from each prior's `sample(key)`."""
    for i, p in enumerate(posterior.priors):
        if not callable(getattr(p, "sample", None)) or (
            isinstance(p, ParameterPrior) and p.sampler is None
        ):
            raise ValueError(
                f"`priors[{i}]` ({type(p).__name__}) cannot be drawn from (no "
                "`sample(key)` method): nested sampling starts from draws of the "
                "prior. Give priors that offer `sample(key) -> value` (a "
                "`ParameterPrior(..., sampler=...)`; `GMRFPrior` and `DirichletPrior` "
                "offer it; a prior of your own: add the method), or pass "
                "`initial=`, `num_live` draws from the prior."
            )
        value = p.where(posterior.model)
        out = jax.eval_shape(p.sample, jax.random.key(0))
        if _shapes(out) != _shapes(value):
            raise ValueError(
                f"`priors[{i}].sample(key)` returned shape {_describe(out)}, but its "
                f"leaf has shape {_describe(value)} (a joint prior draws the tuple "
                "or submodule its `where` selects)."
            )

    def one(k):
        model = posterior.model
        keys = jax.random.split(k, len(posterior.priors))
        for p, kp in zip(posterior.priors, keys):
            value = p.where(model)
            draw = jax.tree.map(
                lambda d, v: jnp.asarray(d, v.dtype), p.sample(kp), value
            )
            model = eqx.tree_at(
                p.where, model, tuple(draw) if isinstance(value, tuple) else draw
            )
        return posterior.to_unconstrained(model)

    return jax.vmap(one)(jax.random.split(key, num_live))


def _initial(posterior: Posterior, initial, num_live):
    """`initial` (flat parameter vectors in the model's coordinates) made
    unconstrained."""
    x = np.asarray(initial, dtype=np.asarray(posterior.flatten()).dtype)
    n = int(posterior.flatten().shape[0])
    if x.shape != (num_live, n):
        raise ValueError(
            f"`initial` must have shape (num_live, n) = {(num_live, n)} (flat "
            f"parameter vectors, `posterior.flatten` order), got {x.shape}."
        )
    if not np.all(np.isfinite(x)):
        raise ValueError("`initial` holds non-finite values.")
    to_z = jax.vmap(lambda t: posterior.to_unconstrained(posterior.unflatten(t)))
    z = to_z(jnp.asarray(x))
    if not np.all(np.isfinite(np.asarray(z))):
        raise ValueError(
            "`initial` holds a value <= 0 of a leaf with a `support='positive'` "
            "prior: draws from the prior are in its support."
        )
    return z


def evidence(
    posterior: Posterior,
    key: PRNGKeyArray,
    *,
    num_live: int = 500,
    num_inner_steps: int | None = None,
    num_delete: int | None = None,
    live_fraction: float = 1e-3,
    max_steps: int = 100_000,
    num_volume_draws: int = 100,
    initial: Float[ArrayLike, "num_live n"] | None = None,
) -> Evidence:
    r"""The evidence (marginal likelihood) `Z = ∫ L(θ) π(θ) dθ` of a posterior, by
    nested sampling: blackjax's nested slice sampling (`blackjax.nss`: hit-and-run
    slice moves shaped by the live points' covariance, within the likelihood
    contour), over the unconstrained parameters (a `support="positive"` leaf as
    `ln θ`, its prior density with the Jacobian, which leaves `Z` unchanged).

    `Z` needs a **proper prior on every parameter**: a model leaf without a prior
    (flat, improper) is refused, and nested sampling starts from `num_live` draws
    of the prior: each prior must offer `sample(key) -> value` (a draw of its
    leaf in the model's coordinates; a joint prior's, the tuple or submodule
    its `where` selects), or `initial` gives the draws. [`eqmodels.GMRFPrior`][]
    and [`eqmodels.DirichletPrior`][] draw exactly; a
    [`eqmodels.ParameterPrior`][] draws when built with `sampler=`;
    [`eqmodels.GMRFHyperPrior`][] does not draw (its field and hyperparameters
    are one submodule whose hyperpriors are other priors): give `initial` there.

    Comparing two models: `ln B₁₂ = ln Z₁ − ln Z₂`, with uncertainty
    `sqrt(std₁² + std₂²)`. For a fast approximation near a Gaussian posterior
    see [`eqmodels.laplace_evidence`][].

    **Arguments:**

    - `posterior`: the [`eqmodels.Posterior`][] (its likelihood terms and priors).
    - `key`: a JAX PRNG key.
    - `num_live`: live points (the uncertainty of `ln Z` falls as
      `sqrt(H/num_live)`, `H` the information in nats).
    - `num_inner_steps`: slice moves per replacement (default `max(5, 3 n)` for
      `n` parameters; blackjax advises at least `max(5, 2 n)`).
    - `num_delete`: live points replaced per step (default `num_live // 10`;
      the replacements run in parallel).
    - `live_fraction`: stop when the live points' share of `Z`,
      `Z_live / Z`, is below this.
    - `max_steps`: the most nested sampling steps (`converged` says whether the
      stopping rule was met first).
    - `num_volume_draws`: simulations of the volumes for `ln Z`'s mean and
      standard deviation.
    - `initial`: `(num_live, n)` draws from the prior, flat parameter vectors in
      the model's coordinates (`posterior.flatten` order); default: drawn with
      the priors' `sample`.

    **Returns:** [`eqmodels.Evidence`][] (`log_evidence`, `log_evidence_std`,
    weighted draws).
    """
    blackjax = import_blackjax("evidence")
    from blackjax.ns import utils as ns_utils

    check_posterior(posterior)
    num_live = _check_int("num_live", num_live, 2)
    n = int(posterior.flatten().shape[0])
    num_inner_steps = _check_int(
        "num_inner_steps",
        max(5, 3 * n) if num_inner_steps is None else num_inner_steps,
        1,
    )
    num_delete = _check_int(
        "num_delete", max(1, num_live // 10) if num_delete is None else num_delete, 1
    )
    if num_delete >= num_live:
        raise ValueError(
            f"`num_delete` ({num_delete}) must be below `num_live` ({num_live})."
        )
    max_steps = _check_int("max_steps", max_steps, 1)
    num_volume_draws = _check_int("num_volume_draws", num_volume_draws, 2)
    if not (isinstance(live_fraction, int | float) and 0 < live_fraction < 1):
        raise ValueError(f"`live_fraction` must be in (0, 1), got {live_fraction!r}.")
    _prior_leaves(posterior)
    k_init, k_run, k_vol = jax.random.split(key, 3)
    if initial is None:
        z0 = _draw_prior(posterior, k_init, num_live)
    else:
        z0 = _initial(posterior, initial, num_live)

    state = _init(posterior, z0, blackjax, num_inner_steps, num_delete)
    if not np.all(np.isfinite(np.asarray(state.particles.logdensity))):
        raise ValueError(
            "the prior's log density is not finite at some initial draws: are they "
            "draws from the priors (and the priors normalised)?"
        )
    chunk = max(1, min(max_steps, math.ceil(num_live / num_delete)))
    stop = math.log(live_fraction)
    dead, steps, converged = [], 0, False
    while steps < max_steps:
        k_run, k = jax.random.split(k_run)
        state, info = _chunk(
            posterior, state, k, blackjax, num_inner_steps, num_delete, chunk
        )
        dead.append(info)
        steps += chunk
        integ = state.integrator
        if float(integ.logZ_live - jnp.logaddexp(integ.logZ, integ.logZ_live)) < stop:
            converged = True
            break
    final = ns_utils.finalise(state, dead, update_info=False)
    log_w = ns_utils.log_weights(k_vol, final, shape=num_volume_draws)
    log_z = jax.scipy.special.logsumexp(log_w, axis=0)  # (num_volume_draws,)
    mean_w = log_w.mean(axis=-1)
    norm_w = mean_w - jax.scipy.special.logsumexp(mean_w)
    ess = jnp.exp(
        2 * jax.scipy.special.logsumexp(norm_w)
        - jax.scipy.special.logsumexp(2 * norm_w)
    )
    positions = final.particles.position
    draws = eqx.filter_vmap(posterior.from_unconstrained)(positions)
    return Evidence(
        log_evidence=jnp.mean(log_z),
        log_evidence_std=jnp.std(log_z, ddof=1),
        draws=draws,
        log_weights=norm_w,
        log_likelihood=final.particles.loglikelihood,
        ess=ess,
        converged=converged,
        num_steps=steps,
    )


def _densities(posterior):
    def log_prior(z):
        model, log_jac = posterior._from_unconstrained(z)
        return posterior.log_prior(model) + log_jac

    def log_likelihood(z):
        ll = posterior.log_likelihood(posterior.from_unconstrained(z))
        return jnp.where(jnp.isnan(ll), -jnp.inf, ll)

    return log_prior, log_likelihood


def _algorithm(posterior, blackjax, num_inner_steps, num_delete):
    log_prior, log_likelihood = _densities(posterior)
    return blackjax.nss(
        log_prior,
        log_likelihood,
        num_inner_steps=num_inner_steps,
        num_delete=num_delete,
    )


@eqx.filter_jit
def _init(posterior, z0, blackjax, num_inner_steps, num_delete):
    return _algorithm(posterior, blackjax, num_inner_steps, num_delete).init(z0)


@eqx.filter_jit
def _chunk(posterior, state, key, blackjax, num_inner_steps, num_delete, chunk):
    algo = _algorithm(posterior, blackjax, num_inner_steps, num_delete)

    def body(s, k):
        s, info = algo.step(k, s)
        return s, info.particles

    state, particles = jax.lax.scan(body, state, jax.random.split(key, chunk))
    # (chunk, num_delete, ...) -> (chunk · num_delete, ...), in death order
    particles = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), particles)
    return state, _Dead(particles, None)


class _Dead(eqx.Module):
    """What `blackjax.ns.utils.finalise` reads of a step's info."""

    particles: PyTree
    update_info: None = None


def laplace_evidence(posterior: Posterior, solution: PyTree) -> Scalar:
    r"""The Laplace approximation of the evidence of `posterior`, at its optimum:

    `ln Z ≈ ln L(θ*) + ln π(θ*) + (n/2) ln 2π − ½ ln det H`,

    `H = −∇² ln p` at the MAP `θ*` (in the model's own coordinates, `n`
    parameters; see [`eqmodels.laplace`][]). Exact for a linear model with
    Gaussian data and a Gaussian prior; otherwise good where the posterior is
    close to Gaussian in the model's coordinates (one mode, well inside the
    prior's support). Needs proper priors on every parameter like
    [`eqmodels.evidence`][] (a flat prior's constant is not a density).

    **Arguments:**

    - `posterior`: the [`eqmodels.Posterior`][].
    - `solution`: an [`eqmodels.Solution`][] of `em.solve(posterior, model)` or
      the model at the optimum.

    **Returns:** `ln Z`, a scalar (NaN where `H` is not positive definite).
    """
    check_posterior(posterior)
    _prior_leaves(posterior)
    lap = laplace(posterior, solution)
    model = solution.model if isinstance(solution, Solution) else solution
    n = lap.precision.shape[0]
    chol = jnp.linalg.cholesky(lap.precision)
    half_logdet = jnp.sum(jnp.log(jnp.diag(chol)))
    return posterior.log_density(model) + 0.5 * n * jnp.log(2 * jnp.pi) - half_logdet
