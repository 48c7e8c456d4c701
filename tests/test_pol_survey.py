"""examples/m87_pol_survey.py, the synthetic-data survey of the polarimetric
recipe's weights: its truths are what they say (checked with numpy), its scores
are those of the images, and (slow) a small survey on a real night's coverage."""

import json

import numpy as np
import pytest

import eqmodels as em
from tests.helpers import load_example


GRID = em.ImageGrid.from_fov(32, 128.0)


def load():
    return load_example("m87_pol_survey")


def ring():
    xx, yy = GRID.coords()
    r = np.hypot(xx - em.uas_to_rad(3.0), yy + em.uas_to_rad(2.0))
    i = np.exp(-0.5 * ((r / em.uas_to_rad(1.0) - 20.0) / 5.0) ** 2)
    return 0.6 * i / i.sum()


def numpy_beta2_about_centroid(stokes):
    """β₂ = Σ P e^{-2iφ} / ΣI, φ the position angle east of north about the Stokes
    I centroid (+x east, +y north), written out in numpy."""
    xx, yy = GRID.coords()
    i = stokes[0]
    x0, y0 = (i * xx).sum() / i.sum(), (i * yy).sum() / i.sum()
    phi = np.arctan2(xx - x0, yy - y0)
    return ((stokes[1] + 1j * stokes[2]) * np.exp(-2j * phi)).sum() / i.sum()


def test_twist_truth_is_a_pure_beta2_mode():
    """Without scrambling or net term, `P = m(φ) I e^{i(2φ + ∠β₂)}`: β₂ about the
    centroid has the truth's phase exactly and its modulus is ⟨|m|⟩."""
    survey = load()
    spec = dict(survey.TRUTHS["twist"])
    truth = survey.truth_stokes(ring(), GRID, spec, seed=0)
    b2 = numpy_beta2_about_centroid(truth)
    assert np.rad2deg(np.angle(b2)) == pytest.approx(spec["beta2_deg"], abs=1e-9)
    m_avg = np.hypot(truth[1], truth[2]).sum() / truth[0].sum()
    assert abs(b2) == pytest.approx(m_avg, rel=1e-12)
    np.testing.assert_array_equal(truth[0], ring())
    np.testing.assert_array_equal(truth[3], 0.0)
    # The fraction peaks in the south-west (position angle 225°).
    m = np.hypot(truth[1], truth[2]) / truth[0]
    xx, yy = GRID.coords()
    k = np.argmax(np.where(truth[0] > 0.5 * truth[0].max(), m, 0))
    assert xx.flat[k] < 0 and yy.flat[k] < 0
    # The recipe's summary (unblurred) agrees with the numpy β₂.
    s = survey.R.pol_summary(truth, GRID)
    assert complex(s["beta2"]) == pytest.approx(b2, rel=1e-12)


def test_scrambled_truth_has_the_asked_rms_and_lower_blurred_fraction():
    survey = load()
    base = dict(survey.TRUTHS["twist"])
    scr = dict(base, scramble_deg=40.0)
    a = survey.truth_stokes(ring(), GRID, base, seed=1)
    b = survey.truth_stokes(ring(), GRID, scr, seed=1)
    # Same |P| pixel by pixel, EVPA turned by a field of rms 40°.
    np.testing.assert_allclose(np.hypot(b[1], b[2]), np.hypot(a[1], a[2]), rtol=1e-12)
    turn = np.angle((b[1] + 1j * b[2]) * np.conj(a[1] + 1j * a[2])) / 2
    assert np.rad2deg(np.sqrt(np.mean(turn**2))) == pytest.approx(40.0, rel=0.05)
    blurred = [survey.R.pol_summary(x, GRID, 20.0)["m_avg"] for x in (a, b)]
    assert blurred[1] < 0.9 * blurred[0]


def test_scores_of_the_truth_itself_are_perfect():
    survey = load()
    truth = survey.truth_stokes(ring(), GRID, survey.TRUTHS["scrambled"], seed=2)
    s = survey.scores(truth, truth, GRID)
    assert s["p_nxcorr"] == pytest.approx(1.0, abs=1e-12)
    assert s["beta2_dist"] == 0.0
    assert s["truth"] == s["image"]
    # A rotated EVPA lowers the cross-correlation as cos 2Δχ.
    turned = truth.copy()
    p = (truth[1] + 1j * truth[2]) * np.exp(2j * np.deg2rad(20.0))
    turned[1], turned[2] = p.real, p.imag
    t = survey.scores(truth, turned, GRID)
    assert t["p_nxcorr"] == pytest.approx(np.cos(np.deg2rad(40.0)), abs=1e-12)


def test_stokes_v_truths_and_scores():
    survey = load()
    base = survey.truth_stokes(ring(), GRID, survey.TRUTHS["twist"], seed=0)
    net = survey.with_stokes_v(base, GRID, survey.V_TRUTHS["v_net"])
    np.testing.assert_array_equal(net[:3], base[:3])
    assert net[3].sum() / net[0].sum() == pytest.approx(-0.01, rel=1e-12)
    dipole = survey.with_stokes_v(base, GRID, survey.V_TRUTHS["v_dipole"])
    # east positive, west negative (cos of the position angle from 90°)
    xx, _ = GRID.coords()
    bright = dipole[0] > 0.5 * dipole[0].max()
    assert np.all(dipole[3][bright & (xx > em.uas_to_rad(10))] > 0)
    assert np.all(dipole[3][bright & (xx < -em.uas_to_rad(10))] < 0)
    s = survey.scores_v(dipole, dipole, GRID)
    assert s["v_nxcorr"] == pytest.approx(1.0, abs=1e-12)
    assert s["truth_v"] == s["image_v"]
    none = survey.with_stokes_v(base, GRID, survey.V_TRUTHS["v_none"])
    assert survey.scores_v(none, dipole, GRID)["v_nxcorr"] is None


@pytest.mark.slow
def test_quick_survey_on_a_real_night(tmp_path, shared_data, capsys):
    ref = shared_data / "reference" / "m87_2017_101_ehtim_pipeline.fits"
    day = shared_data / "eht" / "m87_2017_pol" / "hops_data" / "April11"
    if not ref.is_file() or not day.is_dir():
        pytest.skip("the reference image or the polarimetric release is missing")
    survey = load()
    out = tmp_path / "s.jsonl"
    assert survey.main(["--quick", "--out", str(out), "--reference", str(ref)]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 2
    for r in rows:
        assert r["round_steps"] and all(k <= 50 for k in r["round_steps"])
        assert 0.5 < r["p_nxcorr"] <= 1.0
        assert r["dterm_err"] < 0.05  # the synthetic leakage is recovered
        assert 0.5 < r["chi2_m"] < 3.0
    assert all(r["iterations"] == 50 for r in rows)  # --quick: --fast's steps
    assert all(r["tol"] == survey.R.POL_STOP for r in rows)
    assert all(r["scale_power"] == survey.R.POL_SCALE_POWER for r in rows)
    # Resuming skips what is done.
    assert survey.main(["--quick", "--out", str(out), "--reference", str(ref)]) == 0
    assert len(out.read_text().splitlines()) == 2
    assert (
        "| ptv | hw | mask | max steps | tol | scale power |" in capsys.readouterr().out
    )
    # Runs of another step count are not done yet, and are kept apart in the table.
    argv = ["--quick", "--iterations", "3", "--out", str(out), "--reference", str(ref)]
    assert survey.main(argv) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["iterations"] for r in rows] == [50, 50, 3, 3]
    table = capsys.readouterr().out
    assert "| 100 | 1 | 0.01 | 50 | 1e-08 | 1 |" in table
    assert "| 100 | 1 | 0.01 | 3 | 1e-08 | 1 |" in table
    # Runs of another tolerance are not done yet either.
    argv[2] = "50"
    assert survey.main([*argv, "--tol", "1e-3"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["tol"] for r in rows] == [survey.R.POL_STOP] * 4 + [1e-3] * 2
    assert "| 100 | 1 | 0.01 | 50 | 0.001 | 1 |" in capsys.readouterr().out
    # And runs in other coordinates (--scale-power).
    assert survey.main([*argv, "--tol", "1e-3", "--scale-power", "0"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["scale_power"] for r in rows] == [1.0] * 6 + [0.0] * 2
    assert "| 100 | 1 | 0.01 | 50 | 0.001 | 0 |" in capsys.readouterr().out
    rows = rows[:4]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # Runs recorded without their step limit (before it was recorded) are not
    # taken for today's: they are run again, and tabled apart.
    legacy = [
        {k: v for k, v in r.items() if k not in ("iterations", "tol", "scale_power")}
        for r in rows[:2]
    ]
    out.write_text("".join(json.dumps(r) + "\n" for r in legacy))
    assert survey.main(["--quick", "--out", str(out), "--reference", str(ref)]) == 0
    assert len(out.read_text().splitlines()) == 4
    assert "| 100 | 1 | 0.01 | ? | 1e-06 | 0 |" in capsys.readouterr().out
    # The Stokes V survey: V imaged, its scores recorded.
    out_v = tmp_path / "v.jsonl"
    argv = ["--stokes-v", "--quick", "--out", str(out_v), "--reference", str(ref)]
    assert survey.main(argv) == 0
    (row,) = [json.loads(x) for x in out_v.read_text().splitlines()]
    assert row["v_nxcorr"] > 0.5 and 0.5 < row["chi2_vvis"] < 3.0
    lin = survey.R.POL_ROUNDS[1]
    assert (row["lin_ptv"], row["lin_hw"], row["iterations"]) == (
        lin["ptv"],
        lin["hw"],
        50,
    )
    assert row["scale_power"] == survey.R.POL_SCALE_POWER
    assert row["scale_power_v"] == survey.R.POL_SCALE_POWER_V
    assert (
        "| vvis | l1v | vtv | max steps | tol | linear ptv, hw | scale power (V) |"
        in capsys.readouterr().out
    )
    # Done with these linear weights: resuming skips it.
    assert survey.main(argv) == 0
    assert len(out_v.read_text().splitlines()) == 1
    # Another V exponent is another run, recorded and tabled apart.
    assert survey.main([*argv, "--scale-power-v", "0.5"]) == 0
    rows = [json.loads(x) for x in out_v.read_text().splitlines()]
    assert [r["scale_power_v"] for r in rows] == [survey.R.POL_SCALE_POWER_V, 0.5]
    assert "| 1 (0.5) |" in capsys.readouterr().out


def test_survey_refuses_a_step_count_under_one(capsys):
    with pytest.raises(SystemExit) as e:
        load().main(["--iterations", "0"])
    assert e.value.code == 2
    assert "--iterations must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("tol", ["0", "1", "-0.5"])
def test_survey_refuses_a_tolerance_outside_the_unit_interval(capsys, tol):
    with pytest.raises(SystemExit) as e:
        load().main(["--tol", tol])
    assert e.value.code == 2
    assert f"--tol must be in (0, 1), got {float(tol)}" in capsys.readouterr().err


@pytest.mark.parametrize("power", ["-1", "nan", "inf"])
def test_survey_refuses_a_bad_scale_power(capsys, power):
    with pytest.raises(SystemExit) as e:
        load().main(["--scale-power", power])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"--scale-power must be a finite number >= 0, got {float(power)}" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--scale-power-v", "0.5"], "--scale-power-v is V's exponent: give it with"),
        (["--stokes-v", "--scale-power-v", "-1"], "--scale-power-v must be a finite"),
    ],
)
def test_survey_refuses_a_bad_v_scale_power(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        load().main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_survey_reads_the_coordinates_of_older_runs():
    """Runs recorded before the exponents were: 0; V runs recorded with
    `scale_power` alone ran V at that exponent too."""
    survey = load()
    assert survey._power({}) == 0.0 and survey._power_v({}) == 0.0
    assert survey._power({"scale_power": 1.0}) == 1.0
    assert survey._power_v({"scale_power": 1.0}) == 1.0
    assert survey._power_v({"scale_power": 1.0, "scale_power_v": 0.0}) == 0.0
