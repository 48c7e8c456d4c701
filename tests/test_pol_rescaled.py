"""`RescaledPolPixels`, the coordinates the polarimetric recipe solves in: the same
images as the `PolPixelImage` it wraps, the scales and the gradient's chain rule
against numpy, under jit and vmap, and its errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from eqmodels import RescaledPolPixels
from eqmodels._image._pol_rescaled import check_scale_power, rescaled_filter


GRID = em.ImageGrid.from_fov(12, 96.0)


def _image(circular=False, seed=0, mask_fraction=0.05):
    """A `PolPixelImage` on a ring (log pixels on the mask I > 5 % of the peak)
    with random polarization vectors."""
    xx, yy = GRID.coords()
    r = np.hypot(xx, yy) / em.uas_to_rad(1.0)
    i = np.exp(-0.5 * ((r - 20.0) / 8.0) ** 2) + 1e-4
    i *= 0.6 / i.sum()
    intensity = em.PixelImage.from_prior(i, GRID, clipfloor=mask_fraction * i.max())
    k = 3 if circular else 2
    rng = np.random.default_rng(seed)
    pol = rng.normal(scale=0.3, size=(k, intensity.indices.shape[0]))
    return em.PolPixelImage(intensity, pol, circular=circular)


def _scales_numpy(image, power):
    i = np.asarray(image.intensity()).reshape(-1)[np.asarray(image.intensity.indices)]
    return (i / i.max()) ** (-power)


@pytest.mark.parametrize("circular", [False, True])
@pytest.mark.parametrize("power", [0.0, 0.5, 1.0, 2])
def test_same_images_and_numpy_scales(circular, power):
    image = _image(circular)
    model = RescaledPolPixels(image, power)
    want = _scales_numpy(image, power)
    assert model.scale.shape == image.pol.shape
    for row in np.asarray(model.scale):
        np.testing.assert_allclose(row, want, rtol=1e-13)
    assert model.z.shape == image.pol.shape
    np.testing.assert_allclose(
        np.asarray(model.z), np.asarray(image.pol) / want, rtol=1e-15
    )
    np.testing.assert_allclose(
        np.asarray(model()), np.asarray(image()), rtol=1e-14, atol=0
    )
    back = model.unscaled()
    assert type(back) is em.PolPixelImage and back.circular == circular
    np.testing.assert_allclose(np.asarray(back.pol), np.asarray(image.pol), rtol=1e-15)
    assert model.grid == image.grid
    np.testing.assert_array_equal(np.asarray(model.image.pol), 0.0)  # replaced by z·s
    if power == 0:
        np.testing.assert_array_equal(np.asarray(model.scale), 1.0)


def test_scales_span_the_brightness_range():
    """Power 1: the faintest free pixel's scale is the peak over its brightness."""
    image = _image()
    s = np.asarray(RescaledPolPixels(image, 1.0).scale)[0]
    i = np.asarray(image.intensity()).reshape(-1)[np.asarray(image.intensity.indices)]
    assert s.min() == pytest.approx(1.0, rel=1e-14)
    assert s.max() == pytest.approx(i.max() / i.min(), rel=1e-13)
    assert s.max() > 10  # the test has the spread it is about


def _penalty(stokes):
    """A smooth scalar of the four planes (the recipe's `hw` and a quadratic)."""
    hw = em.HolographicEntropy().penalty(stokes)
    return hw + 1e3 * jnp.sum(stokes[1] ** 2 + 0.5 * stokes[2] * stokes[1])


def test_gradient_is_the_chain_rule_and_matches_finite_differences():
    image = _image(seed=1)
    model = RescaledPolPixels(image, 1.0)
    g_z = eqx.filter_grad(lambda m: _penalty(m()))(model).z
    g_w = eqx.filter_grad(lambda m: _penalty(m()))(image).pol
    # ∂f/∂z = s · ∂f/∂w (numpy's product of the two).
    want = np.asarray(g_w) * np.asarray(model.scale)
    np.testing.assert_allclose(np.asarray(g_z), want, rtol=1e-12, atol=1e-300)
    # and finite differences along a random direction
    rng = np.random.default_rng(2)
    d = rng.normal(size=model.z.shape)

    def f(t):
        return float(_penalty(eqx.tree_at(lambda m: m.z, model, model.z + t * d)()))

    h = 1e-6
    fd = (f(h) - f(-h)) / (2 * h)
    np.testing.assert_allclose(float(np.sum(np.asarray(g_z) * d)), fd, rtol=1e-7)


def test_under_jit_and_vmap():
    image = _image(seed=3)
    model = RescaledPolPixels(image, 1.0)
    np.testing.assert_allclose(
        np.asarray(eqx.filter_jit(lambda m: m())(model)),
        np.asarray(image()),
        rtol=1e-14,
    )
    zs = jnp.stack([model.z, 0.5 * model.z, -model.z])

    def planes(z):
        return eqx.tree_at(lambda m: m.z, model, z)()

    got = jax.vmap(planes)(zs)
    for k, z in enumerate(zs):
        want = eqx.tree_at(lambda m: m.pol, image, z * model.scale)()
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want), rtol=1e-14)


def test_filter_selects_z_alone():
    model = RescaledPolPixels(_image(), 1.0)
    params, static = eqx.partition(model, rescaled_filter(model))
    leaves = jax.tree.leaves(params)
    assert len(leaves) == 1 and leaves[0] is model.z
    sol = em.solve(
        lambda m: _penalty(m()), model, max_steps=5, params=rescaled_filter(model)
    )
    np.testing.assert_array_equal(np.asarray(sol.model.scale), np.asarray(model.scale))
    np.testing.assert_array_equal(
        np.asarray(sol.model.image.intensity.params),
        np.asarray(model.image.intensity.params),
    )
    assert float(sol.value) < float(_penalty(model()))


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), True, "1", None])
def test_refuses_bad_power(bad):
    # (None and a string are refused by the annotation too, where it is checked.)
    with pytest.raises((TypeError, ValueError), match="power"):
        RescaledPolPixels(_image(), bad)
    if isinstance(bad, float | bool):
        with pytest.raises(ValueError, match="`power` must be a finite number >= 0"):
            RescaledPolPixels(_image(), bad)


def test_check_scale_power():
    assert check_scale_power(None) is None
    got = check_scale_power(np.float32(0.5))
    assert got == 0.5 and type(got) is float
    assert check_scale_power(2) == 2.0
    with pytest.raises(ValueError, match="`pol_scale_power` must be a finite number"):
        check_scale_power(-0.1, "pol_scale_power")


def test_refuses_other_models_and_unpositive_intensity():
    # (the annotation's check, where it runs, or ours: both name `image`)
    with pytest.raises(TypeError, match="image"):
        RescaledPolPixels(_image().intensity, 1.0)
    i = np.zeros(GRID.shape)
    i[5:7, 5:7] = 1e-3
    intensity = em.PixelImage.from_image(i, GRID, transform="identity")
    image = em.PolPixelImage(intensity, np.zeros((2, *GRID.shape)), circular=False)
    with pytest.raises(ValueError, match="Stokes I must be > 0 on every free pixel"):
        RescaledPolPixels(image, 1.0)


def test_default_params_hold_the_scales():
    """`solve` with its default `params` moves `z` and the Stokes I pixels, never
    the scales (their gradient is stopped)."""
    model = RescaledPolPixels(_image(seed=4), 1.0)
    g = eqx.filter_grad(lambda m: _penalty(m()))(model)
    np.testing.assert_array_equal(np.asarray(g.scale), 0.0)
    np.testing.assert_array_equal(np.asarray(g.image.pol), 0.0)
    sol = em.solve(lambda m: _penalty(m()), model, max_steps=5)
    np.testing.assert_array_equal(np.asarray(sol.model.scale), np.asarray(model.scale))
    assert not np.allclose(np.asarray(sol.model.z), np.asarray(model.z))
    before = np.asarray(model.image.intensity.params)
    assert not np.allclose(np.asarray(sol.model.image.intensity.params), before)


def test_v_power_scales_the_circular_component_alone():
    image = _image(circular=True, seed=5)
    model = RescaledPolPixels(image, 1.0, v_power=0.5)
    scale = np.asarray(model.scale)
    np.testing.assert_allclose(scale[0], _scales_numpy(image, 1.0), rtol=1e-13)
    np.testing.assert_allclose(scale[1], _scales_numpy(image, 1.0), rtol=1e-13)
    np.testing.assert_allclose(scale[2], _scales_numpy(image, 0.5), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(model()), np.asarray(image()), rtol=1e-14)
    with pytest.raises(ValueError, match="`v_power` must be a finite number"):
        RescaledPolPixels(image, 1.0, v_power=-1.0)
    with pytest.raises(ValueError, match="`image` has none"):
        RescaledPolPixels(_image(circular=False), 1.0, v_power=0.5)


def test_built_under_jit():
    """Built inside `jit` (the I > 0 check skipped on tracers): the same model."""
    image = _image(seed=6)
    got = eqx.filter_jit(lambda im: RescaledPolPixels(im, 1.0)())(image)
    np.testing.assert_allclose(np.asarray(got), np.asarray(image()), rtol=1e-14)
    scale = eqx.filter_jit(lambda im: RescaledPolPixels(im, 0.5).scale)(image)
    np.testing.assert_allclose(
        np.asarray(scale)[0], _scales_numpy(image, 0.5), rtol=1e-13
    )


def test_refuses_a_power_whose_scale_overflows():
    with pytest.raises(ValueError, match="too large for this image"):
        RescaledPolPixels(_image(), 400.0)
