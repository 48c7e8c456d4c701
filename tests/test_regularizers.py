"""Regularizer specifics (the shared value/gradient/FD/jit/vmap suite is in
tests/test_terms.py): NaN safety on flat, symmetric and masked images, float32,
normalisation constants, construction errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.reference import regularizers as rr


GRID = em.ImageGrid(16, 16, em.uas_to_rad(4.0))
FLUX = 0.8
BEAM = 4 * GRID.psize


def _vg(reg, img):
    return jax.jit(jax.value_and_grad(lambda x: reg(x)))(jnp.asarray(img))


@pytest.mark.parametrize("eps", [0.0, 1e-14])
def test_tv_finite_gradients_on_flat_and_symmetric_images(eps):
    flat = np.full(GRID.shape, FLUX / GRID.npix)
    # A circular Gaussian centred on the phase centre: on an even grid the four
    # central pixels are equal, so both forward differences vanish there.
    sym = np.asarray(em.GaussianImage(GRID, FLUX, 6 * GRID.psize)())
    assert sym[7, 7] == sym[8, 7] == sym[7, 8]
    for img in (flat, sym, np.zeros(GRID.shape)):
        for reg in (
            em.TV(GRID, eps=eps),
            em.TV(GRID, eps=eps, flux=FLUX, beam=BEAM, normalise=True),
        ):
            val, grad = _vg(reg, img)
            grad = np.asarray(grad)
            assert np.isfinite(float(val)) and np.all(np.isfinite(grad))
            norm = FLUX * GRID.psize / BEAM if reg.normalise else 1.0
            with np.errstate(invalid="ignore", divide="ignore"):
                ref_val, ref_grad = rr.tv(img, eps, norm)
            assert_allclose(val, ref_val, rtol=1e-12, atol=1e-300)
            # Where the reference is defined (no zero-length difference involved)
            # the gradients agree; elsewhere ours is the subgradient, finite.
            ok = np.isfinite(ref_grad)
            if ok.any():
                assert_allclose(grad[ok], ref_grad[ok], rtol=1e-12)
            if eps > 0:
                assert ok.all()


def test_tsv_and_moments_on_flat_image():
    flat = np.full(GRID.shape, FLUX / GRID.npix)
    fov = GRID.nx * GRID.psize
    for reg, ref, typical in [
        (em.TSV(GRID), rr.tsv(flat), None),
        (em.Centroid(GRID), rr.centroid(flat, GRID.psize), (FLUX * fov) ** 2),
        (em.Compactness(GRID), rr.compact(flat, GRID.psize), FLUX * fov**2),
    ]:
        val, grad = _vg(reg, flat)
        # The centroid of a flat image is 0 up to rounding: compare on the scale
        # of a typical value.
        assert_allclose(val, ref[0], rtol=1e-12, scale=typical)
        assert_allclose(grad, ref[1], rtol=1e-12, scale=typical and typical / FLUX)
    # A flat image is centred: zero centroid penalty.
    assert abs(float(em.Centroid(GRID)(flat))) < 1e-40


def test_entropies_on_a_masked_image_model():
    """Outside a PixelImage mask the image is exactly 0: those pixels contribute
    their limits (0 for I ln I/P, P for Gull-Skilling) and nothing becomes NaN."""
    prior = np.asarray(em.GaussianImage(GRID, FLUX, 5 * GRID.psize)())
    clip = 1e-3 * prior.max()
    model = em.PixelImage.from_prior(prior, GRID, clipfloor=clip, init=1.1 * prior)
    mask = model.mask
    assert 0 < mask.sum() < GRID.npix
    img = np.asarray(model())
    assert np.all(img[~mask] == 0.0)
    for reg, ref in [
        (em.SimpleEntropy(prior), rr.simple),
        (em.GullSkillingEntropy(prior), rr.gull_skilling),
    ]:
        val, g_img = _vg(reg, img)
        assert np.all(np.isfinite(np.asarray(g_img)))
        ref_val, ref_grad = ref(img[mask], prior[mask])
        off_mask = 0.0 if ref is rr.simple else prior[~mask].sum()
        assert_allclose(val, ref_val + off_mask, rtol=1e-12)
        g = eqx.filter_jit(eqx.filter_grad(lambda m, r: r(m)))(model, reg)
        assert np.all(np.isfinite(np.asarray(g.params)))
        assert_allclose(g.params, ref_grad * img[mask], rtol=1e-12)


def test_float32_images_stay_float32():
    img = np.random.default_rng(0).uniform(0.1, 1.0, GRID.shape).astype(np.float32)
    img *= 0.7 * FLUX / img.sum()
    prior = img[::-1].copy()
    norm = dict(flux=FLUX, beam=BEAM, normalise=True)
    regs = [
        em.SimpleEntropy(prior, flux=FLUX, normalise=True),
        em.GullSkillingEntropy(prior),
        em.L1(flux=FLUX, normalise=True),
        em.WeightedL1(prior),
        em.TV(GRID, **norm),
        em.TSV(GRID, **norm),
        em.Flux(FLUX, normalise=True),
        em.Centroid(GRID, **norm),
        em.Compactness(GRID, **norm),
        em.Compactness2(GRID, **norm),
        em.GaussianMoments(GRID, 5 * GRID.psize, 3 * GRID.psize, 0.3),
    ]
    run = eqx.filter_jit(
        lambda x, regs: [jax.value_and_grad(lambda y: r(y))(x) for r in regs]
    )
    out32 = run(jnp.asarray(img), regs)
    out64 = run(jnp.asarray(img, jnp.float64), regs)
    for reg, (val, grad), (ref, _) in zip(regs, out32, out64):
        assert val.dtype == jnp.float32 and grad.dtype == jnp.float32, type(reg)
        assert_allclose(val, ref, rtol=2e-4, err=type(reg).__name__)


def test_beam_from_uv():
    u = np.array([1e9, -3e9, 2e9])
    v = np.array([4e9, 0.0, -2e9])
    assert em.beam_from_uv(u, v) == pytest.approx(1 / np.hypot(1e9, 4e9), rel=1e-15)
    with pytest.raises(ValueError, match="empty"):
        em.beam_from_uv(np.array([]), np.array([]))


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: em.SimpleEntropy(np.ones((4, 4)), normalise=True), ValueError, "flux"),
        (lambda: em.TV(GRID, flux=1.0, normalise=True), ValueError, "beam"),
        (lambda: em.TSV(GRID, beam=BEAM, normalise=True), ValueError, "flux"),
        (lambda: em.Centroid(GRID, flux=-1.0, beam=BEAM), ValueError, "flux"),
        (lambda: em.SimpleEntropy(-np.ones((4, 4))), ValueError, "negative"),
        (lambda: em.SimpleEntropy(np.zeros((4, 4))), ValueError, "zero everywhere"),
        (
            lambda: em.GullSkillingEntropy(np.zeros((4, 4))),
            ValueError,
            "zero everywhere",
        ),
        (lambda: em.SimpleEntropy(np.full((4, 4), np.nan)), ValueError, "non-finite"),
        (lambda: em.TV(GRID, eps=-1.0), ValueError, "eps"),
        (lambda: em.TV((16, 16)), TypeError, "ImageGrid"),
        (lambda: em.Flux(0.0), ValueError, "flux"),
        (lambda: em.GaussianMoments(GRID, 0.0), ValueError, "fwhm_major"),
        (lambda: em.Compactness(GRID, beam=BEAM, normalise=True), ValueError, "flux"),
    ],
)
def test_construction_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_wrong_image_shape_is_a_clear_error():
    with pytest.raises(ValueError, match=r"built for \(16, 16\)"):
        em.TV(GRID)(jnp.ones((8, 8)))
    with pytest.raises(ValueError, match="shape"):
        em.SimpleEntropy(np.ones((4, 4)))(jnp.ones((5, 5)))
