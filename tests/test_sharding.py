"""`ShardedChi2` on real multi-device meshes (8 virtual CPU devices): value and
gradient equal the unwrapped term (value 1e-14, gradient 1e-13 relative) for every
data term and forward model, row counts that are not multiples of the device count,
inside objectives with shared transforms, under vmap, on 2-d and Explicit meshes."""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems.m87 import DAY_100, load_day, M87_GRID
from tests.problems.terms import DATA_TERMS, GRID, IMAGES, positive_image, products
from tests.toys import FluxDensityChi2, OwnCall
from tests.unchecked import unchecked_error


VALUE_RTOL, GRAD_RTOL = 1e-14, 1e-13


def mesh_of(n, name="rows"):
    assert len(jax.devices()) >= 8, "conftest asks for 8 virtual CPU devices"
    return Mesh(np.array(jax.devices()[:n]), (name,))


_vg = eqx.filter_jit(jax.value_and_grad(lambda x, t: t(x)))


def check_same(sharded, plain, x, value_rtol=VALUE_RTOL, grad_rtol=GRAD_RTOL):
    val, grad = _vg(x, sharded)
    ref_val, ref_grad = _vg(x, plain)
    assert_allclose(val, ref_val, rtol=value_rtol)
    assert_allclose(grad, ref_grad, rtol=grad_rtol)


@pytest.mark.parametrize("forward", ["direct", "separable", "nufft"])
@pytest.mark.parametrize("case", DATA_TERMS, ids=str)
def test_every_term_and_forward_model(case, forward):
    """7 devices: no term's row count (45, 15, 12) is a multiple of 7, so every term
    is padded."""
    term = case.build(forward)
    sharded = em.ShardedChi2(term, mesh_of(7))
    assert term.rows % 7 != 0
    assert sharded.term.rows % 7 == 0 and int(sharded.n_rows) == int(term.n_rows)
    padding = np.asarray(sharded.weight)[term.rows :]
    assert np.all(padding == 0.0)
    check_same(sharded, term, jnp.asarray(IMAGES[0]))
    assert sharded.report_name == em.Objective([term]).names[0]


@pytest.mark.parametrize("n_devices", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("name", ["vis", "cphase", "logcamp"])
def test_device_counts(name, n_devices):
    case = next(c for c in DATA_TERMS if c.name == name)
    term = case.build("direct")
    sharded = em.ShardedChi2(term, mesh_of(n_devices))
    check_same(sharded, term, jnp.asarray(IMAGES[1]))
    # The dense matrix is split: each device holds ~1/n of its rows.
    a_re = sharded.term.forward.a_re
    shard_rows = {s.data.shape[0] for s in a_re.addressable_shards}
    assert shard_rows == {a_re.shape[0] // n_devices}


@pytest.mark.parametrize("n_devices", [4, 8])
@pytest.mark.parametrize("forward", ["direct", "separable", "nufft"])
def test_inside_objective_with_shared_transform(forward, n_devices):
    """Sharded members of an objective are served by one transform at their distinct
    points, split over the same mesh; the value and gradient equal the plain
    objective's."""
    mesh = mesh_of(n_devices)
    by_name = {c.name: c for c in DATA_TERMS}
    plain = [by_name[k].build(forward) for k in ("vis", "amp", "cphase", "logcamp")]
    tv = em.TV(GRID)
    weights = (2.0, 0.2, 1.0, 1.0, 3.0)
    sharded = em.Objective([em.ShardedChi2(t, mesh) for t in plain] + [tv], weights)
    ref = em.Objective(plain + [tv], weights)
    (group,) = sharded.shared
    assert isinstance(group.forward, em.ShardedForward)
    assert group.members == (0, 1, 2, 3)
    assert group.n_points == ref.shared[0].n_points  # sharding keeps the sharing
    assert all(t.term.forward is None for t in sharded.terms[:4])
    x = jnp.asarray(IMAGES[2])
    check_same(sharded, ref, x, grad_rtol=1e-12 if forward == "nufft" else GRAD_RTOL)
    report = eqx.filter_jit(lambda x, o: o.report(x))(x, sharded)
    for name, val in ref.report(x).items():
        assert_allclose(report[name], val, rtol=VALUE_RTOL)
    # Built by `+` as well: the groups merge as they are added.
    summed = (
        2.0 * em.ShardedChi2(plain[0], mesh)
        + 0.2 * em.ShardedChi2(plain[1], mesh)
        + em.ShardedChi2(plain[2], mesh)
        + em.ShardedChi2(plain[3], mesh)
        + 3.0 * tv
    )
    assert [g.members for g in summed.shared] == [(0, 1, 2, 3)]
    check_same(summed, ref, x, grad_rtol=1e-12 if forward == "nufft" else GRAD_RTOL)


@pytest.mark.parametrize("forward", ["direct", "nufft"])
def test_objective_on_a_mesh_with_explicit_axes(forward):
    """`jax.make_mesh` gives Explicit axes: the shared transform's points, which the
    devices do not divide, are cut back after a reshard (JAX refuses to slice a
    split dimension there); value, gradient and report equal the plain objective's."""
    mesh = jax.make_mesh(
        (4,), ("rows",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:4]
    )
    by_name = {c.name: c for c in DATA_TERMS}
    plain = [by_name[k].build(forward) for k in ("amp", "cphase")]
    sharded = em.ShardedChi2(plain[0], mesh) + 2.0 * em.ShardedChi2(plain[1], mesh)
    ref = plain[0] + 2.0 * plain[1]
    assert sharded.shared[0].n_points % 4 != 0  # the case JAX refuses to slice
    x = jnp.asarray(IMAGES[1])
    check_same(sharded, ref, x, grad_rtol=1e-12 if forward == "nufft" else GRAD_RTOL)
    report = eqx.filter_jit(lambda x, o: o.report(x))(x, sharded)
    for name, val in ref.report(x).items():
        assert_allclose(report[name], val, rtol=VALUE_RTOL)
    assert sharded.shared[0].forward.u.shape == (sharded.shared[0].n_points,)


@pytest.mark.parametrize("solver", [em.GaussNewton(), em.LevenbergMarquardt()])
def test_least_squares_solvers_on_a_mesh_with_explicit_axes(solver):
    """The residuals come back split over the Explicit axis, which the dense
    linear algebra of a step refused (`triangular solve input b must be
    unsharded`): they are gathered first. Same steps as the plain term."""
    mesh = jax.make_mesh(
        (4,), ("rows",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:4]
    )
    plain = {c.name: c for c in DATA_TERMS}["amp"].build("direct")
    model = em.PixelImage.from_image(positive_image(seed=3), GRID, transform="identity")
    want = em.solve(plain, model, solver, max_steps=3)
    got = em.solve(em.ShardedChi2(plain, mesh), model, solver, max_steps=3)
    assert got.reason == want.reason and int(got.steps) == int(want.steps)
    # The residuals are summed in another order across devices; an underdetermined
    # Gauss-Newton step (tiny damping) amplifies that rounding in the pixels.
    assert_allclose(got.model.params, want.model.params, rtol=1e-5)
    assert_allclose(got.value, want.value, rtol=1e-9)


@pytest.mark.slow
def test_survey_refuses_terms_split_over_explicit_axes():
    """`survey` splits configurations over its own mesh, which JAX does not
    combine with an Explicit one (it failed in `shard_map` with a spec mismatch,
    having re-placed the rows as replicated): refused with a message. On an Auto
    mesh the survey equals single solves."""
    plain = {c.name: c for c in DATA_TERMS}["amp"].build("direct")
    model = em.PixelImage.from_image(positive_image(seed=3), GRID, transform="identity")
    explicit = jax.make_mesh(
        (4,), ("rows",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:4]
    )
    objs = [em.ShardedChi2(plain, explicit) + w * em.TSV(GRID) for w in (0.1, 1.0)]
    with pytest.raises(ValueError, match="Explicit axes.*Auto axes"):
        em.survey(objs, model, max_steps=3)
    # Configurations over data sets (their rows differ, so `survey` stacked them on
    # the host before looking): JAX's shard_map spec error came out instead.
    pair = em.pad_to_match([plain, plain.take_rows(np.arange(plain.rows - 3))])
    # Every split leaf differs between the two (stations and times too).
    pair[1] = eqx.tree_at(
        lambda t: (t.stations, t.time_index),
        pair[1],
        (pair[1].stations + 1, pair[1].time_index + 1),
    )
    objs = [
        em.Objective(
            [em.ShardedChi2(t, explicit), em.TSV(GRID)], [1.0, 0.1], share=False
        )
        for t in pair
    ]
    with pytest.raises(ValueError, match="Explicit axes.*Auto axes"):
        em.survey(objs, model, max_steps=3)
    objs = [em.ShardedChi2(plain, mesh_of(4)) + w * em.TSV(GRID) for w in (0.1, 1.0)]
    res = em.survey(objs, model, max_steps=3, devices=jax.devices()[:4])
    for i, o in enumerate(objs):
        assert_allclose(res[i].value, em.solve(o, model, max_steps=3).value, rtol=1e-9)


def test_vmap_over_images():
    case = next(c for c in DATA_TERMS if c.name == "cphase")
    term = case.build("nufft")
    sharded = em.ShardedChi2(term, mesh_of(4))
    xs = jnp.asarray(IMAGES)
    f = eqx.filter_jit(
        eqx.filter_vmap(jax.value_and_grad(lambda x, t: t(x)), in_axes=(0, None))
    )
    vals, grads = f(xs, sharded)
    ref_vals, ref_grads = f(xs, term)
    assert_allclose(vals, ref_vals, rtol=VALUE_RTOL)
    assert_allclose(grads, ref_grads, rtol=GRAD_RTOL)


@pytest.mark.parametrize("forward", ["separable", "nufft"])
def test_forward_mode_and_second_derivatives(forward):
    """A Hessian-vector product (forward over reverse) and a JVP of a sharded term
    equal the plain term's, NUFFT included (its transforms are linear primitives)."""
    case = next(c for c in DATA_TERMS if c.name == "logcamp")
    term = case.build(forward)
    sharded = em.ShardedChi2(term, mesh_of(4))
    x, t = jnp.asarray(IMAGES[0]), jnp.asarray(IMAGES[2]) - jnp.asarray(IMAGES[1])

    @eqx.filter_jit
    def jvp_and_hvp(term, x, t):
        _, dv = jax.jvp(term, (x,), (t,))
        _, hv = jax.jvp(jax.grad(term), (x,), (t,))
        return dv, hv

    (dv, hv), (ref_dv, ref_hv) = jvp_and_hvp(sharded, x, t), jvp_and_hvp(term, x, t)
    assert_allclose(dv, ref_dv, rtol=1e-12)
    assert_allclose(hv, ref_hv, rtol=1e-11, atol=1e-12 * float(jnp.abs(ref_hv).max()))


def test_user_term_image_model_and_meshes():
    """A user's term, an image model as input, a 2-d mesh (configurations × rows:
    replicated over the other axis) and a mesh with Explicit axes."""
    u, v, amp, sigma = products()["amp"]
    user = FluxDensityChi2(em.DirectFT(GRID, u, v), amp**2, sigma)
    x = jnp.asarray(positive_image(seed=6))
    check_same(em.ShardedChi2(user, mesh_of(4)), user, x)
    grid2 = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("configs", "rows"))
    check_same(em.ShardedChi2(user, grid2, axis_name="rows"), user, x)
    explicit = jax.make_mesh(
        (4,), ("rows",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:4]
    )
    check_same(em.ShardedChi2(user, explicit), user, x)
    model = em.PixelImage.from_image(positive_image(seed=6), GRID)
    g = eqx.filter_jit(eqx.filter_grad(lambda m, t: t(m)))
    assert_allclose(
        g(model, em.ShardedChi2(user, mesh_of(3))).params,
        g(model, user).params,
        rtol=GRAD_RTOL,
    )
    # Residuals: padding rows give exact zeros; Σ r² is the χ².
    sharded = em.ShardedChi2(user, mesh_of(4))
    r = eqx.filter_jit(lambda x, t: t.residuals(x))(x, sharded)
    assert r.shape == (sharded.term.rows,)
    assert_allclose(jnp.sum(r * r), user(x), rtol=1e-13)


def test_a_term_with_its_own_call_and_the_grid_check():
    """A wrapped term that overrides `__call__` is evaluated through it inside an
    objective too (it was served from a shared transform, its `__call__`
    ignored: a wrong χ², silently); a bare `ShardedChi2` refuses an image model
    on another grid, as the plain term does (it used the model's pixels)."""
    u, v, amp, sigma = products()["amp"]
    own = OwnCall(em.DirectFT(GRID, u, v), amp, sigma)
    x = jnp.asarray(positive_image(seed=6))
    sharded = em.ShardedChi2(own, mesh_of(4))
    check_same(em.Objective([sharded]), own, x)
    check_same(em.Objective([sharded, em.TV(GRID)]), own + em.TV(GRID), x)
    other = em.ImageGrid(GRID.ny, GRID.nx, 2 * GRID.psize)
    model = em.PixelImage.from_image(positive_image(seed=6), other)
    with pytest.raises(ValueError, match="PixelImage on"):
        sharded(model)
    with pytest.raises(ValueError, match="PixelImage on"):
        sharded.residuals(model)


def test_default_mesh_is_every_device():
    term = next(c for c in DATA_TERMS if c.name == "vis").build()
    sharded = em.ShardedChi2(term)
    assert sharded.mesh.devices.size == len(jax.devices())
    check_same(sharded, term, jnp.asarray(IMAGES[0]))


class Unlisted(em.AbstractDataTerm):
    """A user term that forgets to declare one of its per-row leaves."""

    forward: em.AbstractForwardModel | None
    power: jax.Array
    weight: jax.Array
    n_rows: jax.Array

    def __init__(self, forward, power):
        self.forward = forward
        self.power = jnp.asarray(power)
        self.weight = jnp.ones_like(self.power)
        self.n_rows = em.n_rows_leaf(len(power))

    def chi2_from_vis(self, vis):
        return jnp.sum(self.weight * (jnp.abs(vis) - self.power) ** 2) / self.n_rows

    def residuals_from_vis(self, vis):
        return jnp.sqrt(self.weight / self.n_rows) * (jnp.abs(vis) - self.power)


CLASS_FOR_A_TERM = unchecked_error(
    "em.ShardedChi2(em.AmpChi2, jax.make_mesh((1,), ('rows',)))",
    "TypeError",
    "import jax",
)
DATA_FOR_A_TERM = unchecked_error(
    "em.ShardedChi2.from_data(np.ones(3), em.AmpChi2, grid)",
    "TypeError",
    "grid = em.ImageGrid.from_fov(8, 100.0)",
)


def test_errors(unchecked):
    term = next(c for c in DATA_TERMS if c.name == "amp").build()
    with pytest.raises(ValueError, match="no axis named 'rows'"):
        em.ShardedChi2(term, mesh_of(2, "data"))
    with pytest.raises(TypeError, match="Mesh"):
        em.ShardedChi2(term, jax.devices())
    with pytest.raises(TypeError, match="data term"):
        em.ShardedChi2(em.TV(GRID), mesh_of(2))
    with pytest.raises(TypeError, match="already a ShardedChi2"):
        em.ShardedChi2(em.ShardedChi2(term, mesh_of(2)), mesh_of(2))
    msg = unchecked[CLASS_FOR_A_TERM]
    assert msg is not None and "ShardedChi2.from_data(AmpChi2" in msg, msg
    # The hint is a call that works (`mesh` is keyword-only in `from_data`).
    assert "grid, mesh=mesh)" in msg, msg
    msg = unchecked[DATA_FOR_A_TERM]
    assert msg is not None and "from_data(term_cls, data, grid, mesh" in msg, msg
    # A stack of terms: wrap each, then stack (the message named a row field).
    stack = em.pad_and_stack([term, term.take_rows(np.arange(5), n_rows=5)])
    with pytest.raises(ValueError, match="stack of terms.*wrap each term"):
        em.ShardedChi2(stack, mesh_of(2))
    small = term.take_rows(np.arange(3), n_rows=3)
    with pytest.raises(ValueError, match="4 devices but the term has only 3 rows"):
        em.ShardedChi2(small, mesh_of(4))
    u, v, amp, _ = products()["amp"]
    with pytest.raises(TypeError, match="power.*row_fields"):
        em.ShardedChi2(Unlisted(em.DirectFT(GRID, u, v), amp), mesh_of(2))
    member = (term + next(c for c in DATA_TERMS if c.name == "cphase").build()).terms[0]
    with pytest.raises(ValueError, match="no forward model of its own"):
        em.ShardedChi2(member, mesh_of(2))


def test_an_objective_refuses_terms_split_over_different_devices():
    """From a review: terms on meshes over different devices built an objective
    that JAX then refused to evaluate, naming neither term. Meshes over the same
    devices with other axis names still combine (and equal the plain objective)."""
    amp = next(c for c in DATA_TERMS if c.name == "amp").build()
    cph = next(c for c in DATA_TERMS if c.name == "cphase").build()
    devs = jax.devices()
    # Other devices, or the same in another order (JAX refuses that too).
    for a, b in ((devs[:3], devs[:4]), (devs[:4], devs[4:8]), (devs[:4], devs[3::-1])):
        with pytest.raises(ValueError, match="split over different devices"):
            em.ShardedChi2(amp, Mesh(np.array(a), ("rows",))) + em.ShardedChi2(
                cph, Mesh(np.array(b), ("rows",))
            )
    same = em.ShardedChi2(amp, mesh_of(4)) + em.ShardedChi2(
        cph, mesh_of(4, "data"), "data"
    )
    check_same(same, amp + cph, IMAGES[1])


def test_wrapper_term_with_gains():
    """A wrapper whose rows live in an inner term (`GainCorrected`) shards too: its
    rows are split, the gains replicated."""

    data = load_day(DAY_100)
    gains = em.StationGains.from_data(data)
    rng = np.random.default_rng(0)
    gains = eqx.tree_at(
        lambda g: (g.log_amp, g.phase),
        gains,
        (
            gains.log_amp + 0.1 * rng.standard_normal(gains.log_amp.shape),
            gains.phase + 0.3 * rng.standard_normal(gains.phase.shape),
        ),
    )
    term = em.GainCorrected(em.VisChi2.from_data(data, M87_GRID), gains)
    x = jnp.asarray(em.GaussianImage(M87_GRID, 0.6, em.uas_to_rad(40.0))())
    sharded = em.ShardedChi2(term, mesh_of(4))
    weight = sharded.term.term.weight
    assert {s.data.shape[0] for s in weight.addressable_shards} == {
        weight.shape[0] // 4
    }
    check_same(sharded, term, x)
    # The other order is refused with the fix (it blamed missing leaves).
    with pytest.raises(TypeError, match=r"ShardedChi2\(GainCorrected\(term, gains\)"):
        inner = em.VisChi2.from_data(data, M87_GRID)
        em.GainCorrected(em.ShardedChi2(inner, mesh_of(4)), gains)


def _explicit_mesh(n=4):
    return jax.make_mesh(
        (n,), ("rows",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:n]
    )


@pytest.mark.slow
@pytest.mark.parametrize("solver", [em.GaussNewton(), em.LevenbergMarquardt()])
def test_least_squares_with_regularizers_on_a_mesh_with_explicit_axes(solver):
    """From a review: on an Explicit mesh the split residuals of a sharded term
    did not join a regularizer's (`Flux`: a length the axis does not divide;
    `TSV`: "All operands should have the same sharding"), so `residuals`,
    `residual_jacobian`, Gauss-Newton and Levenberg-Marquardt failed; nor did a
    plain data term's. Now the same values as unsharded."""
    plain = {c.name: c for c in DATA_TERMS}["amp"].build("direct")
    other = {c.name: c for c in DATA_TERMS}["cphase"].build("direct")
    model = em.PixelImage.from_image(positive_image(seed=3), GRID, transform="identity")
    mesh = _explicit_mesh()
    for rest in (em.Flux(1.0), em.TSV(GRID), other):
        want_obj = plain + 0.5 * rest
        got_obj = em.ShardedChi2(plain, mesh) + 0.5 * rest
        res = eqx.filter_jit(lambda o, m: o.residuals(m))
        # The sharded term's padding rows add exact zeros; the rest in order.
        got_r, want_r = (
            np.asarray(res(got_obj, model)),
            np.asarray(res(want_obj, model)),
        )
        assert len(got_r) > len(want_r)
        assert_allclose(got_r[got_r != 0], want_r[want_r != 0], rtol=1e-12)
        want = em.solve(want_obj, model, solver, max_steps=2)
        got = em.solve(got_obj, model, solver, max_steps=2)
        assert got.reason == want.reason and int(got.steps) == int(want.steps)
        # Rounding (another summation order) amplified by near-singular steps.
        assert_allclose(got.value, want.value, rtol=1e-7)


def test_gain_corrected_term_in_an_objective_on_a_mesh_with_explicit_axes():
    """From a review: `ShardedChi2(GainCorrected(term))` inside an objective (its
    visibilities from the objective's shared transform) failed under `jit` on an
    Explicit mesh (the gain lookup, a gather with split indices); the joint image
    and gains gradient now equals the unsharded one."""

    data = load_day(DAY_100)
    gains = em.StationGains.from_data(data)
    gains = eqx.tree_at(lambda g: g.phase, gains, gains.phase + 0.2)
    term = em.GainCorrected(em.VisChi2.from_data(data, M87_GRID), gains)
    x = jnp.asarray(em.GaussianImage(M87_GRID, 0.6, em.uas_to_rad(40.0))())
    loss = eqx.filter_jit(
        eqx.filter_value_and_grad(lambda xg, o: em.with_gains(o, xg[1])(xg[0]))
    )
    for mesh in (mesh_of(4), _explicit_mesh()):
        got = loss((x, gains), em.ShardedChi2(term, mesh) + em.Flux(0.6))
        want = loss((x, gains), term + em.Flux(0.6))
        assert_allclose(got[0], want[0], rtol=1e-13)
        assert_allclose(
            got[1][0], want[1][0], rtol=1e-11, atol=1e-11 * abs(want[1][0]).max()
        )
        assert_allclose(got[1][1].phase, want[1][1].phase, rtol=1e-9, atol=1e-9)


class _Rows(NamedTuple):
    """Data as "anything with u, v, vis, sigma" (a pytree of arrays)."""

    u: np.ndarray
    v: np.ndarray
    vis: np.ndarray
    sigma: np.ndarray


def test_from_data_with_several_values_per_row_equals_wrapping():
    """A `VisChi2` on `(n, k)` points counts `n·k` values: `from_data` kept the
    data's row count as N and its padding mask zeroed a column of the last real
    row instead of the padding row (χ² 3.50 instead of 1.63)."""
    rng = np.random.default_rng(1)
    n, k = 5, 2
    u, v = rng.uniform(-0.3, 0.3, (2, n, k)) / GRID.psize
    vis = rng.standard_normal((n, k)) + 1j * rng.standard_normal((n, k))
    data = _Rows(u, v, vis, rng.uniform(0.5, 1.5, (n, k)))
    plain = em.VisChi2.from_data(data, GRID)
    built = em.ShardedChi2.from_data(em.VisChi2, data, GRID, mesh=mesh_of(3))
    assert int(built.n_rows) == int(plain.n_rows) == n * k
    assert np.all(np.asarray(built.weight)[n:] == 0)
    assert np.all(np.asarray(built.weight)[:n] > 0)
    check_same(built, plain, jnp.asarray(IMAGES[0]))


def test_from_data_refuses_data_whose_rows_it_cannot_take():
    import types

    u, v, amp, sigma = products()["amp"]
    data = types.SimpleNamespace(u=u, v=v, amp=amp, sigma=sigma)
    em.ShardedChi2(em.AmpChi2.from_data(data, GRID), mesh_of(3))  # wrapping works
    with pytest.raises(TypeError, match="`data` \\(SimpleNamespace\\).*NamedTuple"):
        em.ShardedChi2.from_data(em.AmpChi2, data, GRID, mesh=mesh_of(3))
    # No rows at all: "use a smaller mesh" was no fix on a 1-device mesh.
    full = em.amplitudes(em.load_uvfits(em.example_uvfits()))
    empty = jax.tree.map(lambda x: x[:0], full)
    with pytest.raises(ValueError, match="`data` have no rows"):
        em.ShardedChi2.from_data(em.AmpChi2, empty, GRID, mesh=mesh_of(1))


@pytest.mark.slow
def test_survey_runs_on_the_devices_of_the_sharded_terms():
    """A term on 2 of the 8 devices: `survey(devices=None)` splits configurations
    over those 2 (it failed in JAX with "incompatible devices"), other devices are
    refused naming both sets, and the term's split leaves stay split (they were
    replicated onto every device: the whole dense matrix on each)."""
    plain = {c.name: c for c in DATA_TERMS}["amp"].build("direct")
    model = em.PixelImage.from_image(positive_image(seed=3), GRID, transform="identity")
    sharded = em.ShardedChi2(plain, mesh_of(2))
    objs = [sharded + w * em.TSV(GRID) for w in (0.1, 1.0, 3.0)]
    full = sharded.term.forward.a_re.shape
    copies = []

    def callback(i, sol):  # while the survey's placed leaves are alive
        copies.extend(
            x.sharding
            for x in jax.live_arrays()
            if x.shape == full and len(x.sharding.device_set) > 1
        )

    res = em.survey(objs, model, max_steps=3, callback=callback)
    for i, o in enumerate(objs):
        assert_allclose(res[i].value, em.solve(o, model, max_steps=3).value, rtol=1e-9)
    assert copies and all(not s.is_fully_replicated for s in copies)
    with pytest.raises(ValueError, match="`devices` .* not the devices the sharded"):
        em.survey(objs, model, max_steps=3, devices=jax.devices()[2:4])


def test_a_sharded_term_pads_to_a_multiple_of_its_mesh_and_stacks():
    plain = {c.name: c for c in DATA_TERMS}["amp"].build()
    sharded = em.ShardedChi2(plain, mesh_of(4))
    assert sharded.pad_rows(sharded.rows) is sharded
    longer = sharded.pad_rows(sharded.rows + 4)
    assert longer.rows == sharded.rows + 4 and longer.mesh is sharded.mesh
    assert np.all(np.asarray(longer.weight)[plain.rows :] == 0.0)
    assert not longer.term.weight.sharding.is_fully_replicated  # split again
    check_same(longer, plain, jnp.asarray(IMAGES[0]))
    with pytest.raises(ValueError, match=r"`length` \(\d+\) is not a multiple .*4"):
        sharded.pad_rows(sharded.rows + 3)
    stacked = em.pad_and_stack([sharded, sharded])
    assert stacked.weight.shape == (2, sharded.rows)


@pytest.mark.slow
def test_survey_over_data_sets_of_sharded_terms_sharing_a_transform():
    """Two stretches of a day (different row counts), each an amplitude and a
    closure-phase term split over 2 devices and sharing one transform: a
    `ShardedChi2` refused `pad_rows`, so `pad_to_match` of such objectives failed
    and `0.5 * ShardedChi2(...)` could not be surveyed over data sets. Padded, each
    objective equals its unsharded one and the survey equals single solves."""

    day = load_day(DAY_100)
    t = np.asarray(day.time)
    span = t.max() - t.min()
    sets = [
        day.select_time(t.min(), t.min() + 0.6 * span),
        day.select_time(t.min() + 0.3 * span, t.max()),
    ]
    grid = em.ImageGrid.from_fov(16, 128.0)
    mesh = mesh_of(2)

    def build(d, sharded, compose="weighted"):
        amp = em.AmpChi2.from_data(em.amplitudes(d), grid, forward="direct")
        cp = em.ClosurePhaseChi2.from_data(em.closure_phases(d), grid, forward="direct")
        if sharded:
            amp, cp = em.ShardedChi2(amp, mesh), em.ShardedChi2(cp, mesh)
        if compose == "list":
            return em.Objective([amp, cp, em.TSV(grid)], [0.5, 1.0, 10.0])
        return 0.5 * amp + cp + 10 * em.TSV(grid)

    plain = [build(d, False) for d in sets]
    objectives = em.pad_to_match([build(d, True) for d in sets])
    assert len({o.shared[0].n_points for o in objectives}) == 1
    assert len({o.terms[0].rows for o in objectives}) == 1
    model = em.PixelImage.from_image(
        em.GaussianImage(grid, 0.6, em.uas_to_rad(40.0))(), grid
    )
    listed = em.pad_to_match([build(d, True, "list") for d in sets])
    for o, o2, p in zip(objectives, listed, plain):
        assert_allclose(o(model), p(model), rtol=1e-12)
        assert_allclose(o2(model), p(model), rtol=1e-12)
    res = em.survey(objectives, model, max_steps=4)
    for k, p in enumerate(plain):
        assert_allclose(res[k].value, em.solve(p, model, max_steps=4).value, rtol=1e-9)


_TRACES = [0]


class _CountedAmp(em.AmpChi2):
    """Counts how often its χ² is traced (or run eagerly)."""

    def chi2_from_vis(self, vis):
        _TRACES[0] += 1
        return super().chi2_from_vis(vis)


@pytest.mark.slow
def test_eager_calls_compile_once():
    """Called outside `jit` (a term checked in a notebook, an eager `jax.grad`),
    `shard_map` ran its body one operation at a time on every call: 2-5 s a call
    for an M87 term on two devices. The sharded modules' calls are compiled once
    per structure: repeated eager calls run no Python of the term again."""
    u, v, amp, sigma = products()["amp"]
    mesh = mesh_of(2)
    term = _CountedAmp(em.DirectFT(GRID, u, v), amp, sigma)
    sharded = em.ShardedChi2(term, mesh)
    cphase = {c.name: c for c in DATA_TERMS}["cphase"].build("direct")
    obj = sharded + em.ShardedChi2(cphase, mesh) + em.TSV(GRID)
    plain = term + cphase + em.TSV(GRID)
    x = jnp.asarray(IMAGES[0])
    grad = jax.grad(lambda x, t: t(x))
    calls = [
        lambda: sharded(x),
        lambda: grad(x, sharded),
        lambda: obj(x),
        lambda: grad(x, obj),
        lambda: sharded.residuals(x),
        lambda: em.ShardedForward(term.forward, mesh)(x),
    ]
    for call in calls:
        call()
    first = _TRACES[0]
    for call in calls:
        call()
    assert _TRACES[0] == first
    assert_allclose(obj(x), plain(x), rtol=VALUE_RTOL)
    assert_allclose(grad(x, obj), grad(x, plain), rtol=GRAD_RTOL)


def test_a_sharded_forward_takes_points():
    plain = em.DirectFT(GRID, *products()["amp"][:2])
    sharded = em.ShardedForward(plain, mesh_of(3))
    index = np.array([4, 0, 9, 4, 2])
    taken = sharded.take(index)
    assert taken.n_points == 5 and taken.mesh is sharded.mesh
    image = jnp.asarray(IMAGES[0])
    assert_allclose(taken(image), plain.take(index)(image), rtol=1e-13)
    with pytest.raises(ValueError, match=r"`index` must lie in \[0, \d+\)"):
        sharded.take(np.array([plain.u.shape[0]]))
    with pytest.raises(TypeError, match="`index` must be integer"):
        sharded.take(np.array([0.5]))
    with pytest.raises(TypeError, match="`index` must be concrete"):
        jax.jit(lambda i: sharded.take(i))(jnp.arange(3))


def test_training_loop_recipe_of_the_docs_compiles_once():
    """docs/sharding.md's recipe for a training loop of your own: the model and the
    optimiser state placed on the mesh, replicated, arrays only (a model with a
    function leaf goes too). Then one trace over four steps; with the state left on
    one device the second step traced again (from a user walkthrough, against the
    docs' "place the model first")."""
    import optax

    mesh = jax.make_mesh((4,), ("rows",), devices=jax.devices()[:4])
    case = next(c for c in DATA_TERMS if c.name == "cphase")
    objective = em.ShardedChi2(case.build("direct"), mesh) + em.TV(GRID)

    class Scaled(em.AbstractImageModel):
        grid: em.ImageGrid
        log_image: jax.Array
        squash: object  # a function leaf: `jax.device_put` refuses it

        def __call__(self):
            return self.squash(self.log_image)

    opt = optax.adam(1e-2)

    def run(model, place_state):
        traces = [0]

        @eqx.filter_jit
        def step(m, s, o):
            traces[0] += 1
            loss, g = eqx.filter_value_and_grad(lambda m, o: o(m))(m, o)
            u, s = opt.update(g, s, eqx.filter(m, eqx.is_inexact_array))
            return eqx.apply_updates(m, u), s, loss

        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        state = opt.init(eqx.filter(model, eqx.is_inexact_array))
        if place_state:  # the docs' three lines
            arrays, static = eqx.partition((model, state), eqx.is_array)
            model, state = eqx.combine(jax.device_put(arrays, replicated), static)
        else:
            arrays, static = eqx.partition(model, eqx.is_array)
            model = eqx.combine(jax.device_put(arrays, replicated), static)
        for _ in range(4):
            model, state, loss = step(model, state, objective)
        assert np.isfinite(float(loss))
        return traces[0]

    x = np.log(positive_image())
    assert run(Scaled(GRID, jnp.asarray(x), jnp.exp), True) == 1
    assert run(em.PixelImage.from_image(jnp.exp(x), GRID), True) == 1
    assert run(Scaled(GRID, jnp.asarray(x), jnp.exp), False) == 2


_llg = eqx.filter_jit(jax.value_and_grad(lambda x, t: t.log_likelihood(x)))


@pytest.mark.parametrize("explicit", [False, True], ids=["auto", "explicit"])
@pytest.mark.parametrize("name", ["vis", "amp", "cphase"])
def test_log_likelihood_equals_the_unsharded_terms(name, explicit):
    """`ShardedChi2.log_likelihood` (what a `Posterior` over sharded data calls):
    the wrapped term's normalised log-likelihood, padding rows left out, value and
    gradient, on Auto and Explicit axes (7 devices: every term padded)."""
    case = next(c for c in DATA_TERMS if c.name == name)
    term = case.build("direct")
    mesh = _explicit_mesh(7) if explicit else mesh_of(7)
    sharded = em.ShardedChi2(term, mesh)
    assert sharded.term.rows > term.rows  # padded
    x = jnp.asarray(IMAGES[0])
    val, grad = _llg(x, sharded)
    ref_val, ref_grad = _llg(x, term)
    assert_allclose(val, ref_val, rtol=VALUE_RTOL)
    assert_allclose(grad, ref_grad, rtol=GRAD_RTOL)


def test_from_data_of_real_closure_products_equals_the_plain_terms():
    """`from_data` of every kind of the multi-process test's problem on one
    process (3 devices): the closure terms' optional fields that are None (a
    whitening for correlated closures) do not shift the leaves; value and
    gradient equal the plain terms' (this failed with an IndexError)."""
    from tests.multihost.problem import DATA, data_terms, image

    plain = data_terms("direct", sharded=False)
    mesh = mesh_of(3)
    data = em.load_uvfits(DATA).scan_average()
    products = (
        em.amplitudes(data),
        em.closure_phases(data),
        em.log_closure_amplitudes(data),
    )
    x = jnp.asarray(image())
    for term, product in zip(plain, products):
        built = em.ShardedChi2.from_data(
            type(term), product, term.forward.grid, mesh=mesh, forward="direct"
        )
        check_same(built, term, x, value_rtol=1e-13, grad_rtol=1e-12)


_vg_model = eqx.filter_jit(eqx.filter_value_and_grad(lambda m, t: t(m)))


@pytest.mark.parametrize("name", ["vis", "cphase"])
def test_geometric_model_keeps_its_analytic_visibilities(name):
    """A geometric model given to a sharded term: each device's rows get its
    analytic visibilities, as the unsharded term's do (value and gradient w.r.t.
    the model's parameters), not those of its render on the grid; alone and in
    an objective."""
    case = next(c for c in DATA_TERMS if c.name == name)
    term = case.build("direct")
    sharded = em.ShardedChi2(term, mesh_of(3))
    ring = em.MRing(GRID, 1.3, em.uas_to_rad(11.0), [0.3 - 0.2j])
    val, grad = _vg_model(ring, sharded)
    ref_val, ref_grad = _vg_model(ring, term)
    assert_allclose(val, ref_val, rtol=VALUE_RTOL)
    for g, r in zip(jax.tree.leaves(grad), jax.tree.leaves(ref_grad)):
        assert_allclose(g, r, rtol=GRAD_RTOL)
    assert abs(float(val) / float(term(np.asarray(ring()))) - 1) > 1e-6
    objective = 2.0 * sharded + em.TV(GRID)
    assert_allclose(objective(ring), 2.0 * ref_val + em.TV(GRID)(ring), rtol=1e-13)
