"""Leakage calibration (`leakage_calibrate`, `DTermTable`): the objective against
a plain-numpy reference (value and gradient), finite differences, `jit` and
`vmap`; recovery of known D-terms from a synthetic observation; the table on
another band; errors at construction. eht-imaging's `leakage_cal` as an oracle:
tests/test_leakage_ehtim.py."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from eqmodels._polcal._leakage import leakage_problem, LeakageParams

from .helpers import assert_allclose, check_grad_fd
from .reference import leakage as ref


NPIX = 16
GRID = em.ImageGrid(NPIX, NPIX, em.uas_to_rad(8.0))
TRUTH = {
    "AA": (0.05 + 0.02j, -0.03j),
    "AP": (0.04, 0.06 - 0.01j),
    "AZ": (0.02 - 0.05j, 0.03 + 0.03j),
    "LM": (-0.06 + 0.02j, 0.04j),
    "PV": (0.03 + 0.01j, -0.02 + 0.05j),
    "SM": (0.01 - 0.04j, 0.05),
}
MOUNTS = {"AA": "altaz", "AP": "nasmyth_r", "AZ": "nasmyth_r", "LM": "nasmyth_l",
          "PV": "nasmyth_l", "SM": "nasmyth_l", "JC": "nasmyth_r"}  # fmt: skip


def stokes_image():
    """A polarized source `(4, ny, nx)`: 0.6 Jy, ~20 % linear polarization whose
    EVPA turns across it, 1 % circular."""
    y, x = np.mgrid[:NPIX, :NPIX] - (NPIX - 1) / 2
    i = np.exp(-(x**2 + y**2) / 8.0) * (1 + 0.5 * np.tanh(x / 2))
    i *= 0.6 / i.sum()
    chi = 0.5 * np.arctan2(x, y + 0.5)
    return np.stack([i, 0.2 * i * np.cos(2 * chi), 0.2 * i * np.sin(2 * chi), 0.01 * i])


def observation(freq=230e9, dterms=TRUTH, noise=False, flux=1.0):
    return em.observe(
        flux * stokes_image(), GRID, em.EHT2017, ra=187.7059, dec=12.3911, mjd=57854,
        freq=freq, times=np.linspace(0.5, 7.0, 10), dterms=dterms, mounts=MOUNTS,
        add_noise=noise, seed=3,
    )  # fmt: skip


@pytest.fixture(scope="module")
def noiseless():
    """Synthetic data with the D-terms of TRUTH and no noise, and the table
    found with a negligible prior."""
    data = observation()
    cal, table = em.leakage_calibrate(data, stokes_image(), grid=GRID, leakage_tol=1e3)
    return data, cal, table


@pytest.fixture(scope="module")
def truth_table():
    """Synthetic data with the D-terms of TRUTH, and the table of TRUTH."""
    data = observation()
    names = data.station_names
    solved = np.zeros((1, len(names)), bool)
    solved[0, [names.index(s) for s in data.stations_present()]] = True
    table = em.DTermTable(
        _truth_array(names), solved, np.array([[0.0, 24.0]]), names,
        mjd=data.mjd, freq=data.freq,
    )  # fmt: skip
    return data, table


def _truth_array(names):
    d = np.zeros((1, len(names), 2), complex)
    for s, pair in TRUTH.items():
        d[0, names.index(s)] = pair
    return d


# ---------------------------------------------------------------- objective
@pytest.fixture(scope="module")
def problem():
    data = observation(noise=True)
    return leakage_problem(
        data, stokes_image(), grid=GRID, stations=["AA", "AZ", "LM", "SM"],
        interval="scan", leakage_tol=0.07, correlations=("RR", "RL", "LR"),
    )  # fmt: skip


def _random_params(problem, seed=0, scale=0.05):
    rng = np.random.default_rng(seed)
    shape = problem.start.d_real.shape
    return LeakageParams(
        jnp.asarray(scale * rng.standard_normal(shape)),
        jnp.asarray(scale * rng.standard_normal(shape)),
    )


def _reference(problem, params):
    o = problem.objective
    d = np.asarray(params.d_real) + 1j * np.asarray(params.d_imag)
    return ref.objective(
        d, np.asarray(o.corr), np.asarray(o.var), np.asarray(o.model),
        np.asarray(o.interval), np.asarray(o.ant1), np.asarray(o.ant2),
        np.asarray(o.w), np.asarray(o.free), float(o.tol), o.pols,
    )  # fmt: skip


def test_objective_value_and_gradient_equal_numpy(problem):
    params = _random_params(problem)
    value, grad = eqx.filter_jit(eqx.filter_value_and_grad(problem.objective))(params)
    want_v, want_g = _reference(problem, params)
    assert_allclose(float(value), want_v, rtol=1e-12)
    got = np.asarray(grad.d_real) + 1j * np.asarray(grad.d_imag)
    assert_allclose(got, want_g, rtol=1e-12, atol=1e-12 * np.abs(want_g).max())
    # Stations not fitted (or absent from an interval) have zero gradient.
    free = np.asarray(problem.objective.free) > 0
    assert np.all(got[~free] == 0) and np.any(got[free] != 0)
    # residuals: Σ r² is the value.
    r = np.asarray(eqx.filter_jit(problem.objective.residuals)(params))
    assert_allclose(np.sum(r * r), want_v, rtol=1e-12)


@pytest.mark.slow  # a second compile of the objective (the numpy gradient is core)
def test_objective_gradient_finite_differences(problem):
    params = _random_params(problem, seed=1)
    free = np.asarray(problem.objective.free) > 0
    x0 = np.concatenate(
        [np.asarray(params.d_real)[free], np.asarray(params.d_imag)[free]]
    )
    n = free.sum()

    def f(x):
        dr = jnp.zeros(free.shape).at[free].set(x[:n])
        di = jnp.zeros(free.shape).at[free].set(x[n:])
        return problem.objective(LeakageParams(dr, di))

    check_grad_fd(jax.jit(f), x0, n_dirs=4, rtol=1e-6)


def test_objective_under_vmap(problem):
    batch = [_random_params(problem, seed=s) for s in range(3)]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *batch)
    obj = problem.objective
    values = eqx.filter_jit(jax.vmap(lambda p: obj(p)))(stacked)
    for v, p in zip(np.asarray(values), batch):
        assert_allclose(v, _reference(problem, p)[0], rtol=1e-12)


# ---------------------------------------------------------------- recovery
@pytest.mark.slow  # compiles the solve (~10 s)
def test_recovers_known_dterms(noiseless):
    data, cal, table = noiseless
    names = data.station_names
    d = np.asarray(table.dterms)
    want = _truth_array(names)
    solved = np.asarray(table.solved)
    # Every station observed is fitted (JC and SP without leakage: D = 0).
    assert list(np.asarray(names)[solved[0]]) == list(data.stations_present())
    assert np.max(np.abs(d - want)[solved]) < 1e-6
    # The calibrated data are the leakage-free observation.
    clean = observation(dterms=None)
    assert_allclose(np.asarray(cal.corr), np.asarray(clean.corr), rtol=0, atol=1e-6)


@pytest.mark.slow  # compiles the solve (~10 s)
def test_recovers_dterms_within_noise():
    """With thermal noise (a bright source) and a weak prior: within the noise.
    (The prior of eht-imaging's objective is not divided by `2N` like its χ²:
    at low S/N `leakage_tol=0.1` pulls the D-terms toward 0.)"""
    data = observation(noise=True, flux=30.0)  # 18 Jy: little noise
    _, table = em.leakage_calibrate(
        data, 30.0 * stokes_image(), grid=GRID, leakage_tol=1.0
    )
    d = np.asarray(table.dterms)[0]
    want = _truth_array(data.station_names)[0]
    solved = np.asarray(table.solved)[0]
    err = np.abs(d - want)[solved]
    assert err.max() < 0.015, err  # PV, on few baselines: 0.009


def test_table_calibrates_another_band(truth_table):
    _, table = truth_table
    other = observation(freq=221e9)  # other (u, v), same D-terms
    clean = observation(freq=221e9, dterms=None)
    cal = table.calibrate(other)
    assert_allclose(np.asarray(cal.corr), np.asarray(clean.corr), rtol=0, atol=1e-6)
    # corrupt is calibrate's inverse.
    back = table.corrupt(cal)
    assert_allclose(np.asarray(back.corr), np.asarray(other.corr), rtol=0, atol=1e-12)


def test_table_reading(truth_table):
    data, table = truth_table
    out = table.to_dict()
    assert list(out) == list(data.stations_present())
    for s, (r, left) in out.items():
        want = TRUTH.get(s, (0, 0))
        assert abs(r - want[0]) < 1e-6 and abs(left - want[1]) < 1e-6
    # The dict is observe's `dterms=`.
    again = observation(dterms=out)
    assert_allclose(np.asarray(again.corr), np.asarray(data.corr), atol=1e-6)
    text = str(table)
    n = len(out)
    assert text.startswith(f"DTermTable: {n} stations")
    assert len(text.splitlines()) == 2 + n and all(f"  {s} " in text for s in out)
    assert "DTermTable(stations=" in repr(table)
    # As a StationJones (gains 1) to start a joint solve: the same D-terms,
    # and the same corrupted correlations as the table's `corrupt`.
    jones = table.jones(data)
    assert jones.field_rotation_corrected
    assert_allclose(np.asarray(jones.dterms()), np.asarray(table.dterms), rtol=0)
    clean = observation(dterms=None)
    st = np.stack([np.asarray(data.ant1), np.asarray(data.ant2)], axis=1)
    sv = clean.stokes()[0]
    got = np.asarray(jones.apply(jnp.asarray(sv), st, np.asarray(data.time_index)))
    assert_allclose(got, np.asarray(table.corrupt(clean).corr), atol=1e-12)


@pytest.mark.slow  # compiles the solve (~10 s)
def test_scan_intervals_and_stations():
    data = observation(dterms={s: TRUTH[s] for s in ("AA", "SM")})
    _, table = em.leakage_calibrate(
        data, stokes_image(), grid=GRID, stations=["AA", "SM"], interval="scan",
        leakage_tol=1e3,
    )  # fmt: skip
    d, solved = np.asarray(table.dterms), np.asarray(table.solved)
    names = data.station_names
    assert table.n_intervals == data.scans().shape[0]
    assert set(np.asarray(names)[solved.any(axis=0)]) == {"AA", "SM"}
    for s in ("AA", "SM"):
        j = names.index(s)
        assert np.all(np.abs(d[solved[:, j], j] - np.asarray(TRUTH[s])) < 1e-6)
    out = table.to_dict()
    assert len(out["AA"]) == solved[:, names.index("AA")].sum()
    # Per-scan D-terms serve their own day only.
    other = observation().replace(mjd=57855)
    with pytest.raises(ValueError, match="apply to their own day"):
        table.calibrate(other)


# ---------------------------------------------------------------- errors
@pytest.fixture(scope="module")
def small():
    return observation()


@pytest.mark.parametrize(
    ("kwargs", "err", "match"),
    [
        ({"stations": ["XX"]}, ValueError, "unknown station"),
        ({"stations": []}, ValueError, "`stations` is empty"),
        ({"interval": "weekly"}, ValueError, "`interval` must be"),
        ({"interval": -5.0}, ValueError, "`interval` in seconds"),
        ({"leakage_tol": 0.0}, ValueError, "`leakage_tol` must be finite and > 0"),
        ({"leakage_tol": "big"}, TypeError, "`leakage_tol` must be a number"),
        ({"correlations": ("RL", "XY")}, ValueError, "`correlations` must name"),
        ({"correlations": ()}, ValueError, "`correlations` must name"),
        ({"field_rotation": "yes"}, ValueError, "`field_rotation` must be one of"),
        ({"max_steps": 0}, ValueError, "`max_steps` must be a positive integer"),
    ],
)
def test_argument_errors(small, kwargs, err, match):
    with pytest.raises(err, match=match):
        em.leakage_calibrate(small, stokes_image(), grid=GRID, **kwargs)


def test_model_errors(small):
    img = stokes_image()
    with pytest.raises(ValueError, match="Stokes I image"):
        em.leakage_calibrate(small, img[0], grid=GRID)
    with pytest.raises(ValueError, match="is a Stokes I model"):
        em.leakage_calibrate(small, em.GaussianImage(GRID, 0.6, em.uas_to_rad(20.0)))
    with pytest.raises(TypeError, match="`grid` is required"):
        em.leakage_calibrate(small, img)
    with pytest.raises(ValueError, match="but `grid` is"):
        em.leakage_calibrate(small, img[:, :8], grid=GRID)
    with pytest.raises(TypeError, match="`model` is required"):
        em.leakage_calibrate(small)
    with pytest.raises(ValueError, match="all zero"):
        em.leakage_calibrate(small, 0 * img, grid=GRID)
    with pytest.raises(ValueError, match="`model_vis` must be the Stokes"):
        em.leakage_calibrate(small, model_vis=np.zeros((3, 4)))
    with pytest.raises(TypeError, match="not both"):
        em.leakage_calibrate(
            small, img, grid=GRID, model_vis=np.zeros((small.n_rows, 4))
        )


def test_data_errors(small):
    img = stokes_image()
    with pytest.raises(TypeError, match="must be a PolVisData"):
        em.leakage_calibrate(small.stokes_i(), img, grid=GRID)
    lin = small.replace(feeds=["linear"] * small.n_stations)
    with pytest.raises(ValueError, match="linear feeds"):
        em.leakage_calibrate(lin, img, grid=GRID)
    # A station whose rows all lack a correlation (single polarization) cannot
    # be fitted when named.
    flag = np.asarray(small.flag).copy()
    j = small.station_names.index("SM")
    rows = (np.asarray(small.ant1) == j) | (np.asarray(small.ant2) == j)
    flag[rows, 0] = True
    single = small.replace(flag=flag, corr=np.where(flag, np.nan, small.corr))
    with pytest.raises(ValueError, match=r"\['SM'\] have no row with all four"):
        em.leakage_calibrate(single, img, grid=GRID, stations=["SM", "AA"])
    # Two bands in one interval.
    two = em.concatenate([small, observation(freq=221e9)])
    with pytest.raises(ValueError, match="more than one band"):
        em.leakage_calibrate(two, img, grid=GRID)


def test_table_errors(truth_table):
    _, table = truth_table
    with pytest.raises(ValueError, match="`dterms` must have shape"):
        em.DTermTable(
            np.zeros((1, 3)),
            np.zeros((1, 3), bool),
            np.array([[0, 1]]),
            ["A", "B", "C"],
        )
    with pytest.raises(ValueError, match="`field_rotation` must be one of"):
        em.DTermTable(
            np.zeros((1, 1, 2)), np.ones((1, 1), bool), np.array([[0, 1]]), ["A"],
            field_rotation="sideways",
        )  # fmt: skip
    with pytest.raises(TypeError, match="must be a PolVisData"):
        table.calibrate(observation().stokes_i())


# ---------------------------------------------------------------- joint solves
@pytest.mark.slow  # compiles a joint image + Jones solve
def test_joint_image_and_dterms_with_gains_frozen():
    """`solve` with a `params` filter that holds the gains of a StationJones
    fixed: the image and the D-terms move, the gains stay exactly as given."""
    data = observation()
    truth = stokes_image()
    init = truth * np.array([1.0, 0.5, 0.5, 0.5])[:, None, None]
    init[0] += 1e-6
    start = em.PolPixelImage.from_stokes(init, GRID)
    jones = em.StationJones.from_data(
        data, "scan", "track", field_rotation_corrected=True
    )
    corr = em.JonesCorrected(em.CorrelationChi2.from_data(data, GRID), jones)
    n = int(corr.n_rows)
    objective = em.WithGains(corr + em.DTermPrior(jones, 1.0) / (2 * n))
    free = jax.tree.map(em.is_real_float_array, jones)
    free = eqx.tree_at(lambda j: (j.log_amp, j.phase), free, replace=(False, False))
    sol = em.solve(
        objective, (start, jones), max_steps=200,
        params=(em.is_real_float_array, free),
    )  # fmt: skip
    image, fitted = sol.model
    np.testing.assert_array_equal(np.asarray(fitted.log_amp), np.asarray(jones.log_amp))
    np.testing.assert_array_equal(np.asarray(fitted.phase), np.asarray(jones.phase))
    want = _truth_array(data.station_names)
    err0 = np.abs(np.asarray(jones.dterms()) - want).max()
    err1 = np.abs(np.asarray(fitted.dterms()) - want).max()
    assert err1 < 0.6 * err0, (err0, err1)
    assert float(sol.value) < 0.1 * float(sol.stats["initial_value"])
    assert not np.allclose(np.asarray(image()), np.asarray(start()))
    # The image held fixed at the truth: the D-terms alone, recovered.
    fixed = em.PolPixelImage.from_stokes(
        truth + np.array([1e-9, 0, 0, 0])[:, None, None], GRID
    )
    sol = em.solve(objective, (fixed, jones), max_steps=200, params=(False, free))
    d = np.asarray(sol.model[1].dterms())
    solved = np.asarray(jones.dterm_present)
    assert np.abs(d - want)[solved].max() < 5e-3
    assert np.all(np.asarray(sol.model[0]()) == np.asarray(fixed()))


# ---------------------------------------------------------------- R/L gains
@pytest.mark.slow  # compiles the solve
def test_polgains_align_r_on_l():
    """Random complex gains per hand and timestamp, no leakage, Stokes V = 0:
    the R/L ratios solved per timestamp make RR equal LL on every row."""
    img = stokes_image()
    img[3] = 0.0
    data = em.observe(
        img, GRID, em.EHT2017, ra=187.7059, dec=12.3911, mjd=57854,
        times=np.linspace(0.5, 7.0, 10), mounts=MOUNTS, add_noise=False,
        gain_sigma=0.1, random_phases=True, seed=4,
    )  # fmt: skip
    rr, ll = np.asarray(data.corr[:, 0]), np.asarray(data.corr[:, 1])
    assert np.max(np.abs(rr - ll)) > 0.01
    for method in ("both", "phase"):
        cal, table = em.polgains_calibrate(data, method=method, interval="timestamp")
        c = np.asarray(cal.corr)
        if method == "both":
            assert_allclose(c[:, 0], c[:, 1], rtol=0, atol=1e-8 * np.abs(c[:, 1]).max())
        else:  # the phases of RR and LL agree; their amplitudes still differ
            ph = np.angle(c[:, 0] * np.conj(c[:, 1]))
            assert np.max(np.abs(ph)) < 1e-6
            r = np.abs(np.asarray(table.ratios))
            assert_allclose(r, np.ones_like(r), rtol=1e-12)
        ref = data.station_names.index(table.reference)
        assert np.all(np.angle(np.asarray(table.ratios)[:, ref]) == 0.0)
    assert "RLGainTable: reference AA" in str(table)
    assert set(table.to_dict()) == set(data.stations_present()) - {"AA"}  # phase


def test_polgains_errors(small):
    with pytest.raises(TypeError, match="must be a PolVisData"):
        em.polgains_calibrate(small.stokes_i())
    with pytest.raises(ValueError, match="`method` must be 'phase' or 'both'"):
        em.polgains_calibrate(small, method="amp")
    with pytest.raises(ValueError, match="`reference`='XX' is not one of"):
        em.polgains_calibrate(small, reference="XX")
    with pytest.raises(ValueError, match="unknown station"):
        em.polgains_calibrate(small, stations=["XX"])
    with pytest.raises(ValueError, match="`interval` must be"):
        em.polgains_calibrate(small, interval="daily")
    with pytest.raises(ValueError, match="linear feeds"):
        em.polgains_calibrate(small.replace(feeds=["linear"] * small.n_stations))
