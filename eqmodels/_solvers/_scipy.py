"""A bridge to scipy's L-BFGS-B, for like-for-like comparisons with eht-imaging."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import PyTree, Scalar

from .._compile import run_once_jit
from .._numerics import asarray
from ._common import (
    FTOL,
    GTOL,
    is_real_float_array,
    LINESEARCH,
    MAX_STEPS,
    NONFINITE,
)
from ._results import as_result
from ._solve import check_objective, check_tolerance, Solution


@run_once_jit
def _value_and_grad(x, unravel_static, objective):
    unravel, static = unravel_static

    def f(x):
        return objective(eqx.combine(unravel(x), static))

    return jax.value_and_grad(f)(x)


@run_once_jit
def _value_and_report(model, objective):
    report = dict(objective.report(model)) if hasattr(objective, "report") else {}
    return objective(model), report


def _stop_reason(res, value) -> int:
    """eqmodels' stop code for scipy's L-BFGS-B result. From `res.status` (0
    converged, 1 an iteration or evaluation limit, 2 an abnormal stop) and, for
    a convergence, its message, whose wording changed in scipy 1.15
    (`REL_REDUCTION_OF_F_<=_FACTR*EPSMCH` became `RELATIVE REDUCTION OF F <=
    FACTR*EPSMCH`, `NORM_OF_PROJECTED_GRADIENT_<=_PGTOL` `NORM OF PROJECTED
    GRADIENT <= PGTOL`)."""
    if not np.isfinite(value):
        return NONFINITE
    message = str(res.message).upper().replace("_", " ")
    if res.status == 0:
        return GTOL if "PROJECTED GRADIENT" in message else FTOL
    if res.status == 2:  # an abnormal line search, or rounding errors
        return LINESEARCH
    return MAX_STEPS


def solve_scipy(
    objective: Callable[[Any], Scalar],
    model: PyTree,
    *,
    max_steps: int = 100,
    maxcor: int = 50,
    maxls: int = 40,
    ftol: float = 1e-10,
    gtol: float = 1e-10,
    params: PyTree[Callable[[Any], bool] | bool] = is_real_float_array,
) -> Solution:
    """Minimise `objective(model)` with scipy's L-BFGS-B (`scipy.optimize.minimize`),
    the objective's value and gradient computed by one compiled JAX call per
    evaluation. Defaults are eht-imaging's (`maxcor=50`, `maxls=40`): for
    like-for-like comparisons. Needs scipy (the `scipy` extra).

    Each evaluation crosses between host and device; [`eqmodels.solve`][] keeps the
    whole loop compiled instead.

    **Arguments:**

    - `objective`, `model`, `params`: as for [`eqmodels.solve`][].
    - `max_steps`: scipy's `maxiter`.
    - `maxcor`, `maxls`: scipy's L-BFGS-B options (memory size, line-search
      evaluations).
    - `ftol`, `gtol`: scipy's `ftol` and `gtol` (same meaning as in `solve`).

    **Returns:** a [`eqmodels.Solution`][] (`stats` adds scipy's `message` and
    `evaluations`, scipy's `nfev`).
    """
    try:
        import scipy.optimize
    except ImportError as e:  # pragma: no cover - scipy is a dev dependency
        raise ImportError(
            "solve_scipy needs scipy: `pip install eqmodels[scipy]`."
        ) from e
    check_objective(objective, model)
    for name, val in (("max_steps", max_steps), ("maxcor", maxcor), ("maxls", maxls)):
        if isinstance(val, bool) or not isinstance(val, int | np.integer) or val < 1:
            raise ValueError(f"`{name}` must be an int ≥ 1, got {val!r}.")
    check_tolerance("ftol", ftol)
    check_tolerance("gtol", gtol)
    p, static = eqx.partition(model, params)
    x0, unravel = ravel_pytree(p)
    dtype = x0.dtype
    args = (jax.tree_util.Partial(unravel), static)

    def fun(x):
        v, g = _value_and_grad(asarray(x, dtype), args, objective)
        return float(v), np.asarray(g, np.float64)

    res = scipy.optimize.minimize(
        fun,
        np.asarray(x0, np.float64),
        jac=True,
        method="L-BFGS-B",
        options=dict(
            maxiter=int(max_steps),
            maxcor=int(maxcor),
            maxls=int(maxls),
            ftol=float(ftol),
            gtol=float(gtol),
        ),
    )
    final = eqx.combine(unravel(asarray(res.x, dtype)), static)
    # The value at `res.x`, not `res.fun`: after an abnormal line search scipy
    # returns the last accepted `x` with the last *trial's* value.
    value, report = _value_and_report(final, objective)
    return Solution(
        model=final,
        value=value.astype(dtype),
        report=report,
        steps=asarray(res.nit, jnp.int32),
        result=as_result(asarray(_stop_reason(res, float(value)), jnp.int32)),
        stats={
            "max_steps": asarray(max_steps, jnp.int32),
            "evaluations": asarray(res.nfev, jnp.int32),
            "message": str(res.message),
        },
    )
