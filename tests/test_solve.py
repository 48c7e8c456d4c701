"""`solve` and the solvers: each reaches the closed-form minimum of a small convex
problem; vmap equals single solves; new weights / data / max_steps / tolerances do
not recompile; masked pixel images; the chunked Jacobian; the scipy bridge; errors.
"""

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import eqmodels as em
from eqmodels._solvers import _solve
from eqmodels._solvers._residuals import objective_residuals
from tests.helpers import assert_allclose, run_without_x64
from tests.reference import numpy_ft, regularizers as rr
from tests.unchecked import unchecked_error, unchecked_script


GRID = em.ImageGrid.from_fov(6, 128.0)
N_VIS = 50
W_TSV = 0.3


def _data(seed=0):
    rng = np.random.default_rng(seed)
    u = rng.uniform(-0.35, 0.35, N_VIS) / GRID.psize
    v = rng.uniform(-0.35, 0.35, N_VIS) / GRID.psize
    a = numpy_ft.dft_matrix(*GRID.shape, GRID.psize, u, v)
    truth = rng.uniform(0.2, 1.0, GRID.npix)
    sigma = rng.uniform(0.05, 0.1, N_VIS)
    vis = a @ truth + sigma * (
        rng.standard_normal(N_VIS) + 1j * rng.standard_normal(N_VIS)
    )
    return u, v, a, vis, sigma


U, V, A, VIS, SIGMA = _data()


def _term(vis=VIS):
    return em.VisChi2(em.DirectFT(GRID, U, V), vis, SIGMA)


def closed_form(w_tsv=W_TSV, vis=VIS, mask=None):
    """argmin Σ|Ax − V|²/σ²/(2N) + w·TSV(x) from the normal equations (numpy)."""
    wt = 1 / SIGMA**2
    h = np.real(A.conj().T @ (wt[:, None] * A)) / N_VIS
    b = np.real(A.conj().T @ (wt * vis)) / N_VIS
    # TSV is quadratic: its Hessian's columns are the gradients at unit images / 2·2.
    eye = np.eye(GRID.npix)
    h_tsv = np.stack(
        [rr.tsv(e.reshape(GRID.shape))[1].ravel() for e in eye], axis=1
    )  # ∇TSV(x) = H x
    h = h + w_tsv * h_tsv
    idx = np.arange(GRID.npix) if mask is None else np.flatnonzero(mask)
    return idx, np.linalg.solve(h[np.ix_(idx, idx)], b[idx])


def start(mask=None):
    return em.PixelImage(
        GRID, np.full(GRID.shape, 0.5), transform="identity", mask=mask
    )


GRADIENT_SOLVERS = [
    (em.LBFGS(linesearch="zoom"), 200, 1e-7),
    (em.LBFGS(), 300, 1e-7),
    (em.Adam(0.02), 4000, 2e-3),
    (em.OptaxSolver(optax.adam(0.02)), 4000, 2e-3),
]


@pytest.mark.parametrize(
    "solver,steps,rtol", GRADIENT_SOLVERS, ids=lambda x: repr(x)[:40]
)
def test_gradient_solvers_reach_the_closed_form_minimum(solver, steps, rtol):
    obj = _term() + W_TSV * em.TSV(GRID)
    sol = em.solve(obj, start(), solver, max_steps=steps, ftol=0.0, gtol=1e-12)
    _, x_star = closed_form()
    assert_allclose(sol.model.params, x_star, rtol=rtol)
    f_star = float(obj(jnp.asarray(x_star.reshape(GRID.shape))))
    assert f_star * (1 - 1e-12) <= float(sol.value) <= f_star * (1 + rtol)
    assert set(sol.report) == {"vis", "tv2"}
    # The report is the terms' values at the final model (L-BFGS carries it from
    # the evaluation that accepted the model).
    final = obj.report(sol.model)
    for name in final:
        assert_allclose(sol.report[name], final[name], rtol=1e-12)
    assert int(sol.steps) <= steps


@pytest.mark.parametrize(
    "solver", [em.GaussNewton(chunk_size=16), em.LevenbergMarquardt(chunk_size=7)]
)
def test_least_squares_solvers_reach_the_lstsq_minimum(solver):
    term = _term()
    sol = em.solve(term, start(), solver, max_steps=50)
    wt = 1 / SIGMA / np.sqrt(2 * N_VIS)
    a = np.concatenate([wt[:, None] * A.real, wt[:, None] * A.imag])
    b = np.concatenate([wt * VIS.real, wt * VIS.imag])
    x_star = np.linalg.lstsq(a, b, rcond=None)[0]
    assert_allclose(sol.model.params, x_star, rtol=1e-8)
    assert bool(sol.converged), sol.reason
    if isinstance(solver, em.GaussNewton):
        assert int(sol.steps) <= 2  # linear least squares: one step (+ the check)


def test_scipy_bridge_reaches_the_closed_form_minimum():
    pytest.importorskip("scipy")
    obj = _term() + W_TSV * em.TSV(GRID)
    sol = em.solve_scipy(obj, start(), max_steps=500, ftol=1e-15, gtol=1e-12)
    _, x_star = closed_form()
    assert_allclose(sol.model.params, x_star, rtol=1e-6)
    assert int(sol.stats["evaluations"]) >= int(sol.steps)


def test_scipy_bridge_stop_reasons():
    """The stop reason follows scipy's status, whatever its message's wording
    (scipy 1.15 changed `REL_REDUCTION_OF_F` to `RELATIVE REDUCTION OF F`, which
    was read as `max_steps`)."""
    pytest.importorskip("scipy")
    obj = _term() + W_TSV * em.TSV(GRID)
    sol = em.solve_scipy(obj, start(), max_steps=500, ftol=1e-6, gtol=1e-12)
    assert sol.reason == "ftol" and bool(sol.converged), sol.stats["message"]
    assert int(sol.steps) < 500
    sol = em.solve_scipy(obj, start(), max_steps=500, ftol=0.0, gtol=1e-3)
    assert sol.reason == "gtol" and bool(sol.converged), sol.stats["message"]
    sol = em.solve_scipy(obj, start(), max_steps=3, ftol=0.0, gtol=0.0)
    assert sol.reason == "max_steps" and not bool(sol.converged)
    assert int(sol.steps) == 3


def _ring_problem():
    """A ring's visibilities, and a start 10-25 % off (parameters in radians)."""
    grid = em.ImageGrid.from_fov(16, 160.0)
    rng = np.random.default_rng(0)
    u, v = rng.uniform(-0.3, 0.3, (2, 40)) / grid.psize
    fwd = em.DirectFT(grid, u, v)
    ring = em.RingImage(grid, 0.6, em.uas_to_rad(60.0), em.uas_to_rad(15.0))
    term = em.VisChi2(fwd, fwd(ring()), np.full(40, 0.01))
    return term, em.RingImage(grid, 0.5, em.uas_to_rad(50.0), em.uas_to_rad(20.0))


def test_lbfgs_first_step_backtracks_to_the_parameters_scale():
    """The first trial step has unit length: 1 rad of a ring's diameter. 20
    backtracks (halvings at least) did not bring it to the µas scale and the
    default L-BFGS stopped at its start (`steps` 0, `linesearch`); before any
    curvature is known it may backtrack 64 times."""
    term, start_ = _ring_problem()
    sol = em.solve(term, start_, max_steps=100)
    assert int(sol.steps) > 5
    assert float(sol.value) < 0.5 * float(term(start_))
    assert_allclose(sol.value, term(sol.model), rtol=1e-12)


@pytest.mark.parametrize("max_steps", [1, 20])
def test_a_failed_zoom_search_never_accepts_a_rise(max_steps):
    """Optax's zoom search, when none of its trials decreases the objective,
    returns its last trial anyway: on this ring (unit first step, 1 rad of
    diameter) it rose about 25-fold and the loop went on to report `ftol`,
    `converged`. The step is refused: the solve stops at the last point with
    `linesearch`, never above where it started."""
    term, start_ = _ring_problem()
    f0 = float(term(start_))
    sol = em.solve(term, start_, em.LBFGS(linesearch="zoom"), max_steps=max_steps)
    assert float(sol.value) <= f0 * (1 + 1e-12)
    assert_allclose(sol.value, term(sol.model), rtol=1e-12)
    if sol.reason == "linesearch":
        assert not bool(sol.converged)


def test_scipy_bridge_value_is_the_objective_at_the_model():
    """After an abnormal line search scipy returns the last accepted point with
    the last trial's value; `value` (and `report`) are the objective's at the
    returned model. A ring fitted in radians from 10-25 % off: scipy's first step
    has unit length (1 rad of diameter), so its line search fails."""
    pytest.importorskip("scipy")
    term, start_ = _ring_problem()
    obj = em.Objective([term])
    sol = em.solve_scipy(obj, start_, max_steps=50, maxls=20, maxcor=10)
    assert sol.reason == "linesearch", sol.stats["message"]
    assert_allclose(sol.value, term(sol.model), rtol=1e-14)
    assert_allclose(sol.report["vis"], term(sol.model), rtol=1e-14)


def test_masked_pixel_image():
    mask = np.zeros(GRID.shape, bool)
    mask[1:5, 1:5] = True
    obj = _term() + W_TSV * em.TSV(GRID)
    sol = em.solve(obj, start(mask), max_steps=200, ftol=0.0, gtol=1e-12)
    idx, x_star = closed_form(mask=mask)
    assert_allclose(sol.model.params, x_star, rtol=1e-7)
    np.testing.assert_array_equal(sol.model.indices, idx)
    assert np.all(np.asarray(sol.model())[~mask] == 0)


def test_changing_weights_data_steps_tolerances_does_not_recompile():
    obj = _term() + W_TSV * em.TSV(GRID)
    solver = em.LBFGS(linesearch="backtracking")
    em.solve(obj, start(), solver, max_steps=5)
    before = _solve.TRACE_COUNT[0]
    em.solve(obj.with_weights(jnp.array([2.0, 0.1])), start(), solver, max_steps=5)
    other = _term(VIS * 1.1) + W_TSV * em.TSV(GRID)
    em.solve(other, start(), solver, max_steps=7, ftol=1e-3, gtol=1e-4)
    em.solve(obj, start(), em.LBFGS(linesearch="backtracking"), max_steps=3)
    assert _solve.TRACE_COUNT[0] == before
    # ... and a new learning rate of Adam neither.
    em.solve(obj, start(), em.Adam(0.1), max_steps=3)
    n = _solve.TRACE_COUNT[0]
    em.solve(obj, start(), em.Adam(0.01), max_steps=4)
    assert _solve.TRACE_COUNT[0] == n


def test_a_weakly_typed_initial_leaf_does_not_recompile():
    """`eqx.tree_at(..., jnp.asarray(0.5))` gives a weakly typed leaf: another
    argument type to the compiled solve, which traced again (from a review)."""
    grid = em.ImageGrid.from_fov(8, 64.0)
    model = em.GaussianImage(grid, 0.6, em.uas_to_rad(20.0))
    fwd = em.DirectFT(grid, U, V)
    obj = 1.0 * em.VisChi2(fwd, fwd(model()), np.full(U.shape, 0.01))
    em.solve(obj, model, em.Adam(1e-3), max_steps=2)
    before = _solve.TRACE_COUNT[0]
    weak = eqx.tree_at(lambda m: m.flux, model, jnp.asarray(0.5))
    assert weak.flux.weak_type
    sol = em.solve(obj, weak, em.Adam(1e-3), max_steps=2)
    assert _solve.TRACE_COUNT[0] == before
    assert not sol.model.flux.weak_type


def test_params_given_as_a_filter_pytree():
    """`params=` is an `eqx.partition` filter, so a pytree of booleans too (the
    weak-type cast called it as a function: `PixelImage.__call__() takes 1
    positional argument`, from a review)."""
    obj = _term() + W_TSV * em.TSV(GRID)
    spec = jax.tree.map(eqx.is_inexact_array, start())
    for solver in (em.LBFGS(), em.GaussNewton()):
        got = em.solve(obj, start(), solver, params=spec, max_steps=5)
        want = em.solve(obj, start(), solver, max_steps=5)
        assert_allclose(got.value, want.value, rtol=1e-12)


class _Logged(eqx.Module):
    """A user's objective that names its terms and reports them with its value."""

    objective: em.Objective

    @property
    def names(self):
        return self.objective.names

    def value_and_report(self, model):
        return self.objective.value_and_report(model)

    def __call__(self, model):
        return self.objective(model)


def test_an_objective_with_names_and_value_and_report_is_reported_in_the_loop():
    """`solve`'s L-BFGS reports every objective that has `names` and
    `value_and_report` from the evaluation it already makes (not only an
    `Objective`), traced once: the same value and report as the objective's."""
    obj = _term() + W_TSV * em.TSV(GRID)
    want = em.solve(obj, start(), max_steps=20)
    before = _solve.TRACE_COUNT[0]
    got = em.solve(_Logged(obj), start(), max_steps=20)
    assert _solve.TRACE_COUNT[0] == before + 1
    assert_allclose(got.value, want.value, rtol=1e-12)
    assert set(got.report) == set(obj.names)
    for k in obj.names:
        assert_allclose(got.report[k], want.report[k], rtol=1e-12)


class _Calls:
    n = 0


class _Counted(eqx.Module):
    """An objective that counts how often it is traced (a Python side effect,
    run once per copy of it in a compiled program)."""

    objective: em.Objective
    calls: _Calls = eqx.field(static=True)

    def __call__(self, model):
        self.calls.n += 1
        return self.objective(model)


@pytest.mark.parametrize(
    "solver,copies",
    [(em.LBFGS(), 1), (em.Adam(0.02), None), (em.LevenbergMarquardt(), None)],
    ids=["lbfgs", "adam", "lm"],
)
def test_initial_value_is_the_objective_at_the_start(solver, copies):
    """`stats["initial_value"]` is the objective at the initial model, for every
    solver (numpy's, from the normal-equation matrices); L-BFGS takes it from its
    first evaluation, which is at the start, so its program holds one copy of the
    objective (its value and gradient), not a second one for the start."""
    obj = _term() + W_TSV * em.TSV(GRID)
    x0 = np.full(GRID.npix, 0.5)
    resid = A @ x0 - VIS
    want = np.sum(np.abs(resid) ** 2 / SIGMA**2) / (2 * N_VIS) + W_TSV * float(
        rr.tsv(x0.reshape(GRID.shape))[0]
    )
    calls = _Calls()
    counted = obj if copies is None else _Counted(obj, calls)
    for max_steps in (0, 7):
        sol = em.solve(counted, start(), solver, max_steps=max_steps, ftol=0.0)
        assert_allclose(sol.stats["initial_value"], want, rtol=1e-12)
        assert sol.stats["initial_value"].dtype == jnp.float64
        if max_steps == 0:  # no step taken: nothing worsened, not even by rounding
            assert not bool(sol.worsened)
    if copies is not None:
        # Traced once per copy in the program (max_steps is traced: one program).
        assert calls.n == copies


def test_zoom_steps_within_rounding_are_not_a_failed_search():
    """Optax's zoom search accepts a step on its approximate Wolfe condition,
    which may raise the value by rounding; only a search that reports failure
    stops the solve (the first check took every rise for a failure: 5 of 6 float32
    solves stopped on `linesearch`, from a review)."""
    reasons = []
    for seed in range(6):
        rng = np.random.default_rng(seed)
        u, v = (rng.uniform(-0.35, 0.35, (2, 50)) / GRID.psize).astype(np.float32)
        sigma = rng.uniform(0.05, 0.1, 50).astype(np.float32)
        fwd = em.DirectFT(GRID, u, v, dtype=jnp.float32)
        truth = rng.uniform(0.2, 1.0, GRID.shape).astype(np.float32)
        noise = rng.standard_normal(50) + 1j * rng.standard_normal(50)
        vis = (np.asarray(fwd(jnp.asarray(truth))) + sigma * noise).astype(np.complex64)
        obj = em.VisChi2(fwd, vis, sigma) + 0.3 * em.TSV(GRID)
        model = em.PixelImage(
            GRID, np.full(GRID.shape, 0.5, np.float32), transform="identity"
        )
        sol = em.solve(obj, model, em.LBFGS(linesearch="zoom"), max_steps=300)
        reasons.append(sol.reason)
    assert reasons.count("linesearch") == 0, reasons


def test_forward_mode_through_a_gauss_newton_solve():
    """The linear solve's `custom_vmap` (no batched-Cholesky deadlock) sent
    `jax.jacfwd` into infinite recursion; it has a JVP rule of its own."""
    obj = _term() + W_TSV * em.TSV(GRID)

    def value(scale):
        model = jax.tree.map(
            lambda x: x * scale if eqx.is_inexact_array(x) else x, start()
        )
        return em.solve(obj, model, em.GaussNewton(), max_steps=2).value

    fd = (value(1.0 + 1e-6) - value(1.0 - 1e-6)) / 2e-6
    assert_allclose(jax.jacfwd(value)(1.0), fd, rtol=1e-4, atol=1e-8)


def test_batched_spd_solve_is_serial_only_in_cpu_programs():
    """The serial solve (no batched-Cholesky deadlock on CPU devices) is chosen by
    the platform a program is compiled for, not by the default backend: a survey
    on a GPU machine's CPU devices needs it, its GPU programs do not."""
    from eqmodels._solvers._solve import spd_solve

    a = jnp.eye(3)[None] * jnp.arange(1.0, 5.0)[:, None, None]
    b = jnp.ones((4, 3))
    assert_allclose(jax.vmap(spd_solve)(a, b), b / jnp.arange(1.0, 5.0)[:, None])
    text = {
        platform: jax.export.export(jax.jit(jax.vmap(spd_solve)), platforms=[platform])(
            a, b
        ).mlir_module()
        for platform in ("cpu", "cuda")
    }
    assert "stablehlo.while" in text["cpu"]
    assert "stablehlo.while" not in text["cuda"]


def test_max_steps_and_reasons():
    obj = _term() + W_TSV * em.TSV(GRID)
    sol = em.solve(obj, start(), max_steps=3, ftol=0.0, gtol=0.0)
    assert int(sol.steps) == 3 and sol.reason == "max_steps" and not sol.converged
    sol = em.solve(obj, start(), max_steps=0)
    assert int(sol.steps) == 0
    assert_allclose(sol.value, obj(start()))
    sol = em.solve(obj, start(), max_steps=500, gtol=1e-6, ftol=0.0)
    assert sol.reason == "gtol" and bool(sol.converged)
    # A step that increases the objective (Adam with too large a rate) is not
    # convergence by `ftol`, whatever `ftol` is.
    for ftol in (0.0, 1e-3):
        sol = em.solve(obj, start(), em.Adam(5.0), max_steps=6, ftol=ftol)
        assert float(sol.value) > float(obj(start()))
        assert sol.reason == "max_steps" and not bool(sol.converged)


@pytest.mark.parametrize("solver", ["lbfgs"])
def test_solve_under_vmap_equals_single_solves(solver):
    obj = _term() + W_TSV * em.TSV(GRID)
    weights = jnp.array([[1.0, 0.1], [1.0, 0.3], [0.5, 1.0]])

    def one(w):
        return em.solve(obj.with_weights(w), start(), solver, max_steps=60)

    batched = jax.vmap(one)(weights)
    for i, w in enumerate(weights):
        single = one(w)
        assert_allclose(batched.model.params[i], single.model.params, rtol=1e-9)
        assert int(batched.steps[i]) == int(single.steps)
        assert_allclose(batched.report["vis"][i], single.report["vis"], rtol=1e-9)


@pytest.mark.slow
def test_residual_jacobian_chunks_agree():
    term = _term()
    model = em.PixelImage.from_image(np.full(GRID.shape, 0.5), GRID)  # log pixels
    r, j_full = em.residual_jacobian(term, model, chunk_size=10_000)
    for chunk in (7, "auto"):
        r2, j = em.residual_jacobian(term, model, chunk_size=chunk)
        assert_allclose(j, j_full, rtol=1e-13)
    # 2 Jᵀ r is the gradient of Σ r² = χ² (an independent autodiff path).
    g = eqx.filter_grad(lambda m: term(m))(model).params
    assert_allclose(2 * j_full.T @ r, g, rtol=1e-11)
    assert_allclose(jnp.sum(r * r), term(model), rtol=1e-12)
    # More residuals than parameters: forward mode, same Jacobian.
    mask = np.zeros(GRID.shape, bool)
    mask[0, :4] = True
    small = em.PixelImage(GRID, np.full(4, -0.5), mask=mask)
    r3, j3 = em.residual_jacobian(term, small, chunk_size=3)
    jac = jax.jacfwd(
        lambda p: objective_residuals(term, eqx.tree_at(lambda m: m.params, small, p))
    )(small.params)
    assert_allclose(j3, jac, rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize(
    "solver", [em.GaussNewton(), em.LevenbergMarquardt()], ids=["gn", "lm"]
)
def test_least_squares_fit_of_a_parametric_model_through_a_nufft(solver):
    """A parametric model has fewer parameters than residuals, so its Jacobian is
    taken in forward mode, which the NUFFT supports: the Jacobian equals the dense
    transform's, and Gauss-Newton / Levenberg-Marquardt recover noiseless truth."""
    grid = em.ImageGrid.from_fov(16, 128.0)
    truth = em.GaussianImage(
        grid,
        0.8,
        em.uas_to_rad(30.0),
        fwhm_minor=em.uas_to_rad(20.0),
        angle=0.4,
        x0=em.uas_to_rad(6.0),
        y0=em.uas_to_rad(-4.0),
    )
    rng = np.random.default_rng(3)
    u, v = rng.uniform(-0.3, 0.3, (2, 80)) / grid.psize
    a = numpy_ft.dft_matrix(*grid.shape, grid.psize, u, v)
    vis = a @ np.asarray(truth()).ravel()
    sigma = np.full(80, 0.01)
    start_model = em.GaussianImage(
        grid, 0.6, em.uas_to_rad(40.0), fwhm_minor=em.uas_to_rad(35.0), angle=0.2
    )
    terms = {
        name: em.VisChi2(fwd(grid, u, v), vis, sigma)
        for name, fwd in (("nufft", em.NUFFT), ("direct", em.DirectFT))
    }
    (r, jac), (r_ref, jac_ref) = (
        em.residual_jacobian(t, start_model) for t in terms.values()
    )
    assert jac.shape == (160, 6)
    assert_allclose(r, r_ref, rtol=1e-9, atol=1e-12)
    assert_allclose(jac, jac_ref, rtol=1e-8, atol=1e-10 * float(jnp.abs(jac_ref).max()))
    sol = em.solve(terms["nufft"], start_model, solver, max_steps=40)
    assert sol.converged, sol.reason
    assert_allclose(sol.model(), truth(), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    "solver", [em.GaussNewton(), em.LevenbergMarquardt()], ids=["gn", "lm"]
)
def test_least_squares_solvers_take_tsv_and_flux(solver):
    """TSV and Flux are sums of squares: they give residuals, and Gauss-Newton
    reaches the same closed-form minimum as the gradient solvers."""
    obj = _term() + W_TSV * em.TSV(GRID)
    sol = em.solve(obj, start(), solver, max_steps=50)
    _, x_star = closed_form()
    assert_allclose(sol.model.params, x_star, rtol=1e-8)
    img = np.asarray(start()()) * np.linspace(0.5, 1.5, GRID.npix).reshape(GRID.shape)
    norm = dict(flux=0.7, beam=3 * GRID.psize, normalise=True)
    for reg in (
        em.TSV(GRID),
        em.TSV(GRID, **norm),
        em.Flux(0.7),
        em.Flux(0.7, normalise=True),
    ):
        r = np.asarray(reg.residuals(img))
        assert_allclose(np.sum(r * r), reg(img), rtol=1e-13, err=repr(reg))
    flux_obj = _term() + 3.0 * em.Flux(0.7)
    assert_allclose(
        np.sum(np.asarray(flux_obj.residuals(img)) ** 2), flux_obj(img), rtol=1e-13
    )


def test_least_squares_rejects_terms_without_residuals():
    obj = _term() + em.TV(GRID)
    with pytest.raises(TypeError, match="'tv'.*residuals"):
        em.solve(obj, start(), em.LevenbergMarquardt())


class _Bare(em.AbstractSolver):
    pass


class _OwnLeastSquares(em.AbstractLeastSquaresSolver):
    """Ran as Gauss-Newton without a word (from a review); now it must say its
    step (`init` and `step` are abstract)."""

    chunk_size: int = 4
    memory_budget: float = 1e9


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: em.solve(_term(), start(), "newton"), ValueError, "`solver`"),
        # Under the test-suite's runtime type checker the annotation catches these first
        # (its message names the parameter too).
        (lambda: em.solve(_term(), start(), 3), TypeError, "solver"),
        (lambda: em.solve(_term(), start(), max_steps=-1), ValueError, "`max_steps`"),
        (lambda: em.solve(_term(), start(), max_steps=2.5), TypeError, "max_steps"),
        (
            lambda: em.solve(_term(), start(), max_steps=2**31),
            ValueError,
            "`max_steps`",
        ),
        (lambda: em.solve(_term(), start(), ftol="x"), TypeError, "ftol"),
        (lambda: em.solve("chi2", start()), TypeError, "objective"),
        (
            lambda: em.solve(_term(), start(), params=lambda x: False),
            ValueError,
            "no parameters",
        ),
        # A solver must implement the protocol: refused at construction.
        (lambda: em.solve(_term(), start(), _Bare()), TypeError, "abstract"),
        (lambda: em.solve(_term(), start(), _OwnLeastSquares()), TypeError, "abstract"),
        (lambda: em.solve(_term(), start(), throw=1), TypeError, "throw"),
        (lambda: em.LBFGS(linesearch="wolfe"), ValueError, "`linesearch`"),
        # A numpy start image (a porting user's): its raw pixels would be fitted,
        # with nothing to keep them positive. A JAX array is taken as it is.
        *(
            (
                lambda fn=fn: fn(_term(), np.asarray(start()())),
                TypeError,
                r"`model` is a numpy array.*PixelImage.from_image.*jnp.asarray",
            )
            for fn in (em.solve, em.solve_scipy, lambda o, m: em.survey([o], m))
        ),
        (lambda: em.LBFGS(0), ValueError, "`memory_size`"),
        (
            lambda: em.Adam(np.array([1.0, 2.0])),
            (TypeError, ValueError),
            "learning_rate",
        ),
        (lambda: em.OptaxSolver("adam"), TypeError, "optimiser"),
        (lambda: em.GaussNewton(chunk_size=0), ValueError, "`chunk_size`"),
        (lambda: em.LevenbergMarquardt(chunk_size="big"), ValueError, "`chunk_size`"),
        (
            lambda: em.LevenbergMarquardt(memory_budget=-1),
            ValueError,
            "`memory_budget`",
        ),
        (lambda: em.LevenbergMarquardt(damping=0), ValueError, "`damping`"),
        (lambda: em.LevenbergMarquardt(damping=np.inf), ValueError, "`damping`"),
        (lambda: em.GaussNewton(jitter=-1e-12), ValueError, "`jitter`"),
        (lambda: em.GaussNewton(jitter=np.nan), ValueError, "`jitter`"),
        (lambda: em.Adam(-1e-2), ValueError, "`learning_rate`"),
        (lambda: em.Adam(np.nan), ValueError, "`learning_rate`"),
        (lambda: em.Adam(b1=1.0), ValueError, "`b1`"),
        (lambda: em.Adam(b2=-0.1), ValueError, "`b2`"),
        (lambda: em.solve(_term(), start(), ftol=-1.0), ValueError, "`ftol`"),
        (lambda: em.solve(_term(), start(), gtol=np.nan), ValueError, "`gtol`"),
        (lambda: em.solve_scipy(_term(), start(), ftol=-1.0), ValueError, "`ftol`"),
        (lambda: em.survey([_term()], start(), gtol=np.inf), ValueError, "`gtol`"),
        (lambda: em.solve_scipy(_term(), start(), maxcor=0), ValueError, "`maxcor`"),
        # Arrays: 0-d only; concrete values are checked like Python numbers.
        (
            lambda: em.solve(_term(), start(), max_steps=np.array([3])),
            TypeError,
            "max_steps",  # the type checker's message, or ours without it
        ),
        (
            lambda: em.solve(_term(), start(), max_steps=jnp.array(-3)),
            ValueError,
            "`max_steps` must be in",
        ),
        (
            lambda: em.solve(_term(), start(), gtol=np.complex128(1)),
            TypeError,
            "gtol",
        ),
        (
            lambda: em.solve(_term(), start(), ftol=jnp.array([1e-3])),
            TypeError,
            "ftol",
        ),
    ],
)
def test_errors_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize(
    "max_steps, ftol, gtol, exc, match",
    [
        (np.array([3]), 0.0, 0.0, TypeError, "`max_steps` must be an int"),
        (jnp.array(-3), 0.0, 0.0, ValueError, r"`max_steps` must be in \[0"),
        (3, 0.0, np.complex128(1), TypeError, "`gtol` must be a real scalar"),
        (3, jnp.array([1e-3]), 0.0, TypeError, "`ftol` must be a real scalar"),
    ],
)
def test_option_checks_without_the_type_checker(max_steps, ftol, gtol, exc, match):
    """Our own checks (what a user without runtime type checking sees): 1-element
    and negative `max_steps` arrays failed later with an unrelated message, or ran;
    a complex tolerance was taken with a warning."""
    with pytest.raises(exc, match=match):
        _solve.make_options(max_steps, ftol, gtol, jnp.float64)


def test_levenberg_marquardt_fits_a_parametric_model():
    """A parametric model whose parameters differ by 10 orders of magnitude (flux in
    Jy, widths and offsets in radians) recovers the model that made the data
    (Marquardt's scaling)."""
    grid = em.ImageGrid.from_fov(16, 160.0)
    rng = np.random.default_rng(0)
    u = rng.uniform(-0.3, 0.3, 40) / grid.psize
    v = rng.uniform(-0.3, 0.3, 40) / grid.psize
    truth = em.GaussianImage(
        grid,
        0.6,
        em.uas_to_rad(40.0),
        fwhm_minor=em.uas_to_rad(30.0),
        angle=0.3,
        x0=em.uas_to_rad(5.0),
        y0=em.uas_to_rad(-3.0),
    )
    fwd = em.DirectFT(grid, u, v)
    term = em.VisChi2(fwd, fwd(truth()), np.full(40, 0.01))
    start = em.GaussianImage(
        grid, 0.5, em.uas_to_rad(35.0), fwhm_minor=em.uas_to_rad(33.0), angle=0.2
    )
    sol = em.solve(term, start, em.LevenbergMarquardt(chunk_size=80), max_steps=50)
    for name in ("flux", "fwhm_major", "fwhm_minor", "angle", "x0", "y0"):
        assert_allclose(
            getattr(sol.model, name), getattr(truth, name), rtol=1e-7, err=name
        )


def _numpy_two_loop(g, pairs):
    """`H g` by the textbook two-loop recursion (Nocedal & Wright, Alg. 7.4) over
    `pairs`, oldest first."""
    q = g.copy()
    alphas = []
    for s, y in reversed(pairs):
        a = (s @ q) / (s @ y)
        q = q - a * y
        alphas.append(a)
    s, y = pairs[-1]
    r = (s @ y) / (y @ y) * q
    for (s, y), a in zip(pairs, reversed(alphas)):
        b = (y @ r) / (s @ y)
        r = r + s * (a - b)
    return r


@pytest.mark.parametrize("n_pairs", [1, 3, 5, 8, 13])
def test_lbfgs_matrix_two_loop_equals_the_textbook_recursion(n_pairs):
    """The L-BFGS direction in matrix form (one product with the memory, two
    triangular solves, from the memory's inner products) equals the textbook
    recursion, with the circular buffer partly filled, full, and wrapped around
    (memory 5); the inner products kept up to date pair by pair equal the memory's
    own, and so does the direction's product with the memory."""
    from eqmodels._solvers import _lbfgs

    m, n = 5, 40
    rng = np.random.default_rng(n_pairs)
    pairs = []
    for _ in range(n_pairs):
        s = rng.standard_normal(n)
        y = s * rng.uniform(0.5, 2.0, n) + 0.1 * rng.standard_normal(n)
        pairs.append((s, y))
    buf = jnp.zeros((2 * (m + 1), n))
    gram = jnp.zeros((2 * (m + 1), 2 * (m + 1)))
    rho = jnp.zeros(m)
    head = jnp.asarray(0, jnp.int32)

    def add(buf, gram, head, s, y, good):
        # The solver derives the old memory's products with s and y; here they
        # are computed directly.
        buf_s, buf_y = buf @ s, buf @ y
        new = _lbfgs._write_pair(buf, head, s, y, good)
        return new, _lbfgs._update_gram(gram, head, s, y, good, buf_s, buf_y)

    # A rejected pair in between writes the spare slot and changes nothing.
    junk = (jnp.full(n, 1e3), jnp.full(n, -7.0))
    for i, (s, y) in enumerate(pairs):
        buf, gram = add(buf, gram, head, jnp.asarray(s), jnp.asarray(y), True)
        rho = rho.at[head].set(1.0 / (s @ y))
        head = (head + 1) % m
        if i == 1:
            buf, gram = add(buf, gram, head, *junk, False)
    b = np.asarray(buf)
    assert_allclose(np.asarray(gram), b @ b.T, rtol=1e-13, atol=1e-13 * n)
    g = rng.standard_normal(n)
    count = jnp.asarray(min(n_pairs, m), jnp.int32)
    got, buf_got = _lbfgs._two_loop(
        jnp.asarray(g), buf @ jnp.asarray(g), buf, gram, rho, head, count
    )
    want = _numpy_two_loop(g, pairs[-m:])
    assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    scale = np.abs(b).max() * np.abs(want).max() * n
    assert_allclose(
        np.asarray(buf_got), b @ np.asarray(got), rtol=0, atol=1e-13 * scale
    )


@pytest.mark.parametrize("m", [1, 2, 10, 50])
@pytest.mark.parametrize("lower", [True, False])
def test_unit_triangular_solve_equals_numpy(m, lower):
    """The L-BFGS step's unrolled substitution solves `(I + a) x = b` for strictly
    triangular `a` as numpy's dense solve does, under jit and vmap."""
    from eqmodels._solvers._lbfgs import _unit_triangular_solve

    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, m)) * 0.3
    a = np.tril(a, -1) if lower else np.triu(a, 1)
    b = rng.standard_normal((3, m))
    want = np.linalg.solve(np.eye(m) + a, b.T).T
    solve = jax.jit(
        jax.vmap(lambda b: _unit_triangular_solve(jnp.asarray(a), b, lower=lower))
    )
    assert_allclose(np.asarray(solve(jnp.asarray(b))), want, rtol=1e-12, atol=1e-14)


@pytest.mark.slow
def test_lbfgs_solves_without_importing_scipy():
    """`solve` with L-BFGS (either line search) needs no LAPACK call, whose CPU
    lowering imports `scipy.linalg` (0.15–0.2 s of a process's first solve)."""
    out = run_without_x64(
        """
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np, eqmodels as em
grid = em.ImageGrid.from_fov(6, 128.0)
rng = np.random.default_rng(0)
u, v = rng.uniform(-0.3, 0.3, (2, 20)) / grid.psize
term = em.VisChi2(em.DirectFT(grid, u, v), np.ones(20, complex), np.ones(20))
obj = term + 0.1 * em.TSV(grid)
model = em.PixelImage(grid, np.full(grid.shape, 0.5), transform="identity")
for solver in (em.LBFGS(), em.LBFGS(linesearch="zoom")):
    sol = em.solve(obj, model, solver, max_steps=20)
print(json.dumps({"steps": int(sol.steps), "scipy": "scipy" in sys.modules}))
"""
    )
    assert out["steps"] > 2
    assert not out["scipy"]


@pytest.mark.parametrize("solver", ["lbfgs", "lbfgs-zoom", "adam"])
def test_float32_model_stays_float32(solver):
    """A float32 model and objective under x64: every gradient solver keeps float32
    (optax's zoom line search forms float64 trial points; they are cast back)."""
    term = em.VisChi2(
        em.DirectFT(GRID, U, V, dtype=jnp.float32),
        VIS.astype(np.complex64),
        SIGMA.astype(np.float32),
    )
    model = em.PixelImage(
        GRID, np.full(GRID.shape, 0.5, np.float32), transform="identity"
    )
    sol = em.solve(term, model, solver, max_steps=10)
    assert sol.model.params.dtype == np.float32
    assert float(sol.value) < 0.5 * float(term(model()))


class _SqrtResiduals(eqx.Module):
    """`Σ (√x − 0)²`: a least-squares objective whose first Gauss-Newton step from
    x = 0.5 lands on x = −0.5, where √x is NaN."""

    def residuals(self, image):
        return jnp.sqrt(image().ravel())

    def __call__(self, image):
        r = self.residuals(image)
        return jnp.sum(r * r)


class _SqrtPenalty(em.AbstractRegularizer):
    """`100 Σ (x − 0.05)² + Σ √x`: NaN for a negative pixel; Adam's first step
    (length `learning_rate` per pixel) from 0.5 with rate 1 reaches −0.5."""

    def penalty(self, image):
        return 100 * jnp.sum((image - 0.05) ** 2) + jnp.sum(jnp.sqrt(image))


@pytest.mark.parametrize(
    "solver,objective,stops",
    [
        (em.Adam(1.0), "penalty", True),
        (em.OptaxSolver(optax.sgd(1.0)), "penalty", True),
        (em.GaussNewton(), "residuals", True),
        (em.LevenbergMarquardt(), "residuals", False),
        (em.LBFGS(), "penalty", False),
        (em.LBFGS(linesearch="zoom"), "penalty", False),
    ],
    ids=lambda x: repr(x)[:30],
)
def test_a_step_onto_nan_is_not_taken(solver, objective, stops):
    """Every solver returns a finite point with its finite value when a step lands
    where the objective is NaN: Adam, optax and Gauss-Newton stop there with
    `nonfinite` (before, they returned the NaN point); L-BFGS shortens the step and
    Levenberg-Marquardt raises its damping, and both carry on."""
    obj = _SqrtResiduals() if objective == "residuals" else _SqrtPenalty()
    sol = em.solve(obj, start(), solver, max_steps=30)
    assert np.all(np.isfinite(np.asarray(sol.model.params)))
    assert np.isfinite(float(sol.value))
    assert_allclose(float(sol.value), float(obj(sol.model)), rtol=1e-12)
    if stops:
        assert sol.reason == "nonfinite"
        # The first step failed: the start is returned, after two evaluations.
        assert int(sol.steps) == 0
        assert int(sol.stats["evaluations"]) == 2
        assert_allclose(np.asarray(sol.model.params), np.asarray(start().params))
    else:
        assert sol.reason != "nonfinite"
        assert float(sol.value) < float(obj(start()))


class _NaNJacobianResiduals(eqx.Module):
    """`r = (x + 1 + √max(x, 0) − √max(x, 0), 0.1 (x − 3))`: a finite value
    everywhere, a NaN Jacobian where x < 0 — where the first Gauss-Newton step
    from 0.5 lands."""

    def residuals(self, image):
        x = image().ravel()
        h = jnp.sqrt(jnp.maximum(x, 0.0))
        return jnp.concatenate([x + 1.0 + h - h, 0.1 * (x - 3.0)])

    def __call__(self, image):
        r = self.residuals(image)
        return jnp.sum(r * r)


@pytest.mark.parametrize("solver", [em.GaussNewton(), em.LevenbergMarquardt()])
def test_least_squares_do_not_step_onto_a_nan_gradient(solver):
    """A finite value with a NaN gradient is not a finite point: Gauss-Newton stops
    before it (`nonfinite`, the start returned), Levenberg-Marquardt raises its
    damping and carries on; both return a point with a finite gradient."""
    obj = _NaNJacobianResiduals()
    sol = em.solve(obj, start(), solver, max_steps=30)
    grad = eqx.filter_grad(lambda m: obj(m))(sol.model).params
    assert np.all(np.isfinite(np.asarray(grad)))
    if isinstance(solver, em.LevenbergMarquardt):
        assert sol.reason != "nonfinite"
        assert float(sol.value) < float(obj(start()))
    else:
        assert sol.reason == "nonfinite" and int(sol.steps) == 0
        assert_allclose(np.asarray(sol.model.params), np.asarray(start().params))


class _OneNaNGradient(em.AbstractRegularizer):
    """A finite value whose gradient is NaN at exactly one pixel of a 64² image
    (`|x − x₀|` at 0 has derivative 0, times the square root's infinite one)."""

    def penalty(self, image):
        return jnp.sum(jnp.sqrt(jnp.abs(image - image[5, 5]) + 1.0)) + jnp.sum(
            jnp.sqrt(jnp.abs(image[5, 5] - image[5, 5]))
        )


@pytest.mark.parametrize("solver", ["lbfgs", "adam", "lbfgs-zoom"])
def test_a_single_nan_in_the_start_gradient_stops_at_once(solver):
    """One NaN among 4096 gradient entries at the start: `nonfinite` after no step.
    (XLA's CPU `max` reduction can drop a NaN, so a plain `max |g|` let Adam step
    and return a NaN model.)"""
    grid = em.ImageGrid.from_fov(64, 128.0)
    model = em.PixelImage(grid, np.full(grid.shape, 0.5), transform="identity")
    obj = _OneNaNGradient()
    grads = eqx.filter_grad(lambda m: obj(m))(model).params
    assert int(np.sum(~np.isfinite(np.asarray(grads)))) == 1
    sol = em.solve(obj, model, solver, max_steps=5)
    assert sol.reason == "nonfinite"
    assert int(sol.steps) == 0
    assert np.all(np.isfinite(np.asarray(sol.model.params)))


FLOAT32_MINIMUM = unchecked_script(
    """
import json, numpy as np, eqmodels as em
from tests.reference import numpy_ft
grid = em.ImageGrid.from_fov(6, 128.0)
rng = np.random.default_rng(0)
u, v = rng.uniform(-0.35, 0.35, (2, 50)) / grid.psize
noise = rng.standard_normal(50) + 1j * rng.standard_normal(50)
vis = numpy_ft.dft_matrix(6, 6, grid.psize, u, v) @ rng.uniform(0.2, 1, 36)
vis = (vis + 0.05 * noise).astype(np.complex64)
term = em.VisChi2(em.DirectFT(grid, u, v, dtype=np.float32), vis,
                  np.full(50, 0.07, np.float32))
obj = term + 0.3 * em.TSV(grid)
GRID = grid
f32 = np.float32
model = em.PixelImage(GRID, np.full(GRID.shape, 0.5, f32), transform="identity")
out = {}
for name, solver in (("lm", em.LevenbergMarquardt()), ("gn", em.GaussNewton())):
    sol = em.solve(obj, model, solver, max_steps=1000, ftol=1e-6)
    out[name] = [sol.reason, int(sol.steps), float(sol.value)]
print(json.dumps(out))
"""
)


def test_levenberg_marquardt_stops_at_a_float32_minimum(unchecked):
    """From a review: in float32 (JAX's default), once LM reaches the minimum every
    step is rejected at rounding level; a rejected step never ended the solve, so
    it ran all `max_steps` Jacobians (λ growing until it overflowed) and reported
    `max_steps`. It now stops with `ftol` when its model predicts no decrease
    worth `ftol`, where Gauss-Newton stops."""
    out = unchecked[FLOAT32_MINIMUM]
    (lm_reason, lm_steps, lm_value), (gn_reason, _, gn_value) = out["lm"], out["gn"]
    assert lm_reason == "ftol" and lm_steps < 20, out
    assert gn_reason == "ftol"
    assert abs(lm_value - gn_value) <= 1e-5 * gn_value


class _WithComplexConstant(em.AbstractImageModel):
    """A user's image model holding a complex constant (a fixed phasor) and an
    integer leaf beside its parameters."""

    grid: em.ImageGrid = eqx.field(static=True)
    log_image: jax.Array
    phasor: jax.Array
    count: jax.Array

    def __call__(self):
        return jnp.exp(self.log_image) * jnp.abs(self.phasor) ** 2


NOT_AN_IMAGE_MODEL = unchecked_error(
    "em.solve(obj, M(jnp.ones(g.shape)), max_steps=1)",
    "TypeError",
    "import jax.numpy as jnp, equinox as eqx, jax\n"
    "g = em.ImageGrid(4, 4, 1e-10)\n"
    "obj = em.Objective([em.TSV(g)])\n"
    "class M(eqx.Module):\n"
    "    x: jax.Array\n"
    "    def __call__(self):\n"
    "        return self.x",
)


def test_complex_and_integer_leaves_are_held_fixed_or_refused(unchecked):
    """From a review: the default `params` (every inexact array) also optimised
    complex leaves (a fixed phasor drifted from 1 to 1.07 with Adam; L-BFGS
    crashed in `clip`). The default is now real floating-point arrays only; a
    filter that selects a complex or integer leaf is refused naming the leaf's
    type; a module that is not an image model is refused naming the base class."""
    obj = _term() + W_TSV * em.TSV(GRID)
    model = _WithComplexConstant(
        GRID, jnp.full(GRID.shape, np.log(0.5)), jnp.asarray(1.0 + 0j), jnp.asarray(3)
    )
    for solver in ("lbfgs", em.Adam(0.05), em.LevenbergMarquardt()):
        sol = em.solve(obj, model, solver, max_steps=5)
        assert complex(sol.model.phasor) == 1 + 0j and int(sol.model.count) == 3
        assert sol.value < obj(model)
    with pytest.raises(ValueError, match="selects a leaf of type complex128"):
        em.solve(obj, model, params=eqx.is_inexact_array)
    with pytest.raises(ValueError, match="selects a leaf of type int"):
        em.solve(obj, model, params=lambda x: eqx.is_array(x) and x.dtype.kind == "i")
    msg = unchecked[NOT_AN_IMAGE_MODEL]
    assert msg is not None and "subclass `eqmodels.AbstractImageModel`" in msg, msg


def _docs_solver():
    """The user's solver of docs/solvers.md, executed from the page itself."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).parents[1] / "docs" / "solvers.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (code,) = [b for b in blocks if "class GradientDescent" in b]
    namespace = {}
    exec(compile(code, "docs/solvers.md", "exec"), namespace)
    return namespace["GradientDescent"]


def test_a_users_solver_runs_through_solve_and_survey():
    """The few-line gradient descent of the docs runs through the same loop as
    ours: its steps are plain `y − lr·∇f` (checked against a Python loop), it
    stops on `max_steps` and on the shared stopping test, and a survey runs it
    per member (members with other learning rates stop on their own)."""
    GradientDescent = _docs_solver()
    obj = _term() + W_TSV * em.TSV(GRID)
    lr = 2e-3
    sol = em.solve(obj, start(), GradientDescent(jnp.asarray(lr)), max_steps=7)
    x = start()
    for _ in range(7):
        g = eqx.filter_grad(obj)(x)
        x = eqx.tree_at(lambda m: m.params, x, x.params - lr * g.params)
    assert_allclose(sol.model.params, x.params, rtol=1e-12)
    assert sol.reason == "max_steps" and int(sol.steps) == 7
    assert int(sol.stats["evaluations"]) == 8
    assert set(sol.report) == {"vis", "tv2"}
    assert_allclose(sol.value, obj(sol.model), rtol=1e-12)
    # The shared stopping test: a loose `gtol` stops it before `max_steps`.
    loose = em.solve(
        obj, start(), GradientDescent(jnp.asarray(lr)), max_steps=500, gtol=1.0
    )
    assert loose.reason == "gtol" and 0 < int(loose.steps) < 500
    # A survey over learning rates: each member equals its own solve.
    rates = [1e-3, 2e-3, 4e-3]
    res = em.survey(
        [obj] * 3,
        start(),
        [GradientDescent(jnp.asarray(r)) for r in rates],
        max_steps=40,
        gtol=0.5,
    )
    for i, r in enumerate(rates):
        one = em.solve(
            obj, start(), GradientDescent(jnp.asarray(r)), max_steps=40, gtol=0.5
        )
        assert_allclose(res[i].model.params, one.model.params, rtol=1e-10)
        assert int(res[i].steps) == int(one.steps)
        assert res[i].reason == one.reason


class _NaNBelowOne(eqx.Module):
    """An objective that is NaN while any pixel is below 1."""

    objective: em.Objective

    def __call__(self, model):
        return self.objective(model) + jnp.log(jnp.min(model.params) - 1.0)


def test_results_is_an_enumeration_and_throw_raises_on_failure():
    """`result` is an `em.RESULTS` member; `throw=True` raises on `nonfinite`
    (naming it), not on `max_steps`; the default raises nothing."""
    obj = _term() + W_TSV * em.TSV(GRID)
    sol = em.solve(obj, start(), max_steps=2, throw=True)
    assert sol.result == em.RESULTS.max_steps and sol.reason == "max_steps"
    nan_obj = _NaNBelowOne(obj)
    quiet = em.solve(nan_obj, start(), max_steps=5)
    assert quiet.result == em.RESULTS.nonfinite and not bool(quiet.converged)
    with pytest.raises(Exception, match="nonfinite"):
        jax.block_until_ready(em.solve(nan_obj, start(), max_steps=5, throw=True).value)
    # Batched: one result per member.
    far = eqx.tree_at(lambda m: m.params, start(), start().params + 2.0)
    batched = jax.vmap(lambda s: em.solve(nan_obj, s, max_steps=3, gtol=0.0))(
        jax.tree.map(lambda a, b: jnp.stack([a, b]), far, start())
    )
    assert list(batched.reason) == ["max_steps", "nonfinite"]


class _LeastSquaresState(eqx.Module):
    residuals: jax.Array
    steps: jax.Array


class _UsersGaussNewton(em.AbstractLeastSquaresSolver):
    """A user's least-squares solver: an undamped Gauss-Newton step through
    `lstsq` on the chunked Jacobian (`em.residual_jacobian`'s chunk, resolved by
    `solve` from the declared `chunk_size` into `fn.jacobian_chunk`)."""

    chunk_size: int = 5
    memory_budget: float = 1e9

    def init(self, fn, y, options):
        return _LeastSquaresState(fn.residuals(y), jnp.zeros((), jnp.int32))

    def step(self, fn, y, state, options):
        x, unravel = jax.flatten_util.ravel_pytree(y)
        assert fn.jacobian_chunk == 5
        jac = jax.jacfwd(lambda v: fn.residuals(unravel(v)))(x)
        delta = jnp.linalg.lstsq(jac, -state.residuals)[0]
        y = unravel(x + delta)
        return y, _LeastSquaresState(fn.residuals(y), state.steps + 1)

    def terminate(self, fn, y, state, options):
        return jnp.asarray(False), em.RESULTS.max_steps

    def postprocess(self, fn, y, state, options, result):
        return y, fn.value(y), None, {"evaluations": state.steps + 1}


def test_a_users_least_squares_solver_is_run_not_refused():
    """A subclass of `AbstractLeastSquaresSolver` other than ours was refused
    (its step could not be said); now it says it and runs: one step solves the
    linear least-squares problem as our Gauss-Newton does."""
    term = _term()
    got = em.solve(term, start(), _UsersGaussNewton(), max_steps=1)
    want = em.solve(term, start(), em.GaussNewton(), max_steps=1)
    assert_allclose(got.model.params, want.model.params, rtol=1e-8)
    assert int(got.steps) == 1 and got.reason == "max_steps"
