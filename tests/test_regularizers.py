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
from tests.unchecked import unchecked_error, unchecked_script


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
        if typical is None:
            assert_allclose(val, ref[0], rtol=1e-12)
            assert_allclose(grad, ref[1], rtol=1e-12)
        else:
            assert_allclose(val, ref[0], rtol=0.0, atol=1e-12 * typical)
            assert_allclose(grad, ref[1], rtol=0.0, atol=1e-12 * typical / FLUX)
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
    # inf for autocorrelations only, NaN through, mismatched shapes broadcast:
    with pytest.raises(ValueError, match="autocorrelations"):
        em.beam_from_uv(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="`u` has 1 non-finite"):
        em.beam_from_uv(np.array([1e9, np.nan]), np.array([0.0, 1e9]))
    with pytest.raises(TypeError, match="v"):  # the suite's type checker first
        em.beam_from_uv(np.array([1e9, 2e9]), np.array([1e9]))


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
        # Angles in µas passed as radians; a switch that is not a bool.
        (
            lambda: em.TV(GRID, flux=1.0, beam=20.0, normalise=True),
            ValueError,
            "`beam` = 20 rad .*uas_to_rad",
        ),
        (lambda: em.GaussianMoments(GRID, 40.0), ValueError, "`fwhm_major` = 40 rad"),
        (
            lambda: em.L1(flux=1.0, normalise="no"),
            TypeError,
            "normalise",  # (the suite's type checker names it first)
        ),
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


def test_entropies_of_a_float32_image_survive_a_prior_with_faint_tails():
    """A Gaussian prior on a wide field reaches 1e-60 at the edges: cast to
    float32 those pixels were 0, and `I ln(I/0)` made the penalty infinite and
    its gradient NaN. The float32 value now follows the float64 one."""
    grid = em.ImageGrid.from_fov(64, 200.0)
    prior = np.asarray(em.GaussianImage(grid, FLUX, em.uas_to_rad(20.0))())
    assert prior.min() < 1e-50 and (prior.astype(np.float32) == 0).any()
    img = np.full(grid.shape, FLUX / grid.npix)
    for reg in (
        em.SimpleEntropy(prior, flux=FLUX, normalise=True),
        em.GullSkillingEntropy(prior),
    ):
        v64, g64 = _vg(reg, img)
        v32, g32 = _vg(reg, img.astype(np.float32))
        assert np.isfinite(v32) and np.all(np.isfinite(g32)), type(reg).__name__
        assert_allclose(v32, v64, rtol=1e-5, err=type(reg).__name__)
        assert_allclose(g32, g64, rtol=1e-4, atol=1e-5 * abs(g64).max())


def test_entropy_prior_may_be_an_image_model_and_zero_under_a_mask():
    model = em.GaussianImage(GRID, FLUX, em.uas_to_rad(12.0))
    a = em.SimpleEntropy(model)
    b = em.SimpleEntropy(np.asarray(model()))
    img = np.asarray(em.GaussianImage(GRID, FLUX, em.uas_to_rad(16.0))())
    assert float(a(img)) == float(b(img))
    # Where the prior is 0 the image must be 0 too: the penalty is finite there
    # (masked pixels), and +inf (the relative entropy's value) where it is not.
    top_hat = np.where(np.asarray(model()) > 1e-3 * FLUX, np.asarray(model()), 0.0)
    ent = em.SimpleEntropy(top_hat)
    on = top_hat > 0
    v, g = _vg(ent, np.where(on, img, 0.0))
    assert np.isfinite(v) and np.all(np.isfinite(g))
    assert float(ent(img)) == np.inf


INTEGER_IMAGE = unchecked_error("em.Flux(0.6)(np.eye(4, dtype=int))", "TypeError")


def test_regularizers_refuse_integer_images(unchecked):
    ints = np.zeros(GRID.shape, int)
    ints[0, 0] = 1
    for reg in (
        em.Flux(0.6),
        em.TV(GRID, flux=0.6, beam=BEAM, normalise=True),
        em.SimpleEntropy(np.ones(GRID.shape)),
        em.Centroid(GRID),
    ):
        with pytest.raises(TypeError, match="image"):  # the suite's type checker
            reg(ints)
    assert float(em.Flux(0.6)(ints.astype(float))) == pytest.approx(0.16)
    # Without the test suite's type checker (as users run it), eqmodels' own check.
    msg = unchecked[INTEGER_IMAGE]
    assert msg is not None and "`image` must be a real floating-point array" in msg


def test_an_objective_refuses_a_prior_of_another_shape():
    with pytest.raises(ValueError, match="grid of 'tv' is \\(16, 16\\).*'simple' is"):
        em.TV(GRID) + em.SimpleEntropy(np.ones((32, 32)))
    with pytest.raises(ValueError, match="prior of 'simple' is \\(16, 16\\)"):
        em.SimpleEntropy(np.ones((16, 16))) + em.WeightedL1(np.ones((8, 8)))
    em.TV(GRID) + em.SimpleEntropy(np.ones(GRID.shape))  # the same shape: fine


def test_l1_derivative_at_zero_is_zero():
    """As documented and as eht-imaging's `sl1grad`: a zero pixel is not pushed
    either way (the derivative of `jnp.abs` at 0 is 1)."""
    img = jnp.array([[0.0, 0.2], [0.0, -0.1]])
    g = jax.grad(em.L1())(img)
    np.testing.assert_array_equal(np.asarray(g), [[0.0, 1.0], [0.0, -1.0]])
    assert float(em.L1()(img)) == 0.2 + 0.1  # |x| exactly


def test_entropies_of_a_float64_image_survive_a_subnormal_prior_pixel():
    """XLA flushes subnormal numbers to 0: a prior pixel below 2.2e-308 (a narrow
    Gaussian prior's tails) made `ln(I/P)` infinite and the gradient NaN in
    float64. The value and gradient now follow the formula evaluated on the host."""
    prior = np.full((4, 4), 0.01)
    prior[0, 0] = 1e-310
    img = np.full((4, 4), 0.01)
    img[0, 0] = 1e-9
    log_ratio = np.log(img) - np.log(prior)  # numpy keeps subnormals
    for reg, ref, ref_grad in (
        (em.SimpleEntropy(prior), np.sum(img * log_ratio), log_ratio + 1.0),
        (
            em.GullSkillingEntropy(prior),
            np.sum(prior - img + img * log_ratio),
            log_ratio,
        ),
    ):
        v, g = _vg(reg, img)
        assert_allclose(v, ref, rtol=1e-12, err=type(reg).__name__)
        assert_allclose(g, ref_grad, rtol=1e-12, err=type(reg).__name__)


BATCH_OF_IMAGES = unchecked_error(
    "em.Flux(0.6).residuals(np.full((3, 4, 4), 0.01))", "ValueError"
)


def test_flux_residuals_refuse_a_batch_of_images(unchecked):
    """`residuals` summed a whole batch silently (`penalty` refused it). In the
    suite the type checker refuses first; users get eqmodels' own message."""
    with pytest.raises(TypeError, match="image"):
        em.Flux(0.6).residuals(jnp.full((3, 4, 4), 0.01))
    msg = unchecked[BATCH_OF_IMAGES]
    assert "`image` must be (ny, nx), got (3, 4, 4)" in msg
    batch = jax.vmap(em.Flux(0.6).residuals)(jnp.full((3, 4, 4), 0.01))
    assert_allclose(batch, np.full((3, 1), 0.16 - 0.6), rtol=1e-14)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_half_precision_images_are_refused(dtype):
    """The pixel size (~1e-11 rad) underflows in half precision: TV, the moments
    and the rest gave NaN."""
    img = jnp.full(GRID.shape, 0.01, dtype)
    for reg in (
        em.TV(GRID, flux=0.6, beam=BEAM, normalise=True),
        em.Compactness(GRID, flux=0.6),
        em.Flux(0.6),
    ):
        with pytest.raises(TypeError, match="float32 or float64"):
            reg(img)


BOOLEAN_FLUX = {
    arg: unchecked_error(f"em.Flux({arg})", "TypeError")
    for arg in ("True", "np.bool_(True)", "np.array(True)")
}


def test_booleans_are_not_numbers(unchecked):
    """`Flux(True)` was a target flux of 1 Jy (the suite's type checker refuses it
    first; users get eqmodels' own message)."""
    with pytest.raises(TypeError, match="flux"):
        em.Flux(True)
    for arg, case in BOOLEAN_FLUX.items():
        msg = unchecked[case]
        assert msg is not None and "`flux` must be a number" in msg, arg


@pytest.mark.parametrize(
    "case,match",
    [
        (
            unchecked_error(
                "em.beam_from_uv(np.array([1e9, 2e9]), np.array([1e9]))", "ValueError"
            ),
            "`u` and `v` differ in shape: (2,) and (1,)",
        ),
        (
            unchecked_error(
                "em.Objective([em.Flux(0.6), em.L1()], ['1', '2'])", "TypeError"
            ),
            "`weights` must be real numbers, got dtype <U1",
        ),
        (
            unchecked_error(
                "(em.Flux(0.6) + em.L1()).with_weights(['1', '2'])", "TypeError"
            ),
            "`weights` must be real numbers, got dtype <U1",
        ),
    ],
    ids=str,
)
def test_own_messages_without_the_type_checker(unchecked, case, match):
    """Arguments the suite's type checker refuses first: eqmodels' own message, as
    users (who run without it) see it."""
    msg = unchecked[case]
    assert msg is not None and match in msg, msg


def test_a_nan_pixel_gives_a_nan_value():
    """From a review: TV, both entropies and WeightedL1 returned finite values for
    an image with a NaN pixel (comparisons like `I > 0` are False for NaN, so the
    pixel counted as 0), hiding a broken image from reports."""
    rng = np.random.default_rng(0)
    image = rng.uniform(0.1, 1.0, GRID.shape)
    image[3, 5] = np.nan
    prior = np.full(GRID.shape, 0.5)
    regs = [
        em.TV(GRID),
        em.TSV(GRID),
        em.SimpleEntropy(prior),
        em.GullSkillingEntropy(prior),
        em.WeightedL1(prior),
        em.L1(),
    ]
    for reg in regs:
        # Under `jit`, as in a solve (outside it a NaN image is refused: issue 41).
        value = eqx.filter_jit(reg)(jnp.asarray(image))
        assert np.isnan(float(value)), type(reg).__name__


def test_entropy_of_a_faint_pixel_under_a_bright_prior():
    """From a review: with P = 10 and I = 1e-307, `I/P` is subnormal and XLA
    flushed it to 0: −inf and a NaN gradient. The numpy formula gives finite
    numbers."""
    prior = np.full(GRID.shape, 10.0)
    image = np.full(GRID.shape, 0.3)
    image[0, 0] = 1e-307
    for reg, ref in (
        (em.SimpleEntropy(prior), rr.simple),
        (em.GullSkillingEntropy(prior), rr.gull_skilling),
    ):
        value, grad = jax.value_and_grad(reg)(jnp.asarray(image))
        want, want_grad = ref(image, prior)
        assert_allclose(value, want, rtol=1e-12)
        assert_allclose(grad, want_grad, rtol=1e-12)


def test_float32_tv_gradient_at_faint_pixels():
    """From a review: float32 squares of differences below ~1e-19 flushed to 0, so
    faint pixels got a zero (or wrong-signed) TV gradient (errors up to 33 against
    a largest entry of 42). Differences within float32's normal range now keep
    their direction: the float32 gradient equals float64's."""
    grid = em.ImageGrid.from_fov(32, 128.0)
    xx, yy = grid.coords()
    s = em.uas_to_rad(8.0)
    image = np.exp(-(xx**2 + yy**2) / (2 * s**2))
    image = np.where(image > 1e-30, image, 1e-30)  # within float32's normal range
    tv = em.TV(grid)
    g32 = np.asarray(jax.grad(tv)(jnp.asarray(image, jnp.float32)), np.float64)
    g64 = np.asarray(jax.grad(tv)(jnp.asarray(image.astype(np.float32), jnp.float64)))
    assert np.abs(g32 - g64).max() <= 1e-5 * np.abs(g64).max()
    faint = image < 1e-19
    assert faint.sum() > 50 and np.all(np.isfinite(g32))


def test_prior_model_grid_and_negative_clip_floor():
    """From a review: an entropy whose prior was an image model on another grid
    (same shape, other pixel size) combined silently with terms on this grid;
    `TV + 3` raised Python's bare "unsupported operand"; a negative `clipfloor`
    with the log transform failed with a message that did not mention it."""
    other = em.ImageGrid(16, 16, em.uas_to_rad(4.2))
    prior = em.GaussianImage(other, 1.0, em.uas_to_rad(20.0))
    with pytest.raises(ValueError, match="different image grids"):
        em.SimpleEntropy(prior) + em.TV(GRID)
    same = em.GaussianImage(GRID, 1.0, em.uas_to_rad(20.0))
    assert float((em.SimpleEntropy(same) + em.TV(GRID))(same)) > 0
    assert isinstance(sum([em.TV(GRID), em.TSV(GRID)]), em.Objective)
    zeros = np.zeros(GRID.shape)
    zeros[4:8, 4:8] = 1.0
    with pytest.raises(ValueError, match="`clipfloor`=-1.0 frees pixels"):
        em.PixelImage.from_prior(zeros, GRID, clipfloor=-1.0)
    model = em.PixelImage.from_prior(zeros, GRID, clipfloor=-1.0, transform="identity")
    assert model().shape == GRID.shape


GAUSSIAN_MOMENTS_FLOAT32 = unchecked_script(
    """
import json
import jax, jax.numpy as jnp, equinox as eqx, numpy as np
import eqmodels as em
grid = em.ImageGrid.from_fov(64, 128.0)
fwhm = em.uas_to_rad(40.0)
img = em.GaussianImage(grid, 0.6, fwhm, x0=em.uas_to_rad(3.0))()
reg = em.GaussianMoments(grid, fwhm, 0.7 * fwhm, 0.4)
v, g = eqx.filter_jit(jax.value_and_grad(lambda i, t: t(i)))(img, reg)
sol = em.solve(em.Flux(0.6) + reg, em.PixelImage.from_image(img, grid), max_steps=5)
print(json.dumps({"value": float(v), "finite": bool(jnp.isfinite(g).all()),
                  "dtype": str(g.dtype), "solve": float(sol.value),
                  "image": np.asarray(img, np.float64).tolist()}))
"""
)


def test_gaussian_moments_in_float32_as_a_compiled_argument(unchecked):
    """From a review: in float32 with the term an argument of a compiled program
    (as `solve` and `survey` pass it), XLA folded the pixel-unit divisions into
    `(fwhm_major·fwhm_minor)² / p⁴`, whose numerator (~1e-39 rad⁴) is 0 in
    float32: the value and gradient were NaN. Now finite, and equal to the float64
    value to float32 accuracy."""
    out = unchecked[GAUSSIAN_MOMENTS_FLOAT32]
    assert out["dtype"] == "float32" and out["finite"]
    assert np.isfinite(out["solve"])
    grid = em.ImageGrid.from_fov(64, 128.0)
    fwhm = em.uas_to_rad(40.0)
    ref = em.GaussianMoments(grid, fwhm, 0.7 * fwhm, 0.4)(jnp.asarray(out["image"]))
    assert_allclose(out["value"], ref, rtol=1e-4)


FAINT_FLOAT32 = unchecked_script(
    """
import json, numpy as np, jax, jax.numpy as jnp, eqmodels as em
out = {}
grid = em.ImageGrid.from_fov(64, 128.0)
model = em.GaussianImage(grid, 0.6, em.uas_to_rad(15.0))
img = jnp.full(grid.shape, 0.6 / 4096, jnp.float32)
v, g = jax.value_and_grad(em.SimpleEntropy(model, flux=0.6, normalise=True))(img)
out["simple"] = [float(v), np.asarray(g, np.float64).tolist(), int(jnp.sum(model() == 0))]
P = np.full((8, 8), 1e-3); P[2, 2] = 1e-25
reg = em.WeightedL1(P, eps=0.0)
out["l1w"] = [float(reg(jnp.asarray(P, jnp.float32))),
              float(reg(jnp.asarray(P, jnp.float32).at[2, 2].set(1e-3)))]
g8 = em.ImageGrid.from_fov(8, 16.0)
I8 = jnp.zeros((8, 8), jnp.float32).at[3, 3].set(1e-21)
v, g = jax.value_and_grad(em.TV(g8, eps=1e-50))(I8)
out["tv"] = [float(v), np.asarray(g, np.float64).tolist()]
xx, yy = np.meshgrid(np.arange(64) - 31.5, np.arange(64) - 31.5)
Pg = np.exp(-0.5 * (xx**2 + yy**2) / 8.5**2); Pg *= 0.6 / Pg.sum()
gs = []
for seed in range(4):
    rng = np.random.default_rng(seed)
    I32 = (Pg * (1 + 1e-3 * rng.standard_normal(Pg.shape))).astype(np.float32)
    gs.append([float(em.GullSkillingEntropy(Pg)(jnp.asarray(I32))), I32.tolist()])
out["gs"] = gs
print(json.dumps(out))
"""
)


def test_float32_faint_priors_and_pixels_and_images_near_the_prior(unchecked):
    """From a review, in float32 (x64 off) against the float64 references: an
    entropy whose prior is a narrow `GaussianImage` (its float32 tails underflow
    to 0) was `+inf` with infinite gradients; `WeightedL1(eps=0)` with a prior
    pixel of 1e-25 (its square underflows) was NaN or inf; `TV` with an `ε`
    below float32's range lost a faint pixel's value and gradient; the
    Gull-Skilling value near `I = P` lost up to 2 % to cancellation."""
    out = unchecked[FAINT_FLOAT32]
    grid = em.ImageGrid.from_fov(64, 128.0)
    prior = np.asarray(em.GaussianImage(grid, 0.6, em.uas_to_rad(15.0))(), np.float64)
    value, grad = rr.simple(np.full(grid.shape, 0.6 / 4096), prior, norm=0.6)
    assert out["simple"][2] > 0  # the float32 image does underflow
    assert_allclose(out["simple"][0], value, rtol=1e-5)
    assert_allclose(np.array(out["simple"][1]), grad, rtol=1e-5)
    p = np.full((8, 8), 1e-3)
    p[2, 2] = 1e-25
    assert_allclose(out["l1w"][0], rr.l1w(p, p, eps=0.0)[0], rtol=1e-6)
    other = p.copy()
    other[2, 2] = 1e-3
    assert_allclose(out["l1w"][1], rr.l1w(other, p, eps=0.0)[0], rtol=1e-6)
    faint = np.zeros((8, 8))
    faint[3, 3] = 1e-21
    # ε = 1e-50 is 0 in float32 (the float64 reference's 64·1e-25 is not
    # there); where a pixel's differences are both 0 its derivative is 0.
    dr, dc = rr._diffs(faint)
    s_ = np.hypot(dr, dc)
    live = s_ > 0
    value = s_.sum()
    grad = rr._adjoint_diffs(
        np.where(live, dr / np.where(live, s_, 1), 0),
        np.where(live, dc / np.where(live, s_, 1), 0),
    )
    assert_allclose(out["tv"][0], value, rtol=1e-6)
    assert_allclose(np.array(out["tv"][1]), grad, rtol=1e-6)
    xx, yy = np.meshgrid(np.arange(64) - 31.5, np.arange(64) - 31.5)
    pg = np.exp(-0.5 * (xx**2 + yy**2) / 8.5**2)
    pg *= 0.6 / pg.sum()
    for got, image in out["gs"]:
        # float32 near the minimum: the terms cancel to (I − P)²/(2P), 1e-6 of
        # the flux; the float32 image itself is exact in float64.
        assert_allclose(got, rr.gull_skilling(np.array(image), pg)[0], rtol=5e-3)
