"""Solvers that run an optax transformation on the objective's gradient."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree, Scalar

from .._numerics import asarray
from .._validation import scalar_leaf
from ._base import AbstractSolver, ObjectiveFunction
from ._checks import real
from ._common import GTOL, inf_norm, LINESEARCH, NONFINITE, RUNNING, stop_reason
from ._results import as_result, RESULTS


class OptaxState(eqx.Module):
    """The state of a solve by an optax transformation.

    - `opt_state`: the transformation's state.
    - `value`, `grad`: the objective and its gradient at the current point.
    - `steps`: steps taken; `evaluations`: objective evaluations.
    - `code`: the stop code (`-1` while running, else a `RESULTS` value).
    """

    opt_state: PyTree
    value: Scalar
    grad: PyTree
    steps: Int[Array, ""]
    evaluations: Int[Array, ""]
    code: Int[Array, ""]


def _match_types(init, like):
    """Cast `init`'s leaves to the dtype (and weak type) of `like`'s, so that the
    loop carry keeps one type (optax's L-BFGS state changes type after its first
    update, which is what makes a naive loop recompile)."""

    def cast(x, s):
        x = asarray(x)
        if x.dtype == s.dtype and x.weak_type == s.weak_type:
            return x
        # Observed: weakly typed scalars in the initial state become strongly
        # typed after an update; a strongly typed cast matches them.
        return jax.lax.convert_element_type(x, s.dtype)

    return jax.tree.map(cast, init, like)


def _value_fn(fn: ObjectiveFunction, y0):
    dtypes = jax.tree.map(lambda a: a.dtype, y0)

    def value(p):
        # optax's zoom line search forms its trial points in the default float
        # (float64 under x64): back to the parameters' own dtypes.
        p = jax.tree.map(lambda a, dt: a.astype(dt), p, dtypes)
        return fn.value(p)

    return value


def _from_state(opt_state) -> bool:
    """Whether the transformation's state stores its line search's `value` and
    `grad` (optax L-BFGS, `store_grad=True` backtracking): reused, not evaluated
    again."""
    return (
        optax.tree.get(opt_state, "value", None) is not None
        and optax.tree.get(opt_state, "grad", None) is not None
    )


def _optax_step(tx, fn, y, state: OptaxState, options) -> tuple[PyTree, OptaxState]:
    value_fn = _value_fn(fn, y)
    from_state = _from_state(state.opt_state)
    f, g = state.value, state.grad
    if isinstance(tx, optax.GradientTransformationExtraArgs):
        updates, opt_state = tx.update(
            g, state.opt_state, y, value=f, grad=g, value_fn=value_fn
        )
    else:
        updates, opt_state = tx.update(g, state.opt_state, y)
    new_y = optax.apply_updates(y, updates)
    if from_state:
        # The line search evaluated the objective at the accepted point.
        fnew, gnew = (
            optax.tree.get(opt_state, "value"),
            optax.tree.get(opt_state, "grad"),
        )
        n = optax.tree.get(opt_state, "num_linesearch_steps", None)
        evals = asarray(1 if n is None else n, jnp.int32)
    else:
        fnew, gnew = jax.value_and_grad(value_fn)(new_y)
        evals = jnp.ones((), jnp.int32)
    code = stop_reason(fnew, f, inf_norm(gnew), options.ftol, options.gtol)
    if from_state:
        # A failed line search (optax's zoom search, after its last trial,
        # returns that trial even when the objective rose 25-fold) stops the
        # loop at the last point instead of accepting the rise. A successful
        # search may rise by rounding (optax's approximate Wolfe condition),
        # which is kept.
        failed = optax.tree.get(opt_state, "decrease_error", None)
        if failed is None:  # a transformation without that report
            rose = fnew > f + 1e-6 * jnp.abs(f)
        else:
            rose = (failed > 0) & (fnew > f)
        code = jnp.where((code != NONFINITE) & rose, LINESEARCH, code)
    # A step onto a non-finite value or gradient, or a failed line search, stops
    # the loop at the last good point (the optax state is not kept: the loop
    # ends here).
    ok = (code != NONFINITE) & (code != LINESEARCH)
    new_y, fnew, gnew = jax.tree.map(
        lambda a, b: jnp.where(ok, a, b), (new_y, fnew, gnew), (y, f, g)
    )
    return new_y, OptaxState(
        opt_state=opt_state,
        value=fnew,
        grad=gnew,
        steps=state.steps + ok.astype(jnp.int32),
        evaluations=state.evaluations + evals,
        code=code.astype(jnp.int32),
    )


def _optax_init(tx, fn, y, options) -> OptaxState:
    value_fn = _value_fn(fn, y)
    f0, g0 = jax.value_and_grad(value_fn)(y)
    g0_inf = inf_norm(g0)
    code0 = jnp.where(
        jnp.isfinite(f0) & jnp.isfinite(g0_inf),
        jnp.where(g0_inf <= options.gtol, GTOL, RUNNING),
        NONFINITE,
    ).astype(jnp.int32)
    zero = jnp.zeros((), jnp.int32)
    state = OptaxState(tx.init(y), f0, g0, zero, zero + 1, code0)
    # The types a step gives (optax's states change type after an update).
    like = jax.eval_shape(lambda s: _optax_step(tx, fn, y, s, options)[1], state)
    return OptaxState(
        opt_state=_match_types(state.opt_state, like.opt_state),
        value=asarray(f0, like.value.dtype),
        grad=g0,
        steps=zero,
        evaluations=zero + 1,
        code=code0,
    )


def _optax_terminate(state: OptaxState) -> tuple[Bool[Array, ""], RESULTS]:
    return state.code != RUNNING, as_result(state.code)


class AbstractGradientSolver(AbstractSolver[OptaxState]):
    """A solver that runs an optax transformation on the objective's gradient.

    Subclasses implement `transformation()`, called *inside* the compiled program:
    array fields (a learning rate) stay traced, so changing them does not recompile.
    When the transformation's state stores the line search's `value` and `grad`
    (optax L-BFGS, `store_grad=True` backtracking), the loop reuses them instead of
    evaluating the objective again. A step onto a non-finite value, or a failed
    line search, is not taken (the solve stops at the last point).
    """

    @abc.abstractmethod
    def transformation(self) -> optax.GradientTransformation:
        """**Returns:** the optax transformation one step applies."""

    def init(self, fn, y, options):
        return _optax_init(self.transformation(), fn, y, options)

    def step(self, fn, y, state, options):
        return _optax_step(self.transformation(), fn, y, state, options)

    def terminate(self, fn, y, state, options):
        return _optax_terminate(state)

    def postprocess(self, fn, y, state, options, result):
        return y, state.value, None, {"evaluations": state.evaluations}


class Adam(AbstractGradientSolver):
    """Adam (optax's `adam`). The learning rate is an array leaf: a new value does
    not recompile, and a survey can batch over it (one `Adam` per configuration)."""

    learning_rate: Float[Array, ""]
    b1: float = eqx.field(static=True)
    b2: float = eqx.field(static=True)

    def __init__(
        self,
        learning_rate: float | Float[ArrayLike, ""] = 1e-2,
        *,
        b1: float = 0.9,
        b2: float = 0.999,
    ):
        """**Arguments:**

        - `learning_rate`: step size (in the units of the parameters: for log
          pixels, 1e-2 changes a pixel by about 1 % per step).
        - `b1`, `b2`: decay rates of the moment estimates.
        """
        # A float leaf keeps its dtype (float32 stays float32); integers become floats.
        dtype = getattr(learning_rate, "dtype", None)
        self.learning_rate = scalar_leaf(
            "learning_rate",
            learning_rate,
            dtype if dtype is not None and np.issubdtype(dtype, np.floating) else None,
            positive=True,
        )
        self.b1 = real("b1", b1, high=1.0)
        self.b2 = real("b2", b2, high=1.0)

    def transformation(self) -> optax.GradientTransformation:
        return optax.adam(self.learning_rate, b1=self.b1, b2=self.b2)


class OptaxSolver(AbstractGradientSolver):
    """Any optax `GradientTransformation` (a chain, a schedule, `optax.lbfgs` with
    your own line search, ...).

    The transformation is static configuration: build it **once** and reuse the
    same object, since a new object (even an equal one) compiles a new program.
    Put hyperparameters you want to change without recompiling in an
    [`eqmodels.AbstractGradientSolver`][] subclass as array fields instead.
    """

    optimiser: optax.GradientTransformation = eqx.field(static=True)

    def __init__(self, optimiser: optax.GradientTransformation):
        """**Arguments:** `optimiser`, an `optax.GradientTransformation`."""
        if not isinstance(optimiser, optax.GradientTransformation):
            raise TypeError(
                "`optimiser` must be an optax.GradientTransformation (e.g. "
                f"`optax.adam(1e-2)`), got {type(optimiser).__name__}."
            )
        self.optimiser = optimiser

    def transformation(self) -> optax.GradientTransformation:
        return self.optimiser
