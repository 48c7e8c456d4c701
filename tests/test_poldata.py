"""Polarimetric data (`PolVisData`, `load_uvfits(polarization="full")`): reading the
four correlations with their flags, the Stokes conversion, field rotation,
selection, averaging, concatenation, writing, and the errors for bad input. The
comparisons with eht-imaging are in tests/test_poldata_ehtim.py."""

import jax
import numpy as np
import pytest
from astropy.io import fits

import eqmodels as em

from .conftest import SHARED_DATA
from .helpers import assert_allclose
from .unchecked import unchecked_error, unchecked_script


HOPS = "eht/m87_2017_pol/hops_data/April11/SR2_M87_2017_101_{}_hops_ALMArot.uvfits"
CASA = (
    "eht/m87_2017_pol/casa_data/April11/SR2_M87_2017_101_{}_casa_EVPA_rotation"
    "+dcal+ampscale+netcal+10s-avg+RLgain-amp.uvfits"
)


_HOPS_LO = SHARED_DATA / HOPS.format("lo")
_FLOAT32 = unchecked_script(
    """
import json, sys, tempfile, os
import jax, numpy as np
import eqmodels as em
assert not jax.config.jax_enable_x64
out = {}
for path in sys.argv[1:]:
    p = em.load_uvfits(path, polarization="full")
    i = em.load_uvfits(path)
    si = p.stokes_i()
    vi = np.asarray(i.vis).astype(np.complex128)
    dev = np.abs(np.asarray(si.vis).astype(np.complex128) - vi) / np.abs(vi)
    fr = p.field_rotation()
    with tempfile.TemporaryDirectory() as d:
        em.save_uvfits(p.scan_average(), os.path.join(d, "a.uvfits"))
        back = em.load_uvfits(os.path.join(d, "a.uvfits"), polarization="full")
    out = {"dtype": str(p.corr.dtype), "rows": [si.n_rows, i.n_rows],
           "dev": float(dev.max()), "fr_finite": bool(np.isfinite(fr).all()),
           "avg_rows": back.n_rows}
print(json.dumps(out))
""",
    *([str(_HOPS_LO)] if _HOPS_LO.exists() else []),
)
_BAD_POLARIZATION = unchecked_error(
    "em.load_uvfits(em.example_uvfits(), polarization=None)", "ValueError"
)


@pytest.fixture(scope="module")
def hops_path(shared_data):
    return shared_data / HOPS.format("lo")


@pytest.fixture(scope="module")
def casa_path(shared_data):
    return shared_data / CASA.format("lo")


@pytest.fixture(scope="module")
def hops(hops_path):
    return em.load_uvfits(hops_path, polarization="full")


@pytest.fixture(scope="module")
def casa(casa_path):
    return em.load_uvfits(casa_path, polarization="full")


def _np(x):
    return np.asarray(x)


def _small(**kw):
    """Three stations, four rows; row 1 has RL flagged, row 3 has RR flagged."""
    rng = np.random.default_rng(1)
    corr = rng.normal(size=(4, 4)) + 1j * rng.normal(size=(4, 4))
    sigma = rng.uniform(0.1, 0.5, size=(4, 4))
    corr[1, 2] = np.nan
    corr[3, 0] = np.nan
    args = dict(
        u=[1e9, 2e9, -1e9, 3e9],
        v=[0.5e9, 1e9, 2e9, -1e9],
        corr=corr,
        sigma=sigma,
        time=[1.0, 1.0, 1.01, 2.0],
        ant1=[0, 0, 1, 0],
        ant2=[1, 2, 2, 1],
        station_names=("AA", "AP", "AZ"),
        freq=230e9,
        station_xyz=[
            [2225061.0, -5440057.0, -2481681.0],
            [2225039.5, -5441197.6, -2479303.4],
            [-1828796.2, -5054406.8, 3427865.2],
        ],
        ra=187.7059,
        dec=12.3911,
        mjd=57854,
    )
    args.update(kw)
    for k in ("u", "v", "time", "ant1", "ant2", "station_xyz"):
        if isinstance(args[k], list):
            args[k] = np.array(args[k])
    pos = [args.pop(k) for k in ("u", "v", "corr", "sigma", "time", "ant1", "ant2")]
    return em.PolVisData(*pos, **args)


# ----------------------------------------------------------------------- reading
def test_correlations_are_the_files_values(hops_path, hops):
    """One IF and one channel: each correlation is the file's value, σ = 1/√w, and a
    flag where w ≤ 0; rows in the Stokes I order (time, then baseline)."""
    with fits.open(hops_path) as h:
        raw = np.asarray(h[0].data["DATA"], np.float64)[:, 0, 0, 0, 0]  # (n, 4, 3)
        jd = h[0].data.par("DATE")
        bl = np.asarray(h[0].data.par("BASELINE"), int)
    vis = raw[..., 0] + 1j * raw[..., 1]
    w = raw[..., 2]
    # This file stores every baseline as ant1 < ant2 and in time order already.
    assert np.all(bl // 256 < bl % 256)
    keep = (w[:, 0] > 0) | (w[:, 1] > 0)
    order = np.lexsort((bl[keep] % 256, bl[keep] // 256, jd[keep]))
    vis, w = vis[keep][order], w[keep][order]
    c, s = hops.correlations()
    flag = _np(hops.flag)
    assert np.array_equal(flag, ~(w > 0))
    # (to the rounding of the weighted mean `w·V / w`)
    assert_allclose(_np(c)[~flag], vis[~flag], rtol=1e-15)
    assert_allclose(_np(s)[~flag], 1.0 / np.sqrt(w[~flag]), rtol=1e-15)
    assert np.all(np.isnan(_np(c)[flag])) and np.all(np.isnan(_np(s)[flag]))
    assert hops.basis == ("RR", "LL", "RL", "LR")


def test_casa_rows_with_rl_flagged_keep_their_other_correlations(casa):
    """About 10 % of 04-11's CASA rows have RL flagged (JCMT observed one hand,
    L): they are kept with their other correlations, give Stokes I (from LL alone,
    as eht-imaging) but not Q, U or V."""
    flag = _np(casa.flag)
    rl = flag[:, 2]
    assert 0.05 < rl.mean() < 0.15
    assert not flag[rl, 1].any()  # LL present on every such row
    c = _np(casa.corr)
    assert np.all(np.isfinite(c[rl, 1])) and np.all(np.isnan(c[rl, 2]))
    assert np.all(np.isfinite(c[rl & ~flag[:, 3], 3]))
    vis, sig = casa.stokes()
    assert_allclose(vis[rl, 0], c[rl, 1], rtol=0)
    assert np.all(np.isnan(vis[rl, 1:])) and np.all(np.isnan(sig[rl, 1:]))
    jc = casa.station_names.index("JC")
    on_jc = (_np(casa.ant1) == jc) | (_np(casa.ant2) == jc)
    np.testing.assert_array_equal(flag[:, 0], on_jc)


@pytest.mark.parametrize("which", ["hops", "casa"])
def test_stokes_i_is_load_uvfits(which, request, hops_path, casa_path):
    """`.stokes_i()` is what `load_uvfits(path)` gives, row for row, exactly."""
    pol = request.getfixturevalue(which)
    path = hops_path if which == "hops" else casa_path
    want = em.load_uvfits(path)
    got = pol.stokes_i()
    for k, a in want._arrays().items():
        np.testing.assert_array_equal(_np(getattr(got, k)), a, err_msg=k)
    assert got._meta().keys() == want._meta().keys()
    for k, a in want._meta().items():
        np.testing.assert_array_equal(got._meta()[k], a, err_msg=k)


def test_feeds_and_mounts_from_the_an_table(hops, casa):
    assert hops.feeds == ("circular",) * 7
    assert hops.mounts == (
        "altaz",
        "nasmyth_r",
        "nasmyth_r",
        "altaz",
        "nasmyth_l",
        "nasmyth_l",
        "nasmyth_l",
    )
    assert casa.mounts == ("altaz",) * 9  # the CASA files leave MNTSTA at 0


def test_default_polarization_is_stokes_i(hops_path):
    d = em.load_uvfits(hops_path)
    assert type(d) is em.VisData
    assert type(em.load_uvfits(hops_path, polarization="I")) is em.VisData


# ------------------------------------------------------------------------ Stokes
def test_stokes_formulas_circular():
    d = _small()
    c, s = (_np(x) for x in d.correlations())
    vis, sig = d.stokes()
    rr, ll, rl, lr = c.T
    srr, sll, srl, slr = s.T
    i_ = 0.5 * (rr + ll)
    si = 0.5 * np.sqrt(srr**2 + sll**2)
    i_[3], si[3] = ll[3], sll[3]  # RR flagged: LL alone, as eht-imaging
    assert_allclose(vis[:, 0], i_, rtol=1e-15)
    assert_allclose(sig[:, 0], si, rtol=1e-15)
    ok = [0, 2]  # rows with every correlation
    assert_allclose(vis[ok, 1], 0.5 * (rl + lr)[ok], rtol=1e-15)
    assert_allclose(vis[ok, 2], 0.5j * (lr - rl)[ok], rtol=1e-15)
    assert_allclose(vis[ok, 3], 0.5 * (rr - ll)[ok], rtol=1e-15)
    assert_allclose(sig[ok, 1], 0.5 * np.sqrt(srl**2 + slr**2)[ok], rtol=1e-15)
    assert_allclose(sig[ok, 3], 0.5 * np.sqrt(srr**2 + sll**2)[ok], rtol=1e-15)
    assert np.isnan(vis[1, 1]) and np.isnan(vis[1, 2]) and np.isfinite(vis[1, 3])
    assert np.isnan(vis[3, 3]) and np.isnan(sig[3, 3]) and np.isfinite(vis[3, 1])


def test_stokes_of_an_unpolarized_source_round_trips():
    """Correlations made from Stokes (RR = I + V, ..., eht-imaging's convention)
    come back as those Stokes parameters, for circular and linear feeds."""
    rng = np.random.default_rng(2)
    st = rng.normal(size=(4, 4)) + 1j * rng.normal(size=(4, 4))
    i_, q, u, v = st.T
    circ = np.stack([i_ + v, i_ - v, q + 1j * u, q - 1j * u], axis=1)
    lin = np.stack([i_ + q, i_ - q, u + 1j * v, u - 1j * v], axis=1)
    sig = np.ones((4, 4))
    d = _small(corr=circ, sigma=sig)
    assert_allclose(d.stokes()[0], st, rtol=1e-14, atol=1e-15)
    dl = _small(corr=lin, sigma=sig, feeds=["linear"] * 3)
    assert dl.basis == ("XX", "YY", "XY", "YX")
    assert_allclose(dl.stokes()[0], st, rtol=1e-14, atol=1e-15)
    assert_allclose(dl.stokes()[1], np.full((4, 4), np.sqrt(2) / 2), rtol=1e-15)
    # A mixed baseline (AZ linear) has no Stokes conversion here.
    dm = _small(corr=circ, sigma=sig, feeds=["circular", "circular", "linear"])
    vis = dm.stokes()[0]
    assert np.all(np.isnan(vis[[1, 2]])) and np.all(np.isfinite(vis[[0, 3]]))


def test_rows_are_reoriented_with_cross_hands_swapped():
    d = _small()
    flipped = _small(
        u=-_np(d.u),
        v=-_np(d.v),
        corr=np.conj(_np(d.corr)[:, [0, 1, 3, 2]]),
        sigma=_np(d.sigma)[:, [0, 1, 3, 2]],
        ant1=_np(d.ant2),
        ant2=_np(d.ant1),
    )
    for k in ("u", "v", "corr", "sigma", "flag", "ant1", "ant2"):
        np.testing.assert_array_equal(_np(getattr(flipped, k)), _np(getattr(d, k)))


def test_flags_default_to_non_finite_entries_and_are_nan():
    d = _small()
    assert _np(d.flag).sum() == 2 and _np(d.flag)[1, 2] and _np(d.flag)[3, 0]
    given = _small(flag=np.isnan(_np(d.corr)) | np.eye(4, dtype=bool))
    assert np.isnan(_np(given.corr)[2, 2]) and np.isnan(_np(given.sigma)[0, 0])


# ---------------------------------------------------------------- field rotation
def test_field_rotation_by_mount():
    mounts = ["altaz", "nasmyth_r", "nasmyth_l"]
    d = _small(mounts=mounts, fr_offset=[0.0, 0.0, 45.0])
    par, el, fr = d.parallactic_angle(), d.elevation(), d.field_rotation()
    assert par.shape == el.shape == fr.shape == (4, 2)
    a = np.stack([_np(d.ant1), _np(d.ant2)], axis=1)
    f_el = np.array([0.0, 1.0, -1.0])[a]
    off = np.array([0.0, 0.0, np.pi / 4])[a]
    assert_allclose(fr, par + f_el * el + off, rtol=1e-15)
    eq = _small(mounts=["equatorial"] * 3)
    np.testing.assert_array_equal(eq.field_rotation(), np.zeros((4, 2)))


def test_parallactic_angle_and_elevation_geometry():
    """A textbook check: at one station, the parallactic angle has the sign of the
    hour angle (source west: positive) and vanishes at transit, where the
    elevation is 90° − |latitude − dec| (geocentric latitude)."""
    from eqmodels._data._field_rotation import gmst_hours, station_angles

    xyz = np.array([[-1828796.2, -5054406.8, 3427865.2]])  # SMT, ~32.7° N
    lat = np.arctan2(xyz[0, 2], np.hypot(xyz[0, 0], xyz[0, 1]))
    lon = np.arctan2(xyz[0, 1], xyz[0, 0])
    ra, dec, mjd = 187.7059, 12.3911, 57854
    hours = np.linspace(0.0, 24.0, 2001)
    h = np.mod(gmst_hours(mjd, hours) * np.pi / 12 + lon - np.radians(ra), 2 * np.pi)
    h = np.where(h > np.pi, h - 2 * np.pi, h)
    par, el = station_angles(xyz, mjd, hours, ra, dec)
    assert np.all(np.sign(par[:, 0]) == np.sign(h))
    i = np.argmin(np.abs(h))
    assert abs(par[i, 0]) < 1e-2
    assert abs(el[i, 0] - (np.pi / 2 - abs(lat - np.radians(dec)))) < 1e-4


def test_field_rotation_refuses_mounts_without_coefficients():
    d = _small(mounts=["altaz", "orbiting", "altaz"])
    with pytest.raises(ValueError, match="'AP'.*'orbiting'.*`mounts`"):
        d.field_rotation()
    nopos = _small(station_xyz=None)
    assert np.all(np.isnan(nopos.parallactic_angle()))
    with pytest.raises(ValueError, match="no position.*station_xyz"):
        nopos.field_rotation()


# -------------------------------------------------------- selection, averaging
def test_take_and_select_match_stokes_i(hops):
    sel = hops.select(stations=["AA", "AP", "LM"], time_range=(1.0, 5.0))
    want = hops.stokes_i().select(stations=["AA", "AP", "LM"], time_range=(1.0, 5.0))
    np.testing.assert_array_equal(_np(sel.time), _np(want.time))
    np.testing.assert_array_equal(_np(sel.stokes_i().vis), _np(want.vis))
    assert sel.mounts == hops.mounts and sel.feeds == hops.feeds
    t = hops.take(np.arange(5))
    np.testing.assert_array_equal(_np(t.corr), _np(hops.corr)[:5])
    snr = hops.select(snr_min=10.0)
    np.testing.assert_array_equal(
        _np(snr.time), _np(hops.stokes_i().select(snr_min=10.0).time)
    )
    no_jc = hops.flag_stations(["JC"])
    assert not _np(no_jc.flag)[:, 0].any()  # JC's rows were the ones without RR
    assert hops.select_stations(["AA", "AP"]).baselines() == [("AA", "AP")]
    assert _np(hops.select_time(1.0, 2.0).time).max() <= 2.0
    with pytest.raises(ValueError, match="unknown station"):
        hops.select(stations=["XX"])
    with pytest.raises(ValueError, match="removed every row"):
        hops.select(time_range=(30.0, 31.0))


def test_scan_average_per_correlation():
    """Each correlation is averaged over its own unflagged entries."""
    d = _small(time=[1.0, 1.0, 1.01, 1.005], ant1=[0, 0, 1, 0], ant2=[1, 2, 2, 1])
    avg = d.scan_average()
    assert avg.n_rows == 3
    c, s = _np(d.corr), _np(d.sigma)
    row = np.flatnonzero((_np(avg.ant1) == 0) & (_np(avg.ant2) == 1))[0]
    got_c, got_s = _np(avg.corr)[row], _np(avg.sigma)[row]
    # Rows 0 and 3 (AA-AP): RR only in row 0 (row 3's RR is flagged).
    assert_allclose(got_c[0], c[0, 0], rtol=1e-15)
    assert_allclose(got_s[0], s[0, 0], rtol=1e-15)
    for k in (1, 2, 3):
        assert_allclose(got_c[k], 0.5 * (c[0, k] + c[3, k]), rtol=1e-14)
        assert_allclose(got_s[k], np.sqrt(s[0, k] ** 2 + s[3, k] ** 2) / 2, rtol=1e-14)
    assert not _np(avg.flag)[row].any()
    # AA-AZ (row 1): RL flagged stays flagged.
    row = np.flatnonzero((_np(avg.ant1) == 0) & (_np(avg.ant2) == 2))[0]
    assert _np(avg.flag)[row, 2] and np.isnan(_np(avg.corr)[row, 2])


def test_scan_average_commutes_with_stokes_i(hops):
    """Where a baseline's parallel hands are flagged together through a scan (JC
    has no RR at all), averaging the correlations and then taking Stokes I equals
    averaging Stokes I."""
    a = hops.scan_average().stokes_i()
    b = hops.stokes_i().scan_average()
    np.testing.assert_array_equal(_np(a.time), _np(b.time))
    assert_allclose(_np(a.vis), _np(b.vis), rtol=1e-12)
    assert_allclose(_np(a.sigma), _np(b.sigma), rtol=1e-12)
    t = hops.time_average(60.0)
    assert_allclose(
        _np(t.stokes_i().vis), _np(hops.stokes_i().time_average(60.0).vis), rtol=1e-12
    )


def test_concatenate_bands(shared_data, hops):
    hi = em.load_uvfits(shared_data / HOPS.format("hi"), polarization="full")
    both = em.concatenate([hops, hi])
    assert isinstance(both, em.PolVisData) and len(both.band_freqs) == 2
    assert both.n_rows == hops.n_rows + hi.n_rows
    want = em.concatenate([hops.stokes_i(), hi.stokes_i()])
    np.testing.assert_array_equal(_np(both.stokes_i().vis), _np(want.vis))
    np.testing.assert_array_equal(_np(both.band), _np(want.band))
    with pytest.raises(ValueError, match="duplicated row"):
        em.concatenate([hops, hops])
    with pytest.raises(TypeError, match="mixes PolVisData.*stokes_i"):
        em.concatenate([hops, hops.stokes_i()])
    other = hi.replace(mounts=["altaz"] * 7)
    with pytest.raises(ValueError, match="different feeds, mounts"):
        em.concatenate([hops, other])


# ------------------------------------------------------------------- writing
def test_save_uvfits_round_trip(hops, tmp_path):
    path = tmp_path / "pol.uvfits"
    em.save_uvfits(hops, path)
    back = em.load_uvfits(path, polarization="full")
    np.testing.assert_array_equal(_np(back.flag), _np(hops.flag))
    ok = ~_np(hops.flag)
    assert_allclose(_np(back.corr)[ok], _np(hops.corr)[ok], rtol=1e-15)
    assert_allclose(_np(back.sigma)[ok], _np(hops.sigma)[ok], rtol=1e-15)
    for k in ("u", "v", "time", "tint"):
        assert_allclose(_np(getattr(back, k)), _np(getattr(hops, k)), rtol=1e-13)
    for k in ("ant1", "ant2", "station_xyz"):
        np.testing.assert_array_equal(_np(getattr(back, k)), _np(getattr(hops, k)))
    assert back.mounts == hops.mounts and back.feeds == hops.feeds
    assert back.station_names == hops.station_names


def test_save_uvfits_round_trip_linear(tmp_path):
    d = _small(feeds=["linear"] * 3, mounts=["nasmyth_l", "altaz", "equatorial"])
    path = tmp_path / "lin.uvfits"
    em.save_uvfits(d, path)
    with fits.open(path) as h:
        assert h[0].header["CRVAL3"] == -5.0
        assert list(h["AIPS AN"].data["POLTYA"]) == ["X"] * 3
    back = em.load_uvfits(path, polarization="full", check=False)
    assert back.basis == ("XX", "YY", "XY", "YX") and back.mounts == d.mounts
    np.testing.assert_array_equal(_np(back.flag), _np(d.flag))
    ok = ~_np(d.flag)
    assert_allclose(_np(back.corr)[ok], _np(d.corr)[ok], rtol=1e-15)


# ------------------------------------------------------------------- the rest
def test_pytree_and_description(hops):
    out = jax.jit(lambda d: d.corr * 2)(hops)
    assert out.shape == (hops.n_rows, 4)
    assert len(hops) == hops.n_rows == len(hops.time_index)
    assert hops.index_key == hops.stokes_i().index_key
    text = hops.summary()
    assert "PolVisData: M87" in text and "RR, LL, RL, LR" in text
    assert "AP nasmyth_r" in text
    assert "PolVisData('M87'" in repr(hops)


def test_bad_input_is_named():
    good = _small()
    with pytest.raises(ValueError, match="`polarization` must be 'I'.*'full'"):
        em.load_uvfits(em.example_uvfits(), polarization="Stokes")
    with pytest.raises(ValueError, match=r"`corr` has shape \(4,\)"):
        _small(corr=np.ones(4))
    with pytest.raises(TypeError, match="`flag` must be a boolean"):
        _small(flag=np.zeros((4, 4)))
    with pytest.raises(ValueError, match="`flag` does not mark.*row 1"):
        _small(flag=np.zeros((4, 4), bool))
    with pytest.raises(ValueError, match="every correlation flagged.*row 2"):
        _small(flag=np.isnan(_np(good.corr)) | (np.arange(4) == 2)[:, None])
    with pytest.raises(
        ValueError, match="`sigma` has 3 zero or negative.*row 0, correlation 0"
    ):
        _small(sigma=np.where(np.eye(4, dtype=bool)[0], -1.0, 1.0) * np.ones((4, 4)))
    with pytest.raises(ValueError, match="`feeds` has unknown entries.*'linear'"):
        _small(feeds=["circular", "lin", "linear"])
    with pytest.raises(TypeError, match="one entry per station.*\\* 3"):
        _small(mounts="altaz")
    with pytest.raises(ValueError, match="`mounts` must give one entry per station"):
        _small(mounts=["altaz"])
    with pytest.raises(ValueError, match="`fr_offset` must give one offset"):
        _small(fr_offset=[1.0])
    with pytest.raises(ValueError, match="autocorrelations.*PolVisData"):
        _small(ant2=[0, 2, 2, 1])
    with pytest.raises(TypeError, match="unknown PolVisData field"):
        good.replace(vis=1)


def test_a_stokes_file_is_refused_as_full(tmp_path):
    path = tmp_path / "i.uvfits"
    em.save_uvfits(em.load_uvfits(em.example_uvfits()), path)
    with pytest.raises(ValueError, match="not correlations.*polarization='I'"):
        em.load_uvfits(path, polarization="full")


def _saved(d, tmp_path, name="p.uvfits"):
    path = tmp_path / name
    em.save_uvfits(d, path)
    return path


def test_reading_flags_implausible_cross_hands_and_missing_correlations(hops, tmp_path):
    d = hops.take(np.arange(60))
    path = _saved(d, tmp_path)
    with fits.open(path, mode="update") as h:
        h[0].data["DATA"][5, 0, 0, 0, 0, 2, 0] = 1e8  # RL of row 5: corrupt
        h["AIPS AN"].data["MNTSTA"][1] = 1
    back = em.load_uvfits(path, polarization="full")
    assert back.n_rows == 60 and back.n_flagged == 0
    assert _np(back.flag)[5, 2] and not _np(back.flag)[5, [0, 1, 3]].any()
    assert back.mounts[1] == "equatorial"
    raw = em.load_uvfits(path, polarization="full", check=False)
    assert not _np(raw.flag)[5, 2]
    # A file of the parallel hands only: the cross-hands are flagged everywhere.
    with fits.open(path) as h:
        g = h[0]
        names = list(g.data.parnames)
        pars = [g.data.par(i) for i in range(len(names))]
        cube = np.asarray(g.data["DATA"])[:, :, :, :, :, :2]
        hdu = fits.GroupsHDU(fits.GroupData(cube, parnames=names, pardata=pars))
        for key in ("CTYPE", "CRVAL", "CDELT", "CRPIX"):
            for k in range(2, 8):
                hdu.header[f"{key}{k}"] = g.header[f"{key}{k}"]
        for key in ("OBJECT", "OBSRA", "OBSDEC"):
            hdu.header[key] = g.header[key]
        fits.HDUList([hdu] + [x.copy() for x in h[1:]]).writeto(tmp_path / "par.uvfits")
    par = em.load_uvfits(tmp_path / "par.uvfits", polarization="full")
    assert np.all(_np(par.flag)[:, 2:]) and par.n_rows == 60
    np.testing.assert_array_equal(_np(par.corr)[:, :2], _np(raw.corr)[:, :2])


def test_unknown_mount_code_is_refused(hops, tmp_path):
    path = _saved(hops.take(np.arange(10)), tmp_path)
    with fits.open(path, mode="update") as h:
        h["AIPS AN"].data["MNTSTA"][0] = 9
    with pytest.raises(ValueError, match=r"MNTSTA holds mount code\(s\) \[9\]"):
        em.load_uvfits(path, polarization="full")
    assert em.load_uvfits(path).n_rows == 10  # Stokes I does not read mounts


def test_empty_take_is_a_clear_error(hops):
    with pytest.raises(ValueError, match="nothing is left"):
        hops.take([])
    with pytest.raises(ValueError, match="boolean mask must have shape"):
        hops.take(np.ones(3, bool))


def test_without_x64(unchecked, hops_path):
    """With JAX's defaults (float32) the correlations are complex64; Stokes I agrees
    with `load_uvfits(path)` to float32 rounding; field rotation, averaging and
    writing work."""
    got = unchecked[_FLOAT32]
    assert got["dtype"] == "complex64"
    assert got["rows"][0] == got["rows"][1]
    assert got["dev"] < 1e-6 and got["fr_finite"] and got["avg_rows"] == 216


def test_polarization_is_checked_without_the_type_checker(unchecked):
    assert "`polarization` must be 'I'" in unchecked[_BAD_POLARIZATION]
