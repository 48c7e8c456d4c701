"""`solve`: a whole minimisation in one compiled program."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, Int, PyTree, Scalar

from .._compile import run_once_jit
from .._numerics import asarray
from .._sharding._mesh import unsplit
from ._common import (
    batch_while_loop,
    FTOL,
    gate,
    GTOL,
    inf_norm,
    is_real_float_array,
    LINESEARCH,
    NONFINITE,
    REASONS,
    RUNNING,
    stop_reason,
)
from ._jacobian import auto_chunk, dense_jacobian, flat_residual_fn
from ._lbfgs import lbfgs_backtracking
from ._solvers import (
    AbstractGradientSolver,
    AbstractLeastSquaresSolver,
    AbstractSolver,
    as_solver,
    LBFGS,
    LevenbergMarquardt,
)


class Solution(eqx.Module):
    """What [`eqmodels.solve`][] returns (batched along a leading axis under
    `vmap` and in a survey).

    - `model`: the final model (same structure as the initial one).
    - `value`: the objective at `model`.
    - `report`: `{name: value}` of each term at `model` (`objective.report`), or an
      empty dict when the objective has no `report`.
    - `steps`: iterations taken.
    - `result`: why the solve stopped, an index into `("max_steps", "gtol", "ftol",
      "nonfinite", "linesearch")` (`reason` gives the text) — `max_steps`, `gtol`
      (gradient below tolerance), `ftol` (relative decrease below tolerance),
      `nonfinite` (the objective or its gradient is NaN/inf) or `linesearch` (no
      decrease found along the search direction within the line-search budget:
      stuck at rounding level, or at the start a badly scaled problem). On
      `nonfinite`, `model`, `value` and `steps` are those of the last point where
      the value and gradient were finite (L-BFGS shortens its step instead, and
      stops there only when the start itself is not finite).
    - `converged`: `result` is `gtol` or `ftol`.
    - `stats`: `{"max_steps": ..., "evaluations": ...}` (objective evaluations;
      Jacobians count as one).
    """

    model: PyTree
    value: Float[Array, "*batch"]
    report: dict[str, Float[Array, "*batch"]]
    steps: Int[Array, "*batch"]
    result: Int[Array, "*batch"]
    stats: dict[str, Array]

    @property
    def converged(self) -> Bool[Array, "*batch"]:
        return (self.result == GTOL) | (self.result == FTOL)

    @property
    def reason(self) -> str | np.ndarray:
        """`result` as text (an array of strings when batched)."""
        names = np.array(REASONS)
        out = names[np.asarray(self.result)]
        return str(out) if out.ndim == 0 else out


class _Options(eqx.Module):
    """Loop options, all traced: new values do not recompile."""

    max_steps: Int[Array | np.ndarray, ""]
    ftol: Float[Array | np.ndarray, ""]
    gtol: Float[Array | np.ndarray, ""]


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


def _gradient_loop(solver, fn, params, opts, axis_name=None):
    tx = solver.transformation()
    value_and_grad = jax.value_and_grad(fn)
    f0, g0 = value_and_grad(params)
    state0 = tx.init(params)
    extra = isinstance(tx, optax.GradientTransformationExtraArgs)
    from_state = (
        optax.tree.get(state0, "value", None) is not None
        and optax.tree.get(state0, "grad", None) is not None
    )

    def step(params, state, f, g):
        if extra:
            updates, state = tx.update(g, state, params, value=f, grad=g, value_fn=fn)
        else:
            updates, state = tx.update(g, state, params)
        params = optax.apply_updates(params, updates)
        if from_state:
            # The line search evaluated the objective at the accepted point.
            f, g = optax.tree.get(state, "value"), optax.tree.get(state, "grad")
        else:
            f, g = value_and_grad(params)
        return params, state, f, g

    def evaluations(state):
        n = optax.tree.get(state, "num_linesearch_steps", None) if from_state else None
        return asarray(1 if n is None else n, jnp.int32)

    carry_shape = jax.eval_shape(step, params, state0, f0, g0)
    state0 = _match_types(state0, carry_shape[1])
    f0 = asarray(f0, carry_shape[2].dtype)

    def cond(c):
        *_, k, reason = c
        return (reason == RUNNING) & (k < opts.max_steps)

    def body(c):
        params, state, f, g, evals, k, _ = c
        new_params, state, fnew, gnew = step(params, state, f, g)
        reason = stop_reason(fnew, f, inf_norm(gnew), opts.ftol, opts.gtol)
        if from_state:
            # A failed line search (optax's zoom search, after its last trial,
            # returns that trial even when the objective rose 25-fold) stops the
            # loop at the last point instead of accepting the rise. A successful
            # search may rise by rounding (optax's approximate Wolfe condition),
            # which is kept.
            failed = optax.tree.get(state, "decrease_error", None)
            if failed is None:  # a transformation without that report
                rose = fnew > f + 1e-6 * jnp.abs(f)
            else:
                rose = (failed > 0) & (fnew > f)
            reason = jnp.where((reason != NONFINITE) & rose, LINESEARCH, reason)
        evals = evals + evaluations(state)
        # A step onto a non-finite value or gradient, or a failed line search,
        # stops the loop at the last good point (the state is not kept: the loop
        # ends here).
        ok = (reason != NONFINITE) & (reason != LINESEARCH)
        params, fnew, gnew = jax.tree.map(
            lambda a, b: jnp.where(ok, a, b), (new_params, fnew, gnew), (params, f, g)
        )
        return params, state, fnew, gnew, evals, k + ok.astype(k.dtype), reason

    g0_inf = inf_norm(g0)
    reason0 = jnp.where(
        jnp.isfinite(f0) & jnp.isfinite(g0_inf),
        jnp.where(g0_inf <= opts.gtol, GTOL, RUNNING),
        NONFINITE,
    )
    zero = jnp.zeros((), jnp.int32)
    init = (params, state0, f0, g0, zero + 1, zero, reason0)
    params, _, f, _, evals, k, reason = batch_while_loop(
        cond, lambda c, active: gate(active, body(c), c), init, axis_name
    )
    return params, f, k, reason, evals


@jax.custom_jvp
def spd_solve(a, b):
    """`a⁻¹ b` for a symmetric positive-definite `a`, without a deadlock under
    `vmap` on CPU (see `_spd_solve`); differentiable in forward mode (the
    `custom_vmap` alone sent `jax.jacfwd` into infinite recursion, from a
    review)."""
    return _spd_solve(a, b)


@spd_solve.defjvp
def _spd_solve_jvp(primals, tangents):
    a, b = primals
    da, db = tangents
    x = spd_solve(a, b)
    return x, spd_solve(a, db - da @ x)


@jax.custom_batching.custom_vmap
def _spd_solve(a, b):
    """`a⁻¹ b` for a symmetric positive-definite `a` (Cholesky).

    Under `vmap` the members are solved one after another (`lax.map`), not by
    jaxlib's batched LAPACK kernel: that kernel splits its batch over XLA's CPU
    thread pool and waits for it, and with several CPU devices each running one
    (a survey of Gauss-Newton solves, two devices on two cores) every pool thread
    waited for work queued behind itself — a deadlock (from a review). Programs
    compiled for other platforms keep the batched solve."""
    return jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a), b)


@_spd_solve.def_vmap
def _spd_solve_vmap(axis_size, in_batched, a, b):
    a_batched, b_batched = in_batched
    a = a if a_batched else jnp.broadcast_to(a, (axis_size, *a.shape))
    b = b if b_batched else jnp.broadcast_to(b, (axis_size, *b.shape))
    # Chosen for the platform the program is compiled for (not the default
    # backend: a survey on a GPU machine's CPU devices needs the serial solve).
    x = jax.lax.platform_dependent(
        a,
        b,
        cpu=lambda a, b: jax.lax.map(lambda ab: _spd_solve(*ab), (a, b)),
        default=jax.vmap(_spd_solve.fun),
    )
    return x, True


def _least_squares_loop(solver, resid, x0, opts, chunk, axis_name=None):
    """Gauss-Newton / Levenberg-Marquardt on the flat parameter vector."""
    lm = isinstance(solver, LevenbergMarquardt)

    def linearise(x):
        r, jac = dense_jacobian(resid, x, chunk)
        # Split over an Explicit mesh axis (a `ShardedChi2`'s residuals), the dense
        # step below would be refused: gathered first.
        return unsplit(r), unsplit(jac)

    def solve_step(r, jac, lam):
        """The step of `min |r + Jδ|² + λ |Dδ|²`, `D² = diag(JᵀJ)` (Marquardt's
        scaling: parameters of very different scales — a flux in Jy and a width in
        radians — are damped alike), in scaled variables `δ = δ_s / D`."""
        m, n = jac.shape
        d = jnp.sqrt(jnp.sum(jac * jac, axis=0))
        d = jnp.maximum(d, 1e-12 * jnp.max(d))
        d = jnp.where(d > 0, d, 1.0)
        js = jac / d[None, :]
        if m < n:  # residual space: δ_s = −J_sᵀ (J_s J_sᵀ + λI)⁻¹ r
            a = js @ js.T + lam * jnp.eye(m, dtype=jac.dtype)
            return -(js.T @ spd_solve(a, r)) / d
        a = js.T @ js + lam * jnp.eye(n, dtype=jac.dtype)
        return -spd_solve(a, js.T @ r) / d

    r0, j0 = linearise(x0)
    f0 = jnp.sum(r0 * r0)
    # λ is relative to the scaled normal matrix, whose diagonal is 1.
    lam0 = asarray(solver.damping if lm else getattr(solver, "jitter", 1e-12), f0.dtype)

    def cond(c):
        k, reason = c[-2], c[-1]
        return (reason == RUNNING) & (k < opts.max_steps)

    def body(c):
        x, r, jac, f, lam, nu, evals, k, _ = c
        delta = solve_step(r, jac, lam)
        x_new = x + delta
        r_new, j_new = linearise(x_new)
        f_new = jnp.sum(r_new * r_new)
        g_inf = inf_norm(2 * j_new.T @ r_new)
        if lm:
            jd = jac @ delta
            predicted = -(2 * jnp.dot(jd, r) + jnp.dot(jd, jd))
            rho = (f - f_new) / jnp.where(predicted > 0, predicted, jnp.inf)
            accept = (rho > 0) & jnp.isfinite(f_new) & jnp.isfinite(g_inf)
            factor = jnp.maximum(1 / 3, 1 - (2 * rho - 1) ** 3)
            lam_new = jnp.where(accept, lam * factor, lam * nu)
            nu_new = jnp.where(accept, 2.0, 2 * nu)
        else:
            # Gauss-Newton has no damping to retry with: a step onto a non-finite
            # value or gradient stops the loop at the last finite point (below).
            accept = jnp.isfinite(f_new) & jnp.isfinite(g_inf)
            lam_new, nu_new = lam, nu
        x_out = jnp.where(accept, x_new, x)
        r_out = jnp.where(accept, r_new, r)
        j_out = jnp.where(accept, j_new, jac)
        f_out = jnp.where(accept, f_new, f)
        g_out = jnp.where(accept, g_inf, inf_norm(2 * jac.T @ r))
        reason = stop_reason(f_out, f, g_out, opts.ftol, opts.gtol)
        # A rejected LM step (f unchanged) is not convergence: keep going ...
        reason = jnp.where(accept | (reason == GTOL), reason, RUNNING)
        if lm:
            # ... unless the model itself predicts no decrease worth `ftol`
            # (MINPACK's test: at rounding level every step is rejected, and λ
            # would grow until it overflows), or λ has grown past what changes
            # the step at this precision.
            denom = jnp.maximum(jnp.abs(f), 1.0)
            flat = jnp.isfinite(predicted) & (predicted <= opts.ftol * denom)
            stuck = ~jnp.isfinite(lam_new) | (lam_new > 1 / jnp.finfo(f.dtype).eps)
            reason = jnp.where(
                (reason == RUNNING) & ~accept & flat,
                FTOL,
                jnp.where((reason == RUNNING) & ~accept & stuck, LINESEARCH, reason),
            )
        else:
            reason = jnp.where(accept, reason, NONFINITE)
        # Every LM iteration counts (a rejected one raised λ); a Gauss-Newton step
        # onto a non-finite value was not taken.
        k_new = k + 1 if lm else k + accept.astype(k.dtype)
        return x_out, r_out, j_out, f_out, lam_new, nu_new, evals + 1, k_new, reason

    g0 = inf_norm(2 * j0.T @ r0)
    reason0 = jnp.where(
        jnp.isfinite(f0) & jnp.isfinite(g0),
        jnp.where(g0 <= opts.gtol, GTOL, RUNNING),
        NONFINITE,
    )
    init = (
        x0,
        r0,
        j0,
        f0,
        lam0,
        asarray(2.0, f0.dtype),
        jnp.ones((), jnp.int32),  # evaluations (the start)
        jnp.zeros((), jnp.int32),
        reason0,
    )
    x, *_, evals, k, reason = batch_while_loop(
        cond, lambda c, active: gate(active, body(c), c), init, axis_name
    )
    return x, k, reason, evals


@run_once_jit
def _solve_jit(objective, model, solver, opts, filter_spec, chunk):
    return solve_traced(objective, model, solver, opts, filter_spec, chunk)


#: Incremented every time the solve program is traced (tests count compiles).
TRACE_COUNT = [0]


def solve_traced(
    objective, model, solver, opts, filter_spec, chunk, axis_name=None
) -> Solution:
    """The body of `solve`, traceable (used by `solve` and `survey`; `survey`
    passes the name of its `vmap` axis, see `batch_while_loop`)."""
    TRACE_COUNT[0] += 1
    params, static = eqx.partition(model, filter_spec)
    report = None

    if isinstance(solver, LBFGS) and solver.linesearch == "backtracking":
        x0, unravel = ravel_pytree(params)
        # The report rides along with each evaluation (cast to the parameters'
        # dtype, a fixed carry type): one copy of the objective in the program,
        # none after the loop.
        # An objective that names its terms and reports them with its value
        # (`Objective`, `WithGains`, or a user's with the same two members).
        with_report = isinstance(getattr(objective, "names", None), tuple) and (
            callable(getattr(objective, "value_and_report", None))
        )
        aux0 = (
            {name: jnp.zeros((), x0.dtype) for name in objective.names}
            if with_report
            else None
        )

        def flat_fn(x):
            m = eqx.combine(unravel(x), static)
            if not with_report:
                return objective(m)
            value, rep = objective.value_and_report(m)
            return value, {k: v.astype(x0.dtype) for k, v in rep.items()}

        x, value, steps, reason, evals, report = lbfgs_backtracking(
            flat_fn,
            x0,
            opts,
            solver.memory_size,
            solver.max_linesearch_steps,
            axis_name,
            aux0=aux0,
        )
        final = eqx.combine(unravel(x), static)
    elif isinstance(solver, AbstractGradientSolver):
        dtypes = jax.tree.map(lambda a: a.dtype, params)

        def fn(p):
            # optax's zoom line search forms its trial points in the default float
            # (float64 under x64): back to the parameters' own dtypes.
            p = jax.tree.map(lambda a, dt: a.astype(dt), p, dtypes)
            return objective(eqx.combine(p, static))

        params, value, steps, reason, evals = _gradient_loop(
            solver, fn, params, opts, axis_name
        )
        final = eqx.combine(params, static)
    else:
        resid, x0, unravel = flat_residual_fn(objective, model, filter_spec)
        x, steps, reason, evals = _least_squares_loop(
            solver, resid, x0, opts, chunk, axis_name
        )
        final = eqx.combine(unravel(x), static)
        value = objective(final)
    if report is None:
        report = objective.report(final) if hasattr(objective, "report") else {}
    reason = jnp.where(reason == RUNNING, 0, reason).astype(jnp.int32)
    return Solution(
        model=final,
        value=value,
        report=dict(report),
        steps=steps,
        result=reason,
        stats={"max_steps": opts.max_steps, "evaluations": evals},
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
    return _Options(
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
        # keep them positive (from a user walkthrough: 1847 of 4096 came back < 0).
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
    type to the compiled program, which would compile again (from a review)."""

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
    return _solve_jit(objective, model, solver, opts, params, chunk)
