"""The term problems every data term and regularizer goes through (tests/test_terms.py
and the suites built on it): `DATA_TERMS` / `REGULARIZERS` build a term and name its
plain-numpy reference (tests/reference/), on a 10 × 12 grid with synthetic closure
products of a positive image."""

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

import eqmodels as em
from tests.reference import regularizers as rr, terms as rt


GRID = em.ImageGrid(10, 12, em.uas_to_rad(4.0))
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
