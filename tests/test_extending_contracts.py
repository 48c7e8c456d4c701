"""Users' subclasses under the package's machinery (sharing, stacking, row
gathers, least squares): what a subclass may override or hold, and the errors for
what it may not. Each test failed before its fix (silently wrong values or
unrelated errors)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems import small_problem
from tests.toys import ComplexResiduals, PowerChi2, SumSquares, VectorPenalty
from tests.unchecked import unchecked_error


GRID, U, V, IMG, ONES = small_problem(0)


class GainDFT(em.AbstractForwardModel):
    """A user's dense transform with a per-point gain among its point fields:
    points with equal (u, v) but different gains are different points."""

    grid: em.ImageGrid
    u: jax.Array
    v: jax.Array
    pulse: em.AbstractPulse
    a_re: jax.Array
    a_im: jax.Array
    gain: jax.Array
    point_fields = ("a_re", "a_im", "gain")

    def __init__(self, grid, u, v, gain):
        self.grid, self.pulse = grid, em.DeltaPulse()
        self.u, self.v = jnp.asarray(u), jnp.asarray(v)
        xx, yy = grid.coords()
        ph = 2 * np.pi * (np.outer(u, xx.ravel()) + np.outer(v, yy.ravel()))
        self.a_re, self.a_im = jnp.asarray(np.cos(ph)), jnp.asarray(np.sin(ph))
        self.gain = jnp.full(np.shape(u), float(gain))

    def __call__(self, image):
        x = image.ravel()
        return self.gain * (self.a_re @ x + 1j * (self.a_im @ x))

    def at(self, u, v):
        return GainDFT(self.grid, u, v, 1.0)


def test_points_with_different_point_data_are_not_merged():
    """Sharing merged points by (u, v) alone and kept the first one's gain: both
    terms got the first term's χ²."""
    t1 = em.AmpChi2(GainDFT(GRID, U, V, 1.0), ONES, ONES)
    t2 = em.AmpChi2(GainDFT(GRID, U, V, 2.0), ONES, ONES)
    obj = t1 + t2
    assert len(obj.shared) == 1  # still one transform, at 20 distinct points
    assert_allclose(obj.values(IMG), (t1(IMG), t2(IMG)), rtol=1e-13)
    # Equal point data are still merged: the same term twice costs one transform.
    twice = t1 + em.AmpChi2(GainDFT(GRID, U, V, 1.0), 2 * ONES, ONES)
    assert twice.shared[0].forward.u.shape == (10,)


class OddPulse(em.AbstractPulse):
    """A user's pulse that is not even, `P(−u, −v) ≠ P(u, v)`."""

    def __call__(self, u, v, psize):
        xp = jnp if isinstance(u, jax.Array) else np
        return xp.exp(u * psize)


def test_points_of_a_users_pulse_are_not_merged_with_their_mirrors():
    """From a review: sharing merged `±(u, v)` through `V(−u) = conj V(u)`, which
    needs an even pulse: with a user's odd one the second term's χ² was wrong
    (1101.6 alone, 998.9 shared)."""
    ft = em.DirectFT(GRID, U, V, OddPulse())
    mirrored = em.DirectFT(GRID, -U, -V, OddPulse())
    vis = np.asarray(ft(jnp.asarray(IMG)))
    t1 = em.VisChi2(ft, vis, ONES)
    t2 = em.VisChi2(mirrored, np.conj(vis), ONES)
    assert_allclose((t1 + t2).values(IMG), (t1(IMG), t2(IMG)), rtol=1e-13)
    # eqmodels' own (even) pulses still merge the mirrored points.
    even = em.VisChi2(em.DirectFT(GRID, U, V), vis, ONES) + em.VisChi2(
        em.DirectFT(GRID, -U, -V), vis, ONES
    )
    assert even.shared[0].forward.u.shape == (10,)


class ScaledVis(PowerChi2):
    def model_vis(self, image):
        return 1.2 * super().model_vis(image)


def test_overridden_model_vis_or_residuals_is_not_bypassed_by_sharing():
    """A shared transform hands `chi2_from_vis` the plain visibilities: a class
    that overrides `model_vis` (or `residuals`) got its override skipped inside an
    objective (690.25 alone, 326.98 inside)."""
    fwd = em.DirectFT(GRID, U, V)
    scaled, amp = ScaledVis(fwd, ONES, ONES), em.AmpChi2(fwd, ONES, ONES)
    obj = scaled + amp
    assert_allclose(obj.values(IMG), (scaled(IMG), amp(IMG)), rtol=1e-13)
    r = obj.residuals(IMG)
    assert_allclose(jnp.sum(r * r), scaled(IMG) + amp(IMG), rtol=1e-12)


class ScaledL2(em.AbstractRegularizer):
    scale: float

    def penalty(self, image):
        return self.scale * jnp.sum(image**2)


def test_stacking_refuses_items_differing_in_a_non_array_field():
    """`pad_and_stack` kept the first item's non-array fields for all (both
    objectives gave the first's value)."""
    amp = em.AmpChi2(em.DirectFT(GRID, U, V), ONES, ONES)
    with pytest.raises(ValueError, match=r"non-array field, `.terms\[1\].scale`"):
        em.pad_and_stack([amp + ScaledL2(1.0), amp + ScaledL2(5.0)])
    stacked = em.pad_and_stack([amp + ScaledL2(2.0), 3.0 * amp + ScaledL2(2.0)])
    values = eqx.filter_vmap(lambda o: o(IMG))(stacked)
    want = [(amp + ScaledL2(2.0))(IMG), (3.0 * amp + ScaledL2(2.0))(IMG)]
    assert_allclose(values, want, rtol=1e-13)


class Undeclared(PowerChi2):
    row_fields = ("weight",)  # forgot "power"


def test_an_undeclared_per_row_leaf_is_named_by_row_operations():
    """Only `ShardedChi2` checked `row_fields`: `take_rows` changed the χ² silently
    and `pad_rows` failed with a shape error."""
    term = Undeclared(em.DirectFT(GRID, U, V), np.linspace(0.1, 1, 10), ONES)
    for op in (lambda: term.take_rows(np.arange(10)[::-1]), lambda: term.pad_rows(12)):
        with pytest.raises(TypeError, match=r"Undeclared.power .*row_fields"):
            op()


def test_a_regularizers_residuals_get_an_array_alone_and_in_an_objective():
    model = em.PixelImage.from_image(IMG, GRID, transform="identity")
    alone = em.solve(SumSquares(IMG / 2), model, "gauss-newton", max_steps=2)
    inside = em.solve(1.0 * SumSquares(IMG / 2), model, "gauss-newton", max_steps=2)
    assert_allclose(alone.value, inside.value, rtol=1e-12)
    assert float(alone.value) < 1e-20  # one Gauss-Newton step solves it


# This module's problem, for the cases run without the type checker.
_SETUP = (
    'import jax, jax.numpy as jnp; jax.config.update("jax_enable_x64", True)\n'
    "from tests.toys import ComplexResiduals, IntegerModel, VectorPenalty\n"
    "from tests.problems import small_problem\n"
    "GRID, U, V, IMG, ONES = small_problem(0)"
)


NOT_A_SCALAR = {
    obj: unchecked_error(f"({obj})(IMG)", "TypeError", _SETUP)
    for obj in (
        "VectorPenalty()",  # alone it was returned as it was (from a review)
        "2.0 * VectorPenalty()",
        "em.TV(GRID) + VectorPenalty()",
    )
}


def test_a_term_value_that_is_not_a_real_scalar_is_named(unchecked):
    """A vector penalty was summed silently in a one-term objective, broadcast
    against the weights, or failed in `jnp.stack`. (The suite's type checker
    refuses it first; users get eqmodels' own message.)"""
    with pytest.raises(TypeError, match="VectorPenalty"):
        (2.0 * VectorPenalty())(IMG)
    for obj, case in NOT_A_SCALAR.items():
        msg = unchecked[case]
        assert msg is not None and "'VectorPenalty' (VectorPenalty)" in msg, msg
        assert "not a real scalar" in msg


_COMPLEX_SETUP = (
    _SETUP + "\nterm = ComplexResiduals(em.DirectFT(GRID, U, V), ONES, ONES)"
    "\nmodel = em.PixelImage.from_image(IMG, GRID, transform='identity')"
)
COMPLEX_RESIDUALS = [
    unchecked_error(statement, "TypeError", _COMPLEX_SETUP)
    for statement in (
        "(1.0 * term).residuals(IMG)",
        "em.solve(term, model, 'levenberg-marquardt', max_steps=3)",
    )
]


def test_complex_residuals_are_named(unchecked):
    """Complex residuals came out of `Objective.residuals` as complex128, and LM
    then blamed the image. (The suite's type checker refuses them first.)"""
    term = ComplexResiduals(em.DirectFT(GRID, U, V), ONES, ONES)
    with pytest.raises(TypeError, match="residuals"):
        term.residuals(IMG)
    for case in COMPLEX_RESIDUALS:
        msg = unchecked[case]
        assert msg is not None and "ComplexResiduals" in msg, msg
        assert "residuals of dtype complex" in msg


class Transposed(em.AbstractImageModel):
    grid: em.ImageGrid
    p: jax.Array

    def __call__(self):
        return self.p


def test_an_image_model_of_the_wrong_shape_is_named():
    grid = em.ImageGrid(8, 10, em.uas_to_rad(5.0))
    model = Transposed(grid, jnp.ones((10, 8)))
    with pytest.raises(
        ValueError, match=r"Transposed\(\) returned .*\(10, 8\).*\(8, 10\)"
    ):
        SumSquares(jnp.ones(grid.shape))(model)


class ReadsForward(PowerChi2):
    """Breaks the documented contract: reads `self.forward` in `chi2_from_vis`."""

    def residuals_from_vis(self, vis):
        return super().residuals_from_vis(vis) * jnp.ones_like(self.forward.u)


@pytest.mark.parametrize("method", ["__call__", "residuals"])
def test_reading_self_forward_inside_a_sharing_objective_is_named(method):
    """Alone and beside a regularizer the term works; beside a second data term
    (sharing one transform, `forward=None`) it failed with a bare `'NoneType'
    object has no attribute 'u'` from the user's line (from a review)."""
    fwd = em.DirectFT(GRID, U, V)
    term = ReadsForward(fwd, ONES, ONES)
    assert_allclose(term(IMG), PowerChi2(fwd, ONES, ONES)(IMG), rtol=1e-14)
    obj = term + em.AmpChi2(fwd, ONES, ONES)
    assert obj.shared
    with pytest.raises(
        AttributeError,
        match=r"ReadsForward\.\w+_from_vis failed .*reads `self\.forward`",
    ):
        getattr(obj, method)(IMG)


INTEGER_MODEL = [
    unchecked_error(f"{term}(IntegerModel(GRID))", "TypeError", _SETUP)
    for term in ("em.TV(GRID)", "em.AmpChi2(em.DirectFT(GRID, U, V), ONES, ONES)")
]


def test_an_image_model_returning_integers_is_named(unchecked):
    """An integer array is refused by every term; an image model returning one was
    not (from a review)."""
    for case in INTEGER_MODEL:
        msg = unchecked[case]
        assert msg is not None and "IntegerModel() returned int32" in msg, msg
