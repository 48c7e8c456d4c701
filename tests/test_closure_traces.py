"""Closure traces and conjugate closure trace products (`closure_traces`) and their
term (`ClosureTraceChi2`): numpy references (values, σ, χ² and its gradient),
invariance under every station-based Jones corruption, finite differences, jit,
vmap, sharding, the shared transform, and the refusals."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose, check_grad_fd, quiet
from tests.reference import closure_traces as rc
from tests.reference.numpy_ft import dft_matrix
from tests.test_jones import GRID, observed, random_jones, stokes_image, SynthPol
from tests.test_sharding import mesh_of


def observed_data(jones_seed=None, noise=0.0, **kw):
    data = SynthPol(**kw)
    jones = (
        em.StationJones.from_data(data, field_rotation=0.0)
        if jones_seed is None
        else random_jones(data, seed=jones_seed, d=0.1)
    )
    return observed(data, jones, stokes_image(), noise=noise)


def traces(data, kind="trace"):
    corr, sigma = data.correlations()
    return em.closure_traces(
        corr,
        sigma,
        data.ant1,
        data.ant2,
        data.time_index,
        u=data.u,
        v=data.v,
        flag=data.flag,
        kind=kind,
    )


@pytest.mark.parametrize("kind", ["trace", "product"])
def test_values_and_sigma_equal_numpy_reference(kind):
    data = observed_data(jones_seed=1, noise=0.001)
    ct = traces(data, kind)
    # Six stations, every baseline at six times: C(6, 4) = 15 quartets per time,
    # six traces (three products) each.
    assert len(ct) == 6 * 15 * (6 if kind == "trace" else 3)
    corr, sigma = data.correlations()
    for k in range(0, len(ct), 7):
        rows, quad = np.asarray(ct.rows[k]), np.asarray(ct.quadrangle[k])
        want = rc.quadrangle_value(corr, data.ant1, data.ant2, rows, quad, kind)
        assert_allclose(ct.values[k], want, rtol=1e-12, err=f"value {k}")
        sig = rc.quadrangle_sigma(corr, sigma, data.ant1, data.ant2, rows, quad, kind)
        assert_allclose(ct.sigma[k], sig, rtol=1e-6, err=f"sigma {k}")
        # Legs oriented as walked, (u, v) negated where stored the other way.
        legs = np.asarray(ct.legs[k])
        assert_allclose(legs[:, 0], quad[[0, 2, 2, 0]], rtol=0)
        assert_allclose(legs[:, 1], quad[[1, 1, 3, 3]], rtol=0)
        flipped = data.ant1[rows] != legs[:, 0]
        assert_allclose(ct.u[k], np.where(flipped, -1, 1) * data.u[rows], rtol=0)
    if kind == "trace":
        # `conjugate` points at the conjugate quadrangle (a, d, c, b).
        conj = np.asarray(ct.conjugate)
        q = np.asarray(ct.quadrangle)
        assert np.all(conj >= 0)
        assert_allclose(q[conj], q[:, [0, 3, 2, 1]], rtol=0)
        prod = traces(data, "product")
        assert_allclose(prod.values, (ct.values * ct.values[conj])[::2], rtol=1e-12)


@pytest.mark.parametrize("kind", ["trace", "product"])
def test_unchanged_by_gains_dterms_field_rotation_and_feeds(kind):
    """Mixed circular and linear feeds, random R/L gains, 10 % D-terms and field
    rotation (raw and corrected frames): the closure traces equal the ideal
    circular-feed ones to 1e-12."""
    clean = SynthPol(feeds=("circular",) * 6)
    observed(
        clean, em.StationJones.from_data(clean, field_rotation=0.0), stokes_image()
    )
    want = traces(clean, kind)
    for corrected in (False, True):
        data = SynthPol()
        observed(
            data,
            random_jones(data, seed=7, d=0.1, field_rotation_corrected=corrected),
            stokes_image(),
        )
        got = traces(data, kind)
        assert_allclose(got.values, want.values, rtol=1e-12)


def test_conjugate_products_of_an_unpolarized_source_are_one():
    data = SynthPol()
    img = stokes_image()
    img[1:] = 0.0
    observed(data, random_jones(data, seed=3, d=0.1), img)
    prod = traces(data, "product")
    assert_allclose(prod.values, np.ones(len(prod)), rtol=1e-12)


def test_flags_drop_quadrangles_and_duplicates_are_refused():
    data = observed_data()
    full = traces(data)
    data.flag[0, 2] = True  # one cross-hand of one baseline at time 0
    data.corr = np.where(data.flag, np.nan, data.corr)
    fewer = traces(data)
    # That baseline sits in C(4, 2) = 6 of the 15 quartets of its time.
    assert len(full) - len(fewer) == 6 * 6
    assert not np.any(np.asarray(fewer.rows) == 0)
    corr, sigma = data.correlations()
    twice = np.concatenate([np.arange(len(data.u)), [0]])
    with pytest.raises(ValueError, match="two rows of baseline"):
        em.closure_traces(
            corr[twice],
            sigma[twice],
            data.ant1[twice],
            data.ant2[twice],
            data.time_index[twice],
        )


# ------------------------------------------------------------------- the term
def term_and_reference(kind, seed=5):
    data = observed_data(jones_seed=1, noise=0.001, n_times=2)
    ct = traces(data, kind)
    term = em.ClosureTraceChi2.from_data(ct, GRID)
    a_legs = dft_matrix(*GRID.shape, GRID.psize, np.asarray(ct.u), np.asarray(ct.v))
    a_legs = a_legs.reshape(len(ct), 4, -1)
    img = stokes_image(seed=seed)
    w = 1.0 / np.asarray(ct.sigma) ** 2
    value, grad = rc.closure_trace_chi2(a_legs, img, np.asarray(ct.values), w, kind)
    return data, term, img, value, grad


@pytest.mark.parametrize(
    "kind", ["trace", pytest.param("product", marks=pytest.mark.slow)]
)
def test_chi2_value_and_gradient_against_numpy_under_jit_and_fd(kind):
    data, term, img, value, grad = term_and_reference(kind)
    got, g = eqx.filter_jit(jax.value_and_grad(lambda x, t: t(x)))(
        jnp.asarray(img), term
    )
    assert_allclose(got, value, rtol=1e-12)
    assert_allclose(g, grad, rtol=1e-12)
    r = eqx.filter_jit(lambda t, x: t.residuals(x))(term, jnp.asarray(img))
    assert_allclose(jnp.sum(r**2), value, rtol=1e-12)
    check_grad_fd(jax.jit(lambda x: term(x)), img, rtol=1e-6)
    # From the data set directly: the same term.
    direct = em.ClosureTraceChi2.from_data(data, GRID, kind=kind)
    assert_allclose(eqx.filter_jit(lambda t, x: t(x))(direct, img), value, rtol=1e-12)


@pytest.mark.slow
def test_chi2_vmap_sharding_shared_transform_and_jones_invariance():
    data, term, img, value, _ = term_and_reference("trace")
    imgs = jnp.stack([jnp.asarray(stokes_image(seed=s)) for s in (5, 6)])
    got = jax.vmap(term)(imgs)
    assert_allclose(got[0], value, rtol=1e-12)
    assert_allclose(got[1], term(imgs[1]), rtol=1e-13)
    vg = eqx.filter_jit(jax.value_and_grad(lambda x, t: t(x)))
    v0, g0 = vg(jnp.asarray(img), term)
    for n in (3,):
        v1, g1 = vg(jnp.asarray(img), em.ShardedChi2(term, mesh_of(n)))
        assert_allclose(v1, v0, rtol=1e-13)
        assert_allclose(g1, g0, rtol=1e-12)
    corr = em.CorrelationChi2.from_data(data, GRID)
    obj = em.Objective([term, corr])
    assert len(obj.shared) == 1  # the legs and the rows in one batched transform
    assert_allclose(obj(img), term(img) + corr(img), rtol=1e-13)
    # Through any Jones matrices: unchanged.
    jones = random_jones(data, seed=4, d=0.1)
    assert_allclose(em.JonesCorrected(term, jones)(img), value, rtol=1e-10)


def test_closure_traces_and_term_refuse_bad_inputs():
    data = observed_data()
    corr, sigma = data.correlations()
    args = (data.ant1, data.ant2, data.time_index)
    with pytest.raises(ValueError, match="shape \\(n, 4\\)"):
        em.closure_traces(corr[:, :3], sigma[:, :3], *args)
    with pytest.raises(ValueError, match="`kind`"):
        em.closure_traces(corr, sigma, *args, kind="ratio")
    with pytest.raises(ValueError, match="`ant1` and `ant2` must differ"):
        em.closure_traces(corr, sigma, data.ant1, data.ant1, data.time_index)
    with pytest.raises(ValueError, match="`sigma` must be > 0"):
        em.closure_traces(corr, -sigma, *args)
    ct = traces(data)
    fwd = em.DirectFT(GRID, np.asarray(ct.u), np.asarray(ct.v))
    with pytest.raises(ValueError, match="`kind`"):
        em.ClosureTraceChi2(fwd, ct.values, ct.sigma, kind="ratio")
    bad = np.asarray(ct.values).copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="non-finite value"):
        em.ClosureTraceChi2(fwd, bad, ct.sigma)
    with pytest.raises(ValueError, match="one closure trace per row"):
        em.ClosureTraceChi2(fwd, ct.values[:-1], ct.sigma[:-1])
    with pytest.raises(TypeError, match="no `correlations\\(\\)`"):
        em.ClosureTraceChi2.from_data(object(), GRID)
    no_uv = em.closure_traces(corr, sigma, *args)
    with pytest.raises(ValueError, match="carry no \\(u, v\\)"):
        em.ClosureTraceChi2.from_data(no_uv, GRID)


@pytest.mark.slow
def test_ehtim_corruption_of_real_m87_data_leaves_closure_traces_unchanged(shared_data):
    """eht-imaging's simulator corrupts a real M87 2017 file (04-11 lo, raw rows)
    with random R/L gains, 5 % D-terms and field rotation of every mount kind
    (`add_jones_and_noise` without noise): every closure trace and product of the
    17778 (8889) quadrangles is unchanged to 1e-12 (measured ≤ 7e-14)."""
    with quiet():
        eh = pytest.importorskip("ehtim")
        from ehtim.observing import obs_simulate as sim

        path = (
            shared_data / "eht/m87_2017_pol/hops_data/April11/"
            "SR2_M87_2017_101_lo_hops_ALMArot.uvfits"
        )
        obs = eh.obsdata.load_uvfits(str(path), polrep="circ")
        ns = len(obs.tarr)
        rng = np.random.default_rng(0)
        obs.tarr["fr_par"] = 1.0
        obs.tarr["fr_elev"] = np.resize([0.0, 1.0, -1.0], ns)
        obs.tarr["fr_off"] = rng.uniform(-90, 90, ns)
        obs.tarr["dr"] = 0.05 * (rng.normal(size=ns) + 1j * rng.normal(size=ns))
        obs.tarr["dl"] = 0.05 * (rng.normal(size=ns) + 1j * rng.normal(size=ns))
        corrupted = sim.add_jones_and_noise(
            obs,
            add_th_noise=False,
            ampcal=False,
            phasecal=False,
            dcal=False,
            frcal=False,
            rlgaincal=False,
            dterm_offset=0.0,
            seed=4,
            verbose=False,
        )

    def arrays(d):
        corr = np.stack([d["rrvis"], d["llvis"], d["rlvis"], d["lrvis"]], axis=1)
        sig = np.stack([d["rrsigma"], d["llsigma"], d["rlsigma"], d["lrsigma"]], axis=1)
        a1 = np.array([obs.tkey[t] for t in d["t1"]])
        a2 = np.array([obs.tkey[t] for t in d["t2"]])
        return corr, sig, a1, a2, np.unique(d["time"], return_inverse=True)[1]

    for kind, count in (("trace", 17778), ("product", 8889)):
        before = em.closure_traces(*arrays(obs.data), kind=kind)
        after = em.closure_traces(*arrays(corrupted), kind=kind)
        assert len(before) == len(after) == count
        assert_allclose(
            np.asarray(after.quadrangle), np.asarray(before.quadrangle), rtol=0
        )
        rel = np.abs(after.values - before.values) / np.abs(before.values)
        assert rel.max() < 1e-12, rel.max()
