"""Data terms' Gaussian log-likelihood, against numpy written from the formulas:
`ln L = −½ Σ (r/σ)² − Σ ln σ − (n/2) ln 2π` over the real data values."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em


UAS = em.uas_to_rad(1.0)
GRID = em.ImageGrid(8, 8, 4 * UAS)
LOG2PI = math.log(2 * math.pi)


def _dft(u, v):
    ix, iy = np.arange(GRID.nx), np.arange(GRID.ny)
    x = (GRID.nx / 2 - 0.5 - ix) * GRID.psize
    y = (GRID.ny / 2 - 0.5 - iy) * GRID.psize
    xx, yy = np.meshgrid(x, y)
    ph = np.multiply.outer(u, xx.ravel()) + np.multiply.outer(v, yy.ravel())
    return np.exp(2j * np.pi * ph)  # (*points, npix)


def _setup(seed=0, n=12):
    rng = np.random.default_rng(seed)
    img = rng.uniform(0.01, 0.05, GRID.shape)
    u = rng.uniform(-8e9, 8e9, (n, 4))
    v = rng.uniform(-8e9, 8e9, (n, 4))
    sigma = rng.uniform(0.01, 0.05, n)
    return rng, img, u, v, sigma


def _check(term, img, ll_np, grad_np):
    x = jnp.asarray(img)
    # compiled once per term's shapes (the differences below reuse it)
    log_likelihood = eqx.filter_jit(lambda t, x: t.log_likelihood(x))
    ll = log_likelihood(term, x)
    np.testing.assert_allclose(float(ll), ll_np, rtol=1e-12)
    g = np.asarray(jax.jit(jax.grad(term.log_likelihood))(x)).ravel()
    np.testing.assert_allclose(
        g, grad_np, rtol=1e-12, atol=1e-12 * np.abs(grad_np).max()
    )
    # padding rows (weight 0) change nothing
    padded = term.pad_rows(term.rows + 3)
    np.testing.assert_allclose(float(log_likelihood(padded, x)), ll_np, rtol=1e-12)
    # finite differences
    h = np.zeros(img.size)
    h[5] = 1e-6
    h = h.reshape(img.shape)
    fd = (log_likelihood(term, x + h) - log_likelihood(term, x - h)) / 2e-6
    np.testing.assert_allclose(float(fd), grad_np[5], rtol=1e-5)


def test_vis_log_likelihood():
    rng, img, u, v, sigma = _setup()
    u, v = u[:, 0], v[:, 0]
    a = _dft(u, v)
    model = a @ img.ravel()
    obs = model + sigma * (rng.normal(size=u.size) + 1j * rng.normal(size=u.size))
    term = em.VisChi2(em.DirectFT(GRID, u, v, em.DeltaPulse()), obs, sigma)
    d = model - obs
    n = 2 * u.size  # real values: two per visibility
    ll = -0.5 * np.sum(np.abs(d) ** 2 / sigma**2) - 2 * np.sum(np.log(sigma))
    ll -= 0.5 * n * LOG2PI
    grad = -np.real(np.conj(a).T @ (d / sigma**2))
    _check(term, img, ll, grad)


def test_amp_log_likelihood():
    rng, img, u, v, sigma = _setup(1)
    u, v = u[:, 0], v[:, 0]
    a = _dft(u, v)
    model = a @ img.ravel()
    amp = np.abs(model) + sigma * rng.normal(size=u.size)
    term = em.AmpChi2(em.DirectFT(GRID, u, v, em.DeltaPulse()), amp, sigma)
    d = np.abs(model) - amp
    ll = -0.5 * np.sum(d**2 / sigma**2) - np.sum(np.log(sigma)) - 0.5 * u.size * LOG2PI
    dabs = np.real(np.conj(model)[:, None] * a) / np.abs(model)[:, None]
    grad = -(d / sigma**2) @ dabs
    _check(term, img, ll, grad)


def test_closure_phase_log_likelihood():
    rng, img, u, v, sigma = _setup(2)
    u = np.stack([u[:, 0], u[:, 1], -(u[:, 0] + u[:, 1])], axis=1)
    v = np.stack([v[:, 0], v[:, 1], -(v[:, 0] + v[:, 1])], axis=1)
    a = _dft(u, v)  # (n, 3, npix)
    vis = a @ img.ravel()
    psi_model = np.angle(np.prod(vis, axis=1))
    cphase = psi_model + sigma * 3 * rng.normal(size=sigma.size)
    term = em.ClosurePhaseChi2(em.DirectFT(GRID, u, v, em.DeltaPulse()), cphase, sigma)
    delta = cphase - psi_model
    # the Gaussian in the chord 2 sin(Δ/2): −(1 − cos Δ)/σ² per closure phase
    ll = -np.sum((1 - np.cos(delta)) / sigma**2) - np.sum(np.log(sigma))
    ll -= 0.5 * sigma.size * LOG2PI
    dpsi = np.sum(np.imag(a / vis[:, :, None]), axis=1)  # ∂ψ̂/∂x
    grad = (np.sin(delta) / sigma**2) @ dpsi
    _check(term, img, ll, grad)
    # small residuals: the Gaussian −Δ²/(2σ²) to O(Δ⁴)
    chord = -0.5 * np.sum(delta**2 / sigma**2)
    assert abs(
        ll + np.sum(np.log(sigma)) + 0.5 * sigma.size * LOG2PI - chord
    ) < 0.1 * abs(chord)


def test_log_closure_amp_log_likelihood():
    rng, img, u, v, sigma = _setup(3)
    a = _dft(u, v)  # (n, 4, npix)
    vis = a @ img.ravel()
    lv = np.log(np.abs(vis))
    model = lv[:, 0] + lv[:, 1] - lv[:, 2] - lv[:, 3]
    obs = model + sigma * rng.normal(size=sigma.size)
    obs[0] = -abs(obs[0])  # not all positive (linear closure amplitudes refused)
    term = em.LogClosureAmpChi2(em.DirectFT(GRID, u, v, em.DeltaPulse()), obs, sigma)
    d = model - obs
    ll = -0.5 * np.sum(d**2 / sigma**2) - np.sum(np.log(sigma))
    ll -= 0.5 * sigma.size * LOG2PI
    dl = np.real(a / vis[:, :, None])  # ∂ ln|V|/∂x
    dm = dl[:, 0] + dl[:, 1] - dl[:, 2] - dl[:, 3]
    grad = -(d / sigma**2) @ dm
    _check(term, img, ll, grad)


def test_log_likelihood_of_a_geometric_model_under_vmap():
    rng, _, u, v, sigma = _setup(4)
    u, v = u[:, 0], v[:, 0]
    ring = em.MRing(GRID, 0.6, 10 * UAS, [0.2 - 0.1j])
    vis_of = eqx.filter_jit(lambda m: m.visibility(u, v))
    model = np.asarray(vis_of(ring))
    obs = model + sigma * (rng.normal(size=u.size) + 1j * rng.normal(size=u.size))
    term = em.VisChi2(em.DirectFT(GRID, u, v), obs, sigma)

    def ll_np(vis):
        d = vis - obs
        return (
            -0.5 * np.sum(np.abs(d) ** 2 / sigma**2)
            - 2 * np.sum(np.log(sigma))
            - u.size * LOG2PI
        )

    np.testing.assert_allclose(
        float(term.log_likelihood(ring)), ll_np(model), rtol=1e-12
    )
    radii = jnp.asarray([8.0, 10.0, 12.0]) * UAS
    out = jax.vmap(
        lambda r: term.log_likelihood(eqx.tree_at(lambda m: m.radius, ring, r))
    )(radii)
    for r, val in zip(radii, out):
        ref = ll_np(
            np.asarray(em.MRing(GRID, 0.6, float(r), [0.2 - 0.1j]).visibility(u, v))
        )
        np.testing.assert_allclose(float(val), ref, rtol=1e-12)


def test_objective_log_likelihood_sums_its_data_terms():
    rng, img, u, v, sigma = _setup(5)
    tri_u = np.stack([u[:, 0], u[:, 1], -(u[:, 0] + u[:, 1])], axis=1)
    tri_v = np.stack([v[:, 0], v[:, 1], -(v[:, 0] + v[:, 1])], axis=1)
    vis = em.VisChi2(
        em.DirectFT(GRID, u[:, 0], v[:, 0]), rng.normal(size=12) + 0j, sigma
    )
    amp = em.AmpChi2(em.DirectFT(GRID, u[:, 1], v[:, 1]), np.ones(12), sigma)
    cp = em.ClosurePhaseChi2(
        em.DirectFT(GRID, tri_u, tri_v), rng.normal(size=12) * 0.1, sigma * 10
    )
    obj = 2.0 * vis + amp + cp + 5.0 * em.TV(GRID)
    assert obj.shared  # the legs are the visibilities' and amplitudes' points
    x = jnp.asarray(img)
    ll = eqx.filter_jit(lambda o, x: o.log_likelihood(x))(obj, x)
    ref = sum(float(t.log_likelihood(x)) for t in (vis, amp, cp))
    np.testing.assert_allclose(float(ll), ref, rtol=1e-12)
    with pytest.raises(ValueError, match="no data term"):
        em.Objective([em.TV(GRID)]).log_likelihood(x)


def test_correlation_log_likelihood_counts_unflagged_correlations():
    """Four correlations a row, each complex with σ per part; a flagged one (NaN)
    counts for nothing (`n_rows` is the number of unflagged correlations)."""
    rng = np.random.default_rng(6)
    n = 6
    u, v = rng.uniform(-8e9, 8e9, n), rng.uniform(-8e9, 8e9, n)
    corr = rng.normal(size=(n, 4)) + 1j * rng.normal(size=(n, 4))
    corr[2, 1] = np.nan
    sigma = rng.uniform(0.1, 0.3, (n, 4))
    term = em.CorrelationChi2(em.DirectFT(GRID, u, v), corr, sigma)
    vis = jnp.asarray(rng.normal(size=(n, 4)) + 1j * rng.normal(size=(n, 4)))
    model = np.asarray(term.model_correlations(vis))
    live = np.isfinite(corr)
    d = np.where(live, model - np.where(live, corr, 0), 0)
    s = np.where(live, sigma, 1.0)
    ll = -0.5 * np.sum(np.abs(d) ** 2 / s**2) - 2 * np.sum(np.log(s))
    ll -= live.sum() * LOG2PI
    got = eqx.filter_jit(lambda t, x: t.log_likelihood_from_vis(x))(term, vis)
    np.testing.assert_allclose(float(got), ll, rtol=1e-12)


class _Undeclared(em.VisChi2):
    reals_per_row = None


def test_undeclared_term_refuses():
    u = np.array([1e9, 2e9])
    term = _Undeclared(em.DirectFT(GRID, u, u), np.ones(2) + 0j, np.ones(2))
    with pytest.raises(NotImplementedError, match="reals_per_row"):
        term.log_likelihood(jnp.ones(GRID.shape))
