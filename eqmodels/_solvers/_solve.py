"""`solve`: a whole minimisation in one compiled program."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Bool, Float, Int, PyTree, Scalar

from .._compile import run_once_jit
from ._base import (
    AbstractSolver,
    iterate,
    ObjectiveFunction,
    reports_with_value,
    SolverOptions,
)
from ._common import is_real_float_array
from ._jacobian import auto_chunk
from ._least_squares import AbstractLeastSquaresSolver, spd_solve  # noqa: F401
from ._results import failed, REASONS, RESULTS
from ._solvers import as_solver


class Solution(eqx.Module):
    """What [`eqmodels.solve`][] returns (batched along a leading axis under
    `vmap` and in a survey).

    - `model`: the final model (same structure as the initial one).
    - `value`: the objective at `model`.
    - `report`: `{name: value}` of each term at `model` (`objective.report`), or an
      empty dict when the objective has no `report`.
    - `steps`: iterations taken.
    - `result`: why the solve stopped, an [`eqmodels.RESULTS`][] member
      (`reason` gives its name as text) — `max_steps`, `gtol` (gradient below
      tolerance), `ftol` (relative decrease below tolerance), `nonfinite` (the
      objective or its gradient is NaN/inf) or `linesearch` (no decrease found
      along the search direction within the line-search budget: stuck at
      rounding level, or at the start a badly scaled problem). On `nonfinite`,
      the built-in solvers' `model`, `value` and `steps` are those of the last
      point where the value and gradient were finite (L-BFGS shortens its step
      instead, and stops there only when the start itself is not finite).
    - `converged`: `result` is `gtol` or `ftol`, and (least-squares solvers) the
      data constrain every direction of the parameters at the solution
      (`stats["null_directions"] == 0`): a parameter the data do not constrain
      (a Gaussian's position fitted to amplitudes alone) ends wherever the
      solver happened to push it, and is not claimed converged;
      [`eqmodels.unconstrained_parameters`][] names them (nothing is warned: a
      gauge freedom or an underdetermined pixel fit is often intended).
    - `worsened`: the final `value` is above the objective at the initial model
      (`stats["initial_value"]`): the solve made things worse (a step too large,
      a diverging schedule), whatever `result` says. A field to check, not a
      warning (it is an array, also under `jit`, `vmap` and in a survey).
    - `stats`: `{"max_steps": ..., "initial_value": ..., "evaluations": ...}`
      (the objective at the initial model; objective evaluations, Jacobians
      counting as one, not counting the initial value's) and whatever else the
      solver's `postprocess` adds: the least-squares solvers add `rank` (the
      numerical rank of the Jacobian at the solution), `null_directions`
      (parameters minus rank) and `unconstrained` (per flat parameter, in
      `jax.flatten_util.ravel_pytree` order, whether it lies mostly along a
      direction the data do not constrain).
    """

    model: PyTree
    value: Float[Array, "*batch"]
    report: dict[str, Float[Array, "*batch"]]
    steps: Int[Array, "*batch"]
    result: RESULTS
    stats: dict[str, Array]

    @property
    def converged(self) -> Bool[Array, "*batch"]:
        stopped = (self.result == RESULTS.gtol) | (self.result == RESULTS.ftol)
        null = self.stats.get("null_directions")
        return stopped if null is None else stopped & (null == 0)

    @property
    def worsened(self) -> Bool[Array, "*batch"]:
        return self.value > self.stats["initial_value"]

    @property
    def reason(self) -> str | np.ndarray:
        """`result` as text (an array of strings when batched)."""
        hits = [np.asarray(self.result == getattr(RESULTS, n)) for n in REASONS]
        out = np.select(hits, REASONS, REASONS[0])
        return str(out) if out.ndim == 0 else out


#: The loop options (traced), as `make_options` builds them.
_Options = SolverOptions


@run_once_jit
def _solve_jit(objective, model, solver, opts, filter_spec, chunk, throw):
    return solve_traced(objective, model, solver, opts, filter_spec, chunk, throw=throw)


#: Incremented every time the solve program is traced (tests count compiles).
TRACE_COUNT = [0]


def solve_traced(
    objective, model, solver, opts, filter_spec, chunk, axis_name=None, throw=False
) -> Solution:
    """The body of `solve`, traceable (used by `solve` and `survey`; `survey`
    passes the name of its `vmap` axis, see `batch_while_loop`): the one loop,
    [`eqmodels.AbstractSolver`][]'s four methods."""
    TRACE_COUNT[0] += 1
    params, static = eqx.partition(model, filter_spec)
    fn = ObjectiveFunction(
        objective=objective,
        static=static,
        jacobian_chunk=int(chunk or 0),
        reports=reports_with_value(objective),
    )
    y, state, result = iterate(solver, fn, params, opts, axis_name)
    y, value, report, stats = solver.postprocess(fn, y, state, opts, result)
    stats = dict(stats)
    # The objective at the start: `Solution.worsened` compares the final value
    # with it (a solver may end worse than it began: too large a step, a
    # divergent schedule). L-BFGS's first evaluation is there and reports it:
    # a second copy of the objective in the program would cost its tracing,
    # lowering and loading again (a warm process's first solve).
    initial_value = stats.pop("initial_value", None)
    if initial_value is None:
        initial_value = fn.value(params)
    final = fn.model(y)
    if report is None:
        report = fn.report(y)
    if throw:
        # `max_steps` is no failure: a recipe that runs a fixed number of steps
        # stops there by design.
        value = result.error_if(value, failed(result))
    return Solution(
        model=final,
        value=value,
        report=dict(report),
        steps=jnp.asarray(state.steps).astype(jnp.int32),
        result=result,
        stats={"max_steps": opts.max_steps, "initial_value": initial_value, **stats},
    )


def check_tolerance(name: str, val) -> None:
    """A stopping tolerance: a real scalar, finite and ≥ 0 (when not traced)."""
    real = isinstance(val, int | float | np.integer | np.floating) or (
        hasattr(val, "dtype")
        and np.ndim(val) == 0
        and (
            jnp.issubdtype(val.dtype, jnp.floating)
            or jnp.issubdtype(val.dtype, jnp.integer)
        )
    )
    if isinstance(val, bool) or not real:
        raise TypeError(f"`{name}` must be a real scalar, got {val!r}.")
    if not isinstance(val, jax.core.Tracer) and not (np.isfinite(val) and val >= 0):
        raise ValueError(
            f"`{name}` must be a finite number ≥ 0 (0: stop only when the test holds "
            f"exactly), got {val!r}."
        )


def make_options(max_steps, ftol, gtol, dtype) -> _Options:
    check_tolerance("ftol", ftol)
    check_tolerance("gtol", gtol)
    if isinstance(max_steps, bool) or not (
        isinstance(max_steps, int | np.integer)
        or (
            hasattr(max_steps, "dtype")
            and np.ndim(max_steps) == 0
            and jnp.issubdtype(max_steps.dtype, jnp.integer)
        )
    ):
        raise TypeError(f"`max_steps` must be an int ≥ 0, got {max_steps!r}.")
    if not isinstance(max_steps, jax.core.Tracer) and not (0 <= int(max_steps) < 2**31):
        raise ValueError(f"`max_steps` must be in [0, 2**31 − 1], got {max_steps}.")
    return SolverOptions(
        max_steps=_scalar(max_steps, np.int32),
        ftol=_scalar(ftol, dtype),
        gtol=_scalar(gtol, dtype),
    )


def _scalar(x, dtype):
    """A 0-d array of `dtype`: numpy for Python numbers (no device dispatch per
    call: `filter_jit` traces numpy arrays too), JAX for JAX values (traced under
    an outer `jit` or `vmap`)."""
    if isinstance(x, jax.Array):
        return x.astype(dtype)
    return np.asarray(x, dtype)


def _param_dtype(model, filter_spec):
    leaves = jax.tree.leaves(eqx.filter(model, filter_spec))
    if not leaves:
        raise ValueError(
            "`model` has no parameters to optimise: no leaf passes the `params` "
            "filter (by default, real floating-point arrays)."
        )
    for x in leaves:
        if not is_real_float_array(x):
            raise ValueError(
                f"the `params` filter selects a leaf of type "
                f"{getattr(x, 'dtype', type(x).__name__)}: the solvers optimise real "
                "floating-point arrays; hold the others fixed (the default "
                "`params`, `eqmodels.is_real_float_array`, does)."
            )
    return jnp.result_type(*leaves)


def check_objective(objective, model=None):
    """Refuse what cannot be an objective; with `model`, let the objective refuse
    a model it cannot take (its `check_model`, as `WithGains` has), before
    anything compiles."""
    if not callable(objective):
        raise TypeError(
            "`objective` must be callable as `objective(model) -> scalar` (an "
            f"`eqmodels.Objective` or any term), got {type(objective).__name__}."
        )
    if isinstance(model, np.ndarray | np.generic):
        # A porting user's start image (eht-imaging's imagers start from one):
        # solved as it is, its pixels would be fitted directly, with nothing to
        # keep them positive (many come back < 0).
        raise TypeError(
            "`model` is a numpy array: give the image model to optimise, e.g. "
            "`em.PixelImage.from_image(image, grid)` (log pixels, always positive: "
            "eht-imaging's default), or `jnp.asarray(image)` to fit the raw pixels "
            "themselves."
        )
    check = getattr(objective, "check_model", None)
    if model is not None and callable(check):
        check(model)


def _strongly_typed(model, params):
    """The parameters as strongly typed arrays: a weakly typed leaf
    (`jnp.asarray(0.5)`) in an otherwise equal initial model is another argument
    type to the compiled program, which would compile again."""

    def strong(x):
        if getattr(x, "weak_type", False):
            return jax.lax.convert_element_type(x, x.dtype)
        return x

    # `params` is an `eqx.partition` filter: a function or a pytree of them.
    selected, rest = eqx.partition(model, params)
    return eqx.combine(jax.tree.map(strong, selected), rest)


def solve(
    objective: Callable[[Any], Scalar],
    model: PyTree,
    solver: AbstractSolver | str | optax.GradientTransformation = "lbfgs",
    *,
    max_steps: int | Int[Array, ""] = 100,
    ftol: float | Float[Array, ""] = 1e-10,
    gtol: float | Float[Array, ""] = 1e-10,
    params: PyTree[Callable[[Any], bool] | bool] = is_real_float_array,
    throw: bool = False,
) -> Solution:
    """Minimise `objective(model)` over the model's parameters, the whole loop in one
    compiled program (no host round-trip per step).

    The objective and the model are *arguments* of the compiled program: a second
    solve with other data, weights, initial model, `max_steps` or tolerances of the
    same structure reuses it. `solve` works under `jax.vmap` (each member stops on
    its own criteria; the batch runs until the last one stops).

    **Arguments:**

    - `objective`: `objective(model) -> scalar`, usually an [`eqmodels.Objective`][]
      (or an [`eqmodels.WithGains`][] of one, for a joint image + gain solve of
      the model pair `(image_model, gains)`); its `report(model)` (if any) fills
      `Solution.report`. An objective with `names` (a tuple) and
      `value_and_report(model) -> (value, {name: value})`, as those two have,
      is reported from the same evaluation as its value (no second copy of it
      in the compiled program).
    - `model`: the initial image model — a [`eqmodels.PixelImage`][] (masked or
      not), a parametric model, a user's neural field: any module whose
      floating-point leaves are the parameters. (A bare numpy image is refused:
      `PixelImage.from_image(image, grid)` fits positive log pixels;
      `jnp.asarray(image)` fits the raw pixels.)
    - `solver`: an [`eqmodels.LBFGS`][] (default: backtracking line search;
      `LBFGS(linesearch="zoom")` for optax's zoom search), [`eqmodels.Adam`][], any
      `optax.GradientTransformation`, [`eqmodels.GaussNewton`][] or
      [`eqmodels.LevenbergMarquardt`][] (least-squares objectives only); or a name:
      `"lbfgs"`, `"lbfgs-zoom"`, `"adam"`, `"gauss-newton"`,
      `"levenberg-marquardt"`.
    - `max_steps`: the most iterations.
    - `ftol`: stop when `0 ≤ f_prev − f ≤ ftol · max(|f_prev|, |f|, 1)` (scipy's
      L-BFGS-B criterion; an increase never stops a solve).
    - `gtol`: stop when the largest gradient component is ≤ `gtol`.
    - `params`: which leaves of `model` are optimised (an `eqx.partition` filter:
      a function of a leaf, or a pytree of them and booleans that is a prefix of
      the model, e.g. `(False, em.is_real_float_array)` to hold the image of an
      `(image_model, gains)` pair fixed; default: real floating-point arrays); the
      others (a mask's indices, integer or complex leaves) are held fixed.
    - `throw`: raise an error (`eqx.error_if`, also inside `jit`) when the solve
      fails: `result` is `nonfinite` or `linesearch`. Reaching `max_steps` is not
      a failure (recipes run a fixed number of steps). Default `False`: the
      `Solution` says why it stopped, and nothing is raised.

    **Returns:** a [`eqmodels.Solution`][].
    """
    check_objective(objective, model)
    solver = as_solver(solver)
    model = _strongly_typed(model, params)
    dtype = _param_dtype(model, params)
    opts = make_options(max_steps, ftol, gtol, dtype)
    chunk = 0
    if isinstance(solver, AbstractLeastSquaresSolver):
        chunk = auto_chunk(
            objective, model, params, solver.chunk_size, solver.memory_budget
        )
    if not isinstance(throw, bool):
        raise TypeError(f"`throw` must be True or False, got {throw!r}.")
    return _solve_jit(objective, model, solver, opts, params, chunk, throw)


def _flat_names(model, params) -> list[str]:
    """The name of each flat parameter (`ravel_pytree` order): the leaf's path in
    the model, with the element's index for an array leaf."""
    selected = eqx.filter(model, params)
    names = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(selected)[0]:
        base = jax.tree_util.keystr(path).lstrip(".") or "model"
        shape = np.shape(leaf)
        if shape == ():
            names.append(base)
        else:
            names.extend(f"{base}{list(i)}" for i in np.ndindex(*shape))
    return names


def unconstrained_parameters(
    sol: Solution, params: PyTree[Callable[[Any], bool] | bool] = is_real_float_array
) -> list[str]:
    """The parameters of a least-squares solve's model that lie mostly along
    directions the data do not constrain at the solution (`sol.stats
    ["unconstrained"]`), named by their path in the model (`"x0"`,
    `"[1].phase[0, 5]"`); `params` is the filter given to `solve`. Empty when the
    solver reports no such direction (or is not a least-squares solver).

    A gauge freedom (a phase reference not held fixed, an overall phase) and an
    underdetermined pixel fit are the usual reasons; a position fitted to
    amplitudes alone is another. Such parameters end wherever the solver pushed
    them, which is why `Solution.converged` is `False` then: hold them fixed
    (`params=`), add data that constrain them, or a regularizer.
    """
    null = sol.stats.get("null_directions")
    if null is None or np.ndim(null) != 0 or int(null) == 0:
        return []
    mask = np.asarray(sol.stats["unconstrained"])
    names = _flat_names(sol.model, params)
    if len(names) != mask.size:
        raise ValueError(
            f"`params` selects {len(names)} parameters but the solve had "
            f"{mask.size}: give the filter the solve was given."
        )
    return [n for n, m in zip(names, mask) if m]
