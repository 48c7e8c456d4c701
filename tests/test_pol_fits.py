"""Polarimetric FITS images (`save_fits` / `load_fits` of the four Stokes planes),
`polarization_summary` against numpy, and the shipped polarimetric files."""

import math

import jax
import numpy as np
import pytest
from astropy.io import fits

import eqmodels as em


jax.config.update("jax_enable_x64", True)

GRID = em.ImageGrid(10, 8, em.uas_to_rad(4.0))


def _stokes(seed=0, grid=GRID):
    rng = np.random.default_rng(seed)
    i = rng.uniform(0.1, 1.0, grid.shape)
    frac = rng.uniform(0.0, 0.6, grid.shape)
    chi = rng.uniform(-np.pi, np.pi, grid.shape)
    v = rng.uniform(-0.1, 0.1, grid.shape) * i
    return np.stack([i, frac * i * np.cos(chi), frac * i * np.sin(chi), v])


def test_stokes_round_trip_and_header(tmp_path):
    st = _stokes()
    path = tmp_path / "pol.fits"
    em.save_fits(st, GRID, path, freq=230e9, mjd=57853, source="M87")
    back, grid = em.load_fits(path)
    assert back.shape == (4, *GRID.shape)
    np.testing.assert_array_equal(back, st)
    assert grid == GRID
    h = fits.getheader(path)
    assert h["NAXIS"] == 3 and h["NAXIS3"] == 4 and h["CTYPE3"] == "STOKES"
    assert (h["CRVAL3"], h["CDELT3"], h["CRPIX3"]) == (1.0, 1.0, 1.0)
    # The I plane alone; the header's metadata as for a Stokes I image.
    i_only, _, meta = em.load_fits(path, stokes="I", metadata=True)
    np.testing.assert_array_equal(i_only, st[0])
    assert meta["source"] == "M87" and meta["freq"] == 230e9


def test_stokes_i_file_gives_one_plane_or_four(tmp_path):
    st = _stokes(1)
    path = tmp_path / "i.fits"
    em.save_fits(st[0], GRID, path)
    img, _ = em.load_fits(path)
    assert img.shape == GRID.shape
    four, _ = em.load_fits(path, stokes="IQUV")
    np.testing.assert_array_equal(four[0], st[0])
    assert not four[1:].any()


def test_polarimetric_model_is_written_as_its_planes(tmp_path):
    model = em.PolPixelImage.from_stokes(_stokes(2), GRID)
    path = tmp_path / "model.fits"
    em.save_fits(model, GRID, path)
    back, _ = em.load_fits(path)
    np.testing.assert_allclose(back, np.asarray(model()), rtol=1e-12, atol=1e-15)


def test_stokes_axis_in_any_order_and_subset(tmp_path):
    """A STOKES axis stating V, I (CRVAL3 = 4, CDELT3 = -3): planes go where the
    header says; Q and U absent are zero."""
    st = _stokes(3)
    cube = np.stack([st[3], st[0]])[:, ::-1, :]  # FITS row order: south first
    hdu = fits.PrimaryHDU(cube)
    h = hdu.header
    psize = math.degrees(GRID.psize)
    h.update(
        CTYPE1="RA---SIN", CDELT1=-psize, CRPIX1=GRID.nx / 2 + 0.5,
        CTYPE2="DEC--SIN", CDELT2=psize, CRPIX2=GRID.ny / 2 + 0.5,
        CTYPE3="STOKES", CRVAL3=4.0, CDELT3=-3.0, CRPIX3=1.0,
    )  # fmt: skip
    path = tmp_path / "vi.fits"
    hdu.writeto(path)
    back, _ = em.load_fits(path)
    np.testing.assert_allclose(back[0], st[0], rtol=1e-15)
    np.testing.assert_allclose(back[3], st[3], rtol=1e-15)
    assert not back[1:3].any()


def test_refusals(tmp_path):
    psize = math.degrees(GRID.psize)
    base = dict(CTYPE1="RA---SIN", CDELT1=-psize, CTYPE2="DEC--SIN", CDELT2=psize)
    corr = fits.PrimaryHDU(np.zeros((4, *GRID.shape)))
    corr.header.update(base, CTYPE3="STOKES", CRVAL3=-1.0, CDELT3=-1.0, CRPIX3=1.0)
    corr.writeto(tmp_path / "rrll.fits")
    with pytest.raises(ValueError, match=r"\['RR', 'LL', 'RL', 'LR'\].*correlation"):
        em.load_fits(tmp_path / "rrll.fits")
    freq = fits.PrimaryHDU(np.zeros((2, 4, *GRID.shape)))
    freq.header.update(base, CTYPE3="STOKES", CRVAL3=1.0, CDELT3=1.0, CTYPE4="FREQ")
    freq.writeto(tmp_path / "freq.fits")
    with pytest.raises(ValueError, match="axis 4 .'FREQ'. has 2 planes"):
        em.load_fits(tmp_path / "freq.fits")
    st = _stokes()
    em.save_fits(st, GRID, tmp_path / "ok.fits")
    with pytest.raises(ValueError, match="`stokes` must be 'auto', 'I' or 'IQUV'"):
        em.load_fits(tmp_path / "ok.fits", stokes="Q")
    with pytest.raises(ValueError, match=r"or \(4, 10, 8\) \(I, Q, U, V\)"):
        em.save_fits(st[:3], GRID, tmp_path / "three.fits")
    bad = st.copy()
    bad[2, 3, 4] = np.nan
    fits.PrimaryHDU(
        bad[:, ::-1, :], header=fits.getheader(tmp_path / "ok.fits")
    ).writeto(tmp_path / "nan.fits")
    with pytest.raises(ValueError, match=r"non-finite .* of the U plane"):
        em.load_fits(tmp_path / "nan.fits")


@pytest.mark.slow
# eht-imaging's `load_fits` leaves the file open (its warning, not ours).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_ehtim_reads_ours_and_we_read_ehtims(tmp_path):
    eh = pytest.importorskip("ehtim")
    st = _stokes(4)
    ours = tmp_path / "ours.fits"
    em.save_fits(st, GRID, ours, ra=187.7, dec=12.39, freq=227e9, mjd=57853)
    im = eh.image.load_fits(str(ours))
    assert (im.ydim, im.xdim) == GRID.shape
    np.testing.assert_allclose(im.psize, GRID.psize, rtol=1e-12)
    for plane, vec in zip(st, (im.imvec, im.qvec, im.uvec, im.vvec)):
        np.testing.assert_allclose(vec.reshape(GRID.shape), plane, rtol=1e-15)
    theirs = tmp_path / "theirs.fits"
    im.save_fits(str(theirs))  # I primary, Q/U/V image extensions
    back, grid = em.load_fits(theirs)
    np.testing.assert_allclose(back, st, rtol=1e-15)
    np.testing.assert_allclose(grid.psize, GRID.psize, rtol=1e-12)


def _summary_numpy(st, grid):
    """From the formulas (EHT M87 Paper VII; Palumbo et al. 2020 for β₂ with the
    position angle east of north about the phase centre)."""
    i, q, u, v = st
    ny, nx = grid.shape
    x = (np.arange(nx)[::-1] - (nx - 1) / 2)[None, :] * np.ones((ny, 1))  # east +
    y = (np.arange(ny)[::-1] - (ny - 1) / 2)[:, None] * np.ones((1, nx))  # north +
    phi = np.arctan2(x, y)  # east of north
    beta2 = np.sum((q + 1j * u) * np.exp(-2j * phi)) / i.sum()
    pnet = q.sum() + 1j * u.sum()
    return {
        "flux": i.sum(),
        "m_net": abs(pnet) / i.sum(),
        "m_avg": np.sqrt(q**2 + u**2).sum() / i.sum(),
        "evpa_net_deg": np.degrees(0.5 * np.angle(pnet)),
        "v_net": v.sum() / i.sum(),
        "v_avg": np.abs(v).sum() / i.sum(),
        "beta2": beta2,
        "beta2_abs": abs(beta2),
        "beta2_arg_deg": np.degrees(np.angle(beta2)),
    }


@pytest.mark.parametrize("seed", [0, 5])
def test_polarization_summary_equals_numpy(seed):
    st = _stokes(seed)
    got = em.polarization_summary(st, GRID)
    want = _summary_numpy(st, GRID)
    assert set(got) == set(want)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-12, atol=1e-14, err_msg=key)


def test_polarization_summary_of_a_model_and_a_known_ring():
    grid = em.ImageGrid(64, 64, em.uas_to_rad(2.0))
    beta2 = 0.12 - 0.18j
    ring = em.PolMRingImage(
        grid, 0.6, em.uas_to_rad(40.0), em.uas_to_rad(5.0), beta_p=[0, 0, 0, 0, beta2]
    )
    s = em.polarization_summary(ring, grid)
    np.testing.assert_allclose(
        s["beta2"], complex(em.beta_m(ring, grid, 2)), rtol=1e-12
    )
    np.testing.assert_allclose(s["beta2_abs"], abs(beta2), rtol=0.05)
    assert s["m_net"] < 0.02  # a pure β₂ pattern has no net polarization
    np.testing.assert_allclose(s["flux"], 0.6, rtol=1e-3)


def test_polarization_summary_refuses():
    st = _stokes()
    with pytest.raises(ValueError, match=r"expected the four Stokes planes"):
        em.polarization_summary(st[0], GRID)
    with pytest.raises(ValueError, match="total Stokes I flux is 0.0 Jy"):
        em.polarization_summary(np.zeros_like(st), GRID)
    bad = st.copy()
    bad[1, 0, 0] = np.inf
    with pytest.raises(ValueError, match="NaN or inf"):
        em.polarization_summary(bad, GRID)


@pytest.mark.parametrize("band,freq", [("lo", 227.0707e9), ("hi", 229.0707e9)])
def test_shipped_polarimetric_files(band, freq):
    path = em.example_uvfits(f"m87_2017_04_10_pol_{band}")
    data = em.load_uvfits(path, polarization="full")
    assert isinstance(data, em.PolVisData)
    assert data.source == "M87" and data.mjd == 57853
    np.testing.assert_allclose(float(data.freq), freq, rtol=1e-6)
    assert {"AA", "AP", "LM", "SM"} <= set(data.station_names)
    assert np.isfinite(data.corr[~np.asarray(data.flag)]).all()
