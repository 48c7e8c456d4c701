"""Polarimetric image models (`PolPixelImage`, `PolSphericalImage`,
`PolGaussianImage`, `PolMRingImage`) and `beta_m`: the Stokes planes against numpy
references (and eht-imaging's, for its variables), physicality on random and
out-of-range parameters, gradients (finite differences, and at zero polarization
and the poles), jit and vmap, inside an `Objective` and `solve`, construction
errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import eqmodels as em
from tests.helpers import assert_allclose, check_grad_fd, quiet
from tests.problems import random_points
from tests.reference import pol_image_models as ref
from tests.reference.numpy_ft import dft_matrix
from tests.toys import StokesToyChi2, StokesToyPenalty
from tests.unchecked import unchecked_error, unchecked_script


GRID = em.ImageGrid(10, 12, em.uas_to_rad(4.0))
P = GRID.psize
RNG = np.random.default_rng(37)


def random_stokes(seed=0, grid=GRID, max_frac=0.95):
    rng = np.random.default_rng(seed)
    i = rng.uniform(0.2, 1.0, grid.shape) / grid.npix
    d = rng.normal(size=(3, *grid.shape))
    d *= rng.uniform(0.0, max_frac, grid.shape) / np.linalg.norm(d, axis=0)
    return np.concatenate([i[None], i[None] * d])


def random_pixel_model(seed=1, circular=True, mask=None):
    rng = np.random.default_rng(seed)
    i = rng.uniform(0.2, 1.0, GRID.shape)
    w = rng.normal(size=(3 if circular else 2, *GRID.shape))
    return em.PolPixelImage(
        em.PixelImage.from_image(i, GRID, mask=mask), w, circular=circular
    ), (i, w)


MASK = np.zeros(GRID.shape, bool)
MASK[2:8, 3:10] = True

RING = dict(flux=0.8, diameter=7 * P, width=1.5 * P, x0=0.3 * P, y0=-0.2 * P)
BETAS = dict(
    beta_i=[0.15 * np.exp(-0.7j), 0.05 + 0.03j],
    beta_p=[0.02 - 0.01j, 0.05j, 0.04, 0.1 + 0.05j, -0.12 + 0.2j],
    beta_v=[0.02, 0.01 - 0.02j],
)
GAUSS = dict(flux=0.7, fwhm=5 * P, fwhm_minor=3 * P, angle=0.6, x0=P, y0=-0.5 * P)


def mring(**kw):
    return em.PolMRingImage(GRID, **{**RING, **BETAS, **kw})


def ref_mring(model):
    bi, bp, bv = (np.asarray(b) for b in model.coefficients())
    return ref.pol_mring(
        *GRID.shape,
        P,
        *(float(getattr(model, k)) for k in ("flux", "diameter", "width", "x0", "y0")),
        bi,
        bp,
        bv,
    )


def pgauss(**kw):
    g = {**GAUSS, "frac": 0.3, "evpa": 0.5, "vfrac": -0.05, **kw}
    return em.PolGaussianImage(GRID, **g)


def ref_gauss(model):
    g = model.intensity
    args = [g.flux, g.fwhm_major, g.fwhm_minor, g.angle, g.x0, g.y0]
    args += [model.frac, model.evpa, model.vfrac]
    return ref.pol_gaussian(*GRID.shape, P, *(float(a) for a in args))


def physical(stokes, rtol=1e-12):
    s = np.asarray(stokes)
    assert np.all(np.isfinite(s))
    assert np.all(s[0] >= 0)
    assert np.all(np.sum(s[1:] ** 2, axis=0) <= s[0] ** 2 * (1 + rtol))


# --- the planes against numpy -------------------------------------------------


@pytest.mark.parametrize("circular", [True, False])
@pytest.mark.parametrize("mask", [None, MASK])
def test_pol_pixel_planes_equal_numpy(circular, mask):
    model, (i, w) = random_pixel_model(circular=circular, mask=mask)
    got = eqx.filter_jit(lambda m: m())(model)
    want = ref.pol_pixel(i, w)
    if mask is not None:
        want = want * mask
    assert got.shape == (4, *GRID.shape)
    assert_allclose(got, want, rtol=1e-12)
    if not circular:
        assert np.all(np.asarray(got[3]) == 0)
    physical(got)


@pytest.mark.parametrize("pol_transform", ["polcv", "mcv"])
def test_pol_spherical_planes_equal_numpy(pol_transform):
    i = RNG.uniform(0.2, 1.0, GRID.shape)
    a, phi = RNG.normal(size=(2, *GRID.shape)) * 2
    b = RNG.normal(size=GRID.shape) * 2
    if pol_transform == "mcv":
        b = RNG.uniform(-0.9, 0.9, GRID.shape)
    model = em.PolSphericalImage(
        em.PixelImage.from_image(i, GRID), np.stack([a, phi, b]),
        pol_transform=pol_transform,
    )  # fmt: skip
    got = jax.jit(lambda m: m())(model)
    assert_allclose(got, ref.pol_spherical(i, a, phi, b, pol_transform), rtol=1e-12)
    physical(got)
    phys = np.asarray(model.physical())
    assert_allclose(phys[1] * np.cos(phys[3]) * np.cos(phys[2]) * i, got[1], rtol=1e-12)
    assert_allclose(phys[1] * np.sin(phys[3]) * i, got[3], rtol=1e-12)


def test_pol_spherical_call_is_one_program_outside_jit_and_inlined_inside():
    """`model()` outside `jit` is one compiled program (not one per operation);
    inside a caller's `jit` (a solve) its operations are part of the caller's
    program, not a nested program that the solve would differentiate (and trace,
    lower and load) as a separate call."""
    from eqmodels._image import _pol_spherical

    model = em.PolSphericalImage.from_stokes(
        random_stokes(3, max_frac=0.5), GRID, pol_transform="mcv"
    )
    jaxpr = jax.make_jaxpr(lambda m: m())(model)
    assert not [e for e in jaxpr.jaxpr.eqns if e.primitive.name in ("jit", "pjit")]
    grad = jax.make_jaxpr(jax.grad(lambda p: jnp.sum(eqx.tree_at(
        lambda m: m.params, model, p)())))(model.params)  # fmt: skip
    assert not [e for e in grad.jaxpr.eqns if e.primitive.name in ("jit", "pjit")]
    # Outside `jit`: the jitted function itself (one program).
    assert isinstance(_pol_spherical._stokes_planes, type(eqx.filter_jit(abs)))
    assert_allclose(model(), jax.jit(lambda m: m())(model), rtol=1e-14)


@pytest.mark.slow  # the eht-imaging oracle
@pytest.mark.parametrize("pol_transform", ["polcv", "mcv"])
def test_pol_spherical_equals_ehtim(pol_transform):
    """eht-imaging as a test-time oracle: its change of variables (`polcv` /
    `mcv`, with its `log` transform of I) and `make_q/u/v_image` on random solver
    variables."""
    pytest.importorskip("ehtim")
    with quiet():
        import ehtim.imaging.pol_imager_utils as pu
    n = GRID.npix
    x = np.stack(
        [
            RNG.normal(size=n) - 5.0,
            RNG.normal(size=n) * 2,
            RNG.uniform(-np.pi, np.pi, n),
            RNG.normal(size=n) * 2
            if pol_transform == "polcv"
            else RNG.uniform(-0.9, 0.9, n),
        ]
    )
    phys = (pu.polcv if pol_transform == "polcv" else pu.mcv)(
        np.concatenate([np.exp(x[:1]), x[1:]])
    )
    want = np.stack(
        [phys[0], pu.make_q_image(phys), pu.make_u_image(phys), pu.make_v_image(phys)]
    ).reshape(4, *GRID.shape)
    model = em.PolSphericalImage(
        em.PixelImage(GRID, x[0].reshape(GRID.shape)),
        x[1:].reshape(3, *GRID.shape),
        pol_transform=pol_transform,
    )
    assert_allclose(model(), want, rtol=1e-12)
    assert_allclose(model.physical(), phys.reshape(4, *GRID.shape), rtol=1e-12)
    # eht-imaging's inverse (`polcv_r` / `mcv_r`) is our `from_stokes`.
    back = em.PolSphericalImage.from_stokes(want, GRID, pol_transform=pol_transform)
    inv = (pu.polcv_r if pol_transform == "polcv" else pu.mcv_r)(phys)
    assert_allclose(back.params[0], inv[1], rtol=1e-9)
    assert_allclose(back(), want, rtol=1e-12)


def test_pol_gaussian_planes_equal_numpy():
    model = pgauss()
    assert_allclose(jax.jit(lambda m: m())(model), ref_gauss(model), rtol=1e-12)
    # Stokes I is the GaussianImage's.
    assert_allclose(model()[0], model.intensity(), rtol=1e-15)
    physical(model())


def test_pol_mring_planes_equal_numpy():
    model = mring()
    got = jax.jit(lambda m: m())(model)
    assert_allclose(got, ref_mring(model), rtol=1e-12)
    assert_allclose(jnp.sum(got[0]), RING["flux"], rtol=1e-13)
    physical(got)


def test_pol_mring_takes_arrays_and_reports_its_coefficients():
    model = mring(**{k: np.asarray(v) for k, v in BETAS.items()})
    assert_allclose(model(), mring()(), rtol=1e-15)
    for got, want in zip(model.coefficients(), BETAS.values()):
        assert_allclose(got, np.asarray(want, complex), rtol=1e-15)
    assert model.beta_p.shape == (5, 2)


def test_pol_mring_i_plane_is_the_ring_image():
    a, theta = 0.6, 2.1
    ring = em.RingImage(
        GRID, **RING, asymmetry=a, asymmetry_angle=theta
    )  # RingImage's (1 + A cos(φ − θ_A)) is 1 + 2 Re(β_1 e^{iφ})
    model = em.PolMRingImage(GRID, **RING, beta_i=[0.5 * a * np.exp(-1j * theta)])
    assert_allclose(model()[0], ring(), rtol=1e-13)
    assert np.all(np.asarray(model()[1:]) == 0)


def test_beta_m_equals_numpy():
    stokes = random_stokes(3)
    for m in (-2, -1, 0, 1, 2, 3):
        for pol in ("P", "V", "I"):
            for kw in (
                {},
                dict(r_min=1.5 * P, r_max=4 * P, x0=0.4 * P, y0=-0.7 * P),
                dict(x0=0.5 * P, y0=0.5 * P),  # a pixel exactly on the centre
            ):
                got = em.beta_m(stokes, GRID, m, pol=pol, **kw)
                want = ref.beta_m(stokes, P, m, pol=pol, **kw)
                assert_allclose(got, want, rtol=1e-12, err=f"m={m} {pol} {kw}")
    got = jax.jit(lambda s: em.beta_m(s, GRID, [0, 2]))(stokes)
    assert got.shape == (2,)
    assert_allclose(got[1], ref.beta_m(stokes, P, 2), rtol=1e-12)


def test_beta_m_of_a_centred_mring_is_its_coefficients():
    """On a grid symmetric about the ring's centre the pixel sums reproduce the
    m-ring's β (Palumbo et al.'s definition is the model's coefficient)."""
    g = em.ImageGrid(24, 24, em.uas_to_rad(2.0))
    bp = [0.01j, 0.03, -0.02 + 0.05j, 0.04, 0.12 - 0.18j]
    model = em.PolMRingImage(
        g, 0.6, em.uas_to_rad(30.0), em.uas_to_rad(4.0), beta_p=bp, beta_v=[0.03]
    )
    for m, want in zip(range(-2, 3), bp):
        got = em.beta_m(model, g, m)
        # The grid's four-fold symmetry cancels every other mode's pixel sum
        # except those 4 apart: β_{±2} pick up a little of β_{∓2} (Σ R e^{±4iφ}
        # / Σ R, 3e-5 on this 24² grid).
        if abs(m) < 2:
            assert_allclose(got, want, rtol=1e-12, err=m)
        else:
            assert abs(complex(got) - want) < 1e-4 * abs(bp[4]), (m, got, want)
    assert_allclose(em.beta_m(model, g, 0, pol="V"), 0.03, rtol=1e-12)


# --- physicality ------------------------------------------------------------


def test_random_parameters_are_physical():
    for seed in range(5):
        rng = np.random.default_rng(seed)
        model, _ = random_pixel_model(seed)
        big = eqx.tree_at(lambda m: m.pol, model, model.pol * 1e3)  # |f| → 1
        physical(model())
        physical(big())
        sph = em.PolSphericalImage(
            em.PixelImage(GRID, rng.normal(size=GRID.shape)),
            rng.normal(size=(3, *GRID.shape)) * 10,
        )
        physical(sph())
        # An optimiser's step beyond the physical set: the image stays physical.
        g = eqx.tree_at(
            lambda m: (m.frac, m.vfrac), pgauss(), (jnp.asarray(1.5), jnp.asarray(-0.9))
        )
        physical(g())
        assert_allclose(
            np.sum(np.asarray(g())[1:] ** 2, axis=0),
            np.asarray(g())[0] ** 2,
            rtol=1e-12,
        )
        wild = eqx.tree_at(
            lambda m: (m.beta_i, m.beta_p, m.beta_v),
            mring(),
            tuple(
                jnp.asarray(rng.normal(size=b.shape))
                for b in (mring().beta_i, mring().beta_p, mring().beta_v)
            ),
        )
        got = wild()
        physical(got)
        assert_allclose(got, ref_mring(wild), rtol=1e-12)


# --- gradients --------------------------------------------------------------


def _flat(model):
    """`(y, f)`: the model's float leaves as one vector `y` of ones (each leaf
    scaled by its value, so that angles in radians (1e-10) and fractions (0.1)
    get finite-difference steps of their own size) and the model rebuilt from
    one."""
    params, static = eqx.partition(model, eqx.is_inexact_array)
    x0, unravel = ravel_pytree(params)
    scale = jnp.where(x0 != 0, jnp.abs(x0), 1.0)

    def rebuild(y):
        return eqx.combine(unravel(x0 + (y - 1.0) * scale), static)

    return jnp.ones_like(x0), rebuild


MODELS = {
    "pixel": lambda: random_pixel_model(4)[0],
    "pixel_linear_masked": lambda: random_pixel_model(5, False, MASK)[0],
    "spherical_polcv": lambda: em.PolSphericalImage.from_stokes(random_stokes(6), GRID),
    "spherical_mcv": lambda: em.PolSphericalImage.from_stokes(
        random_stokes(7, max_frac=0.6), GRID, pol_transform="mcv"
    ),
    "gaussian": pgauss,
    "mring": mring,
}


@pytest.mark.parametrize("name", MODELS)
def test_gradients_match_finite_differences(name):
    model = MODELS[name]()
    x, rebuild = _flat(model)
    weights = np.random.default_rng(1).normal(size=(4, *GRID.shape))
    if name == "spherical_mcv":  # v is held (no gradient, as in eht-imaging)
        v = model.params[2]
        held = rebuild

        def rebuild(y):
            m = held(y)
            return eqx.tree_at(lambda m: m.params, m, m.params.at[2].set(v))

    def f(y):
        return jnp.sum(weights * rebuild(y)()) * GRID.npix

    grad = jax.jit(jax.grad(f))(x)  # compiled once: checked, then its FD check
    assert np.all(np.isfinite(np.asarray(grad)))
    check_grad_fd(jax.jit(f), x, n_dirs=6, grad=grad)


def test_pol_pixel_gradient_at_zero_polarization_and_the_poles():
    """The ball map is analytic: at `w = 0` its Jacobian is the identity
    (`∂(Q, U, V)/∂w = I`), and at the poles (pure circular polarization) no
    coordinate singularity makes anything infinite or NaN."""
    i = np.full(GRID.shape, 0.5)
    intensity = em.PixelImage.from_image(i, GRID)
    weights = np.random.default_rng(2).normal(size=(3, *GRID.shape))

    def f(w):
        return jnp.sum(weights * em.PolPixelImage(intensity, w)()[1:])

    zero = jnp.zeros((3, *GRID.shape))
    grad_f = jax.jit(jax.grad(f))  # one program for every point below
    g = grad_f(zero)
    assert_allclose(g, weights * 0.5, rtol=1e-14)
    f = jax.jit(f)
    check_grad_fd(f, zero, rel_h=1e-6, grad=g)
    for c in (1e-9, 0.3, 5.0):
        pole = np.zeros((3, *GRID.shape))
        pole[2] = c
        g = grad_f(jnp.asarray(pole))
        assert np.all(np.isfinite(np.asarray(g)))
        check_grad_fd(f, pole, grad=g)
    # Values at zero: exactly unpolarized.
    assert np.all(np.asarray(em.PolPixelImage(intensity, zero)()[1:]) == 0)
    # Around the series' switch (|w|² = 1e-4) the map is continuous to rounding.
    for s in (1e-4 * (1 - 1e-12), 1e-4 * (1 + 1e-12)):
        w = np.zeros((3, *GRID.shape))
        w[0] = np.sqrt(s)
        got = em.PolPixelImage(intensity, w)()[1]
        assert_allclose(got, np.full(GRID.shape, 0.5 * np.tanh(np.sqrt(s))), rtol=1e-15)


@pytest.mark.slow
def test_gradients_are_finite_where_the_clips_act():
    g = eqx.tree_at(lambda m: m.frac, pgauss(vfrac=0.0), jnp.asarray(2.0))
    x, rebuild = _flat(g)
    check_grad_fd(jax.jit(lambda y: jnp.sum(rebuild(y)()[1] * GRID.npix)), x)
    # A ring whose I vanishes at some angle (Σ 2|β^I| = 1) with P there.
    ring = eqx.tree_at(
        lambda m: (m.beta_i, m.beta_p, m.beta_v),
        mring(),
        (
            jnp.asarray([[0.5, 0.0]]),
            jnp.asarray([[0.3, 0.0]]),
            jnp.asarray([[0.0, 0.0]]),
        ),
    )
    physical(ring())
    x, rebuild = _flat(ring)
    grad = jax.grad(lambda y: jnp.sum(rebuild(y)() ** 2))(x)
    assert np.all(np.isfinite(np.asarray(grad)))


# --- jit, vmap, round trips -------------------------------------------------


def test_vmap_over_parameters():
    model, _ = random_pixel_model(8)
    pols = jnp.stack([model.pol * s for s in (0.0, 0.5, 2.0)])
    got = jax.vmap(lambda w: eqx.tree_at(lambda m: m.pol, model, w)())(pols)
    for k, w in enumerate(pols):
        assert_allclose(got[k], eqx.tree_at(lambda m: m.pol, model, w)(), rtol=1e-14)
    fracs = jnp.asarray([0.0, 0.2, 0.9])
    g = pgauss()
    got = jax.vmap(lambda f: eqx.tree_at(lambda m: m.frac, g, f)())(fracs)
    assert_allclose(got[2], ref_gauss(pgauss(frac=0.9)), rtol=1e-12)
    betas = jnp.stack([mring().beta_p * s for s in (0.0, 1.0)])
    got = jax.jit(jax.vmap(lambda b: eqx.tree_at(lambda m: m.beta_p, mring(), b)()))(
        betas
    )
    assert_allclose(got[1], ref_mring(mring()), rtol=1e-12)


@pytest.mark.parametrize("mask", [None, MASK])
@pytest.mark.parametrize("circular", [True, False])
def test_pol_pixel_from_stokes_round_trip(mask, circular):
    stokes = random_stokes(9)
    if not circular:
        stokes[3] = 0.0
    model = em.PolPixelImage.from_stokes(stokes, GRID, mask=mask, circular=circular)
    want = stokes if mask is None else stokes * mask
    assert_allclose(model(), want, rtol=1e-13)
    # From a polarimetric model, and inside jit (traced Stokes planes).
    g = pgauss()
    assert_allclose(em.PolPixelImage.from_stokes(g, GRID)(), g(), rtol=1e-13)
    traced = jax.jit(lambda s: em.PolPixelImage.from_stokes(s, GRID)())(stokes)
    assert_allclose(traced, stokes, rtol=1e-13)


def test_pol_pixel_init():
    intensity = em.PixelImage.from_prior(
        em.GaussianImage(GRID, 1.0, 4 * P), GRID, clipfloor=1e-3, flux=0.5
    )
    model = em.PolPixelImage.init(intensity, frac=0.2, evpa=0.4, vfrac=0.05)
    s = np.asarray(model())
    i = np.asarray(intensity())
    assert_allclose(s[0], i, rtol=1e-15)
    assert_allclose(s[1] + 1j * s[2], 0.2 * np.exp(0.8j) * i, rtol=1e-13)
    assert_allclose(s[3], 0.05 * i, rtol=1e-13)
    assert model.pol.shape == (3, intensity.indices.shape[0])
    lin = em.PolPixelImage.init(intensity, frac=0.1, circular=False)
    assert lin.pol.shape == (2, intensity.indices.shape[0])
    assert np.all(np.asarray(lin()[3]) == 0)


def test_pol_spherical_from_stokes_round_trip_with_a_mask():
    stokes = random_stokes(10, max_frac=0.45)
    for pt in ("polcv", "mcv"):
        model = em.PolSphericalImage.from_stokes(
            stokes, GRID, mask=MASK, pol_transform=pt
        )
        assert_allclose(model(), stokes * MASK, rtol=1e-12)


def test_float32():
    s32 = random_stokes(11).astype(np.float32)
    render = eqx.filter_jit(lambda m: m())
    m = em.PolPixelImage.from_stokes(s32, GRID)
    assert render(m).dtype == jnp.float32
    assert render(em.PolSphericalImage.from_stokes(s32, GRID)).dtype == jnp.float32
    assert render(pgauss(dtype=jnp.float32)).dtype == jnp.float32
    r = render(mring(dtype=jnp.float32))
    assert r.dtype == jnp.float32
    assert_allclose(r, ref_mring(mring()), rtol=1e-5)
    assert em.beta_m(r, GRID, 2).dtype == jnp.complex64


# --- in an objective, with solve ----------------------------------------------


def _toy_term(truth, n=40, seed=12):
    u, v = random_points(GRID, n, seed=seed)
    a = dft_matrix(*GRID.shape, GRID.psize, u, v)
    vis = np.stack([a @ p.reshape(-1) for p in np.asarray(truth)], axis=-1)
    return StokesToyChi2(em.DirectFT(GRID, u, v), vis, np.full(vis.shape, 1e-3))


@pytest.mark.parametrize(
    "name",
    [
        "spherical_polcv",
        pytest.param("pixel", marks=pytest.mark.slow),
        pytest.param("gaussian", marks=pytest.mark.slow),
        pytest.param("mring", marks=pytest.mark.slow),
    ],
)
def test_models_in_an_objective(name):
    model = MODELS[name]()
    term = _toy_term(random_stokes(13))
    obj = em.Objective([term, StokesToyPenalty(), em.TV(GRID)], [1.0, 2.0, 0.5])
    val, grad = eqx.filter_jit(eqx.filter_value_and_grad(lambda m: obj(m)))(model)
    s = model()
    want = term(s) + 2.0 * StokesToyPenalty()(s) + 0.5 * em.TV(GRID)(s[0])
    assert_allclose(val, want, rtol=1e-12)
    x, rebuild = _flat(model)
    check_grad_fd(jax.jit(lambda y: obj(rebuild(y))), x, n_dirs=3)


def test_solve_recovers_a_polarized_gaussian():
    truth = pgauss(frac=0.3, evpa=0.5, vfrac=0.05)
    term = _toy_term(truth())
    start = pgauss(frac=0.1, evpa=0.2, vfrac=0.0)
    # Fit the polarization (the Gaussian's shape is known).
    spec = jax.tree.map(lambda _: False, start)
    spec = eqx.tree_at(lambda m: (m.frac, m.evpa, m.vfrac), spec, (True, True, True))
    sol = em.solve(term, start, max_steps=200, params=spec)
    got = sol.model
    for k in ("frac", "evpa", "vfrac"):
        assert_allclose(getattr(got, k), getattr(truth, k), rtol=1e-5, err=k)


@pytest.mark.slow
def test_solve_a_pol_pixel_image_from_zero_polarization():
    truth = random_stokes(14, max_frac=0.5)
    term = _toy_term(truth, n=60)
    start = em.PolPixelImage.init(
        em.PixelImage.from_image(truth[0], GRID), frac=0.0, circular=True
    )
    sol = em.solve(term, start, max_steps=60)
    assert sol.value < 1e-2 * term(start)


# --- construction errors ------------------------------------------------------


_I = em.PixelImage(GRID, np.zeros(GRID.shape))


def over_polarized():
    s = random_stokes(0, max_frac=0.5)
    s[1:, 1, 2] = [1.2 * s[0, 1, 2], 0.0, 0.0]
    return s


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (
            lambda: em.PolPixelImage(_I, np.zeros((3, 4))),
            ValueError,
            r"`pol` has shape",
        ),
        (
            lambda: em.PolPixelImage(_I, np.zeros((3, *GRID.shape)), circular=False),
            ValueError,
            r"expected \(2, 10, 12\)",
        ),
        (
            lambda: em.PolPixelImage(_I, np.full((3, *GRID.shape), np.nan)),
            ValueError,
            r"`pol` has .* non-finite",
        ),
        (
            lambda: em.PolPixelImage.from_stokes(random_stokes(0)[:3], GRID),
            ValueError,
            r"`stokes` has shape \(3, 10, 12\); expected the four Stokes planes",
        ),
        (
            lambda: em.PolPixelImage.from_stokes(over_polarized(), GRID),
            ValueError,
            r"polarized fraction .* >= 1 at 1 pixel\(s\), first at \(1, 2\) \(up to "
            r"1.2\); .* scale Q, U, V down",
        ),
        (
            lambda: em.PolSphericalImage.from_stokes(over_polarized(), GRID),
            ValueError,
            r"ρ >= 1 at 1 pixel",
        ),
        (
            lambda: em.PolPixelImage.from_stokes(
                random_stokes(0), GRID, circular=False
            ),
            ValueError,
            r"V != 0 .* `circular=False`.*`stokes\[3\] = 0`",
        ),
        (
            lambda: em.PolPixelImage.from_stokes(
                random_stokes(0) * np.array([0, 1, 1, 1])[:, None, None],
                GRID,
                transform="identity",
            ),
            ValueError,
            r"polarized where I = 0",
        ),  # fmt: skip
        (
            lambda: em.PolPixelImage.init(_I, frac=-0.1),
            ValueError,
            r"`frac` must be >= 0",
        ),
        (lambda: em.PolPixelImage.init(_I, frac=0.9, vfrac=0.5), ValueError, r"< 1"),
        (
            lambda: em.PolPixelImage.init(_I, vfrac=0.1, circular=False),
            ValueError,
            r"`vfrac`=0.1 with `circular=False`",
        ),
        (
            lambda: em.PolSphericalImage(
                _I, np.zeros((3, *GRID.shape)), pol_transform="x"
            ),
            ValueError,
            r"`pol_transform` must be one of",
        ),
        (
            lambda: em.PolSphericalImage(
                _I, np.ones((3, *GRID.shape)), pol_transform="mcv"
            ),
            ValueError,
            r"\|v\| < 1",
        ),
        (
            lambda: em.PolSphericalImage.from_stokes(
                random_stokes(0, max_frac=0.9), GRID, pol_transform="mcv"
            ),
            ValueError,
            r"m \+ \|v\| >= 1",
        ),
        (lambda: pgauss(frac=0.9, vfrac=0.5), ValueError, r"`frac`² \+ `vfrac`² must"),
        (lambda: pgauss(frac=-0.2), ValueError, r"`frac` must be >= 0"),
        (lambda: pgauss(evpa=np.nan), ValueError, r"`evpa` is non-finite"),
        (lambda: mring(beta_i=[0.6]), ValueError, r"`beta_i` makes Stokes I negative"),
        (
            lambda: mring(beta_i=[], beta_p=[0.9], beta_v=[0.5]),
            ValueError,
            r"over-polarize the ring",
        ),
        (lambda: mring(beta_p=[0.1, 0.1]), ValueError, r"`beta_p` has 2 coefficients"),
        (lambda: mring(beta_v=[0.1j]), ValueError, r"`beta_v\[0\]` .* must be real"),
        (lambda: mring(beta_v=[]), ValueError, r"at least β\^V_0"),
        (lambda: mring(beta_i=[[0.1]]), ValueError, r"`beta_i` must be a 1-d"),
        (lambda: mring(width=0.0), ValueError, r"`width` must be > 0"),
        (lambda: mring(diameter=40.0), ValueError, r"`diameter` = 40 rad"),
        (lambda: mring(x0=20 * P), ValueError, r"outside the field of view"),
        (
            lambda: em.beta_m(random_stokes(0), GRID, 2, pol="Q"),
            ValueError,
            r"`pol` must be one of",
        ),
        (
            lambda: em.beta_m(random_stokes(0), GRID, 2, r_min=3 * P, r_max=P),
            ValueError,
            r"`r_max`=.* must be > `r_min`",
        ),
        (
            lambda: em.beta_m(random_stokes(0)[0], GRID, 2),
            ValueError,
            r"expected the four Stokes planes",
        ),
    ],
)
def test_construction_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


FLOAT32 = unchecked_script(
    """
import json, numpy as np, jax.numpy as jnp, eqmodels as em
grid = em.ImageGrid(8, 8, em.uas_to_rad(5.0))
i = em.PixelImage.from_image(np.ones((8, 8), np.float32), grid)
out = {
    "pixel": em.PolPixelImage.init(i, frac=0.2)(),
    "spherical": em.PolSphericalImage(i, np.zeros((3, 8, 8), np.float32))(),
    "gaussian": em.PolGaussianImage(grid, 1.0, em.uas_to_rad(15.0), frac=0.3)(),
    "mring": em.PolMRingImage(grid, 1.0, em.uas_to_rad(20.0), em.uas_to_rad(5.0),
                              beta_p=[0.1j])(),
}
res = {k: [str(v.dtype), bool(jnp.all(jnp.isfinite(v)))] for k, v in out.items()}
res["beta"] = str(em.beta_m(out["mring"], grid, 0).dtype)
print(json.dumps(res))
"""
)


def test_models_without_x64_compute_in_float32(unchecked):
    res = unchecked[FLOAT32]
    assert res.pop("beta") == "complex64"
    assert res == {k: ["float32", True] for k in res}, res
    assert set(res) == {"pixel", "spherical", "gaussian", "mring"}


BAD_MODE = unchecked_error(
    "em.beta_m(np.ones((4, 3, 3)), em.ImageGrid(3, 3, 1e-11), 1.5)", "TypeError"
)


SWAPPED = [
    unchecked_error(
        f"{call}(em.ImageGrid(3, 3, 1e-11), np.ones((4, 3, 3)))",
        "TypeError",
    )
    for call in ("em.PolPixelImage.from_stokes", "em.PolSphericalImage.from_stokes")
] + [
    unchecked_error(
        "em.beta_m(em.ImageGrid(3, 3, 1e-11), np.ones((4, 3, 3)), 2)", "TypeError"
    )
]


def test_grid_first_is_refused_naming_the_order(unchecked):
    for case in SWAPPED:
        assert "the Stokes planes come first and the grid second" in unchecked[case]


def test_beta_m_refuses_a_non_integer_mode(unchecked):
    assert "`m` must be an integer or a non-empty sequence" in unchecked[BAD_MODE]


def test_mcv_holds_the_circular_fraction():
    model = MODELS["spherical_mcv"]()
    g = jax.grad(lambda p: jnp.sum(eqx.tree_at(lambda m: m.params, model, p)()[3]))(
        model.params
    )
    assert np.all(np.asarray(g[2]) == 0) and np.all(np.asarray(g[:2]) == 0)
    g = jax.grad(lambda p: jnp.sum(eqx.tree_at(lambda m: m.params, model, p)()[1]))(
        model.params
    )
    assert np.all(np.asarray(g[2]) == 0) and np.any(np.asarray(g[0]) != 0)


def test_intensity_must_be_a_pixel_image():
    with pytest.raises(TypeError, match="PixelImage"):
        em.PolPixelImage(em.GaussianImage(GRID, 1.0, 3 * P), np.zeros((3, 10, 12)))
    with pytest.raises(TypeError, match="PixelImage"):
        em.PolPixelImage.init(np.ones(GRID.shape))
