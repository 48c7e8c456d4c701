"""`GMRFHyperPrior`: the joint prior of a `GMRFImage`'s pixels given its sampled
hyperparameters (centred: the GMRF density with its σ, ρ-dependent normalisation;
non-centred: white noise)."""

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree, Scalar

from ._gmrf import gmrf_log_density, laplacian_eigenvalues
from ._gmrf_image import gmrf_tau_kappa, GMRFImage
from ._priors import AbstractPrior


def gmrf_image(model: PyTree) -> PyTree:
    """The default `where` of [`eqmodels.GMRFHyperPrior`][]: the model itself (a
    [`eqmodels.GMRFImage`][])."""
    return model


class GMRFHyperPrior(AbstractPrior):
    r"""The prior of a [`eqmodels.GMRFImage`][]'s pixels given its
    hyperparameters `σ`, `ρ` (which are parameters too): a joint prior on the
    image's three leaves (`params`, `sigma`, `rho`), so `where` selects the
    `GMRFImage` (the model itself by default; `lambda m: m.image` for one held in
    a larger model).

    - centred image: `ln p(x | σ, ρ) = ½ ln det Q − ½ (x − μ)ᵀ Q (x − μ) −
      (n/2) ln 2π`, `Q = τ (κ² I + Δ)`, `κ = 1/ρ`, `τ = c(κ)/σ²`, with
      `ln det Q = n ln τ + Σ ln(κ² + λ_jk)` in closed form: the normalisation
      that depends on the hyperparameters, without which they could not be
      inferred.
    - non-centred image: `ln p(ζ) = −½ Σ ζ² − (n/2) ln 2π` (the hyperparameters
      enter through the image, not the prior).

    Give the hyperparameters their own priors (hyperpriors), with
    `support="positive"` so that the sampler moves `ln σ`, `ln ρ`:

    ```python
    priors = [
        em.GMRFHyperPrior(),
        em.ParameterPrior(lambda m: m.sigma, log_normal_sigma, support="positive"),
        em.ParameterPrior(lambda m: m.rho, log_normal_rho, support="positive"),
    ]
    ```
    """

    where: Callable = eqx.field(static=True)
    support: str = eqx.field(static=True)

    def __init__(self, where: Callable[[PyTree], GMRFImage] = gmrf_image):
        """**Arguments:**

        - `where`: `where(model)` selects the [`eqmodels.GMRFImage`][] (default:
          the model itself).
        """
        if not callable(where):
            raise TypeError(
                "`where` must be a function of the model returning its GMRFImage "
                f"(e.g. `lambda m: m.image`), got {where!r}."
            )
        self.where = where
        self.support = "real"

    def log_density(self, value: PyTree) -> Scalar:
        """**Arguments:** `value`, the [`eqmodels.GMRFImage`][] `where` selects.

        **Returns:** the normalised log density of its `params` given its
        `sigma`, `rho`.
        """
        if not isinstance(value, GMRFImage):
            raise TypeError(
                f"GMRFHyperPrior's `where` selected a {type(value).__name__}, not a "
                "GMRFImage: build the model as `em.GMRFImage(grid, sigma=, rho=)` "
                "(or pass `where=lambda m: m.<its GMRFImage>`)."
            )
        x: Float[Array, "ny nx"] = value.params
        n = x.size
        if not value.centred:
            return -0.5 * jnp.sum(x**2) - 0.5 * n * np.log(2 * np.pi)
        lam = jnp.asarray(laplacian_eigenvalues(*x.shape), x.dtype)
        tau, kappa = gmrf_tau_kappa(value.sigma, value.rho, lam)
        d = x - jnp.asarray(value.mean, x.dtype)
        return gmrf_log_density(d, tau, kappa)
