"""The one place where solvers reach into an objective's residuals.

Gauss-Newton and Levenberg-Marquardt need a residual vector `r` with
`Σ r² = Σ_d w_d χ²_d`. Every residual access of `eqmodels._solvers` goes through
`objective_residuals`, which hands over to `Objective.residuals` (one evaluation of
each shared transform for all data terms).
"""

import jax.numpy as jnp
from jaxtyping import Array, Float

from .._regularizers._base import AbstractRegularizer
from .._terms._base import (
    as_image,
    check_real_residuals,
    Objective,
    provides_residuals,
    term_grid,
)


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
    if isinstance(objective, Objective):
        for name, term in zip(objective.names, objective.terms):
            if not provides_residuals(term):
                raise TypeError(
                    f"term {name!r} ({type(term).__name__}) has no `residuals`: "
                    "Gauss-Newton / Levenberg-Marquardt need every term to be a sum "
                    "of squares. Use a gradient solver (`solver='lbfgs'`) for this "
                    "objective, or drop the term."
                )
        # One evaluation of each shared transform for all data terms.
        return objective.residuals(image)
    if not provides_residuals(objective):
        raise TypeError(
            f"{type(objective).__name__} has no `residuals`: Gauss-Newton / "
            "Levenberg-Marquardt need a sum of squares."
        )
    if isinstance(objective, AbstractRegularizer):
        # A regularizer's `residuals` gets an image array, as inside an objective
        # (a user's object of another kind gets the model, as it is given).
        image = as_image(image, term_grid(objective))
    r = objective.residuals(image)
    check_real_residuals(r, None, objective)
    return jnp.ravel(r)
