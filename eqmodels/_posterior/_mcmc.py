"""The Markov chains of `sample` (NUTS or HMC from blackjax): window adaptation in
one compiled program, then the draws in chunks of compiled `lax.scan` steps, the
chains vmapped; between chunks, the state is checkpointed and progress shown."""

import time
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._checkpoint import chunk_name, SampleFolder, WARMUP


STATS = ("acceptance_rate", "is_divergent", "num_integration_steps")


def _algorithm(blackjax, method: str, num_integration_steps: int | None):
    """blackjax's algorithm, and the parameters it takes besides the adapted
    step size and mass matrix."""
    if method == "hmc":
        return blackjax.hmc, {"num_integration_steps": num_integration_steps}
    return blackjax.nuts, {}


def _over_chains(fn, sequential: bool):
    """`fn` applied to every chain (a leading axis of its arguments): vmapped
    (one batched program: what accelerators want), or `sequential`, one chain
    after another in one compiled loop (`lax.map`). On a CPU the sequential form
    is several times faster: each chain's NUTS trajectory stops at its own
    length (vmapped, every chain runs as long as the longest), and a density
    with a data-dependent branch (`lax.cond`, e.g. the geometric models' Bessel
    functions) keeps its branch, where `vmap` turns it into a `select` of both."""
    if not sequential:
        return jax.vmap(fn)

    def run(*args):
        return jax.lax.map(lambda a: fn(*a), args)

    return run


@eqx.filter_jit
def _warmup(
    posterior,
    z0s,
    keys,
    blackjax,
    method,
    nsteps,
    num_warmup,
    target,
    sequential,
    dense,
):
    """Window adaptation of every chain: its state after warm-up, adapted step
    size and inverse mass matrix (diagonal, or `dense`), and its key for the
    draws."""
    from_blackjax = blackjax.adaptation.base.get_filter_adapt_info_fn
    algorithm, extra = _algorithm(blackjax, method, nsteps)

    def chain(z0, key):
        k_warm, k_draw = jax.random.split(key)
        warmup = blackjax.window_adaptation(
            algorithm,
            posterior.log_density_unconstrained,
            is_mass_matrix_diagonal=not dense,
            target_acceptance_rate=target,
            adaptation_info_fn=from_blackjax(),  # keep no per-step record
            **extra,
        )
        (state, parameters), _ = warmup.run(k_warm, z0, num_steps=num_warmup)
        # In the positions' dtype, not weakly typed: the same program for the
        # draws whether these come from here or from a checkpoint.
        return (
            state,
            jnp.asarray(parameters["step_size"], z0.dtype),
            jnp.asarray(parameters["inverse_mass_matrix"], z0.dtype),
            k_draw,
        )

    return _over_chains(chain, sequential)(z0s, keys)


@eqx.filter_jit
def _draws(
    posterior,
    state,
    step_size,
    imm,
    k_draw,
    start,
    stop,
    size,
    blackjax,
    method,
    nsteps,
    sequential,
):
    """Draws `start … stop − 1` (`stop − start ≤ size`) of every chain from
    `state`, into buffers of `size` draws (one program for every chunk of a run,
    the last shorter one too). Draw `j`'s key is `fold_in(k_draw, j)`, so a draw
    does not depend on how the draws are cut into chunks."""
    algorithm, extra = _algorithm(blackjax, method, nsteps)

    def chain(state, step_size, imm, key):
        kernel = algorithm(
            posterior.log_density_unconstrained,
            step_size=step_size,
            inverse_mass_matrix=imm,
            **extra,
        )

        def step(state, j):
            state, info = kernel.step(jax.random.fold_in(key, j), state)
            return state, (
                state.position,
                state.logdensity,
                info.acceptance_rate,
                info.is_divergent,
                info.num_integration_steps,
            )

        one = jax.eval_shape(step, state, start)[1]
        buffers = tuple(jnp.zeros((size, *x.shape), x.dtype) for x in one)

        def body(i, carry):
            state, buffers = carry
            state, out = step(state, start + i)
            return state, tuple(b.at[i].set(x) for b, x in zip(buffers, out))

        return jax.lax.fori_loop(0, stop - start, body, (state, buffers))

    return _over_chains(chain, sequential)(state, step_size, imm, k_draw)


def run_chains(
    posterior,
    z0s,
    keys,
    *,
    blackjax,
    method: str,
    num_integration_steps: int | None,
    num_warmup: int,
    num_samples: int,
    target: float,
    sequential: bool,
    dense: bool,
    chunk: int,
    place: Callable,
    folder: SampleFolder | None,
    bar,
    on_chunk: Callable | None,
):
    """Warm-up, then the draws in chunks of `chunk` (the last one shorter),
    resuming from `folder` where it holds a run's state; returns `(positions,
    log_density, stats)` with `(chains, num_samples)` leading axes. `place` puts
    an array with a leading chains axis where the chains run (a mesh's devices);
    `on_chunk(done, positions, log_density, stats)` after each chunk computed."""
    n_chains, n = z0s.shape
    dtype = z0s.dtype
    key_data = jax.random.key_data(keys)
    state_shapes = {
        "position": ((n_chains, n), dtype),
        "logdensity": ((n_chains,), dtype),
        "logdensity_grad": ((n_chains, n), dtype),
    }
    warm_shapes = {
        **state_shapes,
        "step_size": ((n_chains,), dtype),
        "inverse_mass_matrix": ((n_chains, n, n) if dense else (n_chains, n), dtype),
        "draw_keys": (key_data.shape, key_data.dtype),
    }
    static = (blackjax, method, num_integration_steps)

    def as_state(arrays):  # blackjax's state (of both kernels), from arrays
        return blackjax.mcmc.hmc.HMCState(*(place(arrays[k]) for k in state_shapes))

    warm = None if folder is None else folder.load(WARMUP, warm_shapes)
    if warm is None:
        t0 = time.perf_counter()
        if bar is not None:
            bar.write(f"warm-up, {num_warmup} steps of {n_chains} chains ...")
        state, step_size, imm, k_draw = _warmup(
            posterior, z0s, keys, *static, num_warmup, target, sequential, dense
        )
        if bar is not None:
            bar.write(
                f"warm-up done in {time.perf_counter() - t0:.1f} s (step size "
                f"{_summary(step_size)})"
            )
        if folder is not None:
            folder.save(
                WARMUP,
                {
                    "position": state.position,
                    "logdensity": state.logdensity,
                    "logdensity_grad": state.logdensity_grad,
                    "step_size": step_size,
                    "inverse_mass_matrix": imm,
                    "draw_keys": jax.random.key_data(k_draw),
                },
            )
    else:
        state = as_state(warm)
        step_size = place(warm["step_size"])
        imm = place(warm["inverse_mass_matrix"])
        k_draw = place(
            jax.random.wrap_key_data(
                jax.device_put(warm["draw_keys"]), impl=jax.random.key_impl(keys)
            )
        )
        if bar is not None:
            bar.write("warm-up read back from the checkpoint")

    # The chunks a checkpoint holds, in order, each starting where the last
    # stopped; a chunk's draws have the dtypes the kernels give (the positions',
    # a bool and the default int).
    draw_dtypes = (dtype, dtype, dtype, np.bool_, jnp.asarray(0).dtype)

    def chunk_shapes(content):
        start, stop = (np.asarray(content[k]) for k in ("start", "stop"))
        m = int(stop) - int(start)
        draws = {
            k: ((n_chains, m, n) if k == "positions" else (n_chains, m), d)
            for k, d in zip(("positions", "log_density", *STATS), draw_dtypes)
        }
        return {
            "start": ((), start.dtype),
            "stop": ((), stop.dtype),
            **draws,
            **state_shapes,
        }

    parts, done, i = [], 0, 0
    while folder is not None and done < num_samples:
        name = chunk_name(i)
        arrays = folder.load(name, chunk_shapes)
        if arrays is None:
            break
        start, stop = int(arrays["start"]), int(arrays["stop"])
        if start != done or stop <= start:
            raise folder.refuse(
                f"{name} holds draws {start}..{stop - 1}, not from {done} on (a "
                "file renamed or swapped)."
            )
        parts.append(arrays)
        done, i = stop, i + 1
    if parts:
        if bar is not None:
            bar.write(f"{done} draws read back from the checkpoint")
            bar.update(min(done, num_samples), _info(parts))
        if done < num_samples:
            state = as_state(parts[-1])

    while done < num_samples:
        m = min(chunk, num_samples - done)
        state, out = _draws(
            posterior,
            state,
            step_size,
            imm,
            k_draw,
            jnp.asarray(done),
            jnp.asarray(done + m),
            chunk,
            *static,
            sequential,
        )
        out = [x if m == chunk else np.asarray(x)[:, :m] for x in out]
        arrays = dict(zip(("positions", "log_density", *STATS), out))
        if folder is not None:
            folder.save(
                chunk_name(i),
                {
                    "start": np.int64(done),
                    "stop": np.int64(done + m),
                    **arrays,
                    "position": state.position,
                    "logdensity": state.logdensity,
                    "logdensity_grad": state.logdensity_grad,
                },
            )
        parts.append(arrays)
        done, i = done + m, i + 1
        if bar is not None:
            bar.update(m, _info(parts))
        if on_chunk is not None:
            on_chunk(done, *_join(parts, done, place))
    positions, log_density, stats = _join(parts, num_samples, place)
    stats = {**stats, "step_size": step_size, "inverse_mass_matrix": imm}
    return positions, log_density, stats


def _join(parts, count, place):
    """The chunks' draws joined along the draws axis, the first `count` (on the
    host, where they are: no program compiled for these shapes)."""

    def cat(key):
        if len(parts) == 1 and parts[0][key].shape[1] == count:
            return place(parts[0][key])
        if any(not getattr(p[key], "is_fully_addressable", True) for p in parts):
            # Chains on several processes: joined where they are.
            return jnp.concatenate([p[key] for p in parts], axis=1)[:, :count]
        x = np.concatenate([np.asarray(p[key]) for p in parts], axis=1)
        return place(x[:, :count])

    return cat("positions"), cat("log_density"), {k: cat(k) for k in STATS}


def _summary(x) -> str:
    x = np.asarray(x)
    return f"{x.min():.3g}" if x.min() == x.max() else f"{x.min():.3g}–{x.max():.3g}"


def _info(parts) -> str:
    """Acceptance and divergences so far, for the progress display."""
    acc = np.mean([np.mean(np.asarray(p["acceptance_rate"])) for p in parts])
    div = sum(int(np.sum(np.asarray(p["is_divergent"]))) for p in parts)
    return f"acceptance {acc:.2f}, divergences {div}"
