"""Stop codes and loop helpers shared by the solvers."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp


#: Stop codes inside the loops: `RUNNING`, else the value of an `RESULTS` member
#: (`_results.py`).
RUNNING, MAX_STEPS, GTOL, FTOL, NONFINITE, LINESEARCH = -1, 0, 1, 2, 3, 4


def stop_reason(f, fprev, g_inf, ftol, gtol):
    """The stop code after a step (scipy's L-BFGS-B criteria): non-finite value or
    gradient, largest gradient component ≤ `gtol`, or relative decrease
    `0 ≤ (fprev − f) ≤ ftol · max(|f|, |fprev|, 1)`. An increase (Adam, Gauss-Newton
    overshooting) is never convergence."""
    finite = jnp.isfinite(f) & jnp.isfinite(g_inf)
    denom = jnp.maximum(jnp.maximum(jnp.abs(f), jnp.abs(fprev)), 1.0)
    # (No previous value, `fprev = inf`, is no decrease.)
    small_f = jnp.isfinite(fprev) & (f <= fprev) & ((fprev - f) <= ftol * denom)
    return jnp.where(
        ~finite,
        NONFINITE,
        jnp.where(g_inf <= gtol, GTOL, jnp.where(small_f, FTOL, RUNNING)),
    ).astype(jnp.int32)


def inf_norm(tree) -> jax.Array:
    """The largest `|x|` over the array leaves of `tree`, and NaN when any entry is
    NaN or infinite. (XLA's vectorised `max` reduction on a CPU can drop a NaN: a
    plain `jnp.max(jnp.abs(g))` of a gradient with one NaN entry may be finite.)"""
    leaves = [x for x in jax.tree.leaves(tree) if x.size]
    if not leaves:
        return jnp.zeros(())
    largest = jnp.max(jnp.stack([jnp.max(jnp.abs(x)) for x in leaves]))
    return jnp.where(all_finite(leaves), largest, jnp.nan)


def all_finite(tree) -> jax.Array:
    """Whether every entry of every array leaf of `tree` is finite."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def batch_while_loop(running, body, init, axis_name=None):
    """`lax.while_loop(running, body, init)`, or, under `vmap(..., axis_name=...)`,
    a loop whose condition is reduced over the batch (`psum`) and whose `body(c,
    active)` leaves finished members unchanged itself.

    Under a plain `vmap`, JAX batches a loop with a per-member condition by running
    the body for every member and *selecting* every carry leaf afterwards, a full
    copy of the carry per iteration (for L-BFGS, its memory buffers). With the
    axis name, the body gates only what it changes.
    """
    if axis_name is None:
        return jax.lax.while_loop(running, lambda c: body(c, True), init)

    def cond(c):
        return jax.lax.psum(running(c).astype(jnp.int32), axis_name) > 0

    return jax.lax.while_loop(cond, lambda c: body(c, running(c)), init)


def gate(active, new, old):
    """`new` where `active`, else `old` (leaf by leaf; `active` may be `True`)."""
    if active is True:
        return new
    return jax.tree.map(lambda a, b: jnp.where(active, a, b), new, old)


def is_real_float_array(x: Any) -> bool:
    """The default `params` filter: real floating-point arrays (a model's complex
    or integer leaves are held fixed)."""
    return eqx.is_inexact_array(x) and not jnp.issubdtype(x.dtype, jnp.complexfloating)
