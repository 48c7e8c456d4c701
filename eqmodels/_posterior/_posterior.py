"""`Posterior`: data terms' log-likelihoods plus priors, over a model's parameters,
with an unconstrained parametrisation for samplers."""

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, PyTree, Scalar

from .._solvers._common import is_real_float_array
from .._validation import is_concrete
from ._priors import AbstractPrior


class Posterior(eqx.Module):
    r"""A posterior density over a model's parameters:

    `ln p(θ | data) = Σ_d ln L_d(model(θ)) + Σ_k ln π_k(where_k(θ)) + const`

    (the evidence left out), from data terms (or objectives) with a
    `log_likelihood(model)` — each one's normalised Gaussian log-likelihood, see
    [Data terms](terms.md) — and priors ([`eqmodels.AbstractPrior`][]: a
    [`eqmodels.ParameterPrior`][] on one leaf, a [`eqmodels.GMRFPrior`][] on an
    image's pixels). A parameter without a prior has a flat (improper) one. A
    prior's `where(model)` selects one parameter leaf, or (a joint prior, e.g.
    [`eqmodels.GMRFHyperPrior`][] on an image and its hyperparameters) a tuple or
    submodule whose leaves are all parameter leaves.

    The parameters are the model's real floating-point array leaves (an
    `eqx.partition` filter, `params`), flattened in `jax.flatten_util.ravel_pytree`
    order. For samplers, a prior with `support="positive"` makes its leaf
    unconstrained as `z = ln θ`: [`eqmodels.Posterior.log_density_unconstrained`][]
    is `ln p(θ(z)) + Σ z` (the log-Jacobian of `θ = e^z`).

    `posterior(model)` is `−ln p` (the negative log density), so a posterior is an
    objective for [`eqmodels.solve`][] (its minimum is the MAP).
    """

    likelihood: tuple
    priors: tuple[AbstractPrior, ...]
    model: PyTree
    params: Callable = eqx.field(static=True)

    def __init__(
        self,
        likelihood: Any,
        priors: Sequence[Any] | Any = (),
        model: PyTree = None,
        *,
        params: Callable[[Any], bool] = is_real_float_array,
    ):
        """**Arguments:**

        - `likelihood`: a data term or an [`eqmodels.Objective`][] (anything with
          `log_likelihood(model)`), or a sequence of them (independent data sets:
          their log-likelihoods add).
        - `priors`: an [`eqmodels.AbstractPrior`][] or a sequence of them (at most
          one `"positive"` prior per leaf).
        - `model`: the model (its structure and the values of what is not a
          parameter; e.g. a [`eqmodels.PixelImage`][] or a geometric model).
        - `params`: which leaves are parameters (default: real float arrays).
        """
        terms = (
            tuple(likelihood) if isinstance(likelihood, list | tuple) else (likelihood,)
        )
        if not terms:
            raise ValueError("`likelihood` is empty: give at least one data term.")
        for i, t in enumerate(terms):
            if not callable(getattr(t, "log_likelihood", None)):
                raise TypeError(
                    f"`likelihood[{i}]` ({type(t).__name__}) has no "
                    "`log_likelihood(model)`: give data terms (e.g. `VisChi2`) or "
                    "an `Objective` of them."
                )
        priors = tuple(priors) if isinstance(priors, list | tuple) else (priors,)
        for i, p in enumerate(priors):
            if not isinstance(p, AbstractPrior):
                raise TypeError(
                    f"`priors[{i}]` is a {type(p).__name__}, not an AbstractPrior: "
                    "wrap a log density as `ParameterPrior(where, log_prob)`."
                )
        if model is None:
            raise TypeError("`model` is required: the model the posterior is over.")
        dyn = eqx.filter(model, params)
        leaves = jax.tree.leaves(dyn)
        if not leaves:
            raise ValueError(
                "`model` has no parameters (no real floating-point array leaves)."
            )
        ids = {id(x) for x in leaves}
        positive = set()
        for i, p in enumerate(priors):
            try:
                value = p.where(model)
            except Exception as e:
                raise ValueError(
                    f"`priors[{i}].where` failed on the model ({e!r}): it must "
                    "select a leaf of the model, e.g. `lambda m: m.params`."
                ) from e
            selected = jax.tree.leaves(value)
            if not selected or any(id(x) not in ids for x in selected):
                raise ValueError(
                    f"`priors[{i}].where(model)` is not a parameter leaf of the "
                    f"model (got {type(value).__name__}): a prior is on one of "
                    "the model's real floating-point arrays (or, a joint prior, "
                    "on a tuple or submodule whose leaves all are)."
                )
            if p.support == "positive" and not (
                len(selected) == 1 and selected[0] is value
            ):
                raise ValueError(
                    f"`priors[{i}]` has `support='positive'` but `where` selects "
                    f"{len(selected)} leaves ({type(value).__name__}): a positive "
                    "prior is on one array leaf; give each positive leaf its own."
                )
            out = jax.eval_shape(p.log_density, value)
            if out.shape != ():
                raise ValueError(
                    f"`priors[{i}].log_density` returned shape {out.shape}, "
                    "not a scalar."
                )
            if p.support == "positive":
                if id(value) in positive:
                    raise ValueError(
                        f"`priors[{i}]` is a second `support='positive'` prior on "
                        "the same leaf: it would be transformed twice; give one."
                    )
                positive.add(id(value))
                if is_concrete(value) and not np.all(np.asarray(value) > 0):
                    raise ValueError(
                        f"`priors[{i}]` has `support='positive'` but the model's "
                        "value of its leaf is not > 0: start from a positive value."
                    )
        self.likelihood = terms
        self.priors = priors
        self.model = model
        self.params = params

    # --- densities in the model's own coordinates --------------------------------

    def log_likelihood(self, model: PyTree) -> Scalar:
        """`Σ_d ln L_d(model)`, the data terms' normalised log-likelihoods."""
        return sum(t.log_likelihood(model) for t in self.likelihood)

    def log_prior(self, model: PyTree) -> Scalar:
        """`Σ_k ln π_k(where_k(model))` (0 without priors)."""
        out = jnp.zeros(())
        for p in self.priors:
            out = out + p.log_density(p.where(model))
        return out

    def log_density(self, model: PyTree) -> Scalar:
        """`ln L + ln π` at `model`, in the model's own coordinates (no Jacobian).

        **Arguments:** `model`, of the posterior's model's structure.

        **Returns:** a scalar.
        """
        return self.log_likelihood(model) + self.log_prior(model)

    def __call__(self, model: PyTree) -> Scalar:
        """`−ln p(model)`: the posterior as an objective to minimise (the MAP)."""
        return -self.log_density(model)

    # --- the flat unconstrained parametrisation ----------------------------------

    def _split(self, model):
        return eqx.partition(model, self.params)

    def _positive(self):
        return [p for p in self.priors if p.support == "positive"]

    def to_unconstrained(self, model: PyTree | None = None) -> Float[Array, " n"]:
        """The flat unconstrained vector `z` of `model` (default: the posterior's):
        the parameters in `ravel_pytree` order, `ln θ` for the leaves of
        `support="positive"` priors."""
        model = self.model if model is None else model
        for p in self._positive():
            model = eqx.tree_at(p.where, model, jnp.log(p.where(model)))
        dyn, _ = self._split(model)
        return ravel_pytree(dyn)[0]

    def from_unconstrained(self, z: Float[Array, " n"]) -> PyTree:
        """The model at the flat unconstrained vector `z` (inverse of
        `to_unconstrained`)."""
        return self._from_unconstrained(z)[0]

    def _from_unconstrained(self, z):
        dyn, static = self._split(self.model)
        unravel = ravel_pytree(dyn)[1]
        model = eqx.combine(unravel(z), static)
        log_jac = jnp.zeros((), z.dtype)
        for p in self._positive():
            u = p.where(model)
            log_jac = log_jac + jnp.sum(u)
            model = eqx.tree_at(p.where, model, jnp.exp(u))
        return model, log_jac

    def log_density_unconstrained(self, z: Float[Array, " n"]) -> Scalar:
        """`ln p(θ(z)) + ln |dθ/dz|` at the flat unconstrained vector `z`: the
        density samplers draw from.

        **Arguments:** `z`, shape `(n,)` (see `to_unconstrained`).

        **Returns:** a scalar.
        """
        model, log_jac = self._from_unconstrained(z)
        return self.log_density(model) + log_jac

    def flatten(self, model: PyTree | None = None) -> Float[Array, " n"]:
        """The flat parameter vector of `model` in its own coordinates
        (`ravel_pytree` order, no transform)."""
        model = self.model if model is None else model
        return ravel_pytree(self._split(model)[0])[0]

    def unflatten(self, theta: Float[Array, " n"]) -> PyTree:
        """The model at the flat parameter vector `theta` (inverse of `flatten`)."""
        dyn, static = self._split(self.model)
        return eqx.combine(ravel_pytree(dyn)[1](theta), static)
