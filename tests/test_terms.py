"""The one parametrised suite every data term and regularizer goes through.

Each entry of `DATA_TERMS` / `REGULARIZERS` builds a term and names its plain-numpy
reference (tests/reference/); every test below runs on every entry, so a new term
added to a list gets all of it: value and gradient vs numpy (rtol 1e-12), central
finite differences, jit, vmap over images, image models, and for data terms the
three forward models (DirectFT / SeparableFT exact, NUFFT at eps 1e-12 within
1e-10), residuals, and zero-weight padding rows (exactly 0, finite gradients, even
where the model visibility is exactly 0).
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
import eqmodels.testing as emt
from tests.helpers import assert_allclose
from tests.problems import FORWARD_RTOL
from tests.problems.terms import ALL, DATA_TERMS, GRID, IMAGES, positive_image, products


# Compiled once per term structure; the term is an argument, never closed over (as
# in a training loop).
@eqx.filter_jit
def _batch_value_and_grad(xs, term):
    return jax.vmap(jax.value_and_grad(lambda x: term(x)))(xs)


@functools.cache
def batch_result(case):
    """Values and gradients of `case`'s term on `IMAGES` (jit + vmap)."""
    vals, grads = _batch_value_and_grad(jnp.asarray(IMAGES), case.build())
    return np.asarray(vals), np.asarray(grads)


@pytest.mark.parametrize("case", ALL, ids=str)
def test_value_and_grad_match_numpy_under_jit_and_vmap(case):
    vals, grads = batch_result(case)
    for img, val, grad in zip(IMAGES, vals, grads):
        ref_val, ref_grad = case.reference(img)
        emt.assert_close(val, ref_val, name=f"{case} value")  # rtol 1e-12
        emt.assert_close(grad, ref_grad, name=f"{case} gradient")


@pytest.mark.parametrize("case", ALL, ids=str)
def test_grad_matches_finite_differences(case):
    # The gradient computed under jit + vmap, against central differences.
    emt.check_grad_fd(case.build(), IMAGES[0], grad=batch_result(case)[1][0])


@pytest.mark.parametrize("case", ALL, ids=str)
def test_image_model_input(case):
    """A term takes an image model: the gradient w.r.t. log-pixels is the chain
    rule of the gradient w.r.t. the image."""
    model = em.PixelImage.from_image(IMAGES[0], GRID)
    g = eqx.filter_jit(eqx.filter_grad(lambda m, t: t(m)))(model, case.build())
    assert_allclose(
        g.params, (batch_result(case)[1][0] * IMAGES[0]).ravel(), rtol=1e-12
    )


@pytest.mark.parametrize("forward", ["separable", "nufft"])
@pytest.mark.parametrize("case", DATA_TERMS, ids=str)
def test_data_terms_with_other_forward_models(case, forward):
    """SeparableFT matches numpy (and DirectFT) to 1e-12, the NUFFT (eps 1e-12) to
    1e-10; residuals square-sum to the value."""
    term = case.build(forward)
    img = IMAGES[1]
    ref_val, ref_grad = case.reference(img)

    @jax.jit
    def run(x):
        return jax.value_and_grad(term)(x), term.residuals(x)

    (val, grad), r = run(jnp.asarray(img))
    rtol = FORWARD_RTOL[forward]
    emt.assert_close(val, ref_val, rtol=rtol, name=f"{case} value ({forward})")
    emt.assert_close(grad, ref_grad, rtol=rtol, name=f"{case} gradient ({forward})")
    assert_allclose(grad, batch_result(case)[1][1], rtol=rtol)  # vs DirectFT
    assert r.ndim == 1 and r.dtype == jnp.float64
    assert_allclose(jnp.sum(r * r), ref_val, rtol=rtol)
    assert term.n_rows == products()[case.key][2].size


def _pad(term, n_pad, *, zero_vis, seed=7):
    """`term` with `n_pad` extra rows of weight exactly 0 and garbage values; with
    `zero_vis` the padded legs' model visibilities are exactly 0 (their DFT
    matrix rows zeroed)."""
    fwd = term.forward
    u, v = np.asarray(fwd.u), np.asarray(fwd.v)
    rng = np.random.default_rng(seed)
    lim = 0.45 / GRID.psize
    shape = (n_pad, *u.shape[1:])
    fwd2 = fwd.at(
        np.concatenate([u, rng.uniform(-lim, lim, shape)]),
        np.concatenate([v, rng.uniform(-lim, lim, shape)]),
    )
    n_legs = u.size
    if zero_vis:
        if isinstance(fwd2, em.DirectFT):
            fwd2 = eqx.tree_at(
                lambda f: (f.a_re, f.a_im),
                fwd2,
                (fwd2.a_re.at[n_legs:].set(0.0), fwd2.a_im.at[n_legs:].set(0.0)),
            )
        else:
            raise ValueError("cannot zero NUFFT visibilities")
    values = getattr(term, _FIELD[type(term)])
    garbage = jnp.full((n_pad,), 3.0 + (2.0j if jnp.iscomplexobj(values) else 0.0))
    return eqx.tree_at(
        lambda t: (t.forward, getattr(t, _FIELD[type(t)]), t.weight),
        term,
        (
            fwd2,
            jnp.concatenate([values, garbage.astype(values.dtype)]),
            jnp.concatenate([term.weight, jnp.zeros(n_pad, term.weight.dtype)]),
        ),
    )


_FIELD = {c.cls: c.field for c in DATA_TERMS}


@pytest.mark.parametrize("forward,zero_vis", [("direct", True), ("nufft", False)])
@pytest.mark.parametrize("case", DATA_TERMS, ids=str)
def test_zero_weight_rows_contribute_exactly_zero(case, forward, zero_vis):
    term = case.build(forward)
    n = term.n_rows
    padded = _pad(term, 5, zero_vis=zero_vis)
    assert padded.n_rows == n
    x = jnp.asarray(positive_image(seed=3))

    @jax.jit
    def run(x):
        return (
            padded.forward(x),
            padded.residuals(x),
            jax.value_and_grad(padded)(x),
            jax.value_and_grad(term)(x),
            jax.jacrev(padded.residuals)(x),
        )

    out = jax.tree.map(np.asarray, run(x))
    vis, r, (val_pad, g_pad), (val, g), jac = out
    if zero_vis:
        assert np.all(vis[n:] == 0.0)
    # Every padded residual is exactly 0.0 ...
    comps = r.size // (n + 5)
    assert r.size == comps * (n + 5)
    assert np.all(r.reshape(comps, n + 5)[:, n:] == 0.0)
    # ... so the value is the unpadded one and the gradient is finite and equal.
    assert_allclose(val_pad, val, rtol=1e-14)
    assert np.all(np.isfinite(g_pad))
    assert_allclose(g_pad, g, rtol=1e-13)
    assert np.all(np.isfinite(jac))
    assert np.all(jac.reshape(comps, n + 5, -1)[:, n:] == 0.0)
