"""The M87 recipe's data operations: taper / reverse taper, zero-baseline flux
rescaling, circular Gaussian blur, flagging by uv distance; eht-imaging as a
test-time oracle (to 1e-9; the same formulas, so to rounding)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.conftest import TEST_DATA
from tests.helpers import (
    assert_allclose,
    check_grad_fd,
    ehtim_row_index,
    quiet,
)
from tests.unchecked import unchecked_error


LOCAL = TEST_DATA / "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits"
GRID = em.ImageGrid.from_fov(16, 128.0)


@pytest.fixture(scope="module")
def data():
    return em.load_uvfits(LOCAL).scan_average()


def test_taper_and_reverse_taper(data):
    fwhm = em.uas_to_rad(20.0)
    t = em.taper(data, fwhm)
    s = fwhm / (2 * np.sqrt(2 * np.log(2)))
    k = np.exp(-2 * np.pi**2 * s**2 * data.uvdist**2)
    assert_allclose(t.vis, np.asarray(data.vis) * k, rtol=1e-14)
    assert_allclose(t.sigma, np.asarray(data.sigma) * k, rtol=1e-14)
    back = em.reverse_taper(t, fwhm)
    assert_allclose(back.vis, data.vis, rtol=1e-13)
    assert_allclose(back.sigma, data.sigma, rtol=1e-13)
    # Tapering the data = blurring the sky with the same Gaussian (for a
    # continuous Gaussian pulse the two agree exactly in the visibility domain).
    assert em.taper(data, 0.0).vis is not None
    with pytest.raises(ValueError, match="fwhm"):
        em.taper(data, -1.0)
    with pytest.raises(ValueError, match="overflow"):
        em.reverse_taper(data, 1e-6)
    with pytest.raises(TypeError, match="VisData"):
        em.taper(np.ones(3), fwhm)


def test_rescale_zero_baseline(data):
    short = data.uvdist < 0.1e9
    assert short.any() and (~short).any()
    out = em.rescale_zero_baseline(data, 0.6)
    now = np.median(np.abs(np.asarray(data.vis))[short])
    scale = np.where(short, 0.6 / now, 1.0)
    assert_allclose(out.vis, np.asarray(data.vis) * scale, rtol=1e-15)
    assert_allclose(out.sigma, np.asarray(data.sigma) * scale, rtol=1e-15)
    assert_allclose(np.median(np.abs(np.asarray(out.vis))[short]), 0.6, rtol=1e-14)
    by_bl = em.rescale_zero_baseline(data, 0.6, baseline=("AA", "AP"))
    a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
    aa, ap = data.station_names.index("AA"), data.station_names.index("AP")
    on = (a1 == aa) & (a2 == ap)
    assert_allclose(np.median(np.abs(np.asarray(by_bl.vis))[on]), 0.6, rtol=1e-14)
    given = em.rescale_zero_baseline(data, 0.6, current=1.2)
    assert_allclose(
        np.asarray(given.vis)[short], np.asarray(data.vis)[short] / 2, rtol=1e-15
    )
    with pytest.raises(ValueError, match="flux"):
        em.rescale_zero_baseline(data, 0.0)
    with pytest.raises(ValueError, match="shorter than `uv_max`"):
        em.rescale_zero_baseline(data, 0.6, uv_max=1.0)
    with pytest.raises(ValueError, match="unknown station"):
        em.rescale_zero_baseline(data, 0.6, baseline=("AA", "XX"))
    with pytest.raises(ValueError, match="no rows"):
        em.rescale_zero_baseline(data.flag_stations(["AP"]), 0.6, baseline=("AA", "AP"))
    # From a review: with `baseline` or `current`, a `uv_max` in Gλ by mistake
    # rescaled nothing, silently; a long baseline was taken as the reference.
    for kw in (dict(baseline=("AA", "AP")), dict(current=1.1)):
        with pytest.raises(ValueError, match="shorter than `uv_max`.*wavelengths"):
            em.rescale_zero_baseline(data, 0.6, uv_max=0.1, **kw)
    with pytest.raises(ValueError, match="not a short baseline"):
        em.rescale_zero_baseline(data, 0.6, baseline=("AA", "AZ"))
    # A 0-d array is the number it holds (it was refused as "not a number").
    assert_allclose(
        em.rescale_zero_baseline(data, jnp.asarray(0.6)).vis, out.vis, rtol=1e-15
    )


DEBIAS_AS_STRING = unchecked_error(
    'em.add_systematic_noise(d, 0.1, debias="no")',
    "TypeError",
    "d = em.load_uvfits(em.example_uvfits())",
)


def test_numbers_given_as_0d_arrays_are_numbers(data, unchecked):
    """From a review: `jnp.array(10.)` and `np.int64(0)` were refused with messages
    that were false for them."""
    assert data.time_average(jnp.asarray(60.0)).n_rows == data.time_average(60.0).n_rows
    assert len(data.scans(jnp.asarray(60.0))) == len(data.scans(60.0))
    assert (
        data.select(snr_min=jnp.asarray(3.0)).n_rows == data.select(snr_min=3.0).n_rows
    )
    assert_allclose(em.taper(data, np.int64(0)).vis, data.vis, rtol=0)
    msg = unchecked[DEBIAS_AS_STRING]
    assert msg is not None and "`debias` must be True or False" in msg


def test_blur_image_matches_scipy_and_is_differentiable():
    ndimage = pytest.importorskip("scipy.ndimage")
    rng = np.random.default_rng(0)
    grid = em.ImageGrid(12, 14, em.uas_to_rad(2.0))
    img = rng.uniform(0, 1, grid.shape)
    # 40 µas: the kernel is wider than the image; 400 µas: than twice the image
    # (its taps are folded over the reflections' period)
    for fwhm_uas in (0.0, 3.0, 5.0, 40.0, 400.0):
        fwhm = em.uas_to_rad(fwhm_uas)
        sigma = fwhm / (2 * np.sqrt(2 * np.log(2))) / grid.psize
        want = ndimage.gaussian_filter(img, sigma) if fwhm_uas else img
        assert_allclose(em.blur_image(img, grid, fwhm), want, rtol=1e-13)
    fwhm = em.uas_to_rad(5.0)
    # Linear (so jit, vmap and gradients are exact), and flux-preserving.
    f = eqx.filter_jit(jax.vmap(lambda x: em.blur_image(x, grid, fwhm)))
    batch = jnp.stack([jnp.asarray(img), 2 * jnp.asarray(img)])
    out = f(batch)
    assert_allclose(out[1], 2 * out[0], rtol=1e-13)
    assert_allclose(jnp.sum(out[0]), np.sum(img), rtol=1e-13)
    w = rng.standard_normal(grid.shape)
    check_grad_fd(
        lambda x: jnp.sum(jnp.asarray(w) * em.blur_image(x, grid, fwhm) ** 2), img
    )
    with pytest.raises(ValueError, match="image.*grid"):
        em.blur_image(img[:4], grid, fwhm)
    with pytest.raises(ValueError, match="fwhm"):
        em.blur_image(img, grid, float("nan"))
    # From a review: µas given as radians (20.0) tried to allocate 51 TiB of
    # taps; a FWHM wider than the image (a 1e-6 rad blur took seconds) is flat.
    with pytest.raises(ValueError, match="`fwhm` = 20 rad.*uas_to_rad"):
        em.blur_image(img, grid, 20.0)
    with pytest.raises(ValueError, match="1.1e\\+03 times the image's width"):
        em.blur_image(img, grid, 1100 * max(grid.fov))


# ------------------------------------------------------------ eht-imaging oracle
@pytest.fixture(scope="module")
def ehtim_obs(data):
    """An eht-imaging observation holding exactly our (float64) rows: the loaders
    differ at float32 rounding (see test_data_ehtim.py), the operations must not."""
    with quiet():
        eh = pytest.importorskip("ehtim")
        obs = eh.obsdata.load_uvfits(str(LOCAL))
        obs.add_scans()
        obs = obs.avg_coherent(0.0, scan_avg=True)
    idx = ehtim_row_index(obs, data)
    obs.data = obs.data[idx]
    for ours, theirs in (("u", "u"), ("v", "v"), ("vis", "vis"), ("sigma", "sigma")):
        obs.data[theirs] = np.asarray(getattr(data, ours))
    return eh, obs


def _ours_order(obs, data):
    """`(vis, sigma)` of an eht-imaging observation in our row order and
    orientation (eht-imaging re-sorts rows when it builds a new observation)."""
    rows = {}
    for r in obs.data:
        key = (float(r["time"]), str(r["t1"]), str(r["t2"]))
        rows[key] = (r["vis"], r["sigma"])
        rows[(key[0], key[2], key[1])] = (np.conj(r["vis"]), r["sigma"])
    names = data.station_names
    got = [
        rows[(float(t), names[i], names[j])]
        for t, i, j in zip(
            np.asarray(data.time), np.asarray(data.ant1), np.asarray(data.ant2)
        )
    ]
    return np.array([g[0] for g in got]), np.array([g[1] for g in got])


@pytest.mark.slow
def test_operations_equal_ehtim(data, ehtim_obs):
    eh, obs = ehtim_obs
    fwhm = 5.0 * eh.RADPERUAS
    with quiet():
        tap = obs.taper(fwhm)
        rev = obs.reverse_taper(fwhm)
        kept = obs.flag_uvdist(uv_min=0.1e9, uv_max=7e9)
    for ours, theirs in (
        (em.taper(data, fwhm), tap),
        (em.reverse_taper(data, fwhm), rev),
    ):
        vis, sigma = _ours_order(theirs, data)
        assert_allclose(ours.vis, vis, rtol=1e-12)
        assert_allclose(ours.sigma, sigma, rtol=1e-12)
    sel = data.select_uvdist(0.1e9, 7e9)
    assert sel.n_rows == len(kept.data) < data.n_rows
    assert_allclose(sel.vis, _ours_order(kept, sel)[0], rtol=1e-15)
    # The recipe's zero-baseline rescaling (its script scales V and σ of every row
    # shorter than 0.1 Gλ by zbl / median |V| on ALMA-APEX), on eht-imaging's table.
    with quiet():
        zbl_tot = np.median(obs.unpack_bl("AA", "AP", "amp")["amp"])
    table = obs.data.copy()
    short = np.hypot(table["u"], table["v"]) < 0.1e9
    for field in ("vis", "sigma"):
        table[field] = np.where(short, table[field] * 0.6 / zbl_tot, table[field])
    ours = em.rescale_zero_baseline(data, 0.6, baseline=("AA", "AP"))
    assert_allclose(ours.vis, table["vis"], rtol=1e-12)
    assert_allclose(ours.sigma, table["sigma"], rtol=1e-12)


@pytest.mark.slow
def test_blur_equals_ehtim(ehtim_obs):
    eh, _ = ehtim_obs
    rng = np.random.default_rng(1)
    img = rng.uniform(0, 1, GRID.shape)
    with quiet():
        im = eh.image.Image(img, GRID.psize, 187.7, 12.39, rf=230e9)
        blurred = im.blur_circ(5.0 * eh.RADPERUAS)
    want = blurred.imvec.reshape(GRID.shape)
    got = em.blur_image(img, GRID, 5.0 * eh.RADPERUAS)
    assert_allclose(got, want, rtol=1e-12)
