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


def _table(d):
    """The raw visibility table closures are recomputed from (one band)."""
    a = d._arrays()
    assert np.unique(a["band"]).size == 1
    return ref.VisTable(
        a["time"], a["ant1"], a["ant2"], a["u"], a["v"], a["vis"], a["sigma"],
        d.station_names,
    )  # fmt: skip


def _rows(d, prod):
    """(time, station names) of each product row."""
    return [
        (float(t), tuple(d.station_names[i] for i in st))
        for t, st in zip(np.asarray(prod.time), np.asarray(prod.stations))
    ]


def _expect_bispectra(d, prod, table=None):
    table = _table(d) if table is None else table
    return [ref.bispectrum(table, t, st) for t, st in _rows(d, prod)]


def _expect_camps(d, prod, debias=True, table=None):
    table = _table(d) if table is None else table
    return [ref.closure_amplitude(table, t, st, debias) for t, st in _rows(d, prod)]


def _col(expect, key):
    return np.array([e[key] for e in expect])


# ------------------------------------------------------------------ vs reference
# Values: every row the package formed is recomputed from its (time, stations)
# by looking each leg up in the raw table. Which rows are formed is checked by
# the set properties below (and, exactly, against eht-imaging in
# test_data_ehtim.py).
@pytest.mark.parametrize("which", ["avg", "raw"])
@pytest.mark.parametrize("closures", ["min", "all"])
def test_bispectra_and_closure_phases_match_reference(request, which, closures):
    d = request.getfixturevalue(which)
    bs = eqm.bispectra(d, closures=closures)
    cp = eqm.closure_phases(d, closures=closures)
    expect = _expect_bispectra(d, bs)
    assert bs.bispectrum.shape == (len(expect),) and len(expect) > 0
    assert_allclose(bs.bispectrum, _col(expect, "bispectrum"))
    assert_allclose(bs.sigma, _col(expect, "sigma"))
    assert_allclose(bs.u, _col(expect, "u"), rtol=1e-15)
    assert_allclose(bs.v, _col(expect, "v"), rtol=1e-15)
    assert np.array_equal(np.asarray(bs.sign), _col(expect, "sign"))
    # Closure phases in radians; compare on the circle.
    assert np.array_equal(np.asarray(cp.stations), np.asarray(bs.stations))
    assert np.array_equal(np.asarray(cp.time), np.asarray(bs.time))
    dpsi = np.angle(np.exp(1j * (np.asarray(cp.cphase) - _col(expect, "cphase"))))
    assert np.max(np.abs(dpsi)) < 1e-12
    assert_allclose(cp.sigma, _col(expect, "sigma_cphase"))


@pytest.mark.parametrize("which", ["avg", "raw"])
@pytest.mark.parametrize("closures", ["min", "all"])
@pytest.mark.parametrize("debias", [True, False])
def test_closure_amplitudes_match_reference(request, which, closures, debias):
    d = request.getfixturevalue(which)
    ca = eqm.closure_amplitudes(d, closures=closures, debias=debias)
    lca = eqm.log_closure_amplitudes(d, closures=closures, debias=debias)
    assert np.array_equal(np.asarray(ca.stations), np.asarray(lca.stations))
    assert np.array_equal(np.asarray(ca.time), np.asarray(lca.time))
    expect = _expect_camps(d, ca, debias)
    assert ca.camp.shape == lca.logcamp.shape == (len(expect),) and len(expect) > 0
    assert_allclose(ca.camp, _col(expect, "camp"))
    assert_allclose(ca.sigma, _col(expect, "sigma_camp"))
    assert_allclose(lca.logcamp, _col(expect, "logcamp"))
    assert_allclose(lca.sigma, _col(expect, "sigma_logcamp"))
    assert_allclose(ca.u, _col(expect, "u"), rtol=1e-15)
    assert_allclose(lca.v, _col(expect, "v"), rtol=1e-15)


# ------------------------------------------------------------------ set properties
def _by_time(d, prod):
    out = {}
    for t, st in _rows(d, prod):
        out.setdefault(t, []).append(st)
    return out


def _check_uv_closed(prod, kind, rtol):
    """Oriented legs close in (u, v): a triangle's legs a→b, b→c, c→a sum to 0;
    a quadrangle's legs a→b, c→d, a→d, b→c (C = |V_ab||V_cd| / (|V_ad||V_bc|))
    satisfy u_ab + u_bc + u_cd + u_da = u1 + u4 + u2 - u3 = 0."""
    w = np.array([1.0, 1.0, 1.0]) if kind == "triangle" else np.array([1, 1, -1, 1.0])
    for x in (np.asarray(prod.u), np.asarray(prod.v)):
        scale = np.max(np.abs(x), axis=1)
        assert np.all(np.abs(x @ w) <= rtol * scale), np.max(np.abs(x @ w) / scale)


def _check_sets(d, kind, uv_rtol, **kw):
    """Per timestamp, properties of the "min" and "all" closure sets that do not
    depend on how they were chosen. Returns the number of timestamps with every
    baseline present (`complete`) and with some missing (`partial`) among those
    with enough stations for one closure."""
    table = _table(d)
    if kind == "triangle":
        make, design, key, closed = (
            eqm.closure_phases, ref.phase_design, frozenset, ref.closed_triangles
        )  # fmt: skip
    else:
        make, design, key, closed = (
            eqm.log_closure_amplitudes, ref.logamp_design, ref.quadrangle_cycle,
            ref.closed_four_cycles,
        )  # fmt: skip
    p_min, p_all = make(d, closures="min", **kw), make(d, closures="all", **kw)
    _check_uv_closed(p_min, kind, uv_rtol)
    _check_uv_closed(p_all, kind, uv_rtol)
    by_min, by_all = _by_time(d, p_min), _by_time(d, p_all)
    assert set(by_min) <= set(table.times()) and set(by_all) <= set(table.times())
    complete = partial = 0
    for t in table.times():
        bl = table.baselines(t)
        inc, names = ref.incidence(bl)
        n = len(names)
        mins, alls = by_min.get(t, []), by_all.get(t, [])
        # "all": every closed triangle (every 4-cycle of present baselines) once.
        assert len({key(c) for c in alls}) == len(alls), t
        assert {key(c) for c in alls} == closed(bl), t
        d_min, d_all = design(mins, bl), design(alls, bl)
        # Closed: blind to station phases (triangles) / station gains (|V|).
        b = inc if kind == "triangle" else np.abs(inc)
        assert np.all(d_all @ b == 0) and np.all(d_min @ b == 0), t
        # "min": independent, and no more closures than "all" can hold.
        assert ref.rank(d_min) == len(mins), t
        assert len(mins) <= ref.rank(d_all), t
        if ref.max_independent(n, kind) == 0:
            assert not mins and not alls, t
        elif len(bl) == n * (n - 1) // 2:
            complete += 1
            assert len(mins) == ref.max_independent(n, kind), t
            assert ref.rank(d_all) == len(mins), t
            assert ref.rowspace_residual(d_min, d_all) < 1e-10, t
        else:
            partial += 1
    return complete, partial


# Relative (u, v) closure on real data (measured): the file's (u, v) close to
# ~3e-4 of the longest leg, scan averages to ~4e-3 (legs averaged over different
# integrations). A mis-oriented leg is off by O(1); synthetic data use 1e-12.
UV_RTOL = {"raw": 2e-3, "avg": 2e-2}


@pytest.mark.parametrize("which", ["avg", "raw"])
@pytest.mark.parametrize("kind", ["triangle", "quadrangle"])
def test_closure_set_properties_on_real_data(request, which, kind):
    d = request.getfixturevalue(which)
    complete, partial = _check_sets(d, kind, UV_RTOL[which])
    assert complete > 0
    if which == "raw":
        assert complete > 50  # (partial timestamps: test_uv_min_..., synthetic)


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
def _full_array(n_st, n_times=2, seed=0, drop=()):
    """Every baseline at every time, (u, v) from station positions (so closures
    close exactly), less the `(time, i, j)` rows in `drop`."""
    rng = np.random.default_rng(seed)
    i, j = np.triu_indices(n_st, 1)
    nb = i.size
    t = np.repeat(np.arange(n_times, dtype=float), nb)
    a1, a2 = np.tile(i, n_times), np.tile(j, n_times)
    x, y = rng.normal(size=(2, n_times, n_st)) * 1e9
    k = t.astype(int)
    keep = np.array([(tt, p, q) not in set(drop) for tt, p, q in zip(k, a1, a2)])
    vis = rng.normal(size=nb * n_times) + 1j * rng.normal(size=nb * n_times)
    return eqm.VisData(
        (x[k, a1] - x[k, a2])[keep],
        (y[k, a1] - y[k, a2])[keep],
        vis[keep],
        np.full(nb * n_times, 0.1)[keep],
        t[keep],
        a1[keep],
        a2[keep],
        station_names=tuple(f"S{m}" for m in range(n_st)),
        freq=230e9,
    )


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8])
def test_minimal_set_sizes_and_independence(n):
    """Every baseline present: (n-1)(n-2)/2 closure phases and n(n-3)/2 log
    closure amplitudes per timestamp, independent, spanning the "all" set."""
    d = _full_array(n)
    assert eqm.closure_phases(d).cphase.shape == (2 * (n - 1) * (n - 2) // 2,)
    assert _check_sets(d, "triangle", 1e-12) == (2, 0)
    if n >= 4:
        assert eqm.log_closure_amplitudes(d).logcamp.shape == (n * (n - 3),)
        assert _check_sets(d, "quadrangle", 1e-12) == (2, 0)


def test_sets_with_missing_baselines():
    """Missing baselines (one to the reference station, others, and a whole
    station): the "min" set stays independent, "all" holds every closed
    triangle / 4-cycle, and the timestamp without station 0 is complete again."""
    drop = [(0, 0, 1), (0, 2, 5), (1, 3, 4)] + [(2, 0, m) for m in range(1, 7)]
    d = _full_array(7, n_times=3, drop=drop)
    assert d.n_rows == 3 * 21 - len(drop)
    assert _check_sets(d, "triangle", 1e-12) == (1, 2)
    assert _check_sets(d, "quadrangle", 1e-12) == (1, 2)


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
    short = raw.select_uvdist(cut)
    cp = eqm.closure_phases(raw, uv_min=cut)
    assert np.all(np.hypot(np.asarray(cp.u), np.asarray(cp.v)) >= cut)
    assert cp.cphase.shape[0] < eqm.closure_phases(raw).cphase.shape[0]
    # The same closures as forming them from the cut table, and values from it.
    same = eqm.closure_phases(short)
    assert np.array_equal(np.asarray(cp.stations), np.asarray(same.stations))
    assert np.array_equal(np.asarray(cp.time), np.asarray(same.time))
    assert_allclose(cp.sigma, _col(_expect_bispectra(short, cp), "sigma_cphase"))
    for kind in ("triangle", "quadrangle"):
        # Without the intra-site baselines no timestamp is complete.
        assert _check_sets(short, kind, UV_RTOL["raw"])[1] > 50
    lca = eqm.log_closure_amplitudes(raw, uv_min=cut)
    assert_allclose(lca.logcamp, _col(_expect_camps(short, lca), "logcamp"))
    assert np.all(np.hypot(np.asarray(lca.u), np.asarray(lca.v)) >= cut)
    assert lca.logcamp.shape[0] < eqm.log_closure_amplitudes(raw).logcamp.shape[0]


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
    # Entries for stations absent from the data apply to nothing (eht-imaging's
    # reading): one table serves every day of an array. The shipped M87 table
    # names SP, which never observes M87 (it was refused, naming SP).
    assert "GL" not in avg.station_names
    full = {s: fs.get(s, 0.0) for s in avg.stations_present()}  # 0: the default
    for fn in (eqm.add_systematic_noise, eqm.amplitudes):
        assert_allclose(
            fn(avg, systematic_noise={**full, "GL": 0.3}).sigma,
            fn(avg, systematic_noise=fs).sigma,
            rtol=0,
        )
    table = eqm.m87_systematic_noise()
    assert "SP" in table and "SP" not in avg.station_names
    present = {k: v for k, v in table.items() if k in avg.station_names}
    assert_allclose(
        eqm.add_systematic_noise(avg, table).sigma,
        eqm.add_systematic_noise(avg, present).sigma,
        rtol=0,
    )
    # From a review: a table that drops entries *and* leaves out stations with data
    # is another naming of the array (2018's files call APEX `AX`): refused, where
    # it gave four sites no systematic noise without a word.
    codes_2018 = {"AP": "AX", "JC": "MM", "SM": "SW", "AZ": "MG"}
    d18 = avg.replace(
        station_names=tuple(codes_2018.get(s, s) for s in avg.station_names)
    )
    for fn in (eqm.add_systematic_noise, eqm.amplitudes):
        with pytest.raises(
            ValueError, match=r"data \(\['AX'.*another naming.*0 for none"
        ):
            fn(d18, systematic_noise=table)
    # Mapped to the data's codes it is taken.
    mapped = {codes_2018.get(k, k): v for k, v in table.items()}
    assert_allclose(
        eqm.add_systematic_noise(d18, mapped).sigma,
        eqm.add_systematic_noise(avg, table).sigma,
        rtol=0,
    )
    # Stations without rows need no entry: the guard looks at stations with data.
    assert set(avg.stations_present()) <= set(table)
    # The systematic-noise table has no default: refused, not ignored.
    for key in ("default", "Default"):
        with pytest.raises(ValueError, match=f"no '{key}' key"):
            eqm.add_systematic_noise(avg, {key: 0.05})
    # Issue 41: a key that is no station at all (here a site's long name) is
    # refused rather than dropped.
    with pytest.raises(ValueError, match="a key 'LMT', which is neither a station"):
        eqm.add_systematic_noise(avg, {**full, "LMT": 0.05})


def test_fractional_noise_before_closures(avg):
    f = 0.05
    noisy = eqm.add_fractional_noise(avg, f)
    vis, sigma = np.asarray(avg.vis), np.asarray(avg.sigma)
    assert_allclose(noisy.sigma, np.sqrt(sigma**2 + (f * np.abs(vis)) ** 2))
    cp = eqm.closure_phases(avg, fractional_noise=f)
    assert cp.cphase.shape == eqm.closure_phases(avg).cphase.shape
    expect = _expect_bispectra(noisy, cp)
    assert_allclose(cp.sigma, _col(expect, "sigma_cphase"))
    lca = eqm.log_closure_amplitudes(avg, fractional_noise=f)
    assert lca.logcamp.shape == eqm.log_closure_amplitudes(avg).logcamp.shape
    expect = _expect_camps(noisy, lca)
    assert_allclose(lca.sigma, _col(expect, "sigma_logcamp"))
    assert_allclose(lca.logcamp, _col(expect, "logcamp"))


def test_systematic_cphase_noise_in_degrees(avg):
    base = eqm.closure_phases(avg)
    sys = eqm.closure_phases(avg, systematic_cphase_noise=3.0)
    expect = np.sqrt(np.asarray(base.sigma) ** 2 + (3.0 * np.pi / 180) ** 2)
    assert_allclose(sys.sigma, expect)
    assert_allclose(sys.cphase, base.cphase, rtol=0)
    # numpy scalars are numbers too, as for the other numeric arguments.
    for s in (np.float32(3.0), np.float64(3.0), np.int64(3)):
        assert_allclose(
            eqm.closure_phases(avg, systematic_cphase_noise=s).sigma, sys.sigma
        )


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
    # A present station's code in the wrong case is a misspelling, not another
    # station; a key that is not a name is refused.
    with pytest.raises(ValueError, match=r"'aa', which is 'AA' here.*case-sensitive"):
        eqm.amplitudes(avg, systematic_noise={"aa": 0.1})
    with pytest.raises(TypeError, match="systematic_noise.*station names.*0"):
        eqm.add_systematic_noise(avg, {0: 0.1})
    # A percentage for a fraction (from a user walkthrough: taken as 200 %).
    for call in (
        lambda: eqm.amplitudes(avg, systematic_noise=2.0),
        lambda: eqm.add_systematic_noise(avg, {"AA": 5}),
        lambda: eqm.add_fractional_noise(avg, 1.5),
        lambda: eqm.closure_phases(avg, fractional_noise=2),
    ):
        with pytest.raises(ValueError, match=r"fraction in \[0, 1\].*`0.02`"):
            call()
    assert_allclose(  # 1 itself is a fraction
        eqm.add_fractional_noise(avg, 1.0).sigma,
        np.hypot(np.asarray(avg.sigma), np.abs(np.asarray(avg.vis))),
        rtol=1e-12,
    )
    # An absent station's entry is still checked: it is wrong on any day.
    with pytest.raises(ValueError, match=r"systematic_noise\['GL'\].*>= 0"):
        eqm.add_systematic_noise(avg, {"AA": 0.1, "GL": -0.1})
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
    with pytest.raises(ValueError, match="duplicated row.*closure quantities"):
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
