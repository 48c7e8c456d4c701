"""Test configuration: float64, strict promotion, eight virtual CPU devices."""

import os
import pathlib


# Must happen before jax initialises its backends.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402


jax.config.update("jax_enable_x64", True)
jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_rank_promotion", "raise")
# Strict dtype promotion is not enabled: it trips inside optax's update rules and in
# ordinary user code (`jnp.pi * jnp.arange(n)`) that the examples and training-loop
# tests run on purpose; dtype preservation is tested explicitly instead (float32
# tests of every model, term and image constructor).

# Property tests are deterministic by default (the same examples on every run, no
# example database), so CI never fails by chance; `HYPOTHESIS_PROFILE=explore`
# draws fresh random examples (and more of them) to hunt for new failures, whose
# reproductions then go into the tests as `@example`s.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", max_examples=500, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SHARED_DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
# The uvfits file shipped with the package (eqmodels/data), read by many tests.
TEST_DATA = pathlib.Path(__file__).resolve().parents[1] / "eqmodels" / "data"


@pytest.fixture(scope="session")
def shared_data():
    """`../shared/data` when it exists (skip otherwise)."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA
