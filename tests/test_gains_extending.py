"""Gains of a user's own (`AbstractGains`): one complex gain per station for the
whole track, written here in a few lines, works with `GainCorrected` (value and
gradients against a numpy `g_a conj(g_b) V`), `with_gains`, `WithGains` + `solve`
(with a gain prior of the user's) and a survey of one structure; what needs
`StationGains`' tables (the built-in priors, a survey padding gains of different
tables) refuses it, naming the class. And `self_calibrate`'s `forward=`."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems.gains import (
    GRID,
    pairs as _pairs,
    random_gains,
    reordered as _reordered,
    synthetic,
    truth_image,
)
from tests.reference import gains as rg
from tests.reference.numpy_ft import dft_matrix


class TrackGains(em.AbstractGains):
    """One complex gain per station for the whole track (no time dependence)."""

    log_amp: jax.Array
    phase: jax.Array
    index_key: jax.Array
    station_names: tuple[str, ...] = eqx.field(static=True)
    n_time_slots: ClassVar[None] = None

    def __init__(self, data, gains=None):
        g = np.ones(data.n_stations) if gains is None else np.asarray(gains)
        self.log_amp = jnp.asarray(np.log(np.abs(g)))
        self.phase = jnp.asarray(np.angle(g))
        self.index_key = jnp.asarray(data.index_key, jnp.int32)
        self.station_names = data.station_names

    def factor(self, stations, time_index):
        st = jnp.asarray(stations)
        a, b = st[..., 0], st[..., 1]
        la = self.log_amp[a] + self.log_amp[b]
        return jnp.exp(jax.lax.complex(la, self.phase[a] - self.phase[b]))


class TrackPrior(em.AbstractGainPrior):
    """A user's prior on `TrackGains`: log-amplitudes to 1 within `tol`, and the
    phase of the first station to 0 (the data see phase differences only)."""

    gains: TrackGains
    tol: float = 0.5

    def gain_residuals(self, gains):
        return jnp.concatenate([gains.log_amp / self.tol, gains.phase[:1]])


def _gains(data, seed, amp=0.1, phase=1.0):
    rng = np.random.default_rng(seed)
    s = data.n_stations
    g = np.exp(amp * rng.standard_normal(s) + 1j * rng.uniform(-phase, phase, s))
    return TrackGains(data, g)


def test_user_gains_in_gain_corrected_match_numpy():
    """Value and gradients (image, log-amplitudes, phases) of a `VisChi2` seen
    through a user's gains, under `jit`: the numpy reference of
    `χ² = Σ |g_a conj(g_b) V̂ − V|² / σ² / (2N)`, the gains one interval long."""
    d = synthetic()
    g = _gains(d, seed=3)
    img = truth_image() * 1.1
    v = np.asarray(dft_matrix(*GRID.shape, GRID.psize, d.u, d.v) @ img.ravel())
    st = _pairs(d)
    gv = np.exp(np.asarray(g.log_amp) + 1j * np.asarray(g.phase))
    want = gv[st[:, 0]] * np.conj(gv[st[:, 1]]) * v
    assert_allclose(g.apply(jnp.asarray(v), st, d.time_index), want, rtol=1e-13)

    term = em.GainCorrected(em.VisChi2.from_data(d, GRID), g)
    a0 = dft_matrix(*GRID.shape, GRID.psize, np.asarray(d.u), np.asarray(d.v))
    la, ph = np.asarray(g.log_amp)[None, :], np.asarray(g.phase)[None, :]
    value, g_img, g_la, g_ph = rg.vis_chi2(
        a0, img, np.asarray(d.vis), np.asarray(d.sigma), la, ph,
        np.zeros(len(d.timestamps()), int), st, d.time_index,
    )  # fmt: skip
    loss = lambda pair, t: em.with_gains(t, pair[1])(pair[0])  # noqa: E731
    got, (d_img, d_g) = eqx.filter_jit(eqx.filter_value_and_grad(loss))(
        (jnp.asarray(img), g), term
    )
    assert_allclose(got, value, rtol=1e-12)
    assert_allclose(term(jnp.asarray(img)), value, rtol=1e-12)
    assert_allclose(d_img, g_img, rtol=1e-10)
    assert_allclose(d_g.log_amp, g_la[0], rtol=0, atol=1e-10 * np.abs(g_la).max())
    assert_allclose(d_g.phase, g_ph[0], rtol=0, atol=1e-10 * np.abs(g_ph).max())


def test_user_gains_sharded():
    """`ShardedChi2(GainCorrected(term, TrackGains))`: rows split over 4 devices,
    the gains replicated; value and gradients (image and gains) those of the
    unsharded term."""
    d = synthetic()
    g = _gains(d, seed=2)
    term = em.GainCorrected(em.VisChi2.from_data(d, GRID), g)
    sharded = em.ShardedChi2(term, Mesh(np.array(jax.devices()[:4]), ("rows",)))
    loss = lambda pair, t: em.with_gains(t, pair[1])(pair[0])  # noqa: E731
    vg = eqx.filter_jit(eqx.filter_value_and_grad(loss))
    pair = (jnp.asarray(truth_image()), g)
    (val, grads), (ref, ref_grads) = vg(pair, sharded), vg(pair, term)
    assert_allclose(val, ref, rtol=1e-12)
    for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
        assert_allclose(got, want, rtol=1e-10)


def test_user_gains_joint_solve_recovers_them():
    """`WithGains` + `solve` over `(image, TrackGains)`, the image held at the
    truth: the constant gains that corrupted the data are recovered, with a
    user's gain prior in the objective."""
    clean = synthetic(noise=1e-4)
    true = _gains(clean, seed=4)
    st = _pairs(clean)
    f_true = np.asarray(true.factor(st, clean.time_index))
    d = clean.replace(
        vis=f_true * np.asarray(clean.vis), sigma=np.abs(f_true) * clean.sigma
    )
    unit = TrackGains(d)
    vis = em.VisChi2.from_data(d, GRID)
    joint = em.WithGains(
        em.GainCorrected(vis, unit) + TrackPrior(unit) / (2 * vis.rows)
    )
    img = jnp.asarray(truth_image())
    start = joint((img, unit))
    sol = em.solve(
        joint, (img, unit), max_steps=200, params=(False, em.is_real_float_array)
    )
    image, gains = sol.model
    assert isinstance(gains, TrackGains)
    assert np.array_equal(np.asarray(image), np.asarray(img))  # frozen
    assert float(sol.value) < 1e-3 * float(start)
    fit = np.asarray(gains.factor(st, d.time_index))
    assert np.max(np.abs(np.abs(fit) / np.abs(f_true) - 1)) < 2e-3
    assert np.max(np.abs(np.angle(fit / f_true))) < 2e-3


def test_user_gains_survey_of_one_structure_equals_single_solves():
    """Two configurations (other weights) over one data set's `TrackGains`: no
    padding needed, each configuration equal to its own solve."""
    d = synthetic()
    g = _gains(d, seed=6, amp=0.05, phase=0.3)
    joint = em.WithGains(
        em.GainCorrected(em.VisChi2.from_data(d, GRID), g) + 0.1 * TrackPrior(g)
    )
    joints = [joint, joint.with_weights([1.0, 0.5])]
    model = (em.PixelImage(GRID, jnp.asarray(truth_image())), g)
    res = em.survey(joints, model, max_steps=3, devices=jax.devices()[:1])
    for k in range(2):
        single = em.solve(joints[k], model, max_steps=3)
        assert_allclose(res[k].value, single.value, rtol=1e-9)
        assert isinstance(res[k].model[1], TrackGains)


def test_abstract_gains_is_abstract():
    """A subclass that does not declare the contract cannot be built."""

    class NoFactor(em.AbstractGains):
        index_key: jax.Array
        station_names: tuple[str, ...] = eqx.field(static=True)
        n_time_slots: ClassVar[None] = None

    with pytest.raises(TypeError, match="abstract"):
        NoFactor(jnp.asarray(-1), ("AA",))
    with pytest.raises(TypeError, match="abstract"):
        em.AbstractGains()


def test_what_needs_station_gains_refuses_a_users_gains():
    """The built-in priors read `StationGains`' tables; a survey pads gains of
    different tables only for `StationGains`; `with_gains` and `solve` refuse
    gains of another class than the objective's. Each names the class."""
    full = synthetic()
    g = _gains(full, seed=1)
    for prior in (em.GainAmplitudePrior, em.GainPhaseReference, em.GainSmoothness):
        with pytest.raises(TypeError, match=r"reads the per-interval.*TrackGains"):
            prior(g)
    with pytest.raises(TypeError, match="AbstractGains"):
        em.GainCorrected(em.VisChi2.from_data(full, GRID), np.ones(6))
    # One kind of gains per objective.
    station = random_gains(full)
    joint = em.WithGains(em.GainCorrected(em.VisChi2.from_data(full, GRID), station))
    with pytest.raises(TypeError, match="holds gains of class StationGains"):
        em.with_gains(joint.objective, g)
    with pytest.raises(TypeError, match="holds gains of class StationGains"):
        em.solve(joint, (truth_image(), g), max_steps=2)
    # A survey over data sets whose TrackGains differ in shape (6 and 5
    # stations): refused before compiling, naming the class and what it lacks.
    sets = [full, _reordered(full.select_time(0.0, 2.5))]
    gains = [_gains(x, seed=k) for k, x in enumerate(sets)]
    joints = em.pad_to_match(
        [
            em.WithGains(em.GainCorrected(em.VisChi2.from_data(x, GRID), gx))
            for x, gx in zip(sets, gains)
        ]
    )
    image = em.PixelImage(GRID, jnp.asarray(truth_image()))
    with pytest.raises(
        ValueError,
        match=r"configuration 0 holds gains of class `TrackGains`.*layout of a "
        r"`StationGains`.*`TrackGains` does not have it",
    ):
        em.survey(joints, [(image, gx) for gx in gains], max_steps=2)
    with pytest.raises(ValueError, match="item 0 holds gains of class `TrackGains`"):
        em.pad_and_stack(joints)


# ------------------------------------------------------- self_calibrate forward=
@pytest.fixture(scope="module")
def corrupted():
    d = synthetic(noise=0.005)
    return random_gains(d, seed=5, amp=0.1).corrupt(d)


def test_self_calibrate_forward_nufft_and_a_class_match_direct(corrupted):
    """`forward="nufft"`, the NUFFT class and a callable give the gains of the
    exact transform (the default) to the NUFFT's tolerance (1e-12 relative)."""
    img = truth_image()
    _, direct = em.self_calibrate(corrupted, img, grid=GRID)
    _, named = em.self_calibrate(corrupted, img, grid=GRID, forward="direct")
    assert np.array_equal(np.asarray(named.log_amp), np.asarray(direct.log_amp))
    assert np.array_equal(np.asarray(named.phase), np.asarray(direct.phase))
    for forward in ("nufft", em.NUFFT, em.SeparableFT):
        _, g = em.self_calibrate(corrupted, img, grid=GRID, forward=forward)
        assert_allclose(g.log_amp, direct.log_amp, rtol=0, atol=1e-7)
        assert_allclose(g.phase, direct.phase, rtol=0, atol=1e-7)
        if forward != em.SeparableFT:  # not the exact sum: the last digits differ
            assert not np.array_equal(np.asarray(g.phase), np.asarray(direct.phase))
    # A callable is what builds the transform: a coarse NUFFT moves the gains
    # by its tolerance, another pulse by more.
    coarse = lambda grid, u, v: em.NUFFT(grid, u, v, eps=1e-3)  # noqa: E731
    _, g = em.self_calibrate(corrupted, img, grid=GRID, forward=coarse)
    assert 1e-9 < np.max(np.abs(np.asarray(g.phase) - np.asarray(direct.phase))) < 1e-2
    delta = lambda grid, u, v: em.DirectFT(grid, u, v, pulse=em.DeltaPulse())  # noqa: E731
    _, g = em.self_calibrate(corrupted, img, grid=GRID, forward=delta)
    _, want = em.self_calibrate(corrupted, img, grid=GRID, pulse=em.DeltaPulse())
    assert_allclose(g.phase, want.phase, rtol=0, atol=1e-12)
    assert not np.allclose(np.asarray(g.phase), np.asarray(direct.phase), atol=1e-6)


def test_self_calibrate_forward_errors(corrupted):
    img = truth_image()
    mv = np.ones(corrupted.n_rows, complex)
    with pytest.raises(TypeError, match="give it with `image`, not with `model_vis`"):
        em.self_calibrate(corrupted, model_vis=mv, forward="nufft")
    with pytest.raises(ValueError, match="`forward` must be one of"):
        em.self_calibrate(corrupted, img, grid=GRID, forward="fft")
    fwd = em.DirectFT(GRID, corrupted.u, corrupted.v)
    with pytest.raises(TypeError, match="a built DirectFT, not a way to build one"):
        em.self_calibrate(corrupted, img, grid=GRID, forward=fwd)
    with pytest.raises(TypeError, match="returned ndarray, not a forward model"):
        em.self_calibrate(
            corrupted, img, grid=GRID, forward=lambda grid, u, v: np.asarray(u)
        )
    with pytest.raises(TypeError, match="a callable `forward` builds its own"):
        em.self_calibrate(
            corrupted,
            img,
            grid=GRID,
            pulse=em.TrianglePulse(),
            forward=lambda grid, u, v: em.DirectFT(grid, u, v),
        )


def test_gain_corrected_reads_the_declared_row_fields():
    """Gains need each row's station pair and time slot: a term whose `row_fields`
    do not list `stations` (the declared per-row leaves, not a `hasattr`) is
    refused, naming the leaf and the fix."""

    class NoStations(em.AbstractDataTerm):
        forward: em.AbstractForwardModel | None
        vis: jax.Array
        weight: jax.Array
        n_rows: jax.Array
        stations: jax.Array  # a field, but not declared per row
        report_name = "nostations"
        row_fields = ("vis", "weight")

        def __init__(self, forward, vis):
            self.forward = forward
            self.vis = jnp.asarray(vis)
            self.weight = jnp.ones(np.shape(vis))
            self.n_rows = em.n_rows_leaf(np.shape(vis)[0])
            self.stations = jnp.zeros((np.shape(vis)[0], 2), jnp.int32)

        def residuals_from_vis(self, vis):
            return jnp.abs(vis - self.vis)

        def chi2_from_vis(self, vis):
            return jnp.sum(self.residuals_from_vis(vis) ** 2)

    d = synthetic()
    term = NoStations(em.DirectFT(GRID, d.u, d.v), d.vis)
    with pytest.raises(TypeError, match=r"has no `stations` leaf.*`row_fields`"):
        em.GainCorrected(term, TrackGains(d))
