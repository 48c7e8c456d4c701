"""The published round-1 M87 objective on real data equals the numpy reference
(and, if eht-imaging is installed, each chi² and regularizer equals its
`ttype='direct'` value).

Problem (ANCHORS.md): M87 2017-04-11 lo band (from ../shared/data), scan averaged,
64² pixels over 128 µas, Gaussian prior of 40 µas FWHM, total flux 0.6 Jy,
`{amp 0.2, cphase 1, logcamp 1}` + `{simple 100, tv 1, tv2 1, flux 1e4}`
normalised. The 2017-04-10 lo file shipped in eqmodels/data runs too, so the test never
skips entirely.
"""

import contextlib
import functools
import io

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.reference import regularizers as rr, terms as rt


FLUX = 0.6
GRID = em.ImageGrid.from_fov(64, 128.0)
DAY_101 = "eht/m87_2017/SR1_M87_2017_101_lo_hops_netcal_StokesI.uvfits"
DAY_100 = em.example_uvfits()  # the file shipped in eqmodels/data
# Row counts after scan averaging and minimal closure sets: documented facts
# (ANCHORS.md for 04-11).
ROWS = {"101": (216, 134, 113), "100": (91, 55, 48)}


@pytest.fixture
def problem(request):
    if request.param == "101":
        path = request.getfixturevalue("shared_data") / DAY_101
        if not path.is_file():
            pytest.skip(f"{path} is not present")
    else:
        path = DAY_100
    return _load(str(path), request.param)


@functools.cache
def _load(path, name):
    data = em.load_uvfits(path).scan_average()
    prods = (
        em.amplitudes(data),
        em.closure_phases(data),
        em.log_closure_amplitudes(data),
    )
    assert tuple(p.u.shape[0] for p in prods) == ROWS[name]
    prior = np.asarray(em.GaussianImage(GRID, FLUX, em.uas_to_rad(40.0))())
    beam = em.beam_from_uv(data.u, data.v)
    rng = np.random.default_rng(0)
    image = prior * (1 + 0.05 * rng.standard_normal(prior.shape)) ** 2
    return prods, prior, beam, image, reference_parts(prods, prior, beam, image)


def round1(prods, prior, beam, forward="direct"):
    amp, cphase, logcamp = prods
    kw = {"eps": 1e-12} if forward == "nufft" else {}
    norm = dict(flux=FLUX, beam=beam, normalise=True)
    return (
        0.2 * em.AmpChi2.from_data(amp, GRID, forward=forward, **kw)
        + em.ClosurePhaseChi2.from_data(cphase, GRID, forward=forward, **kw)
        + em.LogClosureAmpChi2.from_data(logcamp, GRID, forward=forward, **kw)
        + 100 * em.SimpleEntropy(prior, flux=FLUX, normalise=True)
        + em.TV(GRID, **norm)
        + em.TSV(GRID, **norm)
        + 1e4 * em.Flux(FLUX, normalise=True)
    )


def reference_parts(prods, prior, beam, image):
    """Each term's (value, gradient) from the plain-numpy references."""
    amp, cphase, logcamp = prods
    p = GRID.psize

    def legs(prod):
        return rt.leg_matrices(*GRID.shape, p, np.asarray(prod.u), np.asarray(prod.v))

    a = [np.asarray(x) for x in (amp.amp, amp.sigma)]
    c = [np.asarray(x) for x in (cphase.cphase, cphase.sigma)]
    lc = [np.asarray(x) for x in (logcamp.logcamp, logcamp.sigma)]
    return {
        "amp": rt.amp_chi2(legs(amp), image, *a),
        "cphase": rt.cphase_chi2(legs(cphase), image, *c),
        "logcamp": rt.logcamp_chi2(legs(logcamp), image, *lc),
        "simple": rr.simple(image, prior, FLUX),
        "tv": rr.tv(image, 0.0, FLUX * p / beam),
        "tv2": rr.tsv(image, p**4 * FLUX**2 / beam**4),
        "flux": rr.flux(image, FLUX, FLUX**2),
    }


WEIGHTS = {
    "amp": 0.2,
    "cphase": 1,
    "logcamp": 1,
    "simple": 100,
    "tv": 1,
    "tv2": 1,
    "flux": 1e4,
}


@pytest.mark.parametrize(
    "problem,forward",
    [("101", "direct"), ("101", "nufft"), ("100", "direct")],
    indirect=["problem"],
)
def test_round1_objective_equals_numpy_reference(problem, forward):
    prods, prior, beam, image, parts = problem
    obj = round1(prods, prior, beam, forward)
    assert obj.names == tuple(WEIGHTS)
    # One shared transform: every closure leg is one of the visibilities' baselines.
    assert len(obj.shared) == 1 and obj.shared[0].n_points == prods[0].u.shape[0]
    ref_val = sum(WEIGHTS[k] * v for k, (v, _) in parts.items())
    ref_grad = sum(WEIGHTS[k] * g for k, (_, g) in parts.items())

    @eqx.filter_jit
    def run(x, o):
        return jax.value_and_grad(lambda x: o(x))(x), o.report(x)

    (val, grad), report = run(jnp.asarray(image), obj)
    rtol = 1e-12 if forward == "direct" else 1e-10
    assert_allclose(val, ref_val, rtol=rtol)
    assert_allclose(grad, ref_grad, rtol=rtol)
    for k, (v, _) in parts.items():
        assert_allclose(report[k], v, rtol=rtol, err=k)
    # The same objective on a log-pixel image model (eht-imaging's parametrisation).
    model = em.PixelImage.from_image(image, GRID)
    g = eqx.filter_jit(eqx.filter_grad(lambda m, o: o(m)))(model, obj)
    assert_allclose(g.params, (ref_grad * image).ravel(), rtol=rtol)


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["101", "100"], indirect=True)
def test_round1_terms_equal_ehtim(problem):
    ehtim = pytest.importorskip("ehtim")  # noqa: F841
    with contextlib.redirect_stdout(io.StringIO()):
        import ehtim.imaging.imager_utils as iu
        import ehtim.observing.obs_helpers as oh
    prods, prior, beam, image, _ = problem
    amp, cphase, logcamp = prods
    p, nx, ny = GRID.psize, GRID.nx, GRID.ny

    def mats(prod):
        u, v = np.asarray(prod.u), np.asarray(prod.v)
        if u.ndim == 1:
            return oh.ftmatrix(p, nx, ny, np.stack([u, v], 1))
        return [
            oh.ftmatrix(p, nx, ny, np.stack([u[:, i], v[:, i]], 1))
            for i in range(u.shape[1])
        ]

    x = image.ravel()
    pv = prior.ravel()
    ref = {
        "amp": iu.chisq_amp(x, mats(amp), np.asarray(amp.amp), np.asarray(amp.sigma)),
        "cphase": iu.chisq_cphase(
            x, mats(cphase), np.rad2deg(cphase.cphase), np.rad2deg(cphase.sigma)
        ),
        "logcamp": iu.chisq_logcamp(
            x, mats(logcamp), np.asarray(logcamp.logcamp), np.asarray(logcamp.sigma)
        ),
        "simple": -iu.ssimple(x, pv, FLUX, True),
        "tv": -iu.stv(x, nx, ny, p, FLUX, True, beam),
        "tv2": -iu.stv2(x, nx, ny, p, FLUX, True, beam),
        "flux": -iu.sflux(x, pv, FLUX, True),
    }
    obj = round1(prods, prior, beam)
    report = eqx.filter_jit(lambda x, o: o.report(x))(jnp.asarray(image), obj)
    for k, v in ref.items():
        assert_allclose(report[k], v, rtol=1e-9, err=k)
