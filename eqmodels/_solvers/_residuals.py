"""The one place where solvers reach into an objective's residuals.

Gauss-Newton and Levenberg-Marquardt need a residual vector `r` with
`Σ r² = Σ_d w_d χ²_d`. Every residual access of `eqmodels._solvers` goes through
`objective_residuals`; when `Objective.residuals` lands (issue 7) this function
becomes a call to it.
"""

import jax.numpy as jnp
from jaxtyping import Array, Float

from .._terms._base import AbstractDataTerm, as_image


def objective_residuals(objective, image) -> Float[Array, " m"]:
    """The weighted residual vector of a least-squares objective.

    **Arguments:**

    - `objective`: an [`eqmodels.Objective`][] whose terms all provide
      `residuals(image)` (every built-in data term does), or a single such term.
    - `image`: an `(ny, nx)` array or an image model.

    **Returns:** `r = concat_i sqrt(w_i) r_i(I)` with `Σ r² = Σ_i w_i χ²_i`.

    **Raises:** `TypeError` naming the first term without residuals (regularizers
    such as entropy or TV are not sums of squares). Weights must be ≥ 0.
    """
    terms = getattr(objective, "terms", None)
    if terms is None:
        terms, weights = (objective,), None
    else:
        weights = objective.weights
    names = getattr(objective, "names", None) or tuple(type(t).__name__ for t in terms)
    for name, term in zip(names, terms):
        if not (isinstance(term, AbstractDataTerm) or hasattr(term, "residuals")):
            raise TypeError(
                f"term {name!r} ({type(term).__name__}) has no `residuals`: "
                "Gauss-Newton / Levenberg-Marquardt need every term to be a sum of "
                "squares. Use a gradient solver (`solver='lbfgs'`) for this "
                "objective, or drop the term."
            )
    img = as_image(image)
    parts = []
    for i, term in enumerate(terms):
        r = jnp.ravel(term.residuals(img))
        if weights is not None:
            r = jnp.sqrt(weights[i]).astype(r.dtype) * r
        parts.append(r)
    return jnp.concatenate(parts)
