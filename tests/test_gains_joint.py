"""`WithGains`, the objective of a joint image + gain solve: value and gradient
against the numpy references, under jit and vmap, finite differences; `solve`
with every kind of solver; errors. Surveys over data sets whose gains differ in
solution intervals, station tables and station order: equal to single solves,
each configuration's gains given back on its own tables; `pad_and_stack`."""

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
    pairs as _pairs,
    random_gains,
    reordered as _reordered,
    synthetic,
    truth_image,
    vis_reference,
)
from tests.reference import gains as rg
from tests.unchecked import unchecked_error


def _joint(d, gains, tol=(0.02, 0.2), reference="AA"):
    """Visibilities through gains, an amplitude prior and a phase reference, on
    the gains `gains` (what the joint objective replaces)."""
    vis = em.VisChi2.from_data(d, GRID)
    return em.WithGains(
        em.GainCorrected(vis, gains)
        + em.GainAmplitudePrior(gains, tol) / (2 * vis.rows)
        + em.GainPhaseReference(gains, reference)
    )


def _reference(d, img, g):
    """The joint objective's value and gradients from the numpy references."""
    la, ph = np.asarray(g.log_amp), np.asarray(g.phase)
    v, g_img, g_la, g_ph = vis_reference(d, img, g)
    w = 1.0 / (2 * d.n_rows)
    p, p_la = rg.amplitude_prior(la, np.full(6, 0.02), np.full(6, 0.2))
    r, r_ph = rg.phase_reference(ph, 0, 1.0, g.present)
    return v + w * p + r, g_img, g_la + w * p_la, g_ph + r_ph


def test_with_gains_matches_numpy_under_jit_vmap_and_finite_differences():
    d = synthetic()
    start, g = random_gains(d, seed=1), random_gains(d, seed=2, amp=0.2)
    joint = _joint(d, start)  # built on other gains: the model's are used
    img = truth_image() * 1.1
    value, g_img, g_la, g_ph = _reference(d, img, g)
    model = (jnp.asarray(img), g)
    assert_allclose(joint(model), value, rtol=1e-12)
    vg = eqx.filter_jit(eqx.filter_value_and_grad(lambda m, o: o(m)))
    got, (d_img, d_g) = vg(model, joint)
    assert_allclose(got, value, rtol=1e-12)
    assert_allclose(d_img, g_img, rtol=1e-12)
    assert_allclose(d_g.log_amp, g_la, rtol=1e-12)
    assert_allclose(d_g.phase, g_ph, rtol=1e-12)
    # Report, value_and_report and residuals: the objective at the model's gains.
    inner = em.with_gains(joint.objective, g)
    report = joint.report(model)
    assert tuple(report) == joint.names == inner.names
    for k, v in inner.report(img).items():
        assert_allclose(report[k], v, rtol=1e-13)
    both = joint.value_and_report(model)
    assert_allclose(both[0], value, rtol=1e-12)
    r = joint.residuals(model)
    assert_allclose(jnp.sum(r * r), value, rtol=1e-12)
    # vmap over gains: one value per set.
    batch = [random_gains(d, seed=s) for s in range(3)]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *batch)
    many = eqx.filter_jit(
        eqx.filter_vmap(lambda gg, o: o((img, gg)), in_axes=(0, None))
    )
    want = [_reference(d, img, gg)[0] for gg in batch]
    assert_allclose(many(stacked, joint), np.array(want), rtol=1e-12)

    # Finite differences along random directions of (log_amp, phase).
    def f(x):
        la, ph = x[:18].reshape(3, 6), x[18:].reshape(3, 6)
        gg = eqx.tree_at(lambda q: (q.log_amp, q.phase), g, (la, ph))
        return joint((jnp.asarray(img), gg))

    x0 = np.concatenate([np.ravel(g.log_amp), np.ravel(g.phase)])
    grad = np.concatenate([g_la.ravel(), g_ph.ravel()])
    rng = np.random.default_rng(0)
    dirs = [rng.standard_normal(x0.shape) for _ in range(4)]
    assert_allclose([grad @ u for u in dirs], central_fd(f, x0, dirs, 1e-6), rtol=1e-6)


NOT_AN_OBJECTIVE = unchecked_error("em.WithGains(lambda x: 0.0)", "TypeError")
JOINT_OF_A_JOINT = unchecked_error(
    "em.WithGains(joint)",
    "TypeError",
    "d = em.VisData([1e9], [1e9], [1.0], [1.0], [1.0], [0], [1], "
    "station_names=('AA', 'AP'), freq=230e9)\n"
    "g = em.StationGains.from_data(d)\n"
    "term = em.VisChi2.from_data(d, em.ImageGrid(4, 4, 1e-10))\n"
    "joint = em.WithGains(em.GainCorrected(term, g))",
)


def test_with_gains_weights_and_errors(unchecked):
    d = synthetic()
    g = random_gains(d)
    joint = _joint(d, g)
    heavier = joint.with_weights(2 * np.asarray(joint.weights))
    img = jnp.asarray(truth_image())
    assert isinstance(heavier, em.WithGains)
    assert_allclose(heavier((img, g)), 2 * joint((img, g)), rtol=1e-13)
    assert np.array_equal(joint.is_data_term, [True, False, False])
    # Arithmetic keeps the joint objective: with terms, weights, other joints.
    tsv = em.TSV(GRID)
    for built, want in (
        (joint + 3.0 * tsv, joint((img, g)) + 3.0 * tsv(img)),
        (3.0 * tsv + joint, joint((img, g)) + 3.0 * tsv(img)),
        (sum([joint, tsv]), joint((img, g)) + tsv(img)),
        (joint + joint, 2 * joint((img, g))),
        (joint * 0.5, 0.5 * joint((img, g))),
        (np.float64(0.5) * joint, 0.5 * joint((img, g))),
        (joint / 4, 0.25 * joint((img, g))),
    ):
        assert isinstance(built, em.WithGains)
        assert_allclose(built((img, g)), want, rtol=1e-13)
    # (Without the suite's type checker, as users run it: eqmodels' own message.)
    msg = unchecked[NOT_AN_OBJECTIVE]
    assert msg is not None and "must be an `eqmodels.Objective`" in msg
    with pytest.raises(ValueError, match="holds no station gains"):
        em.WithGains(em.VisChi2.from_data(d, GRID) + em.Flux(1.0))
    msg = unchecked[JOINT_OF_A_JOINT]
    assert msg is not None and "already a WithGains" in msg
    # A model that is not the pair, refused before anything compiles.
    with pytest.raises(TypeError, match=r"model pair `\(image_model, gains\)`"):
        em.solve(joint, em.PixelImage(GRID, img), max_steps=2)
    with pytest.raises(TypeError, match="got a tuple of 3"):
        joint((img, g, g))
    with pytest.raises(TypeError, match=r"got `\(gains, image_model\)`: swap"):
        joint((g, img))
    # Gains of another data set (other time slots).
    other = em.StationGains.from_data(d.select_time(0.0, 2.5))
    with pytest.raises(ValueError, match="different data sets"):
        em.solve(joint, (img, other), max_steps=2)


@pytest.mark.parametrize("solver", ["lbfgs", "levenberg-marquardt"])
def test_solve_with_gains_recovers_the_gains(solver):
    """The image held at the truth (`params` freezes it), the gains solved from
    unit gains: the corruption is recovered (gain amplitudes to the noise
    level), by L-BFGS and by Levenberg-Marquardt on the residuals alike."""
    clean = synthetic(noise=1e-4)
    true = random_gains(clean, seed=4, amp=0.1, phase=1.0)
    d = true.corrupt(clean)
    unit = em.StationGains.from_data(d)
    joint = _joint(d, unit, tol=0.5)
    img = jnp.asarray(truth_image())
    start = joint((img, unit))
    sol = em.solve(
        joint,
        (img, unit),
        solver,
        max_steps=200,
        params=(False, em.is_real_float_array),
    )
    image, gains = sol.model
    assert np.array_equal(np.asarray(image), np.asarray(img))  # frozen
    assert float(sol.value) < 1e-3 * float(start)
    assert set(sol.report) == set(joint.names)
    # |g_a g_b| per row, and closure of the phases, are free of the gauge.
    st = _pairs(d)
    fit = np.asarray(gains.factor(st, d.time_index))
    want = np.asarray(true.factor(st, d.time_index))
    assert np.max(np.abs(np.abs(fit) / np.abs(want) - 1)) < 2e-3
    assert np.max(np.abs(np.angle(fit / want))) < 2e-3


@pytest.mark.slow
def test_survey_over_data_sets_with_their_own_gains_equals_single_solves():
    """Three data sets whose gains differ in intervals (3 scans; 2 scans, fewer
    slots), station table (6 stations; 5, in reverse order: the phase
    reference in another column) and band: one survey, each configuration equal
    to its own solve, its gains given back on its own tables."""
    full = synthetic()
    sets = [full, full.select_time(0.0, 2.5), _reordered(full)]
    assert sets[2].station_names[-1] == "AA" and sets[2].n_stations == 5
    gains = [random_gains(x, seed=k, amp=0.05, phase=0.3) for k, x in enumerate(sets)]
    joints = [_joint(x, g) for x, g in zip(sets, gains)]
    image = em.PixelImage(GRID, jnp.asarray(truth_image()))
    models = [(image, g) for g in gains]
    padded = em.pad_to_match(joints)
    assert all(isinstance(j, em.WithGains) for j in padded)
    res = em.survey(padded, models, max_steps=25, devices=jax.devices()[:2])
    assert res.gains_tables is not None
    for k, (joint, g) in enumerate(zip(joints, gains)):
        single = em.solve(joint, (image, g), max_steps=25)
        got = res[k]
        assert_allclose(got.value, single.value, rtol=1e-9)
        assert int(got.steps) == int(single.steps)
        for name in joint.names:
            assert_allclose(got.report[name], single.report[name], rtol=1e-9)
        assert_allclose(got.model[0].params, single.model[0].params, rtol=1e-8)
        mine, want = got.model[1], single.model[1]
        assert mine.station_names == g.station_names
        assert mine.bounds == g.bounds and mine.interval_freqs == g.interval_freqs
        for leaf in ("log_amp", "phase", "slot_interval", "present"):
            assert np.shape(getattr(mine, leaf)) == np.shape(getattr(g, leaf))
        np.testing.assert_array_equal(mine.slot_interval, g.slot_interval)
        np.testing.assert_array_equal(mine.present, g.present)
        assert int(mine.index_key) == int(g.index_key)
        assert_allclose(mine.log_amp, want.log_amp, rtol=1e-8)
        assert_allclose(mine.phase, want.phase, rtol=1e-8)
    # Negative indices count from the end, as for the batch.
    assert res[-1].model[1].station_names == gains[2].station_names
    # The batch itself holds the padded gains (largest shape, placeholder table).
    assert res.solutions.model[1].log_amp.shape == (3, 3, 6)


def test_pad_and_stack_over_gains_of_different_data_sets():
    """Objectives through gains of two data sets stack for a `vmap`: one value
    per data set, each its own objective's."""
    full = synthetic()
    sets = [full, _reordered(full.select_time(0.0, 2.5))]
    terms = [
        em.GainCorrected(em.VisChi2.from_data(x, GRID), random_gains(x, seed=k))
        + 0.1 * em.GainSmoothness(random_gains(x, seed=k), 0.1, math.inf)
        for k, x in enumerate(sets)
    ]
    stacked = em.pad_and_stack(terms)
    img = jnp.asarray(truth_image())
    got = eqx.filter_jit(eqx.filter_vmap(lambda o: o(img)))(stacked)
    assert_allclose(got, np.array([t(img) for t in terms]), rtol=1e-12)


class _Steps(em.AbstractGainPrior):
    """A gain prior of a user's: log-amplitude steps between intervals (padded
    intervals would add steps down to 0)."""

    gains: em.StationGains

    def gain_residuals(self, gains):
        return jnp.diff(gains.log_amp, axis=0).reshape(-1)


class _WhereData(em.AbstractGainPrior):
    """A user's prior that reads the arrays alone and weighs by `present`."""

    gains: em.StationGains
    reads_gain_tables = False

    def gain_residuals(self, gains):
        return jnp.where(gains.present, gains.log_amp, 0.0).reshape(-1)


@pytest.mark.slow
def test_survey_over_gains_refuses_what_padding_would_change():
    """From a review: a user's gain prior that reads the tables (or steps into
    padded intervals) came out of the survey with another value than its own
    solve. Such a prior is refused, naming it; one that declares
    `reads_gain_tables = False` is padded. Also: a model shared by
    configurations of different data sets is refused naming the configuration;
    `solve_scipy` checks a `WithGains` model as `solve` does; a prior-only
    objective refuses gains of another station table; the result is indexed by
    one configuration, within range."""
    full = synthetic()
    sets = [full, _reordered(full.select_time(0.0, 2.5))]
    gains = [random_gains(x, seed=k, amp=0.05, phase=0.3) for k, x in enumerate(sets)]
    image = em.PixelImage(GRID, jnp.asarray(truth_image()))
    models = [(image, g) for g in gains]

    def joints(prior):
        return em.pad_to_match(
            [
                em.WithGains(
                    em.GainCorrected(em.VisChi2.from_data(x, GRID), g) + prior(g)
                )
                for x, g in zip(sets, gains)
            ]
        )

    with pytest.raises(ValueError, match=r"configuration 0 holds .* `_Steps`"):
        em.survey(joints(_Steps), models, max_steps=3)
    with pytest.raises(ValueError, match="item 0 holds .* `_Steps`"):
        em.pad_and_stack(joints(_Steps))
    opted = joints(_WhereData)
    res = em.survey(opted, models, max_steps=3, devices=jax.devices()[:1])
    for k in range(2):
        single = em.solve(opted[k], models[k], max_steps=3)
        assert_allclose(res[k].value, single.value, rtol=1e-9)
    # Indexing: one configuration, negative from the end, in range.
    assert res[-2].model[1].station_names == gains[0].station_names
    with pytest.raises(IndexError, match="configuration 2 of a survey of 2"):
        res[2]
    with pytest.raises(IndexError, match="configuration -3"):
        res[-3]
    # One model for two data sets: refused before compiling, naming the fix.
    with pytest.raises(ValueError, match=r"configuration 1: .*one model per"):
        em.survey(opted, models[0], max_steps=3)
    # solve_scipy checks the model as solve does.
    other = random_gains(full.select_time(0.0, 2.5))
    with pytest.raises(ValueError, match="different data sets"):
        em.solve_scipy(_joint(full, gains[0]), (image, other), max_steps=2)
    # Gains entering through priors alone: the station table is checked.
    priors = em.WithGains(
        em.GainAmplitudePrior(gains[0], 0.1) + em.GainPhaseReference(gains[0], "AA")
    )
    with pytest.raises(ValueError, match="the model's gains are on the stations"):
        em.solve(priors, (image, gains[1]), max_steps=2)


SURVEY_RESULT_SLICE = unchecked_error(
    "r[0:1]",
    "TypeError",
    "z = np.zeros(2, int)\n"
    "sol = em.Solution(model=np.zeros((2, 3)), value=np.zeros(2), report={}, "
    "steps=z, result=z, stats={})\n"
    "r = em.SurveyResult(solutions=sol, data_names=(), chunk_size=1, "
    "computed_chunks=(0,), loaded_chunks=())",
)


def test_survey_result_is_indexed_by_one_configuration(unchecked):
    """Without the suite's type checker (as users run it): a slice is refused
    with eqmodels' own message, pointing to the batch."""
    msg = unchecked[SURVEY_RESULT_SLICE]
    assert msg is not None and "the whole batch is `result.solutions`" in msg
