"""Closure terms' full-covariance log-likelihood (`covariance="full"`), against
numpy written from the formulas: per timestamp `Σ = A diag(σ_b²) Aᵀ + diag(e)`,
`ln L = Σ_t (−½ r_tᵀ Σ_t⁻¹ r_t − ½ ln det 2πΣ_t)`."""

import math
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em


UAS = em.uas_to_rad(1.0)
GRID = em.ImageGrid(8, 8, 6 * UAS)
LOG2PI = math.log(2 * math.pi)


@pytest.fixture(scope="module")
def data():
    return em.load_uvfits(em.example_uvfits()).scan_average()


def _dft(u, v):
    ix, iy = np.arange(GRID.nx), np.arange(GRID.ny)
    x = (GRID.nx / 2 - 0.5 - ix) * GRID.psize
    y = (GRID.ny / 2 - 0.5 - iy) * GRID.psize
    xx, yy = np.meshgrid(x, y)
    ph = np.multiply.outer(u, xx.ravel()) + np.multiply.outer(v, yy.ravel())
    return np.exp(2j * np.pi * ph)  # (*points, npix)


def _image(seed=0):
    rng = np.random.default_rng(seed)
    img = rng.uniform(0.0, 0.02, GRID.shape)
    img[3:5, 3:5] += 0.1
    return img


def _sigma_np(p, kind):
    """Per time slot: the rows and `Σ`, built from the products' legs with a
    design matrix over the baselines (station pair, |u|, |v|)."""
    legs = np.asarray(p.legs)
    u, v = np.abs(np.asarray(p.u)), np.abs(np.asarray(p.v))
    ls = np.asarray(p.leg_sigma, np.float64)
    sig = np.asarray(p.sigma, np.float64)
    tix = np.asarray(p.time_index)
    out = []
    for t in np.unique(tix):
        rows = np.flatnonzero(tix == t)
        base = sorted(
            {
                (min(legs[r, j]), max(legs[r, j]), u[r, j], v[r, j])
                for r in rows
                for j in range(legs.shape[1])
            }
        )
        a = np.zeros((rows.size, len(base)))
        var_b = np.zeros(len(base))
        for i, r in enumerate(rows):
            for j in range(legs.shape[1]):
                key = (min(legs[r, j]), max(legs[r, j]), u[r, j], v[r, j])
                b = base.index(key)
                if kind == "cphase":
                    s = 1.0 if legs[r, j, 0] < legs[r, j, 1] else -1.0
                else:
                    s = 1.0 if j < 2 else -1.0
                a[i, b] = s
                var_b[b] = ls[r, j] ** 2
        cov = a @ np.diag(var_b) @ a.T
        cov += np.diag(sig[rows] ** 2 - np.diag(cov))
        out.append((rows, cov))
    return out


def _reference(p, kind, img):
    """`(ln L, ∂ ln L/∂x)` in numpy."""
    a = _dft(np.asarray(p.u), np.asarray(p.v))  # (n, k, npix)
    vis = a @ img.ravel()
    if kind == "cphase":
        delta = np.angle(np.exp(1j * (np.asarray(p.cphase) - np.angle(vis.prod(1)))))
        r = 2 * np.sin(delta / 2)
        # dr/dx = cos(Δ/2) · (−∂ψ̂/∂x)
        dr = -np.cos(delta / 2)[:, None] * np.sum(np.imag(a / vis[:, :, None]), 1)
    else:
        lv = np.log(np.abs(vis))
        r = lv[:, 0] + lv[:, 1] - lv[:, 2] - lv[:, 3] - np.asarray(p.logcamp)
        dl = np.real(a / vis[:, :, None])
        dr = dl[:, 0] + dl[:, 1] - dl[:, 2] - dl[:, 3]
    ll, grad = 0.0, np.zeros(img.size)
    for rows, cov in _sigma_np(p, kind):
        sol = np.linalg.solve(cov, r[rows])
        _, logdet = np.linalg.slogdet(2 * np.pi * cov)
        ll += -0.5 * r[rows] @ sol - 0.5 * logdet
        grad += -sol @ dr[rows]
    return ll, grad


def _products(data, kind, **kw):
    if kind == "cphase":
        return em.closure_phases(data, **kw), em.ClosurePhaseChi2
    return em.log_closure_amplitudes(data, **kw), em.LogClosureAmpChi2


KW = {"pulse": em.DeltaPulse()}


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, kw",
    [
        ("cphase", {}),
        ("cphase", {"systematic_cphase_noise": 2.0}),
        ("logcamp", {}),
    ],
)
def test_full_covariance_against_numpy(data, kind, kw):
    p, cls = _products(data, kind, **kw)
    term = cls.from_data(p, GRID, covariance="full", **KW)
    assert term.covariance == "full"
    # the timestamps really hold several correlated closures
    assert term.closure_covariance.whiten.shape[1] > 5
    img = _image()
    ll_np, g_np = _reference(p, kind, img)
    x = jnp.asarray(img)
    ll = eqx.filter_jit(lambda t, x: t.log_likelihood(x))(term, x)
    np.testing.assert_allclose(float(ll), ll_np, rtol=1e-12)
    g = np.asarray(jax.jit(jax.grad(term.log_likelihood))(x)).ravel()
    np.testing.assert_allclose(g, g_np, rtol=1e-12, atol=1e-12 * np.abs(g_np).max())
    # not the independent value
    indep = float(cls.from_data(p, GRID, **KW).log_likelihood(x))
    assert abs(indep - ll_np) > 1e-3 * abs(ll_np)
    # finite differences
    i = int(np.argmax(np.abs(g_np)))
    h = np.zeros(img.size)
    h[i] = 1e-7
    h = jnp.asarray(h.reshape(img.shape))
    fd = (term.log_likelihood(x + h) - term.log_likelihood(x - h)) / 2e-7
    np.testing.assert_allclose(float(fd), g_np[i], rtol=1e-5)
    # padding rows change nothing; an Objective (shared transform) agrees
    padded = term.pad_rows(term.rows + 3)
    np.testing.assert_allclose(float(padded.log_likelihood(x)), ll_np, rtol=1e-12)
    obj = em.Objective([term])
    np.testing.assert_allclose(float(obj.log_likelihood(x)), ll_np, rtol=1e-12)
    # vmap over images
    imgs = jnp.stack([x, jnp.asarray(_image(1))])
    batch = jax.vmap(term.log_likelihood)(imgs)
    np.testing.assert_allclose(float(batch[0]), ll_np, rtol=1e-12)
    np.testing.assert_allclose(
        float(batch[1]), _reference(p, kind, _image(1))[0], rtol=1e-12
    )


def _one_per_time(p):
    tix = np.asarray(p.time_index)
    _, first = np.unique(tix, return_index=True)
    return first


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cphase", "logcamp"])
def test_one_closure_per_timestamp_agrees(data, kind):
    p, cls = _products(data, kind)
    keep = _one_per_time(p)
    values = p.cphase if kind == "cphase" else p.logcamp
    k = 3 if kind == "cphase" else 4
    fwd = em.DirectFT(GRID, p.u[keep], p.v[keep], em.DeltaPulse())
    common = dict(
        stations=np.asarray(p.legs)[keep], time_index=np.asarray(p.time_index)[keep]
    )
    full = cls(
        fwd,
        values[keep],
        p.sigma[keep],
        covariance="full",
        leg_sigma=np.asarray(p.leg_sigma)[keep],
        **common,
    )
    indep = cls(fwd, values[keep], p.sigma[keep], **common)
    assert full.closure_covariance.whiten.shape == (keep.size, 1, 1)
    assert np.asarray(p.leg_sigma).shape == (values.size, k)
    x = jnp.asarray(_image())
    np.testing.assert_allclose(
        float(full.log_likelihood(x)), float(indep.log_likelihood(x)), rtol=1e-12
    )
    np.testing.assert_allclose(
        np.asarray(jax.grad(full.log_likelihood)(x)),
        np.asarray(jax.grad(indep.log_likelihood)(x)),
        rtol=1e-10,
        atol=1e-12,
    )


def test_products_leg_sigma_give_the_closure_sigma(data):
    for p in (em.closure_phases(data), em.log_closure_amplitudes(data)):
        np.testing.assert_allclose(
            np.asarray(p.sigma) ** 2,
            np.sum(np.asarray(p.leg_sigma) ** 2, 1),
            rtol=1e-12,
        )
    sys = em.closure_phases(data, systematic_cphase_noise=2.0)
    excess = np.asarray(sys.sigma) ** 2 - np.sum(np.asarray(sys.leg_sigma) ** 2, 1)
    np.testing.assert_allclose(excess, math.radians(2.0) ** 2, rtol=1e-9)


def test_full_covariance_errors(data):
    p = em.closure_phases(data)
    q = em.log_closure_amplitudes(data)
    with pytest.raises(ValueError, match="`covariance` must be one of"):
        em.ClosurePhaseChi2.from_data(p, GRID, covariance="diagonal")
    with pytest.raises(ValueError, match="`covariance` must be one of"):
        em.LogClosureAmpChi2.from_data(q, GRID, covariance="Full")
    fwd = em.DirectFT(GRID, p.u, p.v)
    with pytest.raises(ValueError, match="needs `leg_sigma`"):
        em.ClosurePhaseChi2(
            fwd,
            p.cphase,
            p.sigma,
            stations=p.legs,
            time_index=p.time_index,
            covariance="full",
        )
    with pytest.raises(ValueError, match="`time_index` and its legs' `stations`"):
        em.ClosurePhaseChi2(
            fwd, p.cphase, p.sigma, covariance="full", leg_sigma=p.leg_sigma
        )
    with pytest.raises(ValueError, match="below what its legs' `leg_sigma` give"):
        em.ClosurePhaseChi2(
            fwd,
            p.cphase,
            p.sigma,
            stations=p.legs,
            time_index=p.time_index,
            covariance="full",
            leg_sigma=2 * p.leg_sigma,
        )
    with pytest.raises(ValueError, match="two different `leg_sigma`"):
        ls = np.array(p.leg_sigma)
        ls[0, 0] *= 0.5
        em.ClosurePhaseChi2(
            fwd,
            p.cphase,
            p.sigma,
            stations=p.legs,
            time_index=p.time_index,
            covariance="full",
            leg_sigma=ls,
        )
    for f, cls in (
        (em.closure_phases, em.ClosurePhaseChi2),
        (em.log_closure_amplitudes, em.LogClosureAmpChi2),
    ):
        with pytest.raises(ValueError, match="linearly independent closures"):
            cls.from_data(f(data, closures="all"), GRID, covariance="full")
    term = em.LogClosureAmpChi2.from_data(q, GRID, covariance="full")
    with pytest.raises(ValueError, match="cannot be gathered"):
        term.take_rows([1, 0])
    mesh = jax.make_mesh((1,), ("rows",))
    with pytest.raises(ValueError, match="cannot be split over devices"):
        em.ShardedChi2(term, mesh)


@pytest.mark.slow
def test_full_covariance_cost(data):
    """The per-call cost of the full covariance against the independent
    likelihood on the shipped M87 file (printed; the whitening is precomputed)."""
    grid = em.ImageGrid(32, 32, 4 * UAS)
    x = jnp.full(grid.shape, 1.0 / 1024)
    print()
    for f, cls in (
        (em.closure_phases, em.ClosurePhaseChi2),
        (em.log_closure_amplitudes, em.LogClosureAmpChi2),
    ):
        p = f(data)
        times = {}
        for cov in ("independent", "full"):
            term = cls.from_data(p, grid, covariance=cov)
            fn = jax.jit(jax.value_and_grad(term.log_likelihood))
            jax.block_until_ready(fn(x))
            best = math.inf
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(20):
                    jax.block_until_ready(fn(x))
                best = min(best, (time.perf_counter() - t0) / 20)
            times[cov] = best
        ratio = times["full"] / times["independent"]
        print(
            f"{cls.__name__}: {p.sigma.size} closures, value+grad independent "
            f"{times['independent'] * 1e6:.0f} µs, full {times['full'] * 1e6:.0f} µs "
            f"(ratio {ratio:.2f})"
        )
        assert ratio < 5


@pytest.mark.slow  # ~17 s on 2 busy cores: two terms and a vmapped stack compile
def test_full_covariance_terms_of_two_data_sets_stack(data):
    """`pad_and_stack` pads the per-timestamp whitening too (empty groups and
    slots contribute 0): the stacked log-likelihoods are each term's."""
    few = data.take(np.arange(data.vis.shape[0]) < 60)
    a = em.ClosurePhaseChi2.from_data(em.closure_phases(data), GRID, covariance="full")
    b = em.ClosurePhaseChi2.from_data(em.closure_phases(few), GRID, covariance="full")
    assert a.closure_covariance.whiten.shape != b.closure_covariance.whiten.shape
    x = jnp.asarray(_image())
    stacked = em.pad_and_stack([a, b])
    got = eqx.filter_vmap(lambda t: t.log_likelihood(x))(stacked)
    np.testing.assert_allclose(
        np.asarray(got),
        [float(a.log_likelihood(x)), float(b.log_likelihood(x))],
        rtol=1e-12,
    )


@pytest.mark.parametrize("kind", ["cphase", "logcamp"])
def test_whitening_against_numpy(data, kind):
    """The precomputed whitening gives `−½ rᵀΣ⁻¹r − ½ ln det 2πΣ` per timestamp
    for any residual vector (core lane: no forward model, no compilation)."""
    p, cls = (
        _products(data, kind, systematic_cphase_noise=1.0)
        if kind == "cphase"
        else _products(data, kind)
    )
    term = cls.from_data(p, GRID, covariance="full")
    r = np.random.default_rng(0).normal(size=p.sigma.size) * np.asarray(p.sigma)
    want = 0.0
    for rows, cov in _sigma_np(p, kind):
        _, logdet = np.linalg.slogdet(2 * np.pi * cov)
        want += -0.5 * r[rows] @ np.linalg.solve(cov, r[rows]) - 0.5 * logdet
    got = float(term.closure_covariance.log_likelihood(jnp.asarray(r)))
    np.testing.assert_allclose(got, want, rtol=1e-12)
