"""Posterior summaries: `to_arviz` (names, dims, statistics; ArviZ's split R̂ and
ESS against `Samples`'), `image_summary` against numpy, `closure_ppc` against a
plain-numpy replication written from the formulas (and its p-values calibrated /
failing as they should), and the posterior plots (Agg)."""

import itertools
import sys

import matplotlib


matplotlib.use("Agg")

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import eqmodels as em  # noqa: E402

from .reference.numpy_ft import dft_matrix  # noqa: E402
from .test_posterior import NX, NY, Problem  # noqa: E402
from .unchecked import unchecked_error  # noqa: E402


NOT_SAMPLES = {
    name: unchecked_error(f"em.{name}(np.zeros((2, 3)))", "TypeError")
    for name in ("to_arviz", "image_summary", "plot_trace", "plot_corner")
}
NOT_A_SUMMARY = unchecked_error("em.plot_image_summary(np.zeros((4, 4)))", "TypeError")
NOT_A_PPC = unchecked_error("em.plot_ppc(np.zeros(4))", "TypeError")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def ar1(rng, shape, rho):
    """AR(1) draws `(chains, draws, ...)` with unit innovations."""
    e = rng.normal(size=shape)
    x = np.empty(shape)
    x[:, 0] = e[:, 0]
    for t in range(1, shape[1]):
        x[:, t] = rho * x[:, t - 1] + e[:, t]
    return x


def make_samples(posterior, positions, seed=0):
    """A `Samples` from given unconstrained positions `(chains, draws, n)` (no
    sampler run: the draws, with made-up log densities and statistics)."""
    z = jnp.asarray(positions)
    c, s = z.shape[:2]
    draws = eqx.filter_jit(
        eqx.filter_vmap(eqx.filter_vmap(posterior.from_unconstrained))
    )(z)
    rng = np.random.default_rng(seed)
    lp = jnp.asarray(rng.normal(size=(c, s)))  # not the density: only carried
    stats = {
        "acceptance_rate": jnp.asarray(rng.uniform(0.5, 1.0, (c, s))),
        "is_divergent": jnp.asarray(rng.uniform(size=(c, s)) < 0.1),
        "num_integration_steps": jnp.asarray(rng.integers(1, 30, (c, s))),
        "step_size": jnp.asarray(rng.uniform(0.1, 0.5, c)),
        "inverse_mass_matrix": jnp.ones((c, z.shape[-1])),
    }
    return em.Samples(draws, z, lp, stats)


def pixel_samples(c=2, s=40, rho=0.5, seed=0):
    problem = Problem()
    z0 = np.asarray(problem.posterior.to_unconstrained())
    rng = np.random.default_rng(seed)
    pos = z0 + 0.02 * ar1(rng, (c, s, z0.size), rho)
    return problem, make_samples(problem.posterior, pos, seed)


GRID = em.ImageGrid.from_fov((8, 8), 80.0)
UAS = em.uas_to_rad


def geometric_posterior(ring=True):
    """An m-ring + Gaussian (`ring=False`: two Gaussians, cheaper to compile),
    the first part's radius (fwhm) positive (sampled in log), over a wide
    visibility term (the likelihood is not what is tested)."""
    if ring:
        first = em.MRing(GRID, 0.6, UAS(21.0), [0.2 - 0.1j])
        where = lambda m: m.parts[0].radius  # noqa: E731
    else:
        first = em.EllipticalGaussian(GRID, 0.6, UAS(20.0), fwhm_minor=UAS(15.0))
        where = lambda m: m.parts[0].fwhm_major  # noqa: E731
    model = first + em.EllipticalGaussian(GRID, 0.1, UAS(30.0))
    u = np.array([1e9, 2e9, -3e9])
    v = np.array([2e9, -1e9, 1e9])
    term = em.VisChi2(em.DirectFT(GRID, u, v), np.full(3, 0.1 + 0j), np.ones(3))

    def log_normal(x):
        return -jnp.sum(jnp.log(x) ** 2)

    radius = em.ParameterPrior(where, log_normal, support="positive")
    return em.Posterior(term, [radius], model)


# --- to_arviz --------------------------------------------------------------------


def test_to_arviz_names_shapes_and_statistics():
    pytest.importorskip("arviz_base")
    post = geometric_posterior()
    z0 = np.asarray(post.to_unconstrained())
    rng = np.random.default_rng(1)
    pos = z0 + 0.01 * rng.normal(size=(3, 10, z0.size))
    samples = make_samples(post, pos)
    tree = em.to_arviz(samples)
    p, st = tree["posterior"], tree["sample_stats"]
    names = set(p.data_vars)
    assert names == {
        "parts.0.flux",
        "radius",
        "beta_re",
        "beta_im",
        "parts.1.flux",
        "fwhm_major",
        "fwhm_minor",
        "angle",
    }
    assert p["radius"].dims == ("chain", "draw")
    assert p["beta_re"].dims == ("chain", "draw", "beta_re_dim_0")
    assert p["beta_re"].shape == (3, 10, 1)
    # The model's own coordinates: the radius as θ, not the sampled ln θ.
    np.testing.assert_array_equal(
        p["radius"].values, np.asarray(samples.draws.parts[0].radius)
    )
    np.testing.assert_array_equal(
        p["fwhm_major"].values, np.asarray(samples.draws.parts[1].fwhm_major)
    )
    np.testing.assert_array_equal(st["lp"].values, np.asarray(samples.log_density))
    np.testing.assert_array_equal(
        st["diverging"].values, np.asarray(samples.stats["is_divergent"])
    )
    np.testing.assert_array_equal(
        st["acceptance_rate"].values, np.asarray(samples.stats["acceptance_rate"])
    )
    np.testing.assert_array_equal(
        st["n_steps"].values, np.asarray(samples.stats["num_integration_steps"])
    )
    step = np.asarray(samples.stats["step_size"])
    np.testing.assert_array_equal(
        st["step_size"].values, np.repeat(step[:, None], 10, 1)
    )
    tree = em.to_arviz(samples, dims={"beta_re": ["m"]}, coords={"m": [1]})
    assert tree["posterior"]["beta_re"].dims == ("chain", "draw", "m")


def test_arviz_split_rhat_and_ess_against_ours():
    """On the identity-transform pixel problem the exported `params` are the
    sampled coordinates: ArviZ's non-rank-normalised split R̂ equals
    `Samples.rhat()` to rounding, and its `method="mean"` ESS (Stan's estimator)
    equals `Samples.ess()` to rounding, on short chains (50 draws) where Stan's
    last autocorrelation term matters."""
    arviz_stats = pytest.importorskip("arviz_stats")
    pytest.importorskip("xarray_einstats")
    _, samples = pixel_samples(c=4, s=50, rho=0.6)
    tree = em.to_arviz(samples)
    rhat = np.asarray(arviz_stats.rhat(tree, method="split")["params"])
    np.testing.assert_allclose(rhat, samples.rhat(), rtol=1e-12)
    ess = np.asarray(arviz_stats.ess(tree, method="mean")["params"])
    np.testing.assert_allclose(samples.ess(), ess, rtol=1e-10)
    # The rank-normalised default is a different estimator (not equal).
    bulk = np.asarray(arviz_stats.rhat(tree)["params"])
    assert not np.allclose(bulk, rhat, rtol=1e-12)


def test_wrong_types_are_named(unchecked):
    for name, case in NOT_SAMPLES.items():
        assert "`samples` must be eqmodels.Samples" in unchecked[case], name
    assert "`summary` must be eqmodels.ImageSummary" in unchecked[NOT_A_SUMMARY]
    assert "`ppc` must be eqmodels.ClosurePPC" in unchecked[NOT_A_PPC]


def test_to_arviz_without_arviz_says_how_to_get_it(monkeypatch):
    _, samples = pixel_samples(s=8)
    monkeypatch.setitem(sys.modules, "arviz_base", None)
    with pytest.raises(ImportError, match=r"eqmodels\[posterior\]"):
        em.to_arviz(samples)


# --- image_summary -----------------------------------------------------------------


def test_image_summary_of_a_pixel_model_against_numpy():
    _, samples = pixel_samples(c=3, s=30)
    qs = (0.05, 0.5, 0.95)
    summ = em.image_summary(samples, quantiles=qs, batch_size=7)
    # Reference: the identity-transform image is the parameter vector, raster order.
    imgs = np.asarray(samples.draws.params).reshape(-1, NY, NX)
    np.testing.assert_allclose(summ.mean, imgs.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(summ.std, imgs.std(axis=0, ddof=1), rtol=1e-12)
    np.testing.assert_allclose(
        summ.quantile_images, np.quantile(imgs, qs, axis=0), rtol=1e-12
    )
    np.testing.assert_array_equal(summ.quantile(0.95), summ.quantile_images[2])
    assert summ.num_draws == 90 and summ.quantiles == qs
    assert summ.grid == samples.draws.grid
    with pytest.raises(ValueError, match="not one of the summary's quantiles"):
        summ.quantile(0.9)


def test_image_summary_of_a_geometric_model_thinned():
    post = geometric_posterior(ring=False)
    z0 = np.asarray(post.to_unconstrained())
    rng = np.random.default_rng(2)
    pos = z0 + 0.05 * rng.normal(size=(2, 10, z0.size))
    samples = make_samples(post, pos)
    summ = em.image_summary(samples, num_draws=5, quantiles=(0.1, 0.9))
    # Reference: 5 draws evenly spaced over the 20 (chain-major), each rendered.
    index = np.round(np.linspace(0, 19, 5)).astype(int)
    imgs = []
    for i in index:
        c, s = divmod(int(i), 10)
        model = jax.tree.map(lambda x: x[c, s] if eqx.is_array(x) else x, samples.draws)
        imgs.append(np.asarray(model()))
    imgs = np.stack(imgs)
    np.testing.assert_allclose(summ.mean, imgs.mean(axis=0), rtol=1e-12, atol=0)
    np.testing.assert_allclose(
        summ.std, imgs.std(axis=0, ddof=1), rtol=1e-10, atol=1e-20
    )
    np.testing.assert_allclose(
        summ.quantile_images, np.quantile(imgs, (0.1, 0.9), axis=0), rtol=1e-12
    )
    assert summ.num_draws == 5 and summ.mean.shape == GRID.shape


def test_image_summary_errors():
    _, samples = pixel_samples(s=8)
    with pytest.raises(ValueError, match="`quantiles` must be"):
        em.image_summary(samples, quantiles=(0.5, 1.5))
    with pytest.raises(ValueError, match="`num_draws` must be"):
        em.image_summary(samples, num_draws=1000)
    with pytest.raises(ValueError, match="`batch_size` must be"):
        em.image_summary(samples, batch_size=0)


# --- closure_ppc -----------------------------------------------------------------

STATIONS = ("AA", "AP", "LM", "SM")


def closure_data(image, n_times=6, seed=0, sigma=0.02):
    """Every baseline of 4 stations at `n_times` timestamps (random uv), the
    visibilities of `image` (on the Problem's grid) plus noise."""
    rng = np.random.default_rng(seed)
    grid = Problem().grid
    pairs = list(itertools.combinations(range(4), 2))
    ant1 = np.array([a for _ in range(n_times) for a, _ in pairs])
    ant2 = np.array([b for _ in range(n_times) for _, b in pairs])
    time = np.repeat(np.arange(n_times, dtype=float), len(pairs))
    n = time.size
    u = rng.uniform(-0.4, 0.4, n) / grid.psize
    v = rng.uniform(-0.4, 0.4, n) / grid.psize
    a = dft_matrix(NY, NX, grid.psize, u, v)
    sig = np.full(n, sigma) * rng.uniform(0.8, 1.2, n)
    vis = a @ np.ravel(image) + sig * (rng.normal(size=n) + 1j * rng.normal(size=n))
    data = em.VisData(
        u, v, vis, sig, time, ant1, ant2, station_names=STATIONS, freq=230e9
    )
    return data, a


def reference_closures(vis, time, ant1, ant2, kind):
    """Closure quantities by hand: per timestamp, eht-imaging's minimal sets on 4
    stations (triangles (0,1,2), (0,1,3), (0,2,3); quadrangles (0,3,1,2),
    (0,3,2,1)), legs looked up as stored or conjugated."""
    out = []
    for t in np.unique(time):
        rows = {}
        for r in np.flatnonzero(time == t):
            rows[(ant1[r], ant2[r])] = (r, False)
            rows[(ant2[r], ant1[r])] = (r, True)

        def leg(i, j):
            r, conj = rows[(i, j)]
            return np.conj(vis[..., r]) if conj else vis[..., r]

        if kind == "cphase":
            for i, j, k in ((0, 1, 2), (0, 1, 3), (0, 2, 3)):
                out.append(np.angle(leg(i, j) * leg(j, k) * leg(k, i)))
        else:
            for a, b, c, d in ((0, 3, 1, 2), (0, 3, 2, 1)):
                out.append(
                    np.log(np.abs(leg(a, b)))
                    + np.log(np.abs(leg(c, d)))
                    - np.log(np.abs(leg(a, d)))
                    - np.log(np.abs(leg(b, c)))
                )
    return np.stack(out, axis=-1)


def reference_sigmas(vis, sigma, time, ant1, ant2, kind):
    """sqrt(Σ σ_i²/|V_i|²) over each closure's legs, the same enumeration."""
    ratio = (sigma / np.abs(vis)) ** 2
    out = []
    sets = (
        [(0, 1, 2), (0, 1, 3), (0, 2, 3)]
        if kind == "cphase"
        else [(0, 3, 1, 2), (0, 3, 2, 1)]
    )
    for t in np.unique(time):
        where = {}
        for r in np.flatnonzero(time == t):
            where[frozenset((ant1[r], ant2[r]))] = r
        for poly in sets:
            if kind == "cphase":
                legs = [poly[0:2], poly[1:3], (poly[2], poly[0])]
            else:
                a, b, c, d = poly
                legs = [(a, b), (c, d), (a, d), (b, c)]
            out.append(np.sqrt(sum(ratio[where[frozenset(lg)]] for lg in legs)))
    return np.array(out)


@pytest.mark.parametrize("kind", ["cphase", "logcamp"])
def test_closure_ppc_against_numpy(kind):
    problem, samples = pixel_samples(c=2, s=6)
    data, a = closure_data(np.asarray(problem.model()))
    ppc = em.closure_ppc(samples, data, kind, seed=7, batch_size=5)
    # numpy: model visibilities per draw, the documented noise, closures by hand.
    imgs = np.asarray(samples.draws.params).reshape(12, -1)
    vmod = imgs @ a.T  # (k, n)
    eps = np.random.default_rng(7).standard_normal((12, data.n_rows, 2))
    sig = np.asarray(data.sigma)
    vrep = vmod + sig * (eps[..., 0] + 1j * eps[..., 1])
    t, a1, a2 = (np.asarray(x) for x in (data.time, data.ant1, data.ant2))
    vobs = np.asarray(data.vis)
    obs = reference_closures(vobs, t, a1, a2, kind)
    mod = reference_closures(vmod, t, a1, a2, kind)
    rep = reference_closures(vrep, t, a1, a2, kind)
    sigma = reference_sigmas(vobs, sig, t, a1, a2, kind)
    np.testing.assert_allclose(ppc.observed, obs, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ppc.model, mod, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ppc.replicated, rep, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ppc.sigma, sigma, rtol=1e-12)
    if kind == "cphase":
        d_obs = 2 * (1 - np.cos(obs - mod)) / sigma**2
        d_rep = 2 * (1 - np.cos(rep - mod)) / sigma**2
    else:
        d_obs = ((obs - mod) / sigma) ** 2
        d_rep = ((rep - mod) / sigma) ** 2
    np.testing.assert_allclose(ppc.chi2_observed, d_obs.mean(axis=1), rtol=1e-8)
    np.testing.assert_allclose(ppc.chi2_replicated, d_rep.mean(axis=1), rtol=1e-8)
    np.testing.assert_array_equal(ppc.p_values, np.mean(d_rep >= d_obs, axis=0))
    assert ppc.p_value == np.mean(d_rep.mean(axis=1) >= d_obs.mean(axis=1))
    m = 6 * (3 if kind == "cphase" else 2)
    assert ppc.observed.shape == ppc.sigma.shape == ppc.p_values.shape == (m,)
    assert ppc.replicated.shape == (12, m) and ppc.stations.shape[0] == m
    assert ppc.station_names == STATIONS


def point_mass(problem, image, s=100):
    """Samples whose every draw is `image` (a posterior known exactly)."""
    z = np.broadcast_to(np.ravel(image), (2, s, NY * NX))
    return make_samples(problem.posterior, z)


@pytest.mark.parametrize("kind", ["cphase", "logcamp"])
def test_closure_ppc_p_values_calibrated_and_failing(kind):
    """Draws at the true image: the per-closure p-values spread over [0, 1]
    (mean ~0.5); draws at a wrong image (a bright pixel added): p ≈ 0."""
    problem = Problem()
    truth = np.asarray(problem.model())
    data, _ = closure_data(truth, n_times=20, seed=3, sigma=0.005)
    right = em.closure_ppc(point_mass(problem, truth), data, kind, seed=0)
    assert 0.3 < np.mean(right.p_values) < 0.7, right.p_values
    assert 0.02 < right.p_value < 0.98
    wrong = em.closure_ppc(
        point_mass(problem, truth + 0.5 * (np.arange(NY * NX) == 1).reshape(NY, NX)),
        data,
        kind,
        seed=0,
    )
    assert wrong.p_value == 0.0
    assert np.median(wrong.p_values) < 0.05


@pytest.mark.slow
def test_closure_ppc_of_a_geometric_model():
    post = geometric_posterior(ring=False)
    z0 = np.asarray(post.to_unconstrained())
    samples = make_samples(post, np.broadcast_to(z0, (2, 4, z0.size)))
    model = post.model
    data, _ = closure_data(np.zeros((NY, NX)), n_times=3)
    vis = np.asarray(model.visibility(data.u, data.v))
    data = eqx.tree_at(lambda d: d.vis, data, jnp.asarray(vis))
    ppc = em.closure_ppc(samples, data, seed=1)
    # The model's closure phases are the analytic visibilities' (every draw equal).
    t, a1, a2 = (np.asarray(x) for x in (data.time, data.ant1, data.ant2))
    ref = reference_closures(vis, t, a1, a2, "cphase")
    np.testing.assert_allclose(
        ppc.model, np.broadcast_to(ref, ppc.model.shape), atol=1e-10
    )
    np.testing.assert_allclose(ppc.observed, ref, atol=1e-12)


def test_closure_ppc_errors():
    _, samples = pixel_samples(s=4)
    data, _ = closure_data(np.zeros((NY, NX)), n_times=2)
    with pytest.raises(ValueError, match="`kind` must be one of"):
        em.closure_ppc(samples, data, "amp")
    with pytest.raises(ValueError, match="`closures` must be one of"):
        em.closure_ppc(samples, data, closures="some")
    with pytest.raises(TypeError, match="data"):
        em.closure_ppc(samples, data.vis)
    with pytest.raises(ValueError, match="`uv_min`"):
        em.closure_ppc(samples, data, uv_min=-1.0)
    with pytest.raises(ValueError, match="below one wavelength"):
        em.closure_ppc(samples, data, uv_min=0.5)
    with pytest.raises(ValueError, match="`num_draws` must be"):
        em.closure_ppc(samples, data, num_draws=1)
    with pytest.raises(ValueError, match="no closed triangles"):
        em.closure_ppc(samples, data, uv_min=1e12)
    with pytest.raises(TypeError, match="seed"):
        em.closure_ppc(samples, data, seed="seven")


# --- plots -------------------------------------------------------------------------


def test_plot_trace_and_corner(tmp_path):
    _, samples = pixel_samples(c=3, s=20)
    fig = em.plot_trace(samples, ["params[0]", "lp"])
    fig.savefig(tmp_path / "trace.png")
    assert (tmp_path / "trace.png").read_bytes()[:4] == b"\x89PNG"
    axes = fig.axes
    assert len(axes) == 4 and axes[0].get_ylabel() == "params[0]"
    assert axes[2].get_ylabel() == "lp"
    assert len(axes[0].lines) == 3  # one per chain
    np.testing.assert_array_equal(
        axes[0].lines[1].get_ydata(), np.asarray(samples.draws.params)[1, :, 0]
    )
    np.testing.assert_array_equal(
        axes[2].lines[0].get_ydata(), np.asarray(samples.log_density)[0]
    )
    fig = em.plot_corner(
        samples, ["params[1]", "params[2]"], truths={"params[1]": 0.1}, bins=8
    )
    fig.savefig(tmp_path / "corner.png")
    axes = np.array(fig.axes).reshape(2, 2)
    assert not axes[0, 1].get_visible()
    assert axes[1, 0].get_xlabel() == "params[1]"
    assert axes[1, 0].get_ylabel() == "params[2]"
    # The diagonal histogram counts every pooled draw.
    heights = axes[0, 0].patches[0].get_path().vertices[:, 1]
    assert heights.max() > 0
    n, _ = np.histogram(np.asarray(samples.draws.params)[..., 1].ravel(), bins=8)
    assert int(heights.max()) == n.max()
    assert any(np.allclose(ln.get_xdata(), 0.1) for ln in axes[0, 0].lines)
    with pytest.raises(ValueError, match="more than 12"):
        em.plot_trace(samples)  # 16 pixels
    with pytest.raises(ValueError, match="not a variable of the draws"):
        em.plot_corner(samples, ["radius"])
    with pytest.raises(ValueError, match="`truths` names"):
        em.plot_corner(samples, ["params[1]"], truths={"x": 1.0})
    # A variable name selects all its elements.
    post = geometric_posterior()
    z0 = np.asarray(post.to_unconstrained())
    geo = make_samples(
        post, z0 + 0.01 * np.random.default_rng(0).normal(size=(2, 10, z0.size))
    )
    fig = em.plot_corner(geo, ["radius", "beta_re", "parts.1.flux"])
    assert len(fig.axes) == 9
    assert fig.axes[6].get_xlabel() == "radius"
    assert fig.axes[7].get_xlabel() == "beta_re[0]"


def test_plot_image_summary_and_ppc(tmp_path):
    problem, samples = pixel_samples(c=2, s=10)
    summ = em.image_summary(samples)
    fig = em.plot_image_summary(summ, units="Jy/pixel")
    fig.savefig(tmp_path / "summary.png")
    mean_ax, std_ax = fig.axes[:2]
    np.testing.assert_allclose(mean_ax.images[0].get_array(), summ.mean)
    np.testing.assert_allclose(std_ax.images[0].get_array(), summ.std)
    assert "mean" in mean_ax.get_title() and "standard" in std_ax.get_title()
    data, _ = closure_data(np.asarray(problem.model()))
    ppc = em.closure_ppc(samples, data, seed=0)
    fig = em.plot_ppc(ppc)
    fig.savefig(tmp_path / "ppc.png")
    assert (tmp_path / "ppc.png").read_bytes()[:4] == b"\x89PNG"
    ax0, ax1, ax2 = fig.axes
    np.testing.assert_allclose(ax0.lines[0].get_ydata(), np.degrees(ppc.observed))
    np.testing.assert_array_equal(ax1.lines[0].get_ydata(), ppc.p_values)
    np.testing.assert_array_equal(ax2.lines[0].get_xdata(), ppc.chi2_observed)
    assert f"{ppc.p_value:.3g}" in ax2.get_title()
    with pytest.raises(ValueError, match="`interval`"):
        em.plot_ppc(ppc, interval=1.0)


@pytest.mark.slow
def test_summaries_of_a_nuts_run():
    """End to end on a short NUTS run: exported, summarised, checked, plotted."""
    arviz_stats = pytest.importorskip("arviz_stats")
    pytest.importorskip("blackjax")
    problem = Problem()
    samples = em.sample(
        problem.posterior,
        key=jax.random.key(0),
        num_warmup=100,
        num_samples=100,
        num_chains=2,
    )
    tree = em.to_arviz(samples)
    np.testing.assert_allclose(
        np.asarray(arviz_stats.rhat(tree, method="split")["params"]),
        samples.rhat(),
        rtol=1e-12,
    )
    summ = em.image_summary(samples)
    flat = np.asarray(samples.draws.params).reshape(-1, NY, NX)
    np.testing.assert_allclose(summ.mean, flat.mean(axis=0), rtol=1e-12)
    data, _ = closure_data(np.asarray(problem.model()))
    ppc = em.closure_ppc(samples, data, "logcamp", seed=1)
    assert ppc.replicated.shape[0] == 200
    em.plot_trace(samples, ["params[5]"])
    em.plot_ppc(ppc)


@pytest.mark.parametrize("phi", [0.0, 0.7, -0.5])
def test_ess_of_ar1_chains_is_the_known_autocorrelation_time(phi):
    """Draws of an AR(1) process `x_t = φ x_{t-1} + ε_t` have the integrated
    autocorrelation time `τ = (1 + φ) / (1 − φ)`: the ESS of 4 chains × 4000
    draws is `M n / τ` within its Monte-Carlo error (an antithetic chain,
    `φ < 0`, has more effective draws than draws), and split R̂ is near 1."""
    from eqmodels._posterior._diagnostics import ess, split_rhat

    rng = np.random.default_rng(7)
    chains, draws = 4, 4000
    eps = rng.standard_normal((chains, draws))
    x = np.empty_like(eps)
    x[:, 0] = eps[:, 0] / np.sqrt(1 - phi**2)
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + eps[:, t]
    expected = chains * draws * (1 - phi) / (1 + phi)
    assert abs(float(ess(x)) / expected - 1) < 0.12
    assert abs(float(split_rhat(x)) - 1) < 0.01
