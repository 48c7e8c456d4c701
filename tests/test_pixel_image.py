import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems import random_image


GRID = em.ImageGrid(8, 10, em.uas_to_rad(4.0))


def test_log_and_identity_round_trip():
    img = random_image(GRID)
    for transform in ("log", "identity"):
        m = em.PixelImage.from_image(img, GRID, transform=transform)
        assert_allclose(m(), img, rtol=1e-15)
        assert m.params.shape == (GRID.npix,)
    assert_allclose(em.PixelImage(GRID, np.log(img))(), img, rtol=1e-15)


def test_mask_embeds_and_grad_only_on_mask():
    img = random_image(GRID)
    mask = img > np.median(img)
    m = em.PixelImage.from_image(img, GRID, mask=mask)
    assert m.params.shape == (mask.sum(),)
    out = np.asarray(m())
    assert np.all(out[~mask] == 0.0)
    assert_allclose(out[mask], img[mask], rtol=1e-15)
    np.testing.assert_array_equal(m.mask, mask)
    w = np.random.default_rng(0).standard_normal(GRID.shape)
    g = eqx.filter_grad(lambda mm: jnp.sum(jnp.asarray(w) * mm()))(m)
    # d/dx Σ w exp(x) = w exp(x) on the free pixels.
    assert_allclose(g.params, (w * img)[mask], rtol=1e-14)


def test_jit_and_vmap():
    imgs = np.stack([random_image(GRID, seed=s) for s in range(3)])
    models = jax.vmap(lambda p: em.PixelImage(GRID, p))(jnp.log(jnp.asarray(imgs)))
    out = jax.vmap(lambda m: m())(models)
    assert_allclose(out, imgs, rtol=1e-15)
    m = em.PixelImage.from_image(imgs[0], GRID)
    assert_allclose(eqx.filter_jit(lambda mm: mm())(m), imgs[0], rtol=1e-15)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(params=np.zeros((3, 3))), ValueError, "params"),
        (dict(params=np.zeros((8, 10)), transform="sqrt"), ValueError, "transform"),
        (
            dict(params=np.full((8, 10), np.nan)),
            ValueError,
            "`params` has 80 non-finite.*must be finite",
        ),
        (
            dict(params=np.zeros((8, 10)), mask=np.zeros((8, 10), bool)),
            ValueError,
            "mask",
        ),
        (
            dict(params=np.zeros((8, 10)), mask=np.ones((3, 3), bool)),
            ValueError,
            "mask",
        ),
    ],
)
def test_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        em.PixelImage(GRID, **kwargs)


def test_from_image_errors():
    img = random_image(GRID)
    img[0, 0] = 0.0
    with pytest.raises(ValueError, match="strictly positive"):
        em.PixelImage.from_image(img, GRID)
    with pytest.raises(ValueError, match="shape"):
        em.PixelImage.from_image(np.ones((3, 3)), GRID)
    # Zero pixels are fine outside the mask, or with the identity transform.
    mask = np.ones(GRID.shape, bool)
    mask[0, 0] = False
    em.PixelImage.from_image(img, GRID, mask=mask)
    em.PixelImage.from_image(img, GRID, transform="identity")


def test_mask_is_checked_before_use_in_from_image():
    # A nested list: the annotations bind no shape to it (the tests' runtime type
    # checker would otherwise refuse the mismatch before the function runs).
    img = random_image(GRID).tolist()
    with pytest.raises(ValueError, match="`mask` must be a boolean array"):
        em.PixelImage.from_image(img, GRID, mask=np.ones((10, 8), bool))
    with pytest.raises(ValueError, match="`mask` must be a boolean array"):
        em.PixelImage.from_image(img, GRID, mask=np.ones(GRID.shape, int).tolist())


def test_traced_params_are_checked_and_stored_as_built_eagerly():
    """Shapes are static under jit: a wrong one is refused there too, and the
    model's leaves have the same shapes traced or not (a `cond`, a `while` carry
    or a survey mixing the two would otherwise mismatch)."""
    img = random_image(GRID)
    mask = img > np.median(img)
    with pytest.raises(ValueError, match="`params` has shape \\(5,\\)"):
        jax.jit(lambda p: em.PixelImage(GRID, p)())(np.zeros(5))
    with pytest.raises(ValueError, match="`params` has shape \\(80,\\)"):
        jax.jit(lambda p: em.PixelImage(GRID, p, mask=mask)())(np.zeros(80))
    with pytest.raises(ValueError, match="`image` has shape \\(3, 3\\)"):
        jax.jit(lambda x: em.PixelImage.from_image(x, GRID)())(np.ones((3, 3)))
    eager = em.PixelImage(GRID, np.log(img))
    traced = jax.jit(lambda p: em.PixelImage(GRID, p))(np.log(img))
    assert traced.params.shape == eager.params.shape == (GRID.npix,)
    assert_allclose(traced(), img, rtol=1e-15)
    masked = jax.jit(lambda p: em.PixelImage(GRID, p, mask=mask))(np.log(img))
    assert masked.params.shape == (int(mask.sum()),)
    assert_allclose(masked(), np.where(mask, img, 0.0), rtol=1e-15)


def test_from_image_and_from_prior_take_image_models():
    prior = em.GaussianImage(GRID, 0.6, em.uas_to_rad(12.0))
    m = em.PixelImage.from_prior(prior, GRID, clipfloor=1e-6)
    assert_allclose(m(), np.where(m.mask, prior(), 0.0), rtol=1e-14)
    assert np.array_equal(m.mask, np.asarray(prior()) > 1e-6)
    start = em.PixelImage.from_image(prior, GRID)
    assert_allclose(start(), prior(), rtol=1e-14)
    init = em.GaussianImage(GRID, 0.6, em.uas_to_rad(20.0))
    m = em.PixelImage.from_prior(prior, GRID, init=init)
    assert_allclose(m(), init(), rtol=1e-14)
    other = em.ImageGrid.from_fov(8, 40.0)
    with pytest.raises(ValueError, match="`prior` is a GaussianImage on .*same grid"):
        em.PixelImage.from_prior(em.GaussianImage(other, 0.6, 1e-10), GRID)
    with pytest.raises(ValueError, match="`image` is a GaussianImage"):
        em.PixelImage.from_image(em.GaussianImage(other, 0.6, 1e-10), GRID)


def test_from_prior_and_a_mask_must_be_concrete():
    img = random_image(GRID)
    with pytest.raises(TypeError, match="`prior` must be concrete.*outside `jit`"):
        jax.jit(lambda p: em.PixelImage.from_prior(p, GRID))(img)
    with pytest.raises(TypeError, match="`init` must be concrete"):
        jax.jit(lambda x: em.PixelImage.from_prior(img, GRID, init=x))(img)
    with pytest.raises(TypeError, match="`mask` must be concrete"):
        jax.jit(lambda k: em.PixelImage(GRID, np.log(img), mask=k))(img > 0.5)


def test_float32_stays_float32():
    img = random_image(GRID).astype(np.float32)
    assert em.PixelImage.from_image(img, GRID).params.dtype == np.float32
    assert em.PixelImage.from_prior(img, GRID).params.dtype == np.float32
    assert (
        em.PixelImage.from_image(img, GRID, transform="identity")().dtype == np.float32
    )
    # float64 input stays float64; an explicit dtype wins.
    assert (
        em.PixelImage.from_image(img.astype(np.float64), GRID).params.dtype
        == np.float64
    )
    m = em.PixelImage.from_image(img.astype(np.float64), GRID, dtype=np.float32)
    assert m.params.dtype == np.float32
    # The gradient of a float32 term w.r.t. a float32 model works and stays float32.
    u, v = np.array([1e9, -2e9], np.float32), np.array([3e9, 5e8], np.float32)
    term = em.VisChi2(em.DirectFT(GRID, u, v), np.ones(2, np.complex64), np.ones(2))
    g = eqx.filter_grad(term)(em.PixelImage.from_image(img, GRID))
    assert g.params.dtype == np.float32
