"""The published 2017 M87 recipe on every day of the 2017 release (../shared/data;
skipped when absent): its data preparation, and the per-day reference of the score
target. The full recipe on every day, scored, is `benchmarks/recipe_days.py` (too
slow for a test: each day compiles its own programs); `tests/test_cli.py` runs the
fast recipe on the shipped file."""

import numpy as np
import pytest

import eqmodels as em


pytestmark = pytest.mark.slow  # every day of the 2017 release


FILE = "eht/m87_2017/SR1_M87_2017_{}_{}_hops_netcal_StokesI.uvfits"
#: Scan-averaged rows of both bands per day (2017-04-05, 04-06, 04-10, 04-11).
ROWS = {"095": 336, "096": 558, "100": 187, "101": 439}


@pytest.mark.parametrize("day", sorted(ROWS))
def test_prepare_data_on_every_day(shared_data, day):
    """Every day has all seven stations; after preparation every timestamp holds
    one band and the intra-site baselines carry the 0.6 Jy compact flux (before
    the reverse taper)."""
    from eqmodels._recipe import _m87 as R

    paths = [shared_data / FILE.format(day, b) for b in ("lo", "hi")]
    if not all(p.is_file() for p in paths):
        pytest.skip(f"day {day} data not present")
    data = R.prepare_data([str(p) for p in paths])
    assert data.n_rows == ROWS[day]
    assert set(data.station_names) == {"AA", "AP", "AZ", "JC", "LM", "PV", "SM"}
    time, band = np.asarray(data.time), np.asarray(data.band)
    assert set(band.tolist()) == {0, 1}
    assert np.unique(time).size == np.unique(np.stack([time, band]), axis=1).shape[1]
    aa_ap = R.taper(data.select_stations(["AA", "AP"]), em.uas_to_rad(5.0))
    assert np.median(np.abs(aa_ap.vis)) == pytest.approx(0.6, rel=1e-6)


#: The pipeline's 2017-04-11 image scored on each day's data (cphase, logcamp):
#: the per-day reference of `benchmarks/recipe_days.py` and docs/recipe.md.
REFERENCE_SCORES = {
    "095": (13.49, 6.62),
    "096": (10.33, 2.94),
    "100": (1.382, 1.211),
}  # 2017-04-11 (0.722, 0.698): tests/test_cli.py


@pytest.mark.parametrize("day", sorted(REFERENCE_SCORES))
def test_reference_scores_on_every_day(shared_data, day):
    """The per-day reference of the recipe's score target (docs/recipe.md, *Every
    day of 2017*): the pipeline's 2017-04-11 image scored against each other day."""
    import jax

    jax.config.update("jax_enable_x64", True)
    ref = shared_data / "reference/m87_2017_101_ehtim_pipeline.fits"
    paths = [shared_data / FILE.format(day, b) for b in ("lo", "hi")]
    if not ref.is_file() or not all(p.is_file() for p in paths):
        pytest.skip(f"day {day} data or the reference image not present")
    score = em.closure_score(ref, paths)
    cphase, logcamp = REFERENCE_SCORES[day]
    assert score["cphase"] == pytest.approx(cphase, rel=0.01)
    assert score["logcamp"] == pytest.approx(logcamp, rel=0.01)
