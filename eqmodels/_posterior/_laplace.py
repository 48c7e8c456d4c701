"""`laplace`: the Laplace approximation of a `Posterior` at an optimum."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree, Scalar

from .._solvers._solve import Solution
from ._posterior import Posterior


class Laplace(eqx.Module):
    """What [`eqmodels.laplace`][] returns: the Gaussian `N(mean, covariance)`
    approximating the posterior, in the model's own coordinates (its parameters
    flattened in `jax.flatten_util.ravel_pytree` order).

    - `mean`: the model at the optimum (as given).
    - `covariance`, `precision`: `(n, n)`, `precision = −∇² ln p` at the mean and
      `covariance` its inverse.
    - `std`: the per-parameter standard deviations `sqrt(diag(covariance))`, as a
      model (each parameter leaf holds its own; the other leaves as in `mean`).
    - `grad_norm`: the largest `|∂ ln p/∂θ|` at the mean: near 0 at an optimum;
      a large value says the given point is not one (and the approximation is
      not centred where the posterior peaks).
    """

    mean: PyTree
    covariance: Float[Array, "n n"]
    precision: Float[Array, "n n"]
    std: PyTree
    grad_norm: Scalar


def laplace(posterior: Posterior, solution: PyTree) -> Laplace:
    """The Laplace approximation of `posterior` at `solution`: a Gaussian with mean
    the optimum and precision the negative Hessian of the log density there (exact,
    a dense `(n, n)` Hessian by automatic differentiation, in the model's own
    coordinates: meant for the tens to few thousands of parameters of a geometric
    model or a small image). For a linear model with Gaussian data and a Gaussian
    prior it is the exact posterior.

    **Arguments:**

    - `posterior`: the [`eqmodels.Posterior`][].
    - `solution`: an [`eqmodels.Solution`][] of minimising `posterior` (e.g.
      `em.solve(posterior, model)`: a posterior is its own negative log density)
      or a model at the optimum.

    **Returns:** [`eqmodels.Laplace`][]. Where the Hessian is not negative definite
    (not a maximum, or a direction the data and priors leave free) its Cholesky
    fails and the covariance is NaN.
    """
    if not isinstance(posterior, Posterior):
        raise TypeError(
            f"`posterior` must be an eqmodels.Posterior, got {type(posterior).__name__}"
            " (wrap an objective's data terms and your priors in one)."
        )
    model = solution.model if isinstance(solution, Solution) else solution
    if jax.tree.structure(eqx.filter(model, posterior.params)) != jax.tree.structure(
        eqx.filter(posterior.model, posterior.params)
    ):
        raise ValueError(
            "`solution` does not have the posterior's model structure: give the "
            "Solution of `solve(posterior, model)` or a model like `posterior.model`."
        )
    theta = posterior.flatten(model)
    std_flat, cov, prec, g = _laplace(posterior, theta)
    return Laplace(
        mean=model,
        covariance=cov,
        precision=prec,
        std=posterior.unflatten(std_flat),
        grad_norm=g,
    )


@eqx.filter_jit
def _laplace(posterior, theta):
    def f(t):
        return posterior.log_density(posterior.unflatten(t))

    grad = jax.grad(f)(theta)
    prec = -jax.hessian(f)(theta)
    prec = 0.5 * (prec + prec.T)
    chol = jnp.linalg.cholesky(prec)
    eye = jnp.eye(theta.shape[0], dtype=theta.dtype)
    linv = jax.scipy.linalg.solve_triangular(chol, eye, lower=True)
    cov = linv.T @ linv
    return jnp.sqrt(jnp.diag(cov)), cov, prec, jnp.max(jnp.abs(grad))
