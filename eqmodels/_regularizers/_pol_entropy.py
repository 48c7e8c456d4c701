"""Polarimetric entropies: functions of the linear polarization fraction
`m = |Q + iU| / I`, weighted by `I`."""

import math

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Scalar

from .._custom_types import RealLike
from .._numerics import safe_sqrt
from .._validation import check_flag
from ._base import AbstractRegularizer, as_dtype, optional_scalar
from ._pol_inputs import check_positive_eps, check_stokes_shape


def _fraction_squared(stokes):
    """`(ok, I, m²)`: `ok = I > 0` (a NaN pixel stays NaN), `m² = (Q/I)² + (U/I)²`
    (the ratios first, so that faint float32 pixels keep their fraction), with
    `I = 1` where not `ok` so that nothing divides by zero there."""
    i, q, u = stokes[0], stokes[1], stokes[2]
    ok = ~(i <= 0)
    i_s = jnp.where(ok, i, 1.0)
    mq = q / i_s
    mu = u / i_s
    return ok, i_s, mq * mq + mu * mu


def _normalised(out, reg, like):
    return out / as_dtype(reg.flux, like) if reg.normalise else out


class PolEntropy(AbstractRegularizer):
    r"""The "simple" polarimetric entropy, eht-imaging's `'msimple'` with the sign
    flipped (eht-imaging maximises `S = −Σ I ln m`):

    `R = Σ_p I_p ln sqrt(m_p² + ε)`, `m = |Q + iU| / I`,

    divided by the target (Stokes I) flux `F` when `normalise=True`. It pulls the
    polarization fraction towards 0: it decreases as `m` falls, without bound in
    eht-imaging's form, down to `½ I ln ε` per pixel here.

    `ε > 0` (default `1e-16`, a floor of `1e-8` on `m`) keeps the value and the
    gradient finite at zero polarization (eht-imaging's `I ln m` is −∞ there);
    it changes the value by `½ I ln(1 + ε/m²)` per pixel, below `1e-12` relative
    to eht-imaging's where `m >= 1e-2`. Pixels with `I <= 0` (e.g. outside a
    mask) contribute 0, with a zero derivative.
    """

    report_name = "msimple"
    polarimetric = True

    flux: Float[Array, ""] | None
    eps: float = eqx.field(static=True)
    normalise: bool = eqx.field(static=True)

    def __init__(
        self,
        *,
        eps: float = 1e-16,
        flux: RealLike | None = None,
        normalise: bool = False,
    ):
        """**Arguments:**

        - `eps`: the floor `ε > 0` on `m²` (dimensionless).
        - `flux`: target total (Stokes I) flux `F` (Jy); needed when
          `normalise=True`.
        - `normalise`: divide by `F` (eht-imaging's `norm_reg=True`).
        """
        self.eps = check_positive_eps(eps)
        self.normalise = check_flag("normalise", normalise)
        self.flux = optional_scalar("flux", flux, self.normalise, "when normalise=True")

    def penalty(self, stokes: Float[Array, "4 ny nx"]) -> Scalar:
        check_stokes_shape(stokes, "PolEntropy")
        ok, i_s, m2 = _fraction_squared(stokes)
        t = 0.5 * i_s * jnp.log(m2 + self.eps)
        return _normalised(jnp.sum(jnp.where(ok, t, 0.0)), self, stokes)


class HolographicEntropy(AbstractRegularizer):
    r"""The Holdaway-Wardle polarimetric entropy, eht-imaging's `'hw'` with the
    sign flipped:

    `R = Σ_p I_p [ (1+m_p)/2 ln((1+m_p)/2) + (1−m_p)/2 ln((1−m_p)/2) ]`,
    `m = |Q + iU| / I`,

    divided by the target (Stokes I) flux `F` when `normalise=True`. Each bracket
    lies in `[−ln 2, 0]`, least (`−ln 2`) at `m = 0`: the penalty pulls the
    polarization fraction towards 0, and is bounded.

    Finite, with finite gradients, at zero polarization without any smoothing
    (the bracket is a smooth function of `m²`; its derivative with respect to
    `Q` there is 0). Pixels with `I <= 0` contribute 0, with a zero derivative.
    The image must be physical, `m < 1` (the polarimetric image models are by
    construction); at `m >= 1` the value is NaN.
    """

    report_name = "hw"
    polarimetric = True

    flux: Float[Array, ""] | None
    normalise: bool = eqx.field(static=True)

    def __init__(self, *, flux: RealLike | None = None, normalise: bool = False):
        """**Arguments:**

        - `flux`: target total (Stokes I) flux `F` (Jy); needed when
          `normalise=True`.
        - `normalise`: divide by `F` (eht-imaging's `norm_reg=True`).
        """
        self.normalise = check_flag("normalise", normalise)
        self.flux = optional_scalar("flux", flux, self.normalise, "when normalise=True")

    def penalty(self, stokes: Float[Array, "4 ny nx"]) -> Scalar:
        check_stokes_shape(stokes, "HolographicEntropy")
        ok, i_s, m2 = _fraction_squared(stokes)
        # The bracket is `½ ln(1 − m²) + m artanh(m) − ln 2`: its derivative
        # `artanh m` then comes out to full precision at small m (the textbook
        # form's `(1 ± m) ln(1 ± m)` cancel each other's derivatives, losing
        # `1e-16 / m` relative). `safe_sqrt`: derivative 0 at m = 0, the true
        # one (the bracket is even in m).
        m2 = jnp.where(ok, m2, 0.0)
        m = safe_sqrt(m2)
        h = 0.5 * jnp.log1p(-m2) + m * jnp.arctanh(m) - math.log(2.0)
        return _normalised(jnp.sum(jnp.where(ok, i_s * h, 0.0)), self, stokes)
