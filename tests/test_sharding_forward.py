"""Forward models under `shard_map`: data rows sharded over 4 virtual CPU devices,
the image replicated. Value and gradient must equal the single-device ones."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems import FORWARDS, random_image, random_points


@pytest.fixture(scope="module")
def mesh():
    assert len(jax.devices()) >= 4, "conftest asks for 4 virtual CPU devices"
    return Mesh(np.array(jax.devices()[:4]), ("rows",))


def make_term(name, n=48, shape=(12, 15)):
    grid = em.ImageGrid(*shape, em.uas_to_rad(3.0))
    u, v = random_points(grid, n, seed=2)
    rng = np.random.default_rng(1)
    vis = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    sigma = rng.uniform(0.5, 1.5, n)
    return em.VisChi2(FORWARDS[name](grid, u, v), vis, sigma), grid


@pytest.mark.parametrize("name", FORWARDS)
def test_term_sharded_by_rows(mesh, name):
    """Every leaf of a term but its 0-d ones has the row axis first, so a whole
    term (module) shards by rows. NUFFT marks the replicated image as device-varying itself, so the
    gradient is right without a user-side `pcast`."""
    term, grid = make_term(name)
    img = jnp.asarray(random_image(grid))

    def local(t, x):
        # Each shard sums its rows but normalises by the (global, replicated)
        # n_rows: the psum of the shards is the global chi².
        return jax.lax.psum(t(x), "rows")

    # Its 0-d leaves (`n_rows`, `index_key`) are replicated.
    term_specs = jax.tree.map(lambda x: P("rows") if jnp.ndim(x) else P(), term)
    f = jax.shard_map(local, mesh=mesh, in_specs=(term_specs, P()), out_specs=P())
    val, grad = jax.jit(jax.value_and_grad(lambda x: f(term, x)))(img)
    ref_val, ref_grad = jax.value_and_grad(term)(img)
    assert_allclose(val, ref_val, rtol=1e-13)
    assert_allclose(grad, ref_grad, rtol=1e-13)


def test_nufft_built_inside_shard_map(mesh):
    """The NUFFT built per device from sharded points (tracers) also works."""
    term, grid = make_term("nufft", n=64)
    img = jnp.asarray(random_image(grid))
    n = term.n_rows

    def local(x, u, v, vis, w):
        d = em.NUFFT(grid, u, v)(x) - vis
        return jax.lax.psum(jnp.sum(w * (d.real**2 + d.imag**2)), "rows") / (2 * n)

    f = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(), P("rows"), P("rows"), P("rows"), P("rows")),
        out_specs=P(),
    )
    args = (term.forward.u, term.forward.v, term.vis, term.weight)
    val, grad = jax.value_and_grad(f)(img, *args)
    ref_val, ref_grad = jax.value_and_grad(term)(img)
    assert_allclose(val, ref_val, rtol=1e-13)
    assert_allclose(grad, ref_grad, rtol=1e-13)


@pytest.mark.parametrize("name", FORWARDS)
def test_sharded_forward_keeps_the_shape_of_points(mesh, name):
    """`ShardedForward` of closure triangles (points `(n, 3)`, 7 triangles: 21
    points over 4 devices, padded) returns visibilities and `u`, `v` in that shape,
    so a closure-phase term takes it as it takes the wrapped model."""
    grid = em.ImageGrid(12, 15, em.uas_to_rad(3.0))
    # Closed triangles (`u₁ + u₂ + u₃ = 0`), inside the grid's Nyquist limit.
    u, v = (0.5 * x.reshape(2, 7) for x in random_points(grid, 14, seed=4))
    u, v = (np.stack([x[0], x[1], -(x[0] + x[1])], axis=1) for x in (u, v))
    inner = FORWARDS[name](grid, u, v)
    sharded = em.ShardedForward(inner, mesh)
    img = jnp.asarray(random_image(grid))
    assert sharded.u.shape == sharded.v.shape == (7, 3)
    assert_allclose(sharded.u, inner.u, rtol=0)
    vis = sharded(img)
    assert vis.shape == (7, 3)
    # (the plain references compiled: op by op they cost more than the checks)
    want = eqx.filter_jit(lambda f, x: f(x))(inner, img)
    assert_allclose(vis, want, rtol=1e-12, atol=1e-12 * float(jnp.abs(vis).max()))
    rng = np.random.default_rng(0)
    cphase, sigma = rng.uniform(-1, 1, 7), rng.uniform(0.5, 1.5, 7)
    plain = em.ClosurePhaseChi2(inner, cphase, sigma)
    assert_allclose(
        em.ClosurePhaseChi2(sharded, cphase, sigma)(img),
        eqx.filter_jit(lambda t, x: t(x))(plain, img),
        rtol=1e-12,
    )


def test_gradient_on_an_explicit_mesh_under_jit_or_set_mesh():
    """`jax.make_mesh` gives Explicit axes: a gradient through `ShardedForward` is
    taken under `jit` or inside `jax.set_mesh(mesh)` (as sharding.md says), and
    equals the single-device one."""
    explicit = jax.make_mesh(
        (4,), ("rows",), axis_types=(jax.sharding.AxisType.Explicit,),
        devices=jax.devices()[:4],
    )  # fmt: skip
    grid = em.ImageGrid(8, 10, em.uas_to_rad(3.0))
    u, v = random_points(grid, 22, seed=5)
    inner = em.DirectFT(grid, u, v)
    sharded = em.ShardedForward(inner, explicit)
    img = jnp.asarray(random_image(grid))

    def loss(model, x):
        return jnp.sum(jnp.abs(model(x)) ** 2)

    grad_jit = jax.jit(jax.grad(loss, argnums=1))
    want = grad_jit(inner, img)  # the plain reference, compiled
    got_jit = grad_jit(sharded, img)
    with jax.set_mesh(explicit):
        got_eager = jax.grad(loss, argnums=1)(sharded, img)
    for got in (got_jit, got_eager):
        assert_allclose(got, want, rtol=1e-12, atol=1e-12 * float(jnp.abs(want).max()))
