"""Station gains: `StationGains`, `GainCorrected` (value and gradient vs numpy with
gains, jit, vmap, finite differences, inside an objective with shared
transforms), gain priors, solution intervals, carrying gains to other data."""

import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose, central_fd
from tests.problems.gains import (
    GRID,
    NAMES,
    pairs as _pairs,
    random_gains,
    synthetic,
    TIMES,
    truth_image,
    vis_reference,
)
from tests.reference import gains as rg
from tests.reference.numpy_ft import dft_matrix
from tests.unchecked import unchecked_error, unchecked_script


# ------------------------------------------------------------------ intervals
def test_solution_intervals():
    d = synthetic()
    slot, bounds = em.solution_intervals(d, "scan")
    assert slot.tolist() == [0, 0, 0, 1, 1, 2, 2, 2]
    assert_allclose(bounds, [[1.0, 1.01], [2.0, 2.005], [3.5, 3.51]], rtol=1e-15)
    slot, bounds = em.solution_intervals(d, "timestamp")
    assert slot.tolist() == list(range(8)) and np.all(bounds[:, 0] == TIMES)
    slot, bounds = em.solution_intervals(d, "track")
    assert slot.tolist() == [0] * 8 and bounds.tolist() == [[1.0, 3.51]]
    # Fixed bins of 30 s aligned on 0 h: 1.0 h and 1.005 h (18 s later) share one.
    slot, bounds = em.solution_intervals(d, 30)
    assert slot.tolist() == [0, 0, 1, 2, 2, 3, 3, 4]
    assert_allclose(bounds[0], [1.0, 1.0 + 30 / 3600], rtol=1e-15)


@pytest.mark.parametrize(
    "interval, err, match",
    [
        ("minute", ValueError, "interval"),
        (0, ValueError, "timestamp"),
        (-3.0, ValueError, "interval"),
        (True, TypeError, "interval"),
        (None, TypeError, "interval"),
    ],
)
def test_interval_errors(interval, err, match):
    with pytest.raises(err, match=match):
        em.solution_intervals(synthetic(), interval)


# -------------------------------------------------------------- StationGains
def test_factor_matches_numpy_and_handles_closure_legs():
    d = synthetic()
    g = random_gains(d)
    want = rg.gain_factor(
        np.asarray(g.log_amp),
        np.asarray(g.phase),
        np.asarray(g.slot_interval),
        _pairs(d),
        d.time_index,
    )
    got = g.factor(_pairs(d), d.time_index)
    assert_allclose(got, want, rtol=1e-15)
    # Legs of closure rows (n, 3, 2) share their row's time slot.
    st = np.stack([_pairs(d)[:5]] * 3, axis=1)
    f3 = g.factor(st, d.time_index[:5])
    assert f3.shape == (5, 3)
    assert_allclose(f3, np.stack([want[:5]] * 3, axis=1), rtol=1e-15)
    # Unknown labels (-1) get factor 1.
    f = g.factor(np.array([[-1, 2], [0, 1]]), np.array([0, -1]))
    assert np.all(np.asarray(f) == 1.0)


def test_corrupt_calibrate_round_trip_and_apply_gains():
    d = synthetic()
    g = random_gains(d)
    bad = g.corrupt(d)
    # Same as the existing data-side `apply_gains` with a per-timestamp table.
    table = np.asarray(g.complex_gains())[np.asarray(g.slot_interval)]
    ref = em.apply_gains(d, table)
    assert_allclose(bad.vis, ref.vis, rtol=1e-14)
    assert_allclose(bad.sigma, ref.sigma, rtol=1e-14)
    back = g.calibrate(bad)
    assert_allclose(back.vis, d.vis, rtol=1e-14)
    assert_allclose(back.sigma, d.sigma, rtol=1e-14)


def test_gains_carry_their_day():
    """Times count hours from 0 h of each data set's own `mjd`: gains of one day
    applied to data of two days joined (the second day's hours + 24), or to the
    same records stamped from the next day (hours − 24), reach the same
    intervals. They used to be compared hour for hour: 95 % of the rows of a real
    day took other intervals' gains."""
    d = synthetic()
    g = random_gains(d)
    assert int(g.mjd) == d.mjd
    alone = g.calibrate(d)
    day_before = d.replace(mjd=d.mjd - 1)
    both = em.concatenate([day_before, d])  # d's rows at 24 h + their hours
    second = np.asarray(both.time) >= 24.0
    assert second.sum() == d.n_rows
    # The first day lies before every interval: refused (issue 41) unless asked.
    with pytest.raises(ValueError, match="24 h before these gains' intervals"):
        g.calibrate(both)
    cal = g.calibrate(both, extrapolate=True)
    assert_allclose(np.asarray(cal.vis)[second], alone.vis, rtol=1e-14)
    # Asked for: the nearest (first) interval, per station.
    first = g.at(both, extrapolate=True)
    assert int(first.mjd) == both.mjd
    np.testing.assert_array_equal(
        np.asarray(first.slot_interval)[: len(d.timestamps())], 0
    )
    next_day = d.replace(mjd=d.mjd + 1, time=np.asarray(d.time) - 24.0)
    assert_allclose(g.calibrate(next_day).vis, alone.vis, rtol=1e-14)
    # Gains built without a day (`mjd` unknown) take times as they are.
    bare = em.StationGains(g.log_amp, g.phase, g.slot_interval, g.bounds, NAMES)
    assert int(bare.mjd) == -1
    assert_allclose(bare.calibrate(d).vis, alone.vis, rtol=1e-14)
    with pytest.raises(TypeError, match="`mjd`"):
        em.StationGains(g.log_amp, g.phase, g.slot_interval, g.bounds, NAMES, mjd=1.5)


def test_at_nearest_in_time_and_by_name():
    d = synthetic()
    g = random_gains(d)
    # Another data set: other times (inside, between and beyond the scans) and
    # another station table order, with a station the gains do not know.
    times = np.array([0.5, 1.004, 1.4, 1.9, 2.7, 3.505, 9.0])
    n = times.size
    other = em.VisData(
        np.full(n, 1e9),
        np.full(n, 1e9),
        np.ones(n),
        np.ones(n),
        times,
        np.zeros(n, int),
        np.ones(n, int),
        station_names=("SM", "AA", "XX"),
        freq=230e9,
    )
    moved = g.at(other, extrapolate=True)  # 9.0 h: 5.5 h beyond the last
    # Per station (columns SM, AA, XX). AA has data in every scan: 0.5 h → scan 0
    # (before the start); 1.4 h is nearer scan 0's end (1.01) than scan 1's start
    # (2.0); 1.9 → scan 1; 2.7 → 1 (nearer 2.005 than 3.5); 9 → 2. SM has no data
    # in scan 1, so no solution there: its nearest scans with one are 0 and 2
    # (1.9 h is nearer 1.01 than 3.5; 2.7 nearer 3.5). XX is unknown: -1 (gain 1).
    slots = np.asarray(moved.slot_interval)
    assert slots[:, 1].tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert slots[:, 0].tolist() == [0, 0, 0, 0, 2, 2, 2]
    assert slots[:, 2].tolist() == [-1] * 7
    # The factor on an SM–AA leg at 1.9 h: SM's scan-0 gain, AA's scan-1 gain.
    f = np.asarray(moved.factor(np.array([[0, 1]]), np.array([3])))
    want = np.exp(
        g.log_amp[0, 5] + g.log_amp[1, 0] + 1j * (g.phase[0, 5] - g.phase[1, 0])
    )
    assert_allclose(f, [want], rtol=1e-14)
    # XX gets gain 1 on its own side only.
    f = np.asarray(moved.factor(np.array([[2, 1]]), np.array([3])))
    assert_allclose(f, [np.exp(g.log_amp[1, 0] - 1j * g.phase[1, 0])], rtol=1e-14)
    assert moved.station_names == ("SM", "AA", "XX")
    assert_allclose(moved.log_amp[:, :2], g.log_amp[:, [5, 0]], rtol=0)
    assert_allclose(moved.phase[:, :2], g.phase[:, [5, 0]], rtol=0)
    assert np.all(np.asarray(moved.log_amp[:, 2]) == 0)
    assert np.all(np.asarray(moved.phase[:, 2]) == 0)


def _cadence_data(seconds=600, step=10):
    """4 stations, all baselines, a regular cadence from 0 h (timestamps fall on
    the edges of fixed-length solution bins)."""
    times = np.arange(0, seconds, step) / 3600.0
    rows = [(t, a, b) for t in times for a, b in itertools.combinations(range(4), 2)]
    t, a1, a2 = (np.array(x) for x in zip(*rows))
    rng = np.random.default_rng(0)
    n = t.size
    return em.VisData(
        rng.uniform(-1e9, 1e9, n),
        rng.uniform(-1e9, 1e9, n),
        np.exp(1j * rng.uniform(-np.pi, np.pi, n)),
        np.full(n, 0.01),
        t,
        a1,
        a2,
        station_names=NAMES[:4],
        freq=230e9,
    )


def test_bins_in_seconds_agree_on_their_edges():
    """A timestamp on the edge of two 60 s bins (t = 60 s, 120 s, ...) belongs to
    the later bin (floor division, as the fit groups it); `corrupt`, `calibrate`
    and `at` look it up there too, so gains solved per bin calibrate their own
    data exactly."""
    d = _cadence_data()
    rng = np.random.default_rng(1)
    g0 = em.StationGains.from_data(d, 60.0)
    shape = g0.log_amp.shape
    g = em.StationGains.from_data(
        d,
        60.0,
        gains=np.exp(1j * rng.uniform(-3, 3, shape)),
    )
    slot, _ = em.solution_intervals(d, 60.0)
    ts = d.timestamps()
    assert slot[np.searchsorted(ts, 60 / 3600)] == 1
    moved = np.asarray(g.at(d).slot_interval)
    assert np.all(moved == slot[:, None])
    f = np.asarray(g.factor(_pairs(d), d.time_index))
    assert_allclose(np.asarray(g.corrupt(d).vis), f * np.asarray(d.vis), rtol=1e-14)
    # Phase self-calibration per 60 s bin of noiseless corrupted data gives the
    # model back on every row, those on bin edges too (they were off by up to 2).
    bad = g.corrupt(d).replace(sigma=np.asarray(d.sigma))
    cal, _ = em.self_calibrate(
        bad, model_vis=np.asarray(d.vis), interval=60.0, method="phase"
    )
    assert_allclose(np.asarray(cal.vis), np.asarray(d.vis), rtol=1e-6)


FLOAT32_EDGE_RECORDS = unchecked_script(
    "import json, numpy as np, eqmodels as em\n"
    "grid = em.ImageGrid.from_fov(16, 128.0)\n"
    "times = np.arange(0, 6, 10 / 3600)\n"
    "d = em.observe(np.ones((16, 16)) / 256, grid, em.EHT2017, ra=187.7, "
    "dec=12.4, times=times, add_noise=False)\n"
    "slot, _ = em.solution_intervals(d, 60)\n"
    "si = np.asarray(em.StationGains.from_data(d, 60).at(d).slot_interval)\n"
    "ti, a = np.asarray(d.time_index), np.asarray(d.ant1)\n"
    "print(json.dumps({'dtype': str(d.time.dtype), "
    "'counts': np.unique(np.bincount(slot)).tolist(), "
    "'at': bool(np.all(si[ti, a] == slot[ti]))}))"
)


def test_bins_in_seconds_place_float32_edge_records_in_their_bin(unchecked):
    """From a review: with x64 off (float32 times), 10-s records stamped on the
    edges of 60-s intervals were stored just below the edge and went to the
    previous interval (5, 6 and 7 records to an interval); `at` on the same data
    must put every row in the interval `solution_intervals` gives its slot."""
    out = unchecked[FLOAT32_EDGE_RECORDS]
    assert out == {"dtype": "float32", "counts": [6], "at": True}


def test_gain_table_is_not_a_float_leaf():
    """Only `log_amp` and `phase` are float leaves: an optimiser (weight decay
    moves parameters without gradient) cannot move the interval table."""
    g = random_gains(synthetic())
    floats = [x for x in jax.tree.leaves(g) if eqx.is_inexact_array(x)]
    assert len(floats) == 2
    grads = eqx.filter_grad(lambda g: jnp.sum(g.log_amp**2))(g)
    assert [x.shape for x in jax.tree.leaves(grads)] == [g.log_amp.shape] * 2
    assert isinstance(g.bounds, tuple) and len(g.bounds) == g.n_intervals
    with pytest.raises(TypeError, match="outside `jit`"):
        eqx.filter_jit(lambda g: g.at(synthetic()).log_amp)(g)


def _two_bands(shift_h=0.0):
    """`synthetic()` as band 0 (230 GHz) and again as band 1 (232 GHz), band 1's
    times shifted by `shift_h`."""
    d = synthetic()
    hi = d.replace(time=np.asarray(d.time) + shift_h)
    hi = em.VisData(
        hi.u, hi.v, hi.vis, hi.sigma, hi.time, hi.ant1, hi.ant2,
        station_names=NAMES, freq=232e9,
    )  # fmt: skip
    return d, em.concatenate([d, hi])


BANDS_ALL = unchecked_error(
    "g.at(d, bands='all')",
    "ValueError",
    "d = em.VisData([1e9], [1e9], [1.0], [1.0], [1.0], [0], [1], "
    "station_names=('AA', 'AP'), freq=230e9)\n"
    "g = em.StationGains.from_data(d, 'scan')",
)


def test_at_matches_bands(unchecked):
    """Gains solved per band (each interval one band's rows) calibrate each band
    with its own solutions: the bands' phases differ."""
    lo, both = _two_bands(shift_h=1e-5)
    g = random_gains(both, interval="timestamp")
    assert set(g.interval_freqs) == {230e9, 232e9}
    band = np.asarray(both.band)
    ones = both.replace(vis=np.ones(both.n_rows))
    f = np.asarray(g.corrupt(ones).vis)
    # Band 1's rows at its own (shifted) times: the same factor as `corrupt`
    # on band 1 alone; band 0's likewise.
    for b in (0, 1):
        alone = both.select(bands=[b])
        f_alone = np.asarray(g.corrupt(alone.replace(vis=np.ones(alone.n_rows))).vis)
        assert_allclose(np.sort_complex(f[band == b]), np.sort_complex(f_alone))
    # One band's gains on the other band: refused by default, carried on request.
    g0 = random_gains(lo, interval="timestamp")
    hi = both.select(bands=[1])
    with pytest.raises(ValueError, match=r"band at 2\.32e\+11 Hz.*bands=\"any\""):
        g0.calibrate(hi)
    moved = np.asarray(g0.corrupt(hi.replace(vis=np.ones(hi.n_rows)), bands="any").vis)
    want = np.asarray(g0.corrupt(lo.replace(vis=np.ones(lo.n_rows))).vis)
    assert_allclose(moved, want)  # the nearest times (1e-5 h away), station by station
    # Band-specific solutions and data with both bands at one timestamp.
    _, same_time = _two_bands()
    with pytest.raises(ValueError, match="several bands at one timestamp"):
        g.at(same_time)
    assert g.at(same_time, bands="any").n_intervals == g.n_intervals
    # Gains whose intervals span both bands (or unknown bands) serve any band.
    mixed = random_gains(same_time, interval="scan")
    assert mixed.interval_freqs == (None, None, None)
    assert_allclose(
        mixed.calibrate(same_time).vis, mixed.calibrate(same_time, bands="any").vis
    )
    msg = unchecked[BANDS_ALL]
    assert msg is not None and "`bands` must be" in msg and "'all'" in msg


def test_station_gains_errors():
    d = synthetic()
    slot, bounds = em.solution_intervals(d, "scan")
    z = np.zeros((3, 6))
    with pytest.raises(ValueError, match="log_amp.*n_stations"):
        em.StationGains(np.zeros((3, 5)), z, slot, bounds, NAMES)
    with pytest.raises(ValueError, match="same shape"):
        em.StationGains(z, np.zeros((2, 6)), slot, bounds, NAMES)
    with pytest.raises(TypeError, match="phase.*real"):
        em.StationGains(z, z + 1j, slot, bounds, NAMES)
    with pytest.raises(ValueError, match="non-finite"):
        em.StationGains(z + np.nan, z, slot, bounds, NAMES)
    with pytest.raises(ValueError, match=r"slot_interval.*\[0, 3\)"):
        em.StationGains(z, z, slot + 1, bounds, NAMES)
    with pytest.raises(ValueError, match="bounds"):
        em.StationGains(z, z, slot, bounds[:, ::-1], NAMES)
    with pytest.raises(TypeError, match="station_names"):
        em.StationGains(z, z, slot, bounds, "AA")
    with pytest.raises(ValueError, match=r"station_names.*\['AA'\] more than once"):
        em.StationGains(z, z, slot, bounds, ("AA",) + NAMES[1:-1] + ("AA",))
    with pytest.raises(ValueError, match="sorted by start"):
        em.StationGains(z, z, slot, bounds[::-1], NAMES)
    with pytest.raises(ValueError, match="interval_freqs.*3 band"):
        em.StationGains(z, z, slot, bounds, NAMES, interval_freqs=(230e9,) * 2)
    with pytest.raises(ValueError, match="interval_freqs"):
        em.StationGains(z, z, slot, bounds, NAMES, interval_freqs=(230e9, -1.0, None))
    with pytest.raises(ValueError, match=r"gains.*\(3, 6\)"):
        em.StationGains.from_data(d, "scan", gains=np.ones((2, 6)))
    with pytest.raises(ValueError, match="non-zero"):
        em.StationGains.from_data(d, "scan", gains=np.zeros((3, 6)))
    with pytest.raises(TypeError, match="AbstractGains"):
        em.with_gains(None, np.ones(3))


# -------------------------------------------------------------- GainCorrected
def _terms(d):
    vis = em.VisChi2.from_data(d, GRID)
    amp = em.AmpChi2.from_data(em.amplitudes(d), GRID)
    return vis, amp


def _vg(term, img, gains):
    """Value and gradient w.r.t. the image and the gains (one compiled program)."""
    loss = lambda pair, t: em.with_gains(t, pair[1])(pair[0])  # noqa: E731
    return eqx.filter_jit(eqx.filter_value_and_grad(loss))((img, gains), term)


@pytest.mark.parametrize("forward", ["direct", "separable"])
@pytest.mark.parametrize("kind", ["vis", "amp"])
def test_gain_corrected_matches_numpy(kind, forward):
    d = synthetic()
    g = random_gains(d)
    vis, amp = _terms(d)
    term = vis if kind == "vis" else amp
    if forward != "direct":
        term = eqx.tree_at(
            lambda t: t.forward, term, em.make_forward(forward, GRID, d.u, d.v)
        )
    wrapped = em.GainCorrected(term, g)
    img = truth_image() * 1.1
    a0 = dft_matrix(*GRID.shape, GRID.psize, np.asarray(d.u), np.asarray(d.v))
    la, ph = np.asarray(g.log_amp), np.asarray(g.phase)
    slot = np.asarray(g.slot_interval)
    if kind == "vis":
        ref = vis_reference(d, img, g)
    else:
        p = em.amplitudes(d)
        ref = rg.amp_chi2(
            a0,
            img,
            np.asarray(p.amp),
            np.asarray(p.sigma),
            la,
            ph,
            slot,
            _pairs(d),
            d.time_index,
        )
    val, (g_img, g_gains) = _vg(wrapped, jnp.asarray(img), g)
    assert_allclose(val, ref[0], rtol=1e-12)
    assert_allclose(g_img, ref[1], rtol=1e-12)
    assert_allclose(g_gains.log_amp, ref[2], rtol=1e-12)
    if kind == "vis":
        assert_allclose(g_gains.phase, ref[3], rtol=1e-12)
    else:  # amplitudes do not see phases
        assert np.max(np.abs(np.asarray(g_gains.phase))) <= 1e-12 * np.max(
            np.abs(ref[2])
        )
    # With unit gains the wrapper is the inner term.
    unit = em.GainCorrected(term, em.StationGains.from_data(d, "scan"))
    assert_allclose(unit(img), term(img), rtol=1e-14)
    # Residuals square to the value.
    r = wrapped.residuals(img)
    assert_allclose(jnp.sum(r * r), ref[0], rtol=1e-12)


def test_gain_gradient_finite_differences():
    d = synthetic()
    g = random_gains(d, seed=3)
    vis, amp = _terms(d)
    img = jnp.asarray(truth_image())
    for term in (vis, amp):
        wrapped = em.GainCorrected(term, g)

        def f(x):
            la, ph = x[:18].reshape(3, 6), x[18:].reshape(3, 6)
            gg = eqx.tree_at(lambda q: (q.log_amp, q.phase), g, (la, ph))
            return em.with_gains(wrapped, gg)(img)

        x0 = np.concatenate(
            [np.asarray(g.log_amp).ravel(), np.asarray(g.phase).ravel()]
        )
        # (compiled: the differences evaluate `f` eight times)
        grad = np.asarray(jax.jit(jax.grad(f))(jnp.asarray(x0)))
        rng = np.random.default_rng(0)
        dirs = [rng.standard_normal(x0.shape) for _ in range(4)]
        fd = central_fd(jax.jit(f), x0, dirs, 1e-6)
        assert_allclose([grad @ dd for dd in dirs], fd, rtol=1e-6)


def test_closure_terms_are_gain_invariant():
    d = synthetic()
    g = random_gains(d, amp=0.3)
    img = jnp.asarray(truth_image() * 0.9)
    for term in (
        em.ClosurePhaseChi2.from_data(em.closure_phases(d), GRID),
        em.LogClosureAmpChi2.from_data(em.log_closure_amplitudes(d), GRID),
    ):
        wrapped = em.GainCorrected(term, g)
        value = eqx.filter_jit(lambda t, x: t(x))
        assert_allclose(value(wrapped, img), value(term, img), rtol=1e-12)
        grad = eqx.filter_jit(eqx.filter_grad(lambda gg, t: em.with_gains(t, gg)(img)))(
            g, wrapped
        )
        scale = float(value(term, img))
        assert np.max(np.abs(np.asarray(grad.log_amp))) <= 1e-10 * scale
        assert np.max(np.abs(np.asarray(grad.phase))) <= 1e-10 * scale


def test_jit_and_vmap_over_gains():
    d = synthetic()
    vis, _ = _terms(d)
    img = jnp.asarray(truth_image())
    batch = [random_gains(d, seed=s) for s in range(3)]
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *batch)
    wrapped = em.GainCorrected(vis, batch[0])
    f = eqx.filter_jit(jax.vmap(lambda gg: em.with_gains(wrapped, gg)(img)))
    got = f(stacked)
    want = [em.GainCorrected(vis, gg)(img) for gg in batch]
    assert_allclose(got, np.array(want), rtol=1e-13)
    # vmap over images too, gains fixed.
    imgs = jnp.stack([img, 2 * img])
    got = eqx.filter_jit(jax.vmap(lambda x, t: t(x), in_axes=(0, None)))(imgs, wrapped)
    assert_allclose(got, np.array([wrapped(img), wrapped(2 * img)]), rtol=1e-13)


def test_objective_shares_one_transform_with_gains():
    d = synthetic()
    g = random_gains(d)
    vis, amp = _terms(d)
    cp = em.ClosurePhaseChi2.from_data(em.closure_phases(d), GRID)
    wrapped = [em.GainCorrected(vis, g), em.GainCorrected(amp, g), cp]
    obj = 2.0 * wrapped[0] + 0.5 * wrapped[1] + wrapped[2]
    assert obj.names == ("vis", "amp", "cphase")
    assert len(obj.shared) == 1 and obj.shared[0].members == (0, 1, 2)
    assert all(t.forward is None for t in obj.terms)
    img = jnp.asarray(truth_image() * 1.2)
    want = 2.0 * wrapped[0](img) + 0.5 * wrapped[1](img) + wrapped[2](img)
    assert_allclose(obj(img), want, rtol=1e-12)
    # The gradient w.r.t. the gains through the objective equals the sum.
    loss = lambda gg, o: em.with_gains(o, gg)(img)  # noqa: E731
    g_obj = eqx.filter_jit(eqx.filter_grad(loss))(g, obj)
    g_sum = eqx.filter_grad(
        lambda gg: (
            2.0 * em.with_gains(wrapped[0], gg)(img)
            + 0.5 * em.with_gains(wrapped[1], gg)(img)
        )
    )(g)
    assert_allclose(g_obj.log_amp, g_sum.log_amp, rtol=1e-12)
    assert_allclose(g_obj.phase, g_sum.phase, rtol=1e-12)
    r = obj.residuals(img)
    assert_allclose(jnp.sum(r * r), want, rtol=1e-12)


def test_take_and_pad_rows():
    d = synthetic()
    g = random_gains(d)
    vis, _ = _terms(d)
    w = em.GainCorrected(vis, g)
    img = jnp.asarray(truth_image())
    perm = np.random.default_rng(0).permutation(w.rows)
    assert_allclose(w.take_rows(perm)(img), w(img), rtol=1e-13)
    sub = np.arange(10)
    assert_allclose(
        w.take_rows(sub, n_rows=10)(img),
        em.GainCorrected(vis.take_rows(sub, n_rows=10), g)(img),
        rtol=1e-13,
    )
    p = w.pad_rows(w.rows + 5)
    assert p.rows == w.rows + 5 and int(p.n_rows) == int(w.n_rows)
    assert_allclose(p(img), w(img), rtol=1e-14)
    assert w.pad_rows(w.rows) is w


def test_gain_corrected_errors():
    d = synthetic()
    g = random_gains(d)
    vis, amp = _terms(d)
    with pytest.raises(TypeError, match="data term|AbstractDataTerm"):
        em.GainCorrected(em.TV(GRID), g)
    with pytest.raises(TypeError, match="AbstractGains"):
        em.GainCorrected(vis, np.ones(6))
    with pytest.raises(TypeError, match="already a GainCorrected"):
        em.GainCorrected(em.GainCorrected(vis, g), g)
    unlabeled = em.VisChi2(em.DirectFT(GRID, d.u, d.v), d.vis, d.sigma)
    with pytest.raises(ValueError, match="unknown stations or time slots.*from_data"):
        em.GainCorrected(unlabeled, g)
    small = em.StationGains(
        g.log_amp[:, :3], g.phase[:, :3], g.slot_interval, g.bounds, NAMES[:3]
    )
    with pytest.raises(ValueError, match="station index 5.*3 stations"):
        em.GainCorrected(vis, small)
    short = em.StationGains(g.log_amp, g.phase, g.slot_interval[:4], g.bounds, NAMES)
    with pytest.raises(ValueError, match="time slot 7.*4 time slots"):
        em.GainCorrected(amp, short)


@pytest.mark.parametrize("select", ["time", "scan", "rows"])
def test_gain_corrected_refuses_a_term_of_a_selection_with_the_whole_datas_gains(
    select,
):
    """A term built from a selection that drops timestamps (the second and third
    scans; a station's rows that leave some timestamps empty) indexes the
    selection's own time slots: with gains of the whole data its rows would take
    other intervals' gains, silently (the indices stay in range). Refused, naming
    the fix; the gains carried with `at` give each row its own interval's gain."""
    d = synthetic()
    g = random_gains(d)
    if select == "time":
        sel = d.select(time_range=(1.9, 4.0))
    elif select == "scan":
        sel = d.take(np.asarray(d.time) > 3.0)
    else:  # rows of one station only, at every other timestamp
        keep = (np.asarray(d.ant1) == 0) & np.isin(np.asarray(d.time), TIMES[1::2])
        sel = d.take(keep)
    assert sel.index_key != d.index_key
    for term in (
        em.VisChi2.from_data(sel, GRID),
        em.AmpChi2.from_data(em.amplitudes(sel), GRID),
    ):
        # The old check passes: every index is in range of the whole data's slots.
        assert int(np.max(term.time_index)) < g.slot_interval.shape[0]
        with pytest.raises(ValueError, match="different data sets.*gains.at\\(data\\)"):
            em.GainCorrected(term, g)
        carried = g.at(sel)
        em.GainCorrected(term, carried)  # accepted
    # The carried gains give every row of the selection the factor its row has in
    # the whole data (rows matched by time and baseline).
    rows = [
        np.flatnonzero(
            (np.asarray(d.time) == t)
            & (np.asarray(d.ant1) == a)
            & (np.asarray(d.ant2) == b)
        )[0]
        for t, a, b in zip(
            np.asarray(sel.time), np.asarray(sel.ant1), np.asarray(sel.ant2)
        )
    ]
    full = np.asarray(g.factor(_pairs(d), d.time_index))[rows]
    sel_term = em.VisChi2.from_data(sel, GRID)
    got = np.asarray(g.at(sel).factor(sel_term.stations, sel_term.time_index))
    assert_allclose(got, full, rtol=1e-14)


def test_with_gains_and_station_order_are_checked_too():
    """`with_gains` puts gains into an objective after construction: it refuses the
    pair `GainCorrected` refuses. And a data set with the same timestamps but its
    stations listed in another order has another key (its `stations` indices mean
    other stations): refused, and `at` carries the gains by name."""
    d = synthetic()
    g = random_gains(d)
    sel = d.select(time_range=(1.9, 4.0))
    objective = em.GainCorrected(em.VisChi2.from_data(sel, GRID), g.at(sel)) + em.TV(
        GRID
    )
    with pytest.raises(ValueError, match="different data sets"):
        em.with_gains(objective, g)
    em.with_gains(objective, g.at(sel))  # accepted
    # The same rows with the station table reversed.
    perm = np.arange(len(NAMES))[::-1]
    a1, a2 = perm[np.asarray(d.ant1)], perm[np.asarray(d.ant2)]
    swap = a1 > a2  # keep ant1 < ant2: conjugate those rows
    rev = em.VisData(
        np.where(swap, -np.asarray(d.u), np.asarray(d.u)),
        np.where(swap, -np.asarray(d.v), np.asarray(d.v)),
        np.where(swap, np.conj(np.asarray(d.vis)), np.asarray(d.vis)),
        d.sigma,
        d.time,
        np.minimum(a1, a2),
        np.maximum(a1, a2),
        station_names=NAMES[::-1],
        freq=230e9,
    )
    assert np.array_equal(rev.timestamps(), d.timestamps())
    assert rev.index_key != d.index_key
    term = em.VisChi2.from_data(rev, GRID)
    with pytest.raises(ValueError, match="stations of different data sets"):
        em.GainCorrected(term, g)
    carried = em.GainCorrected(term, g.at(rev))
    # The same χ² as the original data with its own gains (rows correspond).
    img = truth_image()
    assert_allclose(
        float(carried(img)),
        float(em.GainCorrected(em.VisChi2.from_data(d, GRID), g)(img)),
        rtol=1e-10,
    )


def test_gain_corrected_checks_tables_only_when_both_are_known():
    """Terms and gains built by hand (no `index_key`: -1) are not compared; the
    same data set's term and gains, and its products', agree."""
    d = synthetic()
    g = random_gains(d)
    vis, amp = _terms(d)
    assert int(vis.index_key) == int(amp.index_key) == int(g.index_key) == d.index_key
    cph = em.ClosurePhaseChi2.from_data(em.closure_phases(d), GRID)
    assert int(cph.index_key) == d.index_key
    em.GainCorrected(cph, g)
    hand = em.StationGains(g.log_amp, g.phase, g.slot_interval, g.bounds, NAMES)
    assert int(hand.index_key) == -1
    sel = em.VisChi2.from_data(d.select(time_range=(1.9, 4.0)), GRID)
    em.GainCorrected(sel, hand)  # unknown table: only the range checks apply
    with pytest.raises(TypeError, match="`index_key` must be one integer"):
        em.VisChi2(vis.forward, d.vis, d.sigma, index_key=1.5)


# -------------------------------------------------------------------- priors
def test_priors_match_numpy():
    d = synthetic()
    g = random_gains(d, amp=0.2)
    la, ph = np.asarray(g.log_amp), np.asarray(g.phase)
    cases = [
        (
            em.GainAmplitudePrior(g, (0.02, 0.2)),
            lambda: (*rg.amplitude_prior(la, np.full(6, 0.02), np.full(6, 0.2)), None),
        ),
        (
            em.GainAmplitudePrior(g, {"AA": 0.05, "SM": (0.01, 0.3), "default": 0.2}),
            lambda: (
                *rg.amplitude_prior(
                    la,
                    np.array([0.05, 0.2, 0.2, 0.2, 0.2, 0.01]),
                    np.array([0.05, 0.2, 0.2, 0.2, 0.2, 0.3]),
                ),
                None,
            ),
        ),
        (
            em.GainPhaseReference(g, "AZ", sigma=0.1),
            lambda: (
                *rg.phase_reference(ph, 2, 0.1, g.present)[:1],
                None,
                rg.phase_reference(ph, 2, 0.1, g.present)[1],
            ),
        ),
        (
            em.GainPhaseReference(g),
            lambda: (
                rg.phase_reference(ph, None, 1.0, g.present)[0],
                None,
                rg.phase_reference(ph, None, 1.0, g.present)[1],
            ),
        ),
        (
            em.GainSmoothness(g, 0.05, 0.3),
            lambda: rg.smoothness_present(la, ph, 0.05, 0.3, np.asarray(g.present)),
        ),
    ]
    assert not np.all(np.asarray(g.present))  # a station without data somewhere
    img = jnp.asarray(truth_image())
    for prior, ref in cases:
        value, g_la, g_ph = ref()
        got = prior(img)
        assert_allclose(got, value, rtol=1e-12)
        grad = eqx.filter_grad(lambda gg: em.with_gains(prior, gg)(img))(g)
        if g_la is not None:
            assert_allclose(grad.log_amp, g_la, rtol=1e-12)
        if g_ph is not None:
            assert_allclose(grad.phase, g_ph, rtol=1e-12)
        r = prior.residuals(img)
        assert_allclose(jnp.sum(r * r), value, rtol=1e-12)
    # Free stations (no default) cost nothing; phase steps of 2π cost nothing.
    free = em.GainAmplitudePrior(g, {"AA": 0.1})
    assert_allclose(free(img), np.sum((la[:, 0] / 0.1) ** 2), rtol=1e-12)
    # Entries for stations absent from the gains are ignored (one dict for every
    # day of an array, as eht-imaging reads its `gain_tol` dicts).
    assert "GL" not in g.station_names
    wide = em.GainAmplitudePrior(g, {"AA": 0.1, "GL": 0.01, "default": 0.3})
    narrow = em.GainAmplitudePrior(g, {"AA": 0.1, "default": 0.3})
    assert_allclose(wide.tol_above, narrow.tol_above, rtol=0)
    assert_allclose(wide.tol_below, narrow.tol_below, rtol=0)
    assert_allclose(wide(img), narrow(img), rtol=0)
    # From a review: dropping an absent station while leaving out stations with
    # data (no default) is refused, naming the fix; a misspelt default too.
    with pytest.raises(
        ValueError, match=r'another naming.*"default": math.inf. leaves them free'
    ):
        em.GainAmplitudePrior(g, {"AA": 0.1, "GL": 0.01})
    with pytest.raises(ValueError, match="key 'Default'.*'default'"):
        em.GainAmplitudePrior(g, {"AA": 0.1, "Default": 0.3})
    # Issue 41: a key that is no station of the data nor of any EHT array (a
    # misspelt default, a site's long name) was dropped without a word.
    for key in ("defualt", "LMT", "XX"):
        with pytest.raises(ValueError, match=f"a key '{key}', which is neither"):
            em.GainAmplitudePrior(g, {"AA": 0.1, key: 0.3, "default": 0.3})
    every = {s: 0.2 for s in g.station_names}
    assert_allclose(
        em.GainAmplitudePrior(g, {**every, "GL": 0.01}).tol_above,
        em.GainAmplitudePrior(g, 0.2).tol_above,
        rtol=0,
    )
    wrapped = eqx.tree_at(lambda q: q.phase, g, g.phase.at[1:].add(2 * math.pi))
    smooth = em.GainSmoothness(g, math.inf, 0.3)
    assert_allclose(em.with_gains(smooth, wrapped)(img), smooth(img), rtol=1e-9)


def test_smoothness_skips_intervals_without_data():
    """From a review: with the amplitude prior pulling an absent station's gain to
    1, smoothness through it dragged the station's real gain: at the optimum over
    the absent entry the penalty was 4.05, not the real gain's own 2.25."""
    d = synthetic()
    g = random_gains(d)
    present = np.asarray(g.present)
    k, s = np.argwhere(~present)[0]  # an interval where station s has no data
    assert k > 0 and present[k - 1, s]
    la = np.zeros_like(np.asarray(g.log_amp))
    la[:, s] = np.where(present[:, s], 0.3, 0.0)  # station s at 0.3 where it has data
    g = eqx.tree_at(lambda q: (q.log_amp, q.phase), g, (jnp.asarray(la), 0 * g.phase))
    img = jnp.asarray(truth_image())
    obj = em.GainAmplitudePrior(g, 0.2) + em.GainSmoothness(g, 0.1)
    # The absent entries are free of the real ones: 0 (gain 1) is their optimum,
    # and the real gains feel the amplitude prior only.
    n = int(present[:, s].sum())
    assert_allclose(obj(img), n * (0.3 / 0.2) ** 2, rtol=1e-12)
    grad = eqx.filter_grad(lambda gg: em.with_gains(obj, gg)(img))(g)
    want = np.where(present[:, s], 2 * 0.3 / 0.2**2, 0.0)
    assert_allclose(grad.log_amp[:, s], want, rtol=1e-12)


def test_prior_errors():
    d = synthetic()
    g = random_gains(d)
    with pytest.raises(ValueError, match="tol.*> 0"):
        em.GainAmplitudePrior(g, 0.0)
    with pytest.raises(ValueError, match="pair"):
        em.GainAmplitudePrior(g, (0.1, 0.2, 0.3))
    with pytest.raises(TypeError, match="tol"):
        em.GainAmplitudePrior(g, "0.2")
    with pytest.raises(TypeError, match=r"tol\[0\].*number"):
        em.GainAmplitudePrior(g, ("0.02", 0.2))
    with pytest.raises(ValueError, match=r"tol.*'aa', which is 'AA' here"):
        em.GainAmplitudePrior(g, {"aa": 0.1})
    with pytest.raises(TypeError, match="tol.*station names"):
        em.GainAmplitudePrior(g, {("AA",): 0.1})
    with pytest.raises(ValueError, match=r"tol\['GL'\].*> 0"):
        em.GainAmplitudePrior(g, {"GL": 0.0})
    with pytest.raises(ValueError, match="station.*not one of"):
        em.GainPhaseReference(g, "XX")
    with pytest.raises(ValueError, match="single solution interval"):
        em.GainSmoothness(em.StationGains.from_data(d, "track"))
    with pytest.raises(TypeError, match="AbstractGains|StationGains"):
        em.GainAmplitudePrior(np.zeros(3))
    with pytest.raises(ValueError, match="sigma"):
        em.GainPhaseReference(g, sigma=-1.0)


def test_joint_gradient_over_image_and_gains():
    """`eqx.filter_grad` over `(image_model, gains)`; freezing either is a filter."""
    d = synthetic()
    g = random_gains(d)
    vis, amp = _terms(d)
    obj = (
        em.GainCorrected(vis, g)
        + em.GainCorrected(amp, g)
        + 10.0 * em.GainAmplitudePrior(g, 0.1)
    )
    model = em.PixelImage(GRID, jnp.asarray(truth_image()))

    def loss(m, o):
        image_model, gains = m
        return em.with_gains(o, gains)(image_model)

    grads = eqx.filter_jit(eqx.filter_grad(loss))((model, g), obj)
    assert np.all(np.isfinite(np.asarray(grads[1].log_amp)))
    assert float(jnp.max(jnp.abs(grads[1].phase))) > 0
    # Frozen gains: the gradient w.r.t. the image alone is the same.
    g_img = eqx.filter_jit(eqx.filter_grad(lambda m, o: em.with_gains(o, g)(m)))(
        model, obj
    )
    leaves_a = jax.tree_util.tree_leaves(eqx.filter(grads[0], eqx.is_inexact_array))
    leaves_b = jax.tree_util.tree_leaves(eqx.filter(g_img, eqx.is_inexact_array))
    for a, b in zip(leaves_a, leaves_b):
        assert_allclose(a, b, rtol=1e-13)
