"""`DirichletPrior`: a Dirichlet(α) prior on a `SimplexImage`'s pixel fractions,
as the density of its free logits (the change-of-variables Jacobian included)."""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, PyTree, Real, Scalar

from .._grid import ImageGrid
from .._validation import as_real, check_grid, is_concrete
from ._priors import AbstractPrior


def simplex_logits(model: PyTree) -> Float[Array, " n_minus_1"]:
    """The default `where` of [`eqmodels.DirichletPrior`][]: `model.logits`."""
    return model.logits


class DirichletPrior(AbstractPrior):
    r"""A Dirichlet(α) prior on an image's pixel fractions `s` (on the simplex),
    given as the density of the `n − 1` free logits `y` of a
    [`eqmodels.SimplexImage`][] (`s = softmax(y, 0)`, the last pixel's logit fixed
    at 0):

    `ln p(y) = ln Dir(s(y); α) + ln |det ∂s_{1..n−1}/∂y| = Σ_i α_i ln s_i − ln B(α)`,

    `ln B(α) = Σ_i ln Γ(α_i) − ln Γ(Σ_i α_i)`: the Dirichlet density
    `Σ (α_i − 1) ln s_i − ln B(α)` plus the log-Jacobian of the logit → simplex
    map, `Σ_i ln s_i` over all `n` pixels (`∂s/∂y = diag(s) − s sᵀ` on the
    first `n − 1`, whose determinant is `Π_{i ≤ n} s_i`). It is normalised over
    `y ∈ ℝⁿ⁻¹`, concave in `y` for any `α > 0`, and the draws of `s` follow
    Dirichlet(α): `α = 1` is flat on the simplex (every image shape equally
    likely, Comrade's `ImageDirichlet(1)`), `α < 1` favours sparse images,
    `α > 1` smooth ones; `E[s_i] = α_i / Σα`.

    The flux is a separate leaf: give it a flat-in-log prior,
    `em.ParameterPrior(lambda m: m.flux, lambda f: -jnp.log(f), support="positive")`.
    """

    alpha: Float[Array, " n"]
    shape: tuple[int, int] = eqx.field(static=True)
    where: Callable = eqx.field(static=True)
    support: str = eqx.field(static=True)

    def __init__(
        self,
        grid: ImageGrid,
        alpha: Real[ArrayLike, "..."] = 1.0,
        *,
        where: Callable[[PyTree], Float[Array, " n_minus_1"]] = simplex_logits,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][] of the image (at least 2 pixels).
        - `alpha`: the concentrations `α > 0`, a scalar or one per pixel
          `(ny, nx)` (e.g. proportional to a prior image: `E[s] = α/Σα`).
        - `where`: selects the logits from the model (default `model.logits`).
        """
        check_grid(grid)
        shape = (int(grid.ny), int(grid.nx))
        n = shape[0] * shape[1]
        if n < 2:
            raise ValueError("`grid` has one pixel: a Dirichlet needs at least 2.")
        alpha = as_real("alpha", alpha)
        if np.ndim(alpha) == 0:
            alpha = jnp.full(shape, alpha, float)
        if tuple(np.shape(alpha)) != shape:
            raise ValueError(
                f"`alpha` has shape {tuple(np.shape(alpha))}; expected a scalar or "
                f"the grid's {shape} (one concentration per pixel)."
            )
        if is_concrete(alpha) and not (
            np.all(np.isfinite(np.asarray(alpha))) and np.all(np.asarray(alpha) > 0)
        ):
            raise ValueError(
                "`alpha` must be finite and > 0 everywhere (α = 1: flat on the "
                "simplex)."
            )
        if not callable(where):
            raise TypeError(
                "`where` must be a function of the model returning its logits "
                f"(e.g. `lambda m: m.logits`), got {where!r}."
            )
        self.alpha = jnp.asarray(alpha, float).reshape(-1)
        self.shape = shape
        self.where = where
        self.support = "real"

    def log_normaliser(self) -> Scalar:
        """`ln B(α) = Σ ln Γ(α_i) − ln Γ(Σ α_i)`."""
        return jnp.sum(gammaln(self.alpha)) - gammaln(jnp.sum(self.alpha))

    def sample(self, key: PRNGKeyArray) -> Float[Array, " n_minus_1"]:
        """A draw of the logits: `y_i = ln g_i − ln g_n` with `g_i ~ Gamma(α_i)`
        (so `s = softmax(y, 0)` is Dirichlet(α); drawn as log-gammas, exact for
        small `α`).

        **Arguments:** `key`, a `jax.random` key.

        **Returns:** the `n − 1` logits.
        """
        log_g = jax.random.loggamma(key, self.alpha)
        return log_g[:-1] - log_g[-1]

    def log_density(self, value: Float[Array, " n_minus_1"]) -> Scalar:
        """**Arguments:** `value`, the `n − 1` logits.

        **Returns:** `Σ α_i ln s_i − ln B(α)`, the normalised log density of the
        logits (the Dirichlet's with the map's Jacobian).
        """
        n = self.shape[0] * self.shape[1]
        if value.shape != (n - 1,):
            raise ValueError(
                f"DirichletPrior on a {self.shape[0]}×{self.shape[1]} grid got logits "
                f"of shape {value.shape}: it needs the {n - 1} logits of a "
                "SimplexImage on the prior's grid."
            )
        full = jnp.concatenate([value, jnp.zeros((1,), value.dtype)])
        log_s = jax.nn.log_softmax(full)
        alpha = self.alpha.astype(value.dtype)
        return jnp.sum(alpha * log_s) - self.log_normaliser().astype(value.dtype)
