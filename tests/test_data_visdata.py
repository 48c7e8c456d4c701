"""VisData: construction checks, selection, concatenation, scans and averaging."""

import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as eqm

from .conftest import SHARED_DATA, TEST_DATA
from .helpers import assert_allclose
from .reference import data_averaging as ref
from .unchecked import unchecked_script


LOCAL = TEST_DATA / "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits"
APR11 = SHARED_DATA / "eht/m87_2017/SR1_M87_2017_101_lo_hops_netcal_StokesI.uvfits"
ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def local():
    pytest.importorskip("astropy")
    return eqm.load_uvfits(LOCAL)


def _small(**over):
    kw = dict(
        u=np.array([1e9, 2e9, -3e9]),
        v=np.array([0.5e9, -1e9, 2e9]),
        vis=np.array([1 + 1j, 0.5 - 0.2j, 0.3j]),
        sigma=np.array([0.1, 0.1, 0.2]),
        time=np.array([1.0, 1.0, 2.0]),
        ant1=np.array([0, 0, 2]),
        ant2=np.array([1, 2, 1]),
    )
    meta = dict(station_names=("A", "B", "C"), freq=230e9)
    pos = {k: over.pop(k, v) for k, v in kw.items()}
    meta.update(over)
    return eqm.VisData(*pos.values(), **meta)


def test_construct_and_orient():
    d = _small()
    assert d.n_rows == 3 and len(d) == 3 and d.n_stations == 3
    # Row 2 was (C, B): stored as (B, C) with conjugated vis and negated (u, v).
    assert np.asarray(d.ant1).tolist() == [0, 0, 1]
    assert np.asarray(d.ant2).tolist() == [1, 2, 2]
    assert complex(d.vis[2]) == -0.3j
    assert float(d.u[2]) == 3e9 and float(d.v[2]) == -2e9
    assert d.vis.dtype == jnp.complex128 and d.u.dtype == jnp.float64
    assert np.all(np.asarray(d.station_xyz) == 0)
    assert np.all(np.asarray(d.band) == 0) and d.freq == 230e9


def test_is_a_pytree_through_jit():
    d = _small()
    leaves = jax.tree_util.tree_leaves(d)
    assert len(leaves) == 10  # the per-row arrays and station_xyz
    out = jax.jit(lambda x: x)(d)
    assert out.station_names == d.station_names and out.mjd == d.mjd
    assert_allclose(out.vis, d.vis, rtol=0)

    @jax.jit
    def chi2_zero_model(data):
        return jnp.sum(jnp.abs(data.vis) ** 2 / data.sigma**2)

    expect = np.sum(np.abs(np.asarray(d.vis)) ** 2 / np.asarray(d.sigma) ** 2)
    assert_allclose(chi2_zero_model(d), expect)


@pytest.mark.parametrize(
    "over, exc, match",
    [
        (dict(u=np.zeros((3, 1))), ValueError, "1-d"),
        (dict(u=np.zeros(3) + 1j), TypeError, "real"),
        (dict(u=np.array([np.nan, 1.0, 2.0])), ValueError, "non-finite"),
        (dict(v=np.zeros(2)), ValueError, "shape mismatch"),
        (dict(vis=np.array([np.inf, 1, 1])), ValueError, "`vis` has 1 non-finite"),
        (dict(vis=np.array(["a", "b", "c"])), TypeError, "numeric"),
        (dict(sigma=np.array([0.1, 0.0, 0.1])), ValueError, "sigmas must be > 0"),
        (dict(sigma=np.array([0.1, -1.0, 0.1])), ValueError, "sigmas must be > 0"),
        (dict(time=np.array([1.0, np.nan, 1.0])), ValueError, "`time`"),
        (dict(ant2=np.array([1, 3, 1])), ValueError, "outside"),
        (dict(ant1=np.array([-1, 0, 2])), ValueError, "outside"),
        (dict(ant2=np.array([0, 2, 1])), ValueError, "autocorrelations"),
        (dict(ant1=np.array([0.5, 0, 2])), TypeError, "integers"),
        (dict(station_names=("A", "A", "C")), ValueError, "repeated"),
        (dict(station_names="ABC"), TypeError, "station_names"),
        (dict(station_names=3), TypeError, "station_names"),
        (dict(freq=-1.0), ValueError, "freq"),
        (dict(freq=230.0), ValueError, r"`freq` 230 is outside .* Hz \(230 GHz is"),
        (dict(freq="x"), TypeError, "freq"),
        (dict(band=np.array([0, 1, 0])), ValueError, "band"),
        (dict(station_xyz=np.zeros((2, 3))), ValueError, "station_xyz"),
        (dict(dec=95.0), ValueError, "dec"),
        (dict(ra=np.nan), ValueError, "ra"),
        (dict(ra=np.inf), ValueError, "`ra` must be a finite"),
        (dict(ra=1000.0), ValueError, "`ra` must be a right ascension.*360"),
        (dict(ra=-10.0), ValueError, "`ra`.*ra % 360"),
        (dict(dec=-np.inf), ValueError, "`dec`"),
        (dict(tint=np.array([1.0, 2.0])), ValueError, "`tint` has shape \\(2,\\)"),
        (dict(freq=[227e9, 229e9]), ValueError, "`freq` gives 2.*`band`"),
        (dict(freq=True), TypeError, "`freq`"),
        (dict(freq=np.array([[227e9]])), TypeError, "`freq`"),
        (dict(station_xyz=np.zeros((3, 3), complex)), TypeError, "`station_xyz`"),
        (dict(mjd=5.5), TypeError, "mjd"),
        (dict(n_flagged=-1), ValueError, "n_flagged"),
        (dict(tint=-1.0), ValueError, "tint"),
    ],
)
def test_construction_errors(over, exc, match):
    with pytest.raises(exc, match=match):
        _small(**over)


def test_freq_tint_ra_forms_accepted():
    # A 0-d array is one frequency.
    assert _small(freq=np.array(230e9)).band_freqs == (230e9,)
    assert _small(freq=[230e9]).band_freqs == (230e9,)
    # Several frequencies with `band`: rows report their own band.
    two = _small(freq=[227e9, 229e9], band=np.array([0, 1, 1]))
    assert two.band_freqs == (227e9, 229e9) and two.freq == 228e9
    # One integration time for every row, or one per row.
    assert np.asarray(_small(tint=10.0).tint).tolist() == [10.0] * 3
    three = np.array([1.0, 2.0, 3.0])
    assert np.asarray(_small(tint=three).tint).tolist() == three.tolist()
    for ra in (0.0, 187.7, 360.0, np.float32(12.5), 7):
        assert _small(ra=ra).ra == float(ra)


def test_negative_zero_time_is_the_same_timestamp():
    """`duplicate_rows` agrees with the closures, which group -0.0 with 0.0."""
    d = _small(
        time=np.array([0.0, -0.0, 1.0]), ant1=np.array([0, 0, 2]),
        ant2=np.array([1, 1, 1]),
    )  # fmt: skip
    assert d.duplicate_rows().tolist() == [False, True, False]
    with pytest.raises(ValueError, match="duplicated row"):
        d.scan_average()
    with pytest.raises(ValueError, match="duplicated row.*closure quantities"):
        eqm.closure_phases(d)


def test_empty_data_is_rejected():
    with pytest.raises(ValueError, match="at least one row"):
        eqm.VisData(
            np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0),
            np.zeros(0, int), np.zeros(0, int), station_names=("A", "B"), freq=1e9,
        )  # fmt: skip


# ------------------------------------------------------------------ selection
def test_select(local):
    d = local
    names = d.station_names
    sub = d.select_stations(["AA", "LM", "SM"])
    assert set(sub.stations_present()) == {"AA", "LM", "SM"}
    assert sub.n_rows == sum(
        1
        for a, b in zip(np.asarray(d.ant1), np.asarray(d.ant2))
        if names[a] in ("AA", "LM", "SM") and names[b] in ("AA", "LM", "SM")
    )
    no_aa = d.flag_stations("AA")
    assert "AA" not in no_aa.stations_present()
    assert no_aa.n_rows + int(np.sum(np.asarray(d.ant1) == 0)) == d.n_rows
    t = np.asarray(d.time)
    win = d.select_time(t[100], t[1000])
    assert win.n_rows == int(np.sum((t >= t[100]) & (t <= t[1000])))
    uvd = d.uvdist
    long = d.select_uvdist(uv_min=1e9)
    assert long.n_rows == int(np.sum(uvd >= 1e9))
    assert d.select_uvdist(None, 1e9).n_rows == int(np.sum(uvd <= 1e9))
    strong = d.select_snr(10.0)
    assert strong.n_rows == int(np.sum(d.snr >= 10))
    both = d.select(stations=["AA", "AP", "LM"], snr_min=5, uv_range=(1e8, None))
    assert both.n_rows == (
        d.select_stations(["AA", "AP", "LM"]).select_snr(5).select_uvdist(1e8).n_rows
    )
    assert d.select(bands=[0]).n_rows == d.n_rows
    # The station table is kept whole.
    assert sub.station_names == d.station_names


def test_select_errors(local):
    with pytest.raises(ValueError, match="unknown station"):
        local.select_stations(["AA", "XX"])
    # uv limits in Gλ (from a user walkthrough: a cut "removed every row" with no
    # word of units, or cut nothing). No baseline is shorter than a wavelength.
    for call, name in (
        (lambda: local.select_uvdist(0.1, 10), "uv_min"),
        (lambda: local.select_uvdist(None, 0.5), "uv_max"),
        (lambda: local.select(uv_range=(0.1, None)), "uv_range\\[0\\]"),
        (lambda: local.select(uv_range=(0, 0.5)), "uv_range\\[1\\]"),
        (lambda: eqm.closure_phases(local, uv_min=0.1), "uv_min"),
        (lambda: eqm.log_closure_amplitudes(local, uv_min=0.1), "uv_min"),
    ):
        with pytest.raises(ValueError, match=f"`{name}` 0.1|`{name}` 0.5"):
            call()
    with pytest.raises(ValueError, match="below one wavelength.*1e8"):
        local.select_uvdist(0.1, 10)
    # 0 and whole wavelengths are limits; an SNR cut below 1 is one too.
    assert local.select_uvdist(0, 1e9).n_rows > 0
    assert local.select_uvdist(1.0, None).n_rows == local.n_rows
    assert eqm.closure_phases(local, uv_min=0.0, snr_cut=0.5).cphase.size > 0
    with pytest.raises(ValueError, match="removed every row"):
        local.select_time(100.0, 200.0)
    with pytest.raises(ValueError, match="low > high"):
        local.select_time(5.0, 1.0)
    with pytest.raises(TypeError, match="pair|time_range"):
        local.select(time_range=3.0)
    with pytest.raises(ValueError, match="snr_min"):
        local.select(snr_min=float("nan"))
    with pytest.raises(TypeError, match="unknown VisData field"):
        local.replace(flux=1.0)
    with pytest.raises(ValueError, match="boolean mask"):
        local.take(np.ones(3, bool))
    with pytest.raises(TypeError, match="integer row indices.*float64"):
        local.take(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="one-dimensional"):
        local.take(np.zeros((2, 2), int))
    with pytest.raises(IndexError, match=f"has {local.n_rows} rows"):
        local.take([0, local.n_rows])
    # Negative indices count from the end, as numpy's.
    assert local.take([-1]).time[0] == local.time[-1]


# ------------------------------------------------------------------ averaging
def test_scans_match_reference(local):
    gap_h = 59.4 / 3600
    expect = np.array(ref.find_scans(np.asarray(local.time), gap_h))
    assert np.array_equal(local.scans(), expect)
    ids = local.scan_ids()
    for s, (a, b) in enumerate(expect):
        t = np.asarray(local.time)[ids == s]
        assert t.min() == a and t.max() == b
    # A smaller gap splits scans (the 10 s records are ~10 s apart).
    assert len(local.scans(gap=5.0)) > len(expect)


def test_scan_average_matches_reference(local):
    d = local
    a = {k: np.asarray(x) for k, x in d._arrays().items()}
    expect = ref.scan_average(
        a["time"],
        a["ant1"],
        a["ant2"],
        a["u"],
        a["v"],
        a["vis"],
        a["sigma"],
        59.4 / 3600,
    )
    avg = d.scan_average()
    assert avg.n_rows == len(expect) == 91  # eht-imaging gives 91 rows too
    # Map the averaged rows back to reference keys through their times.
    scans = ref.find_scans(a["time"], 59.4 / 3600)
    for k in range(avg.n_rows):
        t = float(avg.time[k])
        s = next(i for i, (lo, hi) in enumerate(scans) if lo <= t <= hi)
        key = (s, int(avg.ant1[k]), int(avg.ant2[k]))
        tt, uu, vv, vis, sig = expect[key]
        assert t == tt
        assert_allclose(np.array([avg.u[k], avg.v[k]]), np.array([uu, vv]), rtol=1e-13)
        assert_allclose(avg.vis[k], np.array(vis), rtol=1e-13)
        assert_allclose(avg.sigma[k], np.array(sig), rtol=1e-13)
    assert float(np.sum(np.asarray(avg.tint))) == pytest.approx(
        float(np.sum(a["tint"]))
    )


def test_time_average(local):
    t0 = float(local.time[0])
    d = local.select_time(t0, t0 + 1.0)
    avg = d.time_average(60.0)
    a = {k: np.asarray(x) for k, x in d._arrays().items()}
    sec = (d.mjd - 36934) * 86400.0 + a["time"] * 3600.0
    bins = np.floor(sec / 60.0)
    groups = {}
    for k in range(d.n_rows):
        groups.setdefault((bins[k], a["ant1"][k], a["ant2"][k]), []).append(k)
    assert avg.n_rows == len(groups)
    for k in range(avg.n_rows):
        centre = (d.mjd - 36934) * 86400.0 + float(avg.time[k]) * 3600.0
        b = np.floor(centre / 60.0)
        assert abs(centre - (b + 0.5) * 60.0) < 1e-5  # bin centre
        rows = groups[(b, int(avg.ant1[k]), int(avg.ant2[k]))]
        assert_allclose(avg.vis[k], np.mean(a["vis"][rows]), rtol=1e-13)
        expect_sigma = np.sqrt(np.sum(a["sigma"][rows] ** 2)) / len(rows)
        assert_allclose(avg.sigma[k], np.array(expect_sigma), rtol=1e-13)


def test_averaging_errors(local):
    with pytest.raises(ValueError, match="seconds"):
        local.time_average(0.0)
    with pytest.raises(ValueError, match="`seconds`"):
        local.time_average(True)  # not 1 s
    with pytest.raises(ValueError, match="`gap`"):
        local.scans(gap=True)
    with pytest.raises(ValueError, match="`gap`"):
        local.scan_average(gap=False)
    with pytest.raises(ValueError, match="gap"):
        local.scans(gap=-1.0)
    with pytest.raises(ValueError, match="gap"):
        local.scan_average(gap=float("inf"))


_FLOAT32_TIMES = unchecked_script(
    """
import json, sys
import jax, numpy as np
import eqmodels as eqm
assert not jax.config.jax_enable_x64
t = 1.0 + np.arange(60) * 10.0 / 3600.0  # 60 records 10 s apart from 1 h UTC
n = t.size
d = eqm.VisData(np.full(n, 1e9), np.zeros(n), np.ones(n), np.full(n, 0.1), t,
                np.zeros(n, int), np.ones(n, int), station_names=("A", "B"),
                freq=230e9, mjd=57854)
out = {
    "dtype": str(d.time.dtype),
    "rows_10s": d.time_average(10.0).n_rows,
    "rows_60s": d.time_average(60.0).n_rows,
    "times_60s": np.asarray(d.time_average(60.0).time, np.float64).tolist(),
    "select": d.select_time(1.0 + 1e-9, 2.0).n_rows,
    "scans": len(d.scans(gap=10.5)),
}
for path in sys.argv[1:]:
    out[path] = eqm.load_uvfits(path).time_average(60.0).n_rows
print(json.dumps(out))
""",
    *(str(p) for p in (LOCAL, APR11) if p.exists()),
)


def test_time_bins_do_not_depend_on_x64(unchecked):
    """Without x64, `time` is float32; bins were computed in float32 too, where
    seconds since 1960 (~1.8e9) are 128 s apart: unrelated records were averaged
    together. The bins and time selections are float64 on the host either way."""
    paths = [str(p) for p in (LOCAL, APR11) if p.exists()]
    got = unchecked[_FLOAT32_TIMES]
    assert got["dtype"] == "float32"
    assert got["rows_10s"] == 60
    assert got["rows_60s"] == 10
    centres = 1.0 + (30.0 + 60.0 * np.arange(10)) / 3600.0
    assert_allclose(np.array(got["times_60s"]), centres, rtol=1e-7)
    assert got["select"] == 59  # the record at exactly 1 h is before 1 h + 1e-9
    assert got["scans"] == 1
    for path in paths:  # the same rows as with x64 (this process)
        assert got[path] == eqm.load_uvfits(path).time_average(60.0).n_rows, path
    if str(APR11) in got:
        assert got[str(APR11)] == 1366


def test_time_bins_of_records_on_bin_edges():
    """Records stamped on whole seconds sit on the edges of 10 s and 60 s bins;
    each falls in the bin it starts."""
    t = 1.0 + np.arange(60) * 10.0 / 3600.0
    n = t.size
    d = eqm.VisData(
        np.full(n, 1e9), np.zeros(n), np.ones(n), np.full(n, 0.1), t,
        np.zeros(n, int), np.ones(n, int), station_names=("A", "B"), freq=230e9,
        mjd=57854,
    )  # fmt: skip
    assert d.time_average(10.0).n_rows == 60
    avg = d.time_average(60.0)
    assert avg.n_rows == 10
    assert np.asarray(avg.tint).tolist() == [0.0] * 10
    assert_allclose(avg.sigma, np.full(10, 0.1 / math.sqrt(6)))


# ------------------------------------------------------------------ concatenation
def test_concatenate_bands_and_days(local):
    hi = local.replace(freq=229e9)
    both = eqm.concatenate([local, hi])
    assert both.n_rows == 2 * local.n_rows
    assert both.band_freqs == (local.freq, 229e9)
    assert np.bincount(np.asarray(both.band)).tolist() == [local.n_rows] * 2
    assert both.freq == pytest.approx(0.5 * (local.freq + 229e9))
    # Closures never mix bands: the set is the union of both bands' sets.
    n_cp = eqm.closure_phases(local.scan_average()).cphase.shape[0]
    assert eqm.closure_phases(both.scan_average()).cphase.shape[0] == 2 * n_cp
    next_day = local.replace(mjd=local.mjd + 1)
    days = eqm.concatenate([local, next_day])
    assert days.mjd == local.mjd
    assert len(days.timestamps()) == 2 * len(local.timestamps())
    assert float(days.time.max()) == pytest.approx(float(local.time.max()) + 24.0)
    assert len(days.scans()) == 2 * len(local.scans())


def test_concatenate_merges_station_tables(local):
    a = local.select_stations(["AA", "AP", "LM"])
    names = ("LM", "ZZ", "AA")
    xyz = np.asarray(local.station_xyz)
    b = eqm.VisData(
        np.array([1e9]), np.array([2e9]), np.array([1.0 + 0j]), np.array([0.1]),
        np.array([3.0]), np.array([0]), np.array([1]), station_names=names,
        station_xyz=np.stack([xyz[4], [6.4e6, 0, 0], xyz[0]]), freq=local.freq,
        source=local.source, ra=local.ra, dec=local.dec, mjd=local.mjd,
    )  # fmt: skip
    c = eqm.concatenate([a, b])
    assert c.station_names == local.station_names + ("ZZ",)
    assert c.n_rows == a.n_rows + 1
    k = int(np.flatnonzero(np.asarray(c.time) == 3.0)[0])
    assert {c.station_names[int(c.ant1[k])], c.station_names[int(c.ant2[k])]} == {
        "LM",
        "ZZ",
    }


def test_concatenate_errors(local):
    with pytest.raises(ValueError, match="empty"):
        eqm.concatenate([])
    with pytest.raises(TypeError, match="VisData"):
        eqm.concatenate([local, 3])
    with pytest.raises(ValueError, match="different sources"):
        eqm.concatenate([local, local.replace(source="3C279")])
    moved = np.asarray(local.station_xyz).copy()
    moved[0] += 100.0
    with pytest.raises(ValueError, match="different positions"):
        eqm.concatenate([local, local.replace(station_xyz=moved)])


def test_summary_and_repr(local):
    s = local.summary()
    for piece in ("M87", "2017-04-10", "2367 rows", "186 timestamps", "7 scans"):
        assert piece in s, piece
    assert "21 baselines" in s and "no rows: ['SR']" in s
    r = repr(local)
    assert r.startswith("VisData('M87'") and "n_rows=2367" in r
    flagged = local.replace(n_flagged=4)
    assert "4 flagged rows dropped" in flagged.summary()


def _records_at(seconds_after_1h):
    t = 1.0 + np.asarray(seconds_after_1h, np.float64) / 3600.0
    n = t.size
    return eqm.VisData(
        np.full(n, 1e9), np.zeros(n), np.ones(n), np.full(n, 0.1), t,
        np.zeros(n, int), np.ones(n, int), station_names=("A", "B"), freq=230e9,
        mjd=57854,
    )  # fmt: skip


def test_time_bins_place_records_by_their_time_to_a_tenth_of_a_second():
    """uvfits stores times to ~5 ms, so a record stamped on an edge may be read
    just below it: a time within 0.05 s of an edge goes in the bin the edge starts
    (eht-imaging's rounding to 0.1 s), also for edges on half seconds (37.5 s);
    0.2 s below an edge is before it."""
    # 1 h after 1960-01-01 is a multiple of 37.5 s (and of 75 s): edges at
    # 0, 37.5, 75 s after 1 h.
    d = _records_at([0.0, 37.5 - 0.003, 37.5 - 0.2, 37.5 + 0.003, 75.0 - 0.049])
    avg = d.time_average(37.5)
    # bins: [0, 37.3] → bin 0; [37.497, 37.503] → bin 1; 74.951 → bin 2
    assert avg.n_rows == 3
    assert np.asarray(avg.tint).tolist() == [0.0] * 3
    assert_allclose(avg.sigma, 0.1 * np.sqrt([2.0, 2.0, 1.0]) / [2.0, 2.0, 1.0])
    centres = 1.0 + (np.array([0.5, 1.5, 2.5]) * 37.5) / 3600.0
    assert_allclose(avg.time, centres, rtol=1e-15)


def test_time_bins_under_a_fifth_of_a_second_use_the_stored_times():
    """A 0.1 s interval is not blurred by the 0.1 s rounding: records 0.1 s apart
    keep a bin each, and records inside one bin share it (rounded to 0.1 s, the
    last two would start the next)."""
    assert _records_at(np.arange(10) * 0.1 + 0.05).time_average(0.1).n_rows == 10
    assert _records_at([0.01, 0.04, 0.06, 0.09]).time_average(0.1).n_rows == 1


def test_empty_selections_name_the_criterion():
    """From a review: `select(bands=[3])` said only "the selection removed every
    row"; `select_uvdist(2e9, 1e9)` blamed a `uv_range` the user never passed."""
    d = eqm.load_uvfits(LOCAL)
    with pytest.raises(ValueError, match=r"`bands`=\[3\] names band\(s\) \[3\].*\[0\]"):
        d.select(bands=[3])
    # A band that does not exist beside one that does (it was ignored).
    with pytest.raises(ValueError, match=r"`bands`=\[0, 7\] names band\(s\) \[7\]"):
        d.select(bands=[0, 7])
    assert d.select(bands=[0]).n_rows == d.n_rows
    with pytest.raises(ValueError, match="`uv_min`=2000000000.0 is above `uv_max`"):
        d.select_uvdist(2e9, 1e9)
    with pytest.raises(ValueError, match=r"selection \(time_range, snr_min\) removed"):
        d.select(time_range=(0.0, 30.0), snr_min=1e12)


def test_impossible_metadata_and_noise_arguments_are_refused(local):
    """From a review: `VisData(mjd=-5, bandwidth=-5)` was accepted, the noise
    functions refused a 0-d JAX fraction that a numpy scalar passed, and
    `thermal_sigma` gave NaN or inf for a negative SEFD or a zero efficiency."""
    a = local._arrays()
    args = [a[k] for k in ("u", "v", "vis", "sigma", "time", "ant1", "ant2")]
    meta = dict(station_names=local.station_names, freq=local.freq)
    with pytest.raises(ValueError, match="`bandwidth` must be >= 0 Hz"):
        eqm.VisData(*args, **meta, bandwidth=-5.0)
    with pytest.raises(ValueError, match="`mjd` must be a modified Julian day >= 0"):
        eqm.VisData(*args, **meta, mjd=-5)
    assert eqm.VisData(*args, **meta, bandwidth=0.0, mjd=0).n_rows == local.n_rows
    for fraction in (jnp.asarray(0.02), np.float32(0.02), np.asarray(0.02)):
        noisy = eqm.add_fractional_noise(local, fraction)
        expected = eqm.add_fractional_noise(local, float(fraction)).sigma
        assert_allclose(noisy.sigma, expected, rtol=0)
    with pytest.raises(TypeError):  # our message, or the suite's type checker's
        eqm.add_fractional_noise(local, jnp.asarray([0.02]))
    assert_allclose(
        eqm.thermal_sigma(1e3, 4e3, 2e9, 10.0),
        np.sqrt(1e3 * 4e3 / (2 * 2e9 * 10.0)) / 0.88 / np.sqrt(2),
        rtol=1e-15,
    )
    bad = [
        ((-1e3, 4e3, 2e9, 10.0), {}, "`sefd1` must be finite and > 0"),
        ((1e3, np.array([4e3, 0.0]), 2e9, 10.0), {}, "`sefd2`"),
        ((1e3, 4e3, 2e9, 10.0), {"efficiency": 0.0}, r"`efficiency` .* \(0, 1\]"),
        ((1e3, 4e3, 2e9, 10.0), {"efficiency": 1.5}, "`efficiency`"),
        ((1e3, 4e3, np.inf, 10.0), {}, "`bandwidth`"),
        ((1e3, 4e3, 2e9, 10.0), {"n_pol": 4}, "`n_pol` must be 1 or 2"),
    ]
    for args_, kw, match in bad:
        with pytest.raises(ValueError, match=match):
            eqm.thermal_sigma(*args_, **kw)
