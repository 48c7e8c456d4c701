"""VisChi2: value and gradient vs numpy, finite differences, jit, vmap, padding."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose, check_grad_fd
from tests.problems import FORWARD_RTOL, FORWARDS, random_image, random_points
from tests.reference.numpy_ft import dft_matrix, vis_chi2


def problem(name, shape=(14, 16), n=45, seed=0):
    grid = em.ImageGrid(*shape, em.uas_to_rad(3.0))
    u, v = random_points(grid, n, seed=seed)
    rng = np.random.default_rng(seed + 10)
    truth = random_image(grid, seed=seed + 1)
    a = dft_matrix(*shape, grid.psize, u, v)
    sigma = rng.uniform(0.5, 2.0, n) * 1e-3
    vis = a @ truth.ravel() + sigma * (
        rng.standard_normal(n) + 1j * rng.standard_normal(n)
    )
    term = em.VisChi2(FORWARDS[name](grid, u, v), vis, sigma)
    img = random_image(grid, seed=seed + 2)
    return term, a, vis, sigma, img


@pytest.mark.parametrize("name", FORWARDS)
def test_value_and_grad_match_numpy(name):
    term, a, vis, sigma, img = problem(name)
    ref_val, ref_grad = vis_chi2(a, img, vis, sigma)
    val, grad = jax.value_and_grad(term)(jnp.asarray(img))
    rtol = FORWARD_RTOL[name]
    assert_allclose(val, ref_val, rtol=rtol)
    assert_allclose(grad, ref_grad, rtol=rtol)
    # Residual form: chi² = Σ r².
    r = term.residuals(jnp.asarray(img))
    assert r.shape == (2 * vis.size,)
    assert_allclose(jnp.sum(r**2), ref_val, rtol=rtol)


@pytest.mark.parametrize("name", FORWARDS)
def test_grad_matches_finite_differences(name):
    term, _, _, _, img = problem(name, shape=(8, 9), n=20)
    check_grad_fd(term, img, rtol=1e-7)


@pytest.mark.parametrize("name", FORWARDS)
def test_jit_vmap_and_image_models(name):
    term, a, vis, sigma, img = problem(name)
    rtol = FORWARD_RTOL[name]
    imgs = np.stack([img, 1.5 * img, 0.5 * img])
    refs = [vis_chi2(a, x, vis, sigma) for x in imgs]
    vg = eqx.filter_jit(eqx.filter_value_and_grad(lambda x, t: t(x)))
    val, grad = vg(jnp.asarray(img), term)
    assert_allclose(val, refs[0][0], rtol=rtol)
    assert_allclose(grad, refs[0][1], rtol=rtol)
    # (compiled: op by op, each operation of the batched program compiles alone)
    vals, grads = jax.jit(jax.vmap(jax.value_and_grad(term)))(jnp.asarray(imgs))
    assert_allclose(vals, np.array([r[0] for r in refs]), rtol=rtol)
    assert_allclose(grads, np.stack([r[1] for r in refs]), rtol=rtol)
    # The term accepts an image model; the gradient w.r.t. log-pixels is the chain rule.
    model = em.PixelImage.from_image(img, term.forward.grid)
    g_model = eqx.filter_jit(eqx.filter_grad(lambda m, t: t(m)))(model, term)
    assert_allclose(g_model.params, (refs[0][1] * img).ravel(), rtol=rtol)


@pytest.mark.parametrize("name", FORWARDS)
def test_zero_weight_rows_contribute_exactly_zero(name):
    term, a, vis, sigma, img = problem(name)
    n = vis.size
    # Pad with rows of weight exactly 0 and garbage (finite) values; keep n_rows.
    grid = term.forward.grid
    u_pad, v_pad = random_points(grid, 7, seed=99)
    fwd = term.forward.at(
        np.concatenate([np.asarray(term.forward.u), u_pad]),
        np.concatenate([np.asarray(term.forward.v), v_pad]),
    )
    padded = eqx.tree_at(
        lambda t: (t.forward, t.vis, t.weight),
        term,
        (
            fwd,
            jnp.concatenate([term.vis, jnp.full(7, 1e3 + 5e2j)]),
            jnp.concatenate([term.weight, jnp.zeros(7)]),
        ),
    )
    assert padded.n_rows == n
    x = jnp.asarray(img)
    # The value is identical to the last bit when only zero rows are added
    # (each padded contribution is exactly 0.0).
    contrib = padded.weight * jnp.abs(padded.forward(x) - padded.vis) ** 2
    assert np.all(np.asarray(contrib[n:]) == 0.0)
    # (value and gradient from one compiled program per term, not op by op)
    value_and_grad = eqx.filter_jit(jax.value_and_grad(lambda x, t: t(x)))
    (val_padded, grad_padded), (val, grad) = (
        value_and_grad(x, t) for t in (padded, term)
    )
    assert_allclose(val_padded, val, rtol=1e-15)
    assert_allclose(grad_padded, grad, rtol=1e-13)


def test_float32_term():
    grid = em.ImageGrid(12, 12, em.uas_to_rad(3.0))
    u, v = random_points(grid, 30)
    img = random_image(grid)
    a = dft_matrix(12, 12, grid.psize, u, v)
    vis = a @ (1.2 * img).ravel()
    sigma = np.full(30, 1e-3)
    ref_val, ref_grad = vis_chi2(a, img, vis, sigma)
    for fwd in (
        em.DirectFT(grid, u, v, dtype=jnp.float32),
        em.NUFFT(grid, u, v, dtype=jnp.float32),
    ):
        term = em.VisChi2(fwd, vis, sigma)
        val, grad = jax.jit(jax.value_and_grad(term))(jnp.asarray(img, jnp.float32))
        assert val.dtype == jnp.float32 and grad.dtype == jnp.float32
        assert_allclose(val, ref_val, rtol=1e-4)
        assert_allclose(grad, ref_grad, rtol=1e-4)
