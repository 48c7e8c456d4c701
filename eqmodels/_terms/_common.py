"""Helpers shared by the closure and amplitude data terms.

NaN safety: a row of weight exactly 0 (padding) must contribute exactly 0 to the
value and to the gradient, whatever its model visibilities (even 0, where `|V|`,
`ln|V|` and `arg V` have no derivative). The helpers below use the "double where"
pattern: the unsafe operation only ever sees safe inputs, and the branch that is
not taken gets a zero cotangent.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Complex, Float

from .._forward._base import AbstractForwardModel
from .._validation import as_real, check_nonempty, check_positive, is_concrete


def check_forward(forward, k: int | None, term: str) -> None:
    """`forward` is a forward model whose points are `(n,)` (k None) or `(n, k)`."""
    if not isinstance(forward, AbstractForwardModel):
        raise TypeError(
            f"`forward` must be a forward model (`DirectFT`, `SeparableFT`, `NUFFT`), "
            f"got {type(forward).__name__}; or build the term with "
            f"`{term}.from_data(data, grid, forward='direct')`."
        )
    shape = tuple(forward.u.shape)
    want = "(n,)" if k is None else f"(n, {k})"
    ok = len(shape) == 1 if k is None else (len(shape) == 2 and shape[1] == k)
    if not ok:
        raise ValueError(
            f"`forward` has points of shape {shape} but {term} needs {want}: one "
            + ("point per row." if k is None else f"point per leg, {k} legs per row.")
        )


def check_values(name: str, values, n: int, dtype) -> np.ndarray | jax.Array:
    """Real, finite, shape `(n,)`."""
    values = as_real(name, values)
    if is_concrete(values) and np.shape(values) != (n,):
        raise ValueError(
            f"`{name}` has shape {np.shape(values)} but `forward` has {n} rows; "
            "they must match (one value per row)."
        )
    return jnp.asarray(values, dtype)


def weight_from_sigma(sigma, n: int, dtype) -> Float[Array, " n"]:
    """`1/σ²` after checking that `σ` is finite, > 0 and of shape `(n,)`."""
    sigma = as_real("sigma", sigma)
    check_nonempty("sigma", sigma)
    if is_concrete(sigma):
        if np.shape(sigma) != (n,):
            raise ValueError(
                f"`sigma` has shape {np.shape(sigma)} but `forward` has {n} rows; "
                "they must match (one sigma per row)."
            )
        check_positive("sigma", sigma)
        return jnp.asarray(1.0 / np.asarray(sigma, np.float64) ** 2, dtype)
    return jnp.asarray(1.0 / sigma**2, dtype)


def abs2(z: Complex[Array, "*s"]) -> Float[Array, "*s"]:
    """`|z|²` without a square root."""
    return jax.lax.real(z) ** 2 + jax.lax.imag(z) ** 2


def safe_abs(sq: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """`sqrt(sq)`, with value and derivative 0 where `sq == 0` (no NaN)."""
    ok = sq > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, sq, 1.0)), 0.0)


def live_rows(weight: Float[Array, " n"]) -> Bool[Array, " n"]:
    """Rows that contribute (weight > 0)."""
    return weight > 0


def where_live(
    live: Bool[Array, " n"], x: Float[Array, " n *k"], fill: float = 1.0
) -> Float[Array, " n *k"]:
    """`x` on live rows, `fill` on dead (zero-weight) rows."""
    live = live.reshape(live.shape + (1,) * (x.ndim - 1))
    return jnp.where(live, x, jnp.asarray(fill, x.dtype))


def values_dtype(forward: AbstractForwardModel):
    """The (real, complex) dtypes of a term built on `forward`."""
    dtype = forward.dtype
    return dtype, (np.complex64 if dtype == np.float32 else np.complex128)


def check_radians(name: str, x: Float[ArrayLike, "*s"]) -> None:
    """Phases beyond 2π are almost always degrees by mistake."""
    if is_concrete(x) and np.size(x) and float(np.max(np.abs(x))) > 2 * np.pi + 1e-9:
        raise ValueError(
            f"`{name}` reaches |{name}| = {float(np.max(np.abs(x))):.4g} > 2π: closure "
            "phases must be in radians (eht-imaging stores degrees); convert with "
            "`np.deg2rad`."
        )
