"""Geometric models: analytic visibilities against numpy references written from
the formulas, against the pixel transform of their render, and through terms."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sp

import eqmodels as em
from eqmodels._geometric._bessel import bessel_j, MAX_ORDER
from tests.unchecked import unchecked_error


UAS = em.uas_to_rad(1.0)
GRID = em.ImageGrid(128, 128, 0.5 * UAS)
COARSE = em.ImageGrid(32, 32, 2 * UAS)  # for terms: their matrices stay small
FWHM = math.sqrt(8 * math.log(2))


def _points(n=40, seed=0, rmax=8e9):
    rng = np.random.default_rng(seed)
    rho = np.concatenate([[0.0, 1e3], rng.uniform(0, rmax, n - 2)])
    psi = rng.uniform(0, 2 * np.pi, n)
    return rho * np.sin(psi), rho * np.cos(psi)


U, V = _points()


@eqx.filter_jit
def _vis(model, u, v):
    """One compiled program per model structure (eager, every operation would
    compile on its own)."""
    return model.visibility(u, v)


@eqx.filter_jit
def _intensity(model, x, y):
    return model.intensity(x, y)


def _close(a, b, scale=1.0):
    np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12, atol=1e-14 * scale)


# numpy references, written from the formulas (u = ρ sin ψ, v = ρ cos ψ)
def np_gauss(u, v, f, fa, fb, phi):
    sa, sb = fa / FWHM, fb / FWHM
    ka = u * np.sin(phi) + v * np.cos(phi)
    kb = u * np.cos(phi) - v * np.sin(phi)
    return f * np.exp(-2 * np.pi**2 * ((sa * ka) ** 2 + (sb * kb) ** 2))


def np_jinc(z):
    out = np.ones_like(z)
    nz = z != 0
    out[nz] = 2 * sp.j1(z[nz]) / z[nz]
    return out


def np_disk(u, v, f, r):
    return f * np_jinc(2 * np.pi * r * np.hypot(u, v))


def np_mring(u, v, f, r, beta):
    """The two-sided series `F Σ_{m=-M}^{M} β_m i^m J_m(z) e^{imψ}`."""
    rho, psi = np.hypot(u, v), np.arctan2(u, v)
    z = 2 * np.pi * r * rho
    out = sp.jv(0, z).astype(complex)
    for m, b in enumerate(beta, start=1):
        out += b * 1j**m * sp.jv(m, z) * np.exp(1j * m * psi)
        out += np.conj(b) * 1j ** (-m) * sp.jv(-m, z) * np.exp(-1j * m * psi)
    return f * out


def np_crescent(u, v, f, R, r, dx, dy):
    rho = np.hypot(u, v)
    ph = np.exp(2j * np.pi * (u * dx + v * dy))
    big = R**2 * np_jinc(2 * np.pi * R * rho)
    small = r**2 * np_jinc(2 * np.pi * r * rho) * ph
    return f * (big - small) / (R**2 - r**2)


BETA = [0.2 - 0.1j, 0.05j, -0.03 + 0.02j]


# `J_2'` at one point, compiled once (a program per argument shape: the Bessel
# tests below share it, and their order-MAX_ORDER calls share one shape, 1235).
_J2_PRIME = jax.jit(jax.grad(lambda t: bessel_j(3, t)[2]))


def test_bessel_power_series_branch_matches_scipy():
    # every |z| ≤ 6: the power-series branch (float64), both signs, all orders
    # (zeros pad it to the shape of `test_bessel_matches_scipy`'s call: one program)
    z = np.concatenate([np.linspace(-6, 6, 601), [0.0, 1e-300, -1e-300], [0.0] * 631])
    j = np.asarray(bessel_j(MAX_ORDER, jnp.asarray(z)))
    for m in range(MAX_ORDER + 1):
        np.testing.assert_allclose(j[m], sp.jv(m, z), rtol=0, atol=2e-15)
    for z0 in (0.3, -2.2, 5.9):
        g = _J2_PRIME(jnp.asarray(z0))
        np.testing.assert_allclose(float(g), sp.jvp(2, z0), rtol=1e-12, atol=1e-15)


def test_bessel_branches_agree_at_the_switch():
    # the same points evaluated by the series (all |z| ≤ 6) and by the table (one
    # more point beyond 6 in the call): the two methods agree to rounding (both
    # calls of the same shape, one compiled program)
    z = np.linspace(0.0, 6.0, 301)
    series = np.asarray(bessel_j(4, jnp.asarray(np.r_[z, 6.0])))[:, :-1]
    table = np.asarray(bessel_j(4, jnp.asarray(np.r_[z, 6.5])))[:, :-1]
    np.testing.assert_allclose(series, table, rtol=0, atol=3e-15)
    assert not np.array_equal(series, table)  # two methods, not one
    # under vmap over a batched argument (both branches computed, one selected)
    batch = jnp.asarray(np.stack([z, z + 0.5]))
    v = np.asarray(jax.vmap(lambda x: bessel_j(4, x))(batch))
    np.testing.assert_allclose(v[0], series, rtol=0, atol=0)
    np.testing.assert_allclose(v[1], sp.jv(np.arange(5)[:, None], z + 0.5), atol=2e-15)


def test_bessel_float32():
    # series, table (one shape: one compiled program)
    for z in (np.linspace(-2, 2, 301), np.linspace(-30, 30, 301)):
        j = np.asarray(bessel_j(5, jnp.asarray(z, jnp.float32)))
        assert j.dtype == np.float32
        for m in range(6):
            np.testing.assert_allclose(j[m], sp.jv(m, z), rtol=0, atol=3e-7)


def test_bessel_matches_scipy():
    z = np.concatenate([np.linspace(-30, 1200, 1231), [0.0, 1e-300, 399.9, 400.1]])
    j = np.asarray(bessel_j(MAX_ORDER, jnp.asarray(z)))
    for m in range(MAX_ORDER + 1):
        np.testing.assert_allclose(j[m], sp.jv(m, z), rtol=0, atol=2e-14)
    for z0 in (0.3, 7.1, 450.3):
        g = _J2_PRIME(jnp.asarray(z0))
        np.testing.assert_allclose(float(g), sp.jvp(2, z0), rtol=1e-11, atol=1e-14)


def test_gaussian_and_disk_match_numpy():
    g = em.EllipticalGaussian(GRID, 1.3, 20 * UAS, fwhm_minor=9 * UAS, angle=0.6)
    _close(_vis(g, U, V), np_gauss(U, V, 1.3, 20 * UAS, 9 * UAS, 0.6))
    d = em.Disk(GRID, 0.7, 23 * UAS)
    _close(_vis(d, U, V), np_disk(U, V, 0.7, 23 * UAS))
    # intensity: the formulas, the disk's exact (resolution 0) step
    x, y = np.meshgrid(np.linspace(-30, 30, 7) * UAS, np.linspace(-25, 25, 5) * UAS)
    sa, sb = 20 * UAS / FWHM, 9 * UAS / FWHM
    a = x * np.sin(0.6) + y * np.cos(0.6)
    b = x * np.cos(0.6) - y * np.sin(0.6)
    ref = 1.3 / (2 * np.pi * sa * sb) * np.exp(-0.5 * ((a / sa) ** 2 + (b / sb) ** 2))
    np.testing.assert_allclose(np.asarray(_intensity(g, x, y)), ref, rtol=1e-12)
    inside = np.hypot(x, y) < 23 * UAS
    np.testing.assert_allclose(
        np.asarray(_intensity(d, x, y)), inside * 0.7 / (np.pi * (23 * UAS) ** 2)
    )


def test_mring_matches_two_sided_series_and_ring_quadrature():
    m = em.MRing(GRID, 0.9, 21 * UAS, BETA)
    vis = np.asarray(_vis(m, U, V))
    _close(vis, np_mring(U, V, 0.9, 21 * UAS, BETA))
    # The convention itself: the ring's samples summed with e^{+2πi(ux+vy)}
    # (x = R sin θ, y = R cos θ, θ east of north), a periodic trapezoid rule.
    n = 4096
    th = 2 * np.pi * np.arange(n) / n
    prof = 1 + sum(
        2 * np.real(b * np.exp(1j * k * th)) for k, b in enumerate(BETA, start=1)
    )
    R = 21 * UAS
    phase = np.exp(
        2j * np.pi * (U[:, None] * R * np.sin(th) + V[:, None] * R * np.cos(th))
    )
    direct = 0.9 * (phase * prof).mean(axis=1)
    np.testing.assert_allclose(vis, direct, rtol=1e-11, atol=1e-13)
    ring = em.MRing(GRID, 0.9, 21 * UAS)  # the uniform ring: F J_0
    _close(_vis(ring, U, V), 0.9 * sp.j0(2 * np.pi * R * np.hypot(U, V)))


def test_crescent_and_combinators_match_numpy():
    c = em.Crescent(GRID, 1.1, 25 * UAS, 14 * UAS, dx=4 * UAS, dy=-6 * UAS)
    ref_c = np_crescent(U, V, 1.1, 25 * UAS, 14 * UAS, 4 * UAS, -6 * UAS)
    _close(_vis(c, U, V), ref_c)
    m = em.MRing(GRID, 0.9, 21 * UAS, BETA)
    sx, sy, al, dx, dy, w = 1.2, 0.8, 0.7, 3 * UAS, -2 * UAS, 6 * UAS
    model = em.Blurred(em.Shifted(em.Rotated(em.Stretched(m, sx, sy), al), dx, dy), w)
    # V'(u,v): shift phase · V_rot(u', v') with u' = u cos α − v sin α, ...;
    # stretch: V(sx u', sy v'); blur: exp(−2π² σ² ρ²)
    up = U * np.cos(al) - V * np.sin(al)
    vp = U * np.sin(al) + V * np.cos(al)
    ref = np_mring(sx * up, sy * vp, 0.9, 21 * UAS, BETA)
    ref = ref * np.exp(2j * np.pi * (U * dx + V * dy))
    ref = ref * np.exp(-2 * np.pi**2 * (w / FWHM) ** 2 * (U**2 + V**2))
    _close(_vis(model, U, V), ref)
    total = model + c + em.EllipticalGaussian(GRID, 0.2, 30 * UAS)
    assert isinstance(total, em.Sum) and len(total.parts) == 3
    _close(_vis(total, U, V), ref + ref_c + np_gauss(U, V, 0.2, 30 * UAS, 30 * UAS, 0))
    # a rotated feature moves east of north: a shifted point's phase
    g = em.Rotated(em.Shifted(em.EllipticalGaussian(GRID, 1.0, UAS), 0.0, 5 * UAS), 0.5)
    x0, y0 = 5 * UAS * np.sin(0.5), 5 * UAS * np.cos(0.5)
    phase = np.exp(2j * np.pi * (U * x0 + V * y0))
    _close(_vis(g, U, V), np_gauss(U, V, 1.0, UAS, UAS, 0) * phase)


@pytest.mark.parametrize(
    "name, tol",
    [
        ("gauss", 1e-6),
        ("disk", 1e-3),
        ("mring", 1e-3),
        ("crescent", 1e-3),
        ("stretched", 1e-3),
        ("thick", 1e-3),
    ],  # fmt: skip
)
def test_render_matches_pixel_transform(name, tol):
    """`DirectFT` (delta pulse) of the rendered model on a fine grid (0.5 µas
    pixels, ρ ≤ 8 Gλ: u·psize ≤ 0.02) equals the analytic visibilities within the
    discretisation error: edges spread over a pixel (disk, crescent), the ring
    deposited bilinearly (a taper ≈ sinc²(u psize), 1 − 1e-3)."""
    models = {
        "gauss": em.EllipticalGaussian(
            GRID, 1.0, 15 * UAS, fwhm_minor=8 * UAS, angle=1.0
        ),
        "disk": em.Disk(GRID, 1.0, 20 * UAS),
        "mring": em.MRing(GRID, 1.0, 18 * UAS, BETA),
        "crescent": em.Crescent(GRID, 1.0, 22 * UAS, 14 * UAS, dx=3 * UAS, dy=4 * UAS),
        "stretched": em.Shifted(
            em.Rotated(
                em.Stretched(em.MRing(GRID, 1.0, 15 * UAS, [0.2]), 1.3, 0.9), 0.4
            ),
            2 * UAS,
            -3 * UAS,
        ),
        "thick": em.Blurred(em.MRing(GRID, 1.0, 18 * UAS, BETA), 5 * UAS),
    }
    model = models[name]
    fwd = em.DirectFT(GRID, U, V, em.DeltaPulse())
    img = jax.jit(lambda m: m())(model)
    assert img.shape == GRID.shape
    pix = np.asarray(fwd(img))
    ana = np.asarray(_vis(model, U, V))
    assert np.abs(pix - ana).max() < tol
    if name != "gauss":  # the error is real, not a wrong convention
        assert np.abs(pix - ana).max() > 1e-7


def test_gradients_match_numpy_derivatives():
    u, v = jnp.asarray(U), jnp.asarray(V)
    rho = np.hypot(U, V)
    # Disk: d/dR [2 J1(z)/z] = −2 J2(z)/z · 2πρ
    d = em.Disk(GRID, 0.7, 23 * UAS)
    g = eqx.filter_jit(eqx.filter_grad(lambda m: jnp.sum(m.visibility(u, v).real)))(d)
    z = 2 * np.pi * 23 * UAS * rho
    ratio = np.where(z > 0, sp.jv(2, z) / np.where(z > 0, z, 1), 0)
    ref = np.sum(-0.7 * 2 * ratio * 2 * np.pi * rho)
    np.testing.assert_allclose(float(g.radius), ref, rtol=1e-12)
    # MRing: d/dR and d/dβ of Σ |V|² from J_m' = (J_{m−1} − J_{m+1})/2
    R = 21 * UAS
    m = em.MRing(GRID, 0.9, R, BETA)
    vis = np_mring(U, V, 0.9, R, BETA)
    z = 2 * np.pi * R * rho
    psi = np.arctan2(U, V)
    dvis = 0.5 * (sp.jv(-1, z) - sp.jv(1, z)) + 0j
    for k, b in enumerate(BETA, start=1):
        jp = 0.5 * (sp.jv(k - 1, z) - sp.jv(k + 1, z))
        dvis += 1j**k * jp * 2 * np.real(b * np.exp(1j * k * psi))
    dvis *= 0.9 * 2 * np.pi * rho
    g = eqx.filter_jit(
        eqx.filter_grad(lambda m: jnp.sum(jnp.abs(m.visibility(u, v)) ** 2))
    )(m)
    np.testing.assert_allclose(
        float(g.radius), np.sum(2 * np.real(np.conj(vis) * dvis)), rtol=1e-11
    )
    # β_1: ∂V/∂Re β_1 = 0.9 i J_1 2 cos ψ, ∂V/∂Im β_1 = −0.9 i J_1 2 sin ψ
    d_re = 0.9 * 1j * sp.jv(1, z) * 2 * np.cos(psi)
    d_im = -0.9 * 1j * sp.jv(1, z) * 2 * np.sin(psi)
    np.testing.assert_allclose(
        float(g.beta_re[0]), np.sum(2 * np.real(np.conj(vis) * d_re)), rtol=1e-11
    )
    np.testing.assert_allclose(
        float(g.beta_im[0]), np.sum(2 * np.real(np.conj(vis) * d_im)), rtol=1e-11
    )


def test_gradients_match_finite_differences():
    c = em.Crescent(GRID, 1.1, 25 * UAS, 14 * UAS, dx=4 * UAS, dy=-6 * UAS)
    model = em.Blurred(em.Shifted(em.Stretched(c, 1.1, 0.9), UAS, 2 * UAS), 5 * UAS)
    u, v = jnp.asarray(U), jnp.asarray(V)

    def f(m):
        return jnp.sum(jnp.abs(m.visibility(u, v) - 0.3) ** 2)

    f = eqx.filter_jit(f)
    g = eqx.filter_jit(eqx.filter_grad(f))(model)
    for where, h in [
        (lambda m: m.fwhm, 1e-3 * UAS),
        (lambda m: m.model.dx, 1e-3 * UAS),
        (lambda m: m.model.model.sx, 1e-6),
        (lambda m: m.model.model.model.inner_radius, 1e-3 * UAS),
        (lambda m: m.model.model.model.dy, 1e-3 * UAS),
    ]:
        x = where(model)
        fp = f(eqx.tree_at(where, model, x + h))
        fm = f(eqx.tree_at(where, model, x - h))
        np.testing.assert_allclose(float(where(g)), (fp - fm) / (2 * h), rtol=1e-6)


def test_jit_and_vmap():
    u, v = jnp.asarray(U), jnp.asarray(V)

    @jax.jit
    def vis(radius):
        return em.MRing(GRID, 1.0, radius, BETA).visibility(u, v)

    radii = jnp.asarray([15.0, 18.0, 21.0]) * UAS
    batched = jax.vmap(vis)(radii)
    for r, b in zip(radii, batched):
        _close(b, np_mring(U, V, 1.0, float(r), BETA))
    imgs = jax.vmap(lambda r: em.Disk(GRID, 1.0, r)())(radii)
    assert imgs.shape == (3, *GRID.shape)
    np.testing.assert_allclose(np.asarray(imgs.sum(axis=(1, 2))), 1.0, atol=2e-3)


def test_float32_models():
    m32 = em.MRing(COARSE, 0.9, 21 * UAS, BETA, dtype=jnp.float32)
    vis = _vis(m32, U.astype(np.float32), V.astype(np.float32))
    assert vis.dtype == jnp.complex64
    np.testing.assert_allclose(
        np.asarray(vis), np_mring(U, V, 0.9, 21 * UAS, BETA), atol=2e-5
    )
    img = eqx.filter_jit(lambda m: m())(em.Blurred(m32, 5 * UAS))
    assert img.dtype == jnp.float32
    np.testing.assert_allclose(float(img.sum()), 0.9, rtol=1e-5)


@pytest.mark.slow  # one objective compiled with its gradient: ~5 s
def test_terms_use_the_analytic_visibilities():
    rng = np.random.default_rng(1)
    model = em.Shifted(em.MRing(COARSE, 0.8, 20 * UAS, BETA), UAS, -UAS) + em.Disk(
        COARSE, 0.2, 10 * UAS
    )
    ana = np.asarray(_vis(model, U, V))
    obs = ana + 0.01 * (rng.normal(size=U.size) + 1j * rng.normal(size=U.size))
    vis = em.VisChi2(em.DirectFT(COARSE, U, V), obs, np.full(U.size, 0.01))
    ref = np.sum(np.abs(ana - obs) ** 2 / 0.01**2) / (2 * U.size)
    call = eqx.filter_jit(lambda term, image: term(image))
    np.testing.assert_allclose(float(call(vis, model)), ref, rtol=1e-12)
    # the render through the pixel transform differs (pulse, discretisation)
    assert abs(float(call(vis, model())) - ref) > 1e-6 * ref
    # closure phases on triangles: served by a shared transform in an objective
    tri_u = np.stack([U[2:12], U[12:22], -(U[2:12] + U[12:22])], axis=1)
    tri_v = np.stack([V[2:12], V[12:22], -(V[2:12] + V[12:22])], axis=1)
    bis = np.prod(np.asarray(_vis(model, tri_u, tri_v)), axis=1)
    cp = em.ClosurePhaseChi2(
        em.DirectFT(COARSE, tri_u, tri_v), np.angle(bis) + 0.05, np.full(10, 0.1)
    )
    tv = em.TV(COARSE)
    obj = vis + cp + 0.01 * tv
    assert obj.shared  # the visibilities and the legs share one transform
    data = vis + cp

    @eqx.filter_jit
    def evaluate(obj, data, model):
        return (
            obj.values(model),
            obj(model),
            data.residuals(model),
            eqx.filter_grad(obj)(model),
            tv(model()),
        )

    vals, total, r, g, tv_value = evaluate(obj, data, model)
    np.testing.assert_allclose(float(vals[0]), ref, rtol=1e-12)
    ref_cp = 2 * 10 * (1 - np.cos(0.05)) / 0.1**2 / 10
    np.testing.assert_allclose(float(vals[1]), ref_cp, rtol=1e-10)
    np.testing.assert_allclose(float(vals[2]), float(tv_value), rtol=1e-12)
    ref_total = ref + ref_cp + 0.01 * float(tv_value)
    np.testing.assert_allclose(float(total), ref_total, rtol=1e-12)
    np.testing.assert_allclose(float(jnp.sum(r**2)), ref + ref_cp, rtol=1e-10)
    assert np.isfinite(float(g.parts[0].model.radius))


def test_hybrid_sum_with_a_pixel_model():
    rng = np.random.default_rng(2)
    pix = em.PixelImage(COARSE, jnp.asarray(rng.uniform(0, 1e-4, COARSE.shape)))
    ring = em.MRing(COARSE, 0.8, 20 * UAS, BETA)
    hybrid = ring + pix
    fwd = em.DirectFT(COARSE, U, V)
    term = em.VisChi2(fwd, np.zeros(U.size) + 0.5, np.full(U.size, 0.1))
    mv = np.asarray(term.model_vis(hybrid))
    _close(mv, np.asarray(fwd(pix())) + np_mring(U, V, 0.8, 20 * UAS, BETA))
    np.testing.assert_allclose(
        np.asarray(hybrid()), np.asarray(ring()) + np.asarray(pix()), rtol=1e-12
    )
    with pytest.raises(ValueError, match="pixel model"):
        _vis(hybrid, U, V)
    with pytest.raises(ValueError, match="pixel model"):
        em.Shifted(hybrid, UAS, UAS)


_NOT_GEOMETRIC = unchecked_error(
    "em.Rotated(em.GaussianImage(g, 1.0, 1e-10), 0.1)",
    "TypeError",
    setup="g = em.ImageGrid(16, 16, 1e-11)",
)
_RING_F32 = unchecked_error(
    "em.MRing(g, 1.0, 2e-11, [[0.1]])",
    "ValueError",
    setup="g = em.ImageGrid(16, 16, 1e-11)",
)


def test_errors_without_the_type_checker(unchecked):
    """As users run it (no runtime type checker, x64 off): our own messages."""
    assert "must be a geometric model" in unchecked[_NOT_GEOMETRIC]
    assert "`beta` must be a 1-d sequence" in unchecked[_RING_F32]


def test_construction_errors():
    with pytest.raises(ValueError, match="inner_radius"):
        em.Crescent(GRID, 1.0, 10 * UAS, 12 * UAS)
    with pytest.raises(ValueError, match="reaches outside the outer one"):
        em.Crescent(GRID, 1.0, 10 * UAS, 6 * UAS, dx=5 * UAS)
    with pytest.raises(ValueError, match="radians"):
        em.Disk(GRID, 1.0, 20.0)
    with pytest.raises(ValueError, match="must be > 0"):
        em.MRing(GRID, 1.0, -1 * UAS)
    with pytest.raises(ValueError, match="1-d"):
        em.MRing(GRID, 1.0, UAS, np.array([[0.1]]))
    with pytest.raises(ValueError, match="more than the 20"):
        em.MRing(GRID, 1.0, UAS, np.full(21, 0.01))
    with pytest.raises(ValueError, match="blur last"):
        em.Shifted(em.Blurred(em.Disk(GRID, 1.0, UAS), UAS), UAS, UAS)
    with pytest.raises(TypeError, match="AbstractGeometricModel"):
        em.Rotated(em.GaussianImage(GRID, 1.0, 10 * UAS), 0.1)
    with pytest.raises(ValueError, match="different grids"):
        em.Disk(GRID, 1.0, UAS) + em.Disk(em.ImageGrid(64, 64, UAS), 1.0, UAS)
    with pytest.raises(ValueError, match="different precisions"):
        em.Disk(GRID, 1.0, UAS) + em.Disk(GRID, 1.0, UAS, dtype=jnp.float32)
    with pytest.raises(ValueError, match="no geometric model"):
        em.Sum(em.GaussianImage(GRID, 1.0, 10 * UAS))
    with pytest.raises(ValueError, match="resolution"):
        em.MRing(GRID, 1.0, 10 * UAS).intensity(np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="closed-form intensity"):
        em.Blurred(em.Disk(GRID, 1.0, UAS), UAS).intensity(0.0, 0.0)
    with pytest.raises(ValueError, match="must be > 0"):
        em.Stretched(em.Disk(GRID, 1.0, UAS), 0.0, 1.0)
    term = em.VisChi2(em.DirectFT(em.ImageGrid(64, 64, UAS), U, V), U * 0, U * 0 + 1)
    with pytest.raises(ValueError, match="term's grid"):
        term(em.Disk(GRID, 1.0, 10 * UAS))


@pytest.mark.slow  # a solve: ~5-10 s
def test_levenberg_marquardt_recovers_an_mring():
    """Parameters in radians beside fluxes in Jy: Levenberg-Marquardt's scaling
    handles it (docs/solvers.md); the fit reaches the truth within the noise."""
    rng = np.random.default_rng(3)
    rho, psi = rng.uniform(1e9, 8e9, 60), rng.uniform(0, 2 * np.pi, 60)
    u, v = rho * np.sin(psi), rho * np.cos(psi)
    truth = em.MRing(COARSE, 0.6, 20 * UAS, [0.2 - 0.1j])
    noise = 0.005 * (rng.normal(size=60) + 1j * rng.normal(size=60))
    obs = np.asarray(_vis(truth, u, v)) + noise
    term = em.VisChi2(em.DirectFT(COARSE, u, v), obs, np.full(60, 0.005))
    start = em.MRing(COARSE, 0.5, 17 * UAS, [0.0j])
    sol = em.solve(term, start, em.LevenbergMarquardt(), max_steps=100)
    assert abs(float(sol.model.radius) / UAS - 20) < 0.2
    assert abs(float(sol.model.flux) - 0.6) < 0.01
    assert abs(float(sol.model.beta_re[0]) - 0.2) < 0.01
    assert abs(float(sol.model.beta_im[0]) + 0.1) < 0.01
    assert float(sol.value) < 1.3
