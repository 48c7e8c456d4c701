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
from ._common import FTOL, GTOL, LINESEARCH, MAX_STEPS, NONFINITE
from ._solve import check_objective, check_tolerance, Solution


@run_once_jit
def _value_and_grad(x, unravel_static, objective):
    unravel, static = unravel_static

    def f(x):
        return objective(eqx.combine(unravel(x), static))

    return jax.value_and_grad(f)(x)


@run_once_jit
def _report(model, objective):
    return dict(objective.report(model)) if hasattr(objective, "report") else {}


def solve_scipy(
    objective: Callable[[Any], Scalar],
    model: PyTree,
    *,
    max_steps: int = 100,
    maxcor: int = 50,
    maxls: int = 40,
    ftol: float = 1e-10,
    gtol: float = 1e-10,
    params: Callable[[Any], bool] = eqx.is_inexact_array,
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
    check_objective(objective)
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
    msg = str(res.message)
    if not np.isfinite(res.fun):
        code = NONFINITE
    elif "PROJ" in msg.upper() or "PGTOL" in msg.upper():
        code = GTOL
    elif "REL_REDUCTION" in msg.upper() or "FTOL" in msg.upper():
        code = FTOL
    elif "ABNORMAL" in msg.upper():
        code = LINESEARCH
    else:
        code = MAX_STEPS
    return Solution(
        model=final,
        value=asarray(res.fun, dtype),
        report=_report(final, objective),
        steps=asarray(res.nit, jnp.int32),
        result=asarray(code, jnp.int32),
        stats={
            "max_steps": asarray(max_steps, jnp.int32),
            "evaluations": asarray(res.nfev, jnp.int32),
            "message": msg,
        },
    )
