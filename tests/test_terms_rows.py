"""Data terms as arithmetic on visibilities: declared rows (`take_rows`, `pad_rows`),
`n_rows` as a leaf (data sets padded to one length share one compiled program),
station pairs and time slots on every row, shared transforms for subclasses and
users' terms, and what an objective holds."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems.m87 import DAY_100, DAY_101, load_day, M87_GRID, round1
from tests.problems.terms import DATA_TERMS, GRID, IMAGES, positive_image, products
from tests.toys import FluxDensityChi2, OwnCall


FORWARDS = ["direct", "separable", "nufft"]


# One jitted function for every call: terms of the same structure and shapes (a
# permutation of the rows, the same case in another test) share its program.
_VALUE_AND_GRAD = eqx.filter_jit(jax.value_and_grad(lambda x, t: t(x)))


def _value_and_grad(term, x):
    return _VALUE_AND_GRAD(x, term)


@pytest.mark.parametrize("forward", FORWARDS)
@pytest.mark.parametrize("case", DATA_TERMS, ids=str)
def test_take_rows_gathers_every_row_leaf(case, forward):
    """A permutation of the rows leaves the value unchanged; a subset with its own
    `n_rows` equals the term built from that subset's data; a traced index works."""
    term = case.build(forward)
    n = term.rows
    u, v, value, sigma = products()[case.key]
    rng = np.random.default_rng(3)
    perm = rng.permutation(n)
    x = jnp.asarray(IMAGES[0])
    val, grad = _value_and_grad(term, x)
    pval, pgrad = _value_and_grad(term.take_rows(perm), x)
    assert_allclose(pval, val, rtol=1e-13)
    assert_allclose(pgrad, grad, rtol=1e-13)
    sub = np.sort(perm[: n // 2])
    kw = {"eps": 1e-12} if forward == "nufft" else {}
    direct = case.cls(
        em.make_forward(forward, GRID, u[sub], v[sub], **kw), value[sub], sigma[sub]
    )
    taken = term.take_rows(sub, n_rows=sub.size)
    assert int(taken.n_rows) == sub.size and taken.rows == sub.size
    dval, dgrad = _value_and_grad(direct, x)
    tval, tgrad = _value_and_grad(taken, x)
    assert_allclose(tval, dval, rtol=1e-13)
    assert_allclose(tgrad, dgrad, rtol=1e-13)
    # The index may be traced (e.g. inside a sharded or vmapped program).
    traced = eqx.filter_jit(lambda t, i, x: t.take_rows(i, n_rows=i.size)(x))
    assert_allclose(traced(term, jnp.asarray(sub), x), dval, rtol=1e-13)


@pytest.mark.parametrize("forward", FORWARDS)
@pytest.mark.parametrize("case", DATA_TERMS, ids=str)
def test_pad_rows_adds_exactly_nothing(case, forward):
    term = case.build(forward)
    n = term.rows
    padded = term.pad_rows(n + 7)
    assert padded.rows == n + 7 and int(padded.n_rows) == int(term.n_rows)
    assert np.all(np.asarray(padded.weight)[n:] == 0.0)
    assert all(np.all(np.isfinite(np.asarray(getattr(padded, f)))) for f in ("weight",))
    x = jnp.asarray(IMAGES[2])
    val, grad = _value_and_grad(term, x)
    pval, pgrad = _value_and_grad(padded, x)
    assert_allclose(pval, val, rtol=1e-14)
    assert_allclose(pgrad, grad, rtol=1e-13)
    assert term.pad_rows(n) is term


@pytest.mark.parametrize("length", [3, 4])
def test_pad_rows_of_a_term_on_points_with_more_axes(length):
    """A `VisChi2` on points shaped `(n, k)`: rows are the leading axis. The
    padding mask was broadcast against the weight's last axis, zeroing a column
    of real visibilities (`length == k`: a silently wrong χ²) or failing."""
    rng = np.random.default_rng(0)
    lim = 0.4 / GRID.psize
    u, v = rng.uniform(-lim, lim, (2, 2, 3))
    fwd = em.DirectFT(GRID, u, v)
    x = jnp.asarray(IMAGES[2])
    vis = np.asarray(fwd(x)) * (1 + 0.1 * rng.standard_normal((2, 3)))
    term = em.VisChi2(fwd, vis, np.full((2, 3), 0.1))
    padded = term.pad_rows(length)
    np.testing.assert_array_equal(np.asarray(padded.weight)[:2], term.weight)
    assert np.all(np.asarray(padded.weight)[2:] == 0.0)
    val, grad = _value_and_grad(term, x)
    pval, pgrad = _value_and_grad(padded, x)
    assert_allclose(pval, val, rtol=1e-14)
    assert_allclose(pgrad, grad, rtol=1e-13)


def test_row_errors():
    term = DATA_TERMS[1].build()
    n = term.rows
    with pytest.raises(ValueError, match="length"):
        term.pad_rows(n - 1)
    with pytest.raises(TypeError, match="length"):
        term.pad_rows(float(n + 1))
    with pytest.raises(ValueError, match=r"index.*\[0, "):
        term.take_rows([0, n])
    with pytest.raises(TypeError, match="flatnonzero"):
        term.take_rows(np.ones(n, bool))
    with pytest.raises(ValueError, match="n_rows"):
        term.take_rows([0, 1], n_rows=0)
    u, v, value, sigma = products()["amp"]
    fwd = em.DirectFT(GRID, u, v)
    with pytest.raises(ValueError, match="stations.*station pair per leg"):
        em.AmpChi2(fwd, value, sigma, stations=np.zeros((u.size, 3), int))
    with pytest.raises(TypeError, match="time_index.*integer"):
        em.AmpChi2(fwd, value, sigma, time_index=np.zeros(u.size))
    with pytest.raises(ValueError, match="time_index.*one time slot per row"):
        em.AmpChi2(fwd, value, sigma, time_index=np.zeros(u.size + 1, int))
    with pytest.raises(ValueError, match=">= 0"):
        em.AmpChi2(fwd, value, sigma, time_index=np.full(u.size, -2))
    # Unknown labels are -1, of the right shapes.
    t = em.ClosurePhaseChi2(
        em.DirectFT(GRID, *products()["cphase"][:2]), *products()["cphase"][2:]
    )
    assert t.stations.shape == (t.rows, 3, 2) and np.all(np.asarray(t.stations) == -1)
    assert t.time_index.shape == (t.rows,) and np.all(np.asarray(t.time_index) == -1)


def _products(data):
    return (
        em.amplitudes(data),
        em.closure_phases(data),
        em.log_closure_amplitudes(data),
        em.closure_amplitudes(data),
        em.bispectra(data),
    )


def test_rows_carry_station_pairs_and_time_slots():
    """Every leg's station pair is oriented as its (u, v): the data row of that
    baseline has (u, v) equal to the leg's when walked forwards and its negative
    when walked backwards; every row's time slot indexes the data's timestamps."""
    data = load_day(DAY_100)
    a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
    t, du, dv = np.asarray(data.time), np.asarray(data.u), np.asarray(data.v)
    lookup = {(a1[k], a2[k], t[k]): (du[k], dv[k]) for k in range(data.n_rows)}
    stamps = data.timestamps()
    vis_term = em.VisChi2.from_data(data, M87_GRID)
    assert_allclose(np.asarray(vis_term.stations), np.stack([a1, a2], 1), rtol=0)
    assert_allclose(stamps[np.asarray(vis_term.time_index)], t, rtol=0)
    classes = (
        em.AmpChi2,
        em.ClosurePhaseChi2,
        em.LogClosureAmpChi2,
        em.ClosureAmpChi2,
        em.BispectrumChi2,
    )
    for prod, cls in zip(_products(data), classes):
        term = cls.from_data(prod, M87_GRID)
        pairs = np.asarray(term.stations).reshape(term.rows, -1, 2)
        u = np.asarray(prod.u).reshape(term.rows, -1)
        v = np.asarray(prod.v).reshape(term.rows, -1)
        times = stamps[np.asarray(term.time_index)]
        assert_allclose(times, np.asarray(prod.time), rtol=0)
        for r in range(term.rows):
            for leg, (a, b) in enumerate(pairs[r]):
                sign = 1.0 if a < b else -1.0
                bu, bv = lookup[(min(a, b), max(a, b), times[r])]
                assert (u[r, leg], v[r, leg]) == (sign * bu, sign * bv)
        # The closure legs walk a closed polygon through the row's stations.
        if pairs.shape[1] == 3:
            assert np.all(pairs[:, :, 1] == np.roll(pairs[:, :, 0], -1, axis=1))
        assert set(np.unique(pairs)) <= set(range(data.n_stations))


class MyAmp(em.AmpChi2):
    """A subclass of a built-in term: a robust (Cauchy) amplitude χ²."""

    report_name = "myamp"

    def chi2_from_vis(self, vis):
        d = jnp.abs(vis) - self.amp
        return jnp.sum(jnp.log1p(self.weight * d * d)) / self.n_rows


@pytest.mark.parametrize("forward", ["direct", "nufft"])
def test_subclasses_and_user_terms_share_the_transform(forward):
    kw = {"eps": 1e-12} if forward == "nufft" else {}
    u, v, amp, sigma = products()["amp"]
    cu, cv, cph, csig = products()["cphase"]
    mine = MyAmp(em.make_forward(forward, GRID, u, v, **kw), amp, sigma)
    user = FluxDensityChi2(em.make_forward(forward, GRID, u, v, **kw), amp**2, sigma)
    cphase = em.ClosurePhaseChi2(
        em.make_forward(forward, GRID, cu, cv, **kw), cph, csig
    )
    own = OwnCall(em.make_forward(forward, GRID, u, v, **kw), amp, sigma)
    obj = 0.5 * mine + user + cphase + own
    assert obj.names == ("myamp", "FluxDensityChi2", "cphase", "amp")
    (group,) = obj.shared
    assert group.members == (0, 1, 2)  # the `__call__` override is not shared
    assert obj.terms[3].forward is not None
    assert all(obj.terms[m].forward is None for m in group.members)
    x = jnp.asarray(positive_image(seed=4))
    separate = [mine, user, cphase, own]
    vals = eqx.filter_jit(lambda x, o: o.values(x))(x, obj)
    for val, term in zip(vals, separate):
        assert_allclose(val, term(x), rtol=1e-12 if forward == "nufft" else 1e-13)
    assert_allclose(vals[3], 2 * em.AmpChi2(own.forward, amp, sigma)(x), rtol=1e-14)
    g = eqx.filter_jit(jax.grad(lambda x, o: o(x)))(x, obj)
    g_ref = jax.grad(lambda x: sum(w * t(x) for w, t in zip([0.5, 1, 1, 1], separate)))(
        x
    )
    assert_allclose(g, g_ref, rtol=1e-11 if forward == "nufft" else 1e-13)
    with pytest.raises(ValueError, match="shared transform"):
        obj.terms[0](x)


def test_objective_residuals():
    """`Objective.residuals` square-sums to the weighted data terms."""
    by_name = {c.name: c for c in DATA_TERMS}
    amp, cphase, logcamp = (by_name[k].build() for k in ("amp", "cphase", "logcamp"))
    obj = 0.2 * amp + cphase + 3 * logcamp
    x = jnp.asarray(IMAGES[1])
    r = eqx.filter_jit(lambda x, o: o.residuals(x))(x, obj)
    assert r.ndim == 1
    assert_allclose(jnp.sum(r * r), obj(x), rtol=1e-13)
    with pytest.raises(TypeError, match="sum of squares"):
        (obj + em.TV(GRID)).residuals(x)
    negative = jnp.array([1.0, -1.0, 1.0])
    with pytest.raises(ValueError, match="`weights` must be >= 0"):
        obj.with_weights(negative)
    # Set behind the checks' back, residuals still refuse them (sqrt(w)).
    with pytest.raises(ValueError, match="non-negative"):
        eqx.tree_at(lambda o: o.weights, obj, negative).residuals(x)


def _leaf_bytes(tree) -> int:
    return sum(x.nbytes for x in jax.tree_util.tree_leaves(tree) if eqx.is_array(x))


@pytest.mark.parametrize("forward", FORWARDS)
def test_objective_holds_only_shared_transforms_and_rows(forward):
    """Byte accounting of the round-1 objective: the shared transform, each data
    term's per-row leaves, `n_rows` and `index_key`, the gathers, regularizers and weights —
    nothing else (no member keeps its own forward model)."""
    data = load_day(DAY_100)
    terms, obj = round1(data, forward)
    (group,) = obj.shared
    rows = sum(
        _leaf_bytes([getattr(t, f) for f in t.row_fields])
        + t.n_rows.nbytes
        + t.index_key.nbytes
        for t in obj.terms[:3]
    )
    accounted = (
        _leaf_bytes(group) + rows + _leaf_bytes(obj.terms[3:]) + obj.weights.nbytes
    )
    assert _leaf_bytes(obj) == accounted
    own = _leaf_bytes([t.forward for t in terms])
    assert _leaf_bytes(group.forward) < own / 3  # 1070-leg models vs 216 points


def _two_days(shared_data):
    """M87 2017 04-10 and 04-11 lo, scan-averaged (04-11 from ../shared/data); without
    it, 04-10 and 04-10 without one station (two row counts, same structure)."""
    first = load_day(DAY_100)
    other = shared_data / DAY_101 if shared_data is not None else None
    if other is not None and other.is_file():
        return first, load_day(str(other))
    return first, first.flag_stations(["SM"])


@pytest.fixture
def maybe_shared(request):
    try:
        return request.getfixturevalue("shared_data")
    except pytest.skip.Exception:
        return None


@pytest.mark.slow
@pytest.mark.parametrize("forward", ["separable", "nufft"])
def test_vmap_over_data_sets_of_different_lengths(maybe_shared, forward):
    """Two real data sets padded to one length: one compiled program for the vmapped
    pair, and the padded objectives of either day run through one compiled program
    too; values equal the unpadded terms to 1e-14."""
    days = _two_days(maybe_shared)
    built = [round1(d, forward) for d in days]
    lengths = [tuple(t.rows for t in terms) for terms, _ in built]
    assert lengths[0] != lengths[1]
    stacked = em.pad_and_stack([obj for _, obj in built])
    x = jnp.asarray(em.GaussianImage(M87_GRID, 0.6, em.uas_to_rad(50.0))())
    traces = []

    @eqx.filter_jit
    def batch(objs, x):
        traces.append(1)
        return eqx.filter_vmap(lambda o: jnp.stack(o.values(x)))(objs)

    got = np.asarray(batch(stacked, x))
    assert len(traces) == 1
    for k, (terms, obj) in enumerate(built):
        want = [t(x) for t in terms] + list(obj.values(x)[3:])
        assert_allclose(got[k], np.array(want), rtol=1e-14)
    # Unbatched: each day padded to the common length, one compiled program.
    single = eqx.filter_jit(lambda o, x: (traces.append(1), o(x))[1])
    traces.clear()
    for k, (_, obj) in enumerate(built):
        one = jax.tree_util.tree_map(
            lambda a: a[k] if eqx.is_array(a) else a, stacked, is_leaf=eqx.is_array
        )
        assert_allclose(single(one, x), obj(x), rtol=1e-14)
    assert len(traces) == 1
    # Terms alone stack too.
    amp_stack = em.pad_and_stack([terms[0] for terms, _ in built])
    vals = eqx.filter_vmap(lambda t: t(x))(amp_stack)
    assert_allclose(vals, np.array([terms[0](x) for terms, _ in built]), rtol=1e-14)


def test_pad_and_stack_errors():
    amp, cphase = DATA_TERMS[1].build(), DATA_TERMS[3].build()
    with pytest.raises(ValueError, match="empty"):
        em.pad_and_stack([])
    with pytest.raises(TypeError, match="one class"):
        em.pad_and_stack([amp, cphase])
    with pytest.raises(ValueError, match="same terms"):
        em.pad_and_stack([amp + cphase, cphase + amp])
    with pytest.raises(ValueError, match="structure"):
        em.pad_and_stack([amp, DATA_TERMS[1].build("separable")])
    # The refusal names the first difference (from a review: one generic message).
    with pytest.raises(ValueError, match=r"First difference: `forward`: \w+FT vs"):
        em.pad_and_stack([amp, DATA_TERMS[1].build("separable")])
    small = em.ImageGrid(GRID.ny // 2, GRID.nx // 2, GRID.psize)
    n = amp.amp.shape[0]
    other = em.AmpChi2(
        em.DirectFT(small, amp.forward.u, amp.forward.v), amp.amp, np.ones(n)
    )
    with pytest.raises(ValueError, match=r"`forward.grid.ny` \(a static field\)"):
        em.pad_and_stack([amp, other])


def test_pad_and_stack_when_only_some_data_sets_share_a_transform():
    """A data term alone on points with none repeated gets no shared transform:
    the refusal says so, and `share=False` stacks."""
    data = em.load_uvfits(DAY_100).scan_average()
    grid = em.ImageGrid.from_fov(16, 160.0)
    sets = (data.select_stations(["AA", "AP", "SM"]), data)  # 1 triangle; 55

    def build(d, **kw):
        return em.Objective(
            [em.ClosurePhaseChi2.from_data(em.closure_phases(d), grid), em.TV(grid)],
            **kw,
        )

    with pytest.raises(ValueError, match="share=False"):
        em.pad_and_stack([build(d) for d in sets])
    objs = [build(d, share=False) for d in sets]
    x = jnp.asarray(em.GaussianImage(grid, 0.6, em.uas_to_rad(40.0))())
    vals = eqx.filter_vmap(lambda o: o(x))(em.pad_and_stack(objs))
    assert_allclose(vals, np.array([o(x) for o in objs]), rtol=1e-13)
