"""Polarimetric geometric models (`PolMRing`, `Polarized`): analytic Stokes
visibilities against numpy references written from the formulas (values and
gradients), against a direct sum over the ring, against the pixel transform of
their render, through polarimetric data terms and objectives, and their errors."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sp

import eqmodels as em
from tests.unchecked import unchecked_error


UAS = em.uas_to_rad(1.0)
GRID = em.ImageGrid(128, 128, 0.5 * UAS)
COARSE = em.ImageGrid(32, 32, 2 * UAS)
FWHM = math.sqrt(8 * math.log(2))

_rng = np.random.default_rng(5)
_rho = np.concatenate([[0.0, 1e3], _rng.uniform(0, 8e9, 38)])
_psi = _rng.uniform(0, 2 * np.pi, _rho.size)
U, V = _rho * np.sin(_psi), _rho * np.cos(_psi)

F, R = 0.9, 18 * UAS
BI = [0.15 - 0.1j, 0.03j]
BP = [0.02 - 0.01j, 0.03j, 0.1, 0.05 - 0.04j, 0.2j]  # m = −2..2
BV = [0.02, 0.01 + 0.005j]
X0, Y0, W = 2 * UAS, -1 * UAS, 5 * UAS


def _ring(grid=GRID, fwhm=W, dtype=None, **kw):
    args = dict(beta_i=BI, beta_p=BP, beta_v=BV, fwhm=fwhm, x0=X0, y0=Y0)
    args.update(kw)
    return em.PolMRing(grid, F, R, dtype=dtype, **args)


# --- numpy references, from the formulas ---
def _series(coef, u, v, radius, deriv=False):
    """`Σ_m c_m i^{|m|} J_{|m|}(z) e^{imψ}` for a two-sided `{m: c_m}` (or with
    `J'` times `2πρ`, its derivative in the radius)."""
    rho, psi = np.hypot(u, v), np.arctan2(u, v)
    z = 2 * np.pi * radius * rho
    out = np.zeros(np.shape(u), complex)
    for m, c in coef.items():
        k = abs(m)
        if deriv:
            j = 0.5 * (sp.jv(k - 1, z) - sp.jv(k + 1, z)) * 2 * np.pi * rho
        else:
            j = sp.jv(k, z)
        out += c * 1j**k * j * np.exp(1j * m * psi)
    return out


def _real_series(b0, betas):
    """A real series `b0 + Σ_{m≥1} 2 Re(β_m e^{imθ})` as two-sided coefficients."""
    coef = {0: b0}
    for m, b in enumerate(betas, start=1):
        coef[m], coef[-m] = b, np.conj(b)
    return coef


def _pol_coefs(bp):
    """`Q = Re P`, `U = Im P` as two-sided series: `q_m = (β_m + β*_{−m})/2`,
    `u_m = (β_m − β*_{−m})/(2i)`."""
    mp = (len(bp) - 1) // 2
    b = {m: bp[m + mp] for m in range(-mp, mp + 1)}
    q = {m: 0.5 * (b[m] + np.conj(b[-m])) for m in b}
    uu = {m: (b[m] - np.conj(b[-m])) / 2j for m in b}
    return q, uu


def np_pol_mring(
    u, v, bi=BI, bp=BP, bv=BV, radius=R, fwhm=W, x0=X0, y0=Y0, deriv=False
):
    q, uu = _pol_coefs(bp)
    coefs = [_real_series(1.0, bi), q, uu, _real_series(bv[0], bv[1:])]
    out = np.stack([F * _series(c, u, v, radius, deriv) for c in coefs], axis=-1)
    out = out * np.exp(2j * np.pi * (u * x0 + v * y0))[..., None]
    if fwhm is not None:
        taper = np.exp(-2 * np.pi**2 * (fwhm / FWHM) ** 2 * (u**2 + v**2))
        out = out * taper[..., None]
    return out


@eqx.filter_jit
def _svis(model, u, v):
    return model.stokes_visibility(u, v)


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12, atol=1e-14)


def test_pol_mring_matches_the_numpy_reference():
    m = _ring()
    vis = _svis(m, U, V)
    assert vis.shape == (U.size, 4)
    _close(vis, np_pol_mring(U, V))
    _close(eqx.filter_jit(lambda t: t.visibility(U, V))(m), np_pol_mring(U, V)[:, 0])
    # at the origin: the fluxes F (1, Re β_0, Im β_0, β^V_0)
    _close(vis[0], F * np.array([1.0, 0.1, 0.0, 0.02]))
    # thin, centred: no taper, no phase
    thin = _ring(fwhm=None, x0=0.0, y0=0.0)
    _close(_svis(thin, U, V), np_pol_mring(U, V, fwhm=None, x0=0.0, y0=0.0))
    # the thin ring's Stokes I intensity is the (shifted) MRing's
    x, y = np.meshgrid(np.linspace(-25, 25, 11) * UAS, np.linspace(-22, 22, 9) * UAS)
    moved = em.Shifted(em.MRing(GRID, F, R, BI), X0, Y0)
    np.testing.assert_allclose(
        np.asarray(_ring(fwhm=None).intensity(x, y, 3 * UAS)),
        np.asarray(moved.intensity(x, y, 3 * UAS)),
        rtol=1e-12,
        atol=1e-12 * F / UAS**2,
    )


def test_pol_mring_matches_a_direct_sum_over_the_ring():
    """The convention itself: each plane's ring samples (x = R sin θ, y = R cos θ,
    θ east of north) summed with e^{+2πi(ux + vy)}, the periodic trapezoid rule."""
    thin = _ring(fwhm=None, x0=0.0, y0=0.0)
    n = 4096
    th = 2 * np.pi * np.arange(n) / n
    e = np.exp(1j * th)
    a_i = 1 + sum(2 * np.real(b * e**k) for k, b in enumerate(BI, start=1))
    a_p = sum(b * e ** (k - 2) for k, b in enumerate(BP))
    a_v = BV[0] + 2 * np.real(BV[1] * e)
    prof = np.stack([a_i, a_p.real, a_p.imag, a_v], axis=-1)
    phase = np.exp(
        2j * np.pi * (U[:, None] * R * np.sin(th) + V[:, None] * R * np.cos(th))
    )
    direct = F * np.einsum("pk,ks->ps", phase, prof) / n
    np.testing.assert_allclose(
        np.asarray(_svis(thin, U, V)), direct, rtol=1e-11, atol=1e-13
    )


def test_pol_mring_gradients_match_the_formulas():
    u, v = jnp.asarray(U), jnp.asarray(V)
    w = _rng.normal(size=(U.size, 4, 2))

    def loss(m):
        s = m.stokes_visibility(u, v)
        return jnp.sum(w[..., 0] * s.real + w[..., 1] * s.imag)

    def lin(dvis):
        return np.sum(w[..., 0] * dvis.real + w[..., 1] * dvis.imag)

    m = _ring()
    g = eqx.filter_jit(eqx.filter_grad(loss))(m)
    ref = np_pol_mring(U, V)
    rho2 = U**2 + V**2
    checks = {
        "radius": (g.radius, np_pol_mring(U, V, deriv=True)),
        "flux": (g.flux, ref / F),
        "x0": (g.x0, 2j * np.pi * U[:, None] * ref),
        "y0": (g.y0, 2j * np.pi * V[:, None] * ref),
        "fwhm": (g.fwhm, -4 * np.pi**2 * W / FWHM**2 * rho2[:, None] * ref),
    }
    for name, (got, dvis) in checks.items():
        np.testing.assert_allclose(float(got), lin(dvis), rtol=1e-12, err_msg=name)
    # the coefficients: each Stokes visibility is linear in them
    zero_p = [0.0] * len(BP)
    for k in range(len(BP)):
        for part, unit in ((0, 1.0), (1, 1j)):
            bp = list(zero_p)
            bp[k] = unit
            d = np_pol_mring(U, V, bp=bp) - np_pol_mring(U, V, bp=zero_p)
            np.testing.assert_allclose(
                float(g.beta_p[k, part]), lin(d), rtol=1e-12, atol=1e-14
            )
    d = np_pol_mring(U, V, bi=[1.0, BI[1]]) - np_pol_mring(U, V, bi=[0.0, BI[1]])
    np.testing.assert_allclose(float(g.beta_i[0, 0]), lin(d), rtol=1e-12)
    d = np_pol_mring(U, V, bv=[BV[0], 1j]) - np_pol_mring(U, V, bv=[BV[0], 0.0])
    np.testing.assert_allclose(float(g.beta_v[1, 1]), lin(d), rtol=1e-12)
    # and central differences of the model itself
    f = eqx.filter_jit(loss)
    for where, h in [(lambda t: t.radius, 1e-4 * UAS), (lambda t: t.x0, 1e-4 * UAS)]:
        fp = f(eqx.tree_at(where, m, where(m) + h))
        fm = f(eqx.tree_at(where, m, where(m) - h))
        np.testing.assert_allclose(float(where(g)), (fp - fm) / (2 * h), rtol=1e-7)


def test_polarized_matches_the_numpy_reference_and_clips():
    inner = em.Blurred(
        em.Shifted(
            em.XSRingauss(COARSE, 1.1, 20 * UAS, 0.4, eccentricity=0.5), UAS, 0.0
        ),
        4 * UAS,
    )
    p = em.Polarized(inner, 0.3, 0.4, 0.05)
    vi = np.asarray(eqx.filter_jit(lambda t: t.visibility(U, V))(inner))
    frac = np.array([1.0, 0.3 * np.cos(0.8), 0.3 * np.sin(0.8), 0.05])
    _close(_svis(p, U, V), vi[:, None] * frac)
    # a step beyond |f| = 1 is scaled back onto it (as PolGaussianImage)
    over = eqx.tree_at(lambda t: t.frac, p, jnp.asarray(1.5))
    got = np.asarray(_svis(over, U, V))[0] / vi[0]
    n = np.hypot(1.5, 0.05)
    np.testing.assert_allclose(
        got.real, [1, 1.5 * np.cos(0.8) / n, 1.5 * np.sin(0.8) / n, 0.05 / n]
    )
    # the render: the fractions times the Stokes I render
    img = eqx.filter_jit(lambda t: t())(p)
    i_img = eqx.filter_jit(lambda t: t())(inner)
    assert img.shape == (4, *COARSE.shape)
    np.testing.assert_allclose(
        np.asarray(img), frac[:, None, None] * np.asarray(i_img)[None], rtol=1e-12
    )


@pytest.mark.parametrize("name", ["thin", "thick", "polarized"])
def test_render_matches_pixel_transform(name):
    """`DirectFT` (delta pulse, 0.5 µas pixels, ρ ≤ 8 Gλ) of each rendered plane
    equals the analytic Stokes visibilities within the discretisation error (the
    ring deposited bilinearly: 1e-3 of the flux, as `MRing`)."""
    models = {
        "thin": _ring(fwhm=None),
        "thick": _ring(),
        "polarized": em.Polarized(em.MRing(GRID, 1.0, R, [0.2]), 0.4, 1.0, -0.1),
    }
    m = models[name]
    img = eqx.filter_jit(lambda t: t())(m)
    assert img.shape == (4, *GRID.shape)
    fwd = em.DirectFT(GRID, U, V, em.DeltaPulse())
    pix = np.asarray(jax.vmap(fwd)(img)).T
    svis = np.asarray(_svis(m, U, V))
    err = np.abs(pix - svis).max(axis=0)
    assert np.all(err < 1e-3), err
    assert err[0] > 1e-7  # the error is real, not a wrong convention
    # the render holds the fluxes (a ring inside the grid): the visibilities at
    # (U, V)[0] = (0, 0)
    assert U[0] == V[0] == 0.0
    np.testing.assert_allclose(
        np.asarray(img.sum(axis=(1, 2))),
        svis[0].real,
        atol=1e-9,  # the blur's FFT convolution
    )


def test_beta_m_of_the_render_recovers_beta_p():
    """Palumbo et al.'s β_m of the render (eqmodels.beta_m, position angle east of
    north) is the model's β^P_m (to the pixelisation of a 36-pixel ring)."""
    thin = em.PolMRing(GRID, 1.0, R, beta_p=BP)
    b = np.asarray(
        eqx.filter_jit(lambda t: em.beta_m(t(), GRID, [-2, -1, 0, 1, 2]))(thin)
    )
    np.testing.assert_allclose(b, BP, atol=3e-3)


def test_jit_vmap_and_float32():
    u, v = jnp.asarray(U), jnp.asarray(V)

    @jax.jit
    def vis(radius):
        m = em.PolMRing(
            GRID, F, radius, beta_i=BI, beta_p=BP, beta_v=BV, fwhm=W, x0=X0, y0=Y0
        )
        return m.stokes_visibility(u, v)

    radii = jnp.asarray([15.0, 18.0]) * UAS
    for r, b in zip(radii, jax.vmap(vis)(radii)):
        _close(b, np_pol_mring(U, V, radius=float(r)))
    m32 = _ring(COARSE, dtype=jnp.float32)
    s32 = _svis(m32, U.astype(np.float32), V.astype(np.float32))
    assert s32.dtype == jnp.complex64
    np.testing.assert_allclose(np.asarray(s32), np_pol_mring(U, V), atol=3e-5)
    img = eqx.filter_jit(lambda t: t())(m32)
    assert img.dtype == jnp.float32 and img.shape == (4, *COARSE.shape)


@pytest.mark.slow  # an objective compiled with its gradient: ~5 s
def test_polarimetric_terms_take_the_analytic_stokes_visibilities():
    m = _ring(COARSE)
    ref = np_pol_mring(U, V)
    rng = np.random.default_rng(7)
    noise = 0.01 * (rng.normal(size=U.size) + 1j * rng.normal(size=U.size))
    p_obs = ref[:, 1] + 1j * ref[:, 2] + noise
    i_obs = ref[:, 0] + noise
    sig = np.full(U.size, 0.01)
    pvis = em.PolVisChi2(em.DirectFT(COARSE, U, V), p_obs, sig)
    ivis = em.VisChi2(em.DirectFT(COARSE, U, V), i_obs, sig)
    ref_p = np.sum(np.abs(ref[:, 1] + 1j * ref[:, 2] - p_obs) ** 2 / 0.01**2) / (
        2 * U.size
    )
    ref_i = np.sum(np.abs(ref[:, 0] - i_obs) ** 2 / 0.01**2) / (2 * U.size)
    obj = pvis + ivis
    assert obj.shared  # one transform serves both

    @eqx.filter_jit
    def evaluate(obj, pvis, ivis, model):
        return (
            pvis(model),
            ivis(model),
            obj.values(model),
            obj.log_likelihood(model),
            pvis.log_likelihood(model) + ivis.log_likelihood(model),
            pvis(model()),
        )

    p_val, i_val, vals, ll_obj, ll_terms, rendered = evaluate(obj, pvis, ivis, m)
    np.testing.assert_allclose(float(p_val), ref_p, rtol=1e-10)
    np.testing.assert_allclose(float(i_val), ref_i, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(vals), [ref_p, ref_i], rtol=1e-10)
    n = 2 * U.size
    ref_ll = sum(
        -0.5 * n * c
        + 0.5 * 2 * U.size * np.log(1 / 0.01**2)
        - 0.5 * n * np.log(2 * np.pi)
        for c in (ref_p, ref_i)
    )
    np.testing.assert_allclose(float(ll_obj), ref_ll, rtol=1e-10)
    np.testing.assert_allclose(float(ll_terms), ref_ll, rtol=1e-10)
    # the render through the pixel transform differs (pulse, discretisation)
    assert abs(float(rendered) - ref_p) > 1e-6 * ref_p
    # the other polarimetric terms take them too: their χ² of the numpy visibilities
    others = [
        em.FracPolChi2(em.DirectFT(COARSE, U, V), np.full(U.size, 0.1 + 0.05j), sig),
        em.CorrelationChi2(
            em.DirectFT(COARSE, U, V),
            np.full((U.size, 4), 0.2 + 0.1j),
            np.full((U.size, 4), 0.01),
        ),
    ]
    for t in others:
        np.testing.assert_allclose(
            float(eqx.filter_jit(t)(m)),
            float(t.chi2_from_vis(jnp.asarray(ref))),
            rtol=1e-10,
            err_msg=type(t).__name__,
        )
    # a gradient through the objective is finite
    g = eqx.filter_jit(eqx.filter_grad(obj))(m)
    assert np.isfinite(float(g.radius)) and np.all(np.isfinite(np.asarray(g.beta_p)))


def test_polarized_hybrid_through_a_polarimetric_term():
    """A polarized hybrid (ring + pixels): the term transforms the pixel part with
    its forward model, adds the ring's analytic visibilities, times the fractions."""
    rng = np.random.default_rng(2)
    pix = em.PixelImage(COARSE, jnp.asarray(rng.uniform(0, 1e-4, COARSE.shape)))
    ring = em.MRing(COARSE, 0.8, 20 * UAS, [0.1j])
    model = em.Polarized(ring + pix, 0.25, -0.3)
    fwd = em.DirectFT(COARSE, U, V)
    term = em.PolVisChi2(fwd, np.zeros(U.size) + 0.05j, np.full(U.size, 0.1))
    mv = np.asarray(eqx.filter_jit(lambda t, m: t.model_vis(m))(term, model))
    vi = np.asarray(fwd(pix())) + np.asarray(eqx.filter_jit(ring.visibility)(U, V))
    frac = np.array([1.0, 0.25 * np.cos(-0.6), 0.25 * np.sin(-0.6), 0.0])
    _close(mv, vi[:, None] * frac)
    with pytest.raises(ValueError, match="pixel model"):
        model.stokes_visibility(U, V)


def test_regularizers_see_the_rendered_planes():
    m = _ring(COARSE)
    planes = eqx.filter_jit(lambda t: t())(m)
    reg = em.PolTV(COARSE)
    np.testing.assert_allclose(
        float(eqx.filter_jit(reg)(m)), float(eqx.filter_jit(reg)(planes)), rtol=1e-12
    )


_NOT_GEOMETRIC = unchecked_error(
    "em.Polarized(em.GaussianImage(g, 1.0, 1e-10), 0.1)",
    "TypeError",
    setup="g = em.ImageGrid(16, 16, 1e-11)",
)


def test_errors_without_the_type_checker(unchecked):
    """As users run it (no runtime type checker, x64 off): our own message."""
    assert "`model` must be a geometric model" in unchecked[_NOT_GEOMETRIC]


def test_construction_errors():
    ring = em.MRing(GRID, 1.0, R)
    pol = _ring()
    with pytest.raises(ValueError, match="already polarimetric"):
        em.Polarized(pol, 0.1)
    with pytest.raises(ValueError, match="`frac` must be >= 0"):
        em.Polarized(ring, -0.1)
    with pytest.raises(ValueError, match=r"`frac`² \+ `vfrac`² must be <= 1"):
        em.Polarized(ring, 0.9, 0.0, 0.5)
    with pytest.raises(ValueError, match="`model` is polarimetric"):
        em.Shifted(pol, UAS, 0.0)
    with pytest.raises(ValueError, match="`model` is polarimetric"):
        em.Blurred(pol, UAS)
    with pytest.raises(ValueError, match="polarimetric model"):
        em.Sum(ring, pol)
    with pytest.raises(ValueError, match="`beta_p` has 4 coefficients"):
        em.PolMRing(GRID, 1.0, R, beta_p=[0, 0, 0.1, 0])
    with pytest.raises(ValueError, match="over-polarize"):
        em.PolMRing(GRID, 1.0, R, beta_p=[0.7, 0, 0.5])
    with pytest.raises(ValueError, match="Stokes I negative"):
        em.PolMRing(GRID, 1.0, R, beta_i=[0.6])
    with pytest.raises(ValueError, match=r"at least β\^V_0"):
        em.PolMRing(GRID, 1.0, R, beta_v=[])
    with pytest.raises(ValueError, match=r"`beta_v\[0\]`.*must be real"):
        em.PolMRing(GRID, 1.0, R, beta_v=[0.1j])
    with pytest.raises(ValueError, match="`beta_i` reaches order 21"):
        em.PolMRing(GRID, 1.0, R, beta_i=[0.0] * 21)
    with pytest.raises(ValueError, match="radius"):
        em.PolMRing(GRID, 1.0, 20.0)  # µas passed as radians
    with pytest.raises(ValueError, match="no closed-form intensity"):
        pol.intensity(np.zeros(2), np.zeros(2), UAS)


@pytest.mark.slow  # eht-imaging
def test_pol_mring_equals_ehtim_mring_models(monkeypatch):
    """eht-imaging's `mring` and `thick_mring` models (`beta_list`,
    `beta_list_pol`, `beta_list_cpol`; `alpha` the blur's FWHM) have the same
    Stokes visibilities at the same (u, v): the conventions agree."""
    # eht-imaging 1.3.2 still names `np.complex_` (gone in numpy 2)
    monkeypatch.setattr(np, "complex_", np.complex128, raising=False)
    eh = pytest.importorskip("ehtim")
    for fwhm in (None, W):
        mod = eh.model.Model()
        kw = dict(F0=F, d=2 * R, x0=X0, y0=Y0, beta_list=BI, beta_list_pol=BP)
        if fwhm is None:
            mod = mod.add_mring(**kw, beta_list_cpol=BV)
        else:
            mod = mod.add_thick_mring(**kw, alpha=fwhm, beta_list_cpol=BV)
        ref = np.stack(
            [
                eh.model.sample_1model_uv(U, V, mod.models[0], mod.params[0], pol=p)
                for p in "IQUV"
            ],
            axis=-1,
        )
        got = np.asarray(_svis(_ring(fwhm=fwhm), U, V))
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
