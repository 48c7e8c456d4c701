"""2×2 coherency arithmetic: Stokes visibilities ↔ coherency matrices ↔ the four
correlations of a row, for circular, linear and mixed feeds.

Conventions (eht-imaging's, see docs/polarimetry.md):

- the sky's coherency in the circular basis, `C = [[RR, RL], [LR, LL]]` with
  `RR = I + V`, `LL = I − V`, `RL = Q + iU`, `LR = Q − iU`;
- a station with linear feeds sees `T C`, `T = [[1, 1], [−i, i]] / √2`
  (`X = (R + L)/√2`, `Y = −i (R − L)/√2`), so that on a baseline of two linear
  stations `XX = I + Q`, `YY = I − Q`, `XY = U + iV`, `YX = U − iV`; a baseline
  `(a, b)` sees `T_a C T_bᴴ` (mixed feeds: one `T` is the identity);
- the correlations of a row are stored in the order `C₀₀, C₁₁, C₀₁, C₁₀`
  (RR, LL, RL, LR; XX, YY, XY, YX).

Everything here is elementwise over leading axes and traceable.
"""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Complex

from ._validation import is_concrete


#: The feed kinds a station may have, in the order of their integer codes.
FEEDS: tuple[str, ...] = ("circular", "linear")

_SQRT_HALF = 1.0 / np.sqrt(2.0)
#: Circular → linear feed basis.
T_LINEAR = np.array([[1.0, 1.0], [-1j, 1j]]) * _SQRT_HALF


def matmul(a: Complex[Array, "*s 2 2"], b: Complex[Array, "*s 2 2"]):
    """Batched 2×2 product (written out: four terms per entry, no dot kernels)."""
    return jnp.stack(
        [
            jnp.stack(
                [
                    a[..., 0, 0] * b[..., 0, 0] + a[..., 0, 1] * b[..., 1, 0],
                    a[..., 0, 0] * b[..., 0, 1] + a[..., 0, 1] * b[..., 1, 1],
                ],
                axis=-1,
            ),
            jnp.stack(
                [
                    a[..., 1, 0] * b[..., 0, 0] + a[..., 1, 1] * b[..., 1, 0],
                    a[..., 1, 0] * b[..., 0, 1] + a[..., 1, 1] * b[..., 1, 1],
                ],
                axis=-1,
            ),
        ],
        axis=-2,
    )


def dagger(a: Complex[Array, "*s 2 2"]) -> Complex[Array, "*s 2 2"]:
    """Conjugate transpose of the last two axes."""
    return jnp.conj(jnp.swapaxes(a, -1, -2))


def det(a: Complex[Array, "*s 2 2"]) -> Complex[Array, "*s"]:
    """Determinant of 2×2 matrices."""
    return a[..., 0, 0] * a[..., 1, 1] - a[..., 0, 1] * a[..., 1, 0]


def adjugate(a: Complex[Array, "*s 2 2"]) -> Complex[Array, "*s 2 2"]:
    """`det(a) · a⁻¹` (`[[d, −b], [−c, a]]`)."""
    return jnp.stack(
        [
            jnp.stack([a[..., 1, 1], -a[..., 0, 1]], axis=-1),
            jnp.stack([-a[..., 1, 0], a[..., 0, 0]], axis=-1),
        ],
        axis=-2,
    )


def inverse(a: Complex[Array, "*s 2 2"]) -> Complex[Array, "*s 2 2"]:
    """Inverse of 2×2 matrices (`adjugate / det`; singular ones give inf/NaN)."""
    return adjugate(a) / det(a)[..., None, None]


def stokes_to_coherency(stokes: Complex[Array, "*s 4"]) -> Complex[Array, "*s 2 2"]:
    """The circular-basis coherency `[[I + V, Q + iU], [Q − iU, I − V]]` of
    Stokes visibilities `(..., 4)` (I, Q, U, V last)."""
    i, q, u, v = (stokes[..., k] for k in range(4))
    return jnp.stack(
        [jnp.stack([i + v, q + 1j * u], axis=-1), jnp.stack([q - 1j * u, i - v], -1)],
        axis=-2,
    )


def coherency_to_stokes(c: Complex[Array, "*s 2 2"]) -> Complex[Array, "*s 4"]:
    """The inverse of [`stokes_to_coherency`][]: `I = (RR + LL)/2`,
    `Q = (RL + LR)/2`, `U = (RL − LR)/(2i)`, `V = (RR − LL)/2`."""
    rr, rl, lr, ll = c[..., 0, 0], c[..., 0, 1], c[..., 1, 0], c[..., 1, 1]
    return jnp.stack(
        [(rr + ll) / 2, (rl + lr) / 2, -0.5j * (rl - lr), (rr - ll) / 2], axis=-1
    )


def coherency_to_correlations(c: Complex[Array, "*s 2 2"]) -> Complex[Array, "*s 4"]:
    """`(C₀₀, C₁₁, C₀₁, C₁₀)`: the file's order (RR, LL, RL, LR)."""
    return jnp.stack([c[..., 0, 0], c[..., 1, 1], c[..., 0, 1], c[..., 1, 0]], -1)


def correlations_to_coherency(
    corr: Complex[ArrayLike, "*s 4"],
) -> Complex[Array, "*s 2 2"]:
    """The coherency matrices `[[C₀, C₂], [C₃, C₁]]` of correlations in the
    file's order."""
    corr = jnp.asarray(corr)
    return jnp.stack(
        [
            jnp.stack([corr[..., 0], corr[..., 2]], axis=-1),
            jnp.stack([corr[..., 3], corr[..., 1]], axis=-1),
        ],
        axis=-2,
    )


def feed_matrix(linear: Bool[ArrayLike, "*s"], dtype=jnp.complex128):
    """`T` per entry: the identity for circular feeds, `T_LINEAR` for linear."""
    linear = jnp.asarray(linear)[..., None, None]
    return jnp.where(
        linear, jnp.asarray(T_LINEAR, dtype), jnp.eye(2, dtype=dtype)
    ).astype(dtype)


def stokes_to_correlations(
    stokes: Complex[Array, "*s 4"],
    linear: Bool[ArrayLike, "*s 2"],
) -> Complex[Array, "*s 4"]:
    """The four correlations (file order) a baseline with feeds `linear[..., 0]`,
    `linear[..., 1]` (True: linear) records of Stokes visibilities: those of
    `T_a C T_bᴴ`. All-circular rows take the shortcut (no products)."""
    c = stokes_to_coherency(stokes)
    linear = jnp.asarray(linear)
    if not _any_linear(linear):
        return coherency_to_correlations(c)
    ta = feed_matrix(linear[..., 0], c.dtype)
    tb = feed_matrix(linear[..., 1], c.dtype)
    return coherency_to_correlations(matmul(matmul(ta, c), dagger(tb)))


def correlations_to_stokes(
    corr: Complex[Array, "*s 4"],
    linear: Bool[ArrayLike, "*s 2"],
) -> Complex[Array, "*s 4"]:
    """The inverse of [`stokes_to_correlations`][] (`T` is unitary:
    `C = T_aᴴ C_obs T_b`)."""
    c = correlations_to_coherency(corr)
    linear = jnp.asarray(linear)
    if _any_linear(linear):
        ta = feed_matrix(linear[..., 0], c.dtype)
        tb = feed_matrix(linear[..., 1], c.dtype)
        c = matmul(matmul(dagger(ta), c), tb)
    return coherency_to_stokes(c)


def _any_linear(linear) -> bool:
    """Whether any entry may be linear (True when traced: take the general path)."""
    return not is_concrete(linear) or bool(np.any(np.asarray(linear)))


def station_jones(
    g: Complex[Array, "*s 2"],
    d: Complex[Array, "*s 2"],
    e: Complex[Array, "*s"],
    linear: Bool[ArrayLike, "*s"] | None = None,
    *,
    field_rotation_corrected: bool = False,
) -> Complex[Array, "*s 2 2"]:
    """A station's Jones matrix `J = G D T Φ` per entry (eht-imaging's
    `make_jones`): `G = diag(g_R, g_L)`, `D = [[1, d_R], [d_L, 1]]`, `T` the feed
    basis (identity for circular feeds, `T_LINEAR` where `linear`), `Φ =
    diag(e^{−iφ}, e^{+iφ})` from `e = e^{iφ}`. With `field_rotation_corrected`
    (data whose field rotation was removed, not their leakage): `R⁻¹ G D R T`,
    `R = T Φ Tᴴ`."""
    ctype = g.dtype
    zero = jnp.zeros_like(g[..., 0])
    gd = jnp.stack(
        [
            jnp.stack([g[..., 0], g[..., 0] * d[..., 0]], -1),
            jnp.stack([g[..., 1] * d[..., 1], g[..., 1]], -1),
        ],
        -2,
    )
    e = e.astype(ctype)
    phi = jnp.stack([jnp.stack([jnp.conj(e), zero], -1), jnp.stack([zero, e], -1)], -2)
    tm = None if linear is None else feed_matrix(linear, ctype)
    if field_rotation_corrected:
        # R⁻¹ G D R T = T Φ⁻¹ Tᴴ G D T Φ (R = T Φ Tᴴ).
        phi_inv = jnp.stack(
            [jnp.stack([e, zero], -1), jnp.stack([zero, jnp.conj(e)], -1)], -2
        )
        if tm is None:
            return matmul(matmul(phi_inv, gd), phi)
        th = jnp.conj(jnp.swapaxes(tm, -1, -2))
        left = matmul(matmul(tm, phi_inv), th)
        return matmul(matmul(left, gd), matmul(tm, phi))
    if tm is None:
        return matmul(gd, phi)
    return matmul(gd, matmul(tm, phi))
