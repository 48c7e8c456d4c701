"""Inputs that gave a wrong answer without a word (issue 41, item 4): each is
refused now, naming the argument and the fix. (Per-station table keys and an
absent `phase_reference`: tests/test_gains.py, test_data_closures.py,
test_selfcal.py.)"""

import numpy as np
import pytest

import eqmodels as em

from .unchecked import unchecked_error


GRID = em.ImageGrid.from_fov(16, 128.0)


def test_gaussian_wider_than_its_field_is_refused():
    em.GaussianImage(GRID, 1.0, em.uas_to_rad(120.0))  # within the field
    with pytest.raises(ValueError, match="`fwhm`=.* is wider than the field of view"):
        em.GaussianImage(GRID, 1.0, em.uas_to_rad(200.0))
    # The major axis decides, whatever the minor one.
    with pytest.raises(ValueError, match="wider than the field"):
        em.GaussianImage(
            GRID, 1.0, em.uas_to_rad(300.0), fwhm_minor=em.uas_to_rad(10.0)
        )


def test_weighted_l1_refuses_an_all_zero_prior():
    em.WeightedL1(np.ones(GRID.shape))
    with pytest.raises(ValueError, match="`prior` is zero everywhere"):
        em.WeightedL1(np.zeros(GRID.shape))
    with pytest.raises(ValueError, match="`prior` is zero everywhere"):
        em.WeightedL1(np.zeros(GRID.shape), eps=0.0)


def test_log_closure_term_refuses_linear_closure_amplitudes():
    rng = np.random.default_rng(0)
    n = 12
    u, v = rng.uniform(-2e9, 2e9, (2, n, 4))
    fwd = em.DirectFT(GRID, u, v)
    logcamp = rng.normal(0.0, 0.5, n)
    sigma = np.full(n, 0.1)
    em.LogClosureAmpChi2(fwd, logcamp, sigma)
    camp = np.exp(logcamp)  # linear: all > 0
    with pytest.raises(ValueError, match="look like linear closure amplitudes"):
        em.LogClosureAmpChi2(fwd, camp, sigma)
    # A few rows, all positive, are possible log closure amplitudes: taken.
    few = em.DirectFT(GRID, u[:3], v[:3])
    em.LogClosureAmpChi2(few, np.abs(logcamp[:3]) + 0.1, sigma[:3])


def test_save_fits_refuses_a_frequency_in_ghz(tmp_path):
    image = np.ones(GRID.shape)
    with pytest.raises(ValueError, match=r"`freq`=230.0 Hz is outside .* 2\.3e\+11"):
        em.save_fits(image, GRID, tmp_path / "a.fits", freq=230.0)
    assert not (tmp_path / "a.fits").exists()
    em.save_fits(image, GRID, tmp_path / "a.fits", freq=230e9)


def test_solve_says_when_it_ends_worse_than_it_began():
    """`Solution.worsened` (a field, also batched): Adam with too large a step
    from near the minimum ends far above its start; L-BFGS does not."""
    import jax
    import jax.numpy as jnp

    def objective(x):
        return jnp.sum((x - 1.0) ** 2)

    start = jnp.full(3, 0.99)
    bad = em.solve(objective, start, em.Adam(1.0), max_steps=1)
    assert float(bad.value) > float(bad.stats["initial_value"])
    assert bool(bad.worsened)
    good = em.solve(objective, start, "lbfgs", max_steps=20)
    assert float(good.stats["initial_value"]) == pytest.approx(3e-4)
    assert not bool(good.worsened)
    batched = jax.vmap(
        lambda x: em.solve(objective, x, em.Adam(1.0), max_steps=1).worsened
    )(jnp.stack([start, jnp.full(3, -5.0)]))
    assert batched.tolist() == [True, False]


# Without the suite's runtime type checker (as users run): a string where a bool
# is expected was read as true (`"no"` switched the option on).
_SETUP = "g = em.ImageGrid.from_fov(8, 100.0); t = em.TSV(g)"
_FLAGS = {
    "chi2_offset": unchecked_error(
        "em.Objective([t], chi2_offset='no')", "TypeError", setup=_SETUP
    ),
    "share": unchecked_error(
        "em.Objective([t], share='no')", "TypeError", setup=_SETUP
    ),
    "fast": unchecked_error(
        "em.image_m87(em.example_uvfits(), fast='no')", "TypeError"
    ),
    "progress": unchecked_error("em.survey([None], None, progress='no')", "TypeError"),
}


@pytest.mark.parametrize("name", sorted(_FLAGS))
def test_bool_arguments_take_bools(unchecked, name):
    assert f"`{name}` must be True or False, got 'no'" in unchecked[_FLAGS[name]]
