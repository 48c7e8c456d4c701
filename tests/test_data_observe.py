"""Synthetic observations: sidereal time, Earth-rotation uv tracks, elevation
limits, thermal noise from the radiometer equation, station errors."""

import math
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as eqm
from eqmodels._data import _earth

from .conftest import TEST_DATA
from .helpers import assert_allclose
from .reference import data_earth as ref
from .unchecked import unchecked_script


LOCAL = TEST_DATA / "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits"
M87 = dict(ra=187.7059307575226, dec=12.39112323919932)
R_EARTH = 6.371e6


def _grid_and_image(npix=16, fov=128.0):
    grid = eqm.ImageGrid.from_fov(npix, fov)
    xx, yy = grid.coords()
    s = 10 * eqm.RAD_PER_UAS
    img = np.exp(-((xx - s) ** 2 + yy**2) / (2 * s**2))
    return grid, jnp.asarray(img / img.sum())


# ------------------------------------------------------------------ geometry
def test_gmst_against_iau1982_and_file_header():
    mjd = np.array([51544, 57854, 58228])
    hours = np.array([0.0, 7.25, 23.9])
    got = _earth.gmst(mjd, hours)
    want = ref.gmst_iau1982(mjd.astype(float), hours)
    assert np.max(np.abs(np.angle(np.exp(1j * (got - want))))) < 2e-6  # < 0.1 s
    # The AIPS AN table of the 2017-04-10 file records GST at 0h UTC (GSTIA0).
    fits = pytest.importorskip("astropy.io.fits")
    with fits.open(LOCAL) as h:
        gstia0 = h["AIPS AN"].header["GSTIA0"]
    g0 = math.degrees(float(_earth.gmst(57853, 0.0)))
    assert abs(g0 - gstia0) < 0.01


def test_uvw_closed_form_against_rotations():
    rng = np.random.default_rng(0)
    for _ in range(20):
        b = rng.normal(size=3) * 5e6
        h, dec = rng.uniform(-np.pi, np.pi), rng.uniform(-1.5, 1.5)
        got = np.array(_earth.baseline_uvw(b, h, dec), dtype=float)
        assert_allclose(got, np.array(ref.uvw(b, h, dec)), rtol=1e-13)


def test_uv_track_of_a_hand_computed_baseline():
    """Two stations on the equator at longitudes 0° and 180°: B = r1 - r2 =
    (2R, 0, 0), so u = 2R/λ sin H and v = -2R/λ sin δ cos H, with the hour angle
    H growing at the sidereal rate from H = 0 at t0."""
    array = eqm.StationTable(
        ("E0", "E180"), np.array([[R_EARTH, 0, 0], [-R_EARTH, 0, 0]]), [1e3, 1e3]
    )
    mjd, t0, freq, dec = 57854, 3.0, 230e9, 30.0
    ra = math.degrees(float(_earth.gmst(mjd, t0)))  # source transits at t0
    times = t0 + np.linspace(-3, 3, 13)
    tr = eqm.uv_tracks(
        array, ra=ra, dec=dec, freq=freq, mjd=mjd, times=times, elevation_limit=False
    )
    lam = 299792458.0 / freq
    # Sidereal rate: Earth rotation angle plus the GMST precession term
    # (4612.156534″ per Julian century).
    days = (times - t0) / 24.0
    h = 2 * np.pi * 1.00273781191135448 * days
    h += 4612.156534 / 36525.0 * math.pi / 180 / 3600 * days
    L = 2 * R_EARTH / lam
    assert_allclose(tr["u"], L * np.sin(h), atol=1e-9 * L)
    assert_allclose(
        tr["v"], -L * math.sin(math.radians(dec)) * np.cos(h), atol=1e-9 * L
    )
    assert_allclose(tr["w"], L * math.cos(math.radians(dec)) * np.cos(h), atol=1e-9 * L)
    # A polar baseline has u = 0 and constant v = cos δ |B|/λ.
    polar = eqm.StationTable(
        ("N", "S"), np.array([[0, 0, R_EARTH], [0, 0, -R_EARTH]]), [1e3, 1e3]
    )
    tp = eqm.uv_tracks(
        polar, ra=ra, dec=dec, freq=freq, mjd=mjd, times=times, elevation_limit=False
    )
    assert np.max(np.abs(tp["u"])) < 1e-9 * L
    assert_allclose(tp["v"], np.full(times.size, L * math.cos(math.radians(dec))))


def test_uv_tracks_reproduce_the_real_file():
    """The Earth-rotation (u, v) from the AN-table positions at the file's times
    match the correlator's (u, v) (differences: precession, nutation, UT1 - UTC,
    aberration — all below 1e-3)."""
    d = eqm.load_uvfits(LOCAL)
    names = d.station_names
    table = eqm.StationTable(names, np.asarray(d.station_xyz), np.ones(len(names)))
    t = d.timestamps()
    tr = eqm.uv_tracks(
        table,
        ra=d.ra,
        dec=d.dec,
        freq=d.freq,
        mjd=d.mjd,
        times=t,
        elevation_limit=False,
    )
    key = {
        (float(tt), int(a), int(b)): k
        for k, (tt, a, b) in enumerate(zip(tr["time"], tr["ant1"], tr["ant2"]))
    }
    idx = [
        key[(float(tt), int(a), int(b))]
        for tt, a, b in zip(np.asarray(d.time), np.asarray(d.ant1), np.asarray(d.ant2))
    ]
    du = np.hypot(tr["u"][idx] - np.asarray(d.u), tr["v"][idx] - np.asarray(d.v))
    rel = du / d.uvdist
    long = d.uvdist > 1e9
    assert np.median(rel[long]) < 2e-5
    assert np.max(rel[long]) < 1e-3


def test_elevation_limit():
    array = eqm.EHT2017
    times = np.linspace(0, 24, 49)[:-1]
    tr = eqm.uv_tracks(array, **M87, freq=230e9, mjd=57854, times=times)
    assert np.all(tr["el1"] >= 10) and np.all(tr["el2"] >= 10)
    sp = array.names.index("SP")  # M87 (dec +12°) never rises at the South Pole
    assert sp not in set(tr["ant1"]) | set(tr["ant2"])
    # Independent elevation: the source direction against the local vertical.
    lat, lon, _ = _earth.geodetic(np.asarray(array.xyz))
    up = np.stack(
        [np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1
    )
    g = _earth.gmst(57854, times)
    ra, dec = math.radians(M87["ra"]), math.radians(M87["dec"])
    hh = g - ra
    src = np.stack(
        [
            np.cos(dec) * np.cos(-hh),
            np.cos(dec) * np.sin(-hh),
            np.full_like(hh, np.sin(dec)),
        ],
        axis=1,
    )
    el_ref = np.degrees(np.arcsin(src @ up.T))
    el = np.degrees(_earth.elevation(np.asarray(array.xyz), g, ra, dec))
    assert_allclose(el, el_ref, atol=1e-9)
    full = eqm.uv_tracks(
        array, **M87, freq=230e9, mjd=57854, times=times, elevation_limit=False
    )
    assert full["u"].size == times.size * 28 > tr["u"].size


def test_geodetic_round_trip():
    a, f = _earth.WGS84_A, _earth.WGS84_F
    e2 = f * (2 - f)
    rng = np.random.default_rng(3)
    lat = rng.uniform(-1.5, 1.5, 20)
    lon = rng.uniform(-3, 3, 20)
    h = rng.uniform(0, 5000, 20)
    n = a / np.sqrt(1 - e2 * np.sin(lat) ** 2)
    xyz = np.stack(
        [
            (n + h) * np.cos(lat) * np.cos(lon),
            (n + h) * np.cos(lat) * np.sin(lon),
            (n * (1 - e2) + h) * np.sin(lat),
        ],
        axis=1,
    )
    lat2, lon2, h2 = _earth.geodetic(xyz)
    assert_allclose(lat2, lat, atol=1e-12)
    assert_allclose(lon2, lon, atol=1e-12)
    assert_allclose(h2, h, atol=1e-6)


# ------------------------------------------------------------------ observe
def test_observe_noise_free_equals_forward_model():
    grid, img = _grid_and_image()
    times = np.arange(0, 24, 0.5)
    d = eqm.observe(
        img, grid, eqm.EHT2017, **M87, mjd=57854, times=times, add_noise=False
    )
    tr = eqm.uv_tracks(eqm.EHT2017, **M87, freq=230e9, mjd=57854, times=times)
    assert_allclose(d.u, tr["u"], rtol=0)
    assert_allclose(d.vis, eqm.DirectFT(grid, tr["u"], tr["v"])(img))
    assert d.station_names == eqm.EHT2017.names
    assert d.source == "SIM" and d.freq == 230e9 and d.mjd == 57854
    assert np.all(np.asarray(d.tint) == 10.0)
    # Any forward-model class can be passed.
    d2 = eqm.observe(
        img, grid, eqm.EHT2017, **M87, mjd=57854, times=times, add_noise=False,
        forward=eqm.SeparableFT,
    )  # fmt: skip
    assert_allclose(d2.vis, d.vis, rtol=1e-10)
    # An image model is accepted too.
    model = eqm.PixelImage.from_image(img + 1e-6, grid)
    d3 = eqm.observe(
        model, grid, eqm.EHT2017, **M87, mjd=57854, times=times, add_noise=False
    )
    assert_allclose(d3.vis, eqm.DirectFT(grid, tr["u"], tr["v"])(img + 1e-6))


def test_thermal_noise_follows_the_radiometer_equation():
    grid, img = _grid_and_image()
    times = np.arange(0, 24, 1 / 60)  # one row per minute: ~15k rows
    kw = dict(**M87, mjd=57854, times=times, integration=10.0, bandwidth=2e9)
    clean = eqm.observe(img, grid, eqm.EHT2017, add_noise=False, **kw)
    noisy = eqm.observe(img, grid, eqm.EHT2017, seed=7, **kw)
    # The ALMA-LMT sigma by hand: sqrt(74 · 4500 / (2 · 2e9 · 10)) / 0.88 / sqrt(2).
    names = eqm.EHT2017.names
    aa, lm = names.index("AA"), names.index("LM")
    k = np.flatnonzero((np.asarray(noisy.ant1) == aa) & (np.asarray(noisy.ant2) == lm))
    hand = math.sqrt(74.0 * 4500.0 / (2 * 2e9 * 10.0)) / 0.88 / math.sqrt(2)
    assert k.size > 0
    assert_allclose(np.asarray(noisy.sigma)[k], np.full(k.size, hand))
    z = (np.asarray(noisy.vis) - np.asarray(clean.vis)) / np.asarray(noisy.sigma)
    n = z.size
    assert n > 5000
    for part in (z.real, z.imag):
        assert abs(part.mean()) < 5 / math.sqrt(n)
        assert abs(part.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs(np.mean(z.real * z.imag)) < 5 / math.sqrt(n)
    # Same seed, same noise; another seed, other noise.
    again = eqm.observe(img, grid, eqm.EHT2017, seed=7, **kw)
    assert np.array_equal(np.asarray(again.vis), np.asarray(noisy.vis))
    other = eqm.observe(img, grid, eqm.EHT2017, seed=8, **kw)
    assert not np.array_equal(np.asarray(other.vis), np.asarray(noisy.vis))


def test_station_errors_leave_closures_unchanged():
    grid, img = _grid_and_image()
    kw = dict(**M87, mjd=57854, times=np.arange(0, 24, 0.25), add_noise=False)
    clean = eqm.observe(img, grid, eqm.EHT2017, **kw)
    bad = eqm.observe(
        img, grid, eqm.EHT2017, gain_sigma=0.2, random_phases=True, seed=1, **kw
    )
    cp0, cp1 = eqm.closure_phases(clean), eqm.closure_phases(bad)
    d = np.angle(np.exp(1j * (np.asarray(cp1.cphase) - np.asarray(cp0.cphase))))
    assert np.max(np.abs(d)) < 1e-10
    # Debiasing uses |V|/σ, which gains change here (σ comes from the SEFDs): compare
    # the raw closure amplitudes.
    lc0 = eqm.log_closure_amplitudes(clean, debias=False)
    lc1 = eqm.log_closure_amplitudes(bad, debias=False)
    assert_allclose(lc1.logcamp, lc0.logcamp, rtol=1e-10)
    ratio = np.abs(np.asarray(bad.vis) / np.asarray(clean.vis))
    assert np.std(ratio) > 0.1


def test_observe_errors():
    grid, img = _grid_and_image()
    kw = dict(**M87, mjd=57854, times=np.arange(0, 24, 1.0))
    with pytest.raises(TypeError, match="StationTable|array"):
        eqm.observe(img, grid, "EHT", **kw)
    with pytest.raises(TypeError, match="ImageGrid|grid"):
        eqm.observe(img, (16, 16), eqm.EHT2017, **kw)
    with pytest.raises(ValueError, match="shape"):
        eqm.observe(img[:8], grid, eqm.EHT2017, **kw)
    # A model on another pixel size (its visibilities would be another image's).
    other = eqm.ImageGrid(grid.ny, grid.nx, 2 * grid.psize)
    model = eqm.PixelImage.from_image(np.asarray(img), other)
    with pytest.raises(ValueError, match="observe the model on its own grid"):
        eqm.observe(model, grid, eqm.EHT2017, **kw)
    with pytest.raises(ValueError, match="integration"):
        eqm.observe(img, grid, eqm.EHT2017, integration=0.0, **kw)
    with pytest.raises(ValueError, match="bandwidth"):
        eqm.observe(img, grid, eqm.EHT2017, bandwidth=-1.0, **kw)
    with pytest.raises(ValueError, match="n_pol"):
        eqm.observe(img, grid, eqm.EHT2017, n_pol=3, **kw)
    with pytest.raises(ValueError, match="gain_sigma"):
        eqm.observe(img, grid, eqm.EHT2017, gain_sigma=-0.1, **kw)
    with pytest.raises(ValueError, match="freq"):
        eqm.observe(img, grid, eqm.EHT2017, freq=0.0, **kw)
    bad = dict(kw, dec=120.0)
    with pytest.raises(ValueError, match="dec"):
        eqm.observe(img, grid, eqm.EHT2017, **bad)
    with pytest.raises(ValueError, match="times"):
        eqm.observe(img, grid, eqm.EHT2017, **dict(kw, times=np.array([])))
    with pytest.raises(ValueError, match="times"):
        eqm.observe(img, grid, eqm.EHT2017, **dict(kw, times=np.array([np.nan])))
    with pytest.raises(ValueError, match="`ra` must be a finite"):
        eqm.observe(img, grid, eqm.EHT2017, **dict(kw, ra=float("nan")))
    with pytest.raises(ValueError, match="`ra` must be a right ascension"):
        eqm.observe(img, grid, eqm.EHT2017, **dict(kw, ra=400.0))
    with pytest.raises(ValueError, match="`ra`"):
        eqm.uv_tracks(eqm.EHT2017, **dict(M87, ra=-1.0), freq=230e9, mjd=57854,
                      times=[1.0])  # fmt: skip
    with pytest.raises(TypeError, match="`ra`"):
        eqm.observe(img, grid, eqm.EHT2017, **dict(kw, ra=True))
    with pytest.raises(ValueError, match="`dec`"):
        eqm.observe(img, grid, eqm.EHT2017, **dict(kw, dec=float("nan")))
    with pytest.raises(ValueError, match="`seed` must be >= 0"):
        eqm.observe(img, grid, eqm.EHT2017, seed=-1, **kw)
    with pytest.raises(TypeError, match="`seed`"):
        eqm.observe(img, grid, eqm.EHT2017, seed=True, **kw)
    # Repeated times would give duplicated rows (refused later by closures).
    with pytest.raises(ValueError, match="`times` has 1 repeated"):
        eqm.observe(img, grid, eqm.EHT2017, **dict(kw, times=[1.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="`times` has 2 repeated"):
        eqm.uv_tracks(eqm.EHT2017, **M87, freq=230e9, mjd=57854,
                      times=np.array([3.0, 1.0, 3.0, 3.0]))  # fmt: skip
    # The usual unit slips (from a user walkthrough: each gave a quietly wrong
    # observation, σ 3e4× too large or a track over 9.6 years). A frequency in GHz
    # is named before anything else (a forward-model warning about points too
    # short for the field came first).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="`freq` 230 is outside.*230e9"):
            eqm.observe(img, grid, eqm.EHT2017, freq=230.0, **kw)
    with pytest.raises(ValueError, match="`freq` 230 is outside"):
        eqm.uv_tracks(eqm.EHT2017, **M87, freq=230.0, mjd=57854, times=[1.0])
    for bw in (2.0, 999.0, 230e9):
        with pytest.raises(ValueError, match="`bandwidth`.*in Hz.*2e9"):
            eqm.observe(img, grid, eqm.EHT2017, bandwidth=bw, **kw)
    eqm.observe(img, grid, eqm.EHT2017, bandwidth=1e3, **kw)  # the least taken
    seconds = np.arange(0.0, 86400.0, 600.0)
    for t in (seconds, [-25.0, 1.0], [1.0, 48.5]):
        with pytest.raises(ValueError, match="`times` reaches.*hours UTC.*3600"):
            eqm.observe(img, grid, eqm.EHT2017, **dict(kw, times=t))
    with pytest.raises(ValueError, match="`times` reaches 85800"):
        eqm.uv_tracks(eqm.EHT2017, **M87, freq=230e9, mjd=57854, times=seconds)
    # Across midnight, either side, is a track (no error).
    eqm.observe(img, grid, eqm.EHT2017, **dict(kw, times=[-23.5, 20.0, 47.5]))
    with pytest.warns(UserWarning, match="`integration` is 0.00277778 s.*10.0"):
        eqm.observe(img, grid, eqm.EHT2017, integration=10 / 3600, **kw)
    # Only the South Pole: M87 never rises there.
    with pytest.raises(ValueError, match="elevation limit"):
        eqm.observe(
            img,
            grid,
            eqm.EHT2017.select(["SP", "AA"]).select(["SP", "AA"]),
            **dict(kw, dec=80.0),
        )


_WRONG_TYPES = unchecked_script(
    """
import json, numpy as np, eqmodels as eqm
grid = eqm.ImageGrid.from_fov(8, 128.0)
img = np.ones(grid.shape) / 64
kw = dict(ra=187.7, dec=12.39, times=np.linspace(0.0, 6.0, 5))
out = {}
for name, bad in (("ra", "x"), ("dec", "x"), ("seed", "a"), ("seed", 1.5)):
    try:
        eqm.observe(img, grid, eqm.EHT2017, **{**kw, name: bad})
        out[name + repr(bad)] = "accepted"
    except Exception as e:
        out[name + repr(bad)] = type(e).__name__ + ": " + str(e)
for name in ("add_noise", "random_phases", "elevation_limit"):
    try:
        eqm.observe(img, grid, eqm.EHT2017, **{**kw, name: "False"})
        out[name] = "accepted"
    except Exception as e:
        out[name] = type(e).__name__ + ": " + str(e)
try:
    eqm.amplitudes(eqm.load_uvfits(eqm.example_uvfits()), debias="False")
    out["debias"] = "accepted"
except Exception as e:
    out["debias"] = type(e).__name__ + ": " + str(e)
# `forward=` in 32-bit mode (it asked for float64 points: refused by JAX).
plain = eqm.observe(img, grid, eqm.EHT2017, **kw, add_noise=False)
for cls in (eqm.DirectFT, eqm.NUFFT):
    given = eqm.observe(img, grid, eqm.EHT2017, **kw, add_noise=False, forward=cls)
    out[cls.__name__] = float(
        np.max(np.abs(np.asarray(given.vis) - np.asarray(plain.vis)))
        / np.max(np.abs(np.asarray(plain.vis)))
    )
# Distinct float64 times that float32 (no x64) stores as one: duplicated rows.
try:
    eqm.observe(img, grid, eqm.EHT2017, **{**kw, "times": [1.0, 1.0 + 1e-9]})
    out["times"] = "accepted"
except ValueError as e:
    out["times"] = str(e)
print(json.dumps(out))
"""
)


def test_observe_names_arguments_of_the_wrong_type(unchecked):
    """Without the test suite's type checker (as users run it), eqmodels' own
    checks name the argument (`ra="x"` was `must be real number, not str`)."""
    got = unchecked[_WRONG_TYPES]
    for key, name in (("ra'x'", "ra"), ("dec'x'", "dec"), ("seed'a'", "seed"),
                      ("seed1.5", "seed")):  # fmt: skip
        assert got[key].startswith(f"TypeError: `{name}` must be"), got[key]
    assert got["times"].startswith("`times` has values closer than float32"), got
    # From a review: switches given as strings were read by truthiness ("False"
    # added noise), and `forward=` failed without x64.
    for name in ("add_noise", "random_phases", "elevation_limit", "debias"):
        assert got[name].startswith(f"TypeError: `{name}` must be True or False"), got
    assert got["DirectFT"] < 1e-5 and got["NUFFT"] < 1e-4, got


def test_gain_amplitudes_are_the_documented_draws():
    """`|g| = |1 + gain_sigma·N(0,1)|` per station and timestamp, from
    `default_rng(seed)`: never negative (a sign flip would be a hidden 180° phase
    error), and for small `gain_sigma` exactly the Gaussian draws."""
    grid, img = _grid_and_image()
    times = np.arange(0, 24, 0.25)
    kw = dict(**M87, mjd=57854, times=times, add_noise=False)
    clean = eqm.observe(img, grid, eqm.EHT2017, **kw)
    tu, k = np.unique(np.asarray(clean.time), return_inverse=True)
    a1, a2 = np.asarray(clean.ant1), np.asarray(clean.ant2)
    for gain_sigma in (0.2, 2.0):
        bad = eqm.observe(img, grid, eqm.EHT2017, gain_sigma=gain_sigma, seed=3, **kw)
        ratio = np.asarray(bad.vis) / np.asarray(clean.vis)
        z = np.random.default_rng(3).standard_normal((tu.size, len(eqm.EHT2017)))
        draw = 1.0 + gain_sigma * z
        amp = np.abs(draw)
        assert_allclose(ratio, amp[k, a1] * amp[k, a2] + 0j, rtol=1e-12)
        if gain_sigma == 0.2:
            assert np.all(draw > 0)  # nothing folded: the Gaussian draws themselves
        else:
            assert np.mean(draw < 0) > 0.2  # ~31% of the draws were folded
        assert np.all(ratio.real > 0)


# ------------------------------------------------------------------ station table
def test_eht2017_table_matches_the_an_table():
    fits = pytest.importorskip("astropy.io.fits")
    with fits.open(LOCAL) as h:
        an = h["AIPS AN"].data
        file_xyz = {
            n.strip(): np.array(x, float) for n, x in zip(an["ANNAME"], an["STABXYZ"])
        }
    for name in ("AA", "AP", "AZ", "JC", "LM", "PV", "SM"):
        k = eqm.EHT2017.names.index(name)
        assert_allclose(np.asarray(eqm.EHT2017.xyz)[k], file_xyz[name], rtol=1e-15)
    assert len(eqm.EHT2017) == 8
    assert np.all(np.asarray(eqm.EHT2017.sefd) > 0)
    assert "AA: 74 Jy" in repr(eqm.EHT2017)
    sub = eqm.EHT2017.select(["LM", "AA"])
    assert sub.names == ("LM", "AA")
    assert_allclose(sub.xyz[1], eqm.EHT2017.xyz[0], rtol=0)


def test_station_table_errors():
    xyz = np.asarray(eqm.EHT2017.xyz)[:2]
    with pytest.raises(ValueError, match="shape"):
        eqm.StationTable(("A", "B"), xyz[:1], [1.0, 1.0])
    with pytest.raises(ValueError, match="geocentric"):
        eqm.StationTable(("A", "B"), xyz / 1000, [1.0, 1.0])
    with pytest.raises(ValueError, match="non-finite"):
        eqm.StationTable(("A", "B"), xyz * np.nan, [1.0, 1.0])
    with pytest.raises(ValueError, match="sefd"):
        eqm.StationTable(("A", "B"), xyz, [1.0, 0.0])
    with pytest.raises(ValueError, match="el_min"):
        eqm.StationTable(("A", "B"), xyz, [1.0, 1.0], el_min=95.0)
    with pytest.raises(ValueError, match="`sefd` must be one value .* got shape"):
        eqm.StationTable(("A", "B"), xyz, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="`el_min` must be one value .* got shape"):
        eqm.StationTable(("A", "B"), xyz, 1.0, el_min=[10.0, 10.0, 10.0])
    with pytest.raises(TypeError, match="`sefd`"):
        eqm.StationTable(("A", "B"), xyz, ["a", "b"])
    t = eqm.StationTable(("A", "B"), xyz, 100.0, el_min=[5.0, 15.0])
    assert t.sefd.tolist() == [100.0, 100.0] and t.el_min.tolist() == [5.0, 15.0]
    with pytest.raises(ValueError, match="repeated"):
        eqm.StationTable(("A", "A"), xyz, [1.0, 1.0])
    with pytest.raises(ValueError, match="empty"):
        eqm.StationTable((), np.zeros((0, 3)), [])
    with pytest.raises(TypeError, match="strings"):
        eqm.StationTable(("A", 3), xyz, [1.0, 1.0])
    with pytest.raises(ValueError, match="unknown station"):
        eqm.EHT2017.select(["AA", "ZZ"])
    with pytest.raises(ValueError, match="two stations"):
        eqm.uv_tracks(
            eqm.EHT2017.select(["AA"]), **M87, freq=230e9, mjd=57854, times=[1.0]
        )
