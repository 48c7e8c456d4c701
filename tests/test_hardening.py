"""Issue 12: bad or edge-case input never becomes a silent wrong answer.

One section per class of failure found by the survey of ~280 bad inputs: each
case either raises the documented exception with a message naming the argument
(and the fix), or gives a finite, correct result.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from eqmodels._data import _uvfits as em_uvfits
from tests.helpers import assert_allclose
from tests.problems import random_image, random_points


GRID = em.ImageGrid(8, 8, em.uas_to_rad(4.0))
P = GRID.psize
U, V = random_points(GRID, 10)


# ------------------------------------------------- 1. ordinary Python input
def test_points_take_lists_tuples_and_arrays():
    # The dtype resolution and checks shared by every forward model.
    from eqmodels._forward._base import prepare_points

    for conv in (lambda a: a.tolist(), lambda a: tuple(a.tolist()), jnp.asarray):
        u, v, dtype = prepare_points(GRID, conv(U), conv(V), None, "test")
        assert dtype == np.float64
        assert_allclose(u, U, rtol=0)
        assert_allclose(v, V, rtol=0)
    u, v, dtype = prepare_points(GRID, [0, 10**9], (2 * 10**9, 10**9), None, "test")
    assert dtype == np.float64 and u.dtype == np.float64


@pytest.mark.parametrize("cls", [em.DirectFT, em.SeparableFT, em.NUFFT])
@pytest.mark.parametrize("conv", [list, tuple], ids=["list", "tuple"])
def test_forward_models_take_lists_under_the_type_checker(cls, conv):
    # The test-suite runs under jaxtyping + beartype: the `u`, `v` annotations of
    # the constructors and of `at` admit sequences (and integers), as the code does.
    kw = {"eps": 1e-12} if cls is em.NUFFT else {}
    img = jnp.asarray(random_image(GRID))
    ref = em.DirectFT(GRID, U, V)(img)
    model = cls(GRID, conv(U.tolist()), conv(V.tolist()), **kw)
    assert_allclose(model(img), ref, rtol=1e-10)
    moved = model.at(conv(V.tolist()), conv(U.tolist()))
    assert_allclose(moved(img), em.DirectFT(GRID, V, U)(img), rtol=1e-10)
    # Integer wavelengths (1 and 2 Gλ: a warning names points far too short).
    ints = cls(GRID, conv([0, 10**9]), np.array([0, 2 * 10**9]), **kw)
    assert ints.dtype == np.float64 and ints.shape == (2,)


@pytest.mark.parametrize("kind", ["direct", "separable", "nufft"])
def test_make_forward_takes_tuples(kind):
    kw = {"eps": 1e-12} if kind == "nufft" else {}
    model = em.make_forward(kind, GRID, tuple(U.tolist()), tuple(V.tolist()), **kw)
    assert model.shape == (10,)


def test_pixel_image_takes_nested_lists():
    img = random_image(GRID)
    a = em.PixelImage.from_image(img.tolist(), GRID)
    b = em.PixelImage.from_image(tuple(map(tuple, img.tolist())), GRID)
    assert_allclose(a(), img, rtol=1e-15)
    assert_allclose(b(), img, rtol=1e-15)
    c = em.PixelImage(GRID, np.log(img).tolist())
    assert_allclose(c(), img, rtol=1e-15)
    # Integer images are converted (log of an integer array would be float anyway).
    d = em.PixelImage.from_image(np.ones(GRID.shape, np.int64), GRID)
    assert d.params.dtype == jnp.float64
    assert_allclose(d(), np.ones(GRID.shape), rtol=0)


def test_ragged_lists_are_a_clear_type_error():
    with pytest.raises(TypeError, match="`u`"):
        em.make_forward("direct", GRID, [[0.0, 1.0], [2.0]], [[0.0, 1.0], [2.0]])
    with pytest.raises(TypeError, match="`u`"):
        em.make_forward("direct", GRID, ["a", "b"], [0.0, 1.0])


# ------------------------------------------------- 2. opaque errors → clear ones
@pytest.mark.parametrize(
    "npix,fov,exc,match",
    [
        (0, 100.0, ValueError, "`npix`"),
        ((8, 0), 100.0, ValueError, "`npix`"),
        # (TypeErrors: under the test-suite's type checker the annotation catches
        # these first, also naming the argument.)
        ((8, 8, 8), 100.0, TypeError, "npix"),
        ("64", 100.0, TypeError, "npix"),
        (8.0, 100.0, TypeError, "npix"),
        (8, 0.0, ValueError, "`fov_uas`"),
        (8, float("inf"), ValueError, "`fov_uas`"),
        (8, "128", TypeError, "fov_uas"),
    ],
)
def test_from_fov_errors_name_the_argument(npix, fov, exc, match):
    with pytest.raises(exc, match=match):
        em.ImageGrid.from_fov(npix, fov)


def test_integer_image_gets_a_fix_that_exists():
    model = em.DirectFT(GRID, U, V)
    # (`_check_image` is what `__call__` runs; called directly here because the
    # test-suite's type checker refuses an integer image at the annotation first.)
    with pytest.raises(TypeError, match="astype") as info:
        model._check_image(jnp.ones(GRID.shape, jnp.int64))
    assert "dtype=jnp.int64" not in str(info.value)
    with pytest.raises(TypeError, match="`dtype`.*leave `dtype` out"):
        em.PixelImage.from_image(np.ones(GRID.shape, int), GRID, dtype=np.int64)
    with pytest.raises(TypeError, match="`dtype`"):
        em.DirectFT(GRID, U, V, dtype="not a dtype")


def test_pixel_image_needs_a_grid():
    from eqmodels._validation import check_grid

    with pytest.raises(TypeError, match="grid"):
        em.PixelImage.from_image(np.ones((8, 8)), (8, 8))
    with pytest.raises(TypeError, match="grid"):
        em.PixelImage.from_prior(np.ones((8, 8)), (8, 8))
    with pytest.raises(TypeError, match="`grid` must be an `ImageGrid`"):
        check_grid((8, 8))


# ------------------------------------------------- 3. units and plausibility
def test_fov_in_radians_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="`fov_uas`.*radians.*rad_to_uas"):
        em.ImageGrid.from_fov(64, em.uas_to_rad(128.0))
    with pytest.raises(
        ValueError, match="`fov_uas`=1e\\+12 gives pixels of .* rad .*in µas"
    ):
        em.ImageGrid.from_fov(64, 1e12)  # far too large: not blamed on `psize`
    # (The test suite's type checker refuses it first, naming `psize` too.)
    with pytest.raises(TypeError, match="psize"):
        em.ImageGrid(8, 8, "1e-11")
    # A 0-d array is a number of µas too.
    for fov in (np.array(128.0), jnp.array(128.0)):
        assert em.ImageGrid.from_fov(64, fov) == em.ImageGrid.from_fov(64, 128.0)
    with pytest.raises(ValueError, match="`psize`.*radians twice"):
        em.ImageGrid(64, 64, em.uas_to_rad(em.uas_to_rad(2.0)))
    # The limits: a 1e-16 rad pixel is accepted, 3 arcminutes too.
    em.ImageGrid(4, 4, 1e-16)
    em.ImageGrid(4, 4, 1e-3)


# ------------------------------------------- 5. image models and regularizers
def _finite_value_and_grad(model):
    value = model()
    grads = eqx.filter_grad(
        lambda m: jnp.sum(m() * jnp.arange(m().size).reshape(m().shape))
    )(model)
    leaves = jax.tree_util.tree_leaves(eqx.filter(grads, eqx.is_inexact_array))
    assert np.all(np.isfinite(value))
    assert all(np.all(np.isfinite(g)) for g in leaves)
    return value


def test_gaussian_narrower_than_a_pixel_is_a_point_source():
    # Centred on pixel (3, 5)'s centre, 1e-3 pixel wide: all flux on that pixel.
    x0, y0 = GRID.x[5], GRID.y[3]
    model = em.GaussianImage(GRID, 1.5, 1e-3 * P, x0=x0, y0=y0)
    img = _finite_value_and_grad(model)
    expected = np.zeros(GRID.shape)
    expected[3, 5] = 1.5
    assert_allclose(img, expected, rtol=1e-14, atol=0)
    # On a pixel corner the flux is shared by the four nearest pixels.
    img = em.GaussianImage(GRID, 1.0, 1e-3 * P)()
    assert_allclose(img[3:5, 3:5], np.full((2, 2), 0.25), rtol=1e-12)


def test_thin_ring_stays_finite():
    model = em.RingImage(GRID, 1.0, 4 * P, 1e-3 * P, asymmetry=1.0)
    img = _finite_value_and_grad(model)
    assert_allclose(float(jnp.sum(img)), 1.0, rtol=1e-14)


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda: em.GaussianImage(GRID, 1.0, 3 * P, x0=100 * P), "`x0`"),
        (lambda: em.GaussianImage(GRID, 1.0, 3 * P, y0=-4.5 * P), "`y0`"),
        (lambda: em.RingImage(GRID, 1.0, 20 * P, P), "`diameter`"),
        (lambda: em.RingImage(GRID, 1.0, 4 * P, P, x0=3 * P), "`x0`"),
        # From a review: the width counts (d/2 = 3 px is inside the ±4 px field,
        # the outer half-maximum radius (d + w)/2 = 4.5 px is not).
        (lambda: em.RingImage(GRID, 1.0, 6 * P, 3 * P), "`width`"),
    ],
)
def test_models_outside_the_field_are_refused(build, match):
    with pytest.raises(ValueError, match=f"{match}.*field of view"):
        build()


def test_models_traced_outside_the_field_stay_finite():
    # Under jit the centre is not checked: the result is finite (nearest edge).
    model = em.GaussianImage(GRID, 1.0, 2 * P)
    far = eqx.tree_at(lambda m: m.x0, model, jnp.asarray(1e3 * P))
    img = eqx.filter_jit(lambda m: m())(far)
    assert np.all(np.isfinite(img))
    assert_allclose(float(jnp.sum(img)), 1.0, rtol=1e-14)


@pytest.mark.parametrize("flux", [None, 1.0])
def test_compactness_on_an_image_without_flux(flux):
    reg = em.Compactness(GRID, flux=flux)
    zero = jnp.zeros(GRID.shape)
    assert float(reg(zero)) == 0.0
    assert np.all(np.isfinite(jax.grad(reg)(zero)))
    # Flux that sums to 0: finite, = Σ I r² about the origin.
    mixed = jnp.zeros(GRID.shape).at[0, 0].set(1.0).at[7, 6].set(-1.0)
    if flux is None:
        xx, yy = GRID.coords()
        expected = np.sum(np.asarray(mixed) * (xx**2 + yy**2))
        assert expected != 0
        assert_allclose(reg(mixed), expected, rtol=1e-12)


def test_gaussian_moments_on_an_all_zero_image():
    reg = em.GaussianMoments(GRID, 3 * P, 2 * P, 0.3)
    zero = jnp.zeros(GRID.shape)
    gxx, gyy, gxy = (float(g) / P**2 for g in reg.target_covariance())
    expected = (gxx**2 + gyy**2 + 2 * gxy**2) / 36.0
    assert_allclose(reg(zero), expected, rtol=1e-12)
    assert np.all(np.isfinite(jax.grad(reg)(zero)))


@pytest.mark.parametrize("cls", [em.SimpleEntropy, em.GullSkillingEntropy])
def test_entropies_push_negative_pixels_back_up(cls):
    prior = np.full(GRID.shape, 1.0 / GRID.npix)
    reg = cls(prior)
    img = jnp.asarray(prior).at[2, 3].set(-0.01)
    base = jnp.asarray(prior).at[2, 3].set(0.0)
    assert_allclose(reg(img), reg(base) + 0.01, rtol=1e-13)
    g = jax.grad(reg)(img)
    assert np.all(np.isfinite(g)) and float(g[2, 3]) == -1.0


# ------------------------------------------------------------ 6. data integrity
fits = pytest.importorskip("astropy.io.fits")
UVFITS = em.example_uvfits()  # the file shipped in eqmodels/data
N_ROWS = 2367
# Layout of that file: a 2880-byte-block header of 8640 bytes, then 2367 groups of
# 9 float32 random parameters (UU, VV, WW, BASELINE, DATE, DATE, INTTIM, TAU1,
# TAU2) and 4 × 3 float32 data (stokes RR, LL, RL, LR × re, im, weight).
_OFFSET, _RECORD = 8640, 84


def _word(group, k):
    """Byte offset of 32-bit word `k` of group `group` (k < 9: parameters)."""
    return _OFFSET + _RECORD * group + 4 * k


@pytest.fixture(scope="module")
def local():
    return em.load_uvfits(UVFITS)


def _corrupt(tmp_path, edits):
    raw = bytearray(UVFITS.read_bytes())
    for offset, value in edits:
        raw[offset] = value
    out = tmp_path / "corrupt.uvfits"
    out.write_bytes(bytes(raw))
    return out


def test_corrupted_uvfits_rows_are_flagged_and_counted(tmp_path, local):
    path = _corrupt(
        tmp_path,
        [
            (_word(100, 0), 0x5E),  # UU exponent: |uv| ~ 1e18 wavelengths
            (_word(200, 9), 0x6E),  # RR real part: |V| ~ 1e28 Jy
            (_word(300, 5), 0x4E),  # second DATE: ~1e9 days later
            (_word(400, 11), 0x6E),  # RR and LL weights: sigma ~ 1e-14 Jy
            (_word(400, 14), 0x6E),
            (_word(500, 1), 0x7F),  # VV = NaN
            (_word(500, 1) + 1, 0xC0),
        ],
    )
    with pytest.warns(em_uvfits.UVFITSWarning, match=r"5 of 2367 rows dropped"):
        d = em.load_uvfits(path)
    assert d.n_flagged == 5 and d.n_rows == N_ROWS - 5
    xyz = np.asarray(d.station_xyz)
    length = np.linalg.norm(xyz[np.asarray(d.ant1)] - xyz[np.asarray(d.ant2)], axis=1)
    assert np.all(d.uvdist * 299792458.0 / d.freq <= length * (1 + 1e-6))
    assert np.abs(np.asarray(d.vis)).max() < 10.0
    assert float(d.time.max()) < 24.0 and d.mjd == local.mjd
    assert float(d.sigma.min()) >= float(local.sigma.min())
    # Unchecked, only the NaN row is dropped (and counted): the corrupt values load.
    with pytest.warns(em_uvfits.UVFITSWarning, match=r"1 of 2367 rows dropped"):
        raw = em.load_uvfits(path, check=False)
    assert raw.n_flagged == 1 and np.abs(np.asarray(raw.vis)).max() > 1e20


def test_uvfits_rows_with_nan_coordinates_count_as_flagged(tmp_path):
    edits = []
    # UU, VV, DATE, DATE, BASELINE (NaN), BASELINE (1e38: no integer)
    for g, k in ((10, 0), (20, 1), (30, 4), (40, 5), (50, 3)):
        edits += [(_word(g, k), 0x7F), (_word(g, k) + 1, 0xC0)]
    edits += [(_word(60, 3), 0x7E)]
    with pytest.warns(em_uvfits.UVFITSWarning, match=r"6 of 2367 rows dropped"):
        d = em.load_uvfits(_corrupt(tmp_path, edits))
    assert d.n_flagged == 6 and d.n_rows == N_ROWS - 6


def test_uvfits_baseline_corrupted_into_an_autocorrelation_is_counted(tmp_path):
    # Found by the property test: one byte of group 5's BASELINE turns 2-3 (515.0,
    # float32 0x4400C000) into 2-2 (514.0, 0x44008000). The loader drops
    # autocorrelations; it dropped this row without counting it.
    raw = UVFITS.read_bytes()
    assert raw[_word(5, 3) : _word(5, 3) + 4] == bytes.fromhex("4400c000")
    with pytest.warns(em_uvfits.UVFITSWarning, match=r"1 an autocorrelation"):
        d = em.load_uvfits(_corrupt(tmp_path, [(_word(5, 3) + 2, 0x80)]))
    assert d.n_flagged == 1 and d.n_rows == N_ROWS - 1
    # Every row is loaded or counted, whichever field of a row is hit.
    edits = [(_word(g, k), 0x7F) for g, k in ((7, 0), (8, 6), (9, 4), (11, 9))]
    with pytest.warns(em_uvfits.UVFITSWarning, match=r"rows dropped"):
        d = em.load_uvfits(_corrupt(tmp_path, edits + [(_word(5, 3) + 2, 0x80)]))
    assert d.n_rows + d.n_flagged == N_ROWS


def test_uvfits_with_a_wrong_station_table_is_refused(tmp_path):
    out = tmp_path / "shrunk.uvfits"
    with fits.open(UVFITS) as h:
        h["AIPS AN"].data["STABXYZ"] *= 1e-3  # an array 1000 times too small
        h.writeto(out)
    with pytest.raises(ValueError, match="plausibility.*AIPS AN.*check=False"):
        em.load_uvfits(out)
    assert em.load_uvfits(out, check=False).n_rows == N_ROWS


def test_duplicated_rows_are_refused_where_they_would_count_twice(local):
    twice = em.concatenate  # a data set concatenated with itself
    with pytest.raises(ValueError, match="`datasets` has 2367 duplicated row"):
        twice([local, local])
    # Built directly: the averages refuse, naming the fix.
    a = local._arrays()
    dup = em.VisData(
        *(np.concatenate([a[k], a[k][:3]]) for k in
          ("u", "v", "vis", "sigma", "time", "ant1", "ant2")),
        station_names=local.station_names, freq=local.freq, mjd=local.mjd,
    )  # fmt: skip
    assert dup.duplicate_rows().sum() == 3
    calls = [dup.scan_average, lambda: dup.time_average(10.0)]
    # ... and so do the closure products (from a review: "baseline (0, 5) appears
    # more than once", station indices and a fix that led to the averages).
    products = (em.closure_phases, em.log_closure_amplitudes, em.bispectra)
    calls += [lambda f=f: f(dup) for f in (*products, em.closure_amplitudes)]
    for call in calls:
        with pytest.raises(ValueError, match=r"`data` has 3 duplicated.*take\(~data"):
            call()
    clean = dup.take(~dup.duplicate_rows())
    assert clean.n_rows == N_ROWS
    assert_allclose(clean.scan_average().sigma, local.scan_average().sigma, rtol=0)
    # Separate bands are not duplicates.
    assert em.concatenate([local, local.replace(freq=229e9)]).n_rows == 2 * N_ROWS


def test_no_closures_message_names_the_cut(local):
    avg = local.scan_average()
    with pytest.raises(ValueError, match="`uv_min`=.*lower `uv_min`"):
        em.closure_phases(avg, uv_min=8e9)
    with pytest.raises(ValueError, match="lower `snr_cut`"):
        em.log_closure_amplitudes(avg, snr_cut=1e9)
    # Too few stations: the message says so (no cut to blame).
    with pytest.raises(ValueError, match="no timestamp has 3 stations"):
        em.bispectra(avg.select_stations(["AA", "LM"]))


def _fits_image(tmp_path, **cards):
    path = tmp_path / "img.fits"
    em.save_fits(np.ones((8, 6)) / 48, em.ImageGrid(8, 6, P), path, overwrite=True)
    with fits.open(path, mode="update") as h:
        for key, value in cards.items():
            if value is None:
                del h[0].header[key]
            else:
                h[0].header[key] = value
    return path


def test_load_fits_honours_the_header(tmp_path):
    img, grid = em.load_fits(_fits_image(tmp_path))
    assert grid.shape == (8, 6) and math.isclose(grid.psize, P, rel_tol=1e-12)
    # Other units: CDELT in µas with CUNIT.
    path = _fits_image(
        tmp_path, CDELT1=-4.0, CDELT2=4.0, CUNIT1="uas", CUNIT2="uas", PSIZE=None
    )
    assert math.isclose(em.load_fits(path)[1].psize, P, rel_tol=1e-12)
    for bad in ({"CRPIX1": 4.3}, {"CRPIX2": 0.5}, {"CRPIX2": 9.0}):
        ((key, value),) = bad.items()
        with pytest.raises(ValueError, match=f"{key} = {value} is neither .* regrid"):
            em.load_fits(_fits_image(tmp_path, **bad))
    with pytest.raises(ValueError, match="PSIZE.*CDELT1.*disagree"):
        em.load_fits(_fits_image(tmp_path, PSIZE=2 * P))
    with pytest.raises(ValueError, match="rotated"):
        em.load_fits(_fits_image(tmp_path, CROTA2=30.0))
    with pytest.raises(ValueError, match="CUNIT1"):
        em.load_fits(_fits_image(tmp_path, CUNIT1="furlong"))


@pytest.mark.parametrize("crpix", [(4.0, 5.0), (1.0, 8.0), (6.0, 1.5), (2.5, 4.5)])
def test_load_fits_centres_a_reference_pixel_off_the_centre(tmp_path, crpix):
    """From a review: DIFMAP, CASA and AIPS put the reference pixel at `n/2 + 1`
    for even `n`, and such images were refused. A reference pixel on a whole or
    half pixel inside the image is now centred by zero padding: every stored pixel
    lands where the FITS header places it on the sky, `((i - CRPIX1) CDELT1,
    (j - CRPIX2) CDELT2)` (1-based `i`, `j`), at the grid's pixel centres."""
    rng = np.random.default_rng(1)
    stored = rng.uniform(0.1, 1.0, (8, 6))  # FITS order: row j (axis 2), column i
    cdelt = np.degrees(P)
    header = {
        "CTYPE1": "RA---SIN", "CTYPE2": "DEC--SIN", "CDELT1": -cdelt,
        "CDELT2": cdelt, "CRPIX1": crpix[0], "CRPIX2": crpix[1],
        "CRVAL1": 187.7, "CRVAL2": 12.4,
    }  # fmt: skip
    path = tmp_path / "off.fits"
    hdu = fits.PrimaryHDU(stored)
    hdu.header.update(header)
    hdu.writeto(path)
    img, grid = em.load_fits(path)
    assert_allclose(img.sum(), stored.sum(), rtol=1e-14)
    for j in range(8):
        for i in range(6):
            x = (i + 1 - crpix[0]) * -P  # east offset, radians (east is +x)
            y = (j + 1 - crpix[1]) * P
            ix = grid.nx / 2 - 0.5 - x / P
            iy = grid.ny / 2 - 0.5 - y / P
            assert ix == round(ix) and iy == round(iy)
            assert img[round(iy), round(ix)] == stored[j, i]
    assert np.count_nonzero(img) == stored.size


# ------------------------------------------- 3b. data terms: impossible values
_FWD = em.DirectFT(GRID, U, V)
_FWD4 = em.DirectFT(GRID, *random_points(GRID, 0, shape=(5, 4)))
_ONES, _ONES4 = np.ones(10), np.ones(5)


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda a: em.AmpChi2(_FWD, a, _ONES), "`amp` has 1 negative"),
        (lambda a: em.ClosureAmpChi2(_FWD4, a[:5], _ONES4), "`camp`.*LogClosure"),
    ],
)
def test_negative_amplitudes_are_refused(build, match):
    values = np.full(10, 0.5)
    build(values.copy())  # fine; so are zeros (a debiased amplitude can be 0)
    build(np.zeros(10))
    values[3] = -0.2
    with pytest.raises(ValueError, match=match):
        build(values)


def test_absurd_or_non_finite_term_values_are_refused():
    with pytest.raises(ValueError, match="`amp` reaches 1e\\+09 Jy.*Jy"):
        em.AmpChi2(_FWD, np.full(10, 1e9), _ONES)
    with pytest.raises(ValueError, match="`vis` reaches .* Jy"):
        em.VisChi2(_FWD, np.full(10, 3e7j), _ONES)
    for name, build in (
        ("amp", lambda x: em.AmpChi2(_FWD, x, _ONES)),
        ("camp", lambda x: em.ClosureAmpChi2(_FWD4, x[:5], _ONES4)),
        ("logcamp", lambda x: em.LogClosureAmpChi2(_FWD4, x[:5], _ONES4)),
    ):
        bad = np.ones(10)
        bad[1] = np.nan
        with pytest.raises(ValueError, match=f"`{name}` has 1 non-finite"):
            build(bad)
    # Log closure amplitudes are any real number (negative ones included).
    em.LogClosureAmpChi2(_FWD4, -np.ones(5), _ONES4)


def test_term_value_checks_skip_traced_values():
    # Modules are rebuilt with traced leaves under jit/vmap: no concrete check.
    term = em.AmpChi2(_FWD, np.full(10, 0.5), _ONES)
    img = jnp.asarray(random_image(GRID))

    def chi2(amp):
        return em.AmpChi2(_FWD, amp, _ONES)(img)

    vals = jax.vmap(chi2)(jnp.stack([term.amp, -term.amp]))
    assert np.all(np.isfinite(vals))


# ------------------------------------------------- 4. objectives: weights, grids
_AMP = em.AmpChi2(_FWD, np.full(10, 0.5), _ONES)
_TV = em.TV(GRID)
GRID_5 = em.ImageGrid(8, 8, em.uas_to_rad(5.0))  # same shape, other pixel size


@pytest.mark.parametrize(
    "build,exc,match",
    [
        (lambda: -1.0 * _AMP, ValueError, "`weight` must be >= 0.*reward"),
        (lambda: math.nan * _AMP, ValueError, "`weight` must be finite"),
        (lambda: _AMP * math.inf, ValueError, "`weight` must be finite"),
        (lambda: _AMP / 0, ZeroDivisionError, "`weight` of 0.*`0 \\* term`"),
        (lambda: _AMP / -2.0, ValueError, "`weight` must be >= 0"),
        (lambda: _AMP / math.inf, ValueError, "`weight` must be finite"),
        # Python's "unsupported operand type(s)" said nothing of what to do.
        (lambda: _AMP + 3, TypeError, r"`term \+ 3`.*chi2_offset=True"),
        (lambda: 1.0 + _TV, TypeError, r"`term \+ 1\.0`.*weighted sum"),
        (lambda: (_AMP + _TV) - 1, TypeError, r"`term - 1`"),
        (lambda: np.float64(2.0) - _TV, TypeError, r"`term - 2\.0`"),
        (lambda: _AMP - _TV, TypeError, "cannot be subtracted.*reward"),
        (lambda: _AMP + "tv", TypeError, "unsupported operand"),
        (lambda: em.Objective([_AMP, _TV], [1.0, -1.0]), ValueError, "`weights`"),
        (lambda: em.Objective([_AMP, _TV], [1.0, math.nan]), ValueError, "`weights`"),
        (lambda: (_AMP + _TV).with_weights([math.inf, 1.0]), ValueError, "`weights`"),
        (lambda: (_AMP + _TV).with_weights([1.0, -0.5]), ValueError, "`weights`"),
        (lambda: (_AMP + _TV).with_weights([True, True]), TypeError, "`weights`"),
        # Strings were parsed as numbers; a string of names was split into letters.
        # (the suite's type checker refuses strings first; see
        # test_regularizers.py::test_own_messages_without_the_type_checker)
        (lambda: em.Objective([_AMP, _TV], ["1", "2"]), TypeError, "weights"),
        (lambda: (_AMP + _TV).with_weights(["1", "2"]), TypeError, "weights"),
        (
            lambda: em.Objective([_AMP, _TV], names="ab"),
            TypeError,
            "`names` must be a sequence of strings.*the string 'ab'",
        ),
    ],
)
def test_bad_weights_are_refused(build, exc, match):
    with pytest.raises(exc, match=match):
        build()


def test_zero_weights_switch_terms_off_and_traced_weights_pass():
    obj = 0 * _AMP + _TV
    img = jnp.asarray(random_image(GRID))
    assert_allclose(obj(img), _TV(img), rtol=1e-15)
    assert em.Objective([_AMP, _TV], [0, 0]).weights.tolist() == [0.0, 0.0]
    # Under vmap the weights are tracers: no concrete check, any value computes.
    ws = jnp.array([[1.0, 2.0], [0.0, 1.0], [-1.0, 1.0]])
    vals = jax.jit(jax.vmap(lambda w: (_AMP + _TV).with_weights(w)(img)))(ws)
    assert_allclose(vals[2], -_AMP(img) + _TV(img), rtol=1e-13)


@pytest.mark.parametrize(
    "build",
    [
        lambda: (
            _AMP + em.AmpChi2(em.DirectFT(GRID_5, 0.7 * U, 0.7 * V), np.ones(10), _ONES)
        ),
        lambda: _AMP + em.TV(GRID_5),
        lambda: (_AMP + 2 * _TV) + em.Centroid(GRID_5),
        lambda: em.Objective([em.TV(GRID_5), _AMP]),
        # A member of a built objective holds no forward model: its grid comes
        # from the objective's shared transform.
        lambda: em.Objective([_AMP + _AMP, em.TV(GRID_5)]),
    ],
)
def test_objective_terms_on_different_grids_are_refused(build):
    with pytest.raises(ValueError, match="`terms` are on different image grids") as e:
        build()
    assert "4 µas" in str(e.value) and "5 µas" in str(e.value)


def test_image_model_on_another_grid_is_refused():
    model = em.PixelImage.from_image(random_image(GRID_5), GRID_5)
    obj = _AMP + _AMP + _TV
    data = _AMP + 2 * _AMP
    assert obj.terms[0].forward is None
    for f in (_AMP, _TV, em.Centroid(GRID), obj, data.residuals, _AMP.residuals):
        with pytest.raises(ValueError, match="`image` is a PixelImage on .*5 µas"):
            f(model)
    # At trace time too (grids are static).
    with pytest.raises(ValueError, match="`image`.*grid"):
        eqx.filter_jit(lambda o, m: o(m))(obj, model)
    # The same pixels built another way are the same grid.
    same = em.ImageGrid.from_fov(8, 32.0)
    good = em.PixelImage.from_image(random_image(GRID), same)
    assert np.isfinite(obj(good))


# ------------------------------------------- 4b. from_data: the wrong product
def test_from_data_with_the_wrong_product_is_a_type_error(local):
    avg = local.scan_average()
    cphase = em.closure_phases(avg)
    cases = [
        (em.AmpChi2, cphase, "`AmpProducts`.*amplitudes\\(data\\).*no `amp`"),
        (em.ClosurePhaseChi2, avg, "`ClosurePhaseProducts`.*VisData.*`cphase`"),
        (em.VisChi2, em.amplitudes(avg), "`VisData`.*AmpProducts.*`vis`"),
        (em.LogClosureAmpChi2, em.closure_amplitudes(avg), "LogClosureAmpProducts"),
        (em.BispectrumChi2, cphase, "`BispectrumProducts`.*bispectra"),
    ]
    for cls, data, match in cases:
        with pytest.raises(TypeError, match="`data` must be .*" + match):
            cls.from_data(data, GRID)
    # Right attributes, wrong points: a duck-typed product with (n,) points.
    amp = em.amplitudes(avg)
    duck = type("Duck", (), dict(u=amp.u, v=amp.v, cphase=amp.amp, sigma=amp.sigma))
    with pytest.raises(TypeError, match="`data` must be .*shape \\(n, 3\\)"):
        em.ClosurePhaseChi2.from_data(duck(), GRID)


def test_ring_whose_only_bright_pixel_has_no_flux_stays_finite():
    """A ring far thinner than a pixel keeps (after the `exp` shift) only the
    pixel nearest its peak; with `asymmetry=-1` that pixel's brightness factor is 0,
    and the image was 0/0 = NaN everywhere."""
    grid = em.ImageGrid(8, 8, P)
    model = em.RingImage(
        grid,
        0.6,
        2 * np.hypot(0.4, 0.4) * P,
        1e-6 * P,
        x0=0.1 * P,
        y0=0.1 * P,
        asymmetry=-1.0,
        asymmetry_angle=np.pi / 4,
    )
    img = _finite_value_and_grad(model)
    assert np.all(img >= 0)
    assert_allclose(float(jnp.sum(img)), 0.6, rtol=1e-14)


def test_uvfits_rows_beyond_float32_are_flagged(tmp_path):
    """A row whose scaled integration time exceeds float32 (which VisData holds
    without x64) is corrupt: dropped and counted, not loaded as inf."""
    card = b"PSCAL7  =                  1.0"
    assert UVFITS.read_bytes().count(card) == 1  # INTTIM's scale
    edits = []
    for g in (3, 4):  # INTTIM = float32 max (0x7F7FFFFF)
        edits += [(_word(g, 6) + i, b) for i, b in enumerate((0x7F, 0x7F, 0xFF, 0xFF))]
    path = _corrupt(tmp_path, edits)
    raw = path.read_bytes()
    path.write_bytes(raw.replace(card, b"PSCAL7  =                  2.0"))
    with pytest.warns(em_uvfits.UVFITSWarning, match=r"2 of 2367 rows dropped"):
        d = em.load_uvfits(path)
    assert d.n_flagged == 2 and d.n_rows == N_ROWS - 2
    assert np.all(np.isfinite(np.asarray(d.tint, np.float32)))


def test_closure_phase_chi2_of_a_nan_image_is_nan():
    """From a review: a NaN bispectrum took the branch meant for an exactly-zero
    one (phase 0), so a NaN image had a finite χ² (a zero image's); only an exact
    zero is a zero phase."""
    data = em.load_uvfits(em.example_uvfits()).scan_average()
    grid = em.ImageGrid.from_fov(16, 128.0)
    term = em.ClosurePhaseChi2.from_data(em.closure_phases(data), grid)
    nan = jnp.zeros(grid.shape).at[3, 4].set(jnp.nan) + 1e-3
    # Under `jit` (as in a solve; outside it a NaN image is refused, issue 41).
    assert np.isnan(float(eqx.filter_jit(term)(nan)))
    # The exactly-zero image keeps its documented value: every model phase 0.
    zero = float(term(jnp.zeros(grid.shape)))
    psi, w = np.asarray(term.cphase), np.asarray(term.weight)
    assert_allclose(zero, 2 * np.sum(w * (1 - np.cos(psi))) / len(psi), rtol=1e-12)
