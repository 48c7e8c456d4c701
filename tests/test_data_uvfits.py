"""Reading uvfits files (real EHT data) and writing FITS images."""

import math
import shutil

import numpy as np
import pytest

import eqmodels as eqm

from .conftest import TEST_DATA
from .helpers import assert_allclose
from .unchecked import unchecked_error


fits = pytest.importorskip("astropy.io.fits")

LOCAL = TEST_DATA / "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits"

# Facts of the public files (counted from the raw files and noted in
# ../shared/data/README.md): rows, distinct timestamps, scans (gap > 0.0165 h),
# baselines, stations with data, AN-table stations, scan-averaged rows.
SHARED_COUNTS = {
    "m87_2017/SR1_M87_2017_095_hi_hops_netcal_StokesI.uvfits": (
        6458,
        701,
        18,
        21,
        7,
        8,
    ),
    "m87_2017/SR1_M87_2017_095_lo_hops_netcal_StokesI.uvfits": (
        6453,
        701,
        18,
        21,
        7,
        8,
    ),
    "m87_2017/SR1_M87_2017_096_hi_hops_netcal_StokesI.uvfits": (
        9081,
        900,
        25,
        21,
        7,
        8,
    ),
    "m87_2017/SR1_M87_2017_096_lo_hops_netcal_StokesI.uvfits": (
        8645,
        900,
        25,
        21,
        7,
        8,
    ),
    "m87_2017/SR1_M87_2017_100_hi_hops_netcal_StokesI.uvfits": (2610, 186, 7, 21, 7, 8),
    "m87_2017/SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits": (2367, 186, 7, 21, 7, 8),
    "m87_2017/SR1_M87_2017_101_hi_hops_netcal_StokesI.uvfits": (
        8058,
        801,
        22,
        21,
        7,
        8,
    ),
    "m87_2017/SR1_M87_2017_101_lo_hops_netcal_StokesI.uvfits": (
        7447,
        781,
        22,
        21,
        7,
        8,
    ),
    "sgra_2017/ER6_SGRA_2017_096_hi_hops_netcal-LMTcal_StokesI.uvfits": (
        13790,
        1183,
        26,
        21,
        7,
        8,
    ),
    "sgra_2017/ER6_SGRA_2017_096_lo_hops_netcal-LMTcal_StokesI.uvfits": (
        12996,
        1152,
        25,
        21,
        7,
        8,
    ),
    "sgra_2017/ER6_SGRA_2017_097_hi_hops_netcal-LMTcal_StokesI.uvfits": (
        15424,
        2117,
        44,
        25,
        8,
        9,
    ),
    "sgra_2017/ER6_SGRA_2017_097_lo_hops_netcal-LMTcal_StokesI.uvfits": (
        17529,
        2061,
        43,
        25,
        8,
        9,
    ),
    "m87_2018/L2V1_M87_2018_111_b3_hops_netcal_10s_StokesI.uvfits": (
        7317,
        936,
        33,
        26,
        8,
        8,
    ),
    "m87_2018/L2V1_M87_2018_112_b3_hops_netcal_10s_StokesI.uvfits": (
        1484,
        494,
        15,
        8,
        5,
        5,
    ),
    "m87_2018/L2V1_M87_2018_115_b3_hops_netcal_10s_StokesI.uvfits": (
        5170,
        898,
        32,
        18,
        7,
        7,
    ),
}


@pytest.fixture(scope="module")
def local():
    return eqm.load_uvfits(LOCAL)


def _raw(path):
    """Independent read of the raw random-groups file with astropy alone."""
    with fits.open(path) as h:
        g = h[0].data
        data = np.array(g.data, np.float64)[:, 0, 0, 0, 0]  # (n, stokes, complex)
        freq = h["AIPS AN"].header["FREQ"]
        u = np.asarray(g.par("UU---SIN"), np.float64) * freq
        v = np.asarray(g.par("VV---SIN"), np.float64) * freq
        jd = np.asarray(g.par(4), np.float64) + np.asarray(g.par(5), np.float64)
        bl = np.asarray(g.par("BASELINE"), np.float64).astype(int)
        names = [s.strip() for s in h["AIPS AN"].data["ANNAME"]]
    return data, u, v, jd, bl, names


def test_local_file_loads(local):
    d = local
    assert d.n_rows == 2367 and d.n_flagged == 0
    assert len(d.timestamps()) == 186
    assert len(d.scans()) == 7
    assert len(d.baselines()) == 21
    assert d.station_names == ("AA", "AP", "AZ", "JC", "LM", "PV", "SM", "SR")
    assert d.stations_present() == ("AA", "AP", "AZ", "JC", "LM", "PV", "SM")
    assert d.source == "M87" and d.mjd == 57853
    assert d.freq == 227070703125.0 and d.band_freqs == (227070703125.0,)
    assert d.bandwidth == 1856000000.0
    assert math.isclose(d.ra, 187.7059307575226) and math.isclose(
        d.dec, 12.39112323919932
    )
    assert np.all(np.asarray(d.ant1) < np.asarray(d.ant2))
    assert np.all(np.diff(np.asarray(d.time)) >= 0)
    assert np.all(np.asarray(d.tint) > 0)
    # M87 2017: |uv| up to ~8.3 Gλ at 230 GHz (README).
    assert 8.0e9 < d.uvdist.max() < 8.7e9


def test_stokes_i_values_match_raw_file(local):
    """I = (RR + LL)/2, σ_I = ½ sqrt(σ_RR² + σ_LL²), σ = 1/sqrt(w), u = UU·FREQ."""
    data, u, v, jd, bl, names = _raw(LOCAL)
    rr = data[:, 0, 0] + 1j * data[:, 0, 1]
    ll = data[:, 1, 0] + 1j * data[:, 1, 1]
    s_rr, s_ll = 1 / np.sqrt(data[:, 0, 2]), 1 / np.sqrt(data[:, 1, 2])
    mjd = int(np.floor(jd.min() - 2400000.5))
    time = (jd - 2400000.5 - mjd) * 24
    a1, a2 = bl // 256 - 1, bl % 256 - 1
    order = np.lexsort((a2, a1, time))
    d = local
    assert_allclose(d.vis, (0.5 * (rr + ll))[order], rtol=1e-15)
    assert_allclose(d.sigma, (0.5 * np.hypot(s_rr, s_ll))[order], rtol=1e-15)
    assert_allclose(d.u, u[order], rtol=1e-15)
    assert_allclose(d.v, v[order], rtol=1e-15)
    assert_allclose(d.time, time[order], rtol=1e-15)
    assert np.array_equal(np.asarray(d.ant1), a1[order])
    # README: the RR/LL sigma is sqrt(2) times the Stokes-I sigma.
    assert_allclose(s_rr[order] / np.asarray(d.sigma), np.full(d.n_rows, math.sqrt(2)))
    with fits.open(LOCAL) as h:
        xyz = np.array(h["AIPS AN"].data["STABXYZ"], np.float64)
    assert_allclose(d.station_xyz, xyz, rtol=1e-15)


def test_readme_counts_m87_2017_apr11(shared_data):
    """M87 2017-04-11: 7447 raw rows, 781 timestamps, 22 scans, 21 baselines;
    scan-averaged 216 (lo) / 223 (hi) rows (../shared/data/README.md)."""
    base = shared_data / "eht" / "m87_2017"
    lo = eqm.load_uvfits(base / "SR1_M87_2017_101_lo_hops_netcal_StokesI.uvfits")
    hi = eqm.load_uvfits(base / "SR1_M87_2017_101_hi_hops_netcal_StokesI.uvfits")
    assert lo.n_rows == 7447
    assert len(lo.timestamps()) == 781
    assert len(lo.scans()) == 22
    assert len(lo.baselines()) == 21
    assert lo.scan_average().n_rows == 216
    assert hi.scan_average().n_rows == 223


@pytest.mark.parametrize("name", sorted(SHARED_COUNTS))
def test_every_shared_file_loads(shared_data, name):
    path = shared_data / "eht" / name
    if not path.exists():
        pytest.skip(f"{name} not present")
    d = eqm.load_uvfits(path)
    rows, n_times, n_scans, n_bl, n_present, n_table = SHARED_COUNTS[name]
    assert d.n_rows == rows
    assert d.n_flagged == 0
    assert len(d.timestamps()) == n_times
    assert len(d.scans()) == n_scans
    assert len(d.baselines()) == n_bl
    assert len(d.stations_present()) == n_present
    assert d.n_stations == n_table
    assert np.all(np.asarray(d.sigma) > 0)
    assert np.all(np.isfinite(np.asarray(d.vis)))
    assert 2.2e11 < d.freq < 2.3e11
    assert d.source in ("M87", "SGRA")
    # Every station position is on the Earth's surface.
    present = [d.station_names.index(s) for s in d.stations_present()]
    r = np.linalg.norm(np.asarray(d.station_xyz)[present], axis=1)
    assert np.all((r > 6.3e6) & (r < 6.4e6))


# ------------------------------------------------------------------ flags, pols
def _edit_copy(tmp_path, edit):
    out = tmp_path / "edited.uvfits"
    with fits.open(LOCAL) as h:
        edit(h)
        h.writeto(out)
    return out


def test_flagged_rows_dropped_and_counted(tmp_path):
    def edit(h):
        d = h[0].data.data
        d[:5, ..., 0, 2] = 0.0  # RR weight
        d[:5, ..., 1, 2] = -1.0  # LL weight
        d[10:13, ..., :, 2] = 0.0

    d = eqm.load_uvfits(_edit_copy(tmp_path, edit))
    assert d.n_flagged == 8
    assert d.n_rows == 2367 - 8


def test_negative_obsra_is_wrapped_into_0_360(tmp_path, local):
    """VisData takes `ra` in [0, 360] degrees; a header's -10° is 350°."""

    def edit(h):
        h[0].header["OBSRA"] = local.ra - 360.0

    d = eqm.load_uvfits(_edit_copy(tmp_path, edit))
    assert d.ra == pytest.approx(local.ra, abs=1e-9)


def test_single_polarisation_rows_use_the_present_hand(tmp_path, local):
    def edit(h):
        h[0].data.data[0, ..., 1, 2] = 0.0  # first row: LL flagged

    d = eqm.load_uvfits(_edit_copy(tmp_path, edit))
    data, *_ = _raw(LOCAL)
    rr0 = data[0, 0, 0] + 1j * data[0, 0, 1]
    assert d.n_flagged == 0 and d.n_rows == 2367
    k = int(np.argmin(np.abs(np.asarray(d.vis) - rr0)))
    assert_allclose(np.asarray(d.vis)[k], rr0, rtol=1e-15)
    assert_allclose(np.asarray(d.sigma)[k], 1 / np.sqrt(data[0, 0, 2]), rtol=1e-15)


# ------------------------------------------------------------------ synthetic files
def _write_uvfits(
    path,
    data,
    stokes0=-1.0,
    seed=0,
    baselines=None,
    source=None,
    uv_sign=1.0,
    antennas=None,
    extra=None,
):
    """A minimal random-groups file: 3 stations, `data` of numpy shape
    (n, 1, 1, n_if, n_chan, n_stokes, 3), baselines cycling 1-2, 1-3, 2-3 (or
    `baselines`, `ant1 * 256 + ant2` per row); `source`: a SOURCE parameter;
    `uv_sign` multiplies the stored u, v (per row); `antennas`: `(ant1, ant2)`
    as ANTENNA1 / ANTENNA2 parameters; `extra`: more parameters, name → values."""
    rng = np.random.default_rng(seed)
    n = data.shape[0]
    freq = 230e9
    u = rng.normal(size=n) * 1e9 / freq
    v = rng.normal(size=n) * 1e9 / freq
    jd2 = np.repeat(np.arange(n // 3), 3) * 10 / 86400.0 + 0.1
    bl = np.tile([258.0, 259.0, 515.0], n // 3) if baselines is None else baselines
    names = ["UU---SIN", "VV---SIN", "WW---SIN", "BASELINE", "DATE", "DATE"]
    pars = [u * uv_sign, v * uv_sign, np.zeros(n), bl, np.full(n, 2457854.5), jd2]
    if source is not None:
        names, pars = names + ["SOURCE"], pars + [np.asarray(source, np.float64)]
    if antennas is not None:
        names += ["ANTENNA1", "ANTENNA2"]
        pars += [np.asarray(a, np.float64) for a in antennas]
    for name, values in (extra or {}).items():
        names, pars = names + [name], pars + [np.asarray(values, np.float64)]
    g = fits.GroupData(
        data.astype(np.float32), bitpix=-32, parnames=names, pardata=pars
    )
    hdu = fits.GroupsHDU(g)
    axes = [("COMPLEX", 1, 1), ("STOKES", stokes0, -1 if stokes0 < 0 else 1)]
    axes += [("FREQ", freq, 1e8), ("IF", 1, 1), ("RA", 10.0, 1), ("DEC", 20.0, 1)]
    for k, (ct, cv, cd) in enumerate(axes, start=2):
        hdu.header[f"CTYPE{k}"] = ct
        hdu.header[f"CRVAL{k}"] = cv
        hdu.header[f"CDELT{k}"] = cd
        hdu.header[f"CRPIX{k}"] = 1.0
    an = fits.BinTableHDU.from_columns(
        [
            fits.Column("ANNAME", "8A", array=["X1", "X2", "X3"]),
            fits.Column("STABXYZ", "3D", array=6.4e6 * np.eye(3)),
            fits.Column("NOSTA", "1J", array=[1, 2, 3]),
        ],
        name="AIPS AN",
    )
    an.header["FREQ"] = freq
    fits.HDUList([hdu, an]).writeto(path)
    return u * freq, v * freq


def _one_per_row(n, seed=0):
    rng = np.random.default_rng(seed)
    data = np.zeros((n, 1, 1, 1, 1, 1, 3))
    data[..., 0], data[..., 1] = rng.normal(size=(2, n, 1, 1, 1, 1, 1))
    data[..., 2] = 4.0
    return data


def test_a_multi_source_file_is_refused(tmp_path):
    """From a review: the SOURCE parameter was ignored, so an AIPS multi-source
    file loaded as one source. One source id loads; two are refused."""
    data = _one_per_row(6)
    _write_uvfits(tmp_path / "one.uvfits", data, source=np.full(6, 3.0))
    assert eqm.load_uvfits(tmp_path / "one.uvfits").n_rows == 6
    _write_uvfits(tmp_path / "two.uvfits", data, source=[1.0, 1.0, 1.0, 2, 2, 2])
    with pytest.raises(ValueError, match=r"multi-source.*ids \[1, 2\].*Split"):
        eqm.load_uvfits(tmp_path / "two.uvfits")


def test_row_order_does_not_depend_on_how_a_baseline_is_stored(tmp_path):
    """From a review: rows were sorted by the file's station order before
    VisData oriented them, so a file storing 2-1 instead of 1-2 came out in
    another order. Reversed baselines (conjugated, u and v negated) give the same
    data, row for row."""
    data = _one_per_row(9)
    _write_uvfits(
        tmp_path / "a.uvfits", data, baselines=np.tile([515.0, 259.0, 258.0], 3)
    )
    bl = np.tile([770.0, 259.0, 513.0], 3)  # 3-2, 1-3, 2-1
    flipped = data.copy()
    flipped[bl != 259.0, ..., 1] *= -1  # conjugate the reversed ones
    rev = tmp_path / "b.uvfits"
    _write_uvfits(rev, flipped, baselines=bl, uv_sign=np.where(bl != 259.0, -1, 1))
    a, b = eqm.load_uvfits(tmp_path / "a.uvfits"), eqm.load_uvfits(rev)
    for field in ("ant1", "ant2", "u", "v", "vis", "sigma", "time"):
        assert_allclose(getattr(b, field), getattr(a, field), rtol=1e-6)
    assert np.asarray(a.ant1)[:3].tolist() == [0, 0, 1]


def test_baselines_of_antennas_beyond_255(tmp_path):
    """From a review: BASELINE above 65535 encodes `65536 + 2048 a1 + a2`
    (antenna numbers beyond 255), and ANTENNA1 / ANTENNA2 parameters, where a
    file has them, give the antennas directly (the rows were read as `bl // 256`,
    stations that do not exist). Both load as the usual encoding does."""
    data = _one_per_row(9)
    _write_uvfits(tmp_path / "a.uvfits", data)
    big = np.tile([65536.0 + 2048 + 2, 65536.0 + 2048 + 3, 65536.0 + 4096 + 3], 3)
    _write_uvfits(tmp_path / "b.uvfits", data, baselines=big)
    # ANTENNA1/2 win over a BASELINE that (as here) says something else.
    ants = (np.tile([1.0, 1.0, 2.0], 3), np.tile([2.0, 3.0, 3.0], 3))
    _write_uvfits(
        tmp_path / "c.uvfits", data, baselines=np.full(9, 258.0), antennas=ants
    )
    a = eqm.load_uvfits(tmp_path / "a.uvfits")
    for name in ("b", "c"):
        b = eqm.load_uvfits(tmp_path / f"{name}.uvfits")
        for field in ("ant1", "ant2", "u", "v", "vis", "sigma", "time"):
            np.testing.assert_array_equal(getattr(b, field), getattr(a, field))


def test_rows_of_another_subarray_are_refused(tmp_path):
    """From a review: a BASELINE's fractional part is its subarray, whose
    stations are in another AN table; such rows loaded with the first table's
    stations."""
    bl = np.tile([258.0, 259.0, 515.0], 3)
    _write_uvfits(tmp_path / "a.uvfits", _one_per_row(9), baselines=bl)
    assert eqm.load_uvfits(tmp_path / "a.uvfits").n_rows == 9
    bl[4] += 0.01  # subarray 2
    _write_uvfits(tmp_path / "b.uvfits", _one_per_row(9), baselines=bl)
    with pytest.raises(ValueError, match="1 rows belong to a subarray other"):
        eqm.load_uvfits(tmp_path / "b.uvfits")
    # With ANTENNA1/2 (which win over BASELINE) and a SUBARRAY parameter, as
    # pyuvdata writes them: refused too.
    ants = (np.tile([1.0, 1.0, 2.0], 3), np.tile([2.0, 3.0, 3.0], 3))
    _write_uvfits(
        tmp_path / "c.uvfits",
        _one_per_row(9),
        antennas=ants,
        extra={"SUBARRAY": np.where(np.arange(9) == 7, 2.0, 1.0)},
    )
    with pytest.raises(ValueError, match="1 rows belong to a subarray other"):
        eqm.load_uvfits(tmp_path / "c.uvfits")


def test_an_unnamed_axis_longer_than_one_is_named_by_its_fits_number(tmp_path):
    """From a review: the message named a numpy axis ("axis 3") and guessed
    "pointing"; it now names the FITS axis and the fix for an IF axis."""
    data = np.repeat(_one_per_row(6), 2, axis=3)  # two IFs
    path = tmp_path / "a.uvfits"
    _write_uvfits(path, data)
    assert eqm.load_uvfits(path).n_rows == 6
    with fits.open(path, mode="update") as h:
        del h[0].header["CTYPE5"]
    with pytest.raises(
        ValueError, match=r"data axis 5 \(no CTYPE5\) has length 2.*'IF'"
    ):
        eqm.load_uvfits(path)


def test_gzip_compressed_files_load(tmp_path, local):
    """A `.uvfits.gz` (which astropy and eht-imaging read) loads as the file does;
    one that does not decompress is refused, saying so."""
    import gzip

    p = tmp_path / "local.uvfits.gz"
    p.write_bytes(gzip.compress(LOCAL.read_bytes()))
    got = eqm.load_uvfits(p)
    for field in ("ant1", "ant2", "u", "v", "vis", "sigma", "time"):
        np.testing.assert_array_equal(getattr(got, field), getattr(local, field))
    p.write_bytes(gzip.compress(LOCAL.read_bytes())[:50_000])
    with pytest.raises(ValueError, match="gzip-compressed but does not decompress"):
        eqm.load_uvfits(p)


CHECK_AS_STRING = unchecked_error(
    "em.load_uvfits(em.example_uvfits(), check='False')", "TypeError"
)
PATH_NONE = unchecked_error("em.load_uvfits(None)", "TypeError")


def test_path_and_check_are_checked(unchecked):
    """From a review: `check="False"` (a true string) ran the checks, and `None`
    for the path raised a message naming no argument. Without the suite's type
    checker, as users run it."""
    msg = unchecked[CHECK_AS_STRING]
    assert msg is not None and "`check` must be True or False" in msg
    msg = unchecked[PATH_NONE]
    assert msg is not None and "`path` must be a file path" in msg


def test_save_uvfits_round_trips(tmp_path, local):
    """`save_uvfits` → `load_uvfits` gives the data back: the shipped file's, and
    `observe`'s synthetic data (arbitrary times) after a time average, to float64
    rounding (the date to a float64 Julian date's resolution, ~1e-8 h)."""
    grid = eqm.ImageGrid.from_fov(16, 128.0)
    obs = eqm.observe(
        eqm.GaussianImage(grid, 0.6, eqm.uas_to_rad(40.0)),
        grid,
        eqm.EHT2017,
        ra=187.7059,
        dec=12.3911,
        times=np.arange(1.37, 5.0, 123.0 / 3600),
        integration=7.0,
        seed=1,
    )
    for name, data in (("local", local), ("observe", obs)):
        path = tmp_path / f"{name}.uvfits"
        eqm.save_uvfits(data, path)
        back = eqm.load_uvfits(path)
        for field in ("ant1", "ant2", "band", "tint", "station_xyz"):
            np.testing.assert_array_equal(
                getattr(back, field), getattr(data, field), err_msg=field
            )
        for field in ("u", "v", "vis", "sigma"):  # u / f · f: one rounding
            np.testing.assert_allclose(
                getattr(back, field), getattr(data, field), rtol=3e-16, err_msg=field
            )
        assert_allclose(back.time, data.time, rtol=0, atol=2e-8)
        for field in (
            "station_names",
            "band_freqs",
            "bandwidth",
            "source",
            "ra",
            "dec",
            "mjd",
        ):
            assert getattr(back, field) == getattr(data, field), field


def test_save_uvfits_many_stations_and_no_bandwidth(tmp_path):
    """From a review: beyond 255 stations `256 a1 + a2` exceeds 65535, which
    reads back as the other encoding (other stations, silently); and a bandwidth
    of 0 (VisData's default, "unknown") came back as 1 Hz. Both round-trip."""
    n_st = 300
    rng = np.random.default_rng(0)
    ant1 = np.array([0, 10, 5, 254, 255])
    ant2 = np.array([1, 280, 299, 255, 256])
    n = ant1.size
    data = eqm.VisData(
        u=rng.normal(size=n) * 1e9,
        v=rng.normal(size=n) * 1e9,
        vis=rng.normal(size=n) + 1j * rng.normal(size=n),
        sigma=np.full(n, 0.1),
        time=np.linspace(1.0, 2.0, n),
        ant1=ant1,
        ant2=ant2,
        station_names=[f"S{i}" for i in range(n_st)],
        freq=230e9,
    )
    assert data.bandwidth == 0
    path = tmp_path / "many.uvfits"
    eqm.save_uvfits(data, path)
    back = eqm.load_uvfits(path, check=False)
    np.testing.assert_array_equal(back.ant1, data.ant1)
    np.testing.assert_array_equal(back.ant2, data.ant2)
    assert back.station_names == data.station_names and back.bandwidth == 0


SAVE_NOT_VISDATA = unchecked_error(
    "em.save_uvfits(np.ones(3), 'x.uvfits')", "TypeError"
)
SAVE_PATH_NONE = unchecked_error(
    "em.save_uvfits(em.load_uvfits(em.example_uvfits()), None)", "TypeError"
)


def test_save_uvfits_refuses(tmp_path, local, unchecked):
    """Several bands (their u, v are in wavelengths at each band's frequency), an
    existing file without `overwrite`, and arguments of the wrong kind."""
    path = tmp_path / "a.uvfits"
    eqm.save_uvfits(local, path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        eqm.save_uvfits(local, path)
    eqm.save_uvfits(local, path, overwrite=True)
    # Two bands: the same file with its frequency moved (as a high band).
    with fits.open(LOCAL) as h:
        h["AIPS AN"].header["FREQ"] = 229.07e9
        h[0].header["CRVAL4"] = 229.07e9  # (the AN table's FREQ must agree)
        h.writeto(tmp_path / "hi.uvfits")
    two = eqm.concatenate([local, eqm.load_uvfits(tmp_path / "hi.uvfits")])
    with pytest.raises(ValueError, match="hold 2 bands.*save each band"):
        eqm.save_uvfits(two, tmp_path / "b.uvfits")
    msg = unchecked[SAVE_NOT_VISDATA]
    assert msg is not None and "`data` must be a VisData" in msg
    msg = unchecked[SAVE_PATH_NONE]
    assert msg is not None and "`path` must be a file path" in msg


def test_multi_if_multi_channel_average(tmp_path):
    """Per hand: Σ w V / Σ w over IFs and channels with w > 0, σ = 1/sqrt(Σ w);
    then I = (RR + LL)/2, σ_I = ½ sqrt(σ_RR² + σ_LL²)."""
    rng = np.random.default_rng(1)
    data = np.zeros((6, 1, 1, 2, 3, 2, 3))
    data[..., :2] = rng.normal(size=data.shape[:-1] + (2,))
    data[..., 2] = rng.uniform(0.5, 5.0, size=data.shape[:-1])
    data[0, 0, 0, 1, 2, 0, 2] = 0.0  # one flagged RR channel
    data[1, 0, 0, 0, 0, 1, 2] = -3.0  # one flagged LL channel
    data = data.astype(np.float32).astype(np.float64)
    u, v = _write_uvfits(tmp_path / "multi.uvfits", data)
    d = eqm.load_uvfits(tmp_path / "multi.uvfits")
    hands = []
    for h in (0, 1):
        vis = data[:, 0, 0, :, :, h, 0] + 1j * data[:, 0, 0, :, :, h, 1]
        w = np.where(data[:, 0, 0, :, :, h, 2] > 0, data[:, 0, 0, :, :, h, 2], 0)
        hands.append(
            (
                (w * vis).sum(axis=(1, 2)) / w.sum(axis=(1, 2)),
                1 / np.sqrt(w.sum(axis=(1, 2))),
            )
        )
    expect_vis = 0.5 * (hands[0][0] + hands[1][0])
    expect_sig = 0.5 * np.hypot(hands[0][1], hands[1][1])
    assert d.n_rows == 6 and d.n_stations == 3
    assert_allclose(d.vis, expect_vis, rtol=1e-13)
    assert_allclose(d.sigma, expect_sig, rtol=1e-13)
    assert_allclose(d.u, u, rtol=1e-6)  # stored as float32 light-seconds
    assert d.bandwidth == pytest.approx(2 * 3 * 1e8)


@pytest.mark.parametrize("stokes0, n_stokes", [(1.0, 1), (-5.0, 2)])
def test_stokes_i_and_linear_files(tmp_path, stokes0, n_stokes):
    rng = np.random.default_rng(2)
    data = np.zeros((3, 1, 1, 1, 1, n_stokes, 3))
    data[..., :2] = rng.normal(size=data.shape[:-1] + (2,))
    data[..., 2] = 4.0
    data = data.astype(np.float32).astype(np.float64)
    _write_uvfits(tmp_path / "s.uvfits", data, stokes0=stokes0)
    d = eqm.load_uvfits(tmp_path / "s.uvfits")
    vis = data[:, 0, 0, 0, 0, :, 0] + 1j * data[:, 0, 0, 0, 0, :, 1]
    if n_stokes == 1:  # a Stokes I file: taken as is
        assert_allclose(d.vis, vis[:, 0], rtol=1e-15)
        assert_allclose(d.sigma, np.full(3, 0.5), rtol=1e-15)
    else:  # XX, YY: I = (XX + YY)/2
        assert_allclose(d.vis, vis.mean(axis=1), rtol=1e-15)
        assert_allclose(d.sigma, np.full(3, 0.5 / np.sqrt(2)), rtol=1e-15)


# ------------------------------------------------------------------ bad files
def test_scaled_integer_groups_load_as_their_values(tmp_path):
    """Integer groups: `BSCALE`/`BZERO` of the data and `PSCALn`/`PZEROn` of the
    parameters are applied in float64 (astropy 8 leaves out a random-groups
    `BZERO`: the reader applies it, as the FITS standard says)."""
    rng = np.random.default_rng(3)
    n = 6
    stored = rng.integers(-3000, 3000, size=(n, 1, 1, 1, 1, 1, 3)).astype(np.int16)
    stored[..., 2] = rng.integers(1, 100, size=(n, 1, 1, 1, 1, 1))
    uv = rng.integers(-30000, 30000, size=(2, n)).astype(np.int16)
    pars = [uv[0], uv[1], np.full(n, 258 + 257 * (np.arange(n) % 2), np.int16)]
    pars += [np.zeros(n, np.int16), np.arange(n, dtype=np.int16)]
    g = fits.GroupData(
        stored,
        bitpix=16,
        parnames=["UU---SIN", "VV---SIN", "BASELINE", "DATE", "DATE"],
        pardata=pars,
    )
    hdu = fits.GroupsHDU(g)
    for k, ctype in enumerate(["COMPLEX", "STOKES", "FREQ", "IF", "RA", "DEC"], 2):
        hdu.header[f"CTYPE{k}"] = ctype
        hdu.header[f"CRVAL{k}"] = 230e9 if ctype == "FREQ" else 1.0
    an = fits.BinTableHDU.from_columns(
        [
            fits.Column("ANNAME", "8A", array=["X1", "X2", "X3"]),
            fits.Column("STABXYZ", "3D", array=6.4e6 * np.eye(3)),
            fits.Column("NOSTA", "1J", array=[1, 2, 3]),
        ],
        name="AIPS AN",
    )
    for key, value in [("PSCAL1", 1e-7), ("PSCAL2", 1e-7), ("PZERO4", 2457854.5)]:
        hdu.header[key] = value
    hdu.header["PSCAL5"] = 1e-3
    hdu.header["XBSCALE"] = 0.25
    hdu.header["XBZERO"] = 3.0
    path = tmp_path / "scaled.uvfits"
    fits.HDUList([hdu, an]).writeto(path)
    # The data's scaling, renamed into place in the written header (astropy 8
    # does not write scaled integer groups itself).
    raw = path.read_bytes()
    for card in (b"XBSCALE ", b"XBZERO  "):
        assert raw.count(card) == 1
        raw = raw.replace(card, card[1:] + b" ")
    path.write_bytes(raw)
    d = eqm.load_uvfits(path, check=False)
    x = stored[:, 0, 0, 0, 0, 0].astype(np.float64) * 0.25 + 3.0
    order = np.argsort(np.arange(n) * 1e-3, kind="stable")  # by time
    assert_allclose(np.asarray(d.vis), (x[:, 0] + 1j * x[:, 1])[order], rtol=1e-15)
    assert_allclose(np.asarray(d.sigma), 1 / np.sqrt(x[order, 2]), rtol=1e-15)
    assert_allclose(np.asarray(d.u), uv[0][order] * 1e-7 * 230e9, rtol=1e-15)
    # A float64 Julian date resolves about 1e-8 h.
    assert_allclose(np.asarray(d.time), np.arange(n) * 1e-3 * 24, rtol=0, atol=1e-7)
    assert d.mjd == 57854


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such uvfits file"):
        eqm.load_uvfits(tmp_path / "nothing.uvfits")


def test_directory_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="directory"):
        eqm.load_uvfits(tmp_path)


def test_not_fits(tmp_path):
    p = tmp_path / "text.uvfits"
    p.write_text("this is not a FITS file\n" * 100)
    with pytest.raises(ValueError, match="could not be read as a uvfits"):
        eqm.load_uvfits(p)


@pytest.mark.parametrize("keep", [1000, 50_000, 200_000, 211_240, 221_770])
def test_truncated(tmp_path, keep):
    """Cut inside the primary header (1000), the groups (50 000, 200 000), the
    antenna table's header (211 240: astropy alone drops that table) or the last
    table's data (221 770): refused, naming the truncation."""
    p = tmp_path / "trunc.uvfits"
    p.write_bytes(LOCAL.read_bytes()[:keep])
    with pytest.raises(ValueError, match="is truncated"):
        eqm.load_uvfits(p)


def test_missing_final_padding_is_accepted(tmp_path, local):
    """A file whose last data unit is complete but lacks the padding to a
    2880-byte block (224 000 of 224 640 bytes) loads as the whole file."""
    p = tmp_path / "unpadded.uvfits"
    p.write_bytes(LOCAL.read_bytes()[:224_000])
    d = eqm.load_uvfits(p)
    assert np.array_equal(np.asarray(d.vis), np.asarray(local.vis))
    assert d.bandwidth == local.bandwidth


@pytest.mark.parametrize(
    "card, new, match",
    [
        ("PSCAL1", "PSCAL1  =4.4E-12", r"card PSCAL1 = '=4.4E-12' is not a number"),
        ("BSCALE", "BSCALE  =                1_0.0", r"Unparsable card \(BSCALE\)"),
        ("OBSRA", "OBSRA   = 'abc'", r"card OBSRA = 'abc' is not a number"),
        ("DATE-OBS", "DATE-OBS= 2017-04-10", None),
    ],
)
def test_malformed_cards(tmp_path, local, card, new, match):
    """A malformed card that the loader uses refuses the file, naming the card; one
    it does not use (an unquoted DATE-OBS) does not."""
    raw = LOCAL.read_bytes()
    i = raw.index(card.ljust(8).encode() + b"=")
    p = tmp_path / "cards.uvfits"
    p.write_bytes(raw[:i] + new.ljust(80).encode() + raw[i + 80 :])
    if match is None:
        assert eqm.load_uvfits(p).n_rows == local.n_rows
    else:
        with pytest.raises(
            ValueError, match=r"(?s)cards.uvfits' could not be read.*" + match
        ):
            eqm.load_uvfits(p)


def test_corrupt_header(tmp_path):
    raw = bytearray(LOCAL.read_bytes())
    raw[: 80 * 3] = b"X" * (80 * 3)
    p = tmp_path / "corrupt.uvfits"
    p.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="uvfits"):
        eqm.load_uvfits(p)


def test_image_fits_is_not_uvfits(tmp_path):
    p = tmp_path / "image.fits"
    fits.PrimaryHDU(np.zeros((4, 4))).writeto(p)
    with pytest.raises(ValueError, match="not uvfits"):
        eqm.load_uvfits(p)


def test_missing_antenna_table(tmp_path):
    p = tmp_path / "noan.uvfits"
    with fits.open(LOCAL) as h:
        fits.HDUList([h[0], h["AIPS FQ"]]).writeto(p)
    with pytest.raises(ValueError, match="AIPS AN"):
        eqm.load_uvfits(p)


def test_antenna_missing_from_table(tmp_path):
    def edit(h):
        h["AIPS AN"].data["NOSTA"][0] = 42  # station 1 (AA) renumbered

    with pytest.raises(ValueError, match=r"antenna number\(s\) \[1\]"):
        eqm.load_uvfits(_edit_copy(tmp_path, edit))


def test_everything_flagged(tmp_path):
    def edit(h):
        h[0].data.data[..., 2] = 0.0

    with pytest.raises(ValueError, match="every row is flagged"):
        eqm.load_uvfits(_edit_copy(tmp_path, edit))


def test_no_usable_polarisation(tmp_path):
    def edit(h):
        h[0].header["CRVAL3"] = 2.0  # Stokes Q, U, V, ...: no total intensity
        h[0].header["CDELT3"] = 1.0

    with pytest.raises(ValueError, match="no Stokes I, RR/LL"):
        eqm.load_uvfits(_edit_copy(tmp_path, edit))


def test_missing_freq_axis(tmp_path):
    def edit(h):
        h[0].header["CTYPE4"] = "NOTFREQ"

    with pytest.raises(ValueError, match="no FREQ axis"):
        eqm.load_uvfits(_edit_copy(tmp_path, edit))


def test_pathlike_and_str(tmp_path):
    p = tmp_path / "copy.uvfits"
    shutil.copy(LOCAL, p)
    assert eqm.load_uvfits(str(p)).n_rows == eqm.load_uvfits(p).n_rows


# ------------------------------------------------------------------ FITS images
def _test_image(grid):
    xx, yy = grid.coords()
    s = 5 * eqm.RAD_PER_UAS
    # Off-centre and asymmetric so flips and shifts are visible.
    return np.exp(-((xx - 2 * s) ** 2 + (yy + s) ** 2) / (2 * s**2)) + 0.1 * (xx > 0)


def test_save_load_fits_round_trip(tmp_path):
    grid = eqm.ImageGrid(16, 12, eqm.uas_to_rad(3.0))
    img = _test_image(grid)
    p = tmp_path / "img.fits"
    eqm.save_fits(
        img, grid, p, ra=187.7, dec=12.39, freq=230e9, mjd=57854, source="M87"
    )
    back, grid2 = eqm.load_fits(p)
    assert np.array_equal(back, img)
    assert grid2.shape == grid.shape
    assert math.isclose(grid2.psize, grid.psize, rel_tol=1e-14)
    with fits.open(p) as h:
        hd = h[0].header
        assert hd["BUNIT"] == "JY/PIXEL" and hd["OBJECT"] == "M87"
        assert hd["FREQ"] == 230e9 and hd["MJD-OBS"] == 57854 and hd["MJD"] == 57854
        # FITS row 1 is the south edge: our last row.
        assert np.array_equal(h[0].data[0], img[-1])


def test_save_fits_wcs_orientation(tmp_path):
    """astropy.wcs puts the phase centre between the central pixels (even n),
    RA grows to the left (east), Dec grows upward, pixel scale = psize."""
    wcs_mod = pytest.importorskip("astropy.wcs")
    grid = eqm.ImageGrid(8, 8, eqm.uas_to_rad(10.0))
    p = tmp_path / "img.fits"
    eqm.save_fits(np.ones(grid.shape), grid, p, ra=30.0, dec=-20.0)
    with fits.open(p) as h:
        w = wcs_mod.WCS(h[0].header)
    # 0-based pixel (3.5, 3.5) is the corner between the central pixels.
    ra, dec = w.wcs_pix2world([[3.5, 3.5]], 0)[0]
    assert_allclose(np.array([ra, dec]), np.array([30.0, -20.0]), rtol=1e-12)
    ra0, dec0 = w.wcs_pix2world([[0.0, 3.5]], 0)[0]
    ra1, dec1 = w.wcs_pix2world([[0.0, 4.5]], 0)[0]
    assert ra0 > 30.0  # column 0 of the FITS array is east (larger RA)
    assert_allclose(np.array(dec1 - dec0), np.array(10.0 / 3600e6), rtol=1e-6)


def test_save_fits_accepts_image_model(tmp_path):
    grid = eqm.ImageGrid(8, 8, eqm.uas_to_rad(5.0))
    img = _test_image(grid) + 0.01
    model = eqm.PixelImage.from_image(img, grid)
    p = tmp_path / "m.fits"
    eqm.save_fits(model, grid, p)
    back, _ = eqm.load_fits(p)
    assert_allclose(back, img, rtol=1e-12)


def test_save_fits_errors(tmp_path):
    grid = eqm.ImageGrid(8, 8, eqm.uas_to_rad(5.0))
    p = tmp_path / "x.fits"
    with pytest.raises(ValueError, match="shape"):
        eqm.save_fits(np.zeros((4, 4)), grid, p)
    with pytest.raises(ValueError, match="non-finite"):
        eqm.save_fits(np.full(grid.shape, np.nan), grid, p)
    with pytest.raises(TypeError, match="real"):
        eqm.save_fits(np.zeros(grid.shape, complex), grid, p)
    with pytest.raises(TypeError, match="ImageGrid"):
        eqm.save_fits(np.zeros(grid.shape), (8, 8), p)
    with pytest.raises(ValueError, match="dec"):
        eqm.save_fits(np.zeros(grid.shape), grid, p, dec=100.0)
    # ra in degrees, [0, 360], as everywhere else (a header of 400° or of hours
    # given as negative degrees is refused, not written).
    with pytest.raises(ValueError, match=r"`ra`.*\[0, 360\].*ra % 360"):
        eqm.save_fits(np.zeros(grid.shape), grid, p, ra=400.0)
    with pytest.raises(ValueError, match="`ra`"):
        eqm.save_fits(np.zeros(grid.shape), grid, p, ra=-12.5)
    with pytest.raises(ValueError, match="freq"):
        eqm.save_fits(np.zeros(grid.shape), grid, p, freq=-1.0)
    # (The test suite's runtime type checker may catch these first, naming the
    # argument too.)
    with pytest.raises((TypeError, ValueError), match="freq"):
        eqm.save_fits(np.zeros(grid.shape), grid, p, freq="230e9")
    for mjd in (-1, float("nan"), "57854"):
        with pytest.raises((TypeError, ValueError), match="mjd"):
            eqm.save_fits(np.zeros(grid.shape), grid, p, mjd=mjd)
    with pytest.raises(TypeError, match="source"):
        eqm.save_fits(np.zeros(grid.shape), grid, p, source=5)
    eqm.save_fits(np.zeros(grid.shape), grid, p)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        eqm.save_fits(np.zeros(grid.shape), grid, p)
    eqm.save_fits(np.ones(grid.shape), grid, p, overwrite=True)
    assert eqm.load_fits(p)[0].sum() == 64


def test_load_fits_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        eqm.load_fits(tmp_path / "none.fits")
    p = tmp_path / "bad.fits"
    p.write_text("garbage" * 100)
    with pytest.raises(ValueError, match="could not be read"):
        eqm.load_fits(p)
    q = tmp_path / "rect.fits"
    hdu = fits.PrimaryHDU(np.zeros((4, 4)))
    hdu.header["CDELT1"] = -1e-9
    hdu.header["CDELT2"] = 2e-9
    hdu.writeto(q)
    with pytest.raises(ValueError, match="square pixels"):
        eqm.load_fits(q)
    cube = tmp_path / "cube.fits"
    fits.PrimaryHDU(np.zeros((2, 4, 4))).writeto(cube)
    with pytest.raises(ValueError, match="axis 3 .with no CTYPE. has 2 planes"):
        eqm.load_fits(cube)


def _edited_fits(tmp_path, data, **header):
    """A FITS image written by `save_fits` (4 µas pixels), then `data` and the
    `header` cards replaced (a value of None deletes the card)."""
    grid = eqm.ImageGrid(*np.shape(data)[-2:], eqm.uas_to_rad(4.0))
    p = tmp_path / "edited.fits"
    eqm.save_fits(np.ones(grid.shape), grid, p, overwrite=True)
    with fits.open(p, mode="update") as h:
        h[0].data = np.asarray(data, np.float64)
        for key, value in header.items():
            if value is None:
                del h[0].header[key]
            else:
                h[0].header[key] = value
    return p


def test_load_fits_converts_jy_per_beam(tmp_path):
    """A Jy/beam image (DIFMAP, CASA) is divided by the beam's area in pixels,
    π·BMAJ·BMIN / (4 ln 2 · psize²), written here from the Gaussian beam's
    integral, not taken from the code."""
    rng = np.random.default_rng(3)
    data = rng.uniform(0.1, 1.0, (6, 8))
    psize_deg = 4.0 / 3600e6
    bmaj, bmin = 20.0 / 3600e6, 12.0 / 3600e6  # degrees
    p = _edited_fits(tmp_path, data, BUNIT="JY/BEAM", BMAJ=bmaj, BMIN=bmin)
    img, _ = eqm.load_fits(p)
    # The beam's integral: a 2-d Gaussian of FWHMs a, b has area 2π σa σb.
    sa, sb = (w / np.sqrt(8 * np.log(2)) for w in (bmaj, bmin))
    beam_pixels = 2 * np.pi * sa * sb / psize_deg**2
    assert_allclose(img, data[::-1] / beam_pixels, rtol=1e-13)
    for bunit in ("Jy/pixel", "JY/PIXEL", "jy/pix"):
        img, _ = eqm.load_fits(_edited_fits(tmp_path, data, BUNIT=bunit))
        assert_allclose(img, data[::-1], rtol=0)
    img, _ = eqm.load_fits(_edited_fits(tmp_path, data, BUNIT=None))
    assert_allclose(img, data[::-1], rtol=0)  # no unit: Jy/pixel, as eht-imaging


@pytest.mark.slow
def test_load_fits_jy_per_beam_agrees_with_ehtim(tmp_path):
    eh = pytest.importorskip("ehtim")
    from tests.helpers import quiet

    rng = np.random.default_rng(4)
    data = rng.uniform(0.1, 1.0, (8, 8))
    p = _edited_fits(
        tmp_path, data, BUNIT="JY/BEAM", BMAJ=20.0 / 3600e6, BMIN=12.0 / 3600e6
    )
    img, _ = eqm.load_fits(p)
    with quiet():
        ref = eh.image.load_fits(str(p))
    assert_allclose(img, ref.imvec.reshape(ref.ydim, ref.xdim), rtol=1e-12)


def test_load_fits_refuses_bad_units_blanks_and_missing_steps(tmp_path):
    data = np.ones((4, 4))
    with pytest.raises(ValueError, match="BUNIT is JY/BEAM .* no valid BMAJ/BMIN"):
        eqm.load_fits(_edited_fits(tmp_path, data, BUNIT="JY/BEAM"))
    with pytest.raises(ValueError, match="BMAJ/BMIN must be > 0"):
        eqm.load_fits(
            _edited_fits(tmp_path, data, BUNIT="JY/BEAM", BMAJ=0.0, BMIN=1e-9)
        )
    with pytest.raises(ValueError, match="unsupported image unit BUNIT = 'K'"):
        eqm.load_fits(_edited_fits(tmp_path, data, BUNIT="K"))
    blanked = data.copy()
    blanked[1, 2] = np.nan
    blanked[3, 0] = np.inf
    with pytest.raises(ValueError, match=r"2 non-finite .* index \[1, 2\]"):
        eqm.load_fits(_edited_fits(tmp_path, blanked))
    with pytest.raises(ValueError, match="no pixel size"):
        eqm.load_fits(_edited_fits(tmp_path, data, CDELT1=None))


def test_load_fits_keeps_a_single_row_and_drops_unit_axes(tmp_path):
    grid = eqm.ImageGrid(1, 8, eqm.uas_to_rad(2.0))
    row = np.arange(1.0, 9.0)[None, :]
    p = tmp_path / "row.fits"
    eqm.save_fits(row, grid, p)
    img, g = eqm.load_fits(p)
    assert img.shape == (1, 8) and g.shape == (1, 8)
    assert_allclose(img, row, rtol=0)
    # Stokes and frequency axes of length 1 (as CASA writes) are dropped.
    data = np.arange(12.0).reshape(1, 1, 3, 4)
    img, g = eqm.load_fits(_edited_fits(tmp_path, data))
    assert g.shape == (3, 4)
    assert_allclose(img, data[0, 0, ::-1], rtol=0)


def test_save_fits_refuses_a_model_on_another_grid(tmp_path):
    g = eqm.ImageGrid(16, 16, eqm.uas_to_rad(2.0))
    other = eqm.ImageGrid(16, 16, eqm.uas_to_rad(8.0))
    model = eqm.GaussianImage(g, 1.0, eqm.uas_to_rad(10.0))
    with pytest.raises(
        ValueError, match="`image` is a GaussianImage on .*`image.grid`"
    ):
        eqm.save_fits(model, other, tmp_path / "m.fits")
    eqm.save_fits(model, eqm.ImageGrid.from_fov(16, 32.0), tmp_path / "m.fits")


def test_load_fits_metadata_round_trips_through_save_fits(tmp_path):
    """`load_fits(metadata=True)` gives `save_fits`'s keyword arguments back, so
    `save_fits(..., **meta)` rewrites the same header; absent cards are left out."""
    grid = eqm.ImageGrid(8, 8, eqm.uas_to_rad(4.0))
    p = tmp_path / "a.fits"
    meta_in = dict(ra=187.7059, dec=12.3911, freq=227.07e9, mjd=57854, source="M87")
    eqm.save_fits(_test_image(grid), grid, p, **meta_in)
    img, grid2, meta = eqm.load_fits(p, metadata=True)
    assert meta == meta_in
    q = tmp_path / "b.fits"
    eqm.save_fits(img, grid2, q, **meta)
    assert eqm.load_fits(q, metadata=True)[2] == meta_in
    # Without the optional cards: only what the header gives.
    bare = _edited_fits(tmp_path, np.ones((4, 4)), OBJECT=None, CRVAL1=None)
    assert eqm.load_fits(bare, metadata=True)[2] == {"dec": 0.0}
    # A negative RA (CRVAL1 of −10°) is wrapped into [0, 360].
    wrapped = _edited_fits(tmp_path, np.ones((4, 4)), CRVAL1=-10.0)
    assert eqm.load_fits(wrapped, metadata=True)[2]["ra"] == 350.0
    # A frequency axis (CASA, DIFMAP) gives the frequency when FREQ is absent.
    cube = _edited_fits(
        tmp_path, np.ones((1, 4, 4)), NAXIS3=1, CTYPE3="FREQ", CRVAL3=86.0e9
    )
    assert eqm.load_fits(cube, metadata=True)[2]["freq"] == 86.0e9
    # FREQ = 0 is eht-imaging's "unknown" (it writes its `rf`, 0 when it read no
    # frequency): left out, as a missing card is (it refused the file).
    unknown = _edited_fits(tmp_path, np.ones((4, 4)), FREQ=0.0)
    assert "freq" not in eqm.load_fits(unknown, metadata=True)[2]
    with pytest.raises(ValueError, match="frequency -1.0 Hz is not > 0"):
        eqm.load_fits(_edited_fits(tmp_path, np.ones((4, 4)), FREQ=-1.0), metadata=True)


# (Raised before anything is written: the folder does not exist.)
FITS_DATA_DICT = unchecked_error(
    "em.save_fits(np.ones((8, 8)), em.ImageGrid(8, 8, 1e-11), "
    "'/nonexistent-eqmodels-folder/d.fits', data={})",
    "TypeError",
)


@pytest.mark.slow
def test_save_fits_takes_the_metadata_of_its_data(tmp_path, unchecked):
    """`save_fits(..., data=vis)` writes the data's position, source, frequency
    and date (with the first timestamp's time of day); keywords override them.
    From a user walkthrough: written without them (RA = Dec = 0), eht-imaging
    refused to observe the image with the real data."""
    d = eqm.load_uvfits(LOCAL)
    grid = eqm.ImageGrid(8, 8, eqm.uas_to_rad(4.0))
    p = tmp_path / "a.fits"
    eqm.save_fits(_test_image(grid), grid, p, data=d)
    meta = eqm.load_fits(p, metadata=True)[2]
    t0 = float(np.min(np.asarray(d.time)))
    want = dict(ra=d.ra, dec=d.dec, freq=d.band_freqs[0], source=d.source)
    assert {k: meta[k] for k in want} == want
    assert_allclose(meta["mjd"], d.mjd + t0 / 24, rtol=1e-15)
    q = tmp_path / "b.fits"
    eqm.save_fits(_test_image(grid), grid, q, data=d, ra=10.0, source="X", mjd=57000)
    over = eqm.load_fits(q, metadata=True)[2]
    assert (over["ra"], over["dec"], over["source"], over["mjd"]) == (
        10.0,
        d.dec,
        "X",
        57000,
    )
    bare = tmp_path / "c.fits"
    eqm.save_fits(_test_image(grid), grid, bare)
    assert eqm.load_fits(bare, metadata=True)[2] == {
        "ra": 0.0,
        "dec": 0.0,
        "source": "unknown",
    }
    # (Our own message: the suite's type checker refuses a dict first.)
    msg = unchecked[FITS_DATA_DICT]
    assert msg == "`data` must be a VisData, got dict."
    eh = pytest.importorskip("ehtim")
    from tests.helpers import quiet

    with quiet():
        im = eh.image.load_fits(str(p))
        obs = eh.obsdata.load_uvfits(str(LOCAL))
        im.observe_same_nonoise(obs, ttype="direct")  # refused at RA = Dec = 0


def test_save_fits_takes_zero_dimensional_arrays(tmp_path):
    """From a review: `freq=data.freq` as a 0-d array was refused as "not a
    positive frequency"; numbers held in 0-d numpy / JAX arrays are numbers."""
    import jax.numpy as jnp

    grid = eqm.ImageGrid(8, 8, eqm.uas_to_rad(4.0))
    p = tmp_path / "a.fits"
    eqm.save_fits(
        _test_image(grid), grid, p, freq=jnp.asarray(227.07e9), mjd=np.float64(57854.5)
    )
    meta = eqm.load_fits(p, metadata=True)[2]
    assert meta["freq"] == 227.07e9 and meta["mjd"] == 57854.5


@pytest.mark.slow
def test_load_fits_metadata_of_the_pipeline_image_agrees_with_ehtim(
    shared_data, tmp_path
):
    """The EHT pipeline's image (eht-imaging writes OBSRA/OBSDEC, FREQ and a
    fractional MJD): the same position, frequency, day and source as eht-imaging
    reads (its `ra` is in hours)."""
    eh = pytest.importorskip("ehtim")
    from tests.helpers import quiet

    path = shared_data / "reference" / "m87_2017_101_ehtim_pipeline.fits"
    _, _, meta = eqm.load_fits(path, metadata=True)
    with quiet():
        ref = eh.image.load_fits(str(path))
    assert_allclose(meta["ra"], ref.ra * 15.0, rtol=1e-15)
    assert_allclose(meta["dec"], ref.dec, rtol=1e-15)
    assert meta["freq"] == ref.rf
    assert math.floor(meta["mjd"]) == ref.mjd
    assert_allclose((meta["mjd"] - ref.mjd) * 24.0, ref.time, rtol=1e-9)
    assert meta["source"] == ref.source
    # The time of day survives a round trip (the whole day alone was kept).
    out = tmp_path / "copy.fits"
    eqm.save_fits(*eqm.load_fits(path), out, **meta)
    with quiet():
        back = eh.image.load_fits(str(out))
    assert back.mjd == ref.mjd and abs(back.time - ref.time) < 1e-6


def test_load_fits_metadata_refuses_impossible_cards(tmp_path):
    data = np.ones((4, 4))
    with pytest.raises(ValueError, match="declination 100.0"):
        eqm.load_fits(_edited_fits(tmp_path, data, CRVAL2=100.0), metadata=True)
    with pytest.raises(ValueError, match="frequency -1.0 Hz"):
        eqm.load_fits(_edited_fits(tmp_path, data, FREQ=-1.0), metadata=True)
    # Without `metadata` the image still loads (the cards are not read).
    assert eqm.load_fits(_edited_fits(tmp_path, data, CRVAL2=100.0))[0].shape == (4, 4)


def test_fits_round_trip_pixel_size_and_plotting_the_loaded_grid(tmp_path):
    """The pixel size comes back from the `PSIZE` card (radians, as written; a
    card holds 16 significant digits), not from `CDELT` in degrees; and a model
    plotted with the loaded grid is accepted (`plot_image` compared grids bit for
    bit, and refused the pair)."""
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(0)
    grids = [eqm.ImageGrid.from_fov(7, 100.0), eqm.ImageGrid(6, 8, 1.1e-10)]
    # From a review: grids whose pixel size needs 17 digits came back 1 ulp off
    # (not equal to the saved grid: no shared transform, a recompilation).
    grids += [
        eqm.ImageGrid.from_fov(n, fov) for n in (32, 64) for fov in (128.0, 150.0)
    ]
    for grid in grids:
        img = rng.random(grid.shape)
        eqm.save_fits(img, grid, tmp_path / "a.fits", overwrite=True)
        back, loaded = eqm.load_fits(tmp_path / "a.fits")
        assert loaded == grid and loaded.psize == grid.psize
        np.testing.assert_array_equal(back, img)
        ax = eqm.plot_image(eqm.PixelImage.from_image(img, grid), loaded)
        ax.figure.clf()


def test_load_fits_refuses_swapped_axes(tmp_path):
    """Dec along axis 1 and RA along axis 2 (legal FITS) loaded transposed, with
    RA and Dec still read from the right cards: refused, as rotated axes are."""
    fits = pytest.importorskip("astropy.io.fits")
    grid = eqm.ImageGrid(4, 6, eqm.uas_to_rad(5.0))
    eqm.save_fits(np.ones(grid.shape), grid, tmp_path / "a.fits")
    with fits.open(tmp_path / "a.fits") as f:
        header, data = f[0].header.copy(), f[0].data.T.copy()
    for key in ("CTYPE", "CRVAL", "CDELT", "CRPIX", "CUNIT"):
        header[f"{key}1"], header[f"{key}2"] = header[f"{key}2"], header[f"{key}1"]
    fits.PrimaryHDU(data, header).writeto(tmp_path / "b.fits")
    with pytest.raises(ValueError, match="RA along axis 1 and Dec along axis 2"):
        eqm.load_fits(tmp_path / "b.fits")


def test_implausible_header_values_are_refused_naming_the_file(tmp_path):
    """From a review of the FITS reader: an AN-table FREQ of 1e308 (and no usable
    FREQ axis) loaded u, v of inf; a header's OBSDEC of 1e21 raised VisData's
    error without the file's name."""

    def freq(h):
        h["AIPS AN"].header["FREQ"] = 1e308
        h[0].header["CRVAL4"] = -1.0

    with pytest.raises(ValueError, match=r"edited.uvfits.*not a radio frequency"):
        eqm.load_uvfits(_edit_copy(tmp_path, freq))

    def dec(h):
        h[0].header["OBSDEC"] = 1e21

    (tmp_path / "dec").mkdir()
    with pytest.raises(ValueError, match=r"edited.uvfits.*`dec` must be in degrees"):
        eqm.load_uvfits(_edit_copy(tmp_path / "dec", dec))
