"""eht-imaging (ehtim 1.3.2, GPLv3) as a test-time oracle for polarimetric data:
the four correlations and their σ, the Stokes conversion, parallactic angles,
elevations and field-rotation angles, and eht-imaging reading what `save_uvfits`
writes. Skipped when ehtim is not installed.

eht-imaging averages a float32 file's values in float32 (≤ 1e-7 relative, see
tests/test_data_ehtim.py); the comparisons to ≤ 1e-9 therefore read a float64 copy
of each file (the same values: float32 widens exactly, as the first test checks)."""

import numpy as np
import pytest

import eqmodels as em

from .helpers import assert_allclose, ehtim_row_index, float64_uvfits_copy, quiet


pytestmark = pytest.mark.slow  # the eht-imaging oracle

with quiet():
    eh = pytest.importorskip("ehtim")

FILES = {
    "hops": "eht/m87_2017_pol/hops_data/April11/SR2_M87_2017_101_lo_hops_ALMArot.uvfits",
    "casa": (
        "eht/m87_2017_pol/casa_data/April11/SR2_M87_2017_101_lo_casa_EVPA_rotation"
        "+dcal+ampscale+netcal+10s-avg+RLgain-amp.uvfits"
    ),
}
RTOL = 1e-9
@pytest.fixture(scope="module", params=sorted(FILES))
def pair(request, shared_data, tmp_path_factory):
    src = shared_data / FILES[request.param]
    dst = tmp_path_factory.mktemp("pol") / "f64.uvfits"
    float64_uvfits_copy(src, dst)
    ours = em.load_uvfits(dst, polarization="full")
    original = em.load_uvfits(src, polarization="full")
    for k in ("corr", "sigma", "flag", "time", "u", "v"):
        np.testing.assert_array_equal(
            np.asarray(getattr(ours, k)), np.asarray(getattr(original, k))
        )
    with quiet():
        obs = eh.obsdata.load_uvfits(str(dst), polrep="circ")
    return ours, obs, ehtim_row_index(obs, ours)


def _rel(got, want):
    return np.max(np.abs(got - want) / np.abs(want))


def test_correlations_and_sigma_row_for_row(pair):
    ours, obs, idx = pair
    assert len(obs.data) == ours.n_rows
    rows = obs.data[idx]
    want = np.stack([rows[f"{c.lower()}vis"] for c in ours.basis], axis=1)
    want_s = np.stack([rows[f"{c.lower()}sigma"] for c in ours.basis], axis=1)
    corr, sigma = (np.asarray(x) for x in ours.correlations())
    # The same flags: NaN where eht-imaging has NaN.
    np.testing.assert_array_equal(np.isnan(corr), np.isnan(want))
    np.testing.assert_array_equal(np.isnan(sigma), np.isnan(want_s))
    np.testing.assert_array_equal(np.asarray(ours.flag), np.isnan(want_s))
    ok = ~np.isnan(want)
    assert _rel(corr[ok], want[ok]) <= RTOL
    assert _rel(sigma[ok], want_s[ok]) <= RTOL
    assert list(obs.tarr["site"]) == list(ours.station_names)


def test_stokes_conversion(pair):
    ours, obs, idx = pair
    with quiet():
        st = obs.switch_polrep("stokes").data[idx]
    want = np.stack([st[k] for k in ("vis", "qvis", "uvis", "vvis")], axis=1)
    want_s = np.stack([st[k] for k in ("sigma", "qsigma", "usigma", "vsigma")], axis=1)
    vis, sigma = ours.stokes()
    np.testing.assert_array_equal(np.isnan(vis), np.isnan(want))
    np.testing.assert_array_equal(np.isnan(sigma), np.isnan(want_s))
    ok = ~np.isnan(want)
    assert _rel(vis[ok], want[ok]) <= RTOL
    assert _rel(sigma[ok], want_s[ok]) <= RTOL


def test_parallactic_angle_and_elevation(pair):
    ours, obs, idx = pair
    with quiet():
        ang = obs.unpack(["par_ang1", "par_ang2", "el1", "el2"], ang_unit="rad")[idx]
    par = np.stack([ang["par_ang1"], ang["par_ang2"]], axis=1)
    el = np.stack([ang["el1"], ang["el2"]], axis=1)
    assert_allclose(ours.parallactic_angle(), par, rtol=RTOL)
    assert_allclose(ours.elevation(), el, rtol=RTOL)


def test_field_rotation_angles(pair):
    """With eht-imaging's station table given our mounts' coefficients, its
    field-rotation angle (the formula of its polarimetric calibration, and the
    angle in its inverse Jones matrices) is ours."""
    ours, obs, idx = pair
    from eqmodels._data._field_rotation import MOUNT_COEFFICIENTS

    obs = obs.copy()
    for i, m in enumerate(ours.mounts):
        obs.tarr[i]["fr_par"], obs.tarr[i]["fr_elev"] = MOUNT_COEFFICIENTS[m]
        obs.tarr[i]["fr_off"] = 0.0
    with quiet():
        ang = obs.unpack(["par_ang1", "par_ang2", "el1", "el2"], ang_unit="rad")[idx]
    rows = obs.data[idx]
    want = np.zeros((ours.n_rows, 2))
    for leg in (1, 2):
        t = obs.tarr[[obs.tkey[s] for s in rows[f"t{leg}"]]]
        want[:, leg - 1] = (
            t["fr_elev"] * ang[f"el{leg}"]
            + t["fr_par"] * ang[f"par_ang{leg}"]
            + t["fr_off"] * np.pi / 180.0
        )
    got = ours.field_rotation()
    assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.abs(want).max())
    # eht-imaging's simulator: the inverse Jones matrix of a station without
    # gains or leakage is diag(exp(iφ), exp(-iφ)).
    from ehtim.observing.obs_simulate import make_jones_inverse

    sub = ours.take(np.arange(0, ours.n_rows, 97))
    with quiet():
        jinv = make_jones_inverse(obs, opacitycal=True, dcal=True, frcal=False)
    phi = sub.field_rotation()
    for r, (t, a1, a2) in enumerate(
        zip(np.asarray(sub.time), np.asarray(sub.ant1), np.asarray(sub.ant2))
    ):
        for leg, a in enumerate((a1, a2)):
            j = jinv[sub.station_names[a]][t]
            diff = np.angle(j[0, 0] * np.exp(-1j * phi[r, leg]))
            assert abs(diff) < 1e-9 and abs(j[0, 1]) == 0.0


def test_ehtim_reads_what_save_uvfits_writes(pair, tmp_path):
    ours, _, _ = pair
    path = tmp_path / "pol.uvfits"
    em.save_uvfits(ours, path)
    with quiet():
        obs = eh.obsdata.load_uvfits(str(path), polrep="circ")
    rows = obs.data[ehtim_row_index(obs, ours)]
    want = np.stack([rows[f"{c.lower()}vis"] for c in ours.basis], axis=1)
    want_s = np.stack([rows[f"{c.lower()}sigma"] for c in ours.basis], axis=1)
    corr, sigma = (np.asarray(x) for x in ours.correlations())
    np.testing.assert_array_equal(np.isnan(want), np.asarray(ours.flag))
    ok = ~np.isnan(want)
    assert _rel(corr[ok], want[ok]) <= 1e-12
    assert _rel(sigma[ok], want_s[ok]) <= 1e-12
    assert_allclose(np.asarray(rows["u"]), np.asarray(ours.u), rtol=1e-12)
    assert obs.mjd == ours.mjd and obs.source == ours.source


def test_scan_average_per_correlation(pair):
    """eht-imaging's `avg_coherent(0, scan_avg=True)` on circular data averages
    each correlation over its non-NaN entries (`nanmean`, `sqrt(Σσ²)/N`), as
    `scan_average` does."""
    ours, obs, _ = pair
    with quiet():
        obs = obs.copy()
        obs.add_scans()
        avg_e = obs.avg_coherent(0.0, scan_avg=True)
    avg = ours.scan_average()
    assert avg.n_rows == len(avg_e.data)
    rows = avg_e.data[ehtim_row_index(avg_e, avg)]
    want = np.stack([rows[f"{c.lower()}vis"] for c in avg.basis], axis=1)
    want_s = np.stack([rows[f"{c.lower()}sigma"] for c in avg.basis], axis=1)
    corr, sigma = (np.asarray(x) for x in avg.correlations())
    np.testing.assert_array_equal(np.isnan(corr), np.isnan(want))
    ok = ~np.isnan(want)
    assert _rel(corr[ok], want[ok]) <= RTOL
    assert _rel(sigma[ok], np.real(want_s[ok])) <= RTOL
    assert_allclose(np.asarray(avg.u), rows["u"], rtol=RTOL)
