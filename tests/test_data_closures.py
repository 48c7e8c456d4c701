"""Derived products: amplitudes, bispectra, closure phases, (log) closure
amplitudes, systematic noise — against a numpy reference from the formulas, and
their invariants on real data."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as eqm

from .conftest import TEST_DATA
from .helpers import assert_allclose
from .reference import closures as ref


LOCAL = TEST_DATA / "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits"


@pytest.fixture(scope="module")
def raw():
    pytest.importorskip("astropy")
    return eqm.load_uvfits(LOCAL)


@pytest.fixture(scope="module")
def avg(raw):
    return raw.scan_average()


def _records(d):
    a = d._arrays()
    return ref.records_from_arrays(
        a["time"], a["ant1"], a["ant2"], a["u"], a["v"], a["vis"], a["sigma"],
        d.station_names,
    )  # fmt: skip


def _names(d, stations):
    return [tuple(d.station_names[i] for i in row) for row in np.asarray(stations)]


# ------------------------------------------------------------------ vs reference
@pytest.mark.parametrize("which", ["avg", "raw"])
@pytest.mark.parametrize("closures", ["min", "all"])
def test_bispectra_and_closure_phases_match_reference(request, which, closures):
    d = request.getfixturevalue(which)
    expect = ref.bispectra(_records(d), list(d.station_names), closures)
    bs = eqm.bispectra(d, closures=closures)
    cp = eqm.closure_phases(d, closures=closures)
    assert bs.bispectrum.shape == (len(expect),)
    assert _names(d, bs.stations) == [e["stations"] for e in expect]
    assert np.array_equal(np.asarray(bs.time), [e["time"] for e in expect])
    assert_allclose(bs.bispectrum, np.array([e["bispectrum"] for e in expect]))
    assert_allclose(bs.sigma, np.array([e["sigma"] for e in expect]))
    assert_allclose(bs.u, np.array([e["u"] for e in expect]), rtol=1e-15)
    assert_allclose(bs.v, np.array([e["v"] for e in expect]), rtol=1e-15)
    assert np.array_equal(np.asarray(bs.sign), [e["sign"] for e in expect])
    # Closure phases in radians; compare on the circle.
    dpsi = np.angle(
        np.exp(1j * (np.asarray(cp.cphase) - [e["cphase"] for e in expect]))
    )
    assert np.max(np.abs(dpsi)) < 1e-12
    assert_allclose(cp.sigma, np.array([e["sigma_cphase"] for e in expect]))
    assert np.array_equal(np.asarray(cp.stations), np.asarray(bs.stations))


@pytest.mark.parametrize("which", ["avg", "raw"])
@pytest.mark.parametrize("closures", ["min", "all"])
@pytest.mark.parametrize("debias", [True, False])
def test_closure_amplitudes_match_reference(request, which, closures, debias):
    d = request.getfixturevalue(which)
    expect = ref.closure_amplitudes(
        _records(d), list(d.station_names), closures, debias
    )
    ca = eqm.closure_amplitudes(d, closures=closures, debias=debias)
    lca = eqm.log_closure_amplitudes(d, closures=closures, debias=debias)
    assert ca.camp.shape == lca.logcamp.shape == (len(expect),)
    assert _names(d, ca.stations) == [e["stations"] for e in expect]
    assert_allclose(ca.camp, np.array([e["camp"] for e in expect]))
    assert_allclose(ca.sigma, np.array([e["sigma_camp"] for e in expect]))
    assert_allclose(lca.logcamp, np.array([e["logcamp"] for e in expect]))
    assert_allclose(lca.sigma, np.array([e["sigma_logcamp"] for e in expect]))
    assert_allclose(ca.u, np.array([e["u"] for e in expect]), rtol=1e-15)
    assert_allclose(lca.v, np.array([e["v"] for e in expect]), rtol=1e-15)
    assert np.array_equal(np.asarray(ca.time), np.asarray(lca.time))


def test_amplitudes_match_reference(raw):
    vis, sigma = np.asarray(raw.vis), np.asarray(raw.sigma)
    amp = eqm.amplitudes(raw)
    assert_allclose(amp.amp, ref.debiased_amplitudes(vis, sigma))
    assert_allclose(amp.sigma, sigma, rtol=0)
    assert_allclose(amp.u, raw.u, rtol=0)
    assert np.array_equal(np.asarray(amp.stations[:, 0]), np.asarray(raw.ant1))
    assert_allclose(eqm.amplitudes(raw, debias=False).amp, np.abs(vis))
    cut = eqm.amplitudes(raw, snr_cut=10.0)
    keep = ref.debiased_amplitudes(vis, sigma) / sigma >= 10
    assert cut.amp.shape == (int(keep.sum()),)
    assert_allclose(cut.amp, ref.debiased_amplitudes(vis, sigma)[keep])
    # Below-noise amplitudes debias to zero.
    tiny = raw.replace(vis=np.asarray(raw.vis) * 0 + 0.5 * sigma)
    assert np.all(np.asarray(eqm.amplitudes(tiny).amp) == 0)


# ------------------------------------------------------------------ set sizes
def _full_array(n_st, n_times=2, seed=0):
    rng = np.random.default_rng(seed)
    i, j = np.triu_indices(n_st, 1)
    nb = i.size
    return eqm.VisData(
        rng.normal(size=nb * n_times) * 1e9,
        rng.normal(size=nb * n_times) * 1e9,
        rng.normal(size=nb * n_times) + 1j * rng.normal(size=nb * n_times),
        np.full(nb * n_times, 0.1),
        np.repeat(np.arange(n_times, dtype=float), nb),
        np.tile(i, n_times),
        np.tile(j, n_times),
        station_names=tuple(f"S{k}" for k in range(n_st)),
        freq=230e9,
    )


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8])
def test_minimal_set_sizes_and_independence(n):
    d = _full_array(n)
    cp = eqm.closure_phases(d)
    nt = 2
    assert cp.cphase.shape == (nt * (n - 1) * (n - 2) // 2,)
    if n >= 4:
        lca = eqm.log_closure_amplitudes(d)
        assert lca.logcamp.shape == (nt * n * (n - 3) // 2,)
    # Independence: the min set spans everything the "all" set spans. A closure
    # phase is a signed sum of baseline phases; a log closure amplitude a ±1 sum
    # of log baseline amplitudes.
    pairs = {p: k for k, p in enumerate(zip(*np.triu_indices(n, 1)))}

    def design(stations, legs, weights, signed):
        rows = []
        for st in np.asarray(stations):
            r = np.zeros(len(pairs))
            for (a, b), w in zip(legs(st), weights):
                sgn = (1.0 if a < b else -1.0) if signed else 1.0
                r[pairs[(min(a, b), max(a, b))]] += sgn * w
            rows.append(r)
        return np.array(rows)

    def tri_legs(s):
        return [(s[0], s[1]), (s[1], s[2]), (s[2], s[0])]

    def quad_legs(s):
        return [(s[0], s[1]), (s[2], s[3]), (s[0], s[3]), (s[1], s[2])]

    def tri_design(stations):
        return design(stations, tri_legs, (1, 1, 1), True)

    def quad_design(stations):
        return design(stations, quad_legs, (1, 1, -1, -1), False)

    t0 = np.asarray(cp.time) == 0
    m_min = tri_design(np.asarray(cp.stations)[t0])
    cp_all = eqm.closure_phases(d, closures="all")
    m_all = tri_design(np.asarray(cp_all.stations)[np.asarray(cp_all.time) == 0])
    assert np.linalg.matrix_rank(m_min) == m_min.shape[0] == (n - 1) * (n - 2) // 2
    assert np.linalg.matrix_rank(np.vstack([m_min, m_all])) == m_min.shape[0]
    if n >= 4:
        lca = eqm.log_closure_amplitudes(d)
        q_min = quad_design(np.asarray(lca.stations)[np.asarray(lca.time) == 0])
        lca_all = eqm.log_closure_amplitudes(d, closures="all")
        q_all = quad_design(np.asarray(lca_all.stations)[np.asarray(lca_all.time) == 0])
        assert np.linalg.matrix_rank(q_min) == q_min.shape[0] == n * (n - 3) // 2
        assert np.linalg.matrix_rank(np.vstack([q_min, q_all])) == q_min.shape[0]


def test_minimal_set_sizes_on_real_data(raw):
    """Per timestamp with n stations and all n(n-1)/2 baselines: (n-1)(n-2)/2
    closure phases and n(n-3)/2 log closure amplitudes."""
    cp = eqm.closure_phases(raw)
    lca = eqm.log_closure_amplitudes(raw)
    t = np.asarray(raw.time)
    cp_t, lca_t = np.asarray(cp.time), np.asarray(lca.time)
    complete = 0
    for tt in np.unique(t):
        rows = t == tt
        st = np.union1d(np.asarray(raw.ant1)[rows], np.asarray(raw.ant2)[rows])
        n = st.size
        if rows.sum() != n * (n - 1) // 2:
            continue
        complete += 1
        assert np.sum(cp_t == tt) == (n - 1) * (n - 2) // 2
        assert np.sum(lca_t == tt) == max(0, n * (n - 3) // 2)
    assert complete > 50


# ------------------------------------------------------------------ invariants
def _random_gains(d, seed, amp_sigma=0.3):
    rng = np.random.default_rng(seed)
    shape = (len(d.timestamps()), d.n_stations)
    return (1 + amp_sigma * rng.random(shape)) * np.exp(2j * np.pi * rng.random(shape))


def test_closure_phases_invariant_to_station_phases(raw):
    rng = np.random.default_rng(1)
    phases = np.exp(2j * np.pi * rng.random((len(raw.timestamps()), raw.n_stations)))
    corrupted = eqm.apply_gains(raw, phases)
    before, after = eqm.closure_phases(raw), eqm.closure_phases(corrupted)
    d = np.angle(np.exp(1j * (np.asarray(after.cphase) - np.asarray(before.cphase))))
    assert np.max(np.abs(d)) < 1e-11
    assert_allclose(after.sigma, before.sigma, rtol=1e-12)
    # ...while the visibility phases themselves did change.
    dv = np.angle(np.asarray(corrupted.vis) / np.asarray(raw.vis))
    assert np.median(np.abs(dv)) > 0.5


def test_closure_amplitudes_invariant_to_station_gains(raw):
    corrupted = eqm.apply_gains(raw, _random_gains(raw, 2))
    for f in (eqm.closure_amplitudes, eqm.log_closure_amplitudes):
        before, after = f(raw), f(corrupted)
        val = "camp" if f is eqm.closure_amplitudes else "logcamp"
        assert_allclose(getattr(after, val), getattr(before, val), rtol=1e-11)
        assert_allclose(after.sigma, before.sigma, rtol=1e-11)
    cp_b, cp_a = eqm.closure_phases(raw), eqm.closure_phases(corrupted)
    d = np.angle(np.exp(1j * (np.asarray(cp_a.cphase) - np.asarray(cp_b.cphase))))
    assert np.max(np.abs(d)) < 1e-11
    # ...while the amplitudes did change.
    ratio = np.asarray(eqm.amplitudes(corrupted, debias=False).amp) / np.asarray(
        eqm.amplitudes(raw, debias=False).amp
    )
    assert np.std(ratio) > 0.05


def test_apply_gains_constant_and_errors(raw):
    g = np.linspace(1.0, 2.0, raw.n_stations) * np.exp(1j * np.arange(raw.n_stations))
    c = eqm.apply_gains(raw, g)
    a1, a2 = np.asarray(raw.ant1), np.asarray(raw.ant2)
    assert_allclose(c.vis, g[a1] * np.conj(g[a2]) * np.asarray(raw.vis))
    assert_allclose(c.sigma, np.abs(g[a1] * g[a2]) * np.asarray(raw.sigma))
    with pytest.raises(ValueError, match="shape"):
        eqm.apply_gains(raw, np.ones(3))
    with pytest.raises(ValueError, match="non-zero"):
        eqm.apply_gains(raw, np.zeros(raw.n_stations))
    with pytest.raises(TypeError, match="numeric"):
        eqm.apply_gains(raw, np.array(["a"] * raw.n_stations))


# ------------------------------------------------------------------ orientation
def test_legs_evaluate_the_forward_model_directly(avg):
    """With model visibilities as data, a data term's `V̂1 V̂2 V̂3` computed from the
    forward model at the product's legs reproduces the product exactly."""
    grid = eqm.ImageGrid.from_fov(16, 160.0)
    xx, yy = grid.coords()
    s = 12 * eqm.RAD_PER_UAS
    img = np.exp(-((xx - s) ** 2 + (yy - 0.5 * s) ** 2) / (2 * s**2))
    img += 0.5 * np.exp(-((xx + s) ** 2 + (yy + s) ** 2) / (2 * (0.6 * s) ** 2))
    img = jnp.asarray(img)
    model_vis = eqm.DirectFT(grid, avg.u, avg.v)(img)
    data = avg.replace(vis=np.asarray(model_vis))
    bs = eqm.bispectra(data)
    vb = eqm.DirectFT(grid, bs.u, bs.v)(img)
    assert_allclose(vb[:, 0] * vb[:, 1] * vb[:, 2], bs.bispectrum, rtol=1e-12)
    cp = eqm.closure_phases(data, closures="all")
    vc = eqm.DirectFT(grid, cp.u, cp.v)(img)
    d = np.angle(np.asarray(vc[:, 0] * vc[:, 1] * vc[:, 2])) - np.asarray(cp.cphase)
    assert np.max(np.abs(np.angle(np.exp(1j * d)))) < 1e-10
    ca = eqm.closure_amplitudes(data, debias=False)
    va = np.abs(np.asarray(eqm.DirectFT(grid, ca.u, ca.v)(img)))
    assert_allclose(va[:, 0] * va[:, 1] / (va[:, 2] * va[:, 3]), ca.camp, rtol=1e-12)
    lca = eqm.log_closure_amplitudes(data, debias=False)
    vl = np.log(np.abs(np.asarray(eqm.DirectFT(grid, lca.u, lca.v)(img))))
    assert_allclose(vl[:, 0] + vl[:, 1] - vl[:, 2] - vl[:, 3], lca.logcamp, rtol=1e-12)
    # Reversed legs carry (-u, -v): a walked-backwards baseline has sign -1.
    assert set(np.unique(np.asarray(bs.sign))) == {-1.0, 1.0}


def test_quadrangle_convention(avg):
    """C = |V_ab||V_cd| / (|V_ad||V_bc|) for the stations row (a, b, c, d)."""
    ca = eqm.closure_amplitudes(avg, debias=False)
    a = avg._arrays()

    def amp(t, x, y):
        lo, hi = min(x, y), max(x, y)
        k = np.flatnonzero((a["time"] == t) & (a["ant1"] == lo) & (a["ant2"] == hi))
        return abs(a["vis"][k[0]])

    for row in range(0, ca.camp.shape[0], 7):
        qa, qb, qc, qd = (int(x) for x in ca.stations[row])
        t = float(ca.time[row])
        c = amp(t, qa, qb) * amp(t, qc, qd) / (amp(t, qa, qd) * amp(t, qb, qc))
        assert math.isclose(float(ca.camp[row]), c, rel_tol=1e-13)


# ------------------------------------------------------------------ cuts, noise
def test_uv_min_drops_short_baselines(raw):
    cut = 1e8  # 0.1 Gλ: the ALMA-APEX and JCMT-SMA intra-site baselines
    cp = eqm.closure_phases(raw, uv_min=cut)
    assert np.all(np.hypot(np.asarray(cp.u), np.asarray(cp.v)) >= cut)
    expect = ref.bispectra(_records(raw.select_uvdist(cut)), list(raw.station_names))
    assert cp.cphase.shape == (len(expect),)
    assert cp.cphase.shape[0] < eqm.closure_phases(raw).cphase.shape[0]
    lca = eqm.log_closure_amplitudes(raw, uv_min=cut)
    expect = ref.closure_amplitudes(
        _records(raw.select_uvdist(cut)), list(raw.station_names)
    )
    assert_allclose(lca.logcamp, np.array([e["logcamp"] for e in expect]))


def test_snr_cuts(avg):
    bs_all = eqm.bispectra(avg)
    snr = np.abs(np.asarray(bs_all.bispectrum)) / np.asarray(bs_all.sigma)
    cut = float(np.median(snr))
    bs = eqm.bispectra(avg, snr_cut=cut)
    assert bs.bispectrum.shape == (int(np.sum(snr >= cut)),)
    assert eqm.closure_phases(avg, snr_cut=cut).cphase.shape == bs.bispectrum.shape
    lca_all = eqm.log_closure_amplitudes(avg)
    lsnr = 1 / np.asarray(lca_all.sigma)
    lcut = float(np.median(lsnr))
    lca = eqm.log_closure_amplitudes(avg, snr_cut=lcut)
    assert lca.logcamp.shape == (int(np.sum(lsnr >= lcut)),)
    ca_all = eqm.closure_amplitudes(avg)
    csnr = np.asarray(ca_all.camp) / np.asarray(ca_all.sigma)
    ca = eqm.closure_amplitudes(avg, snr_cut=float(np.median(csnr)))
    assert ca.camp.shape == (int(np.sum(csnr >= np.median(csnr))),)


def test_systematic_noise_on_amplitudes(avg):
    vis, sigma = np.asarray(avg.vis), np.asarray(avg.sigma)
    a_deb = ref.debiased_amplitudes(vis, sigma)
    f = 0.02
    amp = eqm.amplitudes(avg, systematic_noise=f)
    assert_allclose(amp.sigma, np.sqrt(sigma**2 + (np.sqrt(2) * f * a_deb) ** 2))
    fs = {"AA": 0.01, "LM": 0.05}
    per = np.array([fs.get(s, 0.0) for s in avg.station_names])
    a1, a2 = np.asarray(avg.ant1), np.asarray(avg.ant2)
    amp = eqm.amplitudes(avg, systematic_noise=fs)
    expect = np.sqrt(sigma**2 + (per[a1] ** 2 + per[a2] ** 2) * a_deb**2)
    assert_allclose(amp.sigma, expect)
    # The same on visibilities (eht-imaging's vis term uses the debiased |V|).
    assert_allclose(eqm.add_systematic_noise(avg, fs).sigma, expect)
    raw_amp = np.abs(vis)
    assert_allclose(
        eqm.add_systematic_noise(avg, f, debias=False).sigma,
        np.sqrt(sigma**2 + 2 * f**2 * raw_amp**2),
    )
    # A dict equal for every station is the scalar case.
    every = {s: f for s in avg.station_names}
    assert_allclose(
        eqm.add_systematic_noise(avg, every).sigma,
        eqm.add_systematic_noise(avg, f).sigma,
    )


def test_fractional_noise_before_closures(avg):
    f = 0.05
    noisy = eqm.add_fractional_noise(avg, f)
    vis, sigma = np.asarray(avg.vis), np.asarray(avg.sigma)
    assert_allclose(noisy.sigma, np.sqrt(sigma**2 + (f * np.abs(vis)) ** 2))
    expect = ref.bispectra(_records(noisy), list(avg.station_names))
    cp = eqm.closure_phases(avg, fractional_noise=f)
    assert_allclose(cp.sigma, np.array([e["sigma_cphase"] for e in expect]))
    lca = eqm.log_closure_amplitudes(avg, fractional_noise=f)
    expect = ref.closure_amplitudes(_records(noisy), list(avg.station_names))
    assert_allclose(lca.sigma, np.array([e["sigma_logcamp"] for e in expect]))
    assert_allclose(lca.logcamp, np.array([e["logcamp"] for e in expect]))


def test_systematic_cphase_noise_in_degrees(avg):
    base = eqm.closure_phases(avg)
    sys = eqm.closure_phases(avg, systematic_cphase_noise=3.0)
    expect = np.sqrt(np.asarray(base.sigma) ** 2 + (3.0 * np.pi / 180) ** 2)
    assert_allclose(sys.sigma, expect)
    assert_allclose(sys.cphase, base.cphase, rtol=0)


# ------------------------------------------------------------------ errors
def test_product_errors(avg):
    with pytest.raises(ValueError, match="closures"):
        eqm.closure_phases(avg, closures="max")
    with pytest.raises(ValueError, match="uv_min"):
        eqm.bispectra(avg, uv_min=-1.0)
    with pytest.raises(ValueError, match="snr_cut"):
        eqm.closure_amplitudes(avg, snr_cut=float("nan"))
    with pytest.raises(TypeError, match="VisData|data"):
        eqm.log_closure_amplitudes(np.zeros(3))
    with pytest.raises(ValueError, match="systematic_cphase_noise"):
        eqm.closure_phases(avg, systematic_cphase_noise=-1.0)
    with pytest.raises(TypeError, match="systematic_cphase_noise"):
        eqm.closure_phases(avg, systematic_cphase_noise="3")
    with pytest.raises(ValueError, match="fractional_noise"):
        eqm.closure_phases(avg, fractional_noise=-0.1)
    with pytest.raises(ValueError, match="unknown station"):
        eqm.amplitudes(avg, systematic_noise={"XX": 0.1})
    with pytest.raises(ValueError, match=">= 0"):
        eqm.add_systematic_noise(avg, -0.1)
    with pytest.raises(TypeError, match="number|systematic_noise"):
        eqm.add_systematic_noise(avg, "0.1")
    with pytest.raises(ValueError, match=">= 0"):
        eqm.add_systematic_noise(avg, {"AA": -0.1})
    with pytest.raises(ValueError, match="finite"):
        eqm.add_fractional_noise(avg, float("inf"))
    with pytest.raises(ValueError, match="snr_cut"):
        eqm.amplitudes(avg, snr_cut=1e9)


def test_no_closures_possible():
    two = _full_array(2)
    with pytest.raises(ValueError, match="no closed triangles"):
        eqm.closure_phases(two)
    three = _full_array(3)
    with pytest.raises(ValueError, match="no closed quadrangles"):
        eqm.log_closure_amplitudes(three)


def test_duplicate_baselines_rejected(avg):
    twice = eqm.VisData(
        np.concatenate([avg.u, avg.u]), np.concatenate([avg.v, avg.v]),
        np.concatenate([avg.vis, avg.vis]), np.concatenate([avg.sigma, avg.sigma]),
        np.concatenate([avg.time, avg.time]), np.concatenate([avg.ant1, avg.ant1]),
        np.concatenate([avg.ant2, avg.ant2]), station_names=avg.station_names,
        freq=avg.freq,
    )  # fmt: skip
    with pytest.raises(ValueError, match="more than once"):
        eqm.closure_phases(twice)


def test_anchor_counts_m87_2017_apr11(shared_data):
    """ANCHORS.md: M87 2017-04-11 lo, scan-averaged: 216 visibilities, 134 closure
    phases, 113 log closure amplitudes (eht-imaging's counts)."""
    path = (
        shared_data
        / "eht"
        / "m87_2017"
        / "SR1_M87_2017_101_lo_hops_netcal_StokesI.uvfits"
    )
    avg = eqm.load_uvfits(path).scan_average()
    assert avg.n_rows == 216
    assert eqm.closure_phases(avg).cphase.shape == (134,)
    assert eqm.log_closure_amplitudes(avg).logcamp.shape == (113,)
