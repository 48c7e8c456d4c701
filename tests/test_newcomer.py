"""A newcomer's first hour (issue 41, item 6): `eqmodels --version`, `help(eqmodels)`
that says where to start, the command line's picture (calendar date, band and
frequency in the title, an optional restoring beam drawn, brightness-temperature
units), progress lines per stage with the count of runs, and the M87 recipe
refusing another source unless its own compact flux and prior size are given."""

import argparse
import os
import pathlib
import re
import signal
import subprocess
import sys
import warnings

import matplotlib


matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import eqmodels as em  # noqa: E402
import eqmodels._cli as cli  # noqa: E402
from eqmodels._plot._image import band_name, observation_title  # noqa: E402
from eqmodels._recipe import _m87 as R  # noqa: E402


ROOT = pathlib.Path(__file__).resolve().parents[1]
SGRA = "eht/sgra_2017/ER6_SGRA_2017_096_lo_hops_netcal-LMTcal_StokesI.uvfits"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ------------------------------------------------------------------ --version, help
def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"eqmodels {em.__version__}"


def test_help_opens_with_where_to_start():
    doc = em.__doc__
    head = doc.split("\n\n")[1]
    assert head.startswith("Where to start"), head
    assert "python -m eqmodels image --png m87.png" in doc
    assert "README" in doc and "quick start" in doc
    # Every page it names exists, and every entry point it names is public.
    pages = set(re.findall(r"`(\w+\.md)`", doc))
    assert len(pages) >= 8
    for page in pages:
        assert (ROOT / "docs" / page).is_file(), page
    names = set(re.findall(r"`([A-Za-z_]\w*)`", doc)) - {"eqmodels"}
    entry = names - {n for n in names if n.endswith("_py")}
    assert {"load_uvfits", "solve", "image_m87", "plot_image"} <= entry
    for name in entry:
        assert name in em.__all__, name
    for example in re.findall(r"`(\w+\.py)`", doc):
        assert (ROOT / "examples" / example).is_file(), example


# ------------------------------------------------------------------ the picture
def test_observation_title_against_astropy_dates():
    from astropy.time import Time

    for mjd in (57853, 57854.99, 58227.2, 51544):
        day = Time(int(mjd), format="mjd").to_value("iso", subfmt="date")
        assert observation_title("M87", mjd, [227.0707e9]).startswith(f"M87 {day},")
    assert (
        observation_title("M87", 57853, (227070703125.0,))
        == "M87 2017-04-10, lo band, 227.1 GHz"
    )
    assert (
        observation_title("M87", 57854, (227.07e9, 229.07e9))
        == "M87 2017-04-11, lo+hi bands, 227.1+229.1 GHz"
    )
    # Outside the EHT's bands: the frequency only.
    assert observation_title("3C279", 57854, 86.0e9) == "3C279 2017-04-11, 86.0 GHz"
    assert [band_name(f * 1e9) for f in (213.1, 215.1, 227.5, 228.7, 228.1)] == [
        "b1", "b2", "lo", "hi", None,
    ]  # fmt: skip
    with pytest.raises(ValueError, match="`freqs` must be frequencies in Hz"):
        observation_title("M87", 57853, [0.0])
    with pytest.raises(ValueError, match="`mjd` must be a finite"):
        observation_title("M87", float("nan"), [230e9])


def _args(**kw):
    base = dict(png="x.png", restore_beam=None, tb=False, fov=128.0, prior_fwhm=None)
    return argparse.Namespace(**{**base, **kw})


def test_cli_picture_title_beam_and_units(monkeypatch):
    """What the --png picture is drawn from: the title from the data, the image
    restored with the beam (blurred by it, the flux kept), the beam drawn, the
    units in kelvin at the bands' mean frequency with --tb; the recipe's image
    itself when no beam is asked."""
    grid = em.ImageGrid.from_fov(32, 128.0)
    image = np.asarray(em.GaussianImage(grid, 0.6, em.uas_to_rad(10.0))())
    data = argparse.Namespace(source="M87", mjd=57854, band_freqs=(227.07e9, 229.07e9))
    seen = []
    monkeypatch.setattr(cli, "plot_image", lambda *a, **k: seen.append((a, k)))
    cli._save_picture(_args(), image, grid, data)
    cli._save_picture(_args(restore_beam=20.0, tb=True), image, grid, data)
    (plain, plain_kw), (restored, restored_kw) = seen
    assert plain[0] is image and plain_kw["beam"] is None
    assert plain_kw["units"] == "Jy/uas2"
    assert plain_kw["title"] == "M87 2017-04-11\nlo+hi bands, 227.1+229.1 GHz"
    assert restored_kw["title"] == plain_kw["title"] + ", 20 µas beam"
    assert restored_kw["beam"] == 20.0 and restored_kw["units"] == "Tb"
    assert restored_kw["freq"] == pytest.approx(228.07e9, rel=1e-12)
    blurred = np.asarray(em.blur_image(image, grid, em.uas_to_rad(20.0)))
    np.testing.assert_array_equal(restored[0], blurred)
    # A Gaussian of 10 µas restored by 20 µas is one of (10² + 20²)^½ µas.
    wide = np.asarray(em.GaussianImage(grid, 0.6, em.uas_to_rad(500**0.5))())
    np.testing.assert_allclose(restored[0], wide, atol=2e-3 * wide.max())


def test_cli_plot_draws_title_beam_and_kelvin(tmp_path, monkeypatch):
    """The plot the command line saves (Agg): its title, a 20 µas beam ellipse and
    a colour bar in kelvin whose top matches the Rayleigh-Jeans formula."""
    grid = em.ImageGrid.from_fov(16, 128.0)
    image = np.asarray(em.GaussianImage(grid, 0.6, em.uas_to_rad(30.0))())
    drawn = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: drawn.append(fig))
    path = tmp_path / "m87.png"
    cli.plot_image(
        image, grid, path, title="M87 2017-04-10", beam=20.0, units="Tb",
        freq=227e9,
    )  # fmt: skip
    assert path.stat().st_size > 1000
    (fig,) = drawn
    ax = fig.axes[0]
    assert ax.get_title() == "M87 2017-04-10"
    (ellipse,) = [p for p in ax.patches if type(p).__name__ == "Ellipse"]
    assert ellipse.width == ellipse.height == 20.0
    assert fig.axes[1].get_ylabel() == "brightness temperature (K)"
    c, k = 299_792_458.0, 1.380_649e-23  # SI, exact
    tb = image.max() * 1e-26 / grid.psize**2 * c**2 / (2 * k * 227e9**2)
    assert ax.images[0].get_array().max() == pytest.approx(tb, rel=1e-12)
    real_close(fig)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--tb"], "--tb changes the picture only: give --png FILE"),
        (["--restore-beam", "20"], "--restore-beam changes the picture only"),
        (["--png", "{tmp}/a.png", "--restore-beam", "0"], "--restore-beam must be a"),
        (["--png", "{tmp}/a.png", "--restore-beam", "nan"], "must be a positive FWHM"),
        (["--png", "{tmp}/a.png", "--restore-beam", "200"], "not smaller than the"),
        (["--prior-fwhm", "-3"], "--prior-fwhm must be a positive FWHM in µas"),
        (["--prior-fwhm", "70"], "--fov must be at least twice --prior-fwhm"),
    ],
)
def test_cli_refuses_bad_picture_and_source_options(tmp_path, capsys, extra, message):
    argv = ["image", str(em.example_uvfits()), "-o", str(tmp_path / "a.fits")]
    argv += [a.format(tmp=tmp_path) for a in extra]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_cli_restore_beam_bare_is_the_eht_beam():
    ap = cli._parser()
    args = ap.parse_args(["image", "a.uvfits", "--png", "a.png", "--restore-beam"])
    assert args.restore_beam == 20.0
    args = ap.parse_args(["image", "a.uvfits", "--restore-beam", "15"])
    assert args.restore_beam == 15.0
    assert ap.parse_args(["image"]).restore_beam is None


# ------------------------------------------------------------------ progress
def test_progress_lines_count_stages_and_runs():
    lines = []
    progress = R.Progress(lines.append, rounds=4, runs_per_round=4)
    progress("data")
    progress("self-calibration: the LMT")
    for r in (1, 2):
        progress.round(r, 4, compiles=r == 1)
        progress(f"round {r}/4: self-calibration")
    assert lines == [
        "[stage 1/10] data",
        "[stage 2/10] self-calibration: the LMT",
        "[stage 3/10] round 1/4: compiling its objective, then 4 L-BFGS runs "
        "(runs 1-4 of 16)",
        "[stage 4/10] round 1/4: self-calibration",
        "[stage 5/10] round 2/4: 4 L-BFGS runs (runs 5-8 of 16)",
        "[stage 6/10] round 2/4: self-calibration",
    ]
    one = R.Progress(lines.append, rounds=4, runs_per_round=1)
    one.round(3, 4, compiles=False)
    assert lines[-1] == "[stage 1/10] round 3/4: 1 L-BFGS run (run 3 of 4)"


@pytest.mark.slow
def test_recipe_logs_every_stage_in_order():
    """A tiny recipe run (one step per run): the ten stage lines in order, each
    round's runs among all of them, and a compilation said for the rounds whose
    terms are new (round 1's amplitudes, round 2's visibilities) only."""
    lines = []
    em.image_m87(
        em.example_uvfits(), npix=32, iterations=1, restarts=1, log=lines.append
    )
    stages = [s for s in lines if s.startswith("[stage ")]
    assert [s.split("]")[0] for s in stages] == [f"[stage {k}/10" for k in range(1, 11)]
    rounds = [s for s in stages if "L-BFGS" in s]
    assert [re.search(r"\((.*)\)", s).group(1) for s in rounds] == [
        "runs 1-2 of 8", "runs 3-4 of 8", "runs 5-6 of 8", "runs 7-8 of 8",
    ]  # fmt: skip
    assert ["compiling" in s for s in rounds] == [True, True, False, False]
    # The table's header comes under round 1's stage line, over its rows; each
    # round's rows come after its stage line.
    header = lines[lines.index(rounds[0]) + 1]
    assert header.split()[:3] == ["round", "run", "steps"], lines
    first_row = [i for i, s in enumerate(lines) if s.split()[:2] == ["2", "0"]]
    assert lines.index(rounds[1]) < first_row[0]


# ------------------------------------------------------------------ another source
def test_recipe_refuses_sgra_without_its_settings(shared_data):
    """The 2017 Sgr A* data: refused without both its compact flux and prior size
    (the recipe's are M87's), accepted with both; M87 needs neither."""
    sgra = R.drop_absent_stations(em.load_uvfits(shared_data / SGRA))
    assert sgra.source == "SGRA"
    for kw, missing in (
        ({}, "zbl, prior_fwhm"),
        ({"zbl_given": True}, "prior_fwhm"),
        ({"prior_given": True}, "zbl"),
    ):
        with pytest.raises(ValueError, match=f"not M87.*missing: {missing}\\.$"):
            R._check_recipe_applies(sgra, **{"zbl_given": False, **kw})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say about the stations either
        R._check_recipe_applies(sgra, zbl_given=True, prior_given=True)
        m87 = R.drop_absent_stations(em.load_uvfits(em.example_uvfits()))
        R._check_recipe_applies(m87, zbl_given=False)


def test_image_m87_checks_prior_fwhm():
    with pytest.raises(ValueError, match="`prior_fwhm` must be a finite number"):
        em.image_m87(em.example_uvfits(), prior_fwhm=-1.0)
    with pytest.raises(ValueError, match="`prior_fwhm` must be a finite number"):
        em.image_m87(em.example_uvfits(), prior_fwhm=float("inf"))
    with pytest.raises(ValueError, match="`fov` must be at least 120 µas"):
        em.image_m87(em.example_uvfits(), prior_fwhm=60.0, fov=100.0)


def test_initial_image_takes_the_prior_size():
    grid = em.ImageGrid.from_fov(32, 200.0)
    fwhm = em.uas_to_rad(60.0)
    expected = np.asarray(em.GaussianImage(grid, 2.0, fwhm)()) + np.asarray(
        em.GaussianImage(grid, 2e-3, fwhm, x0=fwhm, y0=fwhm)()
    )
    np.testing.assert_allclose(R.initial_image(grid, 2.0, 60.0), expected, rtol=1e-12)


@pytest.mark.slow
def test_cli_refuses_sgra_without_settings(shared_data, tmp_path, capsys):
    out = tmp_path / "sgra.fits"
    argv = ["image", str(shared_data / SGRA), "-o", str(out), "--no-cache"]
    assert cli.main(argv + ["--zbl", "2.4"]) == 2
    err = capsys.readouterr().err
    assert "not M87" in err and "--prior-fwhm" in err and "missing: prior_fwhm" in err
    assert "Traceback" not in err and not out.exists()


# ------------------------------------------------------------------ killed writes
# The command line in a child process, killed with SIGKILL while it writes its FITS
# image over an existing one: the recipe is replaced by a quick stand-in (the
# write is what is tested), so that each kill point costs seconds.
_CHILD_CLI = """
import os, signal, sys
import numpy as np
import eqmodels as em
import eqmodels._cli as cli
from astropy.io.fits.hdu.base import _BaseHDU
import eqmodels._atomic as atomic

out, point = sys.argv[1:3]
die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)

def recipe(paths, *, npix, fov, log, **kw):
    grid = em.ImageGrid.from_fov(npix, fov)
    data = em.load_uvfits(paths[0])
    if point == "data":
        _BaseHDU._writedata = die
    elif point == "rename":
        atomic.os.replace = die
    elif point == "after":
        atomic._fsync_folder = die
    elif point == "png":  # the FITS image written, the plot killed before its rename
        replace = atomic.os.replace
        atomic.os.replace = lambda a, b: die() if str(b).endswith(".png") else replace(a, b)
    return np.full(grid.shape, 2.0), {"grid": grid, "data": data}

em.image_m87 = recipe
argv = ["image", "-o", out, "--overwrite", "--npix", "8", "--no-cache"]
cli.main(argv + (["--png", out[:-5] + ".png"] if point == "png" else []))
"""


@pytest.mark.slow
@pytest.mark.parametrize("point", ["data", "rename", "after", "png"])
def test_cli_killed_while_writing_leaves_a_whole_file(tmp_path, point):
    """SIGKILL during the command line's write: the previous image intact, or the
    new one complete (once renamed), never a partial file; the same for its plot
    (killed after the image was written: the new image, the previous plot)."""
    path = tmp_path / "m87.fits"
    grid = em.ImageGrid.from_fov(8, 128.0)
    em.save_fits(np.full(grid.shape, 1.0), grid, path)
    (tmp_path / "m87.png").write_bytes(b"the previous plot")
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD_CLI, str(path), point],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    image, back = em.load_fits(path)  # whole, never partial
    assert back.shape == grid.shape
    expected = 2.0 if point in ("after", "png") else 1.0
    np.testing.assert_array_equal(image, np.full(grid.shape, expected))
    assert (tmp_path / "m87.png").read_bytes() == b"the previous plot"
    others = {p.name for p in tmp_path.iterdir()} - {"m87.fits", "m87.png"}
    assert all(n.startswith(".tmp-") for n in others), others
    if point == "png":  # the plot's temporary file was whole: a PNG, rendered
        (tmp,) = [p for p in tmp_path.iterdir() if p.name.endswith("-m87.png")]
        assert tmp.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ outputs ignored
def test_example_and_default_outputs_are_ignored_by_git():
    """What the command line, the examples and the docs' snippets write by default
    in a checkout is ignored by git (so that a newcomer's `git status` stays
    clean): the examples' default folder as the scripts name it."""
    import shutil

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    walkthrough = (ROOT / "examples" / "m87_walkthrough.py").read_text()
    assert 'OUTPUT = ROOT / "examples" / "output" / "m87_walkthrough.fits"' in (
        walkthrough
    )
    paths = [
        cli._DEFAULT_OUTPUT, "m87.png", "examples/output/m87_walkthrough.fits",
        "examples/output/quickstart.png", "figures/survey.png", "copy.fits",
        "images.png", "m87_scan_averaged.uvfits", "survey-m87/chunk_00000.npz",
    ]  # fmt: skip
    proc = subprocess.run(
        ["git", "check-ignore", "--no-index", "-v", *paths],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    ignored = {line.split("\t")[-1] for line in proc.stdout.splitlines()}
    assert ignored == set(paths), set(paths) - ignored
    # ... and the package's own files are not.
    proc = subprocess.run(
        ["git", "check-ignore", "--no-index", "eqmodels/_cli.py", "docs/index.md"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.stdout == ""


def test_closure_phase_residuals_take_an_image_array():
    """From the docs' snippets: the residuals of an `(ny, nx)` image array with its
    grid (the plot's annotation took one, the function's refused it) equal those
    of the image model."""
    data = em.load_uvfits(em.example_uvfits()).scan_average()
    grid = em.ImageGrid.from_fov(16, 128.0)
    model = em.GaussianImage(grid, 0.6, em.uas_to_rad(30.0), x0=em.uas_to_rad(5.0))
    cp = em.closure_phases(data)
    by_model = em.closure_phase_residuals(cp, model)
    np.testing.assert_array_equal(
        em.closure_phase_residuals(cp, model(), grid), by_model
    )
