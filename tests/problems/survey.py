"""The survey problems of tests/test_survey.py and the child processes it starts
(tests/survey_child.py): 6 configurations = 3 weightings × 2 data sets, and four
least-squares data sets."""

import jax.numpy as jnp
import numpy as np

import eqmodels as em


GRID = em.ImageGrid.from_fov(6, 128.0)


def configurations():
    rng = np.random.default_rng(1)
    n = 30
    u = rng.uniform(-0.35, 0.35, n) / GRID.psize
    v = rng.uniform(-0.35, 0.35, n) / GRID.psize
    fwd = em.DirectFT(GRID, u, v)
    truth = jnp.asarray(rng.uniform(0.2, 1.0, GRID.shape))
    sigma = np.full(n, 0.05)
    objectives = []
    for seed in (0, 1):
        noise = np.random.default_rng(seed).standard_normal((2, n))
        vis = fwd(truth) + sigma * (noise[0] + 1j * noise[1])
        base = em.VisChi2(fwd, vis, sigma) + em.TSV(GRID)
        for w in (0.01, 0.1, 1.0):
            objectives.append(base.with_weights(jnp.array([1.0, w])))
    model = em.PixelImage(GRID, np.full(GRID.shape, 0.5), transform="identity")
    return objectives, model


SOLVER = em.LBFGS()
MAX_STEPS = 40


def least_squares_problem():
    """Four data sets on a 16² grid: 256 parameters (the deadlock below needs
    Cholesky factorisations large enough for jaxlib to split its batch)."""
    grid = em.ImageGrid.from_fov(16, 128.0)
    rng = np.random.default_rng(3)
    u, v = rng.uniform(-0.35, 0.35, (2, 200)) / grid.psize
    fwd = em.DirectFT(grid, u, v)
    truth = fwd(jnp.asarray(rng.uniform(0.2, 1.0, grid.shape)))
    sigma = np.full(200, 0.05)
    objectives = [
        em.VisChi2(fwd, truth + sigma * rng.standard_normal(200), sigma)
        for _ in range(4)
    ]
    return objectives, em.PixelImage(
        grid, np.full(grid.shape, 0.5), transform="identity"
    )
