"""eht-imaging as the oracle of the multi-frequency model and the spectral
regularizers: `MultiFrequencyImage.at(ν)` equals `Image.get_image_mf(ν)` (Stokes I)
and the imager's `image_at_freq` (polarization: `(I, ρ, φ, ψ)` with `ρ = m'₀`, its
dimensionless `rm = 2 RM c²/ν₀²`); our gradient w.r.t. `(I₀, α, β)` equals its
`mf_all_grads_chain`; `SpectralL2` / `SpectralTV` equal `regularizer_mf` and
`regularizergrad_mf` (`l2_alpha`, `tv_alpha`, `l2_beta`, `tv_beta`: the penalty to
minimise, as ours), with and without `norm_reg`. eht-imaging (GPLv3) is only called here, never copied.
"""

import contextlib
import io

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose, quiet


pytestmark = pytest.mark.slow  # the eht-imaging oracle

ehtim = pytest.importorskip("ehtim")
with contextlib.redirect_stdout(io.StringIO()):
    import ehtim.imaging.multifreq_imager_utils as mfu
    import ehtim.imaging.pol_imager_utils as piu

# ny != nx: eht-imaging's (xdim, ydim) order and row orientation are checked.
GRID = em.ImageGrid(10, 12, em.uas_to_rad(4.0))
NU0 = 228.0e9
C = 299_792_458.0
RTOL = 1e-9


class StokesArray(em.AbstractPolImageModel):
    grid: em.ImageGrid
    stokes: jax.Array

    def __call__(self):
        return self.stokes


def _maps(seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.uniform(1e-3, 2e-2, GRID.shape),
        rng.normal(0, 1.0, GRID.shape),
        rng.normal(0, 0.5, GRID.shape),
    )


def _model(i0, a, b, **kw):
    base = em.PixelImage(GRID, i0, transform="identity")
    return em.MultiFrequencyImage(base, NU0, a, b, **kw)


def _ehtim_image(i0, a, b):
    im = ehtim.image.Image(
        i0, GRID.psize, 187.7, 12.39, rf=NU0, source="M87", polrep="stokes"
    )
    im.specvec = a.reshape(-1)
    im.curvvec = b.reshape(-1)
    return im


@pytest.mark.parametrize("freq", [213.071e9, 229.071e9, 345e9])
def test_image_at_frequency_equals_get_image_mf(freq):
    i0, a, b = _maps()
    with quiet():
        theirs = _ehtim_image(i0, a, b).get_image_mf(freq)
    ours = _model(i0, a, b).at(freq)
    assert_allclose(ours, theirs.imvec.reshape(GRID.shape), rtol=RTOL)
    # And the imager's own function.
    x = np.log(freq / NU0)
    out = mfu.image_at_freq((i0.ravel(), a.ravel(), b.ravel()), x)
    assert_allclose(ours, out.reshape(GRID.shape), rtol=RTOL)


def test_gradient_equals_mf_all_grads_chain():
    i0, a, b = _maps()
    w = np.random.default_rng(2).normal(size=GRID.shape)
    freq = 213.071e9
    g = eqx.filter_grad(lambda m: jnp.sum(jnp.asarray(w) * m.at(freq)))(
        _model(i0, a, b)
    )
    x = np.log(freq / NU0)
    cur = mfu.image_at_freq((i0.ravel(), a.ravel(), b.ravel()), x)
    gi, ga, gb = mfu.mf_all_grads_chain(
        w.ravel(), cur, (i0.ravel(), a.ravel(), b.ravel()), x
    )
    assert_allclose(g.base.params, gi, rtol=RTOL)
    assert_allclose(g.alpha, ga.reshape(GRID.shape), rtol=RTOL)
    assert_allclose(g.beta, gb.reshape(GRID.shape), rtol=RTOL)


@pytest.mark.parametrize("freq", [213.071e9, 345e9])
def test_polarimetric_image_equals_image_at_freq(freq):
    rng = np.random.default_rng(1)
    i0, a, b = _maps()
    m = rng.uniform(0.05, 0.5, GRID.shape)
    phi = rng.uniform(-np.pi, np.pi, GRID.shape)
    psi = rng.uniform(-0.2, 0.2, GRID.shape)
    imarr = np.array([i0, m, phi, psi])
    stokes = np.array(
        [
            i0,
            piu.make_q_image(imarr),
            piu.make_u_image(imarr),
            piu.make_v_image(imarr),
        ]
    )
    ap, bp = rng.normal(0, 1, GRID.shape), rng.normal(0, 0.3, GRID.shape)
    rm = rng.normal(0, 4e5, GRID.shape)
    model = em.MultiFrequencyImage(
        StokesArray(GRID, jnp.asarray(stokes)),
        NU0,
        a,
        b,
        alpha_pol=ap,
        beta_pol=bp,
        rm=rm,
    )
    mfarr = [
        i0,
        m / (1 - m),  # eht-imaging's ρ at ν₀ is m'₀ (its ρ'/(1+ρ') transform)
        phi,
        psi,
        a,
        b,
        ap,
        bp,
        2 * rm * C**2 / NU0**2,  # its dimensionless rotation measure
        np.zeros(GRID.shape),
    ]
    with np.errstate(all="ignore"):
        out = mfu.image_at_freq([x.ravel() for x in mfarr], np.log(freq / NU0))
    out = np.array([x.reshape(GRID.shape) for x in out])
    want = np.array(
        [out[0], piu.make_q_image(out), piu.make_u_image(out), piu.make_v_image(out)]
    )
    assert_allclose(model.at(freq), want, rtol=RTOL)


@pytest.mark.parametrize("norm_reg", [False, True])
@pytest.mark.parametrize("which", ["alpha", "beta"])
def test_spectral_regularizers_equal_ehtim(which, norm_reg):
    i0, a, b = _maps()
    model = _model(i0, a, b)
    x = a if which == "alpha" else b
    prior = np.random.default_rng(4).normal(0, 0.5, GRID.shape)
    beam = 5 * GRID.psize
    mask = np.ones(GRID.npix, bool)
    args = (mask, GRID.nx, GRID.ny, GRID.psize)
    cases = [
        (
            em.SpectralL2(GRID, which, prior=prior, normalise=norm_reg),
            f"l2_{which}",
            prior.ravel(),
        ),
        (
            em.SpectralTV(GRID, which, beam=beam, normalise=norm_reg),
            f"tv_{which}",
            prior.ravel(),
        ),
    ]
    for reg, stype, nprior in cases:
        kw = dict(norm_reg=norm_reg, beam_size=beam)
        val, g = eqx.filter_value_and_grad(lambda m, reg=reg: reg(m))(model)
        theirs = mfu.regularizer_mf(x.ravel(), nprior, *args, stype, **kw)
        grad = mfu.regularizergrad_mf(x.ravel(), nprior, *args, stype, **kw)
        assert reg.report_name == stype
        assert_allclose(val, theirs, rtol=RTOL, err=stype)
        assert_allclose(
            getattr(g, which), grad.reshape(GRID.shape), rtol=RTOL, err=stype
        )
