"""Numerical helpers and constants shared by the image models, data terms and
regularizers."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float


#: A Gaussian's full width at half maximum in units of its standard deviation,
#: `sqrt(8 ln 2)`.
FWHM_PER_SIGMA: float = math.sqrt(8.0 * math.log(2.0))


def asarray(x: ArrayLike | list | tuple, dtype=None) -> Array:
    """`jnp.asarray(x, dtype)`, without a start-up cost of jax 0.10.

    There, `jnp.asarray` of host data (a numpy array or scalar, a list, a Python
    scalar with a `dtype`) compiles a small program per new shape, to stage it or
    to cast it (a persistent-cache lookup when warm), which adds up when building
    an objective. Host data are cast on the host to the
    dtype `jnp.asarray` would give (`dtype`, else numpy's, canonicalised for the
    x64 setting) and then copied: the same array (dtype, no weak type), no
    compilation. JAX arrays, tracers and Python scalars without a `dtype` (weakly
    typed) go to `jnp.asarray` unchanged.
    """
    scalar = isinstance(x, (bool, int, float, complex))
    if not isinstance(x, jax.Array) and not (scalar and dtype is None):
        host = (
            scalar
            or isinstance(x, (np.ndarray, np.generic))
            or (
                isinstance(x, (list, tuple))
                and not any(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(x))
            )
        )
        if host:
            x = np.asarray(x)
            if x.dtype != object:
                dtype = jax.dtypes.canonicalize_dtype(
                    x.dtype if dtype is None else dtype
                )
                x = x.astype(dtype, copy=False)
    return jnp.asarray(x, dtype)


def safe_sqrt(s: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """`sqrt(s)` for `s >= 0`, with value **and derivative** 0 where `s == 0` (and
    NaN where `s` is NaN).

    The "double where" pattern: `jnp.sqrt` only ever sees positive inputs, and the
    branch that is not taken gets a zero cotangent, so gradients stay finite (no
    NaN from `1 / (2 sqrt(0))`).
    """
    ok = ~(s <= 0)  # NaN passes through (`s > 0` would turn it into 0)
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, s, 1.0)), 0.0)


def safe_hypot(a: Float[Array, "*s"], b: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """`sqrt(a² + b²)` scaled by `m = max(|a|, |b|)` (`m sqrt((a/m)² + (b/m)²)`), so
    that differences whose squares underflow (below ~1e-19 in float32) keep their
    value and their derivative `(a, b)/|(a, b)|`; value and derivative 0 where
    `a = b = 0` or both are subnormal (the double-where pattern, as `safe_sqrt`),
    NaN where either is."""
    # The result does not depend on the scale `m` (degree-1 homogeneous), so `m`
    # carries no gradient: differentiating through it would form `a / m²`, whose
    # `m²` underflows for the very differences the scaling is for.
    m = jax.lax.stop_gradient(jnp.maximum(jnp.abs(a), jnp.abs(b)))
    # Subnormal scales count as 0: XLA flushes them, so `a / m` would be 0 / 0.
    ok = ~(m < jnp.finfo(m.dtype).tiny)
    ms = jnp.where(ok, m, 1.0)
    q = jnp.where(ok, (a / ms) ** 2 + (b / ms) ** 2, 1.0)  # in [1, 2] where ok
    return jnp.where(ok, ms * jnp.sqrt(q), 0.0)
