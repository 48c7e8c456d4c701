"""The polarimetric data terms `PolVisChi2` (pvis), `FracPolChi2` (m) and
`StokesVChi2` (vvis): value and gradient against numpy references
(tests/reference/pol_terms.py) to 1e-12, finite differences, jit, vmap,
`ShardedChi2`, an `Objective` sharing one transform with Stokes I terms, row
gathers and padding, `from_data`'s rows (conjugate baselines, flagged rows
dropped), and the refusals."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose, check_grad_fd
from tests.problems import FORWARD_RTOL, FORWARDS, random_points
from tests.reference import pol_terms as ref
from tests.reference.numpy_ft import dft_matrix
from tests.test_sharding import mesh_of
from tests.unchecked import unchecked_error


GRID = em.ImageGrid(8, 8, em.uas_to_rad(5.0))
N = 13
TERMS = {"pvis": em.PolVisChi2, "m": em.FracPolChi2, "vvis": em.StokesVChi2}
REFS = {"pvis": ref.pvis_chi2, "m": ref.m_chi2, "vvis": ref.vvis_chi2}


def stokes_image(seed=3, pol=0.3):
    rng = np.random.default_rng(seed)
    i = rng.uniform(0.5, 1.0, GRID.shape) / GRID.npix
    q, u, v = rng.uniform(-pol, pol, (3, *GRID.shape)) * i
    return np.stack([i, q, u, v])


def stokes_vis(u, v, stokes):
    a = dft_matrix(*GRID.shape, GRID.psize, u, v)
    return np.stack([a @ p.ravel() for p in stokes], axis=-1)


def observed(kind, u, v, seed=0):
    """`(values, sigma)` of a term of `kind` at `(u, v)`: a random polarized
    source's visibilities with noise, and per-row sigmas."""
    rng = np.random.default_rng(seed)
    s = stokes_vis(u, v, stokes_image(seed + 10))
    n = len(u)
    noise = 0.02 * (rng.normal(size=(n, 4)) + 1j * rng.normal(size=(n, 4)))
    s = s + noise * np.abs(s[:, :1])
    sig = rng.uniform(0.5, 2.0, (n, 4)) * 0.02
    if kind == "pvis":
        return s[:, 1] + 1j * s[:, 2], np.hypot(sig[:, 1], sig[:, 2])
    if kind == "m":
        return ref.m_data(s, sig)
    return s[:, 3], sig[:, 3]


def make_term(kind, fwd_kind="direct", n=N, seed=0, **kw):
    u, v = random_points(GRID, n, seed=seed + 1)
    values, sigma = observed(kind, u, v, seed)
    return TERMS[kind](FORWARDS[fwd_kind](GRID, u, v), values, sigma, **kw)


def reference(kind, term, stokes):
    fwd = term.forward
    a = dft_matrix(*GRID.shape, GRID.psize, np.asarray(fwd.u), np.asarray(fwd.v))
    values = np.asarray(getattr(term, "pvis" if kind == "pvis" else kind))
    sigma = 1.0 / np.sqrt(np.asarray(term.weight))
    return REFS[kind](a, stokes, values, sigma)


_vg = eqx.filter_jit(jax.value_and_grad(lambda x, t: t(x)))
_val = eqx.filter_jit(lambda x, t: t(x))


@pytest.mark.parametrize(
    "fwd_kind",
    ["direct"]
    + [pytest.param(k, marks=pytest.mark.slow) for k in ("separable", "nufft")],
)
@pytest.mark.parametrize("kind", list(TERMS))
def test_value_and_gradient_equal_numpy(kind, fwd_kind):
    term = make_term(kind, fwd_kind)
    stokes = stokes_image()
    want, want_grad = reference(kind, term, stokes)
    val, grad = _vg(jnp.asarray(stokes), term)
    rtol = FORWARD_RTOL[fwd_kind]
    assert_allclose(val, want, rtol=rtol)
    assert_allclose(grad, want_grad, rtol=rtol * (10 if fwd_kind == "nufft" else 1))
    # The planes a term does not read get exactly zero gradient.
    unused = {"pvis": [0, 3], "m": [3], "vvis": [0, 1, 2]}[kind]
    assert np.all(np.asarray(grad)[unused] == 0)
    # Σ r² = χ².
    r = jax.jit(lambda x: term.residuals(x))(jnp.asarray(stokes))
    assert r.shape == (2 * N,)
    assert_allclose(jnp.sum(r**2), want, rtol=rtol)


@pytest.mark.parametrize("kind", list(TERMS))
def test_gradient_against_finite_differences(kind):
    term = make_term(kind)
    check_grad_fd(jax.jit(lambda x: term(x)), jnp.asarray(stokes_image()))


@pytest.mark.parametrize("kind", list(TERMS))
def test_attributes_and_polarimetric_image_model(kind):
    from tests.toys import StokesToyImage

    term = make_term(kind)
    assert term.polarimetric and term.report_name == kind
    assert int(term.n_rows) == N and term.rows == N
    stokes = stokes_image()
    model = StokesToyImage(GRID, jnp.asarray(stokes))
    assert_allclose(term(model), term(stokes), rtol=1e-15)
    assert term.model_vis(stokes).shape == (N, 4)


@pytest.mark.parametrize("kind", list(TERMS))
def test_vmap_over_images(kind):
    term = make_term(kind)
    batch = jnp.stack([jnp.asarray(stokes_image(s)) for s in range(3)])
    vals, grads = jax.jit(jax.vmap(jax.value_and_grad(lambda x: term(x))))(batch)
    for k in range(3):
        want, want_grad = reference(kind, term, np.asarray(batch[k]))
        assert_allclose(vals[k], want, rtol=1e-12)
        assert_allclose(grads[k], want_grad, rtol=1e-12)


@pytest.mark.parametrize("kind", list(TERMS))
def test_sharded_equals_the_plain_term(kind):
    term = make_term(kind)  # 13 rows over 4 devices: padded
    sharded = em.ShardedChi2(term, mesh_of(4))
    x = jnp.asarray(stokes_image())
    val, grad = _vg(x, sharded)
    ref_val, ref_grad = _vg(x, term)
    assert_allclose(val, ref_val, rtol=1e-14)
    assert_allclose(grad, ref_grad, rtol=1e-13)
    r = sharded.residuals(x)
    assert_allclose(jnp.sum(r**2), ref_val, rtol=1e-13)


@pytest.mark.slow  # five terms and their objective compiled
@pytest.mark.parametrize("fwd_kind", ["direct", "nufft"])
def test_objective_shares_one_transform_with_stokes_i_terms(fwd_kind):
    u, v = random_points(GRID, N, seed=21)
    fwd = FORWARDS[fwd_kind](GRID, u, v)
    s = stokes_vis(u, v, stokes_image(30))
    sig = np.full(N, 0.01)
    terms = [
        em.VisChi2(fwd, s[:, 0], sig),
        em.AmpChi2(fwd, np.abs(s[:, 0]), sig),
        # The conjugate baselines, as `from_data` builds them: merged with (u, v).
        em.PolVisChi2(
            FORWARDS[fwd_kind](GRID, np.r_[u, -u], np.r_[v, -v]),
            np.r_[s[:, 1] + 1j * s[:, 2], np.conj(s[:, 1]) + 1j * np.conj(s[:, 2])],
            np.r_[sig, sig],
        ),
        em.FracPolChi2(fwd, (s[:, 1] + 1j * s[:, 2]) / s[:, 0], sig),
        em.StokesVChi2(fwd, s[:, 3], sig),
    ]
    weights = [1.0, 0.5, 2.0, 3.0, 4.0]
    obj = em.Objective(terms, weights)
    assert len(obj.shared) == 1 and obj.shared[0].n_points == N
    x = jnp.asarray(stokes_image(31))
    separate = [_vg(x, t) for t in terms]
    want = sum(w * vg[0] for w, vg in zip(weights, separate))
    want_grad = sum(w * vg[1] for w, vg in zip(weights, separate))
    val, grad = _vg(x, obj)
    rtol = FORWARD_RTOL[fwd_kind]
    assert_allclose(val, want, rtol=rtol)
    assert_allclose(grad, want_grad, rtol=rtol * 10)
    report = obj.report(x)
    assert set(report) == {"vis", "amp", "pvis", "m", "vvis"}
    for name, vg in zip(("vis", "amp", "pvis", "m", "vvis"), separate):
        assert_allclose(report[name], vg[0], rtol=rtol)
    r = eqx.filter_jit(lambda y, o: o.residuals(y))(x, obj)
    assert_allclose(jnp.sum(r**2), want, rtol=rtol)


@pytest.mark.parametrize("kind", list(TERMS))
def test_take_rows_and_pad_rows(kind):
    term = make_term(kind, stations=np.c_[np.arange(N), np.arange(N) + 1],
                     time_index=np.arange(N))  # fmt: skip
    x = jnp.asarray(stokes_image())
    val, grad = _vg(x, term)
    padded = term.pad_rows(N + 5)
    assert padded.rows == N + 5 and int(padded.n_rows) == N
    pval, pgrad = _vg(x, padded)
    assert_allclose(pval, val, rtol=1e-14)
    assert_allclose(pgrad, grad, rtol=1e-13)
    # The pieces of a split term sum to the whole term.
    a, b = term.take_rows(np.arange(6)), term.take_rows(np.arange(6, N))
    assert_allclose(_val(x, a) + _val(x, b), val, rtol=1e-13)
    np.testing.assert_array_equal(b.stations, np.asarray(term.stations)[6:])
    np.testing.assert_array_equal(b.time_index, np.arange(6, N))
    # A standalone subset equals the term built on those rows alone.
    idx = np.array([4, 1, 7])
    sub = term.take_rows(idx, n_rows=3)
    values = np.asarray(getattr(term, kind))[idx]
    sigma = 1 / np.sqrt(np.asarray(term.weight))[idx]
    fwd = em.DirectFT(GRID, np.asarray(term.forward.u)[idx], term.forward.v[idx])
    assert_allclose(_val(x, sub), _val(x, TERMS[kind](fwd, values, sigma)), rtol=1e-13)


@pytest.mark.parametrize("kind", list(TERMS))
def test_terms_of_different_data_sets_stack_for_vmap(kind):
    """Terms of two data sets (13 and 9 rows), padded and stacked: one value per
    data set, each equal to its own term (a survey's structure)."""
    terms = [make_term(kind), make_term(kind, n=9, seed=3)]
    stacked = em.pad_and_stack(terms)
    x = jnp.asarray(stokes_image())
    vals = eqx.filter_jit(eqx.filter_vmap(lambda t, y: t(y), in_axes=(0, None)))(
        stacked, x
    )
    for k, t in enumerate(terms):
        assert_allclose(vals[k], _val(x, t), rtol=1e-13)


@pytest.mark.slow  # an objective of three terms and its Jacobian compiled
def test_residual_jacobian_of_an_objective_of_polarimetric_terms():
    from tests.toys import StokesToyImage

    obj = em.Objective([make_term(k, seed=i) for i, k in enumerate(TERMS)])
    model = StokesToyImage(GRID, jnp.asarray(stokes_image()))
    r, jac = em.residual_jacobian(obj, model, chunk_size=32)
    want = jax.jacfwd(lambda p: obj.residuals(StokesToyImage(GRID, p)))(model.planes)
    assert_allclose(r, obj.residuals(model), rtol=1e-13)
    assert_allclose(jac, want.reshape(r.size, -1), rtol=1e-12)


def test_dead_rows_of_the_m_term_are_finite_where_the_model_i_is_zero():
    term = make_term("m")
    dead = eqx.tree_at(lambda t: t.weight, term, jnp.zeros(N))
    x = jnp.asarray(stokes_image()).at[0].set(0.0)  # Î = 0 on every row
    val, grad = _vg(x, dead)
    assert float(val) == 0.0 and np.all(np.asarray(grad) == 0)
    r = dead.residuals(x)
    assert np.all(np.asarray(r) == 0)


# --------------------------------------------------------------------- from_data


class PolRows:
    """A polarimetric data set as `from_data` reads one (anything with `u`, `v`,
    `stokes()`, and optionally `ant1`, `ant2`, `time_index`, `index_key`): the
    interface of `PolVisData` that the terms rely on."""

    def __init__(self, u, v, vis, sigma, ant1, ant2, time_index, index_key=7):
        self.u, self.v = u, v
        self._vis, self._sigma = vis, sigma
        self.ant1, self.ant2, self.time_index = ant1, ant2, time_index
        self.index_key = index_key

    def stokes(self):
        return self._vis, self._sigma


def pol_rows(n=N, seed=40):
    rng = np.random.default_rng(seed)
    u, v = random_points(GRID, n, seed=seed)
    vis = stokes_vis(u, v, stokes_image(seed + 1))
    vis = vis + 0.01 * (rng.normal(size=(n, 4)) + 1j * rng.normal(size=(n, 4)))
    sigma = rng.uniform(0.5, 2.0, (n, 4)) * 0.01
    # Flagged: Q and U of row 2 (RL, LR missing), V of row 5 (RR missing).
    vis[2, 1:3] = np.nan
    sigma[2, 1:3] = np.nan
    vis[5, 3] = np.nan
    sigma[5, 3] = np.nan
    ant1 = rng.integers(0, 3, n)
    return PolRows(u, v, vis, sigma, ant1, ant1 + 1, np.arange(n) // 2)


def pol_rows_taken(data, rows):
    vis, sigma = data.stokes()
    return PolRows(data.u[rows], data.v[rows], vis[rows], sigma[rows],
                   data.ant1[rows], data.ant2[rows], data.time_index[rows])  # fmt: skip


@pytest.mark.parametrize("kind", list(TERMS))
def test_from_data_takes_eht_imagings_rows(kind):
    data = pol_rows()
    term = TERMS[kind].from_data(data, GRID)
    vis, sigma = data.stokes()
    keep = np.ones(N, bool)
    keep[5 if kind == "vvis" else 2] = False
    u, v, s, sig = data.u[keep], data.v[keep], vis[keep], sigma[keep]
    pairs = np.c_[data.ant1, data.ant2][keep]
    times = data.time_index[keep]
    if kind == "vvis":  # one row per data row
        values, sg = s[:, 3], sig[:, 3]
    else:  # followed by the conjugate baselines
        u, v, s, sig = ref.stokes_rows_with_conjugates(u, v, s, sig)
        pairs, times = np.r_[pairs, pairs[:, ::-1]], np.r_[times, times]
        if kind == "pvis":
            values, sg = s[:, 1] + 1j * s[:, 2], np.hypot(sig[:, 1], sig[:, 2])
        else:
            values, sg = ref.m_data(s, sig)
    n = len(u)
    assert term.rows == n and int(term.n_rows) == n
    np.testing.assert_array_equal(term.forward.u, u)
    np.testing.assert_array_equal(term.forward.v, v)
    assert_allclose(getattr(term, kind), values, rtol=1e-15)
    assert_allclose(term.weight, 1 / sg**2, rtol=1e-15)
    np.testing.assert_array_equal(term.stations, pairs)
    np.testing.assert_array_equal(term.time_index, times)
    assert int(term.index_key) == 7
    x = stokes_image()
    a = dft_matrix(*GRID.shape, GRID.psize, u, v)
    want, want_grad = REFS[kind](a, x, values, sg)
    val, grad = _vg(jnp.asarray(x), term)
    assert_allclose(val, want, rtol=1e-12)
    assert_allclose(grad, want_grad, rtol=1e-12)


def test_pvis_with_conjugates_weighs_q_and_u_alike():
    """Why eht-imaging's conjugate rows matter: with both orientations the pvis χ²
    is `Σ w (|ΔQ|² + |ΔU|²) / (2n)` over the n data rows (the cross term
    `Im(ΔQ ΔU*)` of `|ΔQ + iΔU|²` cancels)."""
    data = pol_rows()
    term = em.PolVisChi2.from_data(data, GRID)
    x = stokes_image()
    keep = np.arange(N) != 2
    vis, sigma = data.stokes()
    model = stokes_vis(data.u[keep], data.v[keep], x)
    d = model[:, 1:3] - vis[keep, 1:3]
    w = 1 / (sigma[keep, 1] ** 2 + sigma[keep, 2] ** 2)
    want = np.sum(w * np.sum(np.abs(d) ** 2, axis=1)) / (2 * keep.sum())
    assert_allclose(_val(jnp.asarray(x), term), want, rtol=1e-12)


# ---------------------------------------------------------------------- refusals


@pytest.mark.parametrize("kind", list(TERMS))
def test_refuses_mismatched_shapes(kind):
    u, v = random_points(GRID, N)
    with pytest.raises(ValueError, match=r"shape mismatch: .*`sigma` \(12,\)"):
        TERMS[kind](em.DirectFT(GRID, u, v), np.ones(N), np.ones(N - 1))


@pytest.mark.parametrize("kind", list(TERMS))
def test_refuses_non_positive_sigma(kind):
    u, v = random_points(GRID, N)
    sigma = np.ones(N)
    sigma[3] = 0.0
    with pytest.raises(ValueError, match=r"`sigma`"):
        TERMS[kind](em.DirectFT(GRID, u, v), np.ones(N), sigma)


@pytest.mark.parametrize("kind", list(TERMS))
def test_refuses_non_finite_values(kind):
    u, v = random_points(GRID, N)
    values = np.ones(N, complex)
    values[4] = np.nan
    with pytest.raises(ValueError, match=r"non-finite .* drop or flag those rows"):
        TERMS[kind](em.DirectFT(GRID, u, v), values, np.ones(N))


@pytest.mark.parametrize("kind", list(TERMS))
def test_refuses_points_that_are_not_one_per_row(kind):
    u, v = random_points(GRID, N, shape=(N, 3))
    with pytest.raises(ValueError, match=r"points of shape \(13, 3\) but .* \(n,\)"):
        TERMS[kind](em.DirectFT(GRID, u, v), np.ones(N), np.ones(N))


# Refusals the suite's runtime type checker would pre-empt: run as users run them.
NAMES = {"pvis": "PolVisChi2", "m": "FracPolChi2", "vvis": "StokesVChi2"}
NOT_A_FORWARD = {
    k: unchecked_error(f"em.{c}(np.ones(3), np.ones(3), np.ones(3))", "TypeError")
    for k, c in NAMES.items()
}
_SETUP = (
    "g = em.ImageGrid(8, 8, em.uas_to_rad(5.0))\n"
    "x = np.linspace(1e8, 1e9, 3, dtype=np.float32)\n"
    "f = em.DirectFT(g, x, 2 * x)\n"
    "t = em.{}(f, np.ones(3), np.ones(3))"
)
WRONG_VIS = {
    k: (
        unchecked_error("t.chi2_from_vis(np.ones(3, complex))", "ValueError",
                        _SETUP.format(c)),
        unchecked_error("t.residuals_from_vis(np.ones((3, 3), complex))",
                        "ValueError", _SETUP.format(c)),
    )
    for k, c in NAMES.items()
}  # fmt: skip


@pytest.mark.parametrize("kind", list(TERMS))
def test_refuses_a_non_forward_model(kind, unchecked):
    msg = unchecked[NOT_A_FORWARD[kind]]
    assert msg is not None and "`forward` must be a forward model" in msg, msg
    assert f"{NAMES[kind]}.from_data(data, grid" in msg, msg


@pytest.mark.parametrize("kind", ["pvis", "vvis"])
def test_refuses_implausible_amplitudes(kind):
    u, v = random_points(GRID, N)
    with pytest.raises(ValueError, match=r"above the 1e\+06 Jy"):
        TERMS[kind](em.DirectFT(GRID, u, v), np.full(N, 3e6), np.ones(N))


@pytest.mark.parametrize("kind", list(TERMS))
def test_refuses_a_stokes_i_image(kind):
    term = make_term(kind)
    with pytest.raises(ValueError, match=rf"{type(term).__name__} needs the four"):
        term(stokes_image()[0])


@pytest.mark.parametrize("kind", list(TERMS))
def test_refuses_visibilities_of_the_wrong_shape(kind, unchecked):
    chi2, residuals = WRONG_VIS[kind]
    msg = unchecked[chi2]
    assert msg is not None and "needs the Stokes visibilities" in msg, msg
    assert "shape (3, 4)" in msg, msg
    msg = unchecked[residuals]
    assert msg is not None and "`vis` has shape (3, 3)" in msg, msg


@pytest.mark.parametrize("kind", list(TERMS))
def test_sharded_from_data_refuses_terms_that_add_or_drop_rows(kind):
    """`ShardedChi2.from_data` splits by data rows; these terms add the conjugate
    baselines or drop flagged rows: refused, naming the way that works."""
    data = pol_rows()
    data.take = lambda rows: pol_rows_taken(data, rows)
    with pytest.raises(
        ValueError, match=r"cannot split it by data rows.*ShardedChi2\(term, mesh\)"
    ):
        em.ShardedChi2.from_data(TERMS[kind], data, GRID, mesh=mesh_of(2))
    # What works: build the term, then wrap it.
    term = TERMS[kind].from_data(data, GRID)
    x = jnp.asarray(stokes_image())
    assert_allclose(
        _val(x, em.ShardedChi2(term, mesh_of(2))), _val(x, term), rtol=1e-14
    )


@pytest.mark.parametrize("kind", list(TERMS))
def test_from_data_refuses_stokes_i_data(kind):
    u, v = random_points(GRID, N)
    data = em.VisData(
        u, v, np.ones(N), np.ones(N), np.zeros(N), np.zeros(N, int),
        np.ones(N, int), station_names=("A", "B"), freq=230e9,
    )  # fmt: skip
    with pytest.raises(
        TypeError, match=r"must be a polarimetric data set .*PolVisData"
    ):
        TERMS[kind].from_data(data, GRID)


@pytest.mark.parametrize("kind", list(TERMS))
def test_from_data_refuses_data_with_every_row_flagged(kind):
    data = pol_rows()
    data._vis[:, 1:] = np.nan
    with pytest.raises(ValueError, match=r"no row of `data` has .* \(all flagged\)"):
        TERMS[kind].from_data(data, GRID)
