"""Least-squares solvers: Gauss-Newton and Levenberg-Marquardt on the objective's
residuals and their chunked Jacobian."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, Int, Scalar

from .._numerics import asarray
from .._sharding._mesh import unsplit
from ._base import AbstractSolver
from ._checks import real
from ._common import (
    FTOL,
    GTOL,
    inf_norm,
    LINESEARCH,
    NONFINITE,
    RUNNING,
    stop_reason,
)
from ._jacobian import (
    check_chunk_size,
    check_memory_budget,
    DEFAULT_MEMORY_BUDGET,
    dense_jacobian,
)
from ._results import as_result


@jax.custom_jvp
def spd_solve(a, b):
    """`a⁻¹ b` for a symmetric positive-definite `a`, without a deadlock under
    `vmap` on CPU (see `_spd_solve`); differentiable in forward mode (the
    `custom_vmap` alone sent `jax.jacfwd` into infinite recursion)."""
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
    waited for work queued behind itself — a deadlock. Programs compiled for
    other platforms keep the batched solve."""
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


@jax.custom_batching.custom_vmap
def _svd(jac):
    """`(s, vt)`, the thin SVD of `jac`; under `vmap`, one member after another
    on CPU (jaxlib's batched LAPACK kernels deadlock there, see `_spd_solve`)."""
    _, s, vt = jnp.linalg.svd(jac, full_matrices=False)
    return s, vt


@_svd.def_vmap
def _svd_vmap(axis_size, in_batched, jac):
    (batched,) = in_batched
    jac = jac if batched else jnp.broadcast_to(jac, (axis_size, *jac.shape))
    out = jax.lax.platform_dependent(
        jac,
        cpu=lambda j: jax.lax.map(_svd, j),
        default=jax.vmap(_svd.fun),
    )
    return out, (True, True)


def null_directions(jac: Float[Array, "m n"]) -> tuple[Int[Array, ""], Array]:
    """`(rank, unconstrained)`: the numerical rank of the Jacobian (singular values
    above `max(m, n)·eps·σ_max`, as `numpy.linalg.matrix_rank` counts them), and,
    per parameter, whether it lies mostly (more than half its weight) in the null
    space: a direction along which the residuals do not change, which no solver
    can fit (a Gaussian's position fitted to amplitudes alone, the position angle
    of a circular one, two parameters that enter only as their sum)."""
    m, n = jac.shape
    s, vt = _svd(jac)
    tol = max(m, n) * jnp.finfo(jac.dtype).eps * jnp.max(s)
    kept = s > tol
    rank = jnp.sum(kept).astype(jnp.int32)
    # ‖P_range e_j‖² over the kept right singular vectors; the rest of e_j lies in
    # the null space (which, when m < n, the thin SVD does not list).
    weight = jnp.sum(jnp.where(kept[:, None], vt * vt, 0.0), axis=0)
    return rank, weight < 0.5


class LeastSquaresState(eqx.Module):
    """The state of a Gauss-Newton / Levenberg-Marquardt solve.

    - `residuals`, `jacobian`, `value`: at the current point (`value = Σ r²`).
    - `damping`: `λ`, relative to the scaled normal matrix (whose diagonal is 1);
      `growth`: Nielsen's factor for the next rejected step.
    - `steps`, `evaluations`, `code` (`-1` while running, else a `RESULTS` value).
    """

    residuals: Float[Array, " m"]
    jacobian: Float[Array, "m n"]
    value: Scalar
    damping: Scalar
    growth: Scalar
    steps: Int[Array, ""]
    evaluations: Int[Array, ""]
    code: Int[Array, ""]


def _flat(fn, y):
    x, unravel = ravel_pytree(y)

    def linearise(x):
        r, jac = dense_jacobian(
            lambda v: fn.residuals(unravel(v)), x, fn.jacobian_chunk
        )
        # Split over an Explicit mesh axis (a `ShardedChi2`'s residuals), the dense
        # step would be refused: gathered first.
        return unsplit(r), unsplit(jac)

    return x, unravel, linearise


def _damped_step(r, jac, lam):
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


def _ls_init(fn, y, options, lam0) -> LeastSquaresState:
    x0, _, linearise = _flat(fn, y)
    r0, j0 = linearise(x0)
    f0 = jnp.sum(r0 * r0)
    g0 = inf_norm(2 * j0.T @ r0)
    code0 = jnp.where(
        jnp.isfinite(f0) & jnp.isfinite(g0),
        jnp.where(g0 <= options.gtol, GTOL, RUNNING),
        NONFINITE,
    ).astype(jnp.int32)
    return LeastSquaresState(
        residuals=r0,
        jacobian=j0,
        value=f0,
        damping=asarray(lam0, f0.dtype),
        growth=asarray(2.0, f0.dtype),
        steps=jnp.zeros((), jnp.int32),
        evaluations=jnp.ones((), jnp.int32),  # the start
        code=code0,
    )


def _ls_step(fn, y, c: LeastSquaresState, opts, lm: bool):
    x, unravel, linearise = _flat(fn, y)
    r, jac, f, lam, nu = c.residuals, c.jacobian, c.value, c.damping, c.growth
    delta = _damped_step(r, jac, lam)
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
    code = stop_reason(f_out, f, g_out, opts.ftol, opts.gtol)
    # A rejected LM step (f unchanged) is not convergence: keep going ...
    code = jnp.where(accept | (code == GTOL), code, RUNNING)
    if lm:
        # ... unless the model itself predicts no decrease worth `ftol`
        # (MINPACK's test: at rounding level every step is rejected, and λ
        # would grow until it overflows), or λ has grown past what changes
        # the step at this precision.
        denom = jnp.maximum(jnp.abs(f), 1.0)
        flat = jnp.isfinite(predicted) & (predicted <= opts.ftol * denom)
        stuck = ~jnp.isfinite(lam_new) | (lam_new > 1 / jnp.finfo(f.dtype).eps)
        code = jnp.where(
            (code == RUNNING) & ~accept & flat,
            FTOL,
            jnp.where((code == RUNNING) & ~accept & stuck, LINESEARCH, code),
        )
    else:
        code = jnp.where(accept, code, NONFINITE)
    # Every LM iteration counts (a rejected one raised λ); a Gauss-Newton step
    # onto a non-finite value was not taken.
    k_new = c.steps + 1 if lm else c.steps + accept.astype(jnp.int32)
    return unravel(x_out), LeastSquaresState(
        residuals=r_out,
        jacobian=j_out,
        value=f_out,
        damping=lam_new,
        growth=nu_new,
        steps=k_new,
        evaluations=c.evaluations + 1,
        code=code.astype(jnp.int32),
    )


class AbstractLeastSquaresSolver(AbstractSolver):
    """A solver on the residuals `r` of the objective (`J = Σ r²`, `fn.residuals`)
    and their Jacobian, computed in chunks of `chunk_size` rows (or `"auto"`, the
    largest chunk within `memory_budget` bytes), resolved before the solve
    compiles (`fn.jacobian_chunk`).

    [`eqmodels.GaussNewton`][] and [`eqmodels.LevenbergMarquardt`][] solve the
    damped normal equations `(JᵀJ + λD²)δ = −Jᵀr`, `D² = diag(JᵀJ)` (Marquardt's
    scaling, so that parameters of very different scales are damped alike), in
    whichever space is smaller: over the n parameters, or, when there are fewer
    residuals than parameters, over the m residuals (the same step through one
    m×m Cholesky factorisation). A subclass implements the four methods of
    [`eqmodels.AbstractSolver`][] with a step rule of its own.

    At the end, the Jacobian at the solution is checked for directions the data
    do not constrain (its numerical rank, singular values above
    `max(m, n)·eps·σ_max` as `numpy.linalg.matrix_rank`): the solution's `stats`
    gain `rank`, `null_directions` (`n − rank`) and `unconstrained` (per flat
    parameter, whether it lies mostly in the null space), `Solution.converged` is
    `False` while `null_directions > 0`, and
    [`eqmodels.unconstrained_parameters`][] names the parameters.
    """

    chunk_size: eqx.AbstractVar[int | str]
    memory_budget: eqx.AbstractVar[float]

    def terminate(self, fn, y, state, options):
        return state.code != RUNNING, as_result(state.code)

    def postprocess(self, fn, y, state, options, result):
        # The Jacobian at the final point says which directions the data do not
        # constrain: a solve "converges" along them wherever it happens to stop.
        rank, unconstrained = null_directions(state.jacobian)
        n = state.jacobian.shape[1]
        stats = {
            "evaluations": state.evaluations,
            "rank": rank,
            "null_directions": (n - rank).astype(jnp.int32),
            "unconstrained": unconstrained,
        }
        return y, fn.value(y), None, stats


def _check_ls(chunk_size, memory_budget):
    check_chunk_size(chunk_size)
    check_memory_budget(memory_budget)
    return chunk_size if isinstance(chunk_size, str) else int(chunk_size)


class GaussNewton(AbstractLeastSquaresSolver):
    """Gauss-Newton: the full least-squares step `δ` (`J δ ≈ −r`), without
    globalisation. When the problem is underdetermined (fewer residuals than
    parameters) it is the step of least `‖D δ‖` with Marquardt's scaling
    `D² = diag(JᵀJ)` (tiny `jitter` damping) — the minimum-norm step `−J⁺r` only
    when the columns of `J` have equal norms. It solves a linear least-squares
    problem in one step; on nonlinear ones prefer
    [`eqmodels.LevenbergMarquardt`][]. Every term must have residuals (data
    terms do; entropy and TV do not)."""

    chunk_size: int | str = eqx.field(static=True)
    memory_budget: int | float = eqx.field(static=True)
    jitter: float = eqx.field(static=True)

    def __init__(
        self,
        *,
        chunk_size: int | str = "auto",
        memory_budget: int | float = DEFAULT_MEMORY_BUDGET,
        jitter: int | float = 1e-12,
    ):
        """**Arguments:**

        - `chunk_size`: Jacobian rows (or columns) computed together, or `"auto"`.
        - `memory_budget`: bytes one Jacobian chunk may use (`"auto"`).
        - `jitter`: relative regularisation of the normal matrix (`λ = jitter`
          against its unit-scaled diagonal), so that rank-deficient problems stay
          finite.
        """
        self.chunk_size = _check_ls(chunk_size, memory_budget)
        self.memory_budget = float(memory_budget)
        self.jitter = real("jitter", jitter)

    def init(self, fn, y, options):
        return _ls_init(fn, y, options, self.jitter)

    def step(self, fn, y, state, options):
        return _ls_step(fn, y, state, options, lm=False)


class LevenbergMarquardt(AbstractLeastSquaresSolver):
    """Levenberg-Marquardt: Gauss-Newton steps damped by `λ·diag(JᵀJ)`, `λ` adapted by the
    ratio of actual to predicted reduction (Nielsen's rule: shrink on a good step,
    double the growth factor after each rejected one). Every term must have
    residuals."""

    chunk_size: int | str = eqx.field(static=True)
    memory_budget: int | float = eqx.field(static=True)
    damping: float = eqx.field(static=True)

    def __init__(
        self,
        *,
        chunk_size: int | str = "auto",
        memory_budget: int | float = DEFAULT_MEMORY_BUDGET,
        damping: int | float = 1e-3,
    ):
        """**Arguments:**

        - `chunk_size`, `memory_budget`: as for [`eqmodels.GaussNewton`][].
        - `damping`: the initial `λ` (relative to `diag(JᵀJ)`).
        """
        self.chunk_size = _check_ls(chunk_size, memory_budget)
        self.memory_budget = float(memory_budget)
        self.damping = real("damping", damping, low_open=True)

    def init(self, fn, y, options):
        return _ls_init(fn, y, options, self.damping)

    def step(self, fn, y, state, options):
        return _ls_step(fn, y, state, options, lm=True)
