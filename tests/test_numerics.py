"""`eqmodels._numerics.asarray`: the same arrays as `jnp.asarray`, without the
per-shape compilation jax 0.10 does for host data."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqmodels._numerics import asarray


CASES = [
    (np.linspace(0.0, 1.0, 7), None),
    (np.arange(5), None),
    (np.arange(5), jnp.int32),
    (np.arange(5, dtype=np.int32), jnp.float64),
    (np.array([True, False]), None),
    (np.float64(2.5), None),
    (np.complex64(1 + 2j), None),
    ([1.0, 2.0, 3.0], None),
    ((1, 2), None),
    ([[1, 2], [3, 4]], jnp.float32),
    (3, jnp.int32),
    (2.5, jnp.float32),
    (2.5, None),  # weakly typed, as jnp.asarray gives
    (True, None),
]


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape and a.weak_type == b.weak_type
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("x64", [True, False])
@pytest.mark.parametrize("x, dtype", CASES)
def test_same_array_as_jnp_asarray(x, dtype, x64):
    with jax.enable_x64(x64):
        with warnings.catch_warnings():  # jnp warns of float64 without x64
            warnings.simplefilter("ignore")
            expected = jnp.asarray(x, dtype)
        _same(asarray(x, dtype), expected)


def test_jax_arrays_and_tracers_pass_through():
    x = jnp.arange(3.0)
    _same(asarray(x), jnp.asarray(x))
    _same(asarray(x, jnp.float32), jnp.asarray(x, jnp.float32))
    out = jax.jit(lambda t: asarray([t, 2 * t]))(jnp.float64(1.5))
    np.testing.assert_array_equal(out, [1.5, 3.0])


def test_host_data_compile_nothing():
    events = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, *_, **__: events.append(name)
    )
    compiles = lambda: events.count("/jax/core/compile/backend_compile_duration")  # noqa: E731
    # The listener works: jnp.asarray of a shape never seen compiles.
    before = compiles()
    jnp.asarray(np.zeros(1234 + 7))
    assert compiles() == before + 1
    before = compiles()
    asarray(np.zeros(1234 + 9))
    asarray(np.arange(1234 + 11), jnp.int32)
    asarray([0.5] * (1234 + 13))
    asarray(7, jnp.int32)
    assert compiles() == before


def test_building_an_objective_compiles_nothing():
    """Data terms of shapes not seen before, a weight from a Python float and a
    sum that shares one transform compile nothing: building the round-1 objective
    compiled 8 small programs in a fresh process (the weight's staging and
    product, the shared points' reshapes, the terms' `index_key`), from a review."""
    import eqmodels as em

    events = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, *_, **__: events.append(name)
    )
    compiles = lambda: events.count("/jax/core/compile/backend_compile_duration")  # noqa: E731
    rng = np.random.default_rng(3)
    grid = em.ImageGrid(10, 10, em.uas_to_rad(5.0))
    lim = 0.2 / grid.psize
    n = 1231  # shapes no other test uses
    u, v = rng.uniform(-lim, lim, (2, n, 2))
    tri_u = np.stack([u[:, 0], u[:, 1], -(u[:, 0] + u[:, 1])], axis=1)
    tri_v = np.stack([v[:, 0], v[:, 1], -(v[:, 0] + v[:, 1])], axis=1)
    with jax.enable_x64(True):
        before = compiles()
        amp = em.AmpChi2(em.DirectFT(grid, u[:, 0], v[:, 0]), np.ones(n), np.ones(n))
        cp = em.ClosurePhaseChi2(
            em.DirectFT(grid, tri_u, tri_v), np.zeros(n), np.full(n, 0.1)
        )
        objective = 0.2 * amp + cp + 3 * em.TV(grid)
        assert compiles() == before
        # The listener works: evaluating it compiles.
        objective(np.ones(grid.shape) / grid.npix)
        assert compiles() > before
    assert objective.shared is not None
    np.testing.assert_array_equal(objective.weights, [0.2, 1.0, 3.0])
