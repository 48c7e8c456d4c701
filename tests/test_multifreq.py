"""Several frequencies in one image: `MultiFrequencyImage` (value and gradient
against numpy written from the formulas, finite differences, jit, vmap),
the spectral regularizers, `AtFrequency` in an objective (one transform per band,
the sum of the per-band objectives), `MultiBandData`, construction errors."""

import glob

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose, check_grad_fd
from tests.reference import multifreq as ref
from tests.unchecked import unchecked_error


GRID = em.ImageGrid(8, 8, em.uas_to_rad(6.0))
NU0 = 228e9
FREQS = (213.1e9, 229.1e9)


class StokesArray(em.AbstractPolImageModel):
    """A user's polarimetric model: the four planes as one leaf."""

    grid: em.ImageGrid
    stokes: jax.Array

    def __call__(self):
        return self.stokes


def _maps(seed=0):
    rng = np.random.default_rng(seed)
    i0 = rng.uniform(0.1, 1.0, GRID.shape)
    return i0, rng.normal(0, 1.0, GRID.shape), rng.normal(0, 0.5, GRID.shape)


def _model(i0, alpha, beta, **kw):
    base = em.PixelImage(GRID, i0, transform="identity")
    return em.MultiFrequencyImage(base, NU0, alpha, beta, **kw)


def _stokes(seed=1):
    rng = np.random.default_rng(seed)
    i = rng.uniform(0.2, 1.0, GRID.shape)
    m = rng.uniform(0.05, 0.6, GRID.shape)
    chi = rng.uniform(-np.pi, np.pi, GRID.shape)
    psi = rng.uniform(-0.3, 0.3, GRID.shape)
    return np.stack(
        [
            i,
            i * m * np.cos(psi) * np.cos(2 * chi),
            i * m * np.cos(psi) * np.sin(2 * chi),
            i * m * np.sin(psi),
        ]
    )


# ------------------------------------------------------------------ the model
@pytest.mark.parametrize("freq", [213.1e9, 229.1e9, 345e9])
def test_image_at_frequency_matches_numpy(freq):
    i0, a, b = _maps()
    model = _model(i0, a, b)
    assert_allclose(model.at(freq), ref.image_at(i0, a, b, freq, NU0), rtol=1e-12)
    # At the reference frequency: the base image, and `model()` is it.
    np.testing.assert_array_equal(model.at(NU0), i0)
    np.testing.assert_array_equal(model(), i0)


def test_gradient_wrt_i0_alpha_beta_matches_numpy():
    i0, a, b = _maps()
    w = np.random.default_rng(5).normal(size=GRID.shape)
    freq = 213.1e9

    def loss(m):
        return jnp.sum(jnp.asarray(w) * m.at(freq))

    g = eqx.filter_jit(eqx.filter_grad(loss))(_model(i0, a, b))
    gi, ga, gb = ref.image_at_grad(i0, a, b, freq, NU0, w)
    assert_allclose(g.base.params.reshape(GRID.shape), gi, rtol=1e-12)
    assert_allclose(g.alpha, ga, rtol=1e-12)
    assert_allclose(g.beta, gb, rtol=1e-12)

    # Finite differences along random directions of each map.
    for name in ("alpha", "beta"):

        def f(x, name=name):
            m = eqx.tree_at(lambda m: getattr(m, name), _model(i0, a, b), x)
            return loss(m)

        check_grad_fd(f, a if name == "alpha" else b, rtol=1e-7)


def test_fixed_map_has_zero_gradient_and_beta_none_is_order_one():
    i0, a, b = _maps()
    model = _model(i0, a, b, fixed=("beta",))
    g = eqx.filter_grad(lambda m: jnp.sum(m.at(213e9) ** 2))(model)
    assert np.all(np.asarray(g.beta) == 0.0) and np.any(np.asarray(g.alpha) != 0)
    no_beta = _model(i0, a, None)
    assert no_beta.beta is None
    assert_allclose(no_beta.at(213e9), ref.image_at(i0, a, 0.0, 213e9, NU0), rtol=1e-12)


def test_parametric_base_with_one_spectral_index():
    ring = em.RingImage(GRID, 0.6, 5 * GRID.psize, 2 * GRID.psize)
    model = em.MultiFrequencyImage(ring, NU0, alpha=-0.7)
    assert model.alpha.shape == ()
    run = eqx.filter_jit(
        lambda m: (
            m.base(),
            m.at(213e9),
            eqx.filter_grad(lambda m: m.at(213e9).sum())(m),
        )
    )
    i0, at, g = run(model)
    i0 = np.asarray(i0)
    assert_allclose(at, i0 * (213e9 / NU0) ** -0.7, rtol=1e-12)
    # d/dα Σ I₀ r^α = ln r · Σ I_ν
    want = np.log(213e9 / NU0) * np.sum(i0 * (213e9 / NU0) ** -0.7)
    assert_allclose(g.alpha, want, rtol=1e-12)


def test_jit_and_vmap():
    i0, a, b = _maps()
    model = _model(i0, a, b)
    at = eqx.filter_jit(lambda m: m.at(213e9))
    assert_allclose(at(model), ref.image_at(i0, a, b, 213e9, NU0), rtol=1e-12)
    alphas = jnp.stack([jnp.asarray(a), 2 * jnp.asarray(a), -jnp.asarray(a)])
    batch = jax.vmap(lambda x: eqx.tree_at(lambda m: m.alpha, model, x).at(213e9))(
        alphas
    )
    for k, s in enumerate((1, 2, -1)):
        assert_allclose(batch[k], ref.image_at(i0, s * a, b, 213e9, NU0), rtol=1e-12)


# -------------------------------------------------------------- polarization
@pytest.mark.parametrize("freq", [213.1e9, 345e9])
def test_polarimetric_image_at_frequency_matches_numpy(freq):
    s0 = _stokes()
    _, a, b = _maps()
    rng = np.random.default_rng(3)
    ap, bp = rng.normal(0, 1, GRID.shape), rng.normal(0, 0.3, GRID.shape)
    rm = rng.normal(0, 5e5, GRID.shape)  # rad/m², M87-like
    model = em.MultiFrequencyImage(
        StokesArray(GRID, jnp.asarray(s0)), NU0, a, b, alpha_pol=ap, beta_pol=bp, rm=rm
    )
    assert model.polarimetric and model.image_shape == (4, 8, 8)
    want = ref.stokes_at(s0, a, b, ap, bp, rm, freq, NU0)
    assert_allclose(model.at(freq), want, rtol=1e-12)
    # Fractional polarization stays below 1 however steep the index.
    steep = eqx.tree_at(lambda m: m.alpha_pol, model, jnp.full(GRID.shape, 50.0))
    out = np.asarray(steep.at(345e9))
    assert np.all(np.sqrt(np.sum(out[1:] ** 2, axis=0)) < out[0])


def test_polarimetric_gradient_fd_and_zero_polarization_is_finite():
    s0 = _stokes()
    _, a, b = _maps()
    ap = np.full(GRID.shape, 0.4)

    def f(x):
        m = em.MultiFrequencyImage(
            StokesArray(GRID, jnp.asarray(x)), NU0, a, b, alpha_pol=ap, rm=2e5
        )
        w = jnp.arange(4 * 64.0).reshape(4, 8, 8) / 256
        return jnp.sum(w * m.at(213.1e9))

    grad_f = jax.jit(jax.grad(f))  # one program for both points
    check_grad_fd(f, s0, rtol=1e-7, grad=grad_f(jnp.asarray(s0)))
    # An unpolarized pixel (and an empty one): finite value and gradient.
    s1 = s0.copy()
    s1[1:, 0, 0] = 0.0
    s1[:, 1, 1] = 0.0
    g = grad_f(jnp.asarray(s1))
    assert np.all(np.isfinite(np.asarray(g))) and np.isfinite(float(jax.jit(f)(s1)))
    # Without polarization spectra: fraction and EVPA the same at every frequency.
    m = em.MultiFrequencyImage(StokesArray(GRID, jnp.asarray(s0)), NU0, a)
    out = np.asarray(m.at(213.1e9))
    assert_allclose(out[1:] / out[0], s0[1:] / s0[0], rtol=1e-12)


# ------------------------------------------------------ spectral regularizers
@pytest.mark.parametrize("normalise", [False, True])
@pytest.mark.parametrize("which", ["alpha", "beta"])
def test_spectral_l2_value_gradient_residuals(which, normalise):
    i0, a, b = _maps()
    prior = np.random.default_rng(9).normal(size=GRID.shape)
    reg = em.SpectralL2(GRID, which, prior=prior, normalise=normalise)
    assert reg.report_name == f"l2_{which}"
    model = _model(i0, a, b)
    x = a if which == "alpha" else b
    val, g = eqx.filter_jit(eqx.filter_value_and_grad(lambda m: reg(m)))(model)
    assert_allclose(val, ref.l2_spec(x, prior, normalise), rtol=1e-12)
    assert_allclose(
        getattr(g, which), ref.l2_spec_grad(x, prior, normalise), rtol=1e-12
    )
    assert_allclose(jnp.sum(reg.residuals(model) ** 2), val, rtol=1e-12)


@pytest.mark.parametrize(
    "kw", [{}, {"normalise": True}, {"normalise": True, "beam": 3.0}, {"eps": 0.0}]
)
def test_spectral_tv_value_gradient(kw):
    i0, a, b = _maps()
    kw = dict(kw)
    if "beam" in kw:
        kw["beam"] = kw["beam"] * GRID.psize
    reg = em.SpectralTV(GRID, "alpha", **kw)
    assert reg.report_name == "tv_alpha"
    eps = kw.get("eps", 1e-12)
    norm = 1.0
    if kw.get("normalise"):
        norm = GRID.npix * GRID.psize / kw.get("beam", GRID.psize)
    val, g = eqx.filter_value_and_grad(lambda m: reg(m))(_model(i0, a, b))
    assert_allclose(val, ref.tv_spec(a, eps, norm), rtol=1e-12)
    assert_allclose(g.alpha, ref.tv_spec_grad(a, eps, norm), rtol=1e-12)
    # A flat map with ε = 0: finite gradient.
    flat = _model(i0, np.zeros(GRID.shape), b)
    g = eqx.filter_grad(lambda m: em.SpectralTV(GRID, eps=0.0)(m))(flat)
    assert np.all(np.isfinite(np.asarray(g.alpha)))


def test_spectral_regularizers_vmap():
    i0, a, b = _maps()
    model = _model(i0, a, b)
    reg = em.SpectralTV(GRID) + 2 * em.SpectralL2(GRID, "beta")
    scales = jnp.array([0.5, 1.0, 2.0])

    def one(s):
        m = eqx.tree_at(lambda m: (m.alpha, m.beta), model, (s * a, s * b))
        return reg(m)

    out = jax.vmap(one)(scales)
    for k, s in enumerate((0.5, 1.0, 2.0)):
        want = ref.tv_spec(s * a, 1e-12, 1.0) + 2 * ref.l2_spec(s * b, 0.0, False)
        assert_allclose(out[k], want, rtol=1e-12)


# ------------------------------------------------------------- in an objective
def _band_data(freq, seed, n=30):
    """A small synthetic single-band data set (7 stations)."""
    rng = np.random.default_rng(seed)
    names = ("AA", "AP", "AZ", "JC", "LM", "PV", "SM")
    pairs = [(i, j) for i in range(7) for j in range(i + 1, 7)]
    pick = rng.choice(len(pairs), n)
    ant1 = np.array([pairs[k][0] for k in pick])
    ant2 = np.array([pairs[k][1] for k in pick])
    time = np.sort(rng.uniform(0, 6, n))
    u, v = rng.normal(0, 3e9, (2, n)) * freq / 230e9
    vis = rng.normal(0, 0.3, n) + 1j * rng.normal(0, 0.3, n)
    return em.VisData(
        u, v, vis, np.full(n, 0.05), time, ant1, ant2, station_names=names, freq=freq
    )


def _pol_data(d):
    """`d` (a VisData) as a polarimetric data set, RL and LR made up."""
    vis = np.asarray(d.vis)
    corr = np.stack([vis, vis, 0.1 * vis * 1j, 0.1 * np.conj(vis)], axis=1)
    return em.PolVisData(
        d.u,
        d.v,
        corr,
        np.full(corr.shape, 0.05),
        d.time,
        d.ant1,
        d.ant2,
        station_names=d.station_names,
        freq=d.band_freqs[0],
    )


def test_objective_two_bands_is_sum_of_bands_one_transform_each():
    i0, a, b = _maps()
    model = _model(i0, a, b)
    bands = em.MultiBandData([_band_data(f, k) for k, f in enumerate(FREQS)])
    terms = []
    for d, nu in zip(bands, bands.freqs):
        terms += [
            em.AtFrequency(em.VisChi2.from_data(d, GRID), nu),
            em.AtFrequency(em.AmpChi2.from_data(em.amplitudes(d), GRID), nu),
        ]
    regs = em.TV(GRID) + em.SpectralTV(GRID) + em.SpectralL2(GRID, "beta")
    obj = sum(terms) + regs
    assert len(obj.shared) == 2  # one transform per band
    assert [g.members for g in obj.shared] == [(0, 1), (2, 3)]
    assert all(obj.terms[i].forward is None for i in range(4))
    assert obj.names[:4] == ("vis", "amp", "vis_2", "amp_2")
    data_obj = sum(terms) + em.SpectralL2(GRID)
    images = [ref.image_at(i0, a, b, t.freq, NU0) for t in terms]

    @eqx.filter_jit
    def run(model, obj, terms, regs, data_obj):
        value_and_grad = eqx.filter_value_and_grad(lambda m, o: o(m))
        value, g = value_and_grad(model, obj)
        # By hand: each term on the model at its band's frequency, and each on
        # numpy's image at that frequency (plain arrays).
        hand, g_hand = eqx.filter_value_and_grad(
            lambda m: sum(t(m.at(t.freq)) for t in terms) + regs(m)
        )(model)
        arrays = sum(t(x) for t, x in zip(terms, images))
        r = data_obj.residuals(model)
        flat = (sum(terms)(i0), sum(t(i0) for t in terms))
        return value, g, hand, g_hand, arrays, jnp.sum(r**2), data_obj(model), flat

    value, g, hand, g_hand, arrays, r2, data_value, flat = run(
        model, obj, terms, regs, data_obj
    )
    assert_allclose(value, hand, rtol=1e-13)
    byhand = (
        arrays
        + em.TV(GRID)(i0)
        + ref.tv_spec(a, 1e-12, 1.0)
        + ref.l2_spec(b, 0.0, False)
    )
    assert_allclose(value, byhand, rtol=1e-12)
    # Gradients: the objective's equals the sum of the per-term gradients.
    for x, y in zip(jax.tree.leaves(g), jax.tree.leaves(g_hand)):
        assert_allclose(x, y, rtol=1e-12)
    # Residuals (a least-squares solver's view).
    assert_allclose(r2, data_value, rtol=1e-12)
    # An image array is the same at every frequency.
    assert_allclose(flat[0], flat[1], rtol=1e-13)


def test_geometric_model_keeps_its_analytic_visibilities_at_a_frequency():
    """A geometric model (no spectrum: the same at every frequency) given to an
    `AtFrequency` term, alone or in an objective, is evaluated through its
    analytic visibilities, as the inner term evaluates it: not rendered on the
    term's grid (which differs by the pixelisation)."""
    d = _band_data(FREQS[0], 3)
    ring = em.MRing(GRID, 0.6, em.uas_to_rad(9.0), [0.2 - 0.1j])
    inner = em.VisChi2.from_data(d, GRID)
    term = em.AtFrequency(inner, FREQS[0])
    assert_allclose(term.model_vis(ring), inner.model_vis(ring), rtol=1e-15)
    assert_allclose(term(ring), inner(ring), rtol=1e-15)
    assert_allclose(
        (1.0 * term + em.TV(GRID))(ring), inner(ring) + em.TV(GRID)(ring), rtol=1e-14
    )
    rendered = inner(np.asarray(ring()))
    assert abs(float(term(ring)) / float(rendered) - 1) > 1e-6  # not the rendered one


def test_objective_polarimetric_band_and_per_band_gains():
    s0 = _stokes()
    model = em.MultiFrequencyImage(StokesArray(GRID, jnp.asarray(s0)), NU0, 0.3, rm=1e5)
    d = _band_data(FREQS[0], 0)
    gains = em.StationGains.from_data(d, "track")
    rng = np.random.default_rng(4)
    gains = eqx.tree_at(
        lambda g: (g.log_amp, g.phase),
        gains,
        (
            jnp.asarray(rng.normal(0, 0.1, gains.log_amp.shape)),
            jnp.asarray(rng.normal(0, 0.5, gains.phase.shape)),
        ),
    )
    inner = em.GainCorrected(em.VisChi2.from_data(d, GRID), gains)
    t_gain = em.AtFrequency(inner, FREQS[0])
    t_plain = em.AtFrequency(em.VisChi2.from_data(d, GRID), FREQS[1])
    t_pol = em.AtFrequency(em.PolVisChi2.from_data(_pol_data(d), GRID), FREQS[1])
    obj = t_gain + t_plain + t_pol
    # One transform for the second band's Stokes I and polarimetric terms; a
    # single term with one point a row is never shared (as in any objective).
    assert [g.members for g in obj.shared] == [(1, 2)]

    @eqx.filter_jit  # the objective and the terms by hand: one program
    def run(m, o, t_gain, t_plain, t_pol):
        want = (
            t_gain(m.at(FREQS[0])[0])
            + t_plain(m.at(FREQS[1])[0])
            + t_pol(m.at(FREQS[1]))
        )
        return o(m), want

    value, want = run(model, obj, t_gain, t_plain, t_pol)
    assert_allclose(value, want, rtol=1e-13)
    assert t_gain.band_frequency == FREQS[0]


# ---------------------------------------------------------------- multi-band
def test_multiband_data_operations():
    d1, d2 = _band_data(229e9, 1), _band_data(213e9, 2)
    mb = em.MultiBandData([d1, d2])
    assert mb.freqs == (213e9, 229e9) and len(mb) == 2  # sorted by frequency
    assert mb.ref_freq == 221e9
    text = mb.summary()
    assert "band 0: 213.0000 GHz" in text and "band 1: 229.0000 GHz" in text
    sel = mb.select(exclude_stations=["SM"])
    for band in sel:
        assert "SM" not in band.stations_present()
    assert mb.take_bands([1]).freqs == (229e9,)
    # Split a concatenated data set and join it back.
    back = em.MultiBandData.from_data(em.concatenate([d1, d2]))
    assert back.freqs == mb.freqs
    for x, y in zip(back, mb):
        np.testing.assert_array_equal(
            np.sort(np.asarray(x.u)), np.sort(np.asarray(y.u))
        )
    assert mb.concatenate().band_freqs == (213e9, 229e9)


def test_multiband_merges_station_tables():
    d1 = _band_data(213e9, 1)
    d2 = _band_data(229e9, 2).select(exclude_stations=["SM"])
    d2 = d2.replace(
        station_names=d2.station_names[:-1],
        station_xyz=np.asarray(d2.station_xyz)[:-1],
    )
    mb = em.MultiBandData([d2, d1])
    assert mb[0].station_names == mb[1].station_names
    assert set(mb.station_names) == set(d1.station_names)


# -------------------------------------------------------------------- errors
# Refused by the suite's type checker first; users get eqmodels' messages.
_G = "g = em.ImageGrid(8, 8, 3e-11); "
_D = (
    "d = em.VisData([1e9], [2e9], [1.0 + 0j], [0.1], [0.0], [0], [1], "
    "station_names=('A', 'B'), freq=213e9); "
)
UNCHECKED = {
    "`base` must be an image model": unchecked_error(
        "em.MultiFrequencyImage(np.ones((8, 8)), 228e9)", "TypeError"
    ),
    "`term` must be a data term": unchecked_error(
        "em.AtFrequency(em.TV(g), 213e9)", "TypeError", setup=_G
    ),
    "needs the image model itself": unchecked_error(
        "em.SpectralTV(g)(np.ones((8, 8)))", "TypeError", setup=_G
    ),
    "`bands` is one data set": unchecked_error(
        "em.MultiBandData(d)", "TypeError", setup=_D
    ),
}


def test_construction_errors_without_type_checker(unchecked):
    for message, case in UNCHECKED.items():
        assert message in unchecked[case], (message, unchecked[case])


def test_construction_errors():
    i0, a, b = _maps()
    base = em.PixelImage(GRID, i0, transform="identity")
    with pytest.raises(ValueError, match="`freq0` must be finite and > 0"):
        em.MultiFrequencyImage(base, 0.0)
    with pytest.raises(ValueError, match="`freq0` = 230 is outside.*230e9"):
        em.MultiFrequencyImage(base, 230.0)
    with pytest.raises(ValueError, match="`alpha` has shape \\(4, 4\\).*8×8"):
        em.MultiFrequencyImage(base, NU0, np.zeros((4, 4)))
    with pytest.raises(ValueError, match="`rm` is given but `base`.*Stokes I"):
        em.MultiFrequencyImage(base, NU0, rm=1.0)
    with pytest.raises(ValueError, match="`fixed` names 'gamma'"):
        em.MultiFrequencyImage(base, NU0, fixed=("gamma",))
    with pytest.raises(ValueError, match="`fixed` names 'beta', which is not given"):
        em.MultiFrequencyImage(base, NU0, fixed=("beta",))
    model = em.MultiFrequencyImage(base, NU0, a)
    with pytest.raises(TypeError, match="already a MultiFrequencyImage"):
        em.MultiFrequencyImage(model, NU0)
    with pytest.raises(ValueError, match="`freq` = 229 is outside"):
        model.at(229.0)

    d = _band_data(213e9, 0)
    term = em.VisChi2.from_data(d, GRID)
    with pytest.raises(ValueError, match="`freq` = 213 is outside.*Hz"):
        em.AtFrequency(term, 213.0)
    with pytest.raises(TypeError, match="already an AtFrequency"):
        em.AtFrequency(em.AtFrequency(term, 213e9), 213e9)
    # A model on another grid, evaluated by a band's term.
    other = em.MultiFrequencyImage(
        em.PixelImage(em.ImageGrid(8, 8, em.uas_to_rad(5.0)), i0), NU0
    )
    with pytest.raises(ValueError, match="MultiFrequencyImage on .* but the term"):
        em.AtFrequency(term, 213e9)(other)

    with pytest.raises(ValueError, match="`which` must be one of"):
        em.SpectralL2(GRID, "gamma")
    with pytest.raises(ValueError, match="`prior` has shape"):
        em.SpectralL2(GRID, prior=np.zeros(3))
    with pytest.raises(ValueError, match="has no `beta` map"):
        em.SpectralTV(GRID, "beta")(model)
    with pytest.raises(ValueError, match="built on .* but the image model"):
        em.SpectralTV(em.ImageGrid(4, 4, GRID.psize))(model)

    d2 = _band_data(229e9, 1)
    with pytest.raises(ValueError, match="bands 0 and 1 are both at 213"):
        em.MultiBandData([d, d])
    with pytest.raises(ValueError, match="band 0 holds 2 frequencies"):
        em.MultiBandData([em.concatenate([d, d2])])
    with pytest.raises(ValueError, match="`bands` is empty"):
        em.MultiBandData([])
    with pytest.raises(TypeError, match="`bands` is not a criterion"):
        em.MultiBandData([d, d2]).select(bands=[0])
    with pytest.raises(
        ValueError, match="band 0 \\(213.0000 GHz\\): select: the selection"
    ):
        em.MultiBandData([d, d2]).select(time_range=(100.0, 101.0))


# ------------------------------------------------------------ real 2018 data
@pytest.fixture(scope="module")
def bands_2018(shared_data):
    paths = [
        glob.glob(str(shared_data / f"eht/m87_2018/*_111_{b}_*.uvfits"))[0]
        for b in ("b1", "b2")
    ]
    return em.MultiBandData([em.load_uvfits(p) for p in paths]).scan_average()


@pytest.mark.slow
def test_real_2018_two_bands_objective(bands_2018):
    grid = em.ImageGrid.from_fov(16, 128.0)
    prior = em.GaussianImage(grid, 0.6, em.uas_to_rad(40.0))()
    rng = np.random.default_rng(0)
    model = em.MultiFrequencyImage(
        em.PixelImage.from_image(prior, grid),
        bands_2018.ref_freq,
        alpha=rng.normal(0, 1, grid.shape),
        beta=rng.normal(0, 0.3, grid.shape),
    )
    assert "213.0710 GHz" in bands_2018.summary()
    assert "215.0710 GHz" in bands_2018.summary()
    per_band = []
    for d, nu in zip(bands_2018, bands_2018.freqs):
        gains = em.StationGains.from_data(d)
        per_band.append(
            [
                em.AtFrequency(
                    em.GainCorrected(em.VisChi2.from_data(d, grid), gains), nu
                ),
                em.AtFrequency(
                    em.ClosurePhaseChi2.from_data(em.closure_phases(d), grid), nu
                ),
                em.AtFrequency(
                    em.LogClosureAmpChi2.from_data(em.log_closure_amplitudes(d), grid),
                    nu,
                ),
            ]
        )
    regs = em.TV(grid) + 10 * em.SpectralTV(grid) + em.SpectralL2(grid, "beta")
    obj = sum(per_band[0]) + 0.5 * sum(per_band[1]) + regs
    assert len(obj.shared) == 2  # one transform per band
    assert [g.members for g in obj.shared] == [(0, 1, 2), (3, 4, 5)]
    # By hand: each band's own objective on numpy's image at its frequency.
    i0 = np.asarray(prior)
    hand = [
        sum(per_band[k])(
            ref.image_at(
                i0, np.asarray(model.alpha), np.asarray(model.beta), nu, model.freq0
            )
        )
        for k, nu in enumerate(bands_2018.freqs)
    ]
    want = (
        hand[0]
        + 0.5 * hand[1]
        + em.TV(grid)(model())
        + 10 * ref.tv_spec(np.asarray(model.alpha), 1e-12, 1.0)
        + ref.l2_spec(np.asarray(model.beta), 0.0, False)
    )
    assert_allclose(eqx.filter_jit(lambda m, o: o(m))(model, obj), want, rtol=1e-13)


def test_sharded_band_term_sees_its_frequency():
    """`ShardedChi2(AtFrequency(term, ν))` alone, and in an objective, evaluates
    the model at `ν` (its rows split over two devices)."""
    from jax.sharding import Mesh

    i0, a, b = _maps()
    model = _model(i0, a, b)
    d = _band_data(FREQS[0], 0, n=32)
    band = em.AtFrequency(em.VisChi2.from_data(d, GRID), FREQS[0])
    sharded = em.ShardedChi2(band, Mesh(np.array(jax.devices()[:2]), ("rows",)))
    assert sharded.band_frequency == FREQS[0]
    want = band.term(ref.image_at(i0, a, b, FREQS[0], NU0))
    assert_allclose(sharded(model), want, rtol=1e-12)
    # Residuals are concatenated device by device: compare their squares' sum.
    assert_allclose(jnp.sum(sharded.residuals(model) ** 2), want, rtol=1e-12)
    assert_allclose((sharded + em.TV(GRID))(model), want + em.TV(GRID)(i0), rtol=1e-12)


class _ScaledFlux(em.AbstractRegularizer):
    """A user's regularizer holding a field named `frequency`: the objective's
    `band_frequency` declaration does not clash with it."""

    frequency: float

    def penalty(self, image):
        return self.frequency * jnp.sum(image)


def test_users_term_with_a_frequency_field():
    i0, a, b = _maps()
    reg = _ScaledFlux(2.0)
    assert reg.frequency == 2.0 and reg.band_frequency is None
    obj = reg + em.SpectralL2(GRID)
    assert_allclose(obj(_model(i0, a, b)), 2 * i0.sum() + np.sum(a**2), rtol=1e-12)


def test_multiband_polarimetric_bands():
    d1, d2 = _band_data(213e9, 1), _band_data(229e9, 2)
    mb = em.MultiBandData([_pol_data(d2), _pol_data(d1)])
    assert mb.freqs == (213e9, 229e9)
    assert "2 bands of PolVisData" in mb.summary()
    assert all(isinstance(b, em.PolVisData) for b in mb.scan_average())
    with pytest.raises(TypeError, match="mixes VisData and PolVisData"):
        em.MultiBandData([d1, _pol_data(d2)])
