"""The xs-ringauss (Benkevitch et al. 2016): analytic visibilities against a numpy
reference written from the formulas (values; gradients by complex steps through
it), against an independent quadrature of the brightness, against the pixel
transform of its render, and its construction errors."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sp

import eqmodels as em
from eqmodels._geometric._xsringauss import j2_ratio


UAS = em.uas_to_rad(1.0)
GRID = em.ImageGrid(128, 128, 0.5 * UAS)
FWHM = math.sqrt(8 * math.log(2))

rng = np.random.default_rng(3)
_rho = np.concatenate([[0.0, 1e3, 3e6], rng.uniform(0, 8e9, 37)])
_psi = rng.uniform(0, 2 * np.pi, _rho.size)
U, V = _rho * np.sin(_psi), _rho * np.cos(_psi)

# flux, R, ψ, τ, f, g, w_a, w_b, φ
PARAMS = (1.2, 22 * UAS, 0.4, 0.6, 0.3, 0.2, 8 * UAS, 5 * UAS, 0.7)
NAMES = (
    "flux",
    "radius",
    "thickness",
    "eccentricity",
    "fading",
    "gauss_fraction",
    "gauss_fwhm",
    "gauss_fwhm_perp",
    "angle",
)


def _model(params=PARAMS, grid=GRID, dtype=None):
    f, r, psi, tau, fade, g, wa, wb, phi = params
    return em.XSRingauss(
        grid,
        f,
        r,
        psi,
        eccentricity=tau,
        fading=fade,
        gauss_fraction=g,
        gauss_fwhm=wa,
        gauss_fwhm_perp=wb,
        angle=phi,
        dtype=dtype,
    )


# --- the numpy reference, in (real, imaginary) pairs so that a parameter may take
# a complex step (the derivative is then Im f(p + ih)/h, to rounding) ---
def _jinc_real(x):
    small = np.abs(x) < 1e-3
    xs = np.where(small, 1.0, x)
    return np.where(small, 1 - x * x / 8 + x**4 / 192, 2 * sp.jv(1, xs) / xs)


def _g_real(x, order=2):
    """`2 J_n(x)/x^n` for n = `order` (series near 0, n = 2 or 3)."""
    small = np.abs(x) < 1e-2
    xs = np.where(small, 1.0, x)
    if order == 2:
        series = 0.25 - x * x / 48 + x**4 / 1536 - x**6 / 92160
    else:
        series = 1 / 24 - x * x / 384 + x**4 / 15360
    return np.where(small, series, 2 * sp.jv(order, xs) / xs**order)


def _jinc(z):
    """`2 J_1(z)/z`; at `z = x + iy` (a complex step, `y` tiny) its first-order
    expansion `f(x) + iy f'(x)`, `f' = −2 J_2(x)/x` (scipy's complex Bessel
    functions are not accurate to such tiny imaginary parts)."""
    x, y = np.real(z), np.imag(z)
    return _jinc_real(x) + 1j * y * (-x * _g_real(x))


def _g(z):
    """`2 J_2(z)/z²`, likewise: `f' = −2 J_3(x)/x²`."""
    x, y = np.real(z), np.imag(z)
    return _g_real(x) + 1j * y * (-x * _g_real(x, 3))


def np_xsringauss(u, v, params):
    """`(Re V, Im V)` from the formulas of the docstring, each an analytic
    function of the (possibly complex-stepped) parameters."""
    f, big, psi, tau, fade, g, wa, wb, phi = params
    small = (1 - psi) * big
    d = tau * (big - small)
    c0, c1 = (1 + fade) / 2, (1 - fade) / (2 * big)
    level = f * (1 - g) / (np.pi * (c0 * (big**2 - small**2) + c1 * d * small**2))
    ka = u * np.sin(phi) + v * np.cos(phi)
    kb = u * np.cos(phi) - v * np.sin(phi)
    k = np.hypot(u, v)
    zo, zi = 2 * np.pi * big * k, 2 * np.pi * small * k
    o_re = c0 * np.pi * big**2 * _jinc(zo)
    o_im = 2 * np.pi**2 * c1 * big**4 * ka * _g(zo)
    i_re = (c0 - c1 * d) * np.pi * small**2 * _jinc(zi)
    i_im = 2 * np.pi**2 * c1 * small**4 * ka * _g(zi)
    # e^{−2πi k_a d} (i_re + i i_im)
    cph, sph = np.cos(2 * np.pi * ka * d), -np.sin(2 * np.pi * ka * d)
    p_re, p_im = cph * i_re - sph * i_im, cph * i_im + sph * i_re
    sa, sb = wa / FWHM, wb / FWHM
    amp = f * g * np.exp(-2 * np.pi**2 * ((sa * ka) ** 2 + (sb * kb) ** 2))
    th = 2 * np.pi * ka * (small - d)
    re = level * (o_re - p_re) + amp * np.cos(th)
    im = level * (o_im - p_im) + amp * np.sin(th)
    return re, im


def np_vis(u, v, params=PARAMS):
    re, im = np_xsringauss(u, v, params)
    return re + 1j * im


@eqx.filter_jit
def _vis(model, u, v):
    return model.visibility(u, v)


def test_j2_ratio_matches_scipy_on_both_sides_of_its_switch():
    z = np.concatenate([[0.0, 1e-8, 1e-3, 0.3, 0.999, 1.0, 1.001], [5.0, 37.0, 450.0]])
    ref = np.array([0.25] + [2 * sp.jv(2, t) / t**2 for t in z[1:]])
    np.testing.assert_allclose(
        np.asarray(jax.jit(j2_ratio)(jnp.asarray(z))), ref, rtol=1e-13
    )
    z0 = np.array([0.5, 2.0])  # d/dz (2 J_2/z²) = −2 J_3(z)/z²
    g = jax.jit(jax.vmap(jax.grad(j2_ratio)))(jnp.asarray(z0))
    np.testing.assert_allclose(np.asarray(g), -2 * sp.jv(3, z0) / z0**2, rtol=1e-12)


def test_visibilities_match_the_numpy_reference():
    m = _model()
    vis = np.asarray(_vis(m, U, V))
    np.testing.assert_allclose(vis, np_vis(U, V), rtol=1e-12, atol=1e-14)
    assert abs(vis[0] - PARAMS[0]) < 1e-14  # V(0) = F: the ring's level normalises
    # the limits: an annulus of uniform brightness without the Gaussian is a
    # `Crescent` with a centred hole; τ shifts the hole away from the bright side
    flat = _model((1.0, 20 * UAS, 0.5, 0.0, 1.0, 0.0, 5 * UAS, 5 * UAS, 0.3))
    annulus = em.Crescent(GRID, 1.0, 20 * UAS, 10 * UAS)
    np.testing.assert_allclose(
        np.asarray(_vis(flat, U, V)), np.asarray(_vis(annulus, U, V)), atol=1e-14
    )
    ecc = _model((1.0, 20 * UAS, 0.5, 0.8, 1.0, 0.0, 5 * UAS, 5 * UAS, 0.3))
    d = 0.8 * 10 * UAS  # the hole at a = −d: (x, y) = −d (sin φ, cos φ)
    crescent = em.Crescent(
        GRID, 1.0, 20 * UAS, 10 * UAS, dx=-d * np.sin(0.3), dy=-d * np.cos(0.3)
    )
    np.testing.assert_allclose(
        np.asarray(_vis(ecc, U, V)), np.asarray(_vis(crescent, U, V)), atol=1e-14
    )


def _disk_ft_quadrature(u, v, radius, centre, c0, c1, axis):
    """∫ over the disk of (c0 + c1 a) e^{2πi(ux + vy)}: Gauss–Legendre in r,
    the periodic trapezoid rule in θ (independent of the Bessel closed form)."""
    xr, wr = np.polynomial.legendre.leggauss(80)
    r = 0.5 * radius * (xr + 1)
    wr = 0.5 * radius * wr
    th = 2 * np.pi * np.arange(512) / 512
    x = centre[0] + r[:, None] * np.sin(th)[None]
    y = centre[1] + r[:, None] * np.cos(th)[None]
    a = x * axis[0] + y * axis[1]
    w = (wr * r)[:, None] * (2 * np.pi / 512) * (c0 + c1 * a)
    ph = np.exp(2j * np.pi * (u[:, None, None] * x + v[:, None, None] * y))
    return np.sum(w * ph, axis=(1, 2))


def test_ring_formula_matches_a_quadrature_of_its_brightness():
    f, big, psi, tau, fade, g, wa, wb, phi = PARAMS
    m = _model((f, big, psi, tau, fade, 0.0, wa, wb, phi))
    small = (1 - psi) * big
    d = tau * (big - small)
    c0, c1 = (1 + fade) / 2, (1 - fade) / (2 * big)
    axis = (np.sin(phi), np.cos(phi))
    level = float(m.geometry()[4])
    sel = np.abs(U) + np.abs(V) < 4e9  # where 80 × 512 nodes resolve the fringes
    u, v = U[sel], V[sel]
    outer = _disk_ft_quadrature(u, v, big, (0.0, 0.0), c0, c1, axis)
    inner = _disk_ft_quadrature(u, v, small, (-d * axis[0], -d * axis[1]), c0, c1, axis)
    ref = level * (outer - inner)
    # (at every point, then selected: the program compiled for U, V serves)
    vis = np.asarray(_vis(m, U, V))[sel]
    np.testing.assert_allclose(vis, ref, rtol=0, atol=1e-12)
    # the level makes the flux F: the quadrature at k = 0
    np.testing.assert_allclose(ref[0].real, f, rtol=1e-12)


def test_bright_thick_side_at_the_angle():
    m = _model()
    r = PARAMS[1]
    phi = PARAMS[-1]
    near = 0.95 * r  # inside the ring on the thick side, and on the thin side
    xs = np.array([near * np.sin(phi), -near * np.sin(phi)])
    ys = np.array([near * np.cos(phi), -near * np.cos(phi)])
    i = np.asarray(m.intensity(xs, ys))
    assert i[0] > 0 and i[1] > 0
    assert i[0] > i[1]  # L = 1 vs about f
    # the slash: the ring's level along the axis is c0 + c1 a
    ring = _model(PARAMS[:5] + (0.0,) + PARAMS[6:])
    i0 = np.asarray(ring.intensity(xs, ys))
    c0, c1r = 0.5 * (1 + PARAMS[4]), 0.5 * (1 - PARAMS[4])  # c1 R
    ratio = (c0 - c1r * 0.95) / (c0 + c1r * 0.95)
    np.testing.assert_allclose(i0[1] / i0[0], ratio, rtol=1e-12)


def test_gradients_match_complex_steps_of_the_reference_and_differences():
    u, v = jnp.asarray(U), jnp.asarray(V)
    wr, wi = rng.normal(size=U.size), rng.normal(size=U.size)

    @eqx.filter_jit
    def loss(m):
        vis = m.visibility(u, v)
        return jnp.sum(wr * vis.real + wi * vis.imag)

    m = _model()
    g = eqx.filter_jit(eqx.filter_grad(loss))(m)
    h = 1e-30
    for k, name in enumerate(NAMES):
        p = list(PARAMS)
        step = h * max(abs(p[k]), 1e-3)
        p[k] = p[k] + 1j * step
        re, im = np_xsringauss(U, V, p)
        ref = np.sum(wr * re.imag + wi * im.imag) / step
        np.testing.assert_allclose(
            float(getattr(g, name)), ref, rtol=1e-12, atol=1e-14, err_msg=name
        )
    # and central differences of the model itself
    for name, d in [("radius", 1e-4 * UAS), ("eccentricity", 1e-5), ("angle", 1e-5)]:
        x = getattr(m, name)
        fp = loss(eqx.tree_at(lambda t: getattr(t, name), m, x + d))
        fm = loss(eqx.tree_at(lambda t: getattr(t, name), m, x - d))
        np.testing.assert_allclose(
            float(getattr(g, name)), (fp - fm) / (2 * d), rtol=1e-7, err_msg=name
        )


def test_render_matches_pixel_transform():
    """The render's `DirectFT` (delta pulse; 0.5 µas pixels, ρ ≤ 8 Gλ) equals the
    analytic visibilities within the discretisation error of the edges spread over
    a pixel (as `Crescent`'s, < 1e-3 of the flux), and the render holds the flux."""
    m = _model()
    img = eqx.filter_jit(lambda t: t())(m)
    assert img.shape == GRID.shape
    np.testing.assert_allclose(float(img.sum()), PARAMS[0], rtol=1e-3)
    pix = np.asarray(em.DirectFT(GRID, U, V, em.DeltaPulse())(img))
    err = np.abs(pix - np_vis(U, V)).max()
    assert 1e-7 < err < 1e-3
    # moved and smoothed: the transforms compose
    shifted = em.Blurred(em.Shifted(m, 2 * UAS, -3 * UAS), 4 * UAS)
    ref = np_vis(U, V) * np.exp(2j * np.pi * (U * 2 * UAS - V * 3 * UAS))
    ref = ref * np.exp(-2 * np.pi**2 * (4 * UAS / FWHM) ** 2 * (U**2 + V**2))
    np.testing.assert_allclose(
        np.asarray(_vis(shifted, U, V)), ref, rtol=1e-12, atol=1e-14
    )


def test_jit_vmap_and_float32():
    u, v = jnp.asarray(U), jnp.asarray(V)

    @jax.jit
    def vis(tau):
        p = list(PARAMS)
        p[3] = tau
        return _model(tuple(p)).visibility(u, v)

    taus = jnp.asarray([0.0, 0.5, 1.0])
    for t, b in zip(taus, jax.vmap(vis)(taus)):
        p = list(PARAMS)
        p[3] = float(t)
        np.testing.assert_allclose(
            np.asarray(b), np_vis(U, V, tuple(p)), rtol=1e-12, atol=1e-14
        )
    m32 = _model(dtype=jnp.float32)
    v32 = _vis(m32, U.astype(np.float32), V.astype(np.float32))
    assert v32.dtype == jnp.complex64
    np.testing.assert_allclose(np.asarray(v32), np_vis(U, V), atol=3e-5)


def test_terms_take_the_analytic_visibilities():
    coarse = em.ImageGrid(32, 32, 2 * UAS)
    m = _model(grid=coarse)
    obs = np_vis(U, V) + 0.01
    term = em.VisChi2(em.DirectFT(coarse, U, V), obs, np.full(U.size, 0.01))
    ref = np.sum(np.abs(np_vis(U, V) - obs) ** 2 / 0.01**2) / (2 * U.size)
    np.testing.assert_allclose(float(eqx.filter_jit(term)(m)), ref, rtol=1e-10)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"thickness": 0.0}, r"`thickness` must lie in \(0, 1\]"),
        ({"thickness": 1.2}, r"`thickness` must lie in \(0, 1\]"),
        ({"eccentricity": -0.1}, r"`eccentricity` must lie in \[0, 1\]"),
        ({"fading": -0.5}, "`fading` must be >= 0"),
        ({"gauss_fraction": 1.5}, r"`gauss_fraction` must lie in \[0, 1\]"),
        ({"gauss_fwhm": 0.0}, "gauss_fwhm"),
        ({"radius": 20.0}, "radius"),  # µas passed as radians
    ],
)
def test_construction_errors(kwargs, match):
    base = dict(flux=1.0, radius=20 * UAS, thickness=0.5, eccentricity=0.5, fading=0.5)
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        em.XSRingauss(GRID, **base)
