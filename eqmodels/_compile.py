"""How eqmodels compiles its own run-once programs: XLA options that cut the CPU
compilation time of a solve.

On a CPU, XLA's default code generator for fused loops (its MLIR "fusion
emitters") spends most of a solve's compilation in LLVM. Its older emitters
compile a solve markedly faster, and the compiled program runs slightly slower
(batched programs lose more; the measurements are in `docs/performance.md`). A
`solve` compiles once and runs for much less time than it takes to compile, so
eqmodels compiles the programs that run once per problem (`solve`,
`solve_scipy`, `residual_jacobian`, `self_calibrate`, the recipe) with the older
emitters; `survey`, which runs its program many times, keeps XLA's default.

Set `EQMODELS_FAST_COMPILE=0` to compile everything with XLA's defaults; an
`xla_cpu_use_fusion_emitters` setting in `XLA_FLAGS` is left as the user set it.
"""

import functools
import os
import threading
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax


_FAST_COMPILE_CPU = {"xla_cpu_use_fusion_emitters": False}
# jax versions on which the option is known to exist; others are probed once.
_VERIFIED = ((0, 10),)
_decision: list[tuple[tuple[str, Any], ...]] = []  # decided once per process
_lock = threading.RLock()  # the decision and the programs, made once each


def _enabled() -> bool:
    if os.environ.get("EQMODELS_FAST_COMPILE", "1").strip().lower() in (
        "0",
        "false",
        "no",
        "off",
    ):
        return False
    # The flag's name, not a substring of XLA_FLAGS: a dump folder named after it
    # (`--xla_dump_to=/tmp/xla_cpu_use_fusion_emitters`) is not the setting.
    names = (
        token.lstrip("-").split("=", 1)[0]
        for token in os.environ.get("XLA_FLAGS", "").split()
    )
    return "xla_cpu_use_fusion_emitters" not in names


def _accepted(options: dict[str, Any]) -> bool:
    """Whether this jaxlib's XLA knows `options` (a tiny compile, once)."""
    if tuple(jax.__version_info__[:2]) in _VERIFIED:
        return True
    try:
        jax.jit(lambda x: x, compiler_options=options).lower(
            jax.ShapeDtypeStruct((), "float32")
        ).compile()
    except Exception:  # "No such compile option": a newer XLA dropped it
        return False
    return True


def compiler_options() -> dict[str, Any]:
    """The XLA compiler options eqmodels compiles its run-once programs with
    (`solve`, `solve_scipy`, `residual_jacobian`, `self_calibrate`, the
    recipe).

    On a CPU, `{"xla_cpu_use_fusion_emitters": False}`: XLA's older code generator
    for fused loops, which compiles a solve faster and runs it slightly slower
    (see *Performance tips*). Elsewhere (a GPU), or with `EQMODELS_FAST_COMPILE=0`, or when
    `XLA_FLAGS` sets the option itself, `{}`.

    Pass it to your own run-once programs for the same effect:
    `eqx.filter_jit(fn, compiler_options=eqmodels.compiler_options())`.

    **Returns:** a new dict (decided once per process, at the first call, from
    JAX's default backend: the call starts JAX's backends, so make it after any
    `jax.config.update("jax_num_cpu_devices", ...)`).
    """
    return dict(_options_key())


def _options_key() -> tuple[tuple[str, Any], ...]:
    with _lock:
        if not _decision:
            options = {}
            if _enabled() and jax.default_backend() == "cpu":
                if _accepted(_FAST_COMPILE_CPU):
                    options = dict(_FAST_COMPILE_CPU)
            _decision.append(tuple(sorted(options.items())))
        return _decision[0]


class _RunOnceProgram:
    """`eqx.filter_jit(fun)`, compiled with `eqmodels.compiler_options()` (decided
    at the first call, when the backend is known: importing eqmodels starts none)."""

    def __init__(self, fun: Callable):
        self._fun = fun
        self._jitted: dict[tuple, Callable] = {}
        functools.update_wrapper(self, fun)

    def _program(self, key: tuple) -> Callable:
        with _lock:
            program = self._jitted.get(key)
            if program is None:
                kwargs = {"compiler_options": dict(key)} if key else {}
                program = self._jitted[key] = eqx.filter_jit(self._fun, **kwargs)
            return program

    def __call__(self, *args, **kwargs):
        key = _options_key()
        traced = any(
            isinstance(leaf, jax.core.Tracer)
            for leaf in jax.tree.leaves((args, kwargs))
        )
        # With a traced argument the call is part of a caller's program, where
        # options are refused: go straight to the plain program (trying first
        # would trace the whole solve twice).
        if key and not traced:
            try:
                return self._program(key)(*args, **kwargs)
            except ValueError as e:
                # Called inside a user's `jit` (or `eval_shape`, a loop body...):
                # JAX accepts compiler options on top-level programs only, and
                # refuses them when staging, before anything runs. The program
                # is then part of the caller's, compiled with the caller's options.
                if "compiler_options" not in str(e):
                    raise
        return self._program(())(*args, **kwargs)


def run_once_jit(fun: Callable) -> Callable:
    """Decorator: `eqx.filter_jit` with `eqmodels.compiler_options()`, for
    programs that are compiled once and run briefly (see the module docstring)."""
    return _RunOnceProgram(fun)
