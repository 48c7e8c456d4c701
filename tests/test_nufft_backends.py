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
from tests.test_terms import DATA_TERMS, GRID, IMAGES, products


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
