"""Bessel functions of the first kind, `J_0 ... J_M`, accurate in float64.

`jax.scipy.special.bessel_jn` (jax 0.10) returns NaN at 0 and wrong values beyond
`z ≈ 10`, so the geometric models use their own:

- every `|z| ≤ 6` (float64; `≤ 2` in float32): the power series
  `J_m(z) = (z/2)^m Σ_{k ≤ 20} (−z²/4)^k / (k! (k + m)!)` (Horner in `z²/4`; the
  omitted terms are below 3e-18, the rounding of its largest term below 2e-15, in
  float32 below 1e-7: its terms are then at most 1). This is what the m-rings of
  EHT data need (`z = 2π R ρ ≈ 5` for a 42 µas ring at 8 Gλ), and cheaper than
  the table below, which needs a gather (docs/benchmarks.md). One branch for the
  whole call (`lax.cond` on `max |z|`; under `vmap` with a batched argument both
  run);
- otherwise, `|z| ≤ 400`: piecewise Taylor polynomials. `[0, 400]` is cut into intervals of
  width 2; on each, `J_m` is its Taylor series of degree 18 about the interval's
  centre `c` (remainder below `1/19! ≈ 8e-18`, since every derivative of `J_m` is
  bounded by 1). The coefficients `J_m^{(k)}(c)/k!` come from
  `J_m^{(k)} = 2^{−k} Σ_j (−1)^j C(k, j) J_{m−k+2j}` (no error growth), with the
  values `J_n(c)` from the trapezoid rule on Bessel's integral
  `J_n(c) = (1/π) ∫_0^π cos(n τ − c sin τ) dτ` with 1024 nodes over the period
  (its error `Σ_{k≠0} ±J_{n + 1024 k}(c)` is negligible for `n ≤ 40`,
  `c < 400`), computed once per order in numpy (float64) and cached. Evaluating
  is a table look-up and 18 multiply-adds per value (tested below 2e-14 of
  `scipy.special.jv`);
- `|z| > 400`: Hankel's asymptotic expansion (24 terms each of `P` and `Q`),
  below 1e-14 there for `m ≤ 20`; computed only when some argument of the call
  needs it (`lax.cond`; under `vmap` over the arguments both branches run).

Both are smooth in `z` (the Taylor pieces join within their error), and the
derivative is given by `J_m' = (J_{m−1} − J_{m+1})/2` (a custom JVP), so it is as
accurate. Orders above `MAX_ORDER` are refused by the models.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float


#: Highest order the two methods are tested to (the asymptotic series is not
#: accurate at `|z| = 400` far beyond it).
MAX_ORDER = 20
_SWITCH = 400.0
_HANKEL_TERMS = 24
_WIDTH = 2.0  # Taylor intervals [2i, 2i + 2), centres 2i + 1
_INTERVALS = int(_SWITCH / _WIDTH)
_DEGREE = 18
_TABLE_NODES = 1024  # trapezoid nodes over the period, for the table's values
_SERIES_TERMS = 20  # power series: k = 0..20
#: the largest |z| the power series is used for, by dtype (its rounding error
#: grows with its largest term, about e^{|z|}/(2π|z|))
_SERIES_MAX = {np.dtype(np.float64): 6.0, np.dtype(np.float32): 2.0}


def _trapezoid_jn(n_max: int, z: np.ndarray) -> np.ndarray:
    """`J_0(z) ... J_{n_max}(z)` (rows) at `z ≥ 0` by the trapezoid rule on
    Bessel's integral (numpy, float64): the table's exact values."""
    k = np.arange(_TABLE_NODES // 2 + 1)
    tau = 2.0 * np.pi * k / _TABLE_NODES
    w = np.full(k.size, 2.0 / _TABLE_NODES)
    w[0] = w[-1] = 1.0 / _TABLE_NODES
    zs = z[:, None] * np.sin(tau)[None, :]
    out = np.empty((n_max + 1, z.size))
    for n in range(n_max + 1):
        out[n] = np.cos(n * tau[None, :] - zs) @ w
    return out


@functools.cache
def _taylor_table(order: int) -> np.ndarray:
    """`J_m^{(k)}(c_i) / k!` for `m = 0..order`, the interval centres `c_i` and
    `k = 0.._DEGREE`: shape `(order + 1, _INTERVALS, _DEGREE + 1)`, float64."""
    centres = _WIDTH * (np.arange(_INTERVALS) + 0.5)
    jn = _trapezoid_jn(order + _DEGREE, centres)

    def j(n):  # J_n for any integer n: J_{−n} = (−1)^n J_n
        return jn[n] if n >= 0 else (-1.0) ** n * jn[-n]

    table = np.empty((order + 1, _INTERVALS, _DEGREE + 1))
    for m in range(order + 1):
        for k in range(_DEGREE + 1):
            d = sum(
                (-1.0) ** i * math.comb(k, i) * j(m - k + 2 * i) for i in range(k + 1)
            )
            table[m, :, k] = d / (2.0**k * math.factorial(k))
    table.setflags(write=False)
    return table


def _hankel_coefficients(order: int) -> np.ndarray:
    """`a_k(m) = Π_{j=1..k} (4m² − (2j − 1)²) / (k! 8^k)` for `m = 0..order`
    (rows) and `k < 2 * terms` (columns)."""
    mu = 4.0 * np.arange(order + 1, dtype=np.float64) ** 2
    a = [np.ones(order + 1)]
    for k in range(1, 2 * _HANKEL_TERMS):
        a.append(a[-1] * (mu - (2 * k - 1) ** 2) / (8.0 * k))
    return np.stack(a, axis=1)


def bessel_j(order: int, z: Float[Array, "*shape"]) -> Float[Array, " m *shape"]:
    """`J_0(z) ... J_order(z)` stacked on a new leading axis, differentiable in
    `z` (`J_m' = (J_{m−1} − J_{m+1})/2`, from one evaluation to order `M + 1`).

    **Arguments:**

    - `order`: the highest order `M` (a Python integer, `0 ≤ M ≤ MAX_ORDER`).
    - `z`: real arguments, any shape (float32 or float64).

    **Returns:** shape `(M + 1, *z.shape)`, the dtype of `z`.
    """
    return _bessel(order, jnp.asarray(z))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _bessel(order: int, z):
    return _evaluate(order, z)


@_bessel.defjvp
def _bessel_jvp(order: int, primals, tangents):
    (z,), (dz,) = primals, tangents
    j = _evaluate(order + 1, z)
    below = jnp.concatenate([-j[1:2], j[:order]])  # J_{m−1}, J_{−1} = −J_1
    deriv = 0.5 * (below - j[1 : order + 2])
    return j[: order + 1], deriv * dz[None]


@functools.partial(jax.jit, static_argnums=0)
def _evaluate(order: int, z):
    z = jnp.asarray(z)
    limit = _SERIES_MAX.get(np.dtype(z.dtype), 0.0)
    if z.size == 0 or limit == 0.0:
        return _general(order, z)
    return jax.lax.cond(
        jnp.max(jnp.abs(z)) <= limit,
        lambda: _power_series(order, z),
        lambda: _general(order, z),
    )


def _power_series(order: int, z):
    """`J_0 ... J_order` by the power series about 0 (for `|z|` up to
    `_SERIES_MAX`): `J_m(z) = h^m Σ_k (−1)^k h^{2k} / (k! (k + m)!)`, `h = z/2`
    (odd orders odd in `z`, as they should be)."""
    dtype = z.dtype
    h = z.reshape(1, -1) / 2
    h2 = h * h
    coef = np.array(
        [
            [(-1.0) ** k / (math.factorial(k) * math.factorial(k + m))
             for k in range(_SERIES_TERMS + 1)]
            for m in range(order + 1)
        ]
    )  # fmt: skip
    acc = jnp.broadcast_to(np.asarray(coef[:, -1:], dtype), (order + 1, h.shape[1]))
    for k in reversed(range(_SERIES_TERMS)):
        acc = acc * h2 + np.asarray(coef[:, k : k + 1], dtype)
    powers = [jnp.ones_like(h)]
    for _ in range(order):
        powers.append(powers[-1] * h)
    return (acc * jnp.concatenate(powers)).astype(dtype).reshape((order + 1, *z.shape))


def _general(order: int, z):
    """`J_0 ... J_order` at any `z`: the Taylor table for `|z| ≤ 400`, Hankel's
    expansion beyond."""
    dtype = z.dtype
    shape = z.shape
    z = z.reshape(1, -1)  # (1, n): orders along the leading axis
    m = np.arange(order + 1).reshape(-1, 1)
    az = jnp.abs(z)
    small = az <= _SWITCH
    # |z| ≤ 400: the Taylor polynomial of the interval holding |z| (a gather of
    # its coefficients, then Horner), J_m(−z) = (−1)^m J_m(z) applied below.
    idx = jnp.clip(jnp.floor(az / _WIDTH), 0, _INTERVALS - 1).astype(jnp.int32)
    t = az - (_WIDTH * idx.astype(dtype) + 0.5 * _WIDTH)
    # One contiguous row of (M+1)·(degree+1) coefficients per point: a row gather
    # (an element-wise gather is many times slower on CPU).
    table = np.ascontiguousarray(np.moveaxis(_taylor_table(order), 1, 0))
    coef = jnp.take(jnp.asarray(table, dtype), idx[0], axis=0)  # (n, M+1, D+1)
    near = coef[..., _DEGREE]  # (n, M+1)
    for k in reversed(range(_DEGREE)):
        near = near * t[0][:, None] + coef[..., k]
    near = near.T
    # |z| > 400: Hankel's expansion, only computed when some argument needs it (a
    # batch-level branch; under `vmap` with a batched argument both branches run).
    far = jax.lax.cond(
        jnp.any(~small),
        lambda: _hankel(order, jnp.where(small, _SWITCH + 1.0, az), dtype),
        lambda: jnp.zeros((order + 1, z.shape[1]), dtype),
    )
    out = jnp.where(small, near, far)
    out = jnp.where(z < 0, np.asarray((-1.0) ** m, dtype) * out, out).astype(dtype)
    return out.reshape((order + 1, *shape))


def _hankel(order: int, zl, dtype):
    """Hankel's asymptotic expansion of `J_0 ... J_order` at `zl > 400`, shape
    `(1, n)` → `(order + 1, n)`."""
    m = np.arange(order + 1).reshape(-1, 1)
    # The series in t = 400/|z| ≤ 1, with coefficients a_k / 400^k (small: no
    # overflow in float32, where a_k alone exceeds its range).
    t = _SWITCH / zl
    t2 = t * t
    a = _hankel_coefficients(order) / _SWITCH ** np.arange(2 * _HANKEL_TERMS)
    sign = (-1.0) ** np.arange(_HANKEL_TERMS)
    p_coef = np.asarray(a[:, 0::2] * sign, dtype)  # (M+1, terms)
    q_coef = np.asarray(a[:, 1::2] * sign, dtype)
    p = jnp.zeros((order + 1, zl.shape[1]), dtype)
    q = jnp.zeros((order + 1, zl.shape[1]), dtype)
    for j in reversed(range(_HANKEL_TERMS)):  # Horner in t²
        p = p * t2 + p_coef[:, j : j + 1]
        q = q * t2 + q_coef[:, j : j + 1]
    # cos, sin of χ_m = |z| − (m/2 + 1/4)π from one cos and sin of |z|.
    phi = (0.5 * m + 0.25) * np.pi
    cz, sz = jnp.cos(zl), jnp.sin(zl)
    cos_chi = cz * np.asarray(np.cos(phi), dtype) + sz * np.asarray(np.sin(phi), dtype)
    sin_chi = sz * np.asarray(np.cos(phi), dtype) - cz * np.asarray(np.sin(phi), dtype)
    return jnp.sqrt(2.0 / (np.pi * zl)) * (p * cos_chi - q * t * sin_chi)
