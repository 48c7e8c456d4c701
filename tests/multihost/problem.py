"""The problem of the multi-process test: the round-1 objective on M87 2017-04-10 lo
(scan-averaged, 32² over 128 µas), plain or with every data term sharded."""

import pathlib

import numpy as np


DATA = (
    pathlib.Path(__file__).resolve().parents[2]
    / "eqmodels"
    / "data"
    / "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits"
)


def data_terms(forward: str, sharded: bool):
    import eqmodels as em

    data = em.load_uvfits(DATA).scan_average()
    grid = em.ImageGrid.from_fov(32, 128.0)
    products = (
        (em.AmpChi2, em.amplitudes(data)),
        (em.ClosurePhaseChi2, em.closure_phases(data)),
        (em.LogClosureAmpChi2, em.log_closure_amplitudes(data)),
    )
    if sharded:
        return [
            em.ShardedChi2.from_data(cls, p, grid, forward=forward)
            for cls, p in products
        ]
    return [cls.from_data(p, grid, forward=forward) for cls, p in products]


def build(forward: str, sharded: bool):
    import eqmodels as em

    terms = data_terms(forward, sharded)
    data = em.load_uvfits(DATA).scan_average()
    grid = em.ImageGrid.from_fov(32, 128.0)
    prior = np.asarray(em.GaussianImage(grid, 0.6, em.uas_to_rad(40.0))())
    beam = em.beam_from_uv(data.u, data.v)
    norm = dict(flux=0.6, beam=beam, normalise=True)
    return (
        0.2 * terms[0]
        + terms[1]
        + terms[2]
        + 100 * em.SimpleEntropy(prior, flux=0.6, normalise=True)
        + em.TV(grid, **norm)
        + em.TSV(grid, **norm)
        + 1e4 * em.Flux(0.6, normalise=True)
    )


def image():
    import eqmodels as em

    grid = em.ImageGrid.from_fov(32, 128.0)
    prior = np.asarray(em.GaussianImage(grid, 0.6, em.uas_to_rad(40.0))())
    rng = np.random.default_rng(0)
    return prior * (1 + 0.05 * rng.standard_normal(prior.shape)) ** 2


def least_squares(forward: str, sharded: bool):
    """The data terms, TSV and flux of `build` (sums of squares: what Gauss-Newton
    takes), with their weights."""
    import eqmodels as em

    full = build(forward, sharded)
    keep = [i for i, n in enumerate(full.names) if n not in ("simple", "tv")]
    terms = data_terms(forward, sharded)
    grid = em.ImageGrid.from_fov(32, 128.0)
    data = em.load_uvfits(DATA).scan_average()
    norm = dict(flux=0.6, beam=em.beam_from_uv(data.u, data.v), normalise=True)
    return em.Objective(
        [*terms, em.TSV(grid, **norm), em.Flux(0.6, normalise=True)],
        full.weights[np.asarray(keep)],
    )


def pixel_model():
    import eqmodels as em

    grid = em.ImageGrid.from_fov(32, 128.0)
    return em.PixelImage.from_image(image(), grid)
