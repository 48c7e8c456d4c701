"""The NUFFT's second backend, nufftax (pure JAX, runs on GPUs): same conventions as
jax-finufft, checked against the dense transform on the CPU (values and gradients to
the tolerance), under jit, vmap, float32 and device sharding."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems.terms import DATA_TERMS, GRID, IMAGES, products
from tests.unchecked import unchecked_error


pytest.importorskip("nufftax")


def test_auto_picks_finufft_on_cpu():
    u, v = products()["vis"][:2]
    assert em.NUFFT(GRID, u, v).backend == "finufft"
    assert em.NUFFT(GRID, u, v, backend="nufftax").backend == "nufftax"


@pytest.mark.parametrize("name", ["vis", "amp", "cphase", "logcamp"])
def test_nufftax_matches_direct(name):
    case = next(c for c in DATA_TERMS if c.name == name)
    u, v, value, sigma = products()[case.key]
    dense = case.cls(em.DirectFT(GRID, u, v), value, sigma)
    fast = case.cls(em.NUFFT(GRID, u, v, eps=1e-12, backend="nufftax"), value, sigma)
    f = eqx.filter_jit(jax.vmap(jax.value_and_grad(lambda x, t: t(x)), (0, None)))
    xs = jnp.asarray(IMAGES)
    (val, grad), (ref, ref_grad) = f(xs, fast), f(xs, dense)
    assert_allclose(val, ref, rtol=1e-10)
    assert_allclose(grad, ref_grad, rtol=1e-10)
    assert_allclose(fast.forward(xs[0]), dense.forward(xs[0]), rtol=1e-11)


def test_nufftax_float32_and_sharded():
    u, v, vis, sigma = products()["vis"]
    x32 = jnp.asarray(IMAGES[0], jnp.float32)
    fwd32 = em.NUFFT(
        GRID, u.astype(np.float32), v.astype(np.float32), backend="nufftax"
    )
    dense32 = em.DirectFT(GRID, u.astype(np.float32), v.astype(np.float32))
    assert fwd32(x32).dtype == jnp.complex64
    assert_allclose(fwd32(x32), dense32(x32), rtol=2e-5)
    term = em.VisChi2(em.NUFFT(GRID, u, v, backend="nufftax"), vis, sigma)
    sharded = em.ShardedChi2(term, Mesh(np.array(jax.devices()[:4]), ("rows",)))
    vg = eqx.filter_jit(jax.value_and_grad(lambda x, t: t(x)))
    x = jnp.asarray(IMAGES[1])
    (val, grad), (ref, ref_grad) = vg(x, sharded), vg(x, term)
    assert_allclose(val, ref, rtol=1e-14)
    assert_allclose(grad, ref_grad, rtol=1e-13)
    assert sharded.term.forward.at(u[:3], v[:3]).backend == "nufftax"


def test_backend_errors():
    u, v = products()["vis"][:2]
    with pytest.raises(ValueError, match="backend"):
        em.NUFFT(GRID, u, v, backend="cufinufft")
    import jax_finufft.options

    with pytest.raises(ValueError, match="opts"):
        em.NUFFT(GRID, u, v, backend="nufftax", opts=jax_finufft.options.Opts())


@pytest.mark.parametrize("backend", ["finufft", "nufftax"])
def test_empty_batches_have_empty_gradients(backend):
    """A zero-size batch of images: values, gradients and the transpose are empty
    arrays of the right shape (nufftax's spreader divided by the batch size)."""
    u, v, vis, sigma = products()["vis"]
    term = em.VisChi2(em.NUFFT(GRID, u, v, backend=backend), vis, sigma)
    xs = jnp.zeros((0, GRID.ny, GRID.nx))
    assert jax.vmap(term)(xs).shape == (0,)
    assert jax.vmap(jax.grad(term))(xs).shape == (0, GRID.ny, GRID.nx)
    fwd = term.forward
    transpose = jax.linear_transpose(fwd, jnp.zeros(GRID.shape))
    (adj,) = jax.vmap(transpose)(jnp.zeros((0,) + fwd.u.shape, jnp.complex128))
    assert adj.shape == (0, GRID.ny, GRID.nx)


_EPS_SETUP = "import jax; g = em.ImageGrid(8, 8, 1e-10); p = np.ones(3, np.float32)"
EPS_AS_STRING = unchecked_error(
    "em.NUFFT(g, p, p, eps='1e-6')", "TypeError", _EPS_SETUP
)
EPS_TRACED = unchecked_error(
    "jax.jit(lambda e: em.NUFFT(g, p, p, eps=e).eps)(1e-3)", "TypeError", _EPS_SETUP
)


def test_eps_as_a_float32_scalar_and_eps_errors(unchecked):
    """float32's floor `1e-6` given as a float32 scalar (9.99999997e-07) is
    accepted; a string, or an `eps` traced under `jit`, is refused naming why."""
    u, v = (x.astype(np.float32) for x in products()["vis"][:2])
    for eps in (np.float32(1e-6), jnp.float32(1e-6), 1e-6):
        assert em.NUFFT(GRID, u, v, eps=eps).eps == pytest.approx(1e-6, rel=1e-7)
    with pytest.raises(ValueError, match="below what float32"):
        em.NUFFT(GRID, u, v, eps=5e-7)
    msg = unchecked[EPS_AS_STRING]
    assert "must be a number" in msg, msg
    msg = unchecked[EPS_TRACED]
    assert "static" in msg, msg
