"""The solver protocol: what a solver implements, what it is given.

As Optimistix's `AbstractMinimiser`: a solver is an `init` / `step` /
`terminate` / `postprocess` quartet run by one loop ([`eqmodels.solve`][],
[`eqmodels.survey`][]), with its state an `eqx.Module` of named fields.
"""

import abc
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, Int, PyTree, Scalar

from ._common import batch_while_loop, gate, inf_norm, RUNNING, stop_reason
from ._residuals import objective_residuals
from ._results import as_result, RESULTS


_State = TypeVar("_State")


class SolverOptions(eqx.Module):
    """The loop options a solver's methods are given, all traced: new values do
    not recompile.

    - `max_steps`: the most steps (the loop stops when `state.steps` reaches it).
    - `ftol`: relative decrease at which to stop (see [`eqmodels.stop_test`][]).
    - `gtol`: largest gradient component at which to stop.
    """

    max_steps: Int[Array | np.ndarray, ""]
    ftol: Float[Array | np.ndarray, ""]
    gtol: Float[Array | np.ndarray, ""]


class ObjectiveFunction(eqx.Module):
    """What a solver's methods get as `fn`: the objective as a function of the
    parameters `y` (the leaves of the model that `params` selects; the others are
    held in `static`).

    - `fn(y) -> (value, report)`: the value, and the objective's `{name: value}`
      report from the same evaluation when the objective has `names` and
      `value_and_report` (else `None`: the driver reports after the loop).
    - `fn.value(y)`: the value alone.
    - `fn.residuals(y)`: the flat weighted residuals (least-squares solvers).
    - `fn.model(y)`: the whole model.
    """

    objective: Any
    static: PyTree
    jacobian_chunk: int = eqx.field(static=True)
    reports: bool = eqx.field(static=True)

    def model(self, y: PyTree) -> PyTree:
        return eqx.combine(y, self.static)

    def value(self, y: PyTree) -> Scalar:
        return _scalar(self.objective(self.model(y)))

    def __call__(self, y: PyTree) -> tuple[Scalar, dict[str, Scalar] | None]:
        if not self.reports:
            return self.value(y), None
        value, report = self.objective.value_and_report(self.model(y))
        value = _scalar(value)
        dtype = _dtype(y)
        # Cast to the parameters' dtype: a fixed loop-carry type.
        return value, {k: jnp.asarray(v).astype(dtype) for k, v in report.items()}

    def report_like(self, y: PyTree) -> dict[str, Scalar] | None:
        """Zeros shaped as `fn(y)`'s report (no evaluation), or `None`."""
        if not self.reports:
            return None
        return {name: jnp.zeros((), _dtype(y)) for name in self.objective.names}

    def report(self, y: PyTree) -> dict[str, Scalar]:
        """The objective's report at `y` (`{}` when it has none)."""
        if hasattr(self.objective, "report"):
            return dict(self.objective.report(self.model(y)))
        return {}

    def residuals(self, y: PyTree) -> Float[Array, " m"]:
        return objective_residuals(self.objective, self.model(y))


def _dtype(y):
    return ravel_pytree(y)[0].dtype


def _scalar(value):
    """The objective's value, refused (at trace time) when it is not a scalar:
    found at the solver's first evaluation, before JAX's "Gradient only defined
    for scalar-output functions" from deep inside a solver."""
    if jnp.shape(value) != ():
        raise TypeError(
            f"`objective` returned an array of shape {jnp.shape(value)}, "
            "not a scalar: a solver minimises one number. Sum the terms "
            "(`jnp.sum(...)`), or, for a least-squares objective, return Σ r² and "
            "give the residuals as a term's `residuals` (see docs/extending.md)."
        )
    return value


def reports_with_value(objective) -> bool:
    """An objective that names its terms and reports them with its value
    (`Objective`, `WithGains`, or a user's with the same two members)."""
    return isinstance(getattr(objective, "names", None), tuple) and callable(
        getattr(objective, "value_and_report", None)
    )


class AbstractSolver(eqx.Module, Generic[_State]):
    """Base class of the solvers run by [`eqmodels.solve`][] and
    [`eqmodels.survey`][], Optimistix-shaped: one loop calls

    ```
    y, state = y0, solver.init(fn, y0, options)
    done, result = solver.terminate(fn, y, state, options)
    while not done and state.steps < options.max_steps:
        y, state = solver.step(fn, y, state, options)
        done, result = solver.terminate(fn, y, state, options)
    y, value, report, stats = solver.postprocess(fn, y, state, options, result)
    ```

    `fn` is an [`eqmodels.ObjectiveFunction`][] of the parameters `y` (a pytree),
    `options` the traced [`eqmodels.SolverOptions`][]. The state is an
    `eqx.Module` of the solver's choosing with a `steps` field (an integer
    scalar, the steps `max_steps` limits); `step` must return a state of the same
    structure, shapes and dtypes as `init`'s (it is a `lax.while_loop` carry).
    Everything runs inside one compiled program: no Python control flow on
    values.
    """

    @abc.abstractmethod
    def init(self, fn: ObjectiveFunction, y: PyTree, options: SolverOptions) -> _State:
        """**Returns:** the state at the start `y`."""

    @abc.abstractmethod
    def step(
        self, fn: ObjectiveFunction, y: PyTree, state: _State, options: SolverOptions
    ) -> tuple[PyTree, _State]:
        """One step. **Returns:** `(y, state)` after it."""

    @abc.abstractmethod
    def terminate(
        self, fn: ObjectiveFunction, y: PyTree, state: _State, options: SolverOptions
    ) -> tuple[Bool[Array, ""], RESULTS]:
        """**Returns:** `(done, result)`: whether to stop (before the step limit),
        and why (read only when `done`)."""

    @abc.abstractmethod
    def postprocess(
        self,
        fn: ObjectiveFunction,
        y: PyTree,
        state: _State,
        options: SolverOptions,
        result: RESULTS,
    ) -> tuple[PyTree, Scalar, dict[str, Scalar] | None, dict[str, Array]]:
        """**Returns:** `(y, value, report, stats)`: the solution, the objective
        there, its report (`None`: the driver computes `fn.report(y)`), and
        statistics (`"evaluations"`: objective evaluations, a Jacobian counting
        as one; optionally `"initial_value"`, the objective at the start `y0`
        from the solver's own evaluation there, which the driver then does not
        repeat)."""

    def masked_step(
        self,
        fn: ObjectiveFunction,
        y: PyTree,
        state: _State,
        options: SolverOptions,
        active: Bool[Array, ""] | bool,
    ) -> tuple[PyTree, _State]:
        """The step of a member of a batch (`survey`) that may have finished: where
        `active` is false, `(y, state)` comes back unchanged. The default selects
        every leaf (`jnp.where`); a solver with large buffers in its state
        overrides it to leave them in place (see [`eqmodels.LBFGS`][]).
        `active` is the Python `True` outside a batch."""
        return gate(active, self.step(fn, y, state, options), (y, state))


def stop_test(
    value: Scalar,
    previous_value: Scalar,
    grad: PyTree,
    options: SolverOptions,
) -> tuple[Bool[Array, ""], RESULTS]:
    """The stopping test of the built-in solvers (scipy's L-BFGS-B criteria), for
    a solver's `terminate`: `nonfinite` when the value or the gradient is not
    finite, `gtol` when the largest gradient component is ≤ `gtol`, `ftol` when
    `0 ≤ previous_value − value ≤ ftol · max(|value|, |previous_value|, 1)` (an
    increase never stops; `previous_value = inf`: none yet).

    **Returns:** `(done, result)`.
    """
    code = stop_reason(
        value, previous_value, inf_norm(grad), options.ftol, options.gtol
    )
    return code != RUNNING, as_result(code)


def iterate(
    solver: AbstractSolver,
    fn: ObjectiveFunction,
    y0: PyTree,
    options: SolverOptions,
    axis_name: str | None = None,
):
    """The one loop: `init`, then `step` until `terminate` or `max_steps`.

    Under `vmap(..., axis_name=axis_name)` (a survey) the loop runs while any
    member runs, and each member's `masked_step` leaves it unchanged once it has
    finished (see `batch_while_loop`).

    **Returns:** `(y, state, result)`.
    """
    state0 = solver.init(fn, y0, options)

    def running(c):
        y, state = c
        done, _ = solver.terminate(fn, y, state, options)
        steps = jnp.asarray(state.steps)
        return ~done & (steps < jnp.asarray(options.max_steps).astype(steps.dtype))

    def body(c, active):
        return solver.masked_step(fn, *c, options, active)

    y, state = batch_while_loop(running, body, (y0, state0), axis_name)
    done, result = solver.terminate(fn, y, state, options)
    return y, state, RESULTS.where(done, result, RESULTS.max_steps)
