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

from ._common import batch_while_loop, FTOL, gate, LINESEARCH, RUNNING, stop_reason


_C1 = 1e-4  # Armijo sufficient-decrease constant


def _two_loop(g, s_buf, y_buf, rho, head, count):
    """`H g` by the L-BFGS two-loop recursion over a circular buffer (entries
    beyond `count` have `rho = 0` and contribute nothing)."""
    m = s_buf.shape[0]
    order = (head - 1 - jnp.arange(m)) % m  # newest first

    def first(q, i):
        a = rho[i] * jnp.dot(s_buf[i], q)
        return q - a * y_buf[i], a

    q, alphas = jax.lax.scan(first, g, order)
    newest = order[0]
    sy = jnp.dot(s_buf[newest], y_buf[newest])
    yy = jnp.dot(y_buf[newest], y_buf[newest])
    gamma = jnp.where((count > 0) & (yy > 0), sy / jnp.where(yy > 0, yy, 1.0), 1.0)

    def second(r, ia):
        i, a = ia
        b = rho[i] * jnp.dot(y_buf[i], r)
        return r + s_buf[i] * (a - b), None

    r, _ = jax.lax.scan(second, gamma * q, (order[::-1], alphas[::-1]))
    return r


def lbfgs_backtracking(fn, x0, opts, memory_size, max_linesearch_steps, axis_name=None):
    """Minimise `fn` (flat vector → scalar) from `x0`.

    **Returns:** `(x, f, steps, reason, evaluations)`.
    """
    n = x0.shape[0]
    dtype = x0.dtype
    vg = jax.value_and_grad(fn)
    zero_i = jnp.zeros((), jnp.int32)

    def initial_alpha(d):
        return jnp.minimum(1.0, 1.0 / jnp.maximum(jnp.linalg.norm(d), 1e-300))

    def body(c, active):
        (
            x,
            f,
            g,
            d,
            alpha,
            s_buf,
            y_buf,
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
        f_t, g_t = vg(x_t)
        f_t = f_t.astype(dtype)
        evals = evals + 1
        gd = jnp.dot(g, d)
        finite = jnp.isfinite(f_t) & jnp.all(jnp.isfinite(g_t))
        armijo = finite & (f_t <= f + _C1 * alpha * gd)
        accept = armijo | ~started
        # Memory update on an accepted step with positive curvature.
        s = x_t - x
        y = g_t - g
        sy = jnp.dot(s, y)
        good = accept & started & (sy > 1e-10 * jnp.dot(y, y)) & active
        # In-place row updates (a `where` over the whole buffer would copy it).
        s_buf = s_buf.at[head].set(jnp.where(good, s, s_buf[head]))
        y_buf = y_buf.at[head].set(jnp.where(good, y, y_buf[head]))
        rho = rho.at[head].set(
            jnp.where(good, 1.0 / jnp.where(good, sy, 1.0), rho[head])
        )
        head = jnp.where(good, (head + 1) % memory_size, head)
        count = jnp.where(good, jnp.minimum(count + 1, memory_size), count)
        # The next direction from the accepted point.
        x_a = jnp.where(accept, x_t, x)
        f_a = jnp.where(accept, f_t, f)
        g_a = jnp.where(accept, g_t, g)
        d_new = -_two_loop(g_a, s_buf, y_buf, rho, head, count)
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
        g_inf = jnp.max(jnp.abs(g_a))
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
            s_buf,
            y_buf,
            rho,
            head,
            count,
            jnp.asarray(True),
            k_new,
            ls_new,
            evals,
            reason.astype(jnp.int32),
        )
        # Buffers were updated in place only where `good` (which includes
        # `active`); everything else of a finished member is left as it was.
        small = gate(active, new[:5] + new[7:], c[:5] + c[7:])
        return small[:5] + (new[5], new[6]) + small[5:]

    def running(c):
        started, k, reason = c[-5], c[-4], c[-1]
        # The first evaluation (the start) always runs, so `value` is defined.
        return (reason == RUNNING) & ((k < opts.max_steps) | ~started)

    init = (
        x0,
        jnp.asarray(jnp.inf, dtype),
        jnp.zeros(n, dtype),
        jnp.zeros(n, dtype),
        jnp.asarray(0.0, dtype),
        jnp.zeros((memory_size, n), dtype),
        jnp.zeros((memory_size, n), dtype),
        jnp.zeros(memory_size, dtype),
        zero_i,
        zero_i,
        jnp.asarray(False),
        zero_i,
        zero_i,
        zero_i,
        jnp.asarray(RUNNING, jnp.int32),
    )
    c = batch_while_loop(running, body, init, axis_name)
    x, f, k, evals, reason = c[0], c[1], c[-4], c[-2], c[-1]
    return x, f, k, reason, evals
