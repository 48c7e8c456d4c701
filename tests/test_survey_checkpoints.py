"""Survey checkpoint folders that can be trusted (issue 41, item 1): a folder
belongs to one survey (its fingerprint written before the first chunk, a lock
against a second survey), and a chunk or record that is missing, truncated,
corrupt, swapped or of the wrong shape is refused, naming the file; the
fingerprint sees every array of a callable, whatever holds it, and refuses what
it cannot see."""

import json
import os
import socket
import subprocess
import sys
import threading
import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from eqmodels._solvers._checkpoint import fingerprint
from tests.problems.survey import configurations


@pytest.fixture(scope="module")
def problem():
    return configurations()


def _survey(objectives, model, folder, **kw):
    """Two configurations, one per chunk, on one device: two chunk files."""
    kw.setdefault("max_steps", 3)
    return em.survey(
        objectives,
        model,
        em.LBFGS(),
        chunk_size=1,
        devices=jax.devices()[:1],
        checkpoint=folder,
        **kw,
    )


@pytest.fixture
def finished(problem, tmp_path):
    """A folder holding a finished two-chunk survey, and a function rerunning it."""
    objectives, model = problem
    folder = tmp_path / "ckpt"
    first = _survey(objectives[:2], model, folder)
    assert first.computed_chunks == (0, 1)
    assert not (folder / "survey.lock").exists()  # released

    def again():
        return _survey(objectives[:2], model, folder)

    res = again()
    assert res.loaded_chunks == (0, 1) and res.computed_chunks == ()
    return folder, again


def test_a_finished_folder_records_its_chunks(finished):
    folder, _ = finished
    record = json.loads((folder / "survey.json").read_text())
    assert record["format"] == 2 and len(record["fingerprint"]) == 64
    assert record["chunks"]["00001"]["configurations"] == [1, 2]
    with np.load(folder / "chunk_00001.npz") as f:
        np.testing.assert_array_equal(f["configurations"], [1])
        assert str(f["fingerprint"]) == record["fingerprint"]
        assert len(str(f["content_sha256"])) == 64


def test_corrupt_chunk_is_refused(finished):
    folder, again = finished
    path = folder / "chunk_00000.npz"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"chunk_00000\.npz"):
        again()


def test_truncated_chunk_is_refused(finished):
    folder, again = finished
    path = folder / "chunk_00001.npz"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"chunk_00001\.npz is unreadable"):
        again()


def test_missing_chunk_is_refused(finished):
    folder, again = finished
    (folder / "chunk_00001.npz").unlink()
    with pytest.raises(ValueError, match=r"chunk_00001\.npz is missing"):
        again()


def test_swapped_chunks_are_refused(finished):
    folder, again = finished
    a, b = folder / "chunk_00000.npz", folder / "chunk_00001.npz"
    tmp = folder / "x"
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    with pytest.raises(
        ValueError, match=r"chunk_00000\.npz holds configurations 1\.\.1, not 0\.\.0"
    ):
        again()


def test_chunk_of_the_wrong_shape_is_refused(finished):
    """A chunk rewritten whole (consistent hash) with a leaf of another shape."""
    from eqmodels._solvers._checkpoint import _content_hash

    folder, again = finished
    path = folder / "chunk_00000.npz"
    with np.load(path) as f:
        content = {k: f[k] for k in f.files}
    content["leaf_0"] = np.concatenate([content["leaf_0"]] * 2)
    leaves = [content[f"leaf_{j}"] for j in range(len(content) - 3)]
    content["content_sha256"] = np.asarray(
        _content_hash(leaves, content["configurations"], str(content["fingerprint"]))
    )
    np.savez(path, **content)
    with pytest.raises(ValueError, match=r"chunk_00000\.npz's result leaf 0 is"):
        again()


def test_a_chunk_replaced_by_an_intact_copy_of_another_run_is_refused(
    finished,
):
    """A chunk file that is valid in itself but not the file `survey.json`
    records (its hash differs) is refused."""
    folder, again = finished
    record = json.loads((folder / "survey.json").read_text())
    record["chunks"]["00000"]["sha256"] = "0" * 64
    (folder / "survey.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"chunk_00000\.npz is not the file"):
        again()


@pytest.mark.parametrize("damage", ["missing", "corrupt", "not a record"])
def test_a_missing_or_corrupt_record_is_refused(finished, damage):
    folder, again = finished
    record = folder / "survey.json"
    if damage == "missing":
        record.unlink()
        match = r"holds chunk files \(chunk_00000\.npz, \.\.\.\) but no record"
    elif damage == "corrupt":
        record.write_text(record.read_text()[:40])
        match = r"its record survey\.json is unreadable or corrupt"
    else:
        record.write_text("[1, 2]")
        match = r"its record survey\.json is corrupt"
    with pytest.raises(ValueError, match=match):
        again()


def test_the_fingerprint_is_written_before_the_first_chunk(problem, tmp_path):
    objectives, model = problem
    seen = []

    def look(i, sol):
        if i == 0:
            seen.append(json.loads((tmp_path / "survey.json").read_text()))
            seen.append(json.loads((tmp_path / "survey.lock").read_text()))

    _survey(objectives[:2], model, tmp_path, callback=look)
    assert len(seen[0]["fingerprint"]) == 64
    assert seen[1] == {**seen[1], "pid": os.getpid(), "host": socket.gethostname()}


def test_two_surveys_on_one_folder(problem, tmp_path):
    """A second survey while the first runs (in this process, in another running
    process, or on another host) is refused; a lock left by a dead process on
    this host is taken over."""
    objectives, model = problem
    errors = []

    def second(i, sol):
        if i == 0:
            with pytest.raises(ValueError, match="in use by this process") as e:
                _survey(objectives[:2], model, tmp_path / "a")
            errors.append(e)

    _survey(objectives[:2], model, tmp_path / "a", callback=second)
    assert len(errors) == 1
    lock = tmp_path / "b" / "survey.lock"
    lock.parent.mkdir()
    host = socket.gethostname()
    # Another process that runs.
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock.write_text(json.dumps({"pid": live.pid, "host": host, "time": 0}))
        with pytest.raises(ValueError, match=f"in use by process {live.pid}"):
            _survey(objectives[:2], model, lock.parent)
    finally:
        live.kill()
        live.wait()
    # Another host.
    lock.write_text(json.dumps({"pid": 1, "host": "elsewhere", "time": 0}))
    with pytest.raises(ValueError, match="in use by process 1 on elsewhere"):
        _survey(objectives[:2], model, lock.parent)
    # A dead process of this host (the one above, reaped): taken over.
    lock.write_text(json.dumps({"pid": live.pid, "host": host, "time": 0}))
    res = _survey(objectives[:2], model, lock.parent)
    assert res.computed_chunks == (0, 1)
    assert not lock.exists()


# --- the fingerprint sees every array of a callable, whatever holds it ---------


class _Slots:
    __slots__ = ("term",)

    def __init__(self, term):
        self.term = term

    def __call__(self, model):
        return self.term(model)


class _ReadsAGlobal:
    """A plain callable whose data is a module-level term."""

    def __call__(self, model):
        return _TERM(model)


class _ModuleReadsAGlobal(eqx.Module):
    def __call__(self, model):
        return _TERM(model)


_TERM = None


def _fp(objective):
    return fingerprint(objective, None, None)


def test_fingerprint_sees_data_wherever_a_callable_holds_it(monkeypatch):
    """Each of these gave one fingerprint for other data before (stale results
    loaded)."""
    a, b = jnp.ones(3), jnp.zeros(3)
    assert _fp(_Slots(a)) != _fp(_Slots(b))
    this = sys.modules[__name__]
    for make in (_ReadsAGlobal, _ModuleReadsAGlobal):
        monkeypatch.setattr(this, "_TERM", a)
        first = _fp(make())
        monkeypatch.setattr(this, "_TERM", b)
        assert _fp(make()) != first, make
    # A user's module read by attribute.
    data = types.ModuleType("user_data_for_a_test")
    data.vis = np.ones(3)

    def objective(model):
        return data.vis

    first = _fp(objective)
    data.vis = np.zeros(3)
    assert _fp(objective) != first
    # A plain class's code.
    holder = _Slots(a)
    first = _fp(holder)
    monkeypatch.setattr(_Slots, "__call__", lambda self, m: 2 * self.term(m))
    assert _fp(holder) != first


def test_fingerprint_refuses_what_it_cannot_see():
    lock = threading.Lock()

    def objective(model):
        with lock:
            return model

    with pytest.raises(ValueError, match=r"_thread\.lock .*cannot be fingerprinted"):
        _fp(objective)


_STALE = None


class _Objective:
    """A plain callable reading a module-level objective (the data a review
    changed between two runs of a survey)."""

    def __call__(self, model):
        return _STALE(model)


def test_stale_results_of_a_changed_callable_never_load(problem, tmp_path, monkeypatch):
    objectives, model = problem
    this = sys.modules[__name__]
    monkeypatch.setattr(this, "_STALE", objectives[0])
    _survey([_Objective()] * 2, model, tmp_path)
    assert _survey([_Objective()] * 2, model, tmp_path).loaded_chunks == (0, 1)
    monkeypatch.setattr(this, "_STALE", objectives[4])  # other data
    with pytest.raises(ValueError, match="holds another survey"):
        _survey([_Objective()] * 2, model, tmp_path)
    # In a new folder, the other data give other results.
    res = _survey([_Objective()] * 2, model, tmp_path / "new")
    assert res.computed_chunks == (0, 1)
