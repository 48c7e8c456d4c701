"""eht-imaging as an optional oracle: every data term's chi² and gradient, and every
regularizer's penalty and gradient, equal eht-imaging's `ttype='direct'` functions
fed the same (u, v), data, prior and image (rtol 1e-9).

eht-imaging (GPLv3) is only *called* here, never copied. Its regularizers return
`S` to maximise; ours return the penalty `−S`. Deliberate differences, each
checked explicitly below: eht-imaging's centroid (`'cm'`) measures from pixel
`(ny/2, nx/2)` instead of the phase centre; its TV with `ε = 0` has NaN gradients
on flat patches (ours: 0); closure phases are in degrees there, radians here.
"""

import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems.terms import BEAM, FLUX


pytestmark = pytest.mark.slow  # the eht-imaging oracle


ehtim = pytest.importorskip("ehtim")
with contextlib.redirect_stdout(io.StringIO()):
    import ehtim.imaging.imager_utils as iu
    import ehtim.observing.obs_helpers as oh

# eht-imaging's gauss regularizer assumes a square grid.
GRID = em.ImageGrid(12, 12, em.uas_to_rad(4.0))
RTOL = 1e-9


def _image(seed=0):
    rng = np.random.default_rng(seed)
    return FLUX * rng.uniform(0.2, 1.0, GRID.shape) / (0.6 * GRID.npix)


def _products():
    from tests.reference.terms import synthetic_closures

    return synthetic_closures(*GRID.shape, GRID.psize, _image(99), seed=3)


def _matrices(u, v):
    u, v = np.asarray(u), np.asarray(v)
    cols = [u] if u.ndim == 1 else [u[:, i] for i in range(u.shape[1])]
    vcols = [v] if v.ndim == 1 else [v[:, i] for i in range(v.shape[1])]
    return [
        oh.ftmatrix(GRID.psize, GRID.nx, GRID.ny, np.stack([a, b], axis=1))
        for a, b in zip(cols, vcols)
    ]


DATA = [
    ("vis", em.VisChi2, iu.chisq_vis, iu.chisqgrad_vis, lambda x: x),
    ("amp", em.AmpChi2, iu.chisq_amp, iu.chisqgrad_amp, lambda x: x),
    ("bispectrum", em.BispectrumChi2, iu.chisq_bs, iu.chisqgrad_bs, lambda x: x),
    ("cphase", em.ClosurePhaseChi2, iu.chisq_cphase, iu.chisqgrad_cphase, np.rad2deg),
    ("camp", em.ClosureAmpChi2, iu.chisq_camp, iu.chisqgrad_camp, lambda x: x),
    (
        "logcamp",
        em.LogClosureAmpChi2,
        iu.chisq_logcamp,
        iu.chisqgrad_logcamp,
        lambda x: x,
    ),
]


@pytest.mark.parametrize("key,cls,chisq,chisqgrad,unit", DATA, ids=[d[0] for d in DATA])
def test_data_terms_equal_ehtim(key, cls, chisq, chisqgrad, unit):
    u, v, value, sigma = _products()[key]
    mats = _matrices(u, v)
    mats = mats[0] if u.ndim == 1 else mats
    img = _image(1)
    term = cls(em.DirectFT(GRID, u, v), value, sigma)
    val, grad = jax.jit(jax.value_and_grad(term))(jnp.asarray(img))
    imvec = img.ravel()
    ref = chisq(imvec, mats, unit(value), unit(sigma))
    ref_grad = chisqgrad(imvec, mats, unit(value), unit(sigma))
    assert_allclose(val, ref, rtol=RTOL)
    assert_allclose(np.asarray(grad).ravel(), ref_grad, rtol=RTOL)


P = GRID.psize


def _prior():
    rng = np.random.default_rng(5)
    return FLUX * rng.uniform(0.2, 1.0, GRID.shape) / (0.7 * GRID.npix)


def _reg_cases():
    prior = _prior()
    pv = prior.ravel()
    nx, ny = GRID.nx, GRID.ny
    out = []
    for norm in (False, True):
        kw = dict(flux=FLUX, beam=BEAM, normalise=norm)
        out += [
            (
                f"simple{norm}",
                em.SimpleEntropy(prior, flux=FLUX, normalise=norm),
                lambda x, n=norm: iu.ssimple(x, pv, FLUX, n),
                lambda x, n=norm: iu.ssimplegrad(x, pv, FLUX, n),
            ),
            (
                f"gs{norm}",
                em.GullSkillingEntropy(prior, flux=FLUX, normalise=norm),
                lambda x, n=norm: iu.sgs(x, pv, FLUX, n),
                lambda x, n=norm: iu.sgsgrad(x, pv, FLUX, n),
            ),
            (
                f"l1{norm}",
                em.L1(flux=FLUX, normalise=norm),
                lambda x, n=norm: iu.sl1(x, pv, FLUX, n),
                lambda x, n=norm: iu.sl1grad(x, pv, FLUX, n),
            ),
            (
                f"tv{norm}",
                em.TV(GRID, **kw),
                lambda x, n=norm: iu.stv(x, nx, ny, P, FLUX, n, BEAM),
                lambda x, n=norm: iu.stvgrad(x, nx, ny, P, FLUX, n, BEAM),
            ),
            (
                f"tv_eps{norm}",
                em.TV(GRID, eps=1e-8, **kw),
                lambda x, n=norm: iu.stv(x, nx, ny, P, FLUX, n, BEAM, 1e-8),
                lambda x, n=norm: iu.stvgrad(x, nx, ny, P, FLUX, n, BEAM, 1e-8),
            ),
            (
                f"tv2{norm}",
                em.TSV(GRID, **kw),
                lambda x, n=norm: iu.stv2(x, nx, ny, P, FLUX, n, BEAM),
                lambda x, n=norm: iu.stv2grad(x, nx, ny, P, FLUX, n, BEAM),
            ),
            (
                f"flux{norm}",
                em.Flux(FLUX, normalise=norm),
                lambda x, n=norm: iu.sflux(x, pv, FLUX, n),
                lambda x, n=norm: iu.sfluxgrad(x, pv, FLUX, n),
            ),
            (
                f"compact{norm}",
                em.Compactness(GRID, **kw),
                lambda x, n=norm: iu.scompact(x, nx, ny, P, FLUX, n, BEAM),
                lambda x, n=norm: iu.scompactgrad(x, nx, ny, P, FLUX, n, BEAM),
            ),
            (
                f"compact2{norm}",
                em.Compactness2(GRID, **kw),
                lambda x, n=norm: iu.scompact2(x, nx, ny, P, FLUX, n, BEAM),
                lambda x, n=norm: iu.scompact2grad(x, nx, ny, P, FLUX, n, BEAM),
            ),
        ]
    out = [c for c in out if not c[0].startswith("compact")]
    out += [
        (
            "l1w",
            em.WeightedL1(prior),
            lambda x: iu.sl1w(x, pv, FLUX, False),
            lambda x: iu.sl1wgrad(x, pv, FLUX, False),
        ),
    ]
    return out


REGS = _reg_cases()


@pytest.mark.parametrize("name,reg,ref,ref_grad", REGS, ids=[r[0] for r in REGS])
def test_regularizers_equal_ehtim(name, reg, ref, ref_grad):
    img = _image(2)
    val, grad = jax.jit(jax.value_and_grad(reg))(jnp.asarray(img))
    imvec = img.ravel()
    # eht-imaging returns S (to maximise); ours is the penalty −S.
    assert_allclose(val, -ref(imvec), rtol=RTOL)
    assert_allclose(np.asarray(grad).ravel(), -ref_grad(imvec), rtol=RTOL)


def test_centroid_differs_from_ehtim_only_by_its_origin():
    """eht-imaging's `'cm'` puts the origin at pixel (ny/2, nx/2), half a pixel
    from the phase centre that the forward model (and ours) uses."""
    from tests.reference.regularizers import centroid

    img = _image(3)
    norm = BEAM**2 * FLUX**2
    shifted, shifted_grad = centroid(img, P, norm, origin_shift=(0.5, 0.5))
    mask = np.ones(GRID.npix, bool)
    ref = -iu.scm(img.ravel(), GRID.nx, GRID.ny, P, FLUX, mask, True, BEAM)
    ref_grad = -iu.scmgrad(img.ravel(), GRID.nx, GRID.ny, P, FLUX, mask, True, BEAM)
    assert_allclose(shifted, ref, rtol=RTOL)
    assert_allclose(shifted_grad.ravel(), ref_grad, rtol=RTOL)
    ours = em.Centroid(GRID, flux=FLUX, beam=BEAM, normalise=True)(jnp.asarray(img))
    assert not np.isclose(float(ours), ref, rtol=1e-3)


def test_tv_on_a_flat_image_ehtim_nan_ours_finite():
    flat = np.full(GRID.shape, FLUX / GRID.npix)
    with np.errstate(invalid="ignore", divide="ignore"):
        ref_grad = iu.stvgrad(flat.ravel(), GRID.nx, GRID.ny, P, FLUX, True, BEAM)
    assert np.isnan(ref_grad).any()
    tv = em.TV(GRID, flux=FLUX, beam=BEAM, normalise=True)
    val, grad = jax.value_and_grad(tv)(jnp.asarray(flat))
    assert np.all(np.isfinite(np.asarray(grad)))
    assert_allclose(
        val, -iu.stv(flat.ravel(), GRID.nx, GRID.ny, P, FLUX, True, BEAM), rtol=RTOL
    )


def _compact_cases():
    nx, ny = GRID.nx, GRID.ny
    out = []
    for norm in (False, True):
        out.append(
            (
                f"compact{norm}",
                em.Compactness(GRID, flux=FLUX, beam=BEAM, normalise=norm),
                lambda x, n=norm: iu.scompact(x, nx, ny, P, FLUX, n, BEAM),
                lambda x, n=norm: iu.scompactgrad(x, nx, ny, P, FLUX, n, BEAM),
            )
        )
    g = (6 * P, 4 * P, 0.7)
    out.append(
        (
            "rgauss",
            em.GaussianMoments(GRID, *g),
            lambda x: iu.sgauss(x, nx, ny, P, *g),
            lambda x: iu.sgauss_grad(x, nx, ny, P, *g),
        )
    )
    return out


MOMENTS = _compact_cases()


@pytest.mark.parametrize("name,reg,ref,ref_grad", MOMENTS, ids=[r[0] for r in MOMENTS])
def test_moment_regularizers_equal_ehtim_values(name, reg, ref, ref_grad):
    """Values equal eht-imaging's. Its gradients of `'compact'` and `'rgauss'` do
    not match finite differences of its own values (checked here), ours do (and
    match the hand-derived numpy reference in tests/test_terms.py)."""
    img = _image(2)
    imvec = img.ravel()
    val, grad = jax.jit(jax.value_and_grad(reg))(jnp.asarray(img))
    assert_allclose(val, -ref(imvec), rtol=RTOL)
    d = np.random.default_rng(0).standard_normal(GRID.npix)
    h = 1e-6 * np.max(imvec)
    fd = -(ref(imvec + h * d) - ref(imvec - h * d)) / (2 * h)
    assert_allclose(np.sum(np.asarray(grad).ravel() * d), fd, rtol=1e-6)
    assert abs(-np.sum(ref_grad(imvec) * d) - fd) > 1e-5 * abs(fd)
