"""`eqmodels image --multifreq B1 B2 ... -o OUT.fits`: its argument checks (before
any imaging) and a `--fast` run on two real 2018 bands (slow), which writes the
image, the α map (`OUT_alpha.fits`) and the side-by-side picture."""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import eqmodels as em
from eqmodels._cli import alpha_path


ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY_100 = str(em.example_uvfits())
BAND = "eht/m87_2018/L2V1_M87_2018_111_{}_hops_netcal_10s_StokesI.uvfits"


def test_alpha_path():
    assert alpha_path("out.fits") == "out_alpha.fits"
    assert alpha_path("d/m87.FITS.gz") == "d/m87_alpha.FITS.gz"
    assert alpha_path("a.fts") == "a_alpha.fts"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--multifreq", "{data}", "-o", "{tmp}/a.fits"], "two or more uvfits"),
        (["--multifreq", "-o", "{tmp}/a.fits"], "two or more uvfits"),
        (["--multifreq", "{data}", "{copy}"], "-o/--output is needed"),
        (
            [
                "--multifreq",
                "{data}",
                "{copy}",
                "-o",
                "{tmp}/a.fits",
                "--tb",
                "--png",
                "{tmp}/a.png",
            ],
            "--tb is not available with --multifreq",
        ),  # fmt: skip
        (
            [
                "--multifreq",
                "{data}",
                "{copy}",
                "-o",
                "{tmp}/a.fits",
                "--png",
                "{tmp}/a.png",
                "--restore-beam",
            ],
            "--restore-beam is not available",
        ),  # fmt: skip
        (
            ["--multifreq", "{data}", "{copy}", "-o", "{tmp}/old.fits"],
            "alpha map .*old_alpha.fits.* exists",
        ),
        (
            [
                "--multifreq",
                "{data}",
                "{copy}",
                "-o",
                "{tmp}/a.fits",
                "--png",
                "{tmp}/a_alpha.fits",
            ],
            "is the alpha map's file",
        ),  # fmt: skip
        (["--multifreq", "{data}", "{copy}", "-o", "{tmp}/a.png"], "not a FITS"),
    ],
)
def test_multifreq_refuses_bad_arguments_before_imaging(
    tmp_path, capsys, args, message
):
    from eqmodels._cli import main

    copy = tmp_path / "band2.uvfits"
    copy.write_bytes(pathlib.Path(DAY_100).read_bytes())
    (tmp_path / "old_alpha.fits").write_bytes(b"")
    argv = ["image"] + [a.format(tmp=tmp_path, data=DAY_100, copy=copy) for a in args]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert "eqmodels image: error:" in err


def test_image_multifreq_needs_two_bands():
    with pytest.raises(ValueError, match="at least two bands"):
        em.image_multifreq([DAY_100])
    with pytest.raises(ValueError, match="at least two bands"):
        em.image_multifreq(DAY_100)
    with pytest.raises(ValueError, match="at least two bands"):
        em.image_multifreq(pathlib.Path(DAY_100))
    with pytest.raises(ValueError, match="unknown keys"):
        em.image_multifreq([DAY_100, DAY_100], spectral_weights={"l2_beta": 1.0})


def test_band_scores_are_closure_score_with_the_chi2_scatter():
    """Each band's scores are `closure_score`'s; the scatter is `√(2/N)` for the
    closures' count `N`; `within` holds for an image against itself and fails for
    a joint image far worse than the band's own."""
    from eqmodels._recipe._multifreq import _band_scores

    grid = em.ImageGrid.from_fov(32, 128.0)
    ring = np.asarray(em.MRing(grid, 0.6, em.uas_to_rad(21.0))())
    blob = np.asarray(em.GaussianImage(grid, 0.6, em.uas_to_rad(40.0))())
    out = _band_scores(ring, blob, DAY_100, grid)
    assert out["alone"] == em.closure_score(ring, [DAY_100], grid=grid)
    assert out["joint"] == em.closure_score(blob, [DAY_100], grid=grid)
    cp, lca = em.closure_phases, em.log_closure_amplitudes
    data = em.add_fractional_noise(em.load_uvfits(DAY_100).scan_average(), 0.02)
    n_cp = np.asarray(cp(data, uv_min=1e8).cphase).size
    n_lca = np.asarray(lca(data.select_uvdist(uv_min=1e8)).logcamp).size
    assert out["n"] == {"cphase": n_cp, "logcamp": n_lca}
    assert out["scatter"]["cphase"] == pytest.approx(np.sqrt(2 / n_cp), rel=1e-15)
    assert out["scatter"]["logcamp"] == pytest.approx(np.sqrt(2 / n_lca), rel=1e-15)
    assert out["within"] == {"cphase": False, "logcamp": False}
    same = _band_scores(ring, ring, DAY_100, grid)
    assert same["within"] == {"cphase": True, "logcamp": True}


@pytest.mark.slow
def test_multifreq_cli_fast_two_2018_bands(shared_data, tmp_path):
    """b1 and b4 of 2018-04-21 (213 and 229 GHz): the image (finite, positive,
    0.6 Jy, dated at the bands' mean frequency), the α map (finite, unit-less
    header) and the picture; the joint objective falls."""
    from astropy.io import fits

    bands = [str(shared_data / BAND.format(b)) for b in ("b1", "b4")]
    out, png = tmp_path / "mf.fits", tmp_path / "mf.png"
    proc = subprocess.run(
        [sys.executable, "-m", "eqmodels", "image", "--multifreq", *bands,
         "-o", str(out), "--png", str(png), "--fast", "--no-cache"],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    joint = re.search(r"\[joint\] objective (\S+) -> (\S+)", proc.stdout)
    assert joint and float(joint[2]) < float(joint[1]), proc.stdout[-2000:]
    scores = re.findall(
        r"\[joint\] (\S+) GHz closure χ² \(alone -> joint\): cphase (\S+) -> "
        r"(\S+), logcamp (\S+) -> (\S+) \(scatter √\(2/N\) \S+, \S+: "
        r"(?:within|NOT within)\)",
        proc.stdout,
    )
    assert len(scores) == 2, proc.stdout[-2000:]  # one line per band, finite
    assert all(np.isfinite(float(x)) and float(x) > 0 for s in scores for x in s[1:])
    image, grid = em.load_fits(out)
    assert image.shape == (64, 64) and np.all(np.isfinite(image))
    assert image.min() >= 0 and abs(image.sum() - 0.6) < 0.06
    header = fits.getheader(out)
    freqs = [em.load_uvfits(b).band_freqs[0] for b in bands]
    freq_keys = [k for k, v in header.items() if v == "FREQ" and k.startswith("CTYPE")]
    if freq_keys:
        crval = header["CRVAL" + freq_keys[0][5:]]
        assert crval == pytest.approx(np.mean(freqs), rel=1e-9)
    alpha_file = tmp_path / "mf_alpha.fits"
    alpha = fits.getdata(alpha_file)
    assert alpha.shape == (64, 64) and np.all(np.isfinite(alpha))
    assert np.any(alpha != 0)
    assert fits.getheader(alpha_file)["BTYPE"] == "SPECTRAL INDEX"
    assert png.is_file() and png.stat().st_size > 1000


@pytest.mark.slow
def test_joint_round_within_each_bands_scatter_on_day_111(shared_data):
    """Issue 40's real-data criterion on M87 2018-04-21, b1-b4, full recipe: the
    joint model's closure χ² on each band is at most the band's own image's plus
    the scatter `√(2/N)` of a reduced χ² of the band's `N` closures, and the sum
    over the four bands is lower than the single-band images' own sum."""
    paths = [str(shared_data / BAND.format(b)) for b in ("b1", "b2", "b3", "b4")]
    with pytest.warns(UserWarning, match="not in the 2017 recipe's tables"):
        _, report = em.image_multifreq(paths)
    scores = report["closures"]
    assert len(scores) == 4
    for sc in scores:
        for kind in ("cphase", "logcamp"):
            assert sc["joint"][kind] <= sc["alone"][kind] + sc["scatter"][kind], sc
        assert sc["within"] == {"cphase": True, "logcamp": True}
    total = lambda which: sum(sc[which][k] for sc in scores for k in sc[which])  # noqa: E731
    assert total("joint") < total("alone")
