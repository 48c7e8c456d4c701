"""eht-imaging (ehtim 1.3.2, GPLv3) as a test-time oracle: loading, scans,
coherent scan averaging, closure sets and values, systematic noise. Skipped when
ehtim is not installed."""

import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as eqm

from .conftest import TEST_DATA
from .helpers import assert_allclose, quiet
from .unchecked import unchecked_error


pytestmark = pytest.mark.slow  # the eht-imaging oracle


LOCAL = TEST_DATA / "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits"
# eht-imaging combines the float32 RR/LL columns in single precision
# (`data['DATA'][..., 0] + 1j * data['DATA'][..., 1]` is complex64), while eqmodels
# casts to float64 first: values agree to float32 rounding (measured ≤ 1e-7
# relative, ≤ 6e-8 rad on closure phases), not to 1e-12.
# That is the one intentional difference.
RTOL = 1e-6


with quiet():
    eh = pytest.importorskip("ehtim")


@pytest.fixture(scope="module")
def ours():
    raw = eqm.load_uvfits(LOCAL)
    return raw, raw.scan_average()


@pytest.fixture(scope="module")
def theirs():
    with quiet():
        obs = eh.obsdata.load_uvfits(str(LOCAL))
        obs.add_scans()
        avg = obs.avg_coherent(0.0, scan_avg=True)
    return obs, avg


def _vis_table(obs, time_key=float):
    return {(time_key(r["time"]), str(r["t1"]), str(r["t2"])): r for r in obs.data}


def _compare_vis(d, obs, time_key=float):
    """Our rows against eht-imaging's, matched by `(time_key(time), t1, t2)`."""
    table = _vis_table(obs, time_key)
    assert len(table) == d.n_rows == len(obs.data)
    names = d.station_names
    a = {k: np.asarray(x) for k, x in d._arrays().items()}
    rows = [
        table[(time_key(t), names[i], names[j])]
        for t, i, j in zip(a["time"], a["ant1"], a["ant2"])
    ]
    for ours_key, theirs_key in (
        ("vis", "vis"),
        ("sigma", "sigma"),
        ("u", "u"),
        ("v", "v"),
    ):
        want = np.array([r[theirs_key] for r in rows])
        assert_allclose(a[ours_key], want, rtol=RTOL, err=ours_key)


def test_loaded_visibilities_match(ours, theirs):
    _compare_vis(ours[0], theirs[0])
    assert theirs[0].mjd == ours[0].mjd
    assert list(theirs[0].tarr["site"]) == list(ours[0].station_names)


def test_scans_match(ours, theirs):
    raw, _ = ours
    scans = theirs[0].scans  # padded by eht-imaging's 0.0001 h margin
    assert scans.shape == raw.scans().shape
    assert_allclose(scans, raw.scans() + np.array([-1e-4, 1e-4]), rtol=RTOL)


def test_scan_average_matches(ours, theirs):
    _, avg = ours
    assert avg.n_rows == len(theirs[1].data) == 91
    _compare_vis(avg, theirs[1])


def _closure_table(rec, n_sites):
    keys = ("t1", "t2", "t3", "t4")[:n_sites]
    return {(float(r["time"]),) + tuple(str(r[k]) for k in keys): r for r in rec}


def _keys(d, prod):
    names = d.station_names
    return [
        (float(t),) + tuple(names[int(i)] for i in st)
        for t, st in zip(np.asarray(prod.time), np.asarray(prod.stations))
    ]


@pytest.mark.parametrize("count, closures", [("min", "min"), ("max", "all")])
def test_closure_phases_match(ours, theirs, count, closures):
    _, avg = ours
    with quiet():
        cp_e = theirs[1].c_phases(count=count, ang_unit="rad")
        bs_e = theirs[1].bispectra(count=count)
    cp = eqm.closure_phases(avg, closures=closures)
    bs = eqm.bispectra(avg, closures=closures)
    if count == "min":
        assert cp.cphase.shape == (55,)
    table = _closure_table(cp_e, 3)
    keys = _keys(avg, cp)
    assert set(keys) == set(table) and len(keys) == len(cp_e)
    got = np.asarray(cp.cphase)
    want = np.array([table[k]["cphase"] for k in keys])
    assert np.max(np.abs(np.angle(np.exp(1j * (got - want))))) < RTOL
    assert_allclose(cp.sigma, np.array([table[k]["sigmacp"] for k in keys]), rtol=RTOL)
    for leg in (1, 2, 3):
        assert_allclose(
            cp.u[:, leg - 1], np.array([table[k][f"u{leg}"] for k in keys]), rtol=RTOL
        )
        assert_allclose(
            cp.v[:, leg - 1], np.array([table[k][f"v{leg}"] for k in keys]), rtol=RTOL
        )
    btable = _closure_table(bs_e, 3)
    assert_allclose(
        bs.bispectrum, np.array([btable[k]["bispec"] for k in keys]), rtol=RTOL
    )
    assert_allclose(bs.sigma, np.array([btable[k]["sigmab"] for k in keys]), rtol=RTOL)


@pytest.mark.parametrize("count, closures", [("min", "min"), ("max", "all")])
@pytest.mark.parametrize("debias", [True, False])
def test_closure_amplitudes_match(ours, theirs, count, closures, debias):
    _, avg = ours
    with quiet():
        lca_e = theirs[1].c_amplitudes(count=count, debias=debias, ctype="logcamp")
        ca_e = theirs[1].c_amplitudes(count=count, debias=debias)
    lca = eqm.log_closure_amplitudes(avg, closures=closures, debias=debias)
    ca = eqm.closure_amplitudes(avg, closures=closures, debias=debias)
    if count == "min":
        assert lca.logcamp.shape == (48,)
    for prod, rec, val in ((lca, lca_e, "logcamp"), (ca, ca_e, "camp")):
        table = _closure_table(rec, 4)
        keys = _keys(avg, prod)
        assert set(keys) == set(table) and len(keys) == len(rec)
        assert_allclose(
            getattr(prod, val), np.array([table[k]["camp"] for k in keys]), rtol=RTOL
        )
        assert_allclose(
            prod.sigma, np.array([table[k]["sigmaca"] for k in keys]), rtol=RTOL
        )
        for leg in (1, 2, 3, 4):
            want_u = np.array([table[k][f"u{leg}"] for k in keys])
            assert_allclose(prod.u[:, leg - 1], want_u, rtol=RTOL)


def test_raw_closure_counts_match(ours, theirs):
    raw, _ = ours
    with quiet():
        n_cp = len(theirs[0].c_phases(count="min"))
        n_lca = len(theirs[0].c_amplitudes(count="min", ctype="logcamp"))
    assert eqm.closure_phases(raw).cphase.shape == (n_cp,)
    assert eqm.log_closure_amplitudes(raw).logcamp.shape == (n_lca,)


def _chisqdata(obs, kind, **kw):
    from ehtim.imaging import imager_utils as iu

    with quiet():
        prior = eh.image.make_square(obs, 8, 100 * eh.RADPERUAS)
        mask = np.ones(64, bool)
        fn = {"amp": iu.chisqdata_amp, "vis": iu.chisqdata_vis}[kind]
        if kind == "cphase":  # pragma: no cover
            fn = iu.chisqdata_cphase
        return fn(obs, prior, mask, **kw)


@pytest.mark.parametrize("sys", [0.0, 0.03, {"AA": 0.01, "LM": 0.05, "SM": 0.02}])
def test_systematic_noise_matches_imager(ours, theirs, sys):
    """eht-imaging's imager `systematic_noise` on its amp and vis terms."""
    _, avg = ours
    amp_e, sig_e, _ = _chisqdata(theirs[1], "amp", systematic_noise=sys)
    vis_e, vsig_e, _ = _chisqdata(theirs[1], "vis", systematic_noise=sys)
    table = _vis_table(theirs[1])
    keys = list(table)
    amp = eqm.amplitudes(avg, systematic_noise=sys)
    vis = eqm.add_systematic_noise(avg, sys)
    names = avg.station_names
    ours_keys = [
        (float(t), names[int(a)], names[int(b)])
        for t, a, b in zip(
            np.asarray(avg.time), np.asarray(avg.ant1), np.asarray(avg.ant2)
        )
    ]
    order = np.array([keys.index(k) for k in ours_keys])
    assert_allclose(amp.amp, np.asarray(amp_e)[order], rtol=RTOL)
    assert_allclose(amp.sigma, np.asarray(sig_e)[order], rtol=RTOL)
    assert_allclose(vis.sigma, np.asarray(vsig_e)[order], rtol=RTOL)


def test_fractional_and_cphase_noise_match(ours, theirs):
    from ehtim.imaging import imager_utils as iu

    _, avg = ours
    with quiet():
        noisy_e = theirs[1].add_fractional_noise(0.04)
        cp_e = noisy_e.c_phases(count="min", ang_unit="rad")
        prior = eh.image.make_square(theirs[1], 8, 100 * eh.RADPERUAS)
        _, sig_deg, _ = iu.chisqdata_cphase(
            theirs[1], prior, np.ones(64, bool), systematic_cphase_noise=2.0
        )
        cp_deg = theirs[1].c_phases(count="min")
    _compare_vis(eqm.add_fractional_noise(avg, 0.04), noisy_e)
    cp = eqm.closure_phases(avg, fractional_noise=0.04)
    table = _closure_table(cp_e, 3)
    assert_allclose(
        cp.sigma, np.array([table[k]["sigmacp"] for k in _keys(avg, cp)]), rtol=RTOL
    )
    # systematic_cphase_noise is in degrees in both; eht-imaging returns degrees.
    cps = eqm.closure_phases(avg, systematic_cphase_noise=2.0)
    table = _closure_table(cp_deg, 3)
    pos = {k: i for i, k in enumerate(table)}
    want = np.radians(np.asarray(sig_deg))[[pos[k] for k in _keys(avg, cps)]]
    assert_allclose(cps.sigma, want, rtol=RTOL)


@pytest.mark.parametrize("seconds", [10.0, 37.5, 60.0, 7.3])
def test_time_average_matches(ours, theirs, seconds):
    """Coherent averaging over fixed bins aligned on 1960-01-01 (also at intervals
    that are not whole seconds): the same bins, and in each the same values,
    errors and (u, v) as `avg_coherent`.

    The rows' times are compared by bin: eqmodels stamps a bin with its centre,
    eht-imaging with its start truncated to a whole second plus half the
    interval, which differ (by up to 1 s) where the interval is not a whole
    number of seconds."""
    raw, _ = ours
    with quiet():
        avg_e = theirs[0].avg_coherent(seconds)
    avg = raw.time_average(seconds)
    offset_s = (raw.mjd - 36934) * 86400.0  # 1960-01-01 is MJD 36934

    def bin_of(time_h):
        return int(np.floor((offset_s + float(time_h) * 3600.0) / seconds))

    _compare_vis(avg, avg_e, time_key=bin_of)
    # Our times are the bins' centres.
    time = np.asarray(avg.time)
    centres = (np.array([bin_of(t) for t in time]) + 0.5) * seconds
    assert_allclose(offset_s + time * 3600.0, centres, rtol=1e-15)


def _ehtim_station_order(path):
    """eht-imaging's station order for the recipe: scan averaged, the station
    table trimmed to the stations with rows, `reorder_tarr_snr`."""
    with quiet():
        obs = eh.obsdata.load_uvfits(str(path))
        obs.add_scans()
        obs = obs.avg_coherent(0.0, scan_avg=True)
        used = set(obs.data["t1"]) | set(obs.data["t2"])
        obs.tarr = obs.tarr[[site in used for site in obs.tarr["site"]]]
        obs.reorder_tarr_snr()
    return list(obs.tarr["site"])


def _our_station_order(path):
    from eqmodels._recipe import _m87 as R

    data = R.drop_absent_stations(eqm.load_uvfits(path).scan_average())
    return list(R.order_stations_by_snr(data).station_names)


def test_station_order_matches_reorder_tarr_snr():
    """The recipe orders stations as eht-imaging's `reorder_tarr_snr` (by median
    SNR; a total favours APEX, which has many rows, and changes most minimal
    closure amplitudes)."""
    assert _our_station_order(LOCAL) == _ehtim_station_order(LOCAL)


@pytest.mark.parametrize("day", ["095", "096", "101"])
def test_station_order_matches_reorder_tarr_snr_other_days(shared_data, day):
    path = (
        shared_data
        / "eht"
        / "m87_2017"
        / f"SR1_M87_2017_{day}_lo_hops_netcal_StokesI.uvfits"
    )
    assert _our_station_order(path) == _ehtim_station_order(path)


def test_eht_imaging_reads_what_save_uvfits_writes(ours, theirs, tmp_path):
    """`save_uvfits` writes a file eht-imaging reads as the same observation: its
    reading of our file equals our data (rows, stations, date, frequency,
    bandwidth, source, position; values to its float32 rounding) and its reading
    of the original file."""
    raw = ours[0]
    path = tmp_path / "ours.uvfits"
    eqm.save_uvfits(raw, path)
    with quiet():
        obs = eh.obsdata.load_uvfits(str(path))
    _compare_vis(raw, obs)
    _compare_vis(raw, theirs[0])
    ref = theirs[0]
    assert (obs.mjd, obs.rf, obs.bw, obs.source) == (
        ref.mjd,
        ref.rf,
        ref.bw,
        ref.source,
    )
    assert_allclose([obs.ra, obs.dec], [ref.ra, ref.dec], rtol=1e-15)
    assert list(obs.tarr["site"]) == list(ref.tarr["site"])
    for k in ("x", "y", "z"):
        np.testing.assert_array_equal(obs.tarr[k], ref.tarr[k])
    for k in ("time", "tint", "u", "v"):
        np.testing.assert_array_equal(obs.data[k], ref.data[k])


_EHTIM_SETUP = (
    "import warnings; warnings.simplefilter('ignore')\n"
    "import contextlib, io\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    import ehtim as eh\n"
    "    im = eh.image.Image(np.ones((8, 8)), 1e-11, 187.7, 12.4)\n"
    "t = em.TV(em.ImageGrid(8, 8, 1e-11))"
)
_OBS_SETUP = _EHTIM_SETUP + f"\nobs = eh.obsdata.load_uvfits({str(LOCAL)!r})"
EHTIM_IMAGE = unchecked_error("t(im)", "TypeError", _EHTIM_SETUP)
EHTIM_OBSDATA = [
    unchecked_error(call, "TypeError", _OBS_SETUP)
    for call in ("em.closure_phases(obs)", "em.self_calibrate(obs, np.ones((8, 8)))")
]
NOT_AN_IMAGE = unchecked_error("t(object())", "TypeError", _EHTIM_SETUP)


def test_an_ehtim_image_is_named_and_its_pixels_are_ours(theirs, unchecked):
    """From a user walkthrough: an eht-imaging `Image` given to a term failed in
    JAX ("dtype object is not a valid JAX array type"). The message names the
    conversion, and the conversion it names is right: an asymmetric, off-centre
    Gaussian's visibilities through it equal eht-imaging's own `sample_uv`."""
    obs = theirs[1]  # scan-averaged
    with quiet():
        im = eh.image.make_square(obs, 24, eqm.uas_to_rad(120.0))
        im = im.add_gauss(
            0.6,
            (eqm.uas_to_rad(40.0), eqm.uas_to_rad(20.0), 0.5)
            + (eqm.uas_to_rad(10.0), eqm.uas_to_rad(-20.0)),
        )
        uv = np.stack([obs.data["u"], obs.data["v"]], axis=1)
        want = im.sample_uv(uv, ttype="direct")[0]
    grid = eqm.ImageGrid(im.ydim, im.xdim, im.psize)
    pixels = im.imvec.reshape(im.ydim, im.xdim)
    forward = eqm.DirectFT(grid, uv[:, 0], uv[:, 1])
    got = np.asarray(forward(jnp.asarray(pixels)))
    assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    msg = unchecked[EHTIM_IMAGE]
    assert "eht-imaging Image" in msg and "image.imvec.reshape(" in msg
    # An eht-imaging Obsdata where a VisData is taken: the message names the route.
    for case in EHTIM_OBSDATA:
        msg = unchecked[case]
        assert msg == (
            "`data` must be a VisData, got Obsdata: save it with "
            "`obs.save_uvfits(path)` and read that with `em.load_uvfits(path)`."
        ), case
    msg = unchecked[NOT_AN_IMAGE]
    assert msg == (
        "`image` must be an image array (ny, nx) in Jy/pixel or an eqmodels image "
        "model, got object."
    )
