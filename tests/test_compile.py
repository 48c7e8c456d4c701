"""The XLA options eqmodels compiles its run-once programs with
(`eqmodels.compiler_options`): decided per backend and environment, applied to
`solve`, and without effect on the results."""

import equinox as eqx
import jax
import numpy as np
import pytest

import eqmodels as em
from eqmodels import _compile
from eqmodels._solvers import _solve
from tests.helpers import assert_allclose


FAST = {"xla_cpu_use_fusion_emitters": False}


@pytest.fixture
def fresh_decision(monkeypatch):
    """Each test decides again; the process's decision is restored after."""
    saved = list(_compile._decision)
    _compile._decision.clear()
    yield monkeypatch
    _compile._decision[:] = saved


def test_default_on_a_cpu(fresh_decision):
    fresh_decision.delenv("EQMODELS_FAST_COMPILE", raising=False)
    fresh_decision.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert jax.default_backend() == "cpu"
    assert em.compiler_options() == FAST
    # A copy: the caller cannot change what eqmodels compiles with.
    em.compiler_options()["xla_cpu_use_fusion_emitters"] = True
    assert em.compiler_options() == FAST


@pytest.mark.parametrize("value", ["0", "false", "off"])
def test_switched_off_by_the_environment(fresh_decision, value):
    fresh_decision.setenv("EQMODELS_FAST_COMPILE", value)
    assert em.compiler_options() == {}


def test_an_xla_flags_setting_is_left_alone(fresh_decision):
    fresh_decision.delenv("EQMODELS_FAST_COMPILE", raising=False)
    fresh_decision.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true")
    assert em.compiler_options() == {}


def test_a_folder_named_after_the_flag_is_not_the_setting(fresh_decision):
    """From a review: a substring test read a dump folder's name as the flag."""
    fresh_decision.delenv("EQMODELS_FAST_COMPILE", raising=False)
    fresh_decision.setenv(
        "XLA_FLAGS", "--xla_dump_to=/tmp/xla_cpu_use_fusion_emitters_off"
    )
    assert em.compiler_options() == FAST


def test_threads_decide_once(fresh_decision):
    from concurrent.futures import ThreadPoolExecutor

    fresh_decision.delenv("EQMODELS_FAST_COMPILE", raising=False)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: em.compiler_options(), range(8)))
    assert got == [FAST] * 8 and len(_compile._decision) == 1


def test_unknown_options_are_probed_and_dropped(fresh_decision):
    # On a jax version not verified, the option is tried on a tiny program once.
    fresh_decision.setattr(_compile, "_VERIFIED", ())
    assert _compile._accepted(FAST)
    assert not _compile._accepted({"xla_cpu_no_such_option": True})
    fresh_decision.setattr(_compile, "_FAST_COMPILE_CPU", {"xla_cpu_no_such": 1})
    fresh_decision.delenv("EQMODELS_FAST_COMPILE", raising=False)
    fresh_decision.setenv("XLA_FLAGS", "")
    assert em.compiler_options() == {}


def _problem():
    grid = em.ImageGrid.from_fov(8, 128.0)
    rng = np.random.default_rng(3)
    u, v = rng.uniform(-0.3, 0.3, (2, 40)) / grid.psize
    truth = em.PixelImage(grid, rng.uniform(0.2, 1.0, grid.shape))()
    ft = em.DirectFT(grid, u, v)
    sigma = np.full(40, 0.05)
    obj = em.VisChi2(ft, np.asarray(ft(truth)), sigma) + 0.1 * em.TSV(grid)
    return obj, em.PixelImage(grid, np.full(grid.shape, 0.5))


def test_solve_is_compiled_with_the_options_and_gives_the_same_result():
    obj, model = _problem()
    sol = em.solve(obj, model, max_steps=20, ftol=0.0, gtol=0.0)
    # The run-once program was built with the process's options ...
    key = _compile._options_key()
    assert key == tuple(sorted(FAST.items()))  # a CPU, defaults
    assert key in _solve._solve_jit._jitted
    # ... and gives what XLA's default code generation gives.
    opts = _solve.make_options(20, 0.0, 0.0, np.float64)
    spec = jax.tree.map(eqx.is_inexact_array, model)
    plain = eqx.filter_jit(_solve.solve_traced)(
        obj, model, em.LBFGS(), opts, spec, None
    )
    assert_allclose(sol.model.params, plain.model.params, rtol=1e-10)
    assert_allclose(sol.value, plain.value, rtol=1e-12)
    assert int(sol.steps) == int(plain.steps) == 20


def test_solve_inside_a_users_jit():
    """JAX refuses compiler options on a program staged into another: inside a
    user's `jit` (or `eval_shape`), `solve` becomes part of the caller's program."""
    obj, model = _problem()
    top = em.solve(obj, model, max_steps=10, ftol=0.0, gtol=0.0)

    @eqx.filter_jit
    def users_program(obj, model):
        return em.solve(obj, model, max_steps=10, ftol=0.0, gtol=0.0).value

    assert_allclose(users_program(obj, model), top.value, rtol=1e-12)
    shape = eqx.filter_eval_shape(users_program, obj, model)
    assert shape.shape == () and shape.dtype == top.value.dtype


def test_a_run_once_program_inside_a_users_jit_is_traced_once():
    """From a review: inside a user's program the run-once program was traced with
    the options first, refused, and traced again without them."""
    traces = []

    def fun(x):
        traces.append(1)
        return 2 * x

    program = _compile.run_once_jit(fun)
    out = eqx.filter_jit(lambda x: program(x))(np.ones(3))
    assert_allclose(out, 2 * np.ones(3), rtol=0)
    assert len(traces) == 1


def test_other_errors_of_a_run_once_program_propagate():
    def traced(x):
        raise ValueError("boom")

    program = _compile.run_once_jit(traced)
    with pytest.raises(ValueError, match="boom"):
        program(np.ones(3))
    with pytest.raises(ValueError, match="boom"):
        eqx.filter_jit(lambda x: program(x))(np.ones(3))
