"""The command line and the published 2017 M87 recipe (`em.image_m87`), and the
calibration-independent closure score (`em.closure_score`)."""

import os
import pathlib
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import eqmodels as em

from .unchecked import unchecked_error


ROOT = pathlib.Path(__file__).resolve().parents[1]
DAY_100 = em.example_uvfits()
DAY_101 = "eht/m87_2017/SR1_M87_2017_101_{}_hops_netcal_StokesI.uvfits"
REFERENCE = "reference/m87_2017_101_ehtim_pipeline.fits"


@pytest.mark.slow
def test_cli_fast(tmp_path):
    """`python -m eqmodels image --png m87.png --fast`, with no uvfits file, images
    the file shipped with the package into `m87.fits` in the working folder: a
    finite 0.6 Jy image and a plot, and a χ² table whose closure χ² fall from
    round 1's start; it fills the default compilation cache
    (`$EQMODELS_CACHE_DIR` here)."""
    out = tmp_path / "m87.fits"
    png = tmp_path / "m87.png"
    cache = tmp_path / "cache"
    proc = subprocess.run(
        [sys.executable, "-m", "eqmodels", "image", "--png", "m87.png", "--fast"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "EQMODELS_CACHE_DIR": str(cache),
             "PYTHONPATH": os.pathsep.join(
                 [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{em.example_uvfits()} -> m87.fits" in proc.stdout
    assert f"compilation cache: {cache.resolve()}" in proc.stdout
    assert len(list(cache.iterdir())) >= 4  # the imaging and self-cal programs
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
    # Dated as eht-imaging dates its images: the day plus the first timestamp's
    # time of day (the header held the whole day only before).
    from astropy.io import fits

    data = em.load_uvfits(DAY_100)
    mjd = fits.getheader(out)["MJD"]
    assert mjd == pytest.approx(data.mjd + float(data.time.min()) / 24, abs=1e-9)
    assert mjd > data.mjd


def test_example_uvfits():
    """The shipped file is a file inside the package, loads as the 2017-04-10 low
    band, and an unknown name is refused naming the shipped ones."""
    path = em.example_uvfits()
    package = pathlib.Path(em.__file__).resolve().parent
    assert path.is_file() and package in path.parents
    assert (path.parent / "PROVENANCE.md").is_file()
    data = em.load_uvfits(path)
    assert (data.n_rows, data.source, data.mjd) == (2367, "M87", 57853)
    with pytest.raises(ValueError, match="'m87_2017_04_10_lo'"):
        em.example_uvfits("m87_2017_04_11")


def test_installed_distribution_ships_the_example():
    """The wheel carries the data file (a package's non-Python files are easily
    left out): checked on the installed distribution where there is one (CI
    installs the checkout with pip)."""
    import importlib.metadata

    try:
        files = importlib.metadata.files("eqmodels") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("eqmodels is not installed (run from a checkout)")
    names = {str(f).replace(os.sep, "/") for f in files}
    if "eqmodels/__init__.py" not in names:
        pytest.skip("an editable install (`pip install -e`): no files of its own")
    assert f"eqmodels/data/{em.example_uvfits().name}" in names
    assert "eqmodels/data/PROVENANCE.md" in names


@pytest.mark.slow
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


def test_recipe_data_steps():
    """Data preparation: absent stations dropped, stations ordered by median SNR,
    short baselines at 0.6 Jy, the pipeline's systematic-noise budget."""
    from eqmodels._recipe import _m87 as R

    raw = em.load_uvfits(str(DAY_100)).scan_average()
    data = R.drop_absent_stations(raw)
    used = set(np.asarray(raw.ant1)) | set(np.asarray(raw.ant2))
    assert data.n_stations == len(used) and data.n_rows == raw.n_rows
    assert set(data.baselines()) == set(raw.baselines())
    ordered = R.order_stations_by_snr(data)
    snr = np.abs(np.asarray(ordered.vis)) / np.asarray(ordered.sigma)
    median = [
        np.median(
            snr[(np.asarray(ordered.ant1) == i) | (np.asarray(ordered.ant2) == i)]
        )
        for i in range(ordered.n_stations)
    ]
    assert np.all(np.diff(median) < 0)
    # Same rows (re-oriented where needed): amplitudes unchanged as a multiset.
    assert np.allclose(np.sort(np.abs(ordered.vis)), np.sort(np.abs(data.vis)))
    prep = R.prepare_data(str(DAY_100))
    short = prep.uvdist < R.UV_ZBLCUT
    aa_ap = R.taper(prep.select_stations(["AA", "AP"]), em.uas_to_rad(5.0))
    assert np.median(np.abs(aa_ap.vis)) == pytest.approx(0.6, rel=1e-6)
    assert short.any()
    sys = em.m87_systematic_noise()
    assert sys["AA"] == pytest.approx((1.1**0.5 - 1) / 4)
    assert sys["LM"] == pytest.approx((1.22**0.5 - 1) / 4 + 0.15)


@pytest.mark.slow
def test_two_bands_self_calibrate_per_band(shared_data):
    """With both bands joined, each band's times are shifted so that per-timestamp
    self-calibration solves each band on its own: the LMT's amplitude gain against
    the 60 µas Gaussian then agrees with the amplitude-only solution (one gain for
    both bands' different phases shrank it to about 0.3)."""
    from eqmodels._recipe import _m87 as R

    paths = [shared_data / DAY_101.format(b) for b in ("lo", "hi")]
    if not all(p.is_file() for p in paths):
        pytest.skip("2017-04-11 data not present")
    data = R.prepare_data([str(p) for p in paths])
    assert (
        np.unique(data.time).size
        == np.unique(np.stack([data.time, data.band]), axis=1).shape[1]
    )  # every timestamp holds one band
    grid = em.ImageGrid.from_fov(64, 128.0)
    short = em.taper(data.select_uvdist(uv_max=2e9), em.uas_to_rad(5.0))
    gauss = np.asarray(em.GaussianImage(grid, 0.6, em.uas_to_rad(60.0))())
    lm = data.station_names.index("LM")

    def lm_gain(method):
        _, g = em.self_calibrate(
            short, gauss, grid=grid, method=method, stations=["LM"], gain_tol=1.0,
            interval="timestamp",
        )  # fmt: skip
        amp = np.exp(np.asarray(g.log_amp)[:, lm])
        return np.median(amp[amp != 1.0])

    assert lm_gain("both") == pytest.approx(lm_gain("amp"), rel=0.1)


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.uvfits", "-o", "{tmp}/a.fits"], "does not exist"),
        (["{data}", "-o", "{tmp}/no/a.fits"], "-o/--output .* does not exist"),
        (["{data}", "-o", "{tmp}"], "is a folder"),
        (["{data}", "-o", "{tmp}/a.fits", "--png", "{tmp}/no/a.png"], "--png"),
        (["{data}", "-o", "{tmp}/a.fits", "--npix", "0"], "--npix must be >= 1"),
        # 22 float64 images of 10⁶² pixels: 160 TiB, beyond any machine.
        (["{data}", "-o", "{tmp}/a.fits", "--npix", "1000000"], "--npix .* GiB"),
        (["{data}", "-o", "{tmp}/a.fits", "--iterations", "0"], "--iterations"),
        (["{data}", "-o", "{tmp}/a.fits", "--restarts", "-1"], "--restarts"),
        (["{data}", "-o", "{tmp}/a.fits", "--fov", "-5"], "--fov must be at least 80"),
        (["{data}", "-o", "{tmp}/a.fits", "--fov", "64"], "--fov must be at least 80"),
        (["{data}", "-o", "{tmp}/a.fits", "--zbl", "0"], "--zbl must be a positive"),
        # Outputs that would destroy an input or each other.
        (["{data}", "-o", "{data}"], "-o/--output .* is one of the input files"),
        (
            ["{data}", "-o", "{tmp}/a.fits", "--png", "{tmp}/a.fits"],
            "--png .* is the -o/--output file",
        ),
        (["{data}", "-o", "{tmp}/a.fits", "--png", "{tmp}/plot"], "image format"),
        (
            ["{data}", "-o", "{tmp}/a.fits", "--cache", "{tmp}", "--no-cache"],
            "--cache and --no-cache",
        ),
        (["{data}", "-o", "{tmp}/a.fits", "--cache", "{data}"], "is a file"),
        # Found only after the imaging before: a folder that the path goes through
        # but that does not exist, LaTeX's plot format, an infinite field, an
        # empty name, a band given twice.
        (["{data}", "-o", "{tmp}/no/../a.fits"], "-o/--output .* does not exist"),
        (["{data}", "-o", "{tmp}/a.fits", "--png", "{tmp}/a.pgf"], "image format"),
        (["{data}", "-o", "{tmp}/a.fits", "--fov", "inf"], "--fov must be at least"),
        (["{data}", "-o", ""], "-o/--output is empty"),
        (["{data}", "{data}", "-o", "{tmp}/a.fits"], "given twice"),
        # From a review: a folder that does not exist yet, named with a trailing
        # slash, passed (pathlib drops the slash) and failed at the final write.
        (["{data}", "-o", "{tmp}/newdir/"], "-o/--output .* names a folder"),
        (["{data}", "-o", "{tmp}/a.fits", "--png", "{tmp}/p/"], "--png .* names a"),
        # Only the shipped example (no files given) has a default output.
        (["{data}"], "-o/--output is needed with uvfits files"),
        (["-o", "{tmp}/a.fits", "--npix", "0"], "--npix must be >= 1"),
    ],
)
def test_cli_refuses_bad_arguments_before_imaging(tmp_path, capsys, args, message):
    from eqmodels._cli import main

    data = str(DAY_100)
    argv = ["image"] + [a.format(tmp=tmp_path, data=data) for a in args]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err)
    assert "eqmodels image: error:" in err and "usage: eqmodels image" in err


@pytest.mark.skipif(
    not os.path.isdir("/proc/sys") or os.access("/proc/sys", os.W_OK),
    reason="needs a folder no one may write to (Linux's /proc/sys)",
)
def test_cli_refuses_an_unwritable_output_folder_before_imaging(capsys):
    """From a review: `-o` into a read-only folder ran the whole recipe, then
    failed writing (root ignores permission bits, so /proc/sys stands in for a
    read-only file system)."""
    from eqmodels._cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["image", str(DAY_100), "-o", "/proc/sys/a.fits"])
    assert exit_.value.code == 2
    assert re.search("-o/--output .* is not writable", capsys.readouterr().err)


def test_cli_reports_unreadable_data_without_a_traceback(tmp_path, capsys):
    from eqmodels._cli import main

    bad = tmp_path / "not.uvfits"
    bad.write_text("not a uvfits file")
    out = str(tmp_path / "a.fits")
    assert main(["image", str(bad), "-o", out, "--fast", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "eqmodels image: error:" in err and "uvfits" in err
    assert "Traceback" not in err


def test_cli_cache_folder_unusable(tmp_path, monkeypatch):
    """An unusable default cache folder costs speed, not the run (a note); a
    `--cache` folder that cannot be made is an error naming the option."""
    import eqmodels._cli as cli

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("EQMODELS_CACHE_DIR", str(blocker))
    lines = []
    cli._enable_cache(em, None, lines.append)
    assert len(lines) == 1 and lines[0].startswith("compilation cache off")
    with pytest.raises(OSError, match="--cache"):
        cli._enable_cache(em, str(blocker / "sub"), lines.append)


@pytest.mark.slow
def test_recipe_takes_the_2018_station_codes():
    """The 2018 files name four 2017 sites otherwise (APEX AX, JCMT MM, SMA SW, SMT
    MG): under those codes the recipe applies the same settings (zero-baseline
    pair, systematic noise, self-calibration), so the image is the same, bit for
    bit (it self-calibrated only AA and LM in rounds 3-4 and added no systematic
    noise for the renamed sites). An unknown code is warned about."""
    import jax

    assert jax.config.read("jax_enable_x64")
    data = em.load_uvfits(DAY_100)
    codes = {"AP": "AX", "JC": "MM", "SM": "SW", "AZ": "MG"}
    renamed = data.replace(
        station_names=tuple(codes.get(s, s) for s in data.station_names)
    )
    kw = dict(fast=True, iterations=3, restarts=0)
    image, _ = em.image_m87(data, **kw)
    image_2018, _ = em.image_m87(renamed, **kw)
    np.testing.assert_array_equal(image_2018, image)
    unknown = data.replace(
        station_names=tuple("GL" if s == "PV" else s for s in data.station_names)
    )
    with pytest.warns(UserWarning, match=r"stations \['GL'\] are not in"):
        em.image_m87(unknown, fast=True, iterations=1, restarts=0)


@pytest.mark.slow
def test_recipe_refuses_other_sources_and_warns_about_days():
    data = em.load_uvfits(DAY_100)
    kw = dict(fast=True, iterations=1, restarts=0)
    # Another source is refused (issue 41: it was warned about once, and a --zbl
    # silenced the warning with M87's prior size still in use) ...
    with pytest.raises(ValueError, match="source is 'SGRA'.*missing: zbl, prior_fwhm"):
        em.image_m87(data.replace(source="SGRA"), **kw)
    with pytest.raises(ValueError, match="--prior-fwhm; missing: prior_fwhm"):
        em.image_m87(data.replace(source="SGRA"), zbl=0.6, **kw)
    # ... unless both its settings are given, even M87's values: no warning then.
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*source is")
        em.image_m87(data.replace(source="SGRA"), zbl=0.6, prior_fwhm=40.0, **kw)
    with pytest.warns(UserWarning, match="from 2 days") as record:
        em.image_m87([data, data.replace(mjd=data.mjd + 1)], **kw)
    # Attributed to this line, not to a line inside eqmodels (from a review).
    assert {w.filename for w in record} == {__file__}
    with pytest.raises(ValueError, match="`fov` must be at least 80"):
        em.image_m87(data, fov=70.0, **kw)
    # Without ALMA-APEX and SMA-JCMT there is no zero baseline to set the flux by.
    with pytest.raises(ValueError, match="no intra-site baseline"):
        em.image_m87(data.flag_stations(["AP", "JC"]), **kw)


@pytest.mark.slow
def test_recipe_bands_in_any_order(shared_data):
    """The lowest band is band 0 whatever the order of the files (the pipeline
    shifts the other bands' times): hi then lo gave another image, and the FITS
    file another frequency."""
    from eqmodels._recipe import _m87 as R

    day = shared_data / "eht" / "m87_2017"
    lo, hi = (
        day / f"SR1_M87_2017_101_{b}_hops_netcal_StokesI.uvfits" for b in ("lo", "hi")
    )
    a, b = R.load_bands([lo, hi]), R.load_bands([hi, lo])
    assert a.band_freqs == b.band_freqs and a.band_freqs[0] < a.band_freqs[1]
    for name in ("time", "u", "v", "vis", "sigma", "band"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.slow
def test_cli_plot_failure_is_one_error_line(tmp_path, capsys, monkeypatch):
    """A plot that fails after the imaging (a matplotlib backend error, say) is one
    error line naming --png and the image that was written, not a traceback."""
    import eqmodels._cli as cli

    def broken(*args, **kwargs):
        raise RuntimeError("no backend")

    monkeypatch.setattr(cli, "plot_image", broken)
    out, png = tmp_path / "a.fits", tmp_path / "a.png"
    argv = ["image", str(DAY_100), "-o", str(out), "--png", str(png)]
    argv += ["--fast", "--iterations", "1", "--restarts", "0", "--no-cache"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--png" in err and "RuntimeError: no backend" in err and str(out) in err
    assert "Traceback" not in err and out.is_file()


_BAD_ARGUMENTS = [
    ("npix=32.7", "ValueError", "`npix` must be an int >= 1, got 32.7"),
    ("npix=True", "ValueError", "`npix` must be an int >= 1, got True"),
    ("npix=None", "ValueError", "`npix` must be an int >= 1, got None"),
    ("fov=None", "TypeError", "`fov` must be a number of µas, got None"),
    ("fov='128'", "TypeError", "`fov` must be a number of µas"),
    # From a review: reported as `flux` / `ftol` errors, `stop`'s only after
    # the data preparation and a self-calibration.
    ("zbl=-0.6", "ValueError", "`zbl` must be a finite number"),
    ("zbl='0.6'", "ValueError", "`zbl` must be a finite number"),
    ("stop=-1.0", "ValueError", "`stop` must be a finite number"),
    ("stop=float('nan')", "ValueError", "`stop` must be a finite number"),
]
BAD_ARGUMENTS = [
    (unchecked_error(f"em.image_m87({str(DAY_100)!r}, {call})", exc), message)
    for call, exc, message in _BAD_ARGUMENTS
]


@pytest.mark.parametrize(
    "case, message", BAD_ARGUMENTS, ids=[c for c, *_ in _BAD_ARGUMENTS]
)
def test_image_m87_refuses_bad_arguments(unchecked, case, message):
    """From a review: `npix=32.7` imaged 32², `npix=True` 1×1, and a `fov` that is
    not a number raised a bare comparison error."""
    msg = unchecked[case]
    assert msg is not None and message in msg, msg


def test_closure_score_takes_models_and_refuses_unscorable_images():
    """From a review: an all-NaN image scored like an all-zero one (its NaN
    bispectra took the exactly-zero branch), a masked array was scored through
    its mask, and an image model raised a bare `float()` TypeError."""
    grid = em.ImageGrid.from_fov(32, 128.0)
    model = em.GaussianImage(grid, 0.6, em.uas_to_rad(40.0), x0=em.uas_to_rad(5.0))
    by_model = em.closure_score(model, [DAY_100])
    by_array = em.closure_score(np.asarray(model()), [DAY_100], grid=grid)
    assert by_model == by_array and np.isfinite(list(by_model.values())).all()
    nan = np.asarray(model()).copy()
    nan[3, 4] = np.nan
    with pytest.raises(ValueError, match="1 non-finite pixel"):
        em.closure_score(nan, [DAY_100], grid=grid)
    with pytest.raises(TypeError, match="masked array.*filled"):
        em.closure_score(np.ma.masked_all(grid.shape), [DAY_100], grid=grid)
    with pytest.raises(ValueError, match="shape"):
        em.closure_score(np.zeros((8, 8)), [DAY_100], grid=grid)
    with pytest.raises(ValueError, match="differs from the image model's"):
        em.closure_score(model, [DAY_100], grid=em.ImageGrid.from_fov(16, 128.0))


DATA_AS_INT = unchecked_error(
    "em.image_m87(123)",
    "TypeError",
    "import jax; jax.config.update('jax_enable_x64', True)",
)


def test_image_m87_names_what_it_takes_for_data(unchecked):
    """From a review: `image_m87(123)` raised "'int' object is not iterable"."""
    msg = unchecked[DATA_AS_INT]
    assert msg == "expected a uvfits path or a VisData, got int.", msg
