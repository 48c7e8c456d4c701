"""Stop codes shared by the solver loops."""

import jax.numpy as jnp


#: Why a solve stopped, indexed by `Solution.result`.
REASONS = ("max_steps", "gtol", "ftol", "nonfinite", "linesearch")
RUNNING, MAX_STEPS, GTOL, FTOL, NONFINITE, LINESEARCH = -1, 0, 1, 2, 3, 4


def stop_reason(f, fprev, g_inf, ftol, gtol):
    """The stop code after a step (scipy's L-BFGS-B criteria): non-finite value or
    gradient, largest gradient component ≤ `gtol`, or relative decrease
    `(fprev − f) ≤ ftol · max(|f|, |fprev|, 1)`."""
    finite = jnp.isfinite(f) & jnp.isfinite(g_inf)
    denom = jnp.maximum(jnp.maximum(jnp.abs(f), jnp.abs(fprev)), 1.0)
    small_f = (fprev - f) <= ftol * denom
    return jnp.where(
        ~finite,
        NONFINITE,
        jnp.where(g_inf <= gtol, GTOL, jnp.where(small_f, FTOL, RUNNING)),
    ).astype(jnp.int32)
