"""The one parametrised suite every data term and regularizer goes through.

Each entry of `DATA_TERMS` / `REGULARIZERS` builds a term and names its plain-numpy
reference (tests/reference/); every test below runs on every entry, so a new term
added to a list gets all of it: value and gradient vs numpy (rtol 1e-12), central
finite differences, jit, vmap over images, image models, and for data terms the
three forward models (DirectFT / SeparableFT exact, NUFFT at eps 1e-12 within
1e-10), residuals, and zero-weight padding rows (exactly 0, finite gradients, even
where the model visibility is exactly 0).
"""

import dataclasses
import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
import eqmodels.testing as emt
from tests.helpers import assert_allclose
from tests.reference import regularizers as rr, terms as rt


GRID = em.ImageGrid(10, 12, em.uas_to_rad(4.0))
FORWARD_RTOL = {"direct": 1e-12, "separable": 1e-12, "nufft": 1e-10}
FLUX = 1.3
BEAM = 5.0 * GRID.psize


def positive_image(seed=0, scale=1.0):
    rng = np.random.default_rng(100 + seed)
    return scale * FLUX * rng.uniform(0.2, 1.0, GRID.shape) / (0.6 * GRID.npix)


@functools.cache
def products():
    truth = positive_image(seed=-1)
    return rt.synthetic_closures(*GRID.shape, GRID.psize, truth)


@functools.cache
def legs(key):
    u, v, _, _ = products()[key]
    return rt.leg_matrices(*GRID.shape, GRID.psize, u, v)


@dataclasses.dataclass(frozen=True)
class DataCase:
    name: str
    cls: type
    key: str  # product key in `synthetic_closures`
    field: str  # the term's observed-value field
    ref: Callable

    def build(self, forward="direct"):
        u, v, value, sigma = products()[self.key]
        fwd = em.make_forward(
            forward, GRID, u, v, **({"eps": 1e-12} if forward == "nufft" else {})
        )
        return self.cls(fwd, value, sigma)

    def reference(self, img):
        _, _, value, sigma = products()[self.key]
        return self.ref(legs(self.key), img, value, sigma)

    def __str__(self):
        return self.name


@dataclasses.dataclass(frozen=True)
class RegCase:
    name: str
    make: Callable
    ref: Callable

    def build(self, forward=None):
        return self.make()

    def reference(self, img):
        return self.ref(np.asarray(img))

    def __str__(self):
        return self.name


DATA_TERMS = [
    DataCase("vis", em.VisChi2, "vis", "vis", rt.vis_chi2),
    DataCase("amp", em.AmpChi2, "amp", "amp", rt.amp_chi2),
    DataCase(
        "bispectrum", em.BispectrumChi2, "bispectrum", "bispectrum", rt.bispectrum_chi2
    ),
    DataCase("cphase", em.ClosurePhaseChi2, "cphase", "cphase", rt.cphase_chi2),
    DataCase("logcamp", em.LogClosureAmpChi2, "logcamp", "logcamp", rt.logcamp_chi2),
    DataCase("camp", em.ClosureAmpChi2, "camp", "camp", rt.camp_chi2),
]

PRIOR = positive_image(seed=-2, scale=0.9)
P = GRID.psize
NORM_TV = FLUX * P / BEAM
NORM_TSV = P**4 * FLUX**2 / BEAM**4
NORM_B2F2 = BEAM**2 * FLUX**2
NORM_GAUSS = dict(fwhm_major=6 * P, fwhm_minor=4 * P, angle=0.7)
NORMED = dict(flux=FLUX, beam=BEAM, normalise=True)

REGULARIZERS = [
    RegCase("simple", lambda: em.SimpleEntropy(PRIOR), lambda x: rr.simple(x, PRIOR)),
    RegCase(
        "simple_norm",
        lambda: em.SimpleEntropy(PRIOR, flux=FLUX, normalise=True),
        lambda x: rr.simple(x, PRIOR, FLUX),
    ),
    RegCase(
        "gs",
        lambda: em.GullSkillingEntropy(PRIOR),
        lambda x: rr.gull_skilling(x, PRIOR),
    ),
    RegCase(
        "gs_norm",
        lambda: em.GullSkillingEntropy(PRIOR, flux=FLUX, normalise=True),
        lambda x: rr.gull_skilling(x, PRIOR, FLUX),
    ),
    RegCase("l1", lambda: em.L1(), lambda x: rr.l1(x)),
    RegCase(
        "l1_norm", lambda: em.L1(flux=FLUX, normalise=True), lambda x: rr.l1(x, FLUX)
    ),
    RegCase("l1w", lambda: em.WeightedL1(PRIOR), lambda x: rr.l1w(x, PRIOR)),
    RegCase("tv", lambda: em.TV(GRID), lambda x: rr.tv(x)),
    RegCase(
        "tv_eps_norm",
        lambda: em.TV(GRID, eps=1e-9, **NORMED),
        lambda x: rr.tv(x, 1e-9, NORM_TV),
    ),
    RegCase("tsv", lambda: em.TSV(GRID), lambda x: rr.tsv(x)),
    RegCase("tsv_norm", lambda: em.TSV(GRID, **NORMED), lambda x: rr.tsv(x, NORM_TSV)),
    RegCase("flux", lambda: em.Flux(FLUX), lambda x: rr.flux(x, FLUX)),
    RegCase(
        "flux_norm",
        lambda: em.Flux(FLUX, normalise=True),
        lambda x: rr.flux(x, FLUX, FLUX**2),
    ),
    RegCase("centroid", lambda: em.Centroid(GRID), lambda x: rr.centroid(x, P)),
    RegCase(
        "centroid_norm",
        lambda: em.Centroid(GRID, **NORMED),
        lambda x: rr.centroid(x, P, NORM_B2F2),
    ),
    RegCase("compact", lambda: em.Compactness(GRID), lambda x: rr.compact(x, P)),
    RegCase(
        "compact_norm",
        lambda: em.Compactness(GRID, **NORMED),
        lambda x: rr.compact(x, P, FLUX, FLUX * BEAM**2),
    ),
    RegCase("compact2", lambda: em.Compactness2(GRID), lambda x: rr.compact2(x, P)),
    RegCase(
        "compact2_norm",
        lambda: em.Compactness2(GRID, **NORMED),
        lambda x: rr.compact2(x, P, NORM_B2F2),
    ),
    RegCase(
        "gauss_moments",
        lambda: em.GaussianMoments(GRID, **NORM_GAUSS),
        lambda x: rr.gaussian_moments(x, P, **NORM_GAUSS),
    ),
]

ALL = DATA_TERMS + REGULARIZERS
IMAGES = np.stack([positive_image(seed=s) for s in range(3)])


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
