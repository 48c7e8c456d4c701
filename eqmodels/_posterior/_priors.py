"""Priors on a model's parameters: the abstract base and a prior given by its log
density."""

import abc
from collections.abc import Callable
from typing import Any, Literal

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray, PyTree, Scalar


SUPPORTS = ("real", "positive")


class AbstractPrior(eqx.Module):
    """A prior on one leaf (an array) of a model, for [`eqmodels.Posterior`][].

    A prior declares:

    - `where`: a function `where(model) -> array` selecting the leaf it is a prior
      on (as `eqx.tree_at` takes it), e.g. `lambda m: m.params`; a joint prior
      selects a tuple or submodule of parameter leaves (its `support` is then
      `"real"`), e.g. [`eqmodels.GMRFHyperPrior`][];
    - `support`: `"real"` (the leaf is sampled as it is) or `"positive"` (the
      posterior samples `z = ln θ` and adds the log-Jacobian `Σ z`);
    - `log_density(value)`: the normalised log density of the leaf's value
      (in the model's own coordinates, `θ`, not `z`);
    - optionally `sample(key) -> value`, a draw of the leaf's value from the prior
      (what [`eqmodels.evidence`][] starts nested sampling from).

    Subclass it for a prior of your own.
    """

    where: eqx.AbstractVar[Callable]
    support: eqx.AbstractVar[str]

    @abc.abstractmethod
    def log_density(self, value: Float[Array, "..."]) -> Scalar:
        """**Arguments:** `value`, the leaf `where(model)` selects.

        **Returns:** its log prior density, a scalar.
        """


class ParameterPrior(AbstractPrior):
    """A prior given by a log-density function of one leaf of the model, e.g. a
    numpyro distribution's `log_prob` summed over the leaf, or a plain function:

    ```python
    prior = em.ParameterPrior(
        lambda m: m.diameter,
        lambda d: jnp.sum(-0.5 * ((d - 40.0) / 5.0) ** 2 - jnp.log(5.0 * jnp.sqrt(2 * jnp.pi))),
        support="positive",
    )
    ```
    """

    where: Callable = eqx.field(static=True)
    log_prob: Callable = eqx.field(static=True)
    support: Literal["real", "positive"] = eqx.field(static=True)
    sampler: Callable | None = eqx.field(static=True)

    def __init__(
        self,
        where: Callable[[PyTree], Float[Array, "..."]],
        log_prob: Callable[[Float[Array, "..."]], Scalar],
        *,
        support: str = "real",
        sampler: Callable[[Any], PyTree[Float[Array, "..."]]] | None = None,
    ):
        """**Arguments:**

        - `where`: `where(model)` selects the leaf (an array of the model), or
          a tuple of leaves for a joint prior (`support="real"`; `log_prob`
          then takes the tuple).
        - `log_prob`: `log_prob(value) -> scalar`, the normalised log density of
          the whole leaf (sum over its elements for independent ones).
        - `support`: `"real"` or `"positive"` (sampled through `z = ln θ`).
        - `sampler`: optional, `sampler(key) -> value`, a draw from the same
          distribution (e.g. `lambda k: dist.sample(k, shape)`); needed by
          [`eqmodels.evidence`][] unless it is given `initial=` draws.
        """
        if not callable(where):
            raise TypeError(
                f"`where` must be a function of the model returning the leaf the "
                f"prior is on (e.g. `lambda m: m.params`), got {where!r}."
            )
        if not callable(log_prob):
            raise TypeError(
                "`log_prob` must be a function of the leaf's value returning its "
                f"log density (e.g. `dist.log_prob(x).sum()`), got {log_prob!r}."
            )
        check_support(support)
        if sampler is not None and not callable(sampler):
            raise TypeError(
                "`sampler` must be a function of a `jax.random` key returning a "
                f"draw of the leaf (e.g. `lambda k: dist.sample(k)`), got {sampler!r}."
            )
        self.where = where
        self.log_prob = log_prob
        self.support = support
        self.sampler = sampler

    def sample(self, key: PRNGKeyArray) -> PyTree[Float[Array, "..."]]:
        """A draw of the leaf from the prior: `sampler(key)`.

        **Arguments:** `key`, a `jax.random` key.

        **Returns:** a value of the leaf's shape (the tuple, for a joint prior).
        """
        if self.sampler is None:
            raise NotImplementedError(
                "this ParameterPrior was built without `sampler=`: give "
                "`ParameterPrior(where, log_prob, sampler=lambda key: ...)` (a draw "
                "from the same distribution) to draw from it."
            )
        return self.sampler(key)

    def log_density(self, value: PyTree[Float[Array, "..."]]) -> Scalar:
        """**Arguments:** `value`, the leaf `where(model)` selects (or the tuple
        of leaves, for a joint prior).

        **Returns:** `log_prob(value)`, a scalar.
        """
        out = jnp.asarray(self.log_prob(value))
        if out.shape != ():
            raise ValueError(
                f"`log_prob` returned shape {out.shape}; it must return a scalar "
                "(sum the log densities of the leaf's elements)."
            )
        return out


def check_support(support) -> None:
    if support not in SUPPORTS:
        raise ValueError(f"`support` must be one of {SUPPORTS}, got {support!r}.")
