"""Property-based tests (hypothesis) over constructor arguments and loader input:
every input gives either a documented exception whose message names the argument,
or a finite, correct result — never NaN, never a silent change of meaning.

The examples are derandomized (the `ci` profile in `conftest.py`): the same on
every run. `HYPOTHESIS_PROFILE=explore pytest tests/test_properties.py` draws
fresh ones; add what it finds as an `@example`."""

import math
import os
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, HealthCheck, settings, strategies as st

import eqmodels as em
from eqmodels._data._uvfits import UVFITSWarning


def names_one_of(err, *names):
    """The message names one of `names` (in backticks, ours; or quoted, the
    test-suite's type checker, which sees a wrongly typed argument first)."""
    msg = str(err)
    return any(f"`{n}`" in msg or f"'{n}'" in msg for n in names)


# `max_examples` is set here, so the `explore` profile's larger number is
# applied by hand.
_EXPLORE = os.environ.get("HYPOTHESIS_PROFILE") == "explore"
SETTINGS = settings(
    max_examples=500 if _EXPLORE else 25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
GRID = em.ImageGrid(8, 8, em.uas_to_rad(4.0))
P = GRID.psize

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**6), 10**6),
    st.sampled_from([0, -1, 1e-30, 1e30, math.pi]),
)


@SETTINGS
@given(
    npix=st.one_of(
        st.integers(-3, 70),
        st.tuples(st.integers(-1, 40), st.integers(-1, 40)),
        st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
        st.floats(-2, 70),
        st.none(),
    ),
    fov=numbers,
)
def test_from_fov(npix, fov):
    try:
        grid = em.ImageGrid.from_fov(npix, fov)
    except (TypeError, ValueError) as e:
        assert names_one_of(e, "npix", "fov_uas", "psize"), e
        return
    ny, nx = (npix, npix) if isinstance(npix, int) else npix
    assert grid.shape == (ny, nx)
    assert math.isclose(grid.psize, em.uas_to_rad(fov) / nx, rel_tol=1e-14)
    assert 1e-16 <= grid.psize <= 1e-3


@SETTINGS
@given(ny=st.integers(-1, 9), nx=st.integers(-1, 9), psize=numbers)
def test_image_grid(ny, nx, psize):
    try:
        grid = em.ImageGrid(ny, nx, psize)
    except (TypeError, ValueError) as e:
        assert names_one_of(e, "ny", "nx", "psize"), e
        return
    assert grid.psize == float(psize) and np.all(np.isfinite(grid.x))


scalars = st.one_of(
    st.floats(-1e3, 1e3).map(lambda x: x * P),
    st.sampled_from([0.0, -P, 1e-6 * P, 100 * P, math.nan, math.inf]),
)


@SETTINGS
@given(
    flux=st.floats(-2, 2),
    fwhm=scalars,
    x0=scalars,
    y0=scalars,
)
# Found by this test: σ = 1e-166 pixels overflowed `(offset/σ)²` to inf on every
# pixel, and the normalisation to NaN (σ is now floored at 1e-6 pixels).
@example(flux=1.0, fwhm=4.977247549921178e-177, x0=0.0, y0=0.0)
def test_gaussian_image(flux, fwhm, x0, y0):
    try:
        model = em.GaussianImage(GRID, flux, fwhm, x0=x0, y0=y0)
    except ValueError as e:
        assert names_one_of(e, "fwhm", "x0", "y0"), e
        return
    img = np.asarray(model())
    assert np.all(np.isfinite(img))
    assert math.isclose(img.sum(), flux, rel_tol=1e-12, abs_tol=1e-15)


@SETTINGS
@given(
    diameter=scalars,
    width=scalars,
    x0=scalars,
    asymmetry=st.floats(-1.5, 1.5),
)
@example(diameter=4 * P, width=1e-170 * P, x0=0.0, asymmetry=0.5)
def test_ring_image(diameter, width, x0, asymmetry):
    try:
        model = em.RingImage(GRID, 1.0, diameter, width, x0=x0, asymmetry=asymmetry)
    except ValueError as e:
        assert names_one_of(e, "diameter", "width", "x0", "asymmetry"), e
        return
    img = np.asarray(model())
    assert np.all(np.isfinite(img)) and np.all(img >= 0)
    assert math.isclose(img.sum(), 1.0, rel_tol=1e-12)


points = st.lists(
    st.one_of(st.floats(-1e10, 1e10), st.sampled_from([math.nan, -math.inf])),
    min_size=0,
    max_size=6,
)


@SETTINGS
@given(u=points, v=points, as_tuple=st.booleans())
def test_forward_points(u, v, as_tuple):
    conv = tuple if as_tuple else list
    try:
        model = em.make_forward("direct", GRID, conv(u), conv(v))
    except (TypeError, ValueError) as e:
        assert names_one_of(e, "u", "v"), e
        return
    vis = np.asarray(model(jnp.ones(GRID.shape) / GRID.npix))
    assert vis.shape == (len(u),) and np.all(np.isfinite(vis))


@SETTINGS
@given(
    image=st.lists(
        st.lists(
            st.one_of(st.floats(-1, 1), st.just(math.nan)), min_size=8, max_size=8
        ),
        min_size=7,
        max_size=9,
    ),
    transform=st.sampled_from(["log", "identity"]),
)
def test_pixel_image_from_lists(image, transform):
    try:
        model = em.PixelImage.from_image(image, GRID, transform=transform)
    except ValueError as e:
        assert names_one_of(e, "image"), e
        return
    assert_equal = np.testing.assert_allclose
    assert_equal(np.asarray(model()), np.asarray(image), rtol=1e-14)


# ------------------------------------------------------------------- loaders
UVFITS = em.example_uvfits()  # the file shipped in eqmodels/data
_RAW = UVFITS.read_bytes() if UVFITS.exists() else b""
_DATA_START, _DATA_END = 8640, 8640 + 84 * 2367


def _load_corrupted(tmp_path, edits):
    """The test file with the bytes `edits` (offset, value) changed, loaded; `None`
    if it is refused, which must be a `ValueError` naming the file."""
    raw = bytearray(_RAW)
    for offset, value in edits:
        raw[offset] = value
    path = tmp_path / "corrupt.uvfits"
    path.write_bytes(bytes(raw))
    try:
        # Rows dropped or suspect are named in a warning (issue 41: the rows
        # and the reason); what is loaded is checked below.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UVFITSWarning)
            return em.load_uvfits(path)
    except ValueError as e:
        assert "corrupt.uvfits" in str(e), e
        return None


@pytest.fixture(scope="module")
def reference():
    pytest.importorskip("astropy")
    return em.load_uvfits(UVFITS)


@settings(
    max_examples=500 if _EXPLORE else 12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    edits=st.lists(
        st.tuples(st.integers(_DATA_START, _DATA_END - 1), st.integers(0, 255)),
        min_size=1,
        max_size=6,
    )
)
# Found by this test: one byte of group 5's BASELINE (2-3 = 515.0, float32
# 0x4400C000 -> 0x44008000) makes it the autocorrelation 2-2, which the loader
# dropped without counting it.
@example(edits=[(_DATA_START + 84 * 5 + 4 * 3 + 2, 0x80)])
def test_corrupted_uvfits_loads_plausibly_or_is_refused(tmp_path, reference, edits):
    d = _load_corrupted(tmp_path, edits)
    if d is None:
        return
    # Every row kept is finite and physically plausible; every row is accounted for.
    assert d.n_rows + d.n_flagged == reference.n_rows
    assert d.n_flagged <= len(edits)
    for x in (d.u, d.v, d.vis, d.sigma, d.time):
        assert np.all(np.isfinite(np.asarray(x)))
    xyz = np.asarray(d.station_xyz)
    length = np.linalg.norm(xyz[np.asarray(d.ant1)] - xyz[np.asarray(d.ant2)], axis=1)
    assert np.all(d.uvdist * 299792458.0 / d.freq <= length * 1.001 + 10.0)
    assert np.abs(np.asarray(d.vis)).max() <= 1e6
    assert float(np.ptp(np.asarray(d.time))) <= 24.0 * 60


@settings(
    max_examples=500 if _EXPLORE else 40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    edits=st.lists(
        st.tuples(
            st.one_of(
                st.integers(0, _DATA_START - 1),  # the primary header
                st.integers(_DATA_END, max(len(_RAW), _DATA_END + 1) - 1),  # tables
            ),
            st.one_of(st.integers(32, 126), st.integers(0, 255)),
        ),
        min_size=1,
        max_size=4,
    )
)
# Found by the fuzzing that preceded this test (eqmodels' own FITS reader): a
# STABXYZ byte giving a station 3.9e78 m from the Earth (a float32 overflow when
# the data were stored without x64), and TFORM2 = '3A', whose strings reached a
# float conversion as a bare ValueError without the file's name.
@example(edits=[(-(-_DATA_END // 2880) * 2880 + 80 * 11 + 12, ord("A"))])
def test_corrupted_uvfits_headers_and_tables_load_or_are_refused(
    tmp_path, reference, edits
):
    """Corrupt header or table bytes: the file loads (every value finite, every
    station on or near the Earth) or is refused with a `ValueError` naming it —
    never another exception or a numpy warning."""
    d = _load_corrupted(tmp_path, edits)
    if d is None:
        return
    for x in (d.u, d.v, d.vis, d.sigma, d.time, d.tint):
        assert np.all(np.isfinite(np.asarray(x)))
    assert np.all(np.linalg.norm(np.asarray(d.station_xyz), axis=1) <= 1e8)
