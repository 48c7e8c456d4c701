"""Objective: composition by arithmetic, values vs the numpy references, shared
transforms, chi² offset, reports, surveys (vmap over weights), errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems import FORWARD_RTOL
from tests.problems.terms import GRID, legs, positive_image, PRIOR, products
from tests.reference import regularizers as rr, terms as rt


def data_terms(forward="direct"):
    kw = {"eps": 1e-12} if forward == "nufft" else {}
    p = products()

    def fwd(key):
        return em.make_forward(forward, GRID, p[key][0], p[key][1], **kw)

    return (
        em.AmpChi2(fwd("amp"), *p["amp"][2:]),
        em.ClosurePhaseChi2(fwd("cphase"), *p["cphase"][2:]),
        em.LogClosureAmpChi2(fwd("logcamp"), *p["logcamp"][2:]),
        em.VisChi2(fwd("vis"), *p["vis"][2:]),
    )


def reference(img, weights):
    """Σ w_i T_i and its gradient, from the numpy references."""
    p = products()
    parts = [
        rt.amp_chi2(legs("amp"), img, *p["amp"][2:]),
        rt.cphase_chi2(legs("cphase"), img, *p["cphase"][2:]),
        rt.logcamp_chi2(legs("logcamp"), img, *p["logcamp"][2:]),
        rt.vis_chi2(legs("vis"), img, *p["vis"][2:]),
        rr.simple(img, PRIOR),
        rr.tv(img),
    ]
    val = sum(w * v for w, (v, _) in zip(weights, parts))
    grad = sum(w * g for w, (_, g) in zip(weights, parts))
    return val, grad, [v for v, _ in parts]


WEIGHTS = (0.2, 1.0, 1.0, 2.0, 100.0, 3.0)


def build(forward="direct", share=True):
    amp, cphase, logcamp, vis = data_terms(forward)
    if not share:  # members of a sharing objective hold no model: start from terms
        terms = (amp, cphase, logcamp, vis, em.SimpleEntropy(PRIOR), em.TV(GRID))
        return em.Objective(terms, WEIGHTS, share=False)
    return (
        0.2 * amp
        + cphase
        + logcamp * 1.0
        + 2 * vis
        + 100.0 * em.SimpleEntropy(PRIOR)
        + em.TV(GRID) * 3.0
    )


@pytest.mark.parametrize("forward", list(FORWARD_RTOL))
def test_value_grad_and_report_match_numpy(forward):
    obj = build(forward)
    assert isinstance(obj, em.Objective)
    assert obj.names == ("amp", "cphase", "logcamp", "vis", "simple", "tv")
    assert_allclose(obj.weights, np.array(WEIGHTS), rtol=0)
    img = positive_image(seed=4)
    ref_val, ref_grad, ref_parts = reference(img, WEIGHTS)
    rtol = FORWARD_RTOL[forward]

    @eqx.filter_jit  # the three forms in one compiled program
    def forms(x, o):
        return (
            eqx.filter_value_and_grad(lambda x, o: o(x))(x, o),
            o.report(x),
            # Value and report from one evaluation, and as `has_aux` for a gradient.
            eqx.filter_value_and_grad(lambda x, o: o.value_and_report(x), has_aux=True)(
                x, o
            ),
        )

    (val, grad), report, ((val2, report2), grad2) = forms(jnp.asarray(img), obj)
    assert_allclose(val, ref_val, rtol=rtol)
    assert_allclose(grad, ref_grad, rtol=rtol)
    assert set(report) == set(obj.names)  # (jit returns dicts with sorted keys)
    got = np.array([report[n] for n in obj.names])
    assert_allclose(got, np.array(ref_parts), rtol=rtol)
    assert_allclose(val2, ref_val, rtol=rtol)
    assert_allclose(grad2, ref_grad, rtol=rtol)
    got2 = np.array([report2[n] for n in obj.names])
    assert_allclose(got2, np.array(ref_parts), rtol=rtol)


@pytest.mark.parametrize("forward", list(FORWARD_RTOL))
def test_shared_transform_equals_separate_terms(forward):
    shared = build(forward)
    separate = build(forward, share=False)
    # The four data terms share one transform at their distinct baselines.
    assert len(shared.shared) == 1 and separate.shared == ()
    (group,) = shared.shared
    assert group.members == (0, 1, 2, 3)
    assert all(t.forward is None for t in shared.terms[:4])  # no second copy
    n_legs = sum(t.forward.u.size for t in separate.terms[:4])
    distinct = products()["vis"][0].size  # every leg is one of the baselines
    assert group.n_points == distinct < n_legs
    imgs = jnp.asarray(np.stack([positive_image(seed=s) for s in range(2)]))
    f = jax.jit(jax.vmap(jax.value_and_grad(lambda x, o: o(x)), in_axes=(0, None)))
    v1, g1 = f(imgs, shared)
    v2, g2 = f(imgs, separate)
    assert_allclose(v1, v2, rtol=1e-13)
    assert_allclose(g1, g2, rtol=1e-13)


def _count(jaxpr, names):
    n = 0
    for eqn in jaxpr.eqns:
        n += eqn.primitive.name in names
        for sub in jax.core.subjaxprs(eqn) if hasattr(jax.core, "subjaxprs") else ():
            n += _count(sub, names)
        for p in eqn.params.values():
            for j in p if isinstance(p, tuple | list) else (p,):
                inner = getattr(j, "jaxpr", None)
                if inner is not None and hasattr(inner, "eqns"):
                    n += _count(inner, names)
                elif hasattr(j, "eqns"):
                    n += _count(j, names)
    return n


def test_nufft_terms_pay_one_transform():
    """Value and gradient of four NUFFT data terms (amp, cphase, logcamp, vis):
    one type-2 and one type-1 transform when shared, four of each when not."""
    obj = build("nufft")
    sep = build("nufft", share=False)
    x = jnp.asarray(positive_image())
    names = {"eqmodels_nufft_type1", "eqmodels_nufft_type2"}
    n_shared = _count(jax.make_jaxpr(jax.grad(obj))(x).jaxpr, names)
    n_sep = _count(jax.make_jaxpr(jax.grad(sep))(x).jaxpr, names)
    assert n_shared == 2
    assert n_sep == 8


def test_chi2_offset_survey_and_sum():
    amp, cphase, logcamp, _ = data_terms()
    tv = em.TV(GRID)
    obj = sum([0.2 * amp, cphase, logcamp, 1.5 * tv])
    assert isinstance(obj, em.Objective) and obj.names == (
        "amp",
        "cphase",
        "logcamp",
        "tv",
    )
    off = em.Objective([obj], chi2_offset=True)
    assert off.chi2_offset and off.names == obj.names
    x = jnp.asarray(positive_image(seed=5))

    @eqx.filter_jit
    def run(x, obj, off, ws):
        vg = jax.value_and_grad(lambda x, o: o(x))
        parts = jnp.stack(obj.values(x))
        part_grads = jax.jacrev(lambda x: jnp.stack(obj.values(x)))(x)
        # A survey is a vmap over the weights array.
        survey = jax.vmap(lambda w: vg(x, obj.with_weights(w)))(ws)
        return vg(x, obj), vg(x, off), parts, part_grads, survey

    ws = jnp.asarray(np.random.default_rng(0).uniform(0.1, 3.0, (5, 4)))
    (v, g), (v_off, g_off), parts, part_grads, (s_vals, s_grads) = run(x, obj, off, ws)
    # α(χ² − 1) for data terms only: the value moves by −Σ α_d, the gradient not.
    assert_allclose(v_off, v - (0.2 + 1 + 1), rtol=1e-13)
    assert_allclose(g_off, g, rtol=1e-13)
    assert_allclose(v, np.array([0.2, 1, 1, 1.5]) @ np.asarray(parts), rtol=1e-13)
    assert_allclose(s_vals, np.asarray(ws) @ np.asarray(parts), rtol=1e-13)
    assert_allclose(s_grads, np.einsum("bi,ixy->bxy", ws, part_grads), rtol=1e-12)
    # Scaling an objective scales its weights; nested objectives flatten.
    assert_allclose((2 * obj).weights, 2 * obj.weights, rtol=0)
    nested = em.Objective([obj, tv], [0.5, 2.0])
    assert nested.names == ("amp", "cphase", "logcamp", "tv", "tv_2")
    assert_allclose(nested.weights, np.array([0.1, 0.5, 0.5, 0.75, 2.0]), rtol=1e-15)
    assert (obj / 2).weights[0] == pytest.approx(0.1)


def test_training_loop_with_image_model():
    """The objective is a loss for an optax loop over an image model."""
    amp, cphase, logcamp, _ = data_terms("separable")
    obj = (
        0.2 * amp + cphase + logcamp + 10 * em.SimpleEntropy(PRIOR) + 1e3 * em.Flux(1.3)
    )
    model = em.PixelImage.from_prior(PRIOR, GRID, clipfloor=0.0, flux=1.3)
    opt = optax.adam(3e-2)
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(model, state, obj):
        loss, g = eqx.filter_value_and_grad(lambda m, o: o(m))(model, obj)
        updates, state = opt.update(g, state)
        return eqx.apply_updates(model, updates), state, loss

    losses = []
    for _ in range(30):
        model, state, loss = step(model, state, obj)
        losses.append(float(loss))
    assert np.isfinite(losses).all() and losses[-1] < 0.5 * losses[0]


def test_errors():
    amp, *_ = data_terms()
    tv = em.TV(GRID)
    with pytest.raises(ValueError, match="empty"):
        em.Objective([])
    with pytest.raises(TypeError, match="AbstractTerm"):
        em.Objective([amp, "tv"])
    with pytest.raises(ValueError, match="one weight per term"):
        em.Objective([amp, tv], [1.0])
    with pytest.raises(ValueError, match="`names`"):
        em.Objective([amp, tv], names=["a"])
    with pytest.raises(TypeError, match="scalar"):
        em.TV(GRID) * jnp.ones(2)
    with pytest.raises(TypeError, match="scalar"):
        np.ones(2) * em.TV(GRID)
    with pytest.raises(TypeError, match="another term"):
        tv * tv
    off = em.Objective([amp], chi2_offset=True)
    with pytest.raises(ValueError, match="chi2_offset"):
        off + em.Objective([amp])  # both sides hold data terms: they must agree
    # A side without data terms has no say in the offset.
    assert (off + tv).chi2_offset and (tv + off).chi2_offset
    assert (off + 2.0 * tv).chi2_offset
    obj = amp + tv
    with pytest.raises(ValueError, match="one per term"):
        obj.with_weights(jnp.ones(3))
    assert tv.__add__("tv") is NotImplemented
    with pytest.raises(TypeError, match="a number cannot be added"):
        tv.__add__(3)


def test_objective_refuses_terms_of_two_precisions():
    """An image of either dtype was refused by one of the terms, each message
    naming the other's dtype: refused when the objective is built."""
    p = products()
    amp = em.AmpChi2(em.DirectFT(GRID, *p["amp"][:2]), *p["amp"][2:])
    cp32 = em.ClosurePhaseChi2(
        em.DirectFT(GRID, *p["cphase"][:2], dtype=jnp.float32), *p["cphase"][2:]
    )
    with pytest.raises(ValueError, match="different precisions.*'amp'.*'cphase'"):
        em.Objective([amp, cp32])
    with pytest.raises(ValueError, match="different precisions"):
        amp + em.TV(GRID) + cp32


def test_a_name_given_to_a_nested_objective_prefixes_its_terms():
    """It was dropped silently: the nested terms kept their own names."""
    amp, *_ = data_terms()
    obj = em.Objective([amp + em.TSV(GRID), em.TV(GRID)], names=["data", "smooth"])
    assert obj.names == ("data.amp", "data.tv2", "smooth")
    assert set(obj.report(positive_image())) == set(obj.names)


@pytest.mark.slow
@pytest.mark.parametrize("forward", ["direct", "nufft"])
def test_sum_built_objective_shares_like_one_shot(forward):
    """`a + b + ...` reuses the shared transforms across the sum (no rebuild when a
    side adds no data term) and ends with the same groups as one `Objective(...)`,
    whichever side the regularizers are on."""
    amp, cphase, logcamp, vis = data_terms(forward)
    tv, ent = em.TV(GRID), em.SimpleEntropy(PRIOR)
    one = em.Objective([amp, cphase, logcamp, tv, ent], [0.2, 1, 1, 3, 100])
    for obj in (
        0.2 * amp + cphase + logcamp + 3 * tv + 100 * ent,
        3 * tv + (100 * ent + (0.2 * amp + cphase + logcamp)),
    ):
        members = sorted(sorted(obj.names[m] for m in g.members) for g in obj.shared)
        assert members == sorted(
            sorted(one.names[m] for m in g.members) for g in one.shared
        )
        assert [g.n_points for g in obj.shared] == [g.n_points for g in one.shared]
        img = jnp.asarray(positive_image())
        assert_allclose(obj(img), one(img), rtol=1e-13)
        assert_allclose(jax.grad(obj)(img), jax.grad(one)(img), rtol=1e-13)


def test_weights_as_a_list_holding_traced_numbers():
    """`with_weights([w, 1.0])` and `Objective(..., weights=[w, 1.0])` under vmap,
    grad and jit (the natural way to survey one weight) equal the array form; they
    failed with JAX's bare `TracerArrayConversionError`."""
    u, v, vis, sigma = products()["vis"]
    term = em.VisChi2(em.DirectFT(GRID, u, v), vis, sigma)
    tv = em.TV(GRID)
    obj = em.Objective([term, tv])
    img = jnp.asarray(positive_image())
    ws = jnp.array([0.5, 2.0])
    want = [float(term(img)) * w + float(tv(img)) for w in ws]
    got = jax.vmap(lambda w: obj.with_weights([w, 1.0])(img))(ws)
    assert_allclose(got, want, rtol=1e-13)
    built = jax.jit(lambda w: em.Objective([term, tv], weights=[w, 1.0])(img))(ws[1])
    assert_allclose(built, want[1], rtol=1e-13)
    grad = jax.grad(lambda w: obj.with_weights([w, 1.0])(img))(0.5)
    assert_allclose(grad, term(img), rtol=1e-13)
    # A complex weight is still refused (by the test suite's type checker first).
    with pytest.raises(TypeError, match="weights"):
        jax.jit(lambda w: obj.with_weights([w, 1.0]))(jnp.asarray(1j))
