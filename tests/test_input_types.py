"""Inputs as users pass them: numpy scalars where a number is asked for, integer
images, traced masked parameters, empty selections, and the constructions that would
divide by zero later. Each either works as its float / concrete counterpart or is
refused at construction, naming the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems.gains import synthetic


GRID = em.ImageGrid(6, 7, em.uas_to_rad(12.0))


def test_numpy_scalars_are_numbers():
    d = synthetic()
    assert_allclose(d.select(snr_min=np.int64(3)).vis, d.select(snr_min=3).vis, rtol=0)
    assert_allclose(
        d.scan_average(np.float32(600.0)).vis, d.scan_average(600.0).vis, rtol=0
    )
    assert_allclose(
        d.time_average(np.float32(60.0)).vis, d.time_average(60.0).vis, rtol=0
    )
    a = em.amplitudes(d, snr_cut=np.float32(1.0))
    assert_allclose(a.amp, em.amplitudes(d, snr_cut=1.0).amp, rtol=0)
    c = em.closure_phases(d, fractional_noise=np.float32(0.01))
    assert_allclose(
        c.sigma, em.closure_phases(d, fractional_noise=0.01).sigma, rtol=1e-6
    )


def test_empty_selection_is_a_clear_error():
    with pytest.raises(ValueError, match="nothing is left"):
        synthetic().take([])


def test_integer_images():
    img = np.zeros(GRID.shape, int)
    img[3, 3] = 1
    fwhm = em.uas_to_rad(20.0)
    assert_allclose(
        em.blur_image(img, GRID, fwhm),
        em.blur_image(img.astype(float), GRID, fwhm),
        rtol=1e-15,
    )
    kw = dict(ra=187.7, dec=12.39, times=np.linspace(0.0, 24.0, 5))
    obs = em.observe(img, GRID, em.EHT2017, **kw)
    assert_allclose(obs.vis, em.observe(img.astype(float), GRID, em.EHT2017, **kw).vis)
    with pytest.raises(ValueError, match="`image` has non-finite"):
        em.observe(np.full(GRID.shape, np.nan), GRID, em.EHT2017, **kw)


def test_masked_pixel_image_from_traced_values():
    rng = np.random.default_rng(0)
    img = rng.uniform(0.5, 1.0, GRID.shape)
    mask = np.zeros(GRID.shape, bool)
    mask[1:5, 2:6] = True
    want = em.PixelImage.from_image(img, GRID, mask=mask)()
    got = jax.jit(lambda x: em.PixelImage.from_image(x, GRID, mask=mask)())(img)
    assert_allclose(got, want, rtol=1e-15)
    got = jax.jit(lambda p: em.PixelImage(GRID, p, mask=mask)())(jnp.log(img))
    assert_allclose(got, want, rtol=1e-15)


def test_weighted_l1_without_smoothing_needs_a_prior_without_zeros():
    prior = np.ones(GRID.shape)
    prior[0, 0] = 0.0
    with pytest.raises(ValueError, match="`eps`=0"):
        em.WeightedL1(prior, eps=0.0)
    # Smoothed, or a prior without zeros: finite.
    img = jnp.ones(GRID.shape)
    assert np.isfinite(float(em.WeightedL1(prior)(img)))
    assert np.isfinite(float(em.WeightedL1(prior + 1.0, eps=0.0)(img)))
