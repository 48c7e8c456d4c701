"""Bands over devices: `BandShardedChi2` / `shard_bands` on a 2-d mesh (bands x
rows) of virtual CPU devices give the unsharded multi-frequency objective's value
(1e-13) and gradient (1e-12); residuals, the per-band values against numpy's
images, construction errors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh

import eqmodels as em
from tests.helpers import assert_allclose
from tests.reference import multifreq as ref


GRID = em.ImageGrid(8, 8, em.uas_to_rad(6.0))
NU0 = 228e9
FREQS = (213.1e9, 215.1e9, 227.1e9, 229.1e9)


def _mesh(bands, rows, explicit=False):
    devices = np.array(jax.devices()[: bands * rows]).reshape(bands, rows)
    if explicit:
        return Mesh(devices, ("bands", "rows"), axis_types=(AxisType.Explicit,) * 2)
    return Mesh(devices, ("bands", "rows"))


def _band_data(freq, seed, n):
    rng = np.random.default_rng(seed)
    names = ("AA", "AP", "AZ", "JC", "LM", "PV", "SM")
    pairs = [(i, j) for i in range(7) for j in range(i + 1, 7)]
    pick = rng.choice(len(pairs), n)
    time = np.sort(rng.uniform(0, 6, n))
    u, v = rng.normal(0, 3e9, (2, n)) * freq / 230e9
    vis = rng.normal(0, 0.3, n) + 1j * rng.normal(0, 0.3, n)
    return em.VisData(
        u,
        v,
        vis,
        rng.uniform(0.03, 0.08, n),
        time,
        np.array([pairs[k][0] for k in pick]),
        np.array([pairs[k][1] for k in pick]),
        station_names=names,
        freq=freq,
    )


def _model(seed=0):
    rng = np.random.default_rng(seed)
    i0 = rng.uniform(0.1, 1.0, GRID.shape)
    alpha = rng.normal(0, 1.0, GRID.shape)
    base = em.PixelImage(GRID, i0, transform="identity")
    return em.MultiFrequencyImage(base, NU0, alpha), i0, alpha


def _terms(freqs, forward="direct"):
    """Two kinds per band (vis, amp) with different row counts per band."""
    terms = []
    for k, nu in enumerate(freqs):
        d = _band_data(nu, k, n=25 + 3 * k)
        terms += [
            em.AtFrequency(em.VisChi2.from_data(d, GRID, forward=forward), nu),
            em.AtFrequency(
                em.AmpChi2.from_data(em.amplitudes(d), GRID, forward=forward), nu
            ),
        ]
    return terms


_vg = eqx.filter_jit(eqx.filter_value_and_grad(lambda m, o: o(m)))


@pytest.mark.parametrize(
    "forward", ["direct", pytest.param("nufft", marks=pytest.mark.slow)]
)
def test_two_bands_on_two_by_two_devices(forward):
    """4 virtual devices: 2 bands x 2 row shards; value 1e-13, gradient 1e-12
    against the unsharded objective (weights and regularizers included)."""
    model, i0, alpha = _model()
    terms = _terms(FREQS[:2], forward)
    weighted = [2.0 * t if k % 2 else t for k, t in enumerate(terms)]
    regs = [10.0 * em.TV(GRID), em.SpectralTV(GRID, "alpha"), em.SpectralL2(GRID)]
    plain = sum(weighted) + sum(regs)
    mesh = _mesh(2, 2)
    sharded = em.shard_bands([*weighted, *regs], mesh)
    kinds = [t for t in sharded.terms if isinstance(t, em.BandShardedChi2)]
    assert [t.report_name for t in kinds] == ["vis_bands", "amp_bands"]
    assert sharded.names[-2:] == ("vis_bands", "amp_bands")
    # Each band lives on its own device group, its rows split over the group.
    vis = kinds[0].term.weight
    assert vis.shape[0] == 2 and vis.shape[1] % 2 == 0
    for shard in vis.addressable_shards:
        b = shard.index[0].start or 0
        assert shard.device in list(mesh.devices[b])
        assert shard.data.shape == (1, vis.shape[1] // 2)
    value, grad = _vg(model, sharded)
    ref_value, ref_grad = _vg(model, plain)
    assert_allclose(value, ref_value, rtol=1e-13)
    for x, y in zip(jax.tree.leaves(grad), jax.tree.leaves(ref_grad)):
        assert_allclose(x, y, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(kinds[1].band_weights), [2.0, 2.0])


def test_geometric_model_keeps_its_analytic_visibilities():
    """A geometric model (the same at every frequency) given to band-sharded
    terms: each band's rows get its analytic visibilities, as the unsharded
    terms' do (value, gradient w.r.t. its parameters, residuals), not those of
    its render on the grid."""
    terms = _terms(FREQS[:2])
    plain = sum(terms)
    sharded = em.shard_bands(terms, _mesh(2, 2))
    ring = em.MRing(GRID, 0.9, em.uas_to_rad(10.0), [0.25 + 0.1j])
    value, grad = _vg(ring, sharded)
    ref_value, ref_grad = _vg(ring, plain)
    assert_allclose(value, ref_value, rtol=1e-13)
    for x, y in zip(jax.tree.leaves(grad), jax.tree.leaves(ref_grad)):
        assert_allclose(x, y, rtol=1e-12)
    r = sharded.residuals(ring)
    assert_allclose(jnp.sum(r**2), ref_value, rtol=1e-13)
    rendered = plain(np.asarray(ring()))
    assert abs(float(value) / float(rendered) - 1) > 1e-6


@pytest.mark.slow
def test_four_bands_two_groups_explicit_mesh_and_residuals():
    """Four bands on a (2, 2) mesh of Explicit axes (each group two bands in turn);
    residuals' squares sum to the value; the per-band values equal the terms on
    numpy's images at each band's frequency."""
    model, i0, alpha = _model(1)
    terms = _terms(FREQS)
    plain = em.Objective(terms)
    mesh = _mesh(2, 2, explicit=True)
    sharded = em.shard_bands(terms, mesh)
    value, grad = _vg(model, sharded)
    ref_value, ref_grad = _vg(model, plain)
    assert_allclose(value, ref_value, rtol=1e-13)
    for x, y in zip(jax.tree.leaves(grad), jax.tree.leaves(ref_grad)):
        assert_allclose(x, y, rtol=1e-12)
    r = eqx.filter_jit(lambda m, o: o.residuals(m))(model, sharded)
    assert_allclose(jnp.sum(r**2), ref_value, rtol=1e-12)
    images = [ref.image_at(i0, alpha, np.zeros_like(alpha), f, NU0) for f in FREQS]
    amp = [t for t in sharded.terms if t.report_name == "amp_bands"][0]
    want = [terms[2 * k + 1].term(x) for k, x in enumerate(images)]
    assert_allclose(amp.band_values(model), want, rtol=1e-12)


@pytest.mark.slow
def test_gauss_newton_step_runs():
    """A Gauss-Newton step (the residuals gathered before the dense step) on the
    band-sharded objective lands where the unsharded one's does: the objective
    values agree to 1e-5 (the step is ill-conditioned, 64 α pixels on few rows:
    the unsharded objective with its terms in another order lands 8e-7 away)."""
    model, _, _ = _model(2)
    terms = _terms(FREQS[:2])
    sharded = em.shard_bands([*terms, em.SpectralL2(GRID)], _mesh(2, 2))
    plain = sum(terms) + em.SpectralL2(GRID)
    out = em.solve(sharded, model, solver="gauss-newton", max_steps=1)
    ref_out = em.solve(plain, model, solver="gauss-newton", max_steps=1)
    after = _vg(out.model, plain)[0]
    assert_allclose(after, _vg(ref_out.model, plain)[0], rtol=1e-5)
    assert after < _vg(model, plain)[0]


def test_gain_corrected_band_terms_stay_replicated():
    """Per-band station gains (`AtFrequency(GainCorrected(term, gains_b), ν)`) are
    not split: shard_bands keeps them as they are, the plain band terms are
    sharded, and the value and gradient (gains included) are the unsharded
    objective's."""
    model, _, _ = _model(3)
    terms, wrapped = [], []
    for k, nu in enumerate(FREQS[:2]):
        d = _band_data(nu, k, n=25 + 3 * k)
        gains = em.StationGains.from_data(d)
        rng = np.random.default_rng(k)
        gains = eqx.tree_at(
            lambda g: g.log_amp, gains, rng.normal(0, 0.1, gains.log_amp.shape)
        )
        vis = em.VisChi2.from_data(d, GRID, forward="direct")
        wrapped.append(em.AtFrequency(em.GainCorrected(vis, gains), nu))
        terms.append(
            em.AtFrequency(
                em.AmpChi2.from_data(em.amplitudes(d), GRID, forward="direct"), nu
            )
        )
    sharded = em.shard_bands([*wrapped, *terms, em.SpectralL2(GRID)], _mesh(2, 2))
    kinds = [t for t in sharded.terms if isinstance(t, em.BandShardedChi2)]
    assert [t.report_name for t in kinds] == ["amp_bands"]
    kept = [t for t in sharded.terms if isinstance(t, em.AtFrequency)]
    assert len(kept) == 2 and all(isinstance(t.term, em.GainCorrected) for t in kept)
    plain = em.Objective([*wrapped, *terms, em.SpectralL2(GRID)])
    both = (model, [t.term.gains for t in kept])

    def value(m_g, obj):
        m, gains = m_g
        obj = eqx.tree_at(
            lambda o: [o.terms[i].term.gains for i in range(2)], obj, gains
        )
        return obj(m)

    vg = eqx.filter_jit(eqx.filter_value_and_grad(value))
    v1, g1 = vg(both, sharded)
    v0, g0 = vg(both, plain)
    assert_allclose(v1, v0, rtol=1e-13)
    for x, y in zip(jax.tree.leaves(g1), jax.tree.leaves(g0)):
        assert_allclose(x, y, rtol=1e-12, atol=1e-14)
    with pytest.raises(TypeError, match="wrap GainCorrected terms"):
        em.BandShardedChi2(wrapped, _mesh(2, 2))


def test_log_likelihood_equals_the_unsharded_objectives():
    """The band-sharded objective's log-likelihood (unweighted: weights 2 and 1
    do not enter) equals the unsharded terms' sum, value 1e-13 and gradient
    1e-12, padding rows left out."""
    model, _, _ = _model(4)
    terms = _terms(FREQS[:2])
    weighted = [2.0 * t if k % 2 else t for k, t in enumerate(terms)]
    sharded = em.shard_bands([*weighted, em.SpectralL2(GRID)], _mesh(2, 2))
    assert any(isinstance(t, em.BandShardedChi2) for t in sharded.terms)
    plain = em.Objective(terms)
    ll = eqx.filter_jit(eqx.filter_value_and_grad(lambda m, o: o.log_likelihood(m)))
    value, grad = ll(model, sharded)
    ref_value, ref_grad = ll(model, plain)
    assert_allclose(value, ref_value, rtol=1e-13)
    for x, y in zip(jax.tree.leaves(grad), jax.tree.leaves(ref_grad)):
        assert_allclose(x, y, rtol=1e-12)


def test_errors():
    terms = _terms(FREQS[:2])
    mesh = _mesh(2, 2)
    with pytest.raises(TypeError, match="must be AtFrequency"):
        em.BandShardedChi2([t.term for t in terms[::2]], mesh)
    with pytest.raises(ValueError, match="two terms at one frequency"):
        em.BandShardedChi2([terms[0], terms[0]], mesh)
    with pytest.raises(TypeError, match="different classes"):
        em.BandShardedChi2([terms[0], terms[3]], mesh)
    with pytest.raises(ValueError, match="cannot be split evenly"):
        em.BandShardedChi2(terms[::2], _mesh(4, 2)[:0] if False else Mesh(
            np.array(jax.devices()[:6]).reshape(3, 2), ("bands", "rows")))  # fmt: skip
    with pytest.raises(ValueError, match="no axis named 'bands'"):
        em.BandShardedChi2(terms[::2], Mesh(np.array(jax.devices()[:2]), ("rows",)))
    with pytest.raises(ValueError, match="one weight per band"):
        em.BandShardedChi2(terms[::2], mesh, weights=[1.0])
    with pytest.raises(ValueError, match="differ in structure"):
        other = em.AtFrequency(
            em.VisChi2.from_data(_band_data(FREQS[1], 1, 28), GRID, forward="nufft"),
            FREQS[1],
        )
        em.BandShardedChi2([terms[0], other], mesh)
    with pytest.raises(ValueError, match="holds no forward model"):
        em.shard_bands(sum(terms), mesh)
    with pytest.raises(ValueError, match="no AtFrequency data term"):
        em.shard_bands([em.TV(GRID)], mesh)
    with pytest.raises(ValueError, match="chi2_offset"):
        em.shard_bands(em.Objective(terms, chi2_offset=True, share=False), mesh)


@pytest.mark.slow
def test_two_processes_one_band_each(tmp_path):
    """Two `jax.distributed` processes (two virtual CPU devices each, gloo), the
    band groups the processes: each process holds one band's rows; the value and
    gradient equal the single-process, unsharded objective's."""
    import pathlib

    from tests.helpers import run_two_processes

    worker = pathlib.Path(__file__).resolve().parent / "multihost" / "bands_worker.py"
    out = tmp_path / "result"
    run_two_processes(worker, out)
    import json

    model, _, _ = _model()
    plain = sum(_terms(FREQS[:2])) + em.SpectralTV(GRID, "alpha")
    value, grad = _vg(model, plain)
    for pid in (0, 1):
        got = json.loads(pathlib.Path(f"{out}.{pid}").read_text())
        assert got["local_bands"] == [pid]
        assert_allclose(got["value"], value, rtol=1e-13)
        assert_allclose(np.array(got["grad_i0"]), grad.base.params, rtol=1e-12)
        assert_allclose(np.array(got["grad_alpha"]), grad.alpha, rtol=1e-12)
