"""The command line and the published 2017 M87 recipe (`em.image_m87`), and the
calibration-independent closure score (`em.closure_score`)."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import eqmodels as em


ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY_100 = ROOT / "tests" / "data" / "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits"
DAY_101 = "eht/m87_2017/SR1_M87_2017_101_{}_hops_netcal_StokesI.uvfits"
REFERENCE = "reference/m87_2017_101_ehtim_pipeline.fits"


def test_cli_fast(tmp_path):
    """`python -m eqmodels image ... --fast` writes a finite 0.6 Jy image and a
    plot, and prints a χ² table whose closure χ² fall from round 1's start."""
    out = tmp_path / "m87.fits"
    png = tmp_path / "m87.png"
    proc = subprocess.run(
        [sys.executable, "-m", "eqmodels", "image", str(DAY_100), "-o", str(out),
         "--png", str(png), "--fast"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    header = [
        i for i, s in enumerate(lines) if s.split()[:3] == ["round", "run", "steps"]
    ]
    assert header, proc.stdout
    rows = [
        s.split() for s in lines if s.split() and s.split()[0] in ("1", "2", "3", "4")
    ]
    assert {r[0] for r in rows} == {"1", "2", "3", "4"}  # four rounds in the table
    # The first row is round 1's start (the prior); the closure χ² fall from it.
    start, end = rows[0], rows[-1]
    assert start[1] == "-" and end[0] == "4"
    for col in (6, 7):  # cphase, logcamp
        assert float(end[col]) < 0.5 * float(start[col])
    assert float(end[3]) < float(start[3])  # the objective
    assert png.is_file() and png.stat().st_size > 1000
    image, grid = em.load_fits(out)
    assert image.shape == (64, 64) and grid.shape == (64, 64)
    assert np.all(np.isfinite(image)) and image.min() >= 0
    assert abs(image.sum() - 0.6) < 0.06


def test_closure_score_reproduces_pipeline(shared_data):
    """The EHT pipeline's image scores cphase 0.72, logcamp 0.70 on 2017-04-11
    (../shared/data/README.md)."""
    ref = shared_data / REFERENCE
    if not ref.is_file():
        pytest.skip(f"{ref} is not present")
    import jax

    jax.config.update("jax_enable_x64", True)
    paths = [shared_data / DAY_101.format(b) for b in ("lo", "hi")]
    score = em.closure_score(ref, paths)
    assert score["cphase"] == pytest.approx(0.72, rel=0.05)
    assert score["logcamp"] == pytest.approx(0.70, rel=0.05)
