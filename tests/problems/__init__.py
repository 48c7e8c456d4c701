"""Small shared test problems."""

import jax.numpy as jnp
import numpy as np

import eqmodels as em


def random_points(grid, n, seed=0, frac=0.45, shape=None):
    """Random (u, v) inside `frac` of the grid's Nyquist limit."""
    rng = np.random.default_rng(seed)
    lim = frac / grid.psize
    shape = (n,) if shape is None else shape
    return rng.uniform(-lim, lim, shape), rng.uniform(-lim, lim, shape)


def random_image(grid, seed=1):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.1, 1.0, grid.shape) / grid.npix


def ring_image(grid, diameter_uas=40.0, width_uas=8.0, flux=1.0):
    xx, yy = grid.coords()
    r = np.hypot(xx, yy)
    r0 = em.uas_to_rad(diameter_uas) / 2
    w = em.uas_to_rad(width_uas)
    img = np.exp(-0.5 * ((r - r0) / (w / 2.355)) ** 2)
    return flux * img / img.sum()


FORWARDS = {
    "direct": lambda g, u, v, **kw: em.DirectFT(g, u, v, **kw),
    "separable": lambda g, u, v, **kw: em.SeparableFT(g, u, v, **kw),
    "nufft": lambda g, u, v, **kw: em.NUFFT(g, u, v, eps=1e-12, **kw),
}
# Exact models match numpy to 1e-12; the NUFFT to its tolerance.
FORWARD_RTOL = {"direct": 1e-12, "separable": 1e-12, "nufft": 1e-10}


def small_problem(seed):
    """The extension tests' problem: an 8² grid of 5 µas pixels, 10 random points
    within 0.3 of its Nyquist limit, a random image, unit values:
    `(grid, u, v, image, ones)`."""
    grid = em.ImageGrid(8, 8, em.uas_to_rad(5.0))
    rng = np.random.default_rng(seed)
    u, v = rng.uniform(-0.3 / grid.psize, 0.3 / grid.psize, (2, 10))
    return grid, u, v, jnp.asarray(rng.uniform(0.1, 1, grid.shape)), np.ones(10)
