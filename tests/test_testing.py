"""`eqmodels.testing`: every check passes on a correct module and fails, with a
report that says what is wrong, on a deliberately broken one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
import eqmodels.testing as emt


GRID = em.ImageGrid(6, 7, em.uas_to_rad(5.0))
RNG = np.random.default_rng(0)
U, V = RNG.uniform(-0.4 / GRID.psize, 0.4 / GRID.psize, (2, 11))
IMAGE = RNG.uniform(0.1, 1.0, GRID.shape) / GRID.npix
XX, YY = GRID.coords()
# The dense matrix of CONVENTIONS.md (triangle pulse).
PULSE = (np.sinc(U * GRID.psize) * np.sinc(V * GRID.psize)) ** 2
A = PULSE[:, None] * np.exp(2j * np.pi * (np.outer(U, XX) + np.outer(V, YY)))
OBS = A @ (1.05 * IMAGE).ravel()
SIGMA = np.full(11, 0.01)


def vis_chi2_numpy(img):
    r = A @ img.ravel() - OBS
    n = OBS.size
    value = np.sum(np.abs(r) ** 2 / SIGMA**2) / (2 * n)
    grad = np.real(A.T @ (np.conj(r) / SIGMA**2)) / n
    return value, grad.reshape(img.shape)


def vis_term():
    return em.VisChi2(em.DirectFT(GRID, U, V), OBS, SIGMA)


class ScaledGradient(em.AbstractRegularizer):
    """Σ I²/2 with a custom derivative that is off by a factor 1.5."""

    def penalty(self, image):
        return _half_sum_sq(image)


@jax.custom_vjp
def _half_sum_sq(x):
    return 0.5 * jnp.sum(x * x)


_half_sum_sq.defvjp(lambda x: (_half_sum_sq(x), x), lambda x, g: (1.5 * g * x,))


class NotJittable(em.AbstractRegularizer):
    """Python control flow on an array value: fine eagerly, not under jit."""

    def penalty(self, image):
        if jnp.sum(image) > 0:
            return jnp.sum(image**2)
        return jnp.sum(image)


class UndeclaredRows(em.AbstractDataTerm):
    """A data term holding a per-row leaf (`power`) it forgot to list in
    `row_fields`: right alone, not splittable over devices."""

    forward: em.AbstractForwardModel | None
    power: jax.Array
    weight: jax.Array
    n_rows: jax.Array

    def __init__(self, forward, power):
        self.forward = forward
        self.power = jnp.asarray(power)
        self.weight = jnp.ones(power.shape[0])
        self.n_rows = em.n_rows_leaf(power.shape[0])

    def residuals_from_vis(self, vis):
        return (jnp.abs(vis) ** 2 - self.power) * jnp.sqrt(self.weight / self.n_rows)

    def chi2_from_vis(self, vis):
        r = self.residuals_from_vis(vis)
        return jnp.sum(r * r)


def test_check_against_numpy_passes_on_a_correct_term():
    emt.check_against_numpy(vis_term(), vis_chi2_numpy, IMAGE)
    emt.check_against_numpy(vis_term(), vis_chi2_numpy, IMAGE, jit=False)


def test_check_against_numpy_reports_a_wrong_gradient():
    def off_by_factor(img):
        value, grad = vis_chi2_numpy(img)
        return value, 1.01 * grad

    with pytest.raises(AssertionError) as info:
        emt.check_against_numpy(vis_term(), off_by_factor, IMAGE)
    msg = str(info.value)
    assert "gradient w.r.t. argument 0" in msg
    assert "ULP" in msg and "relative to that scale: 9.9" in msg  # 0.01/1.01
    assert "float64" in msg and "rtol 1.0e-12" in msg


def test_check_against_numpy_reports_a_wrong_value():
    with pytest.raises(AssertionError, match="^value differs"):
        emt.check_against_numpy(
            vis_term(),
            lambda x: (vis_chi2_numpy(x)[0] * (1 + 1e-9), vis_chi2_numpy(x)[1]),
            IMAGE,
        )
    # ... which a looser tolerance accepts.
    emt.check_against_numpy(
        vis_term(),
        lambda x: (vis_chi2_numpy(x)[0] * (1 + 1e-9), vis_chi2_numpy(x)[1]),
        IMAGE,
        rtol=1e-8,
    )


def test_float32_tolerance_is_dtype_aware():
    term = em.VisChi2(em.DirectFT(GRID, U, V, dtype=jnp.float32), OBS, SIGMA)
    img32 = IMAGE.astype(np.float32)
    emt.check_against_numpy(term, vis_chi2_numpy, img32)  # 1e-5 by default
    with pytest.raises(AssertionError, match="float32, rtol 1.0e-12"):
        emt.check_against_numpy(term, vis_chi2_numpy, img32, rtol=1e-12)
    assert emt.default_rtol(jnp.float32) == 1e-5
    assert emt.default_rtol(np.complex128) == 1e-12


def test_a_term_computing_a_float64_image_in_float32_fails():
    """From a review: the default tolerance came from the result's dtype, so a
    term that silently casts a float64 image to float32 (and returns float32)
    passed at 1e-5; the inputs' dtype counts too."""
    term32 = em.VisChi2(em.DirectFT(GRID, U, V, dtype=jnp.float32), OBS, SIGMA)

    def casting(img):
        return term32(jnp.asarray(img, jnp.float32))

    with pytest.raises(AssertionError, match="rtol 1.0e-12"):
        emt.check_against_numpy(casting, vis_chi2_numpy, IMAGE)


def test_assert_close_reports_shape_and_non_finite_values():
    with pytest.raises(AssertionError, match="shape"):
        emt.assert_close(np.ones(3), np.ones(4))
    with pytest.raises(
        AssertionError,
        match=r"gradient: 1 non-finite value\(s\), first at index \(1,\)",
    ):
        emt.assert_close(np.array([1.0, np.nan]), np.ones(2), name="gradient")
    emt.assert_close(np.ones(3) * (1 + 1e-13), np.ones(3))
    # A NaN in the reference is named as such (it read "the reference is exactly
    # 0: give an `atol`").
    with pytest.raises(AssertionError, match="the reference has 1 non-finite"):
        emt.assert_close(np.ones(2), np.array([1.0, np.nan]))


def test_check_grad_fd_passes_and_fails():
    emt.check_grad_fd(vis_term(), IMAGE)
    emt.check_grad_fd(em.TV(GRID), IMAGE)
    # At x = 0 the step is absolute (a step relative to max|x| would be 0).
    emt.check_grad_fd(vis_term(), jnp.zeros_like(IMAGE))
    with pytest.raises(AssertionError) as info:
        emt.check_grad_fd(ScaledGradient(), IMAGE)
    msg = str(info.value)
    assert "central finite differences" in msg and "direction 0: autodiff" in msg
    # A given gradient is checked instead of jax.grad's.
    good = jax.grad(vis_term())(jnp.asarray(IMAGE))
    emt.check_grad_fd(vis_term(), IMAGE, grad=good)
    with pytest.raises(AssertionError, match="directional derivative"):
        emt.check_grad_fd(vis_term(), IMAGE, grad=2 * good)


def test_check_grad_fd_at_a_stationary_point():
    """Where the gradient is 0 both derivatives are rounding noise (here of
    `ΣI − F`), which no relative tolerance accepts: `atol` does, and a wrong
    gradient still fails."""
    flux = em.Flux(0.6)
    at_min = np.asarray(IMAGE) * (0.6 / np.sum(IMAGE))
    assert float(np.abs(jax.grad(flux)(jnp.asarray(at_min))).max()) < 1e-12
    with pytest.raises(AssertionError, match="directional derivative"):
        emt.check_grad_fd(flux, at_min)
    emt.check_grad_fd(flux, at_min, atol=1e-12)
    with pytest.raises(AssertionError, match="atol 1.0e-12"):
        emt.check_grad_fd(flux, at_min, grad=np.full(at_min.shape, 1e-3), atol=1e-12)


def test_check_transforms_passes_on_correct_terms():
    emt.check_transforms(vis_term(), IMAGE)  # jit, vmap, sharded over 8 devices
    emt.check_transforms(em.TV(GRID), IMAGE, batch=np.stack([IMAGE, 2 * IMAGE]))
    cp = em.ClosurePhaseChi2(
        em.DirectFT(
            GRID,
            np.stack([U[:3], U[3:6], -U[:3] - U[3:6]], 1),
            np.stack([V[:3], V[3:6], -V[:3] - V[3:6]], 1),
        ),
        np.zeros(3),
        np.full(3, 0.1),
    )
    emt.check_transforms(cp, IMAGE)  # 3 rows: a 3-device mesh


def test_check_transforms_names_a_non_jittable_term():
    term = NotJittable()
    float(term(IMAGE))  # fine eagerly
    with pytest.raises(
        AssertionError, match="fails under jax.jit: TracerBoolConversionError"
    ):
        emt.check_transforms(term, IMAGE)


def test_check_transforms_catches_a_term_that_cannot_be_sharded():
    fwd = em.DirectFT(GRID, U, V)
    term = UndeclaredRows(fwd, 1.1 * np.abs(np.asarray(fwd(jnp.asarray(IMAGE)))) ** 2)
    emt.check_transforms(term, IMAGE, sharded=False)
    assert len(jax.devices()) > 1
    with pytest.raises(
        AssertionError, match="fails under ShardedChi2 over 8 devices.*row_fields"
    ):
        emt.check_transforms(term, IMAGE)


class _Wrapped(em.AbstractForwardModel):
    """A wrapper whose points are properties: it cannot declare `point_fields`."""

    inner: em.DirectFT

    @property
    def grid(self):
        return self.inner.grid

    @property
    def u(self):
        return self.inner.u

    @property
    def v(self):
        return self.inner.v

    @property
    def pulse(self):
        return self.inner.pulse

    def __call__(self, image):
        return self.inner(image)

    def at(self, u, v):
        return _Wrapped(self.inner.at(u, v))


def test_check_transforms_skips_sharding_a_model_without_point_fields():
    """With several devices the sharded check failed on such a model (ShardedChi2
    refuses it) with a hint about Python control flow."""
    assert len(jax.devices()) > 1
    grid = em.ImageGrid(8, 8, em.uas_to_rad(5.0))
    rng = np.random.default_rng(0)
    u, v = rng.uniform(-0.3 / grid.psize, 0.3 / grid.psize, (2, 12))
    term = em.AmpChi2(_Wrapped(em.DirectFT(grid, u, v)), np.ones(12), np.ones(12))
    emt.check_transforms(term, rng.uniform(0.1, 1, grid.shape))


class WrongResiduals(em.AbstractRegularizer):
    """Σ I² whose `residuals` are I/2: Gauss-Newton would minimise Σ I²/4."""

    def penalty(self, image):
        return jnp.sum(image * image)

    def residuals(self, image):
        return 0.5 * jnp.asarray(image).reshape(-1)


@pytest.mark.parametrize(
    "term",
    [
        vis_term(),
        em.TSV(GRID),
        em.Flux(1.5 * IMAGE.sum()),
        em.Flux(1.5 * IMAGE.sum(), normalise=True),
        2.0 * vis_term() + 3.0 * em.TSV(GRID),
        vis_term() + em.TV(GRID),  # TV has no residuals: nothing to check
    ],
    ids=["vis", "tsv", "flux", "flux-normalised", "objective", "objective-tv"],
)
def test_check_transforms_checks_residuals_against_the_value(term):
    emt.check_transforms(term, IMAGE, sharded=False)


def test_check_transforms_catches_residuals_that_disagree_with_the_value():
    term = WrongResiduals()
    with pytest.raises(AssertionError, match=r"Σ r² of `residuals\(image\)`"):
        emt.check_transforms(term, IMAGE)


class JitlessResiduals(em.AbstractRegularizer):
    """Σ I² whose `residuals` use Python control flow on a value: right eagerly,
    not under jit (where Gauss-Newton evaluates them)."""

    def penalty(self, image):
        return jnp.sum(image * image)

    def residuals(self, image):
        if float(jnp.sum(image)) > -1.0:
            return jnp.asarray(image).reshape(-1)
        return -jnp.asarray(image).reshape(-1)


@jax.custom_vjp
def _identity_3x(x):
    return x


_identity_3x.defvjp(lambda x: (x, None), lambda _, g: (3.0 * g,))


class WrongResidualJacobian(em.AbstractRegularizer):
    """Σ I² whose `residuals` (I) are right in value, with a derivative 3× too
    large: Gauss-Newton would take steps a third of the right length."""

    def penalty(self, image):
        return jnp.sum(image * image)

    def residuals(self, image):
        return _identity_3x(jnp.asarray(image).reshape(-1))


def test_check_transforms_checks_residuals_under_jit_and_their_derivative():
    """From a review: both passed every check, and Gauss-Newton failed on the
    first and converged to the wrong place on the second."""
    with pytest.raises(AssertionError, match=r"fails under jax.jit \(its `residuals`"):
        emt.check_transforms(JitlessResiduals(), IMAGE)
    with pytest.raises(AssertionError, match="what Gauss-Newton differentiates"):
        emt.check_transforms(WrongResidualJacobian(), IMAGE)


def test_checks_at_an_all_zero_point_do_not_pass_vacuously():
    """From a review: at x = 0 a wrong gradient of a function flat there passed
    (both derivatives 0)."""
    zeros = jnp.zeros_like(IMAGE)
    with pytest.raises(AssertionError, match="nothing is checked"):
        emt.check_grad_fd(ScaledGradient(), zeros)
    emt.check_transforms(em.TSV(GRID), zeros)  # the vmap batch is 0, 0.05, 0.1


def test_check_grad_fd_failures_are_assertion_errors_that_say_why():
    with pytest.raises(AssertionError, match="`fn` fails under jax"):
        emt.check_grad_fd(NotJittable(), IMAGE)
    with pytest.raises(AssertionError, match="`fn` fails under jax.jit"):
        emt.check_against_numpy(NotJittable(), lambda x: (0.0, x), IMAGE)
    # Entropy of pixels taken negative by the steps: not "fix the reference".
    with pytest.raises(AssertionError, match="not finite at x"):
        emt.check_grad_fd(lambda x: jnp.sum(jnp.log(x)), IMAGE, rel_step=0.5)


def test_float32_gradient_check_catches_a_two_percent_error():
    x = jnp.asarray(IMAGE, jnp.float32) * 100
    emt.check_grad_fd(lambda y: 0.5 * jnp.sum(y * y), x)
    with pytest.raises(AssertionError, match="float32 `x`"):
        emt.check_grad_fd(lambda y: 0.5 * jnp.sum(y * y), x, grad=1.02 * x)


def test_default_rtol_of_16_bit_types_is_above_their_rounding():
    assert emt.default_rtol(np.float16) > float(np.finfo(np.float16).eps)
    emt.assert_close(np.float16(1.001), np.float16(1.0))
    assert emt.default_rtol(np.float32) == 1e-5
    assert emt.default_rtol(np.complex128) == 1e-12
