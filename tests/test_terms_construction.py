"""Data terms: constructors from the data layer's products (`from_data`, every
forward model), float32, and clear construction errors."""

import contextlib

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems.terms import DATA_TERMS, GRID, positive_image, products
from tests.unchecked import unchecked_error


DAY_100 = "eqmodels/data/SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits"
FROM_DATA = [
    (em.AmpChi2, em.amplitudes, "amp"),
    (em.BispectrumChi2, em.bispectra, "bispectrum"),
    (em.ClosurePhaseChi2, em.closure_phases, "cphase"),
    (em.LogClosureAmpChi2, em.log_closure_amplitudes, "logcamp"),
    (em.ClosureAmpChi2, em.closure_amplitudes, "camp"),
]


@pytest.fixture(scope="module")
def visdata():
    return em.load_uvfits(DAY_100).scan_average()


@pytest.mark.parametrize("forward", ["direct", "separable", "nufft"])
def test_from_data_products(visdata, forward):
    grid = em.ImageGrid.from_fov(32, 128.0)
    img = jnp.asarray(np.asarray(em.GaussianImage(grid, 0.6, em.uas_to_rad(40.0))()))
    kw = {"eps": 1e-12} if forward == "nufft" else {}
    terms = [em.VisChi2.from_data(visdata, grid, forward=forward, **kw)]
    raw = [
        em.VisChi2(em.DirectFT(grid, visdata.u, visdata.v), visdata.vis, visdata.sigma)
    ]
    for cls, make, field in FROM_DATA:
        prod = make(visdata)
        terms.append(cls.from_data(prod, grid, forward=forward, **kw))
        raw.append(
            cls(em.DirectFT(grid, prod.u, prod.v), getattr(prod, field), prod.sigma)
        )
    for t, r in zip(terms, raw):
        assert t.n_rows == r.n_rows
        assert isinstance(
            t.forward,
            em.make_forward(forward, grid, np.zeros(1), np.zeros(1)).__class__,
        )
    vals = jax.jit(lambda x: [t(x) for t in terms])(img)
    refs = jax.jit(lambda x: [t(x) for t in raw])(img)
    rtol = 1e-10 if forward == "nufft" else 1e-12
    for v, r in zip(vals, refs):
        assert np.isfinite(float(v))
        assert_allclose(v, r, rtol=rtol)


def test_float32_terms():
    img = positive_image().astype(np.float32)
    for case in DATA_TERMS:
        u, v, value, sigma = products()[case.key]
        term = case.cls(em.DirectFT(GRID, u, v, dtype=jnp.float32), value, sigma)
        assert term.weight.dtype == jnp.float32
        val, grad = jax.jit(jax.value_and_grad(lambda x: term(x)))(jnp.asarray(img))
        assert val.dtype == jnp.float32 and grad.dtype == jnp.float32
        ref_val, _ = case.reference(img.astype(np.float64))
        assert_allclose(val, ref_val, rtol=5e-4, err=case.name)


# (σ = 0.01° is the hardest case; the larger two run in the slow lane.)
@pytest.mark.parametrize(
    "sigma_deg",
    [
        pytest.param(1.0, marks=pytest.mark.slow),
        pytest.param(0.05, marks=pytest.mark.slow),
        0.01,
    ],
)
def test_float32_closure_phase_chi2_at_small_sigma(sigma_deg):
    """`1 − cos Δ` cancelled in float32 for small Δ: 2 % of the χ² at σ = 0.05°
    (high-SNR data). The float32 value now agrees with the term's own residuals
    (`2 sin(Δ/2)`, no cancellation) to float32 rounding, and with float64 to the
    float32 forward model's phase errors (which grow as σ shrinks)."""
    img = positive_image()
    u, v, _, _ = products()["cphase"]
    fwd64 = em.DirectFT(GRID, u, v)
    psi0 = np.angle(np.prod(np.asarray(fwd64(jnp.asarray(img))), axis=1))
    s = np.deg2rad(sigma_deg)
    psi = psi0 + s * np.random.default_rng(1).standard_normal(psi0.shape)
    sig = np.full(psi.shape, s)
    t64 = em.ClosurePhaseChi2(fwd64, psi, sig)
    t32 = em.ClosurePhaseChi2(em.DirectFT(GRID, u, v, dtype=jnp.float32), psi, sig)
    v32, g32 = jax.value_and_grad(lambda x: t32(x))(jnp.asarray(img, jnp.float32))
    r32 = t32.residuals(jnp.asarray(img, jnp.float32))
    assert_allclose(v32, jnp.sum(r32 * r32), rtol=1e-5)
    v64, g64 = jax.value_and_grad(lambda x: t64(x))(jnp.asarray(img))
    assert_allclose(v32, v64, rtol=2e-3)
    assert_allclose(g32, g64, rtol=0, atol=2e-2 * float(jnp.abs(g64).max()))


def _args(key):
    u, v, value, sigma = products()[key]
    return em.DirectFT(GRID, u, v), value, sigma


def _bad(key, **change):
    fwd, value, sigma = _args(key)
    fwd = change.get("forward", fwd)
    value = change.get("value", value)
    sigma = change.get("sigma", sigma)
    return fwd, value, sigma


AMP_FWD = em.DirectFT(GRID, *products()["amp"][:2])


@pytest.mark.parametrize(
    "cls,key,change,exc,match",
    [
        (em.AmpChi2, "amp", dict(forward="direct"), TypeError, "forward"),
        (em.ClosurePhaseChi2, "cphase", dict(forward=AMP_FWD), ValueError, r"\(n, 3\)"),
        (em.LogClosureAmpChi2, "cphase", {}, ValueError, r"\(n, 4\)"),
        (em.AmpChi2, "cphase", {}, ValueError, r"\(n,\)"),
        (
            em.AmpChi2,
            "amp",
            dict(value=np.ones(3), sigma=np.ones(3)),
            ValueError,
            "`amp` has shape",
        ),
        (em.AmpChi2, "amp", dict(sigma=np.zeros(45)), ValueError, "sigmas must be > 0"),
        (em.ClosureAmpChi2, "camp", dict(sigma=-np.ones(12)), ValueError, "sigma"),
        (
            em.LogClosureAmpChi2,
            "logcamp",
            dict(value=np.full(12, np.nan)),
            ValueError,
            "non-finite",
        ),
        (
            em.ClosurePhaseChi2,
            "cphase",
            dict(value=np.full(15, 120.0)),
            ValueError,
            "radians",
        ),
        (
            em.BispectrumChi2,
            "bispectrum",
            dict(value=np.ones(4, complex), sigma=np.ones(4)),
            ValueError,
            "`bispectrum` has shape",
        ),
        (
            em.BispectrumChi2,
            "bispectrum",
            dict(value=np.full(15, np.inf + 0j)),
            ValueError,
            "non-finite",
        ),
    ],
)
def test_construction_errors(cls, key, change, exc, match):
    with pytest.raises(exc, match=match):
        cls(*_bad(key, **change))


@contextlib.contextmanager
def _no_runtime_typecheck():
    """Call as users do: without the test-suite's jaxtyping runtime checks (which
    would otherwise reject a mis-shaped `sigma` before the constructor runs)."""
    before = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", before)


@pytest.mark.parametrize(
    "cls,key",
    [
        (em.ClosureAmpChi2, "camp"),
        (em.LogClosureAmpChi2, "logcamp"),
        (em.ClosurePhaseChi2, "cphase"),
    ],
)
@pytest.mark.parametrize("reshape", ["short", "long", "column"])
def test_sigma_shape_must_match_forward_rows(cls, key, reshape):
    fwd, value, sigma = _args(key)
    n = fwd.u.shape[0]
    assert value.shape == sigma.shape == (n,)
    bad = {
        "short": sigma[:-1],
        "long": np.concatenate([sigma, sigma[:1]]),
        "column": sigma[:, None],
    }[reshape]
    with _no_runtime_typecheck():
        with pytest.raises(ValueError, match="`sigma` has shape") as info:
            cls(fwd, value, bad)
        assert f"{bad.shape}" in str(info.value) and f"{n} rows" in str(info.value)
        cls(fwd, value, sigma)  # the right shape passes the same path
    # Under the test suite's runtime checker it is rejected too, naming `sigma`.
    with pytest.raises((TypeError, ValueError), match="sigma"):
        cls(fwd, value, bad)


def test_make_forward_errors():
    with pytest.raises(ValueError, match="one of"):
        em.make_forward("fft", GRID, np.zeros(1), np.zeros(1))
    with pytest.raises(TypeError, match="eps"):
        em.make_forward("direct", GRID, np.zeros(1), np.zeros(1), eps=1e-9)
    u, v, amp, sigma = products()["amp"]
    prod = em.AmpProducts(
        u=jnp.asarray(u),
        v=jnp.asarray(v),
        amp=jnp.asarray(amp),
        sigma=jnp.asarray(sigma),
        time=jnp.zeros(u.size),
        stations=jnp.zeros((u.size, 2), jnp.int32),
        time_index=jnp.zeros(u.size, jnp.int32),
    )
    with pytest.raises(ValueError, match="one of"):
        em.AmpChi2.from_data(prod, GRID, forward="dft")
    assert em.AmpChi2.from_data(prod, GRID).n_rows == u.size


@pytest.mark.parametrize(
    "cls,key", [(c.cls, c.key) for c in DATA_TERMS if c.name != "vis"], ids=str
)
def test_shapes_are_checked_when_the_data_are_traced(cls, key):
    """Shapes are static: a mis-shaped value or sigma under `vmap`/`jit` is refused
    as it is eagerly (it was broadcast silently)."""
    fwd, value, sigma = _args(key)
    with _no_runtime_typecheck():
        with pytest.raises(ValueError, match="has shape .* but `forward` has"):
            jax.vmap(lambda x: cls(fwd, x, sigma).weight)(jnp.asarray(value)[None, :1])
        with pytest.raises(ValueError, match="`sigma` has shape"):
            jax.jit(lambda s: cls(fwd, value, s).weight)(jnp.asarray(sigma)[:1])
        # The right shapes pass the same traced path.
        w = jax.jit(lambda x, s: cls(fwd, x, s).weight)(jnp.asarray(value), sigma)
        assert w.shape == np.shape(sigma)


def test_inverse_variance_must_be_representable():
    """1/σ² of a tiny σ overflows float32 (a bispectrum in Jy³ of a faint
    source): refused at construction, not an inf weight and a NaN χ² later."""
    u, v, value, sigma = products()["bispectrum"]
    fwd32 = em.DirectFT(GRID, u, v, dtype=jnp.float32)
    with pytest.raises(ValueError, match="1/σ² is not representable in float32"):
        em.BispectrumChi2(fwd32, value * 1e-20, sigma * 1e-20)
    with pytest.raises(ValueError, match="underflow"):
        em.AmpChi2(
            em.DirectFT(GRID, *products()["amp"][:2]), np.ones(45), 1e160 * np.ones(45)
        )
    em.BispectrumChi2(em.DirectFT(GRID, u, v), value * 1e-20, sigma * 1e-20)  # float64


def test_vis_chi2_refuses_0d_points():
    fwd = em.DirectFT(GRID, 1e9, 2e9)
    with pytest.raises(ValueError, match="0-d points .* shape \\(1,\\)"):
        em.VisChi2(fwd, np.asarray(0.5 + 0.1j), np.asarray(0.05))
    em.VisChi2(
        em.DirectFT(GRID, [1e9], [2e9]), np.array([0.5 + 0.1j]), np.array([0.05])
    )


@pytest.mark.parametrize("flux", [1.0, 1e-5, 1e-7])
def test_float32_closure_phases_of_a_faint_source(flux):
    """A closure phase does not depend on the flux scale. In float32 the sixth
    power of the amplitudes behind it was subnormal or 0 for a faint source (χ²
    266 instead of 1 at 1e-5 Jy); each leg is now scaled first."""
    img = positive_image()
    img = img * (flux / img.sum())
    u, v, psi, sigma = products()["cphase"]
    t64 = em.ClosurePhaseChi2(em.DirectFT(GRID, u, v), psi, sigma)
    t32 = em.ClosurePhaseChi2(em.DirectFT(GRID, u, v, dtype=jnp.float32), psi, sigma)
    x32 = jnp.asarray(img, jnp.float32)
    v32, g32 = jax.value_and_grad(lambda x: t32(x))(x32)
    v64, g64 = jax.value_and_grad(lambda x: t64(x))(jnp.asarray(img))
    assert_allclose(v32, v64, rtol=1e-4)
    assert_allclose(jnp.sum(t32.residuals(x32) ** 2), v64, rtol=1e-4)
    assert_allclose(g32, g64, rtol=0, atol=1e-3 * float(jnp.abs(g64).max()))


@pytest.mark.parametrize(
    "cls, key",
    [(em.ClosurePhaseChi2, "cphase"), (em.BispectrumChi2, "bispectrum")],
)
def test_triangle_legs_must_close(cls, key):
    """A triangle whose legs do not sum to 0 (the usual mistake: one leg stored
    the other way round) is refused at construction; the model's "closure phase"
    would depend on where the image sits (from a review)."""
    u, v, value, sigma = products()[key]
    assert np.abs(np.asarray(u).sum(1)).max() < 1e-6 * np.abs(u).max()  # closed
    cls(em.DirectFT(GRID, u, v), value, sigma)
    flipped_u, flipped_v = np.array(u), np.array(v)
    flipped_u[:, 2] *= -1
    flipped_v[:, 2] *= -1
    with pytest.raises(ValueError, match=r"legs of \d+ of \d+ triangles do not close"):
        cls(em.DirectFT(GRID, flipped_u, flipped_v), value, sigma)
    # A few open rows (averaging over flagged times) are tolerated.
    few_u = np.array(u)
    few_u[0] = [1.0, 2.0, 3.0]
    cls(em.DirectFT(GRID, few_u, v), value, sigma)
    # One leg flipped in one row only (from a review: it passed, and that row's
    # model closure phase depended on where the image sits) is refused, naming
    # the row; a row open by a few percent (long averages) is not.
    longest = np.hypot(u, v).max(axis=1)
    long_leg = np.hypot(u[:, 1], v[:, 1]) / longest > 0.5
    assert long_leg.any()  # a row whose flipped leg opens it beyond the limit
    row = int(np.argmax(long_leg))
    one_u, one_v = np.array(u), np.array(v)
    one_u[row, 1] *= -1
    one_v[row, 1] *= -1
    with pytest.raises(ValueError, match=rf"1 of \d+ triangles .* \(row {row}:"):
        cls(em.DirectFT(GRID, one_u, one_v), value, sigma)
    ajar_u, ajar_v = np.array(u), np.array(v)
    ajar_u[row, 1] *= 1.1  # open by 0.1 × that leg
    ajar_v[row, 1] *= 1.1
    cls(em.DirectFT(GRID, ajar_u, ajar_v), value, sigma)


def test_closure_phase_sigmas_in_degrees_are_refused():
    """eht-imaging stores closure phases and their sigmas in degrees: sigmas left
    in degrees (median > π) weakened the term 3283-fold without a word; a few rows
    of very low signal-to-noise (sigmas beyond π, as raw data have) are accepted."""
    u, v, cphase, sigma = products()["cphase"]
    fwd = em.DirectFT(GRID, u, v)
    with pytest.raises(ValueError, match=r"median of [\d.]+ > π.*np\.deg2rad"):
        em.ClosurePhaseChi2(fwd, cphase, np.rad2deg(sigma) + 4.0)
    noisy = np.array(sigma)
    noisy[: noisy.size // 3] = 20.0
    em.ClosurePhaseChi2(fwd, cphase, noisy)


@pytest.mark.parametrize("case", DATA_TERMS, ids=lambda c: c.name)
def test_vis_of_another_shape_is_refused(case):
    """`chi2_from_vis` / `residuals_from_vis` of a visibility or amplitude term
    broadcast a batch `(2, n)`, a column `(n, 1)` or a scalar into a wrong χ²
    without a word (from a review); every term now refuses them."""
    term = case.build()
    vis = term.model_vis(positive_image())
    for wrong in (jnp.stack([vis, vis]), vis[..., None], vis.reshape(-1)[0]):
        if wrong.shape == vis.shape:
            continue
        for method in (term.chi2_from_vis, term.residuals_from_vis):
            with pytest.raises((ValueError, TypeError, IndexError)):
                method(wrong)


_ONE_LEG_SETUP = (
    "grid = em.ImageGrid(8, 8, em.uas_to_rad(5.0))\n"
    "u = np.linspace(-1e9, 1e9, 5); fwd = em.DirectFT(grid, u, u[::-1], dtype=np.float32)\n"
    "term = em.{cls}(fwd, np.ones(5), np.ones(5))\n"
    "vis = term.model_vis(np.ones((8, 8)) / 64)"
)
ONE_LEG_SHAPES = {
    (cls, method, wrong): unchecked_error(
        f"term.{method}({wrong})", "ValueError", _ONE_LEG_SETUP.format(cls=cls)
    )
    for cls, method, wrong in [
        ("VisChi2", "chi2_from_vis", "vis[:, None]"),
        ("VisChi2", "residuals_from_vis", "np.stack([vis, vis])"),
        ("AmpChi2", "chi2_from_vis", "np.stack([vis, vis])"),
        ("AmpChi2", "residuals_from_vis", "vis[0]"),
    ]
}


def test_one_leg_terms_name_the_shape_of_vis(unchecked):
    """Without the suite's type checker (as users run), `VisChi2` and `AmpChi2`
    name the shape `vis` must have: elementwise arithmetic would broadcast it."""
    for (cls, method, wrong), case in ONE_LEG_SHAPES.items():
        message = unchecked[case]
        assert message is not None and "`vis` has shape" in message, (
            cls, wrong, method, message,
        )  # fmt: skip
        assert "points have shape (5,)" in message
