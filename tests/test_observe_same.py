"""`observe_same`: an image observed with the coverage, noise and flags of an
existing data set, against numpy, against `observe` of the same rows, on a real
uvfits file, and its refusals."""

import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.reference.numpy_ft import dft_matrix
from tests.test_observe_pol import GRID, stokes_image


M87 = dict(ra=187.7059, dec=12.3911, mjd=57854)
TIMES = np.linspace(0.5, 6.0, 8)
MOUNTS = {"AP": "nasmyth_r", "LM": "nasmyth_l", "PV": "nasmyth_l", "SM": "nasmyth_l"}


def numpy_vis(data, plane):
    a = dft_matrix(*GRID.shape, GRID.psize, np.asarray(data.u), np.asarray(data.v))
    return a @ np.asarray(plane).reshape(-1)


def test_stokes_i_model_equals_numpy_and_keeps_the_rows():
    x = stokes_image()
    data = em.observe(stokes_image(9)[0], GRID, em.EHT2017, times=TIMES, **M87)
    out = em.observe_same(x[0], GRID, data, add_noise=False)
    assert isinstance(out, em.VisData)
    assert_allclose(np.asarray(out.vis), numpy_vis(data, x[0]), rtol=1e-12)
    for name in ("u", "v", "sigma", "time", "ant1", "ant2"):
        np.testing.assert_array_equal(getattr(out, name), getattr(data, name))
    # An image model is observed as its pixels.
    model = em.PixelImage.from_prior(x[0], GRID, clipfloor=0.0)
    again = em.observe_same(model, GRID, data, add_noise=False)
    want = numpy_vis(data, np.asarray(model()))
    assert_allclose(np.asarray(again.vis), want, rtol=1e-12)


def test_noise_has_the_data_sigma():
    x = stokes_image(1)[0]
    data = em.observe(x, GRID, em.EHT2017, times=np.linspace(0.5, 6, 40), **M87)
    sigma = np.asarray(data.sigma) * np.linspace(0.5, 2.0, data.n_rows)
    data = data.replace(sigma=sigma)
    a = em.observe_same(x, GRID, data, add_noise=False)
    b = em.observe_same(x, GRID, data, seed=4)
    z = (np.asarray(b.vis) - np.asarray(a.vis)) / sigma
    assert z.size > 300
    assert abs(np.std(z.real) - 1) < 0.1 and abs(np.std(z.imag) - 1) < 0.1
    # The seed decides the draw.
    c = em.observe_same(x, GRID, data, seed=4)
    np.testing.assert_array_equal(np.asarray(c.vis), np.asarray(b.vis))
    assert not np.array_equal(
        np.asarray(em.observe_same(x, GRID, data, seed=5).vis), np.asarray(b.vis)
    )


@pytest.mark.parametrize("field_rotation", ["raw", "corrected", "none"])
def test_polarimetric_equals_observe_of_the_same_rows(field_rotation):
    """With the same seed, `observe_same` on `observe`'s rows draws the same gains
    and noise and applies the same Jones matrices: the data are equal."""
    x = stokes_image(2)
    leak = {"LM": (0.05 + 0.02j, -0.03 + 0.04j), "PV": (-0.04j, 0.03)}
    kw = dict(
        dterms=leak, gain_sigma=0.1, random_phases=True, seed=7,
        field_rotation=field_rotation,
    )  # fmt: skip
    data = em.observe(x, GRID, em.EHT2017, times=TIMES, mounts=MOUNTS, **M87, **kw)
    out = em.observe_same(x, GRID, data, **kw)
    assert isinstance(out, em.PolVisData)
    np.testing.assert_array_equal(np.asarray(out.corr), np.asarray(data.corr))
    # Another image through the same instrument: its ideal correlations are
    # numpy's, and the leakage is there.
    y = stokes_image(3)
    ideal = em.observe_same(y, GRID, data, add_noise=False)
    i, q, u, v = (numpy_vis(data, p) for p in y)
    want = np.stack([i + v, i - v, q + 1j * u, q - 1j * u], axis=1)
    if field_rotation != "raw":
        assert_allclose(np.asarray(ideal.corr), want, rtol=1e-12)
    leaky = em.observe_same(y, GRID, data, add_noise=False, dterms=leak)
    assert np.abs(np.asarray(leaky.corr) - np.asarray(ideal.corr)).max() > 1e-4


def test_flagged_correlations_stay_flagged():
    x = stokes_image(4)
    data = em.observe(x, GRID, em.EHT2017, times=TIMES, **M87, add_noise=False)
    corr = np.array(data.corr)
    corr[::3, 2:] = np.nan
    data = data.replace(corr=corr, flag=~np.isfinite(corr))
    out = em.observe_same(x, GRID, data, seed=1)
    flag = np.asarray(out.flag)
    np.testing.assert_array_equal(flag, ~np.isfinite(corr))
    assert np.all(np.isnan(np.asarray(out.corr)[flag]))
    assert np.all(np.isfinite(np.asarray(out.corr)[~flag]))


@pytest.mark.slow
def test_real_polarimetric_file(shared_data):
    """The rows of a release file: the model's Stokes visibilities come back from
    `stokes()` (no leakage, no noise), and noise of the file's σ."""
    path = (
        shared_data / "eht" / "m87_2017_pol" / "hops_data" / "April11"
        / "SR2_M87_2017_101_lo_hops_ALMArot.uvfits"
    )  # fmt: skip
    if not path.is_file():
        pytest.skip("the 2017 M87 polarimetric release is not in ../shared")
    data = em.load_uvfits(path, polarization="full").scan_average()
    grid = em.ImageGrid.from_fov(32, 128.0)
    xx, yy = grid.coords()
    r = np.hypot(xx, yy) / em.uas_to_rad(1.0)
    i = np.exp(-0.5 * ((r - 20.0) / 6.0) ** 2)
    i *= 0.6 / i.sum()
    x = np.stack([i, 0.1 * i, -0.05 * i, 0.01 * i])
    out = em.observe_same(x, grid, data, add_noise=False)
    s, _ = out.stokes()
    a = dft_matrix(*grid.shape, grid.psize, np.asarray(data.u), np.asarray(data.v))
    want = np.stack([a @ p.reshape(-1) for p in x], axis=1)
    ok = ~np.asarray(data.flag).any(axis=1)
    assert ok.sum() > 100
    assert_allclose(s[ok], want[ok], rtol=1e-10, atol=1e-14)
    np.testing.assert_array_equal(np.asarray(out.sigma), np.asarray(data.sigma))


def test_refusals():
    x = stokes_image(5)
    pol = em.observe(x, GRID, em.EHT2017, times=TIMES, **M87, add_noise=False)
    si = pol.stokes_i()
    with pytest.raises(TypeError, match="data"):
        em.observe_same(x, GRID, np.zeros(3))
    with pytest.raises(TypeError, match="grid"):
        em.observe_same(x, "grid", pol)
    with pytest.raises(ValueError, match="is a Stokes I image but `data` is a Pol"):
        em.observe_same(x[0], GRID, pol)
    with pytest.raises(ValueError, match="four Stokes planes but `data` is a Stokes"):
        em.observe_same(x, GRID, si)
    with pytest.raises(ValueError, match="`dterms` describe"):
        em.observe_same(x[0], GRID, si, dterms={"LM": (0.01, 0.01)})
    with pytest.raises(ValueError, match="`field_rotation` describe"):
        em.observe_same(x[0], GRID, si, field_rotation="raw")
    with pytest.raises(ValueError, match="not a station"):
        em.observe_same(x, GRID, pol, dterms={"XX": (0.01, 0.01)})
    with pytest.raises(ValueError, match="`field_rotation` must be one of"):
        em.observe_same(x, GRID, pol, field_rotation="sideways")
    with pytest.raises(ValueError, match="`image` has shape"):
        em.observe_same(x[:, :6], GRID, pol)
    with pytest.raises(ValueError, match="non-finite"):
        em.observe_same(np.full(GRID.shape, np.nan), GRID, si)
    with pytest.raises(ValueError, match="`gain_sigma` must be finite"):
        em.observe_same(x, GRID, pol, gain_sigma=-1.0)
    with pytest.raises(ValueError, match="`seed` must be >= 0"):
        em.observe_same(x, GRID, pol, seed=-1)
    with pytest.raises(TypeError, match="add_noise"):
        em.observe_same(x, GRID, pol, add_noise="yes")
