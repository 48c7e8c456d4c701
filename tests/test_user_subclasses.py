"""A user's subclass of each base, defined here (not in an `eqmodels.*` module),
gets what the built-in classes get when it declares the same contracts: merged
mirrored points (`hermitian_points`, `even`), one shared transform
(`share_forward`), the term-wrapper interface (`AbstractTermWrapper`) under an
objective, `take_rows` / `pad_rows` and `ShardedChi2`, least squares
(`has_residuals`), and `forward=` as a class or a callable."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
import eqmodels.testing as emt
from tests.helpers import assert_allclose
from tests.problems import small_problem
from tests.toys import PowerChi2, SumSquares
from tests.unchecked import unchecked_error


GRID, U, V, IMG, ONES = small_problem(1)


class UserDFT(em.AbstractForwardModel):
    """A user's dense transform (a plain DFT), declaring nothing beyond its point
    leaves."""

    grid: em.ImageGrid
    u: jax.Array
    v: jax.Array
    pulse: em.AbstractPulse
    a_re: jax.Array
    a_im: jax.Array
    point_fields = ("a_re", "a_im")

    def __init__(self, grid, u, v, pulse=None):
        self.grid = grid
        self.pulse = em.DeltaPulse() if pulse is None else pulse
        u, v = np.asarray(u, float), np.asarray(v, float)
        self.u, self.v = jnp.asarray(u), jnp.asarray(v)
        xx, yy = grid.coords()
        ph = (
            2
            * np.pi
            * (np.outer(u.ravel(), xx.ravel()) + np.outer(v.ravel(), yy.ravel()))
        )
        p = np.asarray(self.pulse(u.ravel(), v.ravel(), grid.psize))[:, None]
        self.a_re = jnp.asarray(p * np.cos(ph))
        self.a_im = jnp.asarray(p * np.sin(ph))

    def __call__(self, image):
        x = image.ravel()
        return (self.a_re @ x + 1j * (self.a_im @ x)).reshape(self.u.shape)

    def at(self, u, v):
        return type(self)(self.grid, u, v, self.pulse)


class HermitianDFT(UserDFT):
    """The same model declaring that its point leaves follow (u, v) with
    `V(−u) = conj V(u)`."""

    hermitian_points = True


class UserBox(em.AbstractPulse):
    """A user's even pulse (a top-hat), declared even."""

    even = True

    def __call__(self, u, v, psize):
        xp = jnp if isinstance(u, jax.Array) else np
        return xp.sinc(u * psize) * xp.sinc(v * psize)


class UndeclaredBox(em.AbstractPulse):
    """The same pulse, not declared even."""

    def __call__(self, u, v, psize):
        xp = jnp if isinstance(u, jax.Array) else np
        return xp.sinc(u * psize) * xp.sinc(v * psize)


def _mirrored_pair(make):
    """Two visibility terms at `(u, v)` and `(−u, −v)` with models from `make`."""
    ft, mirrored = make(U, V), make(-U, -V)
    vis = np.asarray(ft(IMG))
    return em.VisChi2(ft, 1.1 * vis, ONES), em.VisChi2(mirrored, np.conj(0.9 * vis), ONES)


@pytest.mark.parametrize(
    "make, merged",
    [
        (lambda u, v: HermitianDFT(GRID, u, v), True),
        (lambda u, v: UserDFT(GRID, u, v), False),
        (lambda u, v: HermitianDFT(GRID, u, v, UserBox()), True),
        (lambda u, v: HermitianDFT(GRID, u, v, UndeclaredBox()), False),
        (lambda u, v: em.DirectFT(GRID, u, v, UserBox()), True),
        (lambda u, v: em.DirectFT(GRID, u, v, UndeclaredBox()), False),
    ],
)
def test_mirrored_points_merge_when_model_and_pulse_declare_it(make, merged):
    """Declared by the class, not by where it is defined: a user's model that
    declares `hermitian_points` (with a pulse that declares `even`) has `±(u, v)`
    merged like eqmodels' own; undeclared ones keep them apart. Values agree
    either way."""
    t1, t2 = _mirrored_pair(make)
    obj = t1 + t2
    assert len(obj.shared) == 1
    assert obj.shared[0].forward.u.shape == ((10,) if merged else (20,))
    assert_allclose(obj.values(IMG), (t1(IMG), t2(IMG)), rtol=1e-12)


class CountingPower(PowerChi2):
    """Overrides `__call__` (say, to log) and declares it may share anyway."""

    share_forward = True

    def __call__(self, image):
        return super().__call__(image)


class OwnModelPower(PowerChi2):
    """Overrides `model_vis` and declares nothing: evaluated through it."""

    def model_vis(self, image):
        return 1.5 * super().model_vis(image)


def test_sharing_is_declared_by_the_class():
    assert em.AbstractDataTerm.share_forward and PowerChi2.share_forward
    assert CountingPower.share_forward
    assert not OwnModelPower.share_forward  # the safe default for an override
    fwd = em.DirectFT(GRID, U, V)
    power = np.abs(np.asarray(fwd(IMG))) ** 2
    amp = em.AmpChi2(fwd, np.sqrt(power), ONES)
    counting, own = CountingPower(fwd, power, ONES), OwnModelPower(fwd, power, ONES)
    obj = counting + own + amp
    members = {m for g in obj.shared for m in g.members}
    assert members == {0, 2}  # `own` evaluates its own model
    assert obj.terms[0].forward is None and obj.terms[1].forward is not None
    assert_allclose(obj.values(IMG), (counting(IMG), own(IMG), amp(IMG)), rtol=1e-12)


class Scaled(em.AbstractTermWrapper):
    """A user's wrapper: the inner term sees its model visibilities scaled by a
    fitted factor. The inner term keeps the forward model."""

    term: em.AbstractDataTerm
    scale: jax.Array

    def __init__(self, term, scale):
        self.term = term
        self.scale = jnp.asarray(scale, float)

    @property
    def forward(self):
        return self.term.forward

    def chi2_from_vis(self, vis):
        return self.term.chi2_from_vis(self.scale * vis)

    def residuals_from_vis(self, vis):
        return self.term.residuals_from_vis(self.scale * vis)


class ScaledOwnForward(em.AbstractTermWrapper):
    """The same wrapper holding the forward model itself (as `GainCorrected`)."""

    term: em.AbstractDataTerm
    forward: em.AbstractForwardModel | None
    scale: jax.Array

    def __init__(self, term, scale):
        self.forward = term.forward
        self.term = term.without_forward()
        self.scale = jnp.asarray(scale, float)

    def chi2_from_vis(self, vis):
        return self.term.chi2_from_vis(self.scale * vis)

    def residuals_from_vis(self, vis):
        return self.term.residuals_from_vis(self.scale * vis)


@pytest.mark.parametrize("wrapper", [Scaled, ScaledOwnForward])
def test_a_users_term_wrapper_works_like_ours(wrapper):
    fwd = em.DirectFT(GRID, U, V)
    vis = np.asarray(fwd(IMG))
    inner = em.AmpChi2(fwd, 1.1 * np.abs(vis), ONES)
    term = wrapper(inner, 1.1)
    # The inner term's value at the scaled visibilities; its name and rows.
    assert float(term(IMG)) < 1e-20
    assert term.report_name == "amp" and term.rows == 10
    assert ("term", "weight") in term.row_paths()
    other = em.VisChi2(fwd, vis, ONES)
    obj = term + other
    assert len(obj.shared) == 1 and obj.shared[0].members == (0, 1)
    assert obj.terms[0].forward is None
    assert_allclose(obj.values(IMG), (term(IMG), other(IMG)), rtol=1e-12, atol=1e-20)
    # Rows: gathered and padded through the inner term (and the wrapper's own
    # forward model, when it holds one).
    half = term.take_rows(np.arange(5), n_rows=5)
    assert half.rows == 5 and half.forward.u.shape == (5,)
    assert_allclose(
        half(IMG * 1.2),
        wrapper(inner.take_rows(np.arange(5), n_rows=5), 1.1)(IMG * 1.2),
        rtol=1e-12,
    )
    padded = term.pad_rows(13)
    assert padded.rows == 13 and padded.forward.u.shape == (13,)
    assert_allclose(padded(IMG * 1.2), term(IMG * 1.2), rtol=1e-12)
    # The transforms suite, and split over a (one-device) mesh.
    emt.check_transforms(term, IMG * 1.2)
    sharded = em.ShardedChi2(term, jax.make_mesh((1,), ("rows",)))
    assert em.sharded_parts(sharded)[0] is sharded
    kinds = {type(x) for x in em.sharded_parts(sharded + other)}
    assert em.ShardedChi2 in kinds and kinds <= {em.ShardedChi2, em.ShardedForward}
    assert_allclose(sharded(IMG * 1.2), term(IMG * 1.2), rtol=1e-12)
    obj = sharded + other
    assert_allclose(
        obj.values(IMG * 1.2), (term(IMG * 1.2), other(IMG * 1.2)), rtol=1e-12
    )


def test_our_wrappers_subclass_the_public_wrapper_base():
    assert issubclass(em.GainCorrected, em.AbstractTermWrapper)
    assert issubclass(em.ShardedChi2, em.AbstractTermWrapper)
    assert issubclass(em.ShardedChi2, em.AbstractSharded)
    assert issubclass(em.ShardedForward, em.AbstractSharded)


class NotSquares(em.AbstractRegularizer):
    def penalty(self, image):
        return jnp.sum(jnp.abs(image))


def test_residuals_are_declared_on_the_regularizer_base():
    assert SumSquares.has_residuals and not NotSquares.has_residuals
    assert em.AbstractDataTerm.has_residuals and em.Objective.has_residuals
    assert not em.AbstractRegularizer.has_residuals
    with pytest.raises(NotImplementedError, match="NotSquares is not a sum of squares"):
        NotSquares().residuals(IMG)
    amp = em.AmpChi2(em.DirectFT(GRID, U, V), ONES, ONES)
    r = (amp + 2.0 * SumSquares(IMG / 2)).residuals(IMG)
    assert_allclose(
        jnp.sum(r * r), amp(IMG) + 2.0 * SumSquares(IMG / 2)(IMG), rtol=1e-12
    )
    with pytest.raises(TypeError, match=r"'NotSquares'.*not a sum of squares"):
        (amp + NotSquares()).residuals(IMG)
    emt.check_transforms(SumSquares(IMG / 2), IMG)


class Doubled(em.AbstractImageModel):
    """A user's image model: twice a free pixel array."""

    grid: em.ImageGrid
    pixels: jax.Array

    def __call__(self):
        return 2.0 * self.pixels


def test_a_users_image_model_evaluates_in_an_objective():
    fwd = HermitianDFT(GRID, U, V)
    obj = em.AmpChi2(fwd, ONES, ONES) + em.AmpChi2(
        HermitianDFT(GRID, -U, -V), ONES, ONES
    )
    model = Doubled(GRID, IMG / 2)
    assert_allclose(obj(model), obj(IMG), rtol=1e-13)
    emt.check_transforms(lambda img: obj(Doubled(GRID, img)), IMG / 2)


class AmpRows(NamedTuple):
    u: np.ndarray
    v: np.ndarray
    amp: np.ndarray
    sigma: np.ndarray


def test_from_data_takes_a_forward_class_or_callable():
    data = AmpRows(U, V, ONES, ONES)
    delta = functools.partial(em.DirectFT, pulse=em.DeltaPulse())
    want = em.AmpChi2.from_data(data, GRID, forward=delta)
    for forward in (HermitianDFT, lambda grid, u, v: UserDFT(grid, u, v)):
        term = em.AmpChi2.from_data(data, GRID, forward=forward)
        assert type(term.forward) is not em.DirectFT
        assert_allclose(term(IMG), want(IMG), rtol=1e-12)


@pytest.mark.parametrize(
    "forward",
    [
        HermitianDFT,
        em.DirectFT,
        functools.partial(em.DirectFT, pulse=em.BoxPulse()),
        lambda grid, u, v: HermitianDFT(grid, u, v, UserBox()),
    ],
)
def test_forward_takes_a_class_or_a_callable(forward):
    model = em.make_forward(forward, GRID, U, V)
    assert isinstance(model, em.AbstractForwardModel)
    assert model.u.shape == (10,)
    want = em.DirectFT(GRID, U, V, getattr(model, "pulse", em.DeltaPulse()))
    assert_allclose(model(IMG), want(IMG), rtol=1e-12)


MAKE_FORWARD_NUMBER = unchecked_error(
    "em.make_forward(3, em.ImageGrid(4, 4, 1e-11), [1.0], [1.0])", "TypeError"
)


def test_forward_is_refused_clearly(unchecked):
    with pytest.raises(ValueError, match="one of .*'direct'.*class or a callable"):
        em.make_forward("dft", GRID, U, V)
    with pytest.raises(TypeError, match="class int, not a forward model class"):
        em.make_forward(int, GRID, U, V)
    with pytest.raises(TypeError, match="built DirectFT, not a way to build one"):
        em.make_forward(em.DirectFT(GRID, U, V), GRID, U, V)
    # (The suite's type checker refuses a number first; users get ours.)
    msg = unchecked[MAKE_FORWARD_NUMBER]
    assert msg is not None and "must be one of" in msg
    with pytest.raises(TypeError, match="returned ndarray, not a forward model"):
        em.make_forward(lambda g, u, v: np.zeros(3), GRID, U, V)
    with pytest.raises(ValueError, match="points of shape"):
        em.make_forward(lambda g, u, v: em.DirectFT(g, u[:3], v[:3]), GRID, U, V)


def test_the_wrapper_of_docs_extending_runs():
    import pathlib
    import re

    doc = pathlib.Path(__file__).resolve().parents[1] / "docs" / "extending.md"
    text = doc.read_text()
    text = text[text.index("**Term wrappers.**") : text.index("## A forward model")]
    (block,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    ns: dict = {"em": em, "jax": jax, "jnp": jnp}
    exec(compile(block, str(doc), "exec"), ns)
    fwd = em.DirectFT(GRID, U, V)
    inner = em.AmpChi2(fwd, 2 * np.abs(np.asarray(fwd(IMG))), ONES)
    assert float(ns["Scaled"](inner, 2.0)(IMG)) < 1e-20
    assert float(inner(IMG)) > 1.0


@pytest.mark.slow
def test_a_survey_of_users_subclasses_equals_single_solves():
    """A survey over objectives built only of a user's classes — a forward model
    declaring Hermitian points (two terms share one transform), a data term, a
    sum-of-squares regularizer, an image model — is the batch of its single
    solves, configuration by configuration (weights differ)."""
    rng = np.random.default_rng(4)
    truth = jnp.asarray(rng.uniform(0.1, 1, GRID.shape))
    power = np.abs(np.asarray(HermitianDFT(GRID, U, V)(truth))) ** 2
    amp = np.abs(np.asarray(HermitianDFT(GRID, -U, -V)(truth)))
    data = PowerChi2(HermitianDFT(GRID, U, V), power, power * 0.1 + 1.0)
    amps = em.AmpChi2(HermitianDFT(GRID, -U, -V), amp, 0.1 * amp + 0.1)
    objectives = [data + amps + w * SumSquares(truth * 0 + 0.5) for w in (0.1, 1.0, 3.0)]
    assert len(objectives[0].shared) == 1  # the two terms share one transform
    model = Doubled(GRID, jnp.full(GRID.shape, 0.25))
    result = em.survey(objectives, model, max_steps=30)
    for i, obj in enumerate(objectives):
        single = em.solve(obj, model, max_steps=30)
        assert_allclose(result[i].model.pixels, single.model.pixels, rtol=1e-9)
        assert_allclose(result[i].value, single.value, rtol=1e-12)
        assert int(result[i].steps) == int(single.steps)
