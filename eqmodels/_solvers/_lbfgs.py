"""L-BFGS with a backtracking (Armijo) line search, as one flat loop of
objective evaluations.

Every iteration of the one `lax.while_loop` evaluates the objective and its
gradient once, at a trial point; the trial is accepted (L-BFGS memory updated, a
new direction computed) or the step is shortened. Two consequences, both measured
on the round-1 M87 objective (see `docs/solvers.md`):

- the compiled program holds **one** copy of the objective's value-and-gradient
  (optax's zoom search holds three: the start, its first trial and its zoom loop),
  so it compiles faster (1.3–2× in our runs, tracing included);
- under `vmap` every member advances evaluation by evaluation on its own: a member
  that backtracks does not hold the others inside a nested line-search loop, so a
  batch costs the largest member's evaluation count, not the sum over iterations
  of the slowest member's line search.
"""

import jax
import jax.numpy as jnp

from .._numerics import asarray
from ._common import batch_while_loop, FTOL, gate, LINESEARCH, RUNNING, stop_reason


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
    which imports `scipy.linalg`: 0.15–0.2 s of every process's first solve. The
    unrolled columns are elementwise updates that XLA fuses into a few kernels (for
    `m = 10`, faster than the LAPACK call)."""
    m = b.shape[0]
    x = b
    for j in range(m - 1) if lower else range(m - 1, 0, -1):
        # Column `j` of `a` is zero on rows `<= j` (`>= j` if upper), so `x[j]` is
        # final when it is used and stays so. (A non-finite `x[j]` also reaches
        # the rows above it, as `0 · inf`, where LAPACK skips them; the direction
        # is non-finite either way, and the solver refuses such steps. Masking the
        # rows made the update 3× slower at memory 50.)
        x = x - a[:, j] * x[j]
    return x


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
    order = (head - 1 - jnp.arange(m)) % m  # newest first
    sg, yg = proj[0 : 2 * m : 2][order], proj[1 : 2 * m : 2][order]
    sy = gram[0 : 2 * m : 2, 1 : 2 * m : 2][order][:, order]
    yy = gram[1 : 2 * m : 2, 1 : 2 * m : 2][order][:, order]
    r = rho[order]
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
        [newest_first[order], jnp.zeros((1, 2), g.dtype)], axis=0
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


def lbfgs_backtracking(
    fn, x0, opts, memory_size, max_linesearch_steps, axis_name=None, aux0=None
):
    """Minimise `fn` (flat vector → scalar; with `aux0`, → `(scalar, aux)`) from
    `x0`.

    `aux0`: `None`, or a pytree of arrays shaped and typed as `fn`'s `aux` (its
    values are never used: the first evaluation always replaces them).

    **Returns:** `(x, f, steps, reason, evaluations, aux)`: `aux` at `x` (`None`
    without `aux0`), from the evaluation that accepted `x`.
    """
    n = x0.shape[0]
    dtype = x0.dtype
    vg = jax.value_and_grad(fn if aux0 is not None else _no_aux(fn), has_aux=True)
    zero_i = jnp.zeros((), jnp.int32)

    def initial_alpha(d):
        return jnp.minimum(1.0, 1.0 / jnp.maximum(jnp.linalg.norm(d), 1e-300))

    def body(carry, active):
        c, aux = carry
        (
            x,
            f,
            g,
            d,
            alpha,
            buf,
            gram,
            proj,
            bd,
            rho,
            head,
            count,
            started,
            k,
            ls,
            evals,
            _,
        ) = c
        s = alpha * d
        x_t = x + s
        (f_t, aux_t), g_t = vg(x_t)
        f_t = f_t.astype(dtype)
        evals = evals + 1
        gd = jnp.dot(g, d)
        g_finite = jnp.all(jnp.isfinite(g_t))
        finite = jnp.isfinite(f_t) & g_finite
        armijo = finite & (f_t <= f + _C1 * alpha * gd)
        accept = armijo | ~started
        # Memory update on an accepted step with positive curvature. (The step is
        # `s = α d` as computed, not `x_t − x`: its products with the memory are
        # then `α (buf · d)`, known without reading the memory.)
        y = g_t - g
        sy = jnp.dot(s, y)
        good = accept & started & (sy > 1e-10 * jnp.dot(y, y)) & active
        # In-place row updates (a `where` over the whole buffer would copy it);
        # the memory is read twice per iteration, both times after the write:
        # here, and for the direction. On the rows the write kept,
        # buf · s = α (buf · d) and buf · y = buf · g_t − buf · g.
        buf = _write_pair(buf, head, s, y, good)
        proj_t = jnp.matmul(buf, g_t, precision=_HIGHEST)
        gram = _update_gram(gram, head, s, y, good, alpha * bd, proj_t - proj)
        rho = rho.at[head].set(
            jnp.where(good, 1.0 / jnp.where(good, sy, 1.0), rho[head])
        )
        head = jnp.where(good, (head + 1) % memory_size, head)
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
        alpha_new = jnp.where(reset, initial_alpha(d_new), 1.0)
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
        k_new = k + jnp.where(accept & started, 1, 0).astype(jnp.int32)
        # NaN for a non-finite gradient (a CPU `max` reduction can drop a NaN); a
        # rejected trial keeps the last accepted gradient, which was finite.
        g_inf = jnp.where(
            accept & ~g_finite, jnp.asarray(jnp.nan, dtype), jnp.max(jnp.abs(g_a))
        )
        reason = jnp.where(
            accept,
            jnp.where(
                started,
                stop_reason(f_a, f, g_inf, opts.ftol, opts.gtol),
                stop_reason(f_a, jnp.inf, g_inf, opts.ftol, opts.gtol),
            ),
            jnp.where(ls_new >= ls_limit, LINESEARCH, RUNNING),
        )
        # The first evaluation cannot be "ftol" (there is no previous value).
        reason = jnp.where(~started & (reason == FTOL), RUNNING, reason)
        new = (
            x_a,
            f_a,
            g_a,
            jnp.where(accept, d_new, d),
            jnp.where(accept, alpha_new, alpha_back),
            buf,
            gram,
            proj_a,
            jnp.where(accept, bd_new, bd),
            rho,
            head,
            count,
            asarray(True),
            k_new,
            ls_new,
            evals,
            reason.astype(jnp.int32),
        )
        # The buffer was updated in place only where `good` (which includes
        # `active`); everything else of a finished member is left as it was.
        small = gate(active, new[:5] + new[6:], c[:5] + c[6:])
        aux = gate(
            active, jax.tree.map(lambda a, b: jnp.where(accept, a, b), aux_t, aux), aux
        )
        return small[:5] + (new[5],) + small[5:], aux

    def running(carry):
        started, k, reason = carry[0][-5], carry[0][-4], carry[0][-1]
        # The first evaluation (the start) always runs, so `value` is defined.
        return (reason == RUNNING) & ((k < opts.max_steps) | ~started)

    init = (
        x0,
        asarray(jnp.inf, dtype),
        jnp.zeros(n, dtype),
        jnp.zeros(n, dtype),
        asarray(0.0, dtype),
        jnp.zeros((2 * (memory_size + 1), n), dtype),
        jnp.zeros((2 * (memory_size + 1), 2 * (memory_size + 1)), dtype),
        jnp.zeros(2 * (memory_size + 1), dtype),
        jnp.zeros(2 * (memory_size + 1), dtype),
        jnp.zeros(memory_size, dtype),
        zero_i,
        zero_i,
        asarray(False),
        zero_i,
        zero_i,
        zero_i,
        asarray(RUNNING, jnp.int32),
    )
    c, aux = batch_while_loop(running, body, (init, aux0), axis_name)
    x, f, k, evals, reason = c[0], c[1], c[-4], c[-2], c[-1]
    return x, f, k, reason, evals, aux


def _no_aux(fn):
    return lambda x: (fn(x), None)
