"""`observe` of a polarimetric image: the correlations each station pair records
through gains, leakage, feed basis and field rotation, against numpy and against
`StationJones` on the same data; closure traces survive the corruptions; refusals."""

import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.reference.numpy_ft import dft_matrix


M87 = dict(ra=187.7059, dec=12.3911)
TIMES = np.linspace(0.5, 6.0, 12)
GRID = em.ImageGrid(12, 12, em.uas_to_rad(8.0))


def stokes_image(seed=0):
    rng = np.random.default_rng(seed)
    i = rng.uniform(0.2, 1.0, GRID.shape)
    i *= 0.6 / i.sum()
    q, u, v = rng.uniform(-0.3, 0.3, (3, *GRID.shape)) * i
    return np.stack([i, q, u, 0.2 * v])


def observe(stokes, **kw):
    kw = {"add_noise": False, "mjd": 57854, "times": TIMES, **M87, **kw}
    return em.observe(stokes, GRID, em.EHT2017, **kw)


def numpy_stokes_vis(data, stokes):
    a = dft_matrix(*GRID.shape, GRID.psize, np.asarray(data.u), np.asarray(data.v))
    return np.stack([a @ p.reshape(-1) for p in stokes], axis=1)


def test_ideal_correlations_equal_numpy():
    x = stokes_image()
    data = observe(x)
    assert isinstance(data, em.PolVisData)
    s = numpy_stokes_vis(data, x)
    i, q, u, v = s.T
    want = np.stack([i + v, i - v, q + 1j * u, q - 1j * u], axis=1)
    corr, _ = data.correlations()
    assert_allclose(corr, want, rtol=1e-12)
    stokes, _ = data.stokes()
    assert_allclose(stokes, s, rtol=1e-12)
    # Its Stokes I part is what observing the I plane gives.
    plain = observe(x[0])
    assert_allclose(np.asarray(data.stokes_i().vis), np.asarray(plain.vis), rtol=1e-12)


def test_linear_feeds_record_the_linear_correlations():
    x = stokes_image(1)
    data = observe(x, feeds="linear")
    i, q, u, v = numpy_stokes_vis(data, x).T
    want = np.stack([i + q, i - q, u + 1j * v, u - 1j * v], axis=1)
    assert_allclose(data.correlations()[0], want, rtol=1e-12)


@pytest.mark.parametrize("field_rotation", ["raw", "corrected"])
def test_gains_leakage_and_field_rotation_equal_station_jones(field_rotation):
    x = stokes_image(2)
    rng = np.random.default_rng(3)
    n_st = len(em.EHT2017.names)
    d = 0.05 * (rng.normal(size=(n_st, 2)) + 1j * rng.normal(size=(n_st, 2)))
    mounts = {"AA": "nasmyth_l", "SM": "nasmyth_r", "JC": "nasmyth_r"}
    data = observe(x, dterms=d, mounts=mounts, field_rotation=field_rotation)
    ideal = observe(x, mounts=mounts, field_rotation="none")
    jones = em.StationJones.from_data(
        ideal,
        interval="timestamp",
        dterms=d[None],
        field_rotation_corrected=field_rotation == "corrected",
    )
    stations = np.stack([np.asarray(ideal.ant1), np.asarray(ideal.ant2)], axis=1)
    want = jones.apply(
        jnp.asarray(numpy_stokes_vis(ideal, x)), stations, ideal.time_index
    )
    assert_allclose(data.correlations()[0], np.asarray(want), rtol=1e-12)
    # The field rotation is there: without it the correlations differ.
    none = observe(x, dterms=d, mounts=mounts, field_rotation="none")
    assert np.max(np.abs(none.correlations()[0] - data.correlations()[0])) > 1e-4


def test_closure_traces_survive_gains_leakage_and_field_rotation():
    x = stokes_image(4)
    rng = np.random.default_rng(5)
    d = {
        s: 0.05 * (rng.normal(size=2) + 1j * rng.normal(size=2))
        for s in ("AA", "LM", "SM", "PV")
    }
    ideal = observe(x)
    data = observe(
        x, dterms=d, gain_sigma=0.2, random_phases=True, seed=1, field_rotation="raw"
    )

    def traces(obs):
        corr, sigma = obs.correlations()
        return em.closure_traces(
            corr, sigma, obs.ant1, obs.ant2, obs.time_index, u=obs.u, v=obs.v
        )

    a, b = traces(ideal), traces(data)
    assert np.asarray(a.values).size > 10
    assert_allclose(np.asarray(b.values), np.asarray(a.values), rtol=1e-10)


def test_thermal_noise_per_correlation_is_the_single_hand_radiometer_noise():
    x = stokes_image(6)
    data = observe(x, add_noise=True, seed=2)
    plain = observe(x[0], add_noise=True, seed=2)
    # One hand per correlation: √2 the Stokes I noise (two hands averaged).
    assert_allclose(
        np.asarray(data.sigma), np.sqrt(2) * np.asarray(plain.sigma)[:, None] * np.ones(4),
        rtol=1e-12,
    )  # fmt: skip
    ideal = observe(x)
    z = (data.correlations()[0] - ideal.correlations()[0]) / np.asarray(data.sigma)
    assert 0.85 < np.std(np.concatenate([z.real.ravel(), z.imag.ravel()])) < 1.15


def test_refusals():
    x = stokes_image()
    with pytest.raises(ValueError, match=r"`dterms` describe\(s\) a polarimetric"):
        observe(x[0], dterms={"AA": (0.01, 0.01)})
    with pytest.raises(ValueError, match=r"`dterms` has the key 'XX'"):
        observe(x, dterms={"XX": (0.01, 0.01)})
    with pytest.raises(ValueError, match=r"leakage of modulus >= 1"):
        observe(x, dterms={"AA": (2.0, 0.0)})
    with pytest.raises(ValueError, match=r"`field_rotation` describe\(s\)"):
        observe(x[0], field_rotation="raw")
    with pytest.raises(ValueError, match=r"`field_rotation` must be one of"):
        observe(x, field_rotation="yes")
    with pytest.raises(ValueError, match=r"`mounts` values must be in"):
        observe(x, mounts="nasmith")
    with pytest.raises(ValueError, match=r"a polarimetric image is \(4, ny, nx\)"):
        observe(np.zeros((3, *GRID.shape)))
