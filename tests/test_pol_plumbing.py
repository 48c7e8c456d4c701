"""Polarimetric images through the existing machinery: the batched Stokes transform,
Stokes I terms on a polarimetric image, a user's polarimetric term and regularizer in
an `Objective` (shared transform, gradients, sharding), and the refusals."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import eqmodels as em
from tests.helpers import assert_allclose, check_grad_fd
from tests.problems import FORWARD_RTOL, FORWARDS, random_points
from tests.reference.numpy_ft import dft_matrix
from tests.toys import StokesToyChi2, StokesToyImage, StokesToyPenalty


GRID = em.ImageGrid(8, 8, em.uas_to_rad(5.0))


def stokes_image(seed=3):
    rng = np.random.default_rng(seed)
    i = rng.uniform(0.5, 1.0, GRID.shape) / GRID.npix
    q, u, v = rng.uniform(-0.3, 0.3, (3, *GRID.shape)) * i
    return np.stack([i, q, u, v])


def numpy_stokes_vis(u, v, stokes):
    """`(*points, 4)`: each plane through the numpy DFT."""
    a = dft_matrix(*GRID.shape, GRID.psize, u, v)
    out = np.stack([a @ p.reshape(-1) for p in stokes], axis=-1)
    return out.reshape(*np.shape(u), 4)


def toy_term(forward, seed=5):
    rng = np.random.default_rng(seed)
    shape = (*forward.u.shape, 4)
    vis = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    return StokesToyChi2(forward, 0.01 * vis, rng.uniform(0.5, 2.0, shape) * 0.01)


def numpy_toy_chi2(term, model):
    d = model - np.asarray(term.vis)
    w = np.asarray(term.weight)
    return np.sum(w * np.abs(d) ** 2) / (2 * d.shape[0])


@pytest.mark.parametrize("kind", ["direct", "separable", "nufft"])
def test_batched_transform_equals_numpy_per_plane(kind):
    u, v = random_points(GRID, 12, seed=1)
    fwd = FORWARDS[kind](GRID, u, v)
    stokes = stokes_image()
    got = jax.jit(lambda s: em.AbstractForwardModel.batched(fwd, s))(stokes)
    want = np.moveaxis(numpy_stokes_vis(u, v, stokes), -1, 0)
    assert got.shape == (4, 12)
    assert_allclose(got, want, rtol=FORWARD_RTOL[kind])


def test_stokes_i_terms_use_the_i_plane_of_a_polarimetric_image():
    u, v = random_points(GRID, 10, seed=2)
    stokes = stokes_image()
    model = StokesToyImage(GRID, jnp.asarray(stokes))
    vis = em.VisChi2(em.DirectFT(GRID, u, v), np.ones(10) * 0.01, np.ones(10) * 0.1)
    tv = em.TV(GRID)
    for term in (vis, tv):
        assert_allclose(term(stokes), term(stokes[0]), rtol=1e-15)
        assert_allclose(term(model), term(stokes[0]), rtol=1e-15)


@pytest.mark.parametrize("kind", ["direct", "nufft"])
def test_user_polarimetric_term_value_and_gradient_against_numpy(kind):
    u, v = random_points(GRID, 10, seed=4)
    term = toy_term(FORWARDS[kind](GRID, u, v))
    stokes = stokes_image()
    want = numpy_toy_chi2(term, numpy_stokes_vis(u, v, stokes))
    got, grad = eqx.filter_jit(jax.value_and_grad(lambda x, t: t(x)))(
        jnp.asarray(stokes), term
    )
    assert_allclose(got, want, rtol=FORWARD_RTOL[kind])
    # The gradient of Σ w |A s − d|² / (2N) per plane: Re(Aᴴ (w (A s − d))) / N.
    a = dft_matrix(*GRID.shape, GRID.psize, u, v)
    r = np.asarray(term.weight) * (
        numpy_stokes_vis(u, v, stokes) - np.asarray(term.vis)
    )
    want_grad = np.stack(
        [np.real(a.conj().T @ r[:, p]).reshape(GRID.shape) / 10 for p in range(4)]
    )
    assert_allclose(grad, want_grad, rtol=FORWARD_RTOL[kind] * 10)
    check_grad_fd(lambda x: term(x), jnp.asarray(stokes))


def test_polarimetric_terms_under_vmap():
    u, v = random_points(GRID, 10, seed=4)
    term = toy_term(em.DirectFT(GRID, u, v))
    batch = jnp.stack([jnp.asarray(stokes_image(s)) for s in range(3)])
    got = jax.vmap(lambda x: term(x))(batch)
    want = [term(b) for b in batch]
    assert_allclose(got, jnp.stack(want), rtol=1e-14)
    reg = StokesToyPenalty()
    assert_allclose(
        jax.vmap(lambda x: reg(x))(batch),
        jnp.stack([reg(b) for b in batch]),
        rtol=1e-14,
    )


@pytest.mark.parametrize("kind", ["direct", "nufft"])
def test_objective_shares_one_batched_transform_between_i_and_stokes_terms(kind):
    u, v = random_points(GRID, 10, seed=6)
    fwd = FORWARDS[kind](GRID, u, v)
    amp = em.AmpChi2(fwd, np.full(10, 0.5), np.full(10, 0.05))
    pol = toy_term(fwd)
    reg = StokesToyPenalty()
    obj = em.Objective([amp, pol, reg, em.TV(GRID)], [1.0, 2.0, 3.0, 0.5])
    assert len(obj.shared) == 1 and obj.terms[0].forward is None
    model = StokesToyImage(GRID, jnp.asarray(stokes_image()))
    want = 1.0 * amp(model) + 2.0 * pol(model) + 3.0 * reg(model)
    want = want + 0.5 * em.TV(GRID)(model)
    f = eqx.filter_jit(eqx.filter_value_and_grad(lambda m: obj(m)))
    val, grad = f(model)
    assert_allclose(val, want, rtol=FORWARD_RTOL[kind])
    sep = em.Objective([amp, pol, reg, em.TV(GRID)], [1.0, 2.0, 3.0, 0.5], share=False)
    _, grad_sep = eqx.filter_value_and_grad(lambda m: sep(m))(model)
    assert_allclose(grad.planes, grad_sep.planes, rtol=FORWARD_RTOL[kind] * 10)
    report = obj.report(model)
    assert set(report) == {"amp", "stokes_toy", "pol_power", "tv"}
    # Residuals for least squares: Σ r² is the weighted sum of the sums of squares.
    lsq = em.Objective([amp, pol], [1.0, 2.0])
    r = lsq.residuals(model)
    assert_allclose(jnp.sum(r**2), amp(model) + 2 * pol(model), rtol=1e-12)


def test_polarimetric_term_sharded_over_a_mesh_equals_the_plain_term():
    u, v = random_points(GRID, 13, seed=7)
    term = toy_term(em.DirectFT(GRID, u, v))
    mesh = Mesh(np.array(jax.devices()[:4]), ("rows",))
    sharded = em.ShardedChi2(term, mesh)
    stokes = jnp.asarray(stokes_image())
    vg = eqx.filter_jit(jax.value_and_grad(lambda x, t: t(x)))
    val, grad = vg(stokes, sharded)
    ref_val, ref_grad = vg(stokes, term)
    assert_allclose(val, ref_val, rtol=1e-13)
    assert_allclose(grad, ref_grad, rtol=1e-12)
    obj = em.Objective(
        [sharded, em.AmpChi2(em.DirectFT(GRID, u, v), np.ones(13), np.ones(13))]
    )
    plain = em.Objective(
        [term, em.AmpChi2(em.DirectFT(GRID, u, v), np.ones(13), np.ones(13))]
    )
    assert_allclose(eqx.filter_jit(obj)(stokes), plain(stokes), rtol=1e-13)


def test_solve_a_polarimetric_model():
    u, v = random_points(GRID, 30, seed=8)
    fwd = em.DirectFT(GRID, u, v)
    truth = stokes_image(9)
    vis = numpy_stokes_vis(u, v, truth)
    term = StokesToyChi2(fwd, vis, np.full(vis.shape, 1e-3))
    start = StokesToyImage(GRID, jnp.asarray(truth * 0.5))
    result = em.solve(term + 1e-12 * StokesToyPenalty(), start, max_steps=300)
    assert result.value < 1e-3 * term(start)


def test_polarimetric_term_refuses_a_stokes_i_image():
    u, v = random_points(GRID, 10, seed=4)
    term = toy_term(em.DirectFT(GRID, u, v))
    with pytest.raises(ValueError, match=r"StokesToyChi2 needs the four Stokes planes"):
        term(stokes_image()[0])
    with pytest.raises(ValueError, match=r"StokesToyPenalty needs the four Stokes"):
        StokesToyPenalty()(stokes_image()[0])
    obj = em.Objective([term, em.AmpChi2(term.forward, np.ones(10), np.ones(10))])
    with pytest.raises(ValueError, match=r"term 'stokes_toy' needs the four Stokes"):
        obj(stokes_image()[0])


def test_polarimetric_model_returning_the_wrong_shape_is_refused():
    model = StokesToyImage(GRID, jnp.zeros(GRID.shape))
    with pytest.raises(ValueError, match=r"returns the four Stokes planes"):
        em.TV(GRID)(model)


def test_scalar_gains_refuse_a_polarimetric_term():
    u, v = random_points(GRID, 10, seed=4)
    term = toy_term(em.DirectFT(GRID, u, v))
    data = em.VisData(
        u, v, np.ones(10), np.ones(10), np.zeros(10), np.zeros(10, int),
        np.ones(10, int), station_names=("A", "B"), freq=230e9,
    )  # fmt: skip
    gains = em.StationGains.from_data(data)
    with pytest.raises(TypeError, match=r"polarimetric term .*StationJones"):
        em.GainCorrected(term, gains)


@pytest.mark.slow
def test_survey_over_weights_of_a_polarimetric_objective_equals_the_single_solves():
    u, v = random_points(GRID, 20, seed=10)
    fwd = em.DirectFT(GRID, u, v)
    truth = stokes_image(11)
    vis = numpy_stokes_vis(u, v, truth)
    pvis = em.PolVisChi2(fwd, vis[:, 1] + 1j * vis[:, 2], np.full(20, 1e-3))
    amp = em.AmpChi2(fwd, np.abs(vis[:, 0]), np.full(20, 1e-3))
    obj = amp + pvis + 1e-3 * em.HolographicEntropy() + 1e-3 * em.PolTV(GRID)
    start = em.PolPixelImage.from_stokes(0.8 * truth, GRID)
    configs = [obj.with_weights([1.0, w, 1e-3, 1e-3]) for w in (0.5, 1.0, 2.0)]
    result = em.survey(configs, start, max_steps=20)
    for k, o in enumerate(configs):
        one = em.solve(o, start, max_steps=20)
        assert_allclose(result.solutions.value[k], one.value, rtol=1e-9)
        assert_allclose(
            result.solutions.model.pol[k], one.model.pol, rtol=1e-6, atol=1e-9
        )
