"""L-BFGS with a backtracking (Armijo) line search, as one flat loop of
objective evaluations.

Every iteration of the one `lax.while_loop` evaluates the objective and its
gradient once, at a trial point; the trial is accepted (L-BFGS memory updated, a
new direction computed) or the step is shortened. Two consequences, both measured
on the round-1 M87 objective (see `docs/solvers.md`):

- the compiled program holds **one** copy of the objective's value-and-gradient
  (optax's zoom search holds three: the start, its first trial and its zoom loop),
  so it compiles in about a third of the time;
- under `vmap` every member advances evaluation by evaluation on its own: a member
  that backtracks does not hold the others inside a nested line-search loop, so a
  batch costs the largest member's evaluation count, not the sum over iterations
  of the slowest member's line search.
"""

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

from .._numerics import asarray
from ._common import batch_while_loop, FTOL, gate, LINESEARCH, RUNNING, stop_reason


_C1 = 1e-4  # Armijo sufficient-decrease constant
_HIGHEST = jax.lax.Precision.HIGHEST


def _two_loop(g, buf, sy_mat, yy_mat, rho, head, count):
    """`H g` by the L-BFGS two-loop recursion, in matrix form.

    `buf` (`(2 (m + 1), n)`, see `_add_pair`) holds the memory's pairs in a
    circular order (`head` is the next slot); `sy_mat[i, j] = s_i·y_j`
    and `yy_mat[i, j] = y_i·y_j` are kept up to date as pairs arrive. Each loop of
    the recursion is a triangular system in the `m` scalars it computes one by one
    (`α_i = ρ_i s_iᵀ(g − Σ_newer α_j y_j)`, and likewise for the second), so the
    whole product is two products with `buf` and two `m × m` triangular solves, not
    `4m` dependent vector operations (each a separate, latency-bound reduction on
    a CPU). Entries beyond `count` are zero, with `rho = 0`: they contribute nothing.
    """
    m = rho.shape[0]
    order = (head - 1 - jnp.arange(m)) % m  # newest first
    proj = jnp.matmul(buf, g, precision=_HIGHEST).reshape(m + 1, 2)
    sg, yg = proj[:m, 0][order], proj[:m, 1][order]
    sy = sy_mat[order][:, order]
    yy = yy_mat[order][:, order]
    r = rho[order]
    eye = jnp.eye(m, dtype=g.dtype)
    # First loop, newest to oldest: (I + diag(ρ) tril(SY, −1)) α = ρ ∘ Sg.
    alpha = solve_triangular(
        eye + r[:, None] * jnp.tril(sy, -1), r * sg, lower=True, unit_diagonal=True
    )
    gamma = jnp.where(
        (count > 0) & (yy[0, 0] > 0),
        sy[0, 0] / jnp.where(yy[0, 0] > 0, yy[0, 0], 1.0),
        1.0,
    )
    # Second loop, oldest to newest, in c = α − β:
    # (I + diag(ρ) triu(SYᵀ, 1)) c = α − γ ρ ∘ Y q, with Y q = Yg − YYᵀ α.
    yq = yg - yy @ alpha
    c = solve_triangular(
        eye + r[:, None] * jnp.triu(sy.T, 1),
        alpha - gamma * r * yq,
        lower=False,
        unit_diagonal=True,
    )
    # H g = γ (g − Σ α_j y_j) + Σ c_j s_j.
    coef = (
        jnp.zeros((m + 1, 2), g.dtype)
        .at[order]
        .set(jnp.stack([c, -gamma * alpha], axis=1))
    )
    return gamma * g + jnp.matmul(coef.reshape(-1), buf, precision=_HIGHEST)


def _add_pair(buf, sy_mat, yy_mat, head, s, y, good):
    """Store the pair `(s, y)` in slot `head` where `good`, with its rows and
    columns of the inner-product matrices.

    `buf` is `(2 (m + 1), n)`: slot `i`'s `s` in row `2i`, its `y` in row `2i + 1`,
    and a spare slot `m` that a rejected pair is written to (as zeros). Writing
    both rows at once, unconditionally, without reading the slot's old value,
    lets XLA update the buffer in place; a `where` against the old rows makes it
    copy the whole buffer every iteration.
    """
    m = sy_mat.shape[0]
    rows = jnp.where(good, jnp.stack([s, y]), 0.0)
    slot = jnp.where(good, head, m)
    # A scatter, not a dynamic update slice: with Explicit mesh axes (a sharded
    # objective) `rows` carries the gradient's sharding and `buf` none, which a
    # dynamic update slice refuses (`examples/sharded.py` covers it).
    buf = buf.at[2 * slot + jnp.arange(2)].set(rows)
    # Two matrix-vector products (on a CPU, one product with a two-column matrix
    # is slower than the pair).
    with_y = jnp.matmul(buf, y, precision=_HIGHEST).reshape(m + 1, 2)[:m]
    with_s = jnp.matmul(buf, s, precision=_HIGHEST).reshape(m + 1, 2)[:m]
    s_dot_y, y_dot_s, y_dot_y = with_y[:, 0], with_s[:, 1], with_y[:, 1]
    new_sy = sy_mat.at[:, head].set(s_dot_y).at[head, :].set(y_dot_s)
    new_yy = yy_mat.at[:, head].set(y_dot_y).at[head, :].set(y_dot_y)
    return (
        buf,
        jnp.where(good, new_sy, sy_mat),
        jnp.where(good, new_yy, yy_mat),
    )


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
            sy_mat,
            yy_mat,
            rho,
            head,
            count,
            started,
            k,
            ls,
            evals,
            _,
        ) = c
        x_t = x + alpha * d
        (f_t, aux_t), g_t = vg(x_t)
        f_t = f_t.astype(dtype)
        evals = evals + 1
        gd = jnp.dot(g, d)
        g_finite = jnp.all(jnp.isfinite(g_t))
        finite = jnp.isfinite(f_t) & g_finite
        armijo = finite & (f_t <= f + _C1 * alpha * gd)
        accept = armijo | ~started
        # Memory update on an accepted step with positive curvature.
        s = x_t - x
        y = g_t - g
        sy = jnp.dot(s, y)
        good = accept & started & (sy > 1e-10 * jnp.dot(y, y)) & active
        # In-place row updates (a `where` over the whole buffer would copy it).
        buf, sy_mat, yy_mat = _add_pair(buf, sy_mat, yy_mat, head, s, y, good)
        rho = rho.at[head].set(
            jnp.where(good, 1.0 / jnp.where(good, sy, 1.0), rho[head])
        )
        head = jnp.where(good, (head + 1) % memory_size, head)
        count = jnp.where(good, jnp.minimum(count + 1, memory_size), count)
        # The next direction from the accepted point.
        x_a = jnp.where(accept, x_t, x)
        f_a = jnp.where(accept, f_t, f)
        g_a = jnp.where(accept, g_t, g)
        d_new = -_two_loop(g_a, buf, sy_mat, yy_mat, rho, head, count)
        descent = jnp.dot(d_new, g_a) < 0
        reset = ~descent | (count == 0)
        d_new = jnp.where(descent, d_new, -g_a)
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
            jnp.where(ls_new >= max_linesearch_steps, LINESEARCH, RUNNING),
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
            sy_mat,
            yy_mat,
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
        jnp.zeros((memory_size, memory_size), dtype),
        jnp.zeros((memory_size, memory_size), dtype),
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
