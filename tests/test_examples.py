"""The examples run and actually reconstruct: the README's quick start and the
joint gain solve in this process, the M87 walk-through, the training loop, the
survey and the sharded run as scripts in their own processes."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import eqmodels as em


pytestmark = pytest.mark.slow  # the examples, some as child processes


EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quickstart_reconstructs_the_ring(tmp_path, monkeypatch):
    quickstart = load("quickstart")
    monkeypatch.setattr(quickstart, "save_png", lambda *a: None)
    final_chi2, corr = quickstart.main(n_steps=150)
    assert np.isfinite(final_chi2)
    # From chi² ~ 3000 at the flat start to near the noise level, and the ring.
    assert final_chi2 < 3.0
    assert corr > 0.95


def test_joint_gains_example_calibrates():
    """Round 1 → self-calibration → joint image + gain solve on gain-corrupted data
    (10 % amplitudes, random phases): χ² near 1 from a start near 6·10⁴, gain
    amplitudes recovered, the ring recovered up to a shift."""
    chi2, err, corr = load("joint_gains").main(n_steps=100)
    assert chi2["vis"] < 3.0 and chi2["cphase"] < 1.5 and chi2["logcamp"] < 1.6
    assert err < 0.06
    assert corr > 0.9


# ---------------------------------------------------------------- scripts, run as
# a user runs them: each in a fresh process (the sharded example sets its device
# count before jax starts), with few iterations, figures into tmp_path.
ROOT = EXAMPLES.parent
DRIVER = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("example", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
result = module.main(sys.argv[2:])
as_json = lambda x: x.tolist() if hasattr(x, "tolist") else str(x)
print("RESULT " + json.dumps(result, default=as_json))
"""


def run_example(name, *args, tmp_path):
    """Run `examples/<name>.py` with `args` (plus `--figures` when matplotlib is
    installed) in a subprocess; its `main`'s result, and the figure folder or
    `None`."""
    figures = None
    if importlib.util.find_spec("matplotlib") is not None:
        figures = tmp_path / "figures"
        args = (*args, "--figures", str(figures))
    path = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    env.setdefault("JAX_PLATFORMS", "cpu")
    # A few iterations each: compiling fast matters more than running fast (XLA's
    # backend optimisation off takes a third off the walk-through's time).
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0"
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(EXAMPLES / f"{name}.py"), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    line = next(s for s in proc.stdout.splitlines() if s.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :]), figures


def check_figures(result, figures, names):
    if figures is None:  # no matplotlib: no figures
        assert result["figures"] == []
        return
    assert sorted(pathlib.Path(p).name for p in result["figures"]) == sorted(names)
    for name in names:
        path = figures / name
        assert path.is_file() and 5_000 < path.stat().st_size < 300_000


def test_m87_walkthrough(tmp_path):
    """The recipe step by step on the shipped file, five steps per run and no
    restarts: a finite 0.6 Jy image in a FITS file, a closure score, five figures."""
    out = tmp_path / "m87.fits"
    result, figures = run_example(
        "m87_walkthrough", "--iterations", "5", "--restarts", "0", "-o", str(out),
        tmp_path=tmp_path,
    )  # fmt: skip
    image, grid = em.load_fits(out)
    assert image.shape == (64, 64) and np.all(np.isfinite(image)) and image.min() >= 0
    assert abs(image.sum() - 0.6) < 0.06
    assert abs(result["flux"] - image.sum()) < 1e-9
    assert len(result["rounds"]) == 4
    assert all(np.isfinite(r["objective"]) for r in result["rounds"])
    assert all(np.isfinite(v) and v > 0 for v in result["score"].values())
    names = ["data", "prior", "rounds", "final", "residuals"]
    check_figures(result, figures, [f"walkthrough_{n}.png" for n in names])


def test_training_loop(tmp_path):
    """A user-defined m-ring in an optax loop: the loss falls tenfold, the ring's
    diameter lands near M87's 40-odd µas, the flux is the model's 0.6 Jy."""
    result, figures = run_example("training_loop", "--steps", "60", tmp_path=tmp_path)
    losses = result["losses"]
    assert len(losses) == 60 and np.all(np.isfinite(losses))
    assert losses[-1] < 0.1 * losses[0]
    assert 30.0 < result["diameter"] < 55.0
    assert abs(result["flux"] - 0.6) < 1e-9
    check_figures(result, figures, ["training_loop.png"])


def test_survey(tmp_path):
    """Four weight configurations in one program: ranked by χ², all near 0.6 Jy."""
    result, figures = run_example(
        "survey", "--fast", "--steps", "10", tmp_path=tmp_path
    )
    chi2 = np.asarray(result["chi2"])
    assert chi2.shape == (4,) and np.all(np.isfinite(chi2))
    assert np.all(np.diff(chi2[result["ranking"]]) >= 0)  # best first
    assert np.allclose(result["fluxes"], 0.6, atol=0.06)
    check_figures(result, figures, ["survey.png", "survey_chi2.png"])


def test_sharded(tmp_path):
    """Four virtual devices: the sharded objective's value and gradient are the
    unsharded ones to rounding, and a solve with it runs."""
    result, figures = run_example("sharded", "--steps", "10", tmp_path=tmp_path)
    assert result["devices"] == 4
    v, ref = result["value_sharded"], result["value_plain"]
    assert np.isfinite(v) and abs(v - ref) <= 1e-12 * abs(ref)
    assert result["grad_diff"] < 1e-9
    assert abs(result["flux"] - 0.6) < 0.06
    check_figures(result, figures, ["sharded.png"])


def test_m87_pol_walkthrough(tmp_path, shared_data):
    """Polarimetric imaging of M87 2017-04-11 with a fixed Stokes I, five steps
    per round: three rounds (the second and third with the D-terms) whose
    fractional-polarization χ² falls, Paper VII's numbers in their bounds
    (|β₂| and the net |m| cannot exceed ⟨|m|⟩), D-terms per station, three
    figures."""
    uvfits = (
        shared_data / "eht" / "m87_2017_pol" / "hops_data" / "April11"
        / "SR2_M87_2017_101_lo_hops_zbl-dtcal+selfcal.uvfits"
    )  # fmt: skip
    stokes_i = shared_data / "reference" / "m87_2017_101_ehtim_pipeline.fits"
    result, figures = run_example(
        "m87_pol_walkthrough", str(uvfits), "--stokes-i", str(stokes_i),
        "--iterations", "5", tmp_path=tmp_path,
    )  # fmt: skip
    rounds = result["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert all(np.isfinite(r["objective"]) for r in rounds)
    assert rounds[2]["m"] < rounds[0]["m"] and "dterm" in rounds[1]
    s = result["summary"]
    assert 0 < s["m_net"] <= s["m_avg"] < 1 and 0 <= s["beta2_amp"] <= s["m_avg"]
    assert -90 <= s["evpa_deg"] <= 90
    stokes = np.asarray(result["stokes"])
    assert stokes.shape == (4, 64, 64) and np.all(np.isfinite(stokes))
    image, _ = em.load_fits(stokes_i)
    np.testing.assert_allclose(stokes[0], image, rtol=1e-12)  # Stokes I held
    assert np.all(np.hypot(stokes[1], stokes[2]) < stokes[0] + 1e-15)
    assert set(result["dterms"]) == {"AA", "AP", "AZ", "LM", "PV", "SM"}
    held = [np.hypot(*d) for s in ("AA", "AP", "SM") for d in result["dterms"][s]]
    assert max(held) < 0.005  # the zero-baseline-corrected stations' prior holds
    names = ["polarization", "dterms", "residuals"]
    check_figures(result, figures, [f"pol_m87_{n}.png" for n in names])
