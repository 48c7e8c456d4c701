"""`survey`: equals single solves per configuration; ranking and top set; resume
after an interruption (in process, and after SIGKILL in a child process) loses
nothing and recomputes nothing finished; the compilation cache serves a second
process; errors."""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems.survey import (
    configurations,
    GRID,
    least_squares_problem,
    MAX_STEPS,
    SOLVER,
)


ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def problem():
    objectives, model = configurations()
    singles = [em.solve(o, model, SOLVER, max_steps=MAX_STEPS) for o in objectives]
    return objectives, model, singles


def _survey(objectives, model, **kw):
    kw.setdefault("chunk_size", 1)
    kw.setdefault("devices", jax.devices()[:2])
    kw.setdefault("solver", SOLVER)
    kw.setdefault("max_steps", MAX_STEPS)
    return em.survey(objectives, model, **kw)


def test_survey_equals_single_solves(problem):
    objectives, model, singles = problem
    # 6 configurations, 2 devices × 2 per chunk = 4: two chunks, the last padded.
    res = _survey(objectives, model, chunk_size=2)
    assert len(res) == 6 and res.computed_chunks == (0, 1)
    # Batched matrix products round differently from single ones, `solve` is
    # compiled with `em.compiler_options()` and `survey` with XLA's defaults, and 40
    # L-BFGS steps carry the difference: agreement to 1e-9, not bit for bit.
    for i, s in enumerate(singles):
        assert_allclose(res.solutions.model.params[i], s.model.params, rtol=1e-9)
        assert_allclose(res.solutions.value[i], s.value, rtol=1e-9)
        assert int(res.solutions.steps[i]) == int(s.steps)
        assert_allclose(res[i].report["vis"], s.report["vis"], rtol=1e-9)
    # Ranked by χ² (the data terms' mean; here the one VisChi2).
    chi2 = np.array([float(s.report["vis"]) for s in singles])
    assert res.data_names == ("vis",)
    np.testing.assert_array_equal(res.ranking(), np.argsort(chi2))
    threshold = float(np.median(chi2))
    top = res.top_set(threshold)
    expected = [i for i in np.argsort(chi2) if chi2[i] <= threshold]
    np.testing.assert_array_equal(top, expected)
    np.testing.assert_array_equal(res.top_set({"vis": threshold}), expected)


def test_survey_on_one_device_and_uneven_split(problem):
    objectives, model, singles = problem
    res = _survey(objectives[:5], model, chunk_size=2, devices=jax.devices()[:3])
    for i in range(5):
        assert_allclose(
            res.solutions.model.params[i], singles[i].model.params, rtol=1e-9
        )


@pytest.mark.slow
def test_survey_of_configurations_that_are_all_the_same(problem):
    """Nothing to stack (one configuration, or several identical ones): the batch
    size is given to `vmap` explicitly, and every member equals the single solve."""
    objectives, model, singles = problem
    one = _survey(
        objectives[:1], model, devices=jax.devices()[:1], chunk_size=np.int64(1)
    )
    assert len(one) == 1
    assert_allclose(one.solutions.model.params[0], singles[0].model.params, rtol=1e-9)
    same = _survey(objectives[:1] * 3, model, chunk_size="auto")
    assert len(same) == 3
    for i in range(3):
        assert_allclose(
            same.solutions.model.params[i], singles[0].model.params, rtol=1e-9
        )
        assert_allclose(same.solutions.value[i], singles[0].value, rtol=1e-9)


def test_survey_over_solver_settings_equals_single_solves(problem):
    """One solver per configuration: a survey over Adam's learning rate."""
    objectives, model, _ = problem
    rates = [0.005, 0.02, 0.05]
    res = _survey(objectives[:1] * 3, model, solver=[em.Adam(r) for r in rates])
    for i, r in enumerate(rates):
        s = em.solve(objectives[0], model, em.Adam(r), max_steps=MAX_STEPS)
        assert_allclose(res.solutions.model.params[i], s.model.params, rtol=1e-9)
    with pytest.raises(ValueError, match="`solver` has 2 entries"):
        _survey(objectives[:3], model, solver=[em.Adam(0.1)] * 2)
    with pytest.raises(
        ValueError, match=r"in `solver\.memory_size` \(a static field\): 5 vs 6"
    ):
        _survey(objectives[:2], model, solver=[em.LBFGS(5), em.LBFGS(6)])


class _ScaledModel(em.AbstractImageModel):
    """A model with a static (non-array) field."""

    grid: em.ImageGrid
    params: jax.Array
    scale: float = eqx.field(static=True)

    def __call__(self):
        return self.scale * self.params


def test_survey_names_the_static_field_in_which_models_differ(problem):
    """The error said only "differs in structure ... e.g. a solver's
    `memory_size`" for models differing in a static field (from a review)."""
    objectives, model, _ = problem
    models = [_ScaledModel(model.grid, model(), s) for s in (1.0, 2.0)]
    with pytest.raises(
        ValueError, match=r"in `model\.scale` \(a static field\): 1\.0 vs 2\.0"
    ):
        _survey(objectives[:2], models)
    # Leaves of one structure but different Python types (a jax and a numpy
    # array) are no difference: the solvers' static field is (it blamed the
    # model's leaf types, from a review).
    mixed = [model, eqx.tree_at(lambda m: m.params, model, np.asarray(model.params))]
    with pytest.raises(ValueError, match=r"in `solver\.memory_size`"):
        _survey(objectives[:2], mixed, solver=[em.LBFGS(5), em.LBFGS(6)])
    with pytest.raises(ValueError, match="configuration 1 has NoneType where"):
        _survey(
            objectives[:2],
            [
                models[0],
                eqx.tree_at(
                    lambda m: m.params, models[0], None, is_leaf=lambda x: x is None
                ),
            ],
        )


class _Field(em.AbstractImageModel):
    """A neural field: an `eqx.nn.MLP` (whose activation functions are non-array
    leaves) evaluated at the pixel centres."""

    grid: em.ImageGrid
    mlp: eqx.nn.MLP

    def __call__(self):
        xx, yy = self.grid.coords()
        pts = jnp.stack([xx.ravel(), yy.ravel()], -1) / self.grid.psize
        return jax.vmap(self.mlp)(pts).reshape(self.grid.shape)


@pytest.mark.slow
def test_survey_of_a_model_with_non_array_leaves(problem, tmp_path):
    objectives, _, _ = problem
    mlp = eqx.nn.MLP(
        2, "scalar", 4, 1, final_activation=jax.nn.softplus, key=jax.random.key(0)
    )
    field = _Field(GRID, mlp)
    res = _survey(objectives[:2], field, max_steps=5, checkpoint=tmp_path)
    assert res.solutions.model.mlp.activation is mlp.activation
    for i in range(2):
        s = em.solve(objectives[i], field, SOLVER, max_steps=5)
        assert_allclose(res[i].model(), s.model(), rtol=1e-9)
    again = _survey(objectives[:2], field, max_steps=5, checkpoint=tmp_path)
    assert again.computed_chunks == () and again.loaded_chunks == (0,)
    assert_allclose(again[1].model(), res[1].model(), rtol=0)
    # The results come back as `em.RESULTS` members.
    assert list(again.solutions.reason) == list(res.solutions.reason)
    assert bool(again[1].result == res[1].result)
    assert isinstance(again[1].result, em.RESULTS)
    # Another choice of parameters (the weight matrices only): another survey.
    with pytest.raises(ValueError, match="holds another survey"):
        _survey(
            objectives[:2],
            field,
            max_steps=5,
            checkpoint=tmp_path,
            params=lambda x: eqx.is_inexact_array(x) and x.ndim == 2,
        )


@pytest.mark.slow
def test_checkpoint_fingerprint_sees_solver_settings_and_params(problem, tmp_path):
    """A folder written with other solver settings (array fields, an optax
    closure's constants) or another choice of parameters is refused, not read."""
    objectives, model, _ = problem
    cases = [
        (em.Adam(0.01), em.Adam(0.5), eqx.is_inexact_array),
        (
            em.OptaxSolver(optax.adam(0.01)),
            em.OptaxSolver(optax.adam(0.5)),
            eqx.is_inexact_array,
        ),
        # From a review: a schedule's rate sits deeper than the fingerprint went
        # (12 levels), so these two shared a folder and 0.5 got 0.01's results.
        (
            em.OptaxSolver(optax.adam(optax.exponential_decay(0.01, 10, 0.9))),
            em.OptaxSolver(optax.adam(optax.exponential_decay(0.5, 10, 0.9))),
            eqx.is_inexact_array,
        ),
    ]
    rebuild = [
        lambda: em.Adam(0.01),
        lambda: em.OptaxSolver(optax.adam(0.01)),
        lambda: em.OptaxSolver(optax.adam(optax.exponential_decay(0.01, 10, 0.9))),
    ]
    for k, (first, other, params) in enumerate(cases):
        folder = tmp_path / str(k)
        kw = dict(solver=first, max_steps=3, checkpoint=folder)
        _survey(objectives[:2], model, **kw)
        # The same settings, built again: read back.
        again = _survey(objectives[:2], model, **{**kw, "solver": rebuild[k]()})
        assert again.computed_chunks == ()
        with pytest.raises(ValueError, match="holds another survey"):
            _survey(objectives[:2], model, **{**kw, "solver": other})


_GLOBAL_TERM = None  # read by `_global_objective` (set by the test)


def _global_objective(model):
    return _GLOBAL_TERM(model)


class _Holder:
    """A plain (not pytree) callable holding its data term."""

    def __init__(self, term):
        self.term = term

    def __call__(self, model):
        return self.term(model)


@pytest.mark.slow
def test_checkpoint_fingerprint_sees_globals_and_plain_objects(
    problem, tmp_path, monkeypatch
):
    """An objective written as a function of a module-level term, or as a plain
    object holding one: another term is another survey (a review resumed such a
    survey after changing the data and got the old results back)."""
    objectives, model, _ = problem
    a, b = objectives[0], objectives[4]  # other weights and other data
    kw = dict(max_steps=3, chunk_size=2, devices=jax.devices()[:1])
    monkeypatch.setattr(sys.modules[__name__], "_GLOBAL_TERM", a)
    _survey([_global_objective] * 2, model, checkpoint=tmp_path / "f", **kw)
    again = _survey([_global_objective] * 2, model, checkpoint=tmp_path / "f", **kw)
    assert again.computed_chunks == () and again.loaded_chunks == (0,)
    monkeypatch.setattr(sys.modules[__name__], "_GLOBAL_TERM", b)
    with pytest.raises(ValueError, match="holds another survey .other config"):
        _survey([_global_objective] * 2, model, checkpoint=tmp_path / "f", **kw)
    _survey([_Holder(a)] * 2, model, checkpoint=tmp_path / "c", **kw)
    again = _survey([_Holder(a)] * 2, model, checkpoint=tmp_path / "c", **kw)
    assert again.computed_chunks == ()
    with pytest.raises(ValueError, match="holds another survey"):
        _survey([_Holder(b)] * 2, model, checkpoint=tmp_path / "c", **kw)


class _Wrapped(eqx.Module):
    """A user's objective module: its results depend on its `__call__`'s code."""

    objective: em.Objective

    def __call__(self, model):
        return self.objective(model)


def test_checkpoint_fingerprint_sees_a_user_class_code(problem, tmp_path, monkeypatch):
    """From a review: a user's module was fingerprinted by its name alone, so a
    survey resumed after its `__call__` changed served the old results."""
    objectives, model, _ = problem
    kw = dict(max_steps=3, chunk_size=2, devices=jax.devices()[:1])
    objs = [_Wrapped(objectives[0])] * 2
    _survey(objs, model, checkpoint=tmp_path / "f", **kw)
    again = _survey(objs, model, checkpoint=tmp_path / "f", **kw)
    assert again.computed_chunks == () and again.loaded_chunks == (0,)
    monkeypatch.setattr(_Wrapped, "__call__", lambda self, m: 2 * self.objective(m))
    with pytest.raises(ValueError, match="holds another survey"):
        _survey(objs, model, checkpoint=tmp_path / "f", **kw)


@pytest.mark.slow
def test_checkpoint_folder_records(problem, tmp_path):
    """A first call that fails before finishing a chunk does not claim the folder;
    a refusal says what differs; a pytree `params` spec works with a checkpoint."""
    objectives, model, _ = problem

    def broken(m):
        raise RuntimeError("a bug in the objective")

    with pytest.raises(RuntimeError, match="a bug"):
        _survey([broken] * 2, model, checkpoint=tmp_path / "a", max_steps=3)
    assert not list((tmp_path / "a").glob("chunk_*"))
    res = _survey(objectives[:2], model, checkpoint=tmp_path / "a", max_steps=3)
    assert res.computed_chunks == (0,)
    with pytest.raises(ValueError, match="max_steps 3 there, 4 here"):
        _survey(objectives[:2], model, checkpoint=tmp_path / "a", max_steps=4)
    # A finished chunk that has gone missing refuses the folder, naming the file
    # (a cut-off write, which leaves only a temporary file, is tested with SIGKILL
    # in `test_a_survey_killed_while_writing_a_chunk_resumes`).
    (tmp_path / "a" / "chunk_00000.npz").rename(tmp_path / "a" / "elsewhere.npz")
    with pytest.raises(ValueError, match=r"chunk_00000\.npz is missing"):
        _survey(objectives[:2], model, checkpoint=tmp_path / "a", max_steps=3)
    # `params` as a filter spec pytree (as `eqx.partition` takes), not a callable.
    spec = jax.tree.map(eqx.is_inexact_array, model)
    kw = dict(max_steps=3, params=spec)
    plain = _survey(objectives[:2], model, **kw)
    saved = _survey(objectives[:2], model, checkpoint=tmp_path / "b", **kw)
    assert_allclose(saved.solutions.model.params, plain.solutions.model.params, rtol=0)


def test_resume_after_an_interruption_recomputes_nothing(problem, tmp_path):
    objectives, model, singles = problem

    class Stop(Exception):
        pass

    def stop_after_first(i, sol):
        if i == 1:
            raise Stop

    with pytest.raises(Stop):
        _survey(objectives, model, checkpoint=tmp_path, callback=stop_after_first)
    assert sorted(p.name for p in tmp_path.glob("chunk_*.npz")) == [
        "chunk_00000.npz",
        "chunk_00001.npz",
    ]
    res = _survey(objectives, model, checkpoint=tmp_path)
    assert res.loaded_chunks == (0, 1) and res.computed_chunks == (2,)
    for i, s in enumerate(singles):
        assert_allclose(res.solutions.model.params[i], s.model.params, rtol=1e-9)
    # Everything finished: nothing is computed again.
    again = _survey(objectives, model, checkpoint=tmp_path)
    assert again.computed_chunks == () and again.loaded_chunks == (0, 1, 2)
    # Another survey in the same folder is refused.
    with pytest.raises(ValueError, match="`checkpoint`"):
        _survey(objectives[:4], model, checkpoint=tmp_path)


def _child(*args):
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "survey_child.py"), *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_survey_killed_with_sigkill_resumes_and_cache_serves_second_process(
    problem, tmp_path
):
    objectives, model, singles = problem
    ckpt, cache = tmp_path / "ckpt", tmp_path / "cache"
    first = _child(ckpt, cache, tmp_path / "a.json", 1)
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    assert not (tmp_path / "a.json").exists()
    assert len(list(ckpt.glob("chunk_*.npz"))) == 2
    assert any(cache.iterdir())  # the first process wrote its programs
    # From a review: a copied (or moved) cache folder served no programs (its
    # path was part of every key).
    moved = tmp_path / "moved"
    shutil.copytree(cache, moved)
    second = _child(ckpt, moved, tmp_path / "b.json")
    assert second.returncode == 0, second.stderr[-2000:]
    out = json.loads((tmp_path / "b.json").read_text())
    assert out["loaded"] == [0, 1] and out["computed"] == [2]
    assert out["cache_hits"] >= 1  # the chunk program came from the cache
    params = np.array(out["params"])
    for i, s in enumerate(singles):
        assert_allclose(params[i], s.model.params, rtol=1e-9)


@pytest.mark.slow
def test_a_survey_killed_while_writing_a_chunk_resumes(problem, tmp_path):
    """SIGKILL half-way through writing chunk 1's file: chunk 0 stays, no partial
    chunk 1 is left under its name, and the next run (taking over the dead
    process's lock) computes chunks 1 and 2 and removes the temporary file."""
    objectives, model, singles = problem
    ckpt, cache = tmp_path / "ckpt", tmp_path / "cache"
    first = _child(ckpt, cache, tmp_path / "a.json", 1, "write")
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    assert [p.name for p in ckpt.glob("chunk_*.npz")] == ["chunk_00000.npz"]
    assert len(list(ckpt.glob(".tmp-*chunk_00001.npz"))) == 1  # the partial one
    assert (ckpt / "survey.lock").exists()  # the dead process's
    second = _child(ckpt, cache, tmp_path / "b.json")
    assert second.returncode == 0, second.stderr[-2000:]
    out = json.loads((tmp_path / "b.json").read_text())
    assert out["loaded"] == [0] and out["computed"] == [1, 2]
    assert not list(ckpt.glob(".tmp-*")) and not (ckpt / "survey.lock").exists()
    params = np.array(out["params"])
    for i, s in enumerate(singles):
        assert_allclose(params[i], s.model.params, rtol=1e-9)


def test_survey_errors(problem, tmp_path):
    objectives, model, _ = problem
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="`checkpoint`.*is a file"):
        em.survey(objectives, model, checkpoint=a_file)
    with pytest.raises(ValueError, match="`objectives`"):
        em.survey([], model)
    with pytest.raises(ValueError, match="`model`"):
        em.survey(objectives, [model, model])
    with pytest.raises(ValueError, match="`chunk_size`"):
        em.survey(objectives, model, chunk_size=0)
    other = em.VisChi2(
        em.DirectFT(GRID, np.array([1e9, 2e9]), np.array([0.0, 1e9])),
        jnp.ones(2, complex),
        np.ones(2),
    ) + em.TSV(GRID)
    with pytest.raises(ValueError, match="pad data sets"):
        em.survey([objectives[0], other], model)
    res = _survey(objectives[:2], model)
    with pytest.raises(ValueError, match="not report keys"):
        res.chi2(["cphase"])
    with pytest.raises(ValueError, match="lists a device more than once"):
        em.survey(objectives, model, devices=[jax.devices()[0]] * 2)
    # Bare terms report nothing: ranking says how to rank them.
    bare = [
        em.VisChi2(o.terms[0].forward, o.terms[0].vis, np.full(30, 0.05))
        for o in objectives
    ]
    res = _survey(bare[:2], model, max_steps=2)
    with pytest.raises(ValueError, match=r"Objective\(\[term\]\)"):
        res.ranking()


@pytest.mark.parametrize(
    "solver",
    [em.Adam(0.01), em.LevenbergMarquardt(chunk_size=8)],
    ids=["adam", "lm"],
)
def test_survey_other_solvers_equal_single_solves(problem, solver):
    objectives, model, _ = problem
    # Data terms only (least squares): configurations 0 and 3 differ in their data.
    objectives = [objectives[i].terms[0] for i in (0, 3)]
    res = em.survey(objectives, model, solver, max_steps=15, devices=jax.devices()[:1])
    for i, o in enumerate(objectives):
        s = em.solve(o, model, solver, max_steps=15)
        assert_allclose(res.solutions.model.params[i], s.model.params, rtol=1e-9)
        assert int(res.solutions.steps[i]) == int(s.steps)


_LEAST_SQUARES_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import eqmodels as em
from tests.problems.survey import least_squares_problem
objectives, model = least_squares_problem()
res = em.survey(objectives, model, em.{solver}(chunk_size=64), max_steps=2,
                devices=jax.devices()[:2], chunk_size=2)
print(json.dumps(np.asarray(res.solutions.value).tolist()))
"""


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["GaussNewton", "LevenbergMarquardt"])
def test_least_squares_survey_on_several_cpu_devices_finishes(solver):
    """Two configurations per device on two CPU devices: jaxlib's batched
    Cholesky waited on XLA's CPU thread pool from every device at once and the
    survey hung for ever (from a review). Run in a child process with a time
    limit, so that a regression fails instead of hanging the suite."""
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _LEAST_SQUARES_CHILD.format(root=str(ROOT), solver=solver),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    values = json.loads(out.stdout.strip().splitlines()[-1])
    objectives, model = least_squares_problem()
    ls = getattr(em, solver)(chunk_size=64)
    for v, o in zip(values, objectives):
        single = em.solve(o, model, ls, max_steps=2)
        assert_allclose(v, single.value, rtol=1e-9)


@pytest.mark.slow
def test_survey_auto_chunk_follows_the_memory_budget(problem, capsys):
    objectives, model, singles = problem
    # 4 configurations on 2 devices: at most 2 per device; the chunk programs are
    # the ones the other tests compiled (1 and 2 per device).
    small = _survey(objectives[:4], model, chunk_size="auto", memory_budget=1)
    assert small.chunk_size == 1 and small.computed_chunks == (0, 1)
    big = _survey(objectives[:4], model, chunk_size="auto", memory_budget=2**30)
    assert big.chunk_size == 2 and big.computed_chunks == (0,)
    for i in range(4):
        assert_allclose(
            big.solutions.model.params[i], singles[i].model.params, rtol=1e-9
        )
    # Progress between chunks (plain lines without tqdm).
    _survey(objectives[:4], model, progress=True)
    assert "survey: 4/4 configurations" in capsys.readouterr().err


def test_enable_compilation_cache_rejects_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="`path`"):
        em.enable_compilation_cache(f)
    # From a review: a folder under a file raised a bare NotADirectoryError, and
    # "" silently meant the working folder.
    with pytest.raises(OSError, match="`path` .* cannot hold the compilation cache"):
        em.enable_compilation_cache(f / "sub")
    with pytest.raises(ValueError, match="`path` is empty"):
        em.enable_compilation_cache("")


def test_enable_compilation_cache_names_a_blank_environment_variable(monkeypatch):
    monkeypatch.setenv("EQMODELS_CACHE_DIR", "  ")
    with pytest.raises(ValueError, match=r"\$EQMODELS_CACHE_DIR is blank"):
        em.enable_compilation_cache()


@pytest.mark.skipif(
    not os.path.isdir("/proc/sys") or os.access("/proc/sys", os.W_OK),
    reason="needs an existing folder no one may write to (Linux's /proc/sys)",
)
def test_enable_compilation_cache_rejects_an_unwritable_folder():
    """From a review: an existing unwritable folder was accepted, and every later
    compilation warned that it could not write its entry."""
    with pytest.raises(OSError, match="cannot hold the compilation cache"):
        em.enable_compilation_cache("/proc/sys")


@pytest.mark.slow
def test_survey_over_data_sets_of_different_lengths():
    """Two days (04-10 lo, and 04-10 without SM: fewer rows and points) padded to one
    shape with `pad_to_match`: one survey equals a single solve per day."""
    from tests.problems.m87 import DAY_100, load_day as _day, round1 as _round1

    day = _day(DAY_100)
    days = [day, day.flag_stations(["SM"])]
    grid = em.ImageGrid.from_fov(16, 128.0)
    objectives = [_round1(d, "separable", grid)[1] for d in days]
    assert objectives[0].terms[0].rows != objectives[1].terms[0].rows
    padded = em.pad_to_match(objectives)
    prior = em.GaussianImage(grid, 0.6, em.uas_to_rad(40.0))()
    model = em.PixelImage.from_image(prior, grid)
    res = em.survey(padded, model, "lbfgs", max_steps=15, devices=jax.devices()[:1])
    for k, obj in enumerate(objectives):
        single = em.solve(obj, model, "lbfgs", max_steps=15)
        assert_allclose(res.solutions.value[k], single.value, rtol=1e-9)
        assert_allclose(res.solutions.model.params[k], single.model.params, rtol=1e-8)


@pytest.mark.slow
def test_survey_over_padded_terms_composed_afterwards():
    """From a review: terms padded to one length with `pad_to_match`, then
    weighted and composed (`0.5 * term + Flux`), were refused as of different
    structure: the padded term's rows (copies of row 0) repeat, so it alone got a
    shared transform of its distinct points and the longer day none. A term of
    one point a row now never shares alone; the survey equals single solves."""
    from tests.problems.m87 import DAY_100, load_day as _day

    day = _day(DAY_100)
    grid = em.ImageGrid.from_fov(16, 128.0)
    terms = [
        em.AmpChi2.from_data(em.amplitudes(d), grid, forward="separable")
        for d in (day, day.flag_stations(["SM"]))
    ]
    padded = em.pad_to_match(terms)
    assert padded[0].rows == padded[1].rows > terms[1].rows
    prior = em.GaussianImage(grid, 0.6, em.uas_to_rad(40.0))()
    model = em.PixelImage.from_image(prior, grid)
    for build in (
        lambda t: 0.5 * t + 10 * em.Flux(0.6),
        lambda t: em.Objective([0.5 * t, 10 * em.Flux(0.6)], share=False),
    ):
        objectives = [build(t) for t in padded]
        assert [len(o.shared) for o in objectives] == [0, 0]
        res = em.survey(objectives, model, max_steps=10, devices=jax.devices()[:1])
        for k, obj in enumerate(objectives):
            single = em.solve(obj, model, max_steps=10)
            assert_allclose(res.solutions.value[k], single.value, rtol=1e-9)


def test_checkpoint_fingerprint_refuses_what_it_cannot_reach():
    """Settings nested deeper than the fingerprint goes are refused with a clear
    error, never fingerprinted by a constant (two different solvers would then
    share a checkpoint folder)."""
    from eqmodels._solvers._checkpoint import _describe

    deep = 0.01
    for _ in range(150):
        deep = [deep]
    with pytest.raises(ValueError, match="too deep to fingerprint"):
        _describe(deep)
    assert _describe([[[0.01]]]) != _describe([[[0.5]]])


def test_survey_refuses_configurations_of_different_dtypes(problem):
    """From a review: float64 and float32 configurations ran together in float64
    (the float32 one came back float64, another value than its own solve)."""
    objectives, model, _ = problem
    cast = lambda t: jax.tree.map(  # noqa: E731
        lambda x: (
            x.astype(jnp.float32)
            if eqx.is_array(x) and x.dtype == jnp.float64
            else x.astype(jnp.complex64)
            if eqx.is_array(x) and x.dtype == jnp.complex128
            else x
        ),
        t,
    )
    with pytest.raises(ValueError, match="configuration 1 has a float32 array leaf"):
        _survey([objectives[0], cast(objectives[1])], model)


@pytest.mark.slow
def test_top_set_ranks_by_data_terms_and_a_tuple_is_one_model(problem):
    """From a review: a threshold on a regularizer's report key averaged its
    penalty into the top set's order; a tuple model was split into one model per
    configuration (as `solve` takes a tuple as one pytree model, so does `survey`)."""
    objectives, model, _ = problem
    res = _survey(objectives[:3], model)
    keys = [k for k in res.solutions.report if k not in res.data_names]
    assert keys  # the TSV penalty's report key
    generous = {k: 1e30 for k in (*res.data_names, *keys)}
    assert np.array_equal(res.top_set(generous), np.asarray(res.ranking()))
    pairs = [_Pair(o) for o in objectives[:2]]
    res = _survey(pairs, (model, model), max_steps=2)
    single = em.solve(pairs[1], (model, model), SOLVER, max_steps=2)
    assert_allclose(res.solutions.value[1], single.value, rtol=1e-12)


class _Pair(eqx.Module):
    """An objective of a model that is a tuple of two image models."""

    term: eqx.Module

    def __call__(self, models):
        return self.term(models[0]) + self.term(models[1])


@pytest.mark.slow
def test_survey_over_fixed_gains_of_two_data_sets_equals_single_solves():
    """Gains of two data sets (their own solution intervals, a static table)
    inside the objectives' `GainCorrected` terms were refused (from a review:
    "cannot be stacked"); the survey now pads them to one table and each
    configuration equals its own solve."""
    d = em.load_uvfits(em.example_uvfits()).scan_average()
    later = d.replace(time=np.asarray(d.time) + 0.01)  # 36 s later: other bounds
    early = d.select_time(float(np.min(d.time)), float(np.median(d.time)))
    grid = em.ImageGrid.from_fov(16, 128.0)
    objectives = [
        em.Objective(
            [
                em.GainCorrected(
                    em.VisChi2.from_data(x, grid),
                    em.StationGains.from_data(x, gains=np.full(shape, 1.1 + 0.2j)),
                )
            ]
        )
        for x in (d, later, early)
        for shape in [em.StationGains.from_data(x).log_amp.shape]
    ]
    model = em.PixelImage.from_image(np.full((16, 16), 1e-3), grid)
    res = em.survey(em.pad_to_match(objectives), model, max_steps=5)
    assert res.gains_tables is not None  # padded (the model holds no gains)
    for k, obj in enumerate(objectives):
        single = em.solve(obj, model, max_steps=5)
        assert_allclose(res[k].value, single.value, rtol=1e-9)
        assert_allclose(res[k].model.params, single.model.params, rtol=1e-8)


def test_survey_results_and_throw(problem):
    """A member that starts on NaN stops `nonfinite` on its own (the other runs
    on); with `throw=True` the survey raises, naming the configuration and the
    reason (on the host: an `eqx.error_if` inside a program split over two CPU
    devices aborted the process)."""
    objectives, model, _ = problem
    bad = eqx.tree_at(lambda m: m.params, model, jnp.full_like(model.params, jnp.nan))
    res = _survey(objectives[:2], [model, bad], max_steps=5, chunk_size=2)
    assert list(res.solutions.reason[:2]) != ["nonfinite", "nonfinite"]
    assert res[1].result == em.RESULTS.nonfinite and res[1].reason == "nonfinite"
    assert res[0].reason != "nonfinite" and int(res[0].steps) > 0
    with pytest.raises(RuntimeError, match="configuration 1 failed: nonfinite"):
        _survey(objectives[:2], [model, bad], max_steps=5, chunk_size=2, throw=True)
