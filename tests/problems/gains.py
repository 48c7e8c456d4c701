"""The gains problem of tests/test_gains.py, tests/test_gains_joint.py and
tests/test_selfcal.py: all baselines of 6 stations at 8 timestamps (3 scans) on a
10 × 12 grid, random station gains, and the numpy χ² through them."""

import functools
import itertools

import numpy as np

import eqmodels as em
from tests.reference import gains as rg
from tests.reference.numpy_ft import dft_matrix


GRID = em.ImageGrid(10, 12, em.uas_to_rad(4.0))
NAMES = ("AA", "AP", "AZ", "JC", "LM", "SM")
TIMES = np.array([1.0, 1.005, 1.01, 2.0, 2.005, 3.5, 3.505, 3.51])  # 3 scans


def truth_image():
    rng = np.random.default_rng(7)
    return 1.3 * rng.uniform(0.2, 1.0, GRID.shape) / (0.6 * GRID.npix)


@functools.cache
def synthetic(noise=0.01):
    """All baselines of 6 stations at 8 timestamps (3 scans; station SM missing
    from the second scan), visibilities of `truth_image` with noise."""
    rng = np.random.default_rng(11)
    rows = []
    for t in TIMES:
        present = [0, 1, 2, 3, 4] if 1.5 < t < 3 else list(range(6))
        rows += [(t, a, b) for a, b in itertools.combinations(present, 2)]
    t, a1, a2 = (np.array(x) for x in zip(*rows))
    n = t.size
    # Baselines between station positions (random, per timestamp), so that the
    # legs of every closure triangle close as on a real array.
    slot = np.searchsorted(TIMES, t)
    xy = rng.uniform(-2e9, 2e9, (2, len(TIMES), len(NAMES)))
    u, v = xy[:, slot, a1] - xy[:, slot, a2]
    model = dft_matrix(*GRID.shape, GRID.psize, u, v) @ truth_image().ravel()
    sigma = noise * np.abs(model).mean() * rng.uniform(0.5, 1.5, n)
    vis = model + sigma * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    return em.VisData(u, v, vis, sigma, t, a1, a2, station_names=NAMES, freq=230e9)


def random_gains(data, interval="scan", seed=0, amp=0.1, phase=np.pi):
    g = em.StationGains.from_data(data, interval)
    rng = np.random.default_rng(seed)
    shape = g.log_amp.shape
    return em.StationGains.from_data(
        data,
        interval,
        gains=np.exp(
            amp * rng.standard_normal(shape) + 1j * rng.uniform(-phase, phase, shape)
        ),
    )


def pairs(data):
    """The station pair `(ant1, ant2)` of each row, `(n_rows, 2)`."""
    return np.stack([np.asarray(data.ant1), np.asarray(data.ant2)], axis=1)


def vis_reference(d, img, g):
    """The numpy reference's `(χ², ∂/∂img, ∂/∂log_amp, ∂/∂phase)` of `d`'s
    visibilities through the gains `g` at the image `img`."""
    a0 = dft_matrix(*GRID.shape, GRID.psize, np.asarray(d.u), np.asarray(d.v))
    return rg.vis_chi2(
        a0,
        img,
        np.asarray(d.vis),
        np.asarray(d.sigma),
        np.asarray(g.log_amp),
        np.asarray(g.phase),
        np.asarray(g.slot_interval),
        pairs(d),
        d.time_index,
    )


def reordered(d):
    """`d` without station SM (its rows and its column), the station table in
    reverse order: another station table, `AA` in another column."""
    d = d.flag_stations(["SM"])
    names = [n for n in d.station_names if n != "SM"][::-1]
    column = np.array([names.index(n) if n in names else -1 for n in d.station_names])
    order = [d.station_names.index(n) for n in names]
    xyz = None if d.station_xyz is None else np.asarray(d.station_xyz)[order]
    return d.replace(
        station_names=tuple(names),
        station_xyz=xyz,
        ant1=column[np.asarray(d.ant1)],
        ant2=column[np.asarray(d.ant2)],
    )
