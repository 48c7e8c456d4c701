"""Helpers shared by the geometric models."""

import math

import jax.numpy as jnp
import numpy as np

from .._numerics import safe_sqrt
from .._validation import check_radians, is_concrete, resolve_float_dtype, scalar_leaf
from ._bessel import bessel_j


def model_dtype(dtype):
    """The models' float dtype (default: JAX's default float)."""
    return resolve_float_dtype(jnp.result_type(float) if dtype is None else dtype)


def size_leaf(name: str, x, dtype, *, positive: bool = True):
    """A positive angular size (radians) as a 0-d leaf, refused when it looks like
    µas."""
    leaf = scalar_leaf(name, x, dtype, positive=positive)
    check_radians(name, leaf)
    return leaf


def points(u, v, dtype):
    """`u`, `v` as arrays of `dtype`, of one shape."""
    u = jnp.asarray(u, dtype)
    v = jnp.asarray(v, dtype)
    if u.shape != v.shape:
        raise ValueError(
            f"`u` and `v` must have one shape, got {u.shape} and {v.shape}."
        )
    return u, v


def polar(a, b):
    """`(ρ, e^{iψ})` of the point `(a, b)` = `ρ (sin ψ, cos ψ)` (a position angle
    east of north): `e^{iψ} = (b + i a)/ρ`, 1 at the origin (derivatives finite)."""
    r2 = a * a + b * b
    rho = safe_sqrt(r2)
    ok = r2 > 0
    safe = jnp.where(ok, rho, 1.0)
    c = jnp.where(ok, b / safe, 1.0)
    s = jnp.where(ok, a / safe, 0.0)
    return rho, c + 1j * s


def jinc(z):
    """`2 J_1(z)/z`, 1 at 0 (the unit disk's visibility), derivatives finite: its
    power series below `|z| = 1`, where `J_1 ≈ z/2` would lose digits to the
    Bessel function's absolute error (in float32 above all)."""
    small = jnp.abs(z) < 1.0
    zs = jnp.where(small, 1.0, z)
    big = 2.0 * bessel_j(1, zs)[1] / zs
    # Σ_k (−z²/4)^k / (k! (k+1)!), k ≤ 9 (the next term is below 1e-22 at |z| = 1)
    t = -0.25 * jnp.where(small, z, 0.0) ** 2
    series = jnp.zeros_like(t)
    for k in reversed(range(10)):
        series = series * t + 1.0 / (math.factorial(k) * math.factorial(k + 1))
    return jnp.where(small, series, big)


def soft_step(t, h):
    """The indicator of `t > 0`, as a linear ramp over `|t| < h/2` (`h > 0`: the
    fraction of a pixel of side `h` inside a straight edge at distance `t`); the
    sharp step where `h == 0`."""
    pos = h > 0
    ramp = jnp.clip(t / jnp.where(pos, h, 1.0) + 0.5, 0.0, 1.0)
    return jnp.where(pos, ramp, (t > 0).astype(t.dtype))


def refuse_zero_resolution(resolution, who: str) -> None:
    """A (concrete) resolution of 0 for a model with a feature of no width."""
    if is_concrete(resolution) and not float(np.max(resolution)) > 0:
        raise ValueError(
            f"`resolution` must be > 0 for {who}: its intensity is a line (a "
            "delta function across the ring), spread over `resolution` radians to "
            "be sampled; render it on a grid (`model()`, `resolution = psize`)."
        )
