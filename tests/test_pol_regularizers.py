"""The polarimetric regularizers (eht-imaging's `msimple`, `hw`, `ptv`, `l1v`, `l2v`,
`vtv`, `vtv2`, `vflux`): value and gradient against numpy references, finite
differences, jit, vmap, an `Objective` over a polarimetric model, float32, zero
polarization, residuals, and the construction errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose, check_grad_fd
from tests.problems import random_points
from tests.reference import pol_regularizers as pr
from tests.toys import StokesToyChi2, StokesToyImage
from tests.unchecked import unchecked_error


GRID = em.ImageGrid(10, 12, em.uas_to_rad(4.0))  # ny != nx: orientation matters
FLUX = 0.8
VFLUX = -0.006  # either sign: the normalisations use |F_V|
BEAM = 4 * GRID.psize
P = GRID.psize


def stokes_image(seed=0, dtype=np.float64):
    """I > 0 (total `FLUX`), m in 0.05–0.4, any EVPA, |v| <= 0.05: physical."""
    rng = np.random.default_rng(seed)
    i = rng.uniform(0.2, 1.0, GRID.shape)
    i *= FLUX / i.sum()
    m = rng.uniform(0.05, 0.4, GRID.shape)
    chi = rng.uniform(0, np.pi, GRID.shape)
    v = rng.uniform(-0.05, 0.05, GRID.shape)
    q, u = i * m * np.cos(2 * chi), i * m * np.sin(2 * chi)
    return np.stack([i, q, u, i * v]).astype(dtype)


def _cases():
    """(id, regularizer, reference(stokes) -> (value, grad))."""
    out = []
    for n in (False, True):
        f = FLUX if n else 1.0
        fv = abs(VFLUX) if n else 1.0
        tv_norm = FLUX * P / BEAM if n else 1.0
        vtv_norm = abs(VFLUX) * P / BEAM if n else 1.0
        vtv2_norm = (P / BEAM) ** 4 * VFLUX**2 if n else 1.0
        kw = dict(beam=BEAM, normalise=n)
        out += [
            (
                f"msimple-{n}",
                em.PolEntropy(flux=FLUX, normalise=n),
                lambda s, f=f: pr.msimple(s, 1e-16, f),
            ),
            (
                f"msimple-eps-{n}",
                em.PolEntropy(eps=1e-3, flux=FLUX, normalise=n),
                lambda s, f=f: pr.msimple(s, 1e-3, f),
            ),
            (
                f"hw-{n}",
                em.HolographicEntropy(flux=FLUX, normalise=n),
                lambda s, f=f: pr.hw(s, f),
            ),
            (
                f"ptv-{n}",
                em.PolTV(GRID, flux=FLUX, **kw),
                lambda s, t=tv_norm: pr.ptv(s, 0.0, t),
            ),
            (
                f"ptv-eps-{n}",
                em.PolTV(GRID, eps=1e-8, flux=FLUX, **kw),
                lambda s, t=tv_norm: pr.ptv(s, 1e-8, t),
            ),
            (
                f"l1v-{n}",
                em.StokesVL1(vflux=VFLUX, normalise=n),
                lambda s, fv=fv: pr.l1v(s, fv),
            ),
            (
                f"l2v-{n}",
                em.StokesVL2(vflux=VFLUX, normalise=n),
                lambda s, fv=fv: pr.l2v(s, fv**2),
            ),
            (
                f"vtv-{n}",
                em.StokesVTV(GRID, vflux=VFLUX, **kw),
                lambda s, t=vtv_norm: pr.vtv(s, 0.0, t),
            ),
            (
                f"vtv-eps-{n}",
                em.StokesVTV(GRID, eps=1e-8, vflux=VFLUX, **kw),
                lambda s, t=vtv_norm: pr.vtv(s, 1e-8, t),
            ),
            (
                f"vtv2-{n}",
                em.StokesVTSV(GRID, vflux=VFLUX, **kw),
                lambda s, t=vtv2_norm: pr.vtv2(s, t),
            ),
            (
                f"vflux-{n}",
                em.StokesVFlux(VFLUX, normalise=n),
                lambda s, fv=fv: pr.vflux(s, VFLUX, fv**2),
            ),
        ]
    return out


CASES = _cases()
IDS = [c[0] for c in CASES]


# One jitted function: its compilations are shared between the tests (a
# regularizer is an argument, compiled once per class and static fields).
_VG = eqx.filter_jit(jax.value_and_grad(lambda y, r: r(y)))


_on_model = eqx.filter_jit(lambda m, r: r(m))


def _vg(reg, x):
    return _VG(jnp.asarray(x), reg)


@pytest.mark.parametrize("name,reg,ref", CASES, ids=IDS)
def test_value_and_gradient_equal_numpy(name, reg, ref):
    stokes = stokes_image(1)
    val, grad = _vg(reg, stokes)
    ref_val, ref_grad = ref(stokes)
    assert_allclose(val, ref_val, rtol=1e-12, err=name)
    assert_allclose(grad, ref_grad, rtol=1e-12, err=name)
    assert reg.polarimetric and reg.report_name == name.split("-")[0]


@pytest.mark.parametrize(
    "name,reg,ref", CASES[: len(CASES) // 2], ids=IDS[: len(IDS) // 2]
)
def test_gradient_matches_finite_differences(name, reg, ref):
    check_grad_fd(jax.jit(lambda x: reg(x)), stokes_image(2), n_dirs=3, rtol=1e-6)


NORMALISED = [c for c in CASES if c[0].endswith("True")]


def test_jit_vmap_and_models():
    """Under `jit` and `vmap` over a batch of images, and given a polarimetric
    image model, each regularizer gives what it gives one array."""
    batch = np.stack([stokes_image(s) for s in (3, 4, 5)])
    regs = [c[1] for c in NORMALISED]
    run = eqx.filter_jit(lambda b, regs: [jax.vmap(lambda x: r(x))(b) for r in regs])
    got = run(jnp.asarray(batch), regs)
    model = StokesToyImage(GRID, jnp.asarray(batch[1]))
    for (name, reg, _), g in zip(NORMALISED, got):
        want = np.array([float(_vg(reg, b)[0]) for b in batch])
        assert_allclose(g, want, rtol=1e-13, err=name)
        assert_allclose(_on_model(model, reg), want[1], rtol=1e-14, err=name)


@pytest.mark.slow
def test_in_an_objective_with_a_polarimetric_model():
    """With a polarimetric data term and a Stokes I regularizer in one `Objective`:
    the value is the weighted sum, the gradient that of the sum, the report keyed
    by eht-imaging's names."""
    u, v = random_points(GRID, 12, seed=4)
    rng = np.random.default_rng(7)
    vis = 0.01 * (rng.normal(size=(12, 4)) + 1j * rng.normal(size=(12, 4)))
    data = StokesToyChi2(em.DirectFT(GRID, u, v), vis, np.full((12, 4), 0.01))
    regs = [c[1] for c in CASES if c[0].endswith("True") and "eps" not in c[0]]
    weights = [1.0, 2.0] + [0.1 * (k + 1) for k in range(len(regs))]
    obj = em.Objective([data, em.TV(GRID), *regs], weights)
    model = StokesToyImage(GRID, jnp.asarray(stokes_image(6)))
    val, grad = eqx.filter_jit(eqx.filter_value_and_grad(lambda m: obj(m)))(model)

    def by_hand(m):
        out = data(m) + 2.0 * em.TV(GRID)(m)
        return out + sum(w * r(m) for w, r in zip(weights[2:], regs))

    want_val, want_grad = eqx.filter_value_and_grad(by_hand)(model)
    assert_allclose(val, want_val, rtol=1e-12)
    assert_allclose(grad.planes, want_grad.planes, rtol=1e-11)
    report = obj.report(model)
    assert {"msimple", "hw", "ptv", "l1v", "l2v", "vtv", "vtv2", "vflux"} <= set(report)
    assert_allclose(report["hw"], regs[1](model), rtol=1e-14)


def _zero_pol(stokes, where):
    out = stokes.copy()
    out[1:, where] = 0.0
    return out


@pytest.mark.parametrize("name,reg,ref", CASES, ids=IDS)
def test_finite_at_zero_polarization(name, reg, ref):
    """Q = U = V = 0 everywhere, and in some pixels only: finite values and
    gradients, equal to the reference (its limits where it has a 0/0)."""
    stokes = stokes_image(8)
    some = np.zeros(GRID.shape, bool)
    some[2:5, 3:9] = True
    for img in (_zero_pol(stokes, np.ones(GRID.shape, bool)), _zero_pol(stokes, some)):
        val, grad = _vg(reg, img)
        grad = np.asarray(grad)
        assert np.isfinite(float(val)) and np.all(np.isfinite(grad)), name
        with np.errstate(invalid="ignore", divide="ignore"):
            ref_val, ref_grad = ref(img)
        assert_allclose(val, ref_val, rtol=1e-12, err=name)
        # Where the reference's gradient is defined (no zero-length difference in
        # a TV, no sign(0)), they agree; elsewhere ours is a finite subgradient.
        ok = np.isfinite(ref_grad)
        if name.startswith("l1v"):
            ok &= np.asarray(img[3] != 0)[None]
        assert_allclose(grad[ok], ref_grad[ok], rtol=1e-12, atol=0, err=name)
        if "eps" in name or name.startswith(("msimple", "hw", "l2v", "vtv2", "vflux")):
            assert ok.all(), name


def test_hw_gradient_keeps_its_precision_at_small_fractions():
    """m from 1e-9 to 1e-2: the gradient equals the reference's to 1e-12 (a form
    whose terms' derivatives cancel would lose 1e-16 / m)."""
    stokes = stokes_image(12)
    frac = np.logspace(-9, -2, GRID.npix).reshape(GRID.shape)
    stokes[1:3] *= frac / np.hypot(stokes[1], stokes[2]) * stokes[0]
    _, grad = _vg(em.HolographicEntropy(), stokes)
    _, ref_grad = pr.hw(stokes)
    for k in (1, 2):  # each plane on its own scale (Q/I, not I's ln 2)
        assert_allclose(grad[k], ref_grad[k], rtol=1e-12)
    assert_allclose(grad[0], ref_grad[0], rtol=1e-12)


def test_entropies_skip_pixels_without_flux():
    """Pixels with I = 0 (and no polarization: outside a mask) contribute 0, with
    zero gradients; the other pixels as the reference."""
    stokes = stokes_image(9)
    off = np.zeros(GRID.shape, bool)
    off[0, :] = off[:, -1] = True
    stokes[:, off] = 0.0
    for reg, ref in [(em.PolEntropy(), pr.msimple), (em.HolographicEntropy(), pr.hw)]:
        val, grad = _vg(reg, stokes)
        grad = np.asarray(grad)
        assert np.all(grad[:, off] == 0.0)
        inner = stokes[:, ~off][:, None, :]  # (4, 1, n) for the reference
        ref_val, ref_grad = ref(inner)
        assert_allclose(val, ref_val, rtol=1e-12)
        assert_allclose(grad[:, ~off], ref_grad[:, 0], rtol=1e-12)


@pytest.mark.slow
def test_float32_images_stay_float32():
    img = stokes_image(10)
    regs = [c[1] for c in CASES]
    run = eqx.filter_jit(
        lambda x, regs: [jax.value_and_grad(lambda y: r(y))(x) for r in regs]
    )
    out32 = run(jnp.asarray(img, jnp.float32), regs)
    out64 = run(jnp.asarray(img), regs)
    for (name, *_), (v32, g32), (v64, g64) in zip(CASES, out32, out64):
        assert v32.dtype == g32.dtype == jnp.float32, name
        assert_allclose(v32, v64, rtol=2e-5, err=name)
        assert_allclose(g32, g64, rtol=2e-4, err=name)


def test_float32_faint_polarization_keeps_its_gradient():
    """float32 squares of differences below ~1e-19 flush to 0: the TVs scale them,
    so a faint (1e-22 Jy) polarized pixel still gets its TV gradient."""
    img = np.zeros((4, *GRID.shape), np.float32)
    img[0] = FLUX / GRID.npix
    img[1:, 4, 5] = 1e-22
    for reg, planes in [(em.PolTV(GRID), [1, 2]), (em.StokesVTV(GRID), [3])]:
        _, g = _vg(reg, img)
        g = np.asarray(g)
        assert np.all(np.isfinite(g))
        for k in planes:
            assert g[k, 4, 5] != 0.0, (type(reg).__name__, k)


@pytest.mark.parametrize(
    "name,reg,ref",
    [c for c in CASES if c[0].startswith(("l2v", "vtv2", "vflux"))],
    ids=[i for i in IDS if i.startswith(("l2v", "vtv2", "vflux"))],
)
def test_residuals_square_to_the_penalty(name, reg, ref):
    stokes = stokes_image(11)
    assert reg.has_residuals
    r = jax.jit(lambda x: reg.residuals(x))(jnp.asarray(stokes))
    assert_allclose(jnp.sum(r * r), reg(stokes), rtol=1e-13, err=name)
    model = StokesToyImage(GRID, jnp.asarray(stokes))
    assert_allclose(reg.residuals(model), r, rtol=1e-15, err=name)


def test_least_squares_objective_takes_their_residuals():
    """In an `Objective` with a polarimetric data term, Σ r² of the objective's
    residuals is its value (what Gauss-Newton minimises)."""
    u, v = random_points(GRID, 8, seed=5)
    rng = np.random.default_rng(3)
    vis = 0.01 * (rng.normal(size=(8, 4)) + 1j * rng.normal(size=(8, 4)))
    data = StokesToyChi2(em.DirectFT(GRID, u, v), vis, np.full((8, 4), 0.01))
    regs = [c[1] for c in CASES if c[0].startswith(("l2v", "vtv2", "vflux"))]
    obj = em.Objective([data, *regs], [1.0] + [0.5] * len(regs))
    model = StokesToyImage(GRID, jnp.asarray(stokes_image(13)))
    r, val = eqx.filter_jit(lambda m, o: (o.residuals(m), o(m)))(model, obj)
    assert_allclose(jnp.sum(r * r), val, rtol=1e-12)


def test_an_i_image_is_refused():
    for reg in [c[1] for c in CASES]:
        with pytest.raises(ValueError, match="needs the four Stokes planes"):
            reg(stokes_image(0)[0])


PENALTY_SHAPE = unchecked_error(
    "em.PolTV(em.ImageGrid(10, 12, 1e-11)).penalty(np.zeros((4, 6, 6)))",
    "ValueError",
)


def test_a_stokes_image_on_another_grid_is_refused(unchecked):
    # `penalty` called directly (the type checker would refuse it first)
    assert (
        "PolTV: the Stokes image has shape (4, 6, 6), expected (4, 10, 12)"
        in (unchecked[PENALTY_SHAPE])
    )
    other = np.zeros((4, 6, 6))
    for reg in (em.PolTV(GRID), em.StokesVTV(GRID), em.StokesVTSV(GRID)):
        with pytest.raises(ValueError, match=r"shape \(4, 10, 12\)"):
            reg(other)


# --- construction errors, one test each ---


def test_pol_entropy_needs_positive_eps():
    for eps in (0.0, -1e-10, float("nan")):
        with pytest.raises(ValueError, match=r"`eps` must be finite and > 0"):
            em.PolEntropy(eps=eps)


def test_entropies_and_ptv_need_flux_to_normalise():
    for make in (em.PolEntropy, em.HolographicEntropy):
        with pytest.raises(ValueError, match=r"`flux` is required when normalise"):
            make(normalise=True)
    with pytest.raises(ValueError, match=r"`flux` is required when normalise"):
        em.PolTV(GRID, beam=BEAM, normalise=True)


def test_smoothness_needs_beam_to_normalise():
    with pytest.raises(ValueError, match=r"`beam` is required"):
        em.PolTV(GRID, flux=FLUX, normalise=True)
    for make in (em.StokesVTV, em.StokesVTSV):
        with pytest.raises(ValueError, match=r"`beam` is required"):
            make(GRID, vflux=VFLUX, normalise=True)


def test_beam_in_microarcseconds_is_refused():
    with pytest.raises(ValueError, match=r"angles are in radians"):
        em.StokesVTV(GRID, vflux=VFLUX, beam=20.0, normalise=True)


def test_stokes_v_needs_vflux_to_normalise():
    for make in (em.StokesVL1, em.StokesVL2):
        with pytest.raises(ValueError, match=r"`vflux` .* is required when normalise"):
            make(normalise=True)
    with pytest.raises(ValueError, match=r"`vflux` .* is required when normalise"):
        em.StokesVTV(GRID, beam=BEAM, normalise=True)


def test_zero_vflux_cannot_normalise():
    with pytest.raises(ValueError, match=r"`vflux` = 0 with normalise=True"):
        em.StokesVFlux(0.0, normalise=True)
    with pytest.raises(ValueError, match=r"`vflux` = 0 with normalise=True"):
        em.StokesVL2(vflux=0.0, normalise=True)
    assert float(em.StokesVFlux(0.0)(stokes_image(0))) >= 0  # fine unnormalised


VFLUX_ARRAY = unchecked_error("em.StokesVFlux(np.ones(3))", "ValueError")
NORMALISE_STR = unchecked_error(
    "em.HolographicEntropy(flux=0.8, normalise='yes')", "TypeError"
)
GRID_TUPLE = unchecked_error("em.PolTV((10, 12))", "TypeError")


def test_vflux_must_be_a_finite_number(unchecked):
    with pytest.raises(ValueError, match=r"`vflux` is non-finite"):
        em.StokesVFlux(float("inf"))
    assert "`vflux` must be a scalar" in unchecked[VFLUX_ARRAY]


def test_normalise_must_be_a_bool(unchecked):
    assert "`normalise` must be True or False" in unchecked[NORMALISE_STR]


def test_grid_must_be_an_image_grid(unchecked):
    assert "`grid` must be an `ImageGrid`" in unchecked[GRID_TUPLE]


def test_tv_eps_must_be_non_negative():
    for make in (em.PolTV, em.StokesVTV):
        with pytest.raises(ValueError, match=r"`eps` must be finite and >= 0"):
            make(GRID, eps=-1.0)
