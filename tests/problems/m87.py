"""M87 2017-04-10 (lo band, the file shipped in eqmodels/data), scan-averaged, and
its round-1 objective: the real-data problem of tests/test_terms_rows.py,
tests/test_sharding.py and tests/test_survey.py."""

import functools

import eqmodels as em
from tests.conftest import TEST_DATA


DAY_100 = TEST_DATA / "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits"
# In ../shared/data (tests that take the `shared_data` fixture).
DAY_101 = "eht/m87_2017/SR1_M87_2017_101_lo_hops_netcal_StokesI.uvfits"
M87_GRID = em.ImageGrid.from_fov(32, 128.0)


@functools.cache
def load_day(path):
    """The uvfits file at `path`, scan-averaged (read once per process)."""
    return em.load_uvfits(path).scan_average()


def round1(data, forward, grid=M87_GRID):
    """The amplitude, closure-phase and log-closure-amplitude terms of `data` and
    the round-1 objective built on them (with an entropy and TV)."""
    amp, cph, lca = (
        em.amplitudes(data),
        em.closure_phases(data),
        em.log_closure_amplitudes(data),
    )
    terms = (
        em.AmpChi2.from_data(amp, grid, forward=forward),
        em.ClosurePhaseChi2.from_data(cph, grid, forward=forward),
        em.LogClosureAmpChi2.from_data(lca, grid, forward=forward),
    )
    prior = em.GaussianImage(grid, 0.6, em.uas_to_rad(40.0))()
    obj = (
        0.2 * terms[0]
        + terms[1]
        + terms[2]
        + 100 * em.SimpleEntropy(prior, flux=0.6, normalise=True)
        + em.TV(grid)
    )
    return terms, obj
