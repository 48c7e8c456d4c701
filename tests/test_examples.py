"""The README's quick start runs and actually reconstructs."""

import importlib.util
import pathlib

import numpy as np


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
