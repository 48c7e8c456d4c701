"""Numerical helpers and constants shared by the image models, data terms and
regularizers."""

import math

import jax.numpy as jnp
from jaxtyping import Array, Float


#: A Gaussian's full width at half maximum in units of its standard deviation,
#: `sqrt(8 ln 2)`.
FWHM_PER_SIGMA: float = math.sqrt(8.0 * math.log(2.0))


def safe_sqrt(s: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """`sqrt(s)` for `s >= 0`, with value **and derivative** 0 where `s == 0`.

    The "double where" pattern: `jnp.sqrt` only ever sees positive inputs, and the
    branch that is not taken gets a zero cotangent, so gradients stay finite (no
    NaN from `1 / (2 sqrt(0))`).
    """
    ok = s > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, s, 1.0)), 0.0)
