"""L-BFGS with a backtracking (Armijo) line search, as one flat loop of
objective evaluations.

Every iteration of the one `lax.while_loop` evaluates the objective and its
gradient once, at a trial point; the trial is accepted (L-BFGS memory updated, a
new direction computed) or the step is shortened. Two consequences, both measured
on the round-1 M87 objective (see `docs/solvers.md`):

- the compiled program holds **one** copy of the objective's value-and-gradient
  (optax's zoom search holds three: the start, its first trial and its zoom loop),
  so it compiles faster;
- under `vmap` every member advances evaluation by evaluation on its own: a member
  that backtracks does not hold the others inside a nested line-search loop, so a
  batch costs the largest member's evaluation count, not the sum over iterations
  of the slowest member's line search.
"""

import dataclasses
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, Int, Scalar

from .._numerics import asarray
from ._base import AbstractSolver
from ._checks import positive_int
from ._common import FTOL, gate, LINESEARCH, RUNNING, stop_reason
from ._optax import _optax_init, _optax_step, _optax_terminate, OptaxState
from ._results import as_result


_C1 = 1e-4  # Armijo sufficient-decrease constant
# Backtracks allowed before the memory holds a pair. The first trial step has unit
# length (`min(1, 1/|g|) |g|`) in the parameters' own units, which for parameters
# in radians (a ring's diameter, ~1e-10) is ten orders of magnitude too long; each
# backtrack at least halves it, so 64 reach 5e-20 of it. Once a pair is known
# the steps are scaled by the curvature and `max_linesearch_steps` applies.
_FIRST_STEP_BACKTRACKS = 64
_HIGHEST = jax.lax.Precision.HIGHEST


def _unit_triangular_solve(a, b, *, lower):
    """`x` with `(I + a) x = b`, for `a` strictly lower (`lower=True`) or strictly
    upper triangular: substitution by columns, unrolled over the `m` columns.

    LAPACK's `trsm` (`jax.scipy.linalg.solve_triangular`) computes the same
    column by column, but its CPU lowering initialises jaxlib's LAPACK bindings,
    which imports `scipy.linalg`, a cost added to every process's first solve. The
    unrolled columns are elementwise updates that XLA fuses into a few kernels (for
    `m = 10`, faster than the LAPACK call).

    The columns come from one split and `x` is held as a column, so each update
    is three operations (a slice of `x`, a product, a difference), not six:
    every solve program holds two of these solves, and a fresh process traces,
    lowers and loads each operation (the arithmetic is the same)."""
    m = b.shape[0]
    cols = jax.lax.split(a, (1,) * m, axis=1)  # column j as an (m, 1) array
    x = b[:, None]
    for j in range(m - 1) if lower else range(m - 1, 0, -1):
        # Column `j` of `a` is zero on rows `<= j` (`>= j` if upper), so `x[j]` is
        # final when it is used and stays so. (A non-finite `x[j]` also reaches
        # the rows above it, as `0 · inf`, where LAPACK skips them; the direction
        # is non-finite either way, and the solver refuses such steps. Masking the
        # rows would make the update several times slower at large memories.)
        x = x - cols[j] * jax.lax.slice_in_dim(x, j, j + 1)
    return x[:, 0]


def _newest_first(head, m):
    """The memory's slots, newest first: `(head − 1 − i) mod m` for `i < m`
    (`0 <= head < m`, so the remainder of a non-negative number)."""
    i = jax.lax.iota(jnp.asarray(head).dtype, m)
    return jax.lax.rem(head + (m - 1) - i, jnp.asarray(m, i.dtype))


def _take(x, idx, axis=0):
    """`x[idx]` (`axis=0`) or `x[:, idx]` (`axis=1`) for indices known to be in
    bounds: one gather, without `jnp` indexing's handling of negative indices
    (operations that every solve program would trace, lower and load)."""
    sizes = list(x.shape)
    sizes[axis] = 1
    dims = jax.lax.GatherDimensionNumbers(
        offset_dims=tuple(d for d in range(x.ndim) if d != axis),
        collapsed_slice_dims=(axis,),
        start_index_map=(axis,),
    )
    return jax.lax.gather(x, idx[:, None], dims, tuple(sizes), mode="promise_in_bounds")


def _two_loop(g, proj, buf, gram, rho, head, count):
    """`(H g, buf · H g)`: the L-BFGS two-loop recursion, in matrix form, and the
    product of its result with the memory (which the next pair's inner products
    need, computed here without another pass over the memory).

    `buf` (`(2 (m + 1), n)`, see `_add_pair`) holds the memory's pairs in a
    circular order (`head` is the next slot); `gram = buf · bufᵀ` holds all their
    inner products and `proj = buf · g`. Each loop of the recursion is a triangular
    system in the `m` scalars it computes one by one (`α_i = ρ_i s_iᵀ(g − Σ_newer
    α_j y_j)`, and likewise for the second), so the whole product is one product
    with `buf` and two `m × m` triangular solves, not `4m` dependent vector
    operations (each a separate, latency-bound reduction on a CPU). Entries beyond
    `count` are zero, with `rho = 0`: they contribute nothing.
    """
    m = rho.shape[0]
    order = _newest_first(head, m)
    sg, yg = _take(proj[0 : 2 * m : 2], order), _take(proj[1 : 2 * m : 2], order)
    sy = _take(_take(gram[0 : 2 * m : 2, 1 : 2 * m : 2], order), order, axis=1)
    yy = _take(_take(gram[1 : 2 * m : 2, 1 : 2 * m : 2], order), order, axis=1)
    r = _take(rho, order)
    # First loop, newest to oldest: (I + diag(ρ) tril(SY, −1)) α = ρ ∘ Sg.
    alpha = _unit_triangular_solve(r[:, None] * jnp.tril(sy, -1), r * sg, lower=True)
    gamma = jnp.where(
        (count > 0) & (yy[0, 0] > 0),
        sy[0, 0] / jnp.where(yy[0, 0] > 0, yy[0, 0], 1.0),
        1.0,
    )
    # Second loop, oldest to newest, in c = α − β:
    # (I + diag(ρ) triu(SYᵀ, 1)) c = α − γ ρ ∘ Y q, with Y q = Yg − YYᵀ α.
    yq = yg - yy @ alpha
    c = _unit_triangular_solve(
        r[:, None] * jnp.triu(sy.T, 1), alpha - gamma * r * yq, lower=False
    )
    # H g = γ (g − Σ α_j y_j) + Σ c_j s_j = γ g + coefᵀ buf. `order` is its own
    # inverse (slot `order[i]` holds the `i`-th newest pair, and the `i`-th newest
    # pair is in slot `order[i]`), so the newest-first coefficients are put in
    # slot order by the same gather: a fused gather, where a scatter is a loop
    # on a CPU.
    newest_first = jnp.stack([c, -gamma * alpha], axis=1)
    coef = jnp.concatenate(
        [_take(newest_first, order), jnp.zeros((1, 2), g.dtype)], axis=0
    ).reshape(-1)
    hg = gamma * g + jnp.matmul(coef, buf, precision=_HIGHEST)
    return hg, gamma * proj + jnp.matmul(gram, coef, precision=_HIGHEST)


def _write_pair(buf, head, s, y, good):
    """`buf` with the pair `(s, y)` in slot `head` where `good`.

    `buf` is `(2 (m + 1), n)`: slot `i`'s `s` in row `2i`, its `y` in row `2i + 1`,
    and a spare slot `m` that a rejected pair is written to (as zeros: the spare
    rows, and their inner products, stay zero). Writing both rows at once,
    unconditionally, without reading the slot's old value, lets XLA update the
    buffer in place; a `where` against the old rows makes it copy the whole buffer
    every iteration.
    """
    m = (buf.shape[0] - 2) // 2
    rows = jnp.where(good, jnp.stack([s, y]), 0.0)
    slot = jnp.where(good, head, m)
    # A scatter, not a dynamic update slice: with Explicit mesh axes (a sharded
    # objective) `rows` carries the gradient's sharding and `buf` none, which a
    # dynamic update slice refuses (`examples/sharded.py` covers it).
    return buf.at[2 * slot + jnp.arange(2)].set(rows)


def _update_gram(gram, head, s, y, good, buf_s, buf_y):
    """`gram` (`buf · bufᵀ`) with the row and column of the pair `(s, y)` written
    to slot `head` where `good`.

    `buf_s`, `buf_y`: the products of the memory with `s` and `y` on the rows the
    write kept (the caller derives them from products it already has, so that the
    memory is read twice per iteration, not four times); their entries for slot
    `head` are replaced here by `s·s`, `s·y`, `y·y`.
    """
    ss, sy, yy = jnp.dot(s, s), jnp.dot(s, y), jnp.dot(y, y)
    idx = jnp.arange(gram.shape[0])
    is_s, is_y = idx == 2 * head, idx == 2 * head + 1
    with_s = jnp.where(is_s, ss, jnp.where(is_y, sy, buf_s))
    with_y = jnp.where(is_s, sy, jnp.where(is_y, yy, buf_y))
    # One elementwise select (one fused kernel), not four row/column updates.
    row = jnp.where(is_s[:, None], with_s, jnp.where(is_y[:, None], with_y, gram))
    new = jnp.where(is_s, with_s[:, None], jnp.where(is_y, with_y[:, None], row))
    return jnp.where(good, new, gram)


class BacktrackingState(eqx.Module):
    """The state of [`eqmodels.LBFGS`][]'s backtracking search: the L-BFGS memory
    and where the line search stands. One step of the loop is one evaluation, at
    the trial point `y + alpha · direction`.

    - `value`, `grad`, `report`: at the current (accepted) point.
    - `initial_value`: the objective at the start (the first evaluation);
      `postprocess` reports it as `stats["initial_value"]`, so the driver does
      not evaluate the objective there a second time.
    - `direction`, `alpha`: the search direction and the trial step length.
    - `buffer`: the memory's pairs `(s, y)`, rows `2i`, `2i + 1` of slot `i`, and
      a spare slot; `gram = buffer · bufferᵀ`; `proj = buffer · grad`;
      `buffer_direction = buffer · direction`; `rho = 1 / (sᵀy)` per slot;
      `head` the next slot; `count` the pairs held.
    - `started`: whether the start has been evaluated (the first step does).
    - `accepted`: steps accepted; `linesearch_steps`: trials of the current
      search; `evaluations`: objective evaluations.
    - `code`: the stop code (`-1` while running, else a `RESULTS` value).
    """

    value: Scalar
    initial_value: Scalar
    grad: Float[Array, " n"]
    direction: Float[Array, " n"]
    alpha: Scalar
    buffer: Float[Array, "rows n"]
    gram: Float[Array, "rows rows"]
    proj: Float[Array, " rows"]
    buffer_direction: Float[Array, " rows"]
    rho: Float[Array, " m"]
    head: Int[Array, ""]
    count: Int[Array, ""]
    started: Bool[Array, ""]
    accepted: Int[Array, ""]
    linesearch_steps: Int[Array, ""]
    evaluations: Int[Array, ""]
    code: Int[Array, ""]
    report: dict[str, Scalar] | None

    @property
    def steps(self) -> Int[Array, ""]:
        """Steps accepted; `-1` until the start is evaluated (which the loop
        always does, even for `max_steps=0`)."""
        return jnp.where(self.started, self.accepted, -1)


def _initial_alpha(d):
    return jnp.minimum(1.0, 1.0 / jnp.maximum(jnp.linalg.norm(d), 1e-300))


def _backtracking_init(fn, y, memory_size) -> BacktrackingState:
    x0, _ = ravel_pytree(y)
    n, dtype = x0.shape[0], x0.dtype
    rows = 2 * (memory_size + 1)
    zero_i = jnp.zeros((), jnp.int32)
    report = fn.report_like(y)
    # Its values are never used: the first evaluation always replaces them.
    return BacktrackingState(
        value=asarray(jnp.inf, dtype),
        initial_value=asarray(jnp.inf, dtype),
        grad=jnp.zeros(n, dtype),
        direction=jnp.zeros(n, dtype),
        alpha=asarray(0.0, dtype),
        buffer=jnp.zeros((rows, n), dtype),
        gram=jnp.zeros((rows, rows), dtype),
        proj=jnp.zeros(rows, dtype),
        buffer_direction=jnp.zeros(rows, dtype),
        rho=jnp.zeros(memory_size, dtype),
        head=zero_i,
        count=zero_i,
        started=asarray(False),
        accepted=zero_i,
        linesearch_steps=zero_i,
        evaluations=zero_i,
        code=asarray(RUNNING, jnp.int32),
        report=report,
    )


def _backtracking_step(
    fn, y, c: BacktrackingState, opts, memory_size, max_linesearch_steps, active
):
    """One evaluation at the trial point; accept (memory updated, a new direction)
    or shorten the step. Where `active` is false (a finished member of a batch),
    everything comes back unchanged; the buffer is written in place only where
    `active`, never selected (a select over it would copy it every step)."""
    x, unravel = ravel_pytree(y)
    dtype = x.dtype
    zero_i = jnp.zeros((), jnp.int32)
    vg = jax.value_and_grad(lambda v: fn(unravel(v)), has_aux=True)
    f, g, d, alpha = c.value, c.grad, c.direction, c.alpha
    buf, gram, proj, bd, rho = c.buffer, c.gram, c.proj, c.buffer_direction, c.rho
    head, count, started, ls = c.head, c.count, c.started, c.linesearch_steps
    s = alpha * d
    x_t = x + s
    (f_t, aux_t), g_t = vg(x_t)
    f_t = f_t.astype(dtype)
    evals = c.evaluations + 1
    gd = jnp.dot(g, d)
    g_finite = jnp.all(jnp.isfinite(g_t))
    finite = jnp.isfinite(f_t) & g_finite
    armijo = finite & (f_t <= f + _C1 * alpha * gd)
    accept = armijo | ~started
    # Memory update on an accepted step with positive curvature. (The step is
    # `s = α d` as computed, not `x_t − x`: its products with the memory are
    # then `α (buf · d)`, known without reading the memory.)
    yv = g_t - g
    sy = jnp.dot(s, yv)
    good = accept & started & (sy > 1e-10 * jnp.dot(yv, yv)) & active
    # In-place row updates (a `where` over the whole buffer would copy it);
    # the memory is read twice per iteration, both times after the write:
    # here, and for the direction. On the rows the write kept,
    # buf · s = α (buf · d) and buf · y = buf · g_t − buf · g.
    buf = _write_pair(buf, head, s, yv, good)
    proj_t = jnp.matmul(buf, g_t, precision=_HIGHEST)
    gram = _update_gram(gram, head, s, yv, good, alpha * bd, proj_t - proj)
    rho = rho.at[head].set(jnp.where(good, 1.0 / jnp.where(good, sy, 1.0), rho[head]))
    head = jnp.where(good, jax.lax.rem(head + 1, jnp.int32(memory_size)), head)
    count = jnp.where(good, jnp.minimum(count + 1, memory_size), count)
    # The next direction from the accepted point.
    x_a = jnp.where(accept, x_t, x)
    f_a = jnp.where(accept, f_t, f)
    g_a = jnp.where(accept, g_t, g)
    proj_a = jnp.where(accept, proj_t, proj)
    hg, buf_hg = _two_loop(g_a, proj_a, buf, gram, rho, head, count)
    d_new = -hg
    descent = jnp.dot(d_new, g_a) < 0
    reset = ~descent | (count == 0)
    d_new = jnp.where(descent, d_new, -g_a)
    bd_new = jnp.where(descent, -buf_hg, -proj_a)
    alpha_new = jnp.where(reset, _initial_alpha(d_new), 1.0)
    # Rejected: shorten the step (safeguarded quadratic interpolation).
    denom = 2.0 * (f_t - f - gd * alpha)
    quad = jnp.where(
        finite & (denom > 0),
        -gd * alpha * alpha / jnp.where(denom > 0, denom, 1.0),
        0.5 * alpha,
    )
    # A non-finite trial (overflow far out) shrinks by the most allowed.
    alpha_back = jnp.where(
        finite, jnp.clip(quad, 0.1 * alpha, 0.5 * alpha), 0.1 * alpha
    )
    ls_new = jnp.where(accept, zero_i, ls + 1)
    ls_limit = jnp.where(
        count == 0,
        max(max_linesearch_steps, _FIRST_STEP_BACKTRACKS),
        max_linesearch_steps,
    )
    k_new = c.accepted + jnp.where(accept & started, 1, 0).astype(jnp.int32)
    # NaN for a non-finite gradient (a CPU `max` reduction can drop a NaN); a
    # rejected trial keeps the last accepted gradient, which was finite.
    g_inf = jnp.where(
        accept & ~g_finite, jnp.asarray(jnp.nan, dtype), jnp.max(jnp.abs(g_a))
    )
    # (Before the first evaluation there is no previous value: `inf`.)
    f_prev = jnp.where(started, f, jnp.inf)
    code = jnp.where(
        accept,
        stop_reason(f_a, f_prev, g_inf, opts.ftol, opts.gtol),
        jnp.where(ls_new >= ls_limit, LINESEARCH, RUNNING),
    )
    # The first evaluation cannot be "ftol" (there is no previous value).
    code = jnp.where(~started & (code == FTOL), RUNNING, code)
    report = None
    if c.report is not None:
        report = jax.tree.map(lambda a, b: jnp.where(accept, a, b), aux_t, c.report)
    new = BacktrackingState(
        value=f_a,
        # The first evaluation is at the start (`alpha = 0`, `direction = 0`).
        initial_value=jnp.where(started, c.initial_value, f_t),
        grad=g_a,
        direction=jnp.where(accept, d_new, d),
        alpha=jnp.where(accept, alpha_new, alpha_back),
        buffer=buf,
        gram=gram,
        proj=proj_a,
        buffer_direction=jnp.where(accept, bd_new, bd),
        rho=rho,
        head=head,
        count=count,
        started=asarray(True),
        accepted=k_new,
        linesearch_steps=ls_new,
        evaluations=evals,
        code=code.astype(jnp.int32),
        report=report,
    )
    # The buffer was updated in place only where `good` (which includes
    # `active`); everything else of a finished member is left as it was.
    y_new, kept = gate(
        active, (unravel(x_a), _all_but_buffer(new)), (y, _all_but_buffer(c))
    )
    return y_new, BacktrackingState(buffer=buf, **kept)


def _all_but_buffer(state: BacktrackingState) -> dict:
    return {
        f.name: getattr(state, f.name)
        for f in dataclasses.fields(state)
        if f.name != "buffer"
    }


class LBFGS(AbstractSolver):
    """Limited-memory BFGS with a line search whose value and gradient are reused
    by the next step (about one objective evaluation per iteration).

    `linesearch="backtracking"` (default) is an Armijo backtracking search with
    safeguarded quadratic interpolation, run as one flat loop of evaluations
    (eqmodels' own, the two-loop recursion in matrix form): each step of the
    solve loop is one evaluation (a trial accepted, or the step shortened), so the
    compiled program holds one copy of the objective, and under `vmap` every
    member advances on its own. `"zoom"` is optax's strong-Wolfe zoom search
    (`optax.lbfgs`): more robust on hard problems, slower to compile, and
    under `vmap` a batch waits for its slowest member's search at every
    iteration. On the round-1 M87 objective both reach the objective of scipy's
    L-BFGS-B in 100 iterations (see `docs/solvers.md`).
    """

    memory_size: int = eqx.field(static=True)
    linesearch: Literal["zoom", "backtracking"] = eqx.field(static=True)
    max_linesearch_steps: int = eqx.field(static=True)

    def __init__(
        self,
        memory_size: int = 10,
        *,
        linesearch: str = "backtracking",
        max_linesearch_steps: int = 20,
    ):
        """**Arguments:**

        - `memory_size`: number of correction pairs kept (eht-imaging's scipy
          `maxcor` is 50; 10 is optax's default).
        - `linesearch`: `"backtracking"` or `"zoom"`.
        - `max_linesearch_steps`: evaluations a line search may take (scipy's
          `maxls`). The backtracking search allows at least 64 before its memory
          holds a pair: the first trial step has unit length in the parameters'
          own units, far too long for parameters in radians.
        """
        if linesearch not in ("zoom", "backtracking"):
            raise ValueError(
                f"`linesearch` must be 'zoom' or 'backtracking', got {linesearch!r}."
            )
        self.memory_size = positive_int("memory_size", memory_size)
        self.linesearch = linesearch
        self.max_linesearch_steps = positive_int(
            "max_linesearch_steps", max_linesearch_steps
        )

    def _zoom(self) -> optax.GradientTransformation:
        ls = optax.scale_by_zoom_linesearch(
            max_linesearch_steps=self.max_linesearch_steps
        )
        return optax.lbfgs(memory_size=self.memory_size, linesearch=ls)

    def init(self, fn, y, options) -> BacktrackingState | OptaxState:
        if self.linesearch == "zoom":
            return _optax_init(self._zoom(), fn, y, options)
        return _backtracking_init(fn, y, self.memory_size)

    def step(self, fn, y, state, options):
        return self.masked_step(fn, y, state, options, True)

    def masked_step(self, fn, y, state, options, active):
        if self.linesearch == "zoom":
            return gate(
                active, _optax_step(self._zoom(), fn, y, state, options), (y, state)
            )
        return _backtracking_step(
            fn, y, state, options, self.memory_size, self.max_linesearch_steps, active
        )

    def terminate(self, fn, y, state, options):
        if self.linesearch == "zoom":
            return _optax_terminate(state)
        return state.code != RUNNING, as_result(state.code)

    def postprocess(self, fn, y, state, options, result):
        if self.linesearch == "zoom":
            return y, state.value, None, {"evaluations": state.evaluations}
        stats = {"evaluations": state.evaluations, "initial_value": state.initial_value}
        return y, state.value, state.report, stats
