"""Split R̂ and ESS (`Samples.rhat`, `Samples.ess`) against what theory says of
draws whose autocorrelation is known: iid draws (ESS = n), AR(1) chains
(ESS = n (1 − φ)/(1 + φ)), and chains that disagree (R̂ ≫ 1)."""

import numpy as np
import pytest

from eqmodels._posterior._diagnostics import ess, split_rhat


def ar1(rng, chains, n, phi, k=1):
    x = np.empty((chains, n, k))
    x[:, 0] = rng.normal(size=(chains, k)) / np.sqrt(1 - phi**2)
    e = rng.normal(size=(chains, n, k))
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + e[:, t]
    return x


def test_iid_draws():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 4000, 3))
    r, n = split_rhat(x), ess(x)
    assert r.shape == n.shape == (3,)
    np.testing.assert_allclose(r, 1.0, atol=0.01)
    np.testing.assert_allclose(n / x[..., 0].size, 1.0, atol=0.12)


@pytest.mark.parametrize("phi", [0.5, 0.9])
def test_ar1_effective_sample_size(phi):
    rng = np.random.default_rng(1)
    x = ar1(rng, 4, 20000, phi, k=2)
    expected = x[..., 0].size * (1 - phi) / (1 + phi)
    np.testing.assert_allclose(ess(x) / expected, 1.0, atol=0.15)
    np.testing.assert_allclose(split_rhat(x), 1.0, atol=0.01)


def test_disagreeing_chains_have_large_rhat():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 1000))
    x[3] += 3.0
    assert split_rhat(x) > 1.3
    # A trend inside each chain (the halves disagree) shows too.
    y = rng.normal(size=(4, 1000)) + np.linspace(0, 4, 1000)
    assert split_rhat(y) > 1.3


def test_shapes_and_errors():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 100, 3, 2))
    assert split_rhat(x).shape == ess(x).shape == (3, 2)
    with pytest.raises(ValueError, match="at least 4 draws"):
        split_rhat(rng.normal(size=(2, 3)))


def test_rhat_and_ess_of_a_function_of_the_draws():
    """`Samples.rhat(of)` / `ess(of)`: the diagnostics of `of(draw)` at every draw
    (e.g. the pixels of a reparametrised image), against numpy applying the same
    function to the stacked leaves; `of=None` is the positions."""
    import equinox as eqx
    import jax.numpy as jnp

    import eqmodels as em

    class Draw(eqx.Module):
        a: jnp.ndarray
        b: jnp.ndarray

        def derived(self):
            return jnp.exp(self.a) * self.b[..., None]

    rng = np.random.default_rng(4)
    a = ar1(rng, 4, 300, 0.7, k=3)  # (4, 300, 3)
    b = rng.normal(size=(4, 300))
    a[2] += 0.5  # one chain off: R̂ well above 1
    samples = em.Samples(
        Draw(jnp.asarray(a), jnp.asarray(b)),
        jnp.asarray(np.concatenate([a, b[..., None]], axis=-1)),
        jnp.zeros((4, 300)),
        {},
    )
    expected = np.exp(a) * b[..., None]  # numpy, the same formula
    np.testing.assert_allclose(
        samples.rhat(lambda m: m.derived()), split_rhat(expected), rtol=1e-12
    )
    np.testing.assert_allclose(
        samples.ess(lambda m: m.derived()), ess(expected), rtol=1e-12
    )
    np.testing.assert_allclose(samples.rhat(lambda m: m.a), split_rhat(a), rtol=1e-12)
    assert samples.rhat(lambda m: m.a).max() > 1.05
    np.testing.assert_array_equal(
        samples.rhat(), split_rhat(np.concatenate([a, b[..., None]], axis=-1))
    )
    # (the tests' runtime type-checker may answer first, naming the argument)
    with pytest.raises(TypeError, match="`of` must be a function|parameter 'of'"):
        samples.rhat("log_image")
    with pytest.raises(TypeError, match="`of` must return one array"):
        samples.ess(lambda m: (m.a, m.b))
