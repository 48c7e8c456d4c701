"""`sample`'s HMC, its chunked draws, checkpoints, resume and progress display: a
chunked run equals an unchunked one bit for bit, an interrupted run resumed from
its checkpoint folder equals an uninterrupted one bit for bit, and a folder of
another run, or a corrupt one, is refused naming what differs or the file."""

import json
import os
import re
import sys
import types

import equinox as eqx
import jax
import numpy as np
import pytest

import eqmodels as em
from eqmodels._solvers._checkpoint import CheckpointError

from .test_posterior import Problem
from .unchecked import unchecked_error


pytest.importorskip("blackjax")

# One small run everywhere (2 chains, 16 parameters; HMC, whose programs compile
# faster than NUTS'): the tests share its compiled programs.
W, S, EVERY, STEPS = 20, 8, 3, 5
KW = dict(
    key=jax.random.key(7),
    method="hmc",
    num_integration_steps=STEPS,
    num_warmup=W,
    num_chains=2,
)
FIELDS = ("positions", "log_density")


@pytest.fixture(scope="module")
def problem():
    return Problem()


@pytest.fixture(scope="module")
def plain(problem):
    """The reference: S draws in one chunk, no checkpoint."""
    return em.sample(problem.posterior, num_samples=S, **KW)


def assert_same(a, b, count=None):
    """`a`'s draws and statistics equal `b`'s (its first `count` draws) bit for
    bit."""
    cut = slice(None) if count is None else slice(0, count)
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f)[:, cut])
    for k, v in a.stats.items():
        w = b.stats[k]
        w = w if k in ("step_size", "inverse_mass_matrix") else w[:, cut]
        np.testing.assert_array_equal(v, w, err_msg=k)
    np.testing.assert_array_equal(a.draws.params, b.draws.params[:, cut])


def test_hmc_draws_and_chunks_equal_one_chunk_bit_for_bit(problem, plain):
    p = problem.posterior
    assert plain.positions.shape == (2, S, 16)
    assert plain.draws.params.shape == (2, S, 16)
    assert np.all(np.asarray(plain.stats["num_integration_steps"]) == STEPS)
    assert plain.stats["step_size"].shape == (2,)
    assert np.all(np.asarray(plain.stats["step_size"]) > 0)
    # The draws move (HMC accepts), and the recorded log densities are the
    # posterior's at the draws.
    assert float(plain.stats["acceptance_rate"].mean()) > 0.3
    assert np.unique(np.asarray(plain.positions[0]), axis=0).shape[0] > 1
    lp = eqx.filter_vmap(p.log_density_unconstrained)(plain.positions[1])
    np.testing.assert_allclose(plain.log_density[1], lp, rtol=1e-12)
    # Chunks of 3 (3 + 3 + 2): the same draws, bit for bit.
    chunked = em.sample(p, num_samples=S, checkpoint_every=EVERY, **KW)
    assert_same(chunked, plain)
    # Another key gives other draws (the comparison can fail).
    other = em.sample(
        p, num_samples=S, checkpoint_every=EVERY, **{**KW, "key": jax.random.key(8)}
    )
    assert not np.array_equal(other.positions, plain.positions)


def test_interrupted_run_resumes_bit_for_bit(problem, plain, tmp_path):
    p = problem.posterior
    folder = tmp_path / "run"
    seen = []

    class Stop(Exception):
        pass

    def stop_after_first_chunk(done, samples):
        seen.append(done)
        assert samples.positions.shape == (2, done, 16)
        assert samples.draws.params.shape == (2, done, 16)
        if done == EVERY:
            raise Stop

    with pytest.raises(Stop):
        em.sample(
            p,
            num_samples=S,
            checkpoint=folder,
            checkpoint_every=EVERY,
            callback=stop_after_first_chunk,
            **KW,
        )
    assert seen == [EVERY]
    names = sorted(os.listdir(folder))
    assert names == ["draws_00000.npz", "sample.json", "warmup.npz"]  # no lock
    record = json.loads((folder / "sample.json").read_text())
    assert sorted(record["files"]) == ["draws_00000.npz", "warmup.npz"]
    assert record["options"]["num_warmup"] == W
    # Resumed: only the rest is computed, and the result is the uninterrupted one.
    resumed = em.sample(
        p,
        num_samples=S,
        checkpoint=folder,
        checkpoint_every=EVERY,
        callback=lambda done, s: seen.append(done),
        **KW,
    )
    assert seen == [EVERY, 6, 8]
    assert_same(resumed, plain)
    # Called once more: everything read back, nothing run, the same result.
    again = em.sample(
        p,
        num_samples=S,
        checkpoint=folder,
        checkpoint_every=EVERY,
        callback=lambda done, s: seen.append(done),
        **KW,
    )
    assert seen == [EVERY, 6, 8]
    assert_same(again, plain)
    # The chains' state after warm-up is on disk: the adapted step sizes.
    with np.load(folder / "warmup.npz") as f:
        np.testing.assert_array_equal(f["step_size"], plain.stats["step_size"])
        np.testing.assert_array_equal(
            f["inverse_mass_matrix"], plain.stats["inverse_mass_matrix"]
        )


def test_a_checkpoint_extends_and_shortens_a_run(problem, plain, tmp_path):
    """A run of 5 draws, called again for 8: the chains continue (the result is
    the 8-draw run's); called for 4: the first 4 draws."""
    p = problem.posterior
    short = em.sample(
        p, num_samples=5, checkpoint=tmp_path, checkpoint_every=EVERY, **KW
    )
    assert_same(short, plain, count=5)
    longer = em.sample(
        p, num_samples=S, checkpoint=tmp_path, checkpoint_every=EVERY, **KW
    )
    assert_same(longer, plain)
    record = json.loads((tmp_path / "sample.json").read_text())
    # 3 + 2 from the first call, then 3 more (draws 5, 6, 7).
    assert sorted(record["files"]) == [
        "draws_00000.npz",
        "draws_00001.npz",
        "draws_00002.npz",
        "warmup.npz",
    ]
    with np.load(tmp_path / "draws_00002.npz") as f:
        assert (int(f["start"]), int(f["stop"])) == (5, 8)
    first = em.sample(
        p, num_samples=4, checkpoint=tmp_path, checkpoint_every=EVERY, **KW
    )
    assert_same(first, plain, count=4)


def test_a_checkpoint_of_another_run_is_refused(problem, tmp_path):
    p = problem.posterior
    em.sample(p, num_samples=EVERY, checkpoint=tmp_path, checkpoint_every=EVERY, **KW)

    def again(posterior=p, **kw):
        return em.sample(
            posterior,
            num_samples=EVERY,
            checkpoint=tmp_path,
            checkpoint_every=EVERY,
            **{**KW, **kw},
        )

    with pytest.raises(CheckpointError, match=r"holds another `sample` run \(key "):
        again(key=jax.random.key(8))
    with pytest.raises(CheckpointError, match="num_warmup 20 there, 21 here"):
        again(num_warmup=W + 1)
    with pytest.raises(CheckpointError, match="num_integration_steps 5 there, 6 "):
        again(num_integration_steps=STEPS + 1)
    with pytest.raises(CheckpointError, match="method 'hmc' there, 'nuts' here"):
        again(method="nuts", num_integration_steps=None)
    with pytest.raises(CheckpointError, match="jitter 0.1 there, 0.2 here"):
        again(jitter=0.2)
    with pytest.raises(CheckpointError, match="num_chains 2 there, 4 here"):
        again(num_chains=4)
    with pytest.raises(CheckpointError, match=r"\(init "):
        again(init=eqx.tree_at(lambda m: m.params, p.model, p.model.params * 1.01))
    with pytest.raises(CheckpointError, match=r"\(another posterior"):
        again(posterior=Problem(seed=1).posterior)
    # The folder is unchanged by the refusals: the same run reads it back.
    again()


def _corrupt_run(problem, folder):
    return em.sample(
        problem.posterior,
        num_samples=S,
        checkpoint=folder,
        checkpoint_every=EVERY,
        **KW,
    )


def test_a_corrupt_checkpoint_is_refused_naming_the_file(problem, plain, tmp_path):
    _corrupt_run(problem, tmp_path)
    d1 = tmp_path / "draws_00001.npz"
    good = d1.read_bytes()
    # Truncated.
    d1.write_bytes(good[: len(good) // 2])
    with pytest.raises(CheckpointError, match="draws_00001.npz is unreadable"):
        _corrupt_run(problem, tmp_path)
    # Swapped with another chunk's file: not the file recorded; and, were it
    # not recorded, of the wrong draws.
    d1.write_bytes((tmp_path / "draws_00000.npz").read_bytes())
    with pytest.raises(CheckpointError, match="draws_00001.npz is not the file"):
        _corrupt_run(problem, tmp_path)
    record = tmp_path / "sample.json"
    text = record.read_text()
    rec = json.loads(text)
    del rec["files"]["draws_00001.npz"]
    record.write_text(json.dumps(rec))
    with pytest.raises(CheckpointError, match="draws_00001.npz holds draws 0..2, "):
        _corrupt_run(problem, tmp_path)
    record.write_text(text)
    # Missing, though recorded.
    d1.unlink()
    with pytest.raises(CheckpointError, match="draws_00001.npz is missing"):
        _corrupt_run(problem, tmp_path)
    d1.write_bytes(good)
    # An array changed (rewritten as a valid file): its content hash says so.
    with np.load(d1) as f:
        content = {k: f[k] for k in f.files}
    content["positions"] = content["positions"] + 1e-12
    with open(d1, "wb") as fh:
        np.savez(fh, **content)
    with pytest.raises(CheckpointError, match="content does not match its hash"):
        _corrupt_run(problem, tmp_path)
    d1.write_bytes(good)
    # The record corrupt.
    record.write_text(text[:-10])
    with pytest.raises(CheckpointError, match="sample.json is unreadable or corrupt"):
        _corrupt_run(problem, tmp_path)
    # A file the record does not know (written, then killed before it was
    # recorded) is checked, then recorded and used.
    rec = json.loads(text)
    del rec["files"]["draws_00002.npz"]
    record.write_text(json.dumps(rec))
    assert_same(_corrupt_run(problem, tmp_path), plain)
    assert "draws_00002.npz" in json.loads(record.read_text())["files"]
    # A file that is not the one recorded (its hash differs).
    rec = json.loads(record.read_text())
    rec["files"]["draws_00002.npz"] = "0" * 64
    record.write_text(json.dumps(rec))
    with pytest.raises(CheckpointError, match="draws_00002.npz is not the file"):
        _corrupt_run(problem, tmp_path)
    # State files without a record.
    record.unlink()
    with pytest.raises(CheckpointError, match="but no record sample.json"):
        _corrupt_run(problem, tmp_path)


def test_a_folder_in_use_is_refused(problem, tmp_path):
    lock = tmp_path / "sample.lock"
    lock.write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename}))
    with pytest.raises(CheckpointError, match="in use by this process"):
        _corrupt_run(problem, tmp_path)
    assert lock.exists()  # another run's lock is left alone
    lock.unlink()
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(ValueError, match="is a file: pass a folder"):
        _corrupt_run(problem, afile)


def test_progress_lines(problem, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # plain lines
    p = problem.posterior
    em.sample(p, num_samples=S, checkpoint_every=EVERY, progress=True, **KW)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "sample: warm-up, 20 steps of 2 chains ..."
    assert err[1].startswith("sample: warm-up done in ")
    assert [line.split(" (")[0] for line in err[2:]] == [
        "sample: 3/8 draws",
        "sample: 6/8 draws",
        "sample: 8/8 draws",
    ]
    assert re.search(r"\(acceptance [01]\.\d\d, divergences 0\)$", err[-1])
    # Resumed from a checkpoint: the draws read back are said so.
    em.sample(p, num_samples=5, checkpoint=tmp_path, checkpoint_every=EVERY, **KW)
    capsys.readouterr()
    em.sample(
        p,
        num_samples=S,
        checkpoint=tmp_path,
        checkpoint_every=EVERY,
        progress=True,
        **KW,
    )
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "sample: warm-up read back from the checkpoint"
    assert err[1] == "sample: 5 draws read back from the checkpoint"
    assert [line.split(" (")[0] for line in err[2:]] == [
        "sample: 5/8 draws",
        "sample: 8/8 draws",
    ]


def test_progress_with_tqdm(problem, monkeypatch):
    """With tqdm installed: one bar over the draws (a stand-in module records
    the calls)."""
    calls = []

    class FakeBar:
        def __init__(self, **kw):
            calls.append(("new", kw))

        def update(self, k):
            calls.append(("update", k))

        def set_postfix_str(self, s, refresh=True):
            calls.append(("postfix", s.split(",")[0]))

        def write(self, s, file=None):
            calls.append(("write", s.split(",")[0]))

        def close(self):
            calls.append(("close",))

    monkeypatch.setitem(sys.modules, "tqdm.auto", types.SimpleNamespace(tqdm=FakeBar))
    em.sample(
        problem.posterior, num_samples=S, checkpoint_every=EVERY, progress=True, **KW
    )
    assert calls[0] == ("new", dict(total=S, unit="draw", desc="sample", initial=0))
    updates = [c[1] for c in calls if c[0] == "update"]
    assert updates == [3, 3, 2]
    assert ("write", "sample: warm-up") in calls
    assert calls[-1] == ("close",)


def test_hmc_and_chunk_argument_errors(problem):
    p = problem.posterior
    key = jax.random.key(0)
    for bad in (0, -1, True):
        with pytest.raises(ValueError, match="`num_integration_steps` must be an int"):
            em.sample(p, key=key, method="hmc", num_integration_steps=bad)
    with pytest.raises(
        ValueError, match="`num_integration_steps` is for `method='hmc'"
    ):
        em.sample(p, key=key, num_integration_steps=10)
    for bad in (0, -3, True):
        with pytest.raises(ValueError, match="`checkpoint_every` must be an int"):
            em.sample(p, key=key, checkpoint_every=bad)


# Arguments of the wrong type, as users run eqmodels (without the suite's type
# checker, which refuses them first).
_SETUP = (
    "import jax; jax.config.update('jax_enable_x64', True); "
    "g = em.ImageGrid.from_fov((2, 2), 80.0); "
    "m = em.PixelImage(g, np.full((2, 2), 0.1), transform='identity'); "
    "t = em.VisChi2(em.DirectFT(g, [1e9], [2e9]), np.ones(1), np.ones(1)); "
    "p = em.Posterior(t, [em.GMRFPrior(g, tau=1.0, kappa=1.0)], m); "
    "k = jax.random.key(0)"
)
_BAD_TYPES = {
    "num_integration_steps=2.5": "`num_integration_steps` must be an int ≥ 1",
    "checkpoint_every=1.5": "`checkpoint_every` must be an int ≥ 1",
    "progress='yes'": "`progress` must be True or False, got 'yes'",
    "callback=3": "`callback` must be callable(done, samples) or None",
    "checkpoint=3": "`checkpoint` must be a folder path",
}
_BAD_CASES = {
    arg: unchecked_error(
        f"em.sample(p, key=k, method='hmc', {arg})",
        "(TypeError, ValueError)",
        setup=_SETUP,
    )
    for arg in _BAD_TYPES
}


def test_argument_types_without_the_type_checker(unchecked):
    for arg, message in _BAD_TYPES.items():
        assert message in (unchecked[_BAD_CASES[arg]] or ""), arg


@pytest.mark.slow
def test_nuts_chunked_and_resumed_equal_one_chunk_bit_for_bit(problem, tmp_path):
    p = problem.posterior
    kw = dict(key=jax.random.key(2), num_warmup=W, num_chains=2, num_samples=S)
    plain = em.sample(p, **kw)
    assert int(np.asarray(plain.stats["num_integration_steps"]).max()) > 1
    assert_same(em.sample(p, checkpoint_every=EVERY, **kw), plain)
    short = em.sample(
        p, checkpoint=tmp_path, checkpoint_every=EVERY, **{**kw, "num_samples": 4}
    )
    assert_same(short, plain, count=4)
    assert_same(em.sample(p, checkpoint=tmp_path, checkpoint_every=EVERY, **kw), plain)


@pytest.mark.slow
def test_chains_on_a_mesh_resume_bit_for_bit(problem, tmp_path):
    """4 chains on a 4-device mesh, chunked and checkpointed, interrupted and
    resumed: the draws stay spread over the devices and equal the uninterrupted
    spread run's."""
    if jax.device_count() < 4:
        pytest.skip("needs 4 devices")
    p = problem.posterior
    mesh = jax.make_mesh((4,), ("chains",))
    kw = {
        **KW,
        "num_chains": 4,
        "num_samples": S,
        "checkpoint_every": EVERY,
        "mesh": mesh,
    }
    spread = em.sample(p, **kw)
    assert len(spread.positions.sharding.device_set) == 4
    assert spread.positions.sharding.shard_shape(spread.positions.shape)[0] == 1

    def stop(done, samples):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        em.sample(p, checkpoint=tmp_path, callback=stop, **kw)
    resumed = em.sample(p, checkpoint=tmp_path, **kw)
    assert_same(resumed, spread)
    assert len(resumed.positions.sharding.device_set) == 4
    assert resumed.positions.sharding.shard_shape(resumed.positions.shape)[0] == 1
    assert resumed.stats["step_size"].sharding.shard_shape((4,)) == (1,)


def test_fingerprint_sees_through_a_type_checker_wrapper():
    """A function checked by jaxtyping + beartype (as the suite's import hook
    wraps the package's, `GMRFPrior`'s default `where` among them) is described
    by the function it wraps: before, its checker's data (described by memory
    address) made it refused."""
    from beartype import beartype
    from jaxtyping import Array, Float, jaxtyped

    from eqmodels._solvers._checkpoint import _describe

    def double(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return 2 * x

    def triple(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return 3 * x

    checked = jaxtyped(typechecker=beartype)(double)
    assert checked is not double and checked.__wrapped__ is double
    assert _describe(checked) == _describe(double)
    assert _describe(jaxtyped(typechecker=beartype)(triple)) != _describe(checked)


_CHILD = """
import os, signal, sys
os.environ["JAX_PLATFORMS"] = "cpu"
import jax
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, os.getcwd())
import eqmodels as em
from tests.test_posterior import Problem
from tests.test_sample_checkpoint import KW, S, EVERY

def die(done, samples):
    if done == 2 * EVERY:  # after the second chunk is written
        os.kill(os.getpid(), signal.SIGKILL)

em.sample(Problem().posterior, num_samples=S, checkpoint=sys.argv[1],
          checkpoint_every=EVERY, callback=die, **KW)
"""


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_bit_for_bit(problem, plain, tmp_path):
    """A process killed (SIGKILL) after its second chunk leaves its lock and two
    chunks; the next call takes the dead process's lock over and finishes with
    the uninterrupted run's draws."""
    import pathlib
    import signal
    import subprocess

    root = pathlib.Path(__file__).resolve().parents[1]
    folder = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(folder)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert (folder / "sample.lock").exists()  # left by the dead process
    assert sorted(json.loads((folder / "sample.json").read_text())["files"]) == [
        "draws_00000.npz",
        "draws_00001.npz",
        "warmup.npz",
    ]
    seen = []
    resumed = em.sample(
        problem.posterior,
        num_samples=S,
        checkpoint=folder,
        checkpoint_every=EVERY,
        callback=lambda done, s: seen.append(done),
        **KW,
    )
    assert seen == [S]  # only the last chunk ran here
    assert_same(resumed, plain)
    assert not (folder / "sample.lock").exists()


@pytest.mark.slow
def test_dense_mass_matrix_resumes_bit_for_bit(problem, tmp_path):
    """`dense_mass=True`: the adapted `(chains, n, n)` inverse mass matrix is
    saved after warm-up and read back, so a resumed run equals an uninterrupted
    one bit for bit; a folder of a diagonal run is refused."""
    p = problem.posterior
    whole = em.sample(p, num_samples=S, dense_mass=True, **KW)
    imm = np.asarray(whole.stats["inverse_mass_matrix"])
    assert imm.shape == (2, 16, 16)
    np.testing.assert_allclose(imm, np.swapaxes(imm, 1, 2), rtol=1e-10, atol=0)
    assert np.all(np.linalg.eigvalsh(imm) > 0)
    folder = tmp_path / "dense"

    class Stop(Exception):
        pass

    def stop(done, samples):
        raise Stop

    with pytest.raises(Stop):
        em.sample(
            p,
            num_samples=S,
            dense_mass=True,
            checkpoint=folder,
            checkpoint_every=EVERY,
            callback=stop,
            **KW,
        )
    resumed = em.sample(
        p,
        num_samples=S,
        dense_mass=True,
        checkpoint=folder,
        checkpoint_every=EVERY,
        **KW,
    )
    assert_same(resumed, whole)
    np.testing.assert_array_equal(resumed.stats["inverse_mass_matrix"], imm)
    with pytest.raises(CheckpointError, match="dense_mass"):
        em.sample(p, num_samples=S, checkpoint=folder, checkpoint_every=EVERY, **KW)
