"""Entropy regularizers relative to a prior image."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._custom_types import ArraySequence, RealLike
from .._grid import ImageGrid
from .._image._base import AbstractImageModel
from .._numerics import asarray
from .._validation import as_real, check_flag, is_concrete
from ._base import (
    AbstractRegularizer,
    as_dtype,
    check_image_shape,
    check_prior,
    optional_scalar,
    prior_grid,
)


def _log_ratio_terms(image, prior, log_prior):
    """`(ok, I, I ln(I/P))` with `ok = I > 0` (or NaN); where `I == 0` the last is 0
    (the limit) with a zero derivative, so masked-out pixels stay finite.

    A float64 image uses `ln(I/P)` (eht-imaging's form, to the last digit) where
    `P` is a normal float64 number, and `ln I − ln P` elsewhere, with `ln P`
    computed when the regularizer was built (in float64, on the host, from the
    prior as given), and where `I/P` would be subnormal: XLA flushes subnormal
    numbers to 0, so a prior's faintest tails (a narrow Gaussian's, below
    2.2e-308) would give `I/0`, an infinite penalty and a NaN gradient. A float32
    image does the same with float32's normal range: a prior's faint tails (a
    Gaussian's reach 1e-60 at a field's edge) flush to 0 in float32, and there
    `ln P` comes from the host."""
    ok = ~(image <= 0)  # a NaN pixel stays NaN (`image > 0` would zero it)
    i_s = jnp.where(ok, image, 1.0)
    log_p = jnp.where(ok, as_dtype(log_prior, image), 0.0)
    p = as_dtype(prior, image)
    # `I/P` itself must be normal too: a prior above 1 with a faint pixel
    # (I = 1e-307, P = 10) would flush it to 0 and give ln 0 = −inf. In float32
    # the bound is sqrt(tiny), ~1e-19: XLA rewrites the derivative of `ln(I/P)`
    # with a constant `P` into forms whose intermediates square `P` (NaN and
    # inf gradients at P ~ 1e-38…1e-34 under `jit`).
    tiny = np.finfo(image.dtype).tiny
    if image.dtype != jnp.float64:
        tiny = float(np.sqrt(tiny))
    normal = ok & (p >= tiny) & (i_s >= tiny * jnp.maximum(p, 1.0))
    # One logarithm per pixel: `ln(I/P) − 0` where P is normal (the same bits
    # as `ln(I/P)`), `ln(I/1) − ln P` elsewhere. (In float32 too: `ln I − ln P`
    # throughout would lose `|ln I|·eps` near `I = P`.)
    ratio = i_s / jnp.where(normal, p, 1.0)
    log_ratio = jnp.log(ratio) - jnp.where(normal, 0.0, log_p)
    return ok, i_s, jnp.where(ok, i_s * log_ratio, 0.0)


def _prior_and_log(prior) -> tuple[Float[Array, "ny nx"], Float[Array, "ny nx"]]:
    """The checked prior and `ln P` (`−inf` where `P = 0`), the latter from the
    prior as given (float64 on the host when concrete), before any cast; from an
    image model's own `log_image()` where it has one (computed in log space:
    finite where the model's image underflows, e.g. a Gaussian's float32 tails)."""
    log_image = None
    if isinstance(prior, AbstractImageModel):
        log_image = getattr(prior, "log_image", None)
        prior = prior()  # evaluated once, for both
    stored = check_prior(prior)
    raw = as_real("prior", prior)
    if callable(log_image):
        log_p = log_image()
    elif is_concrete(raw):
        with np.errstate(divide="ignore"):
            log_p = np.log(np.asarray(raw, np.float64))
    else:
        log_p = jnp.log(raw)
    return stored, asarray(log_p, stored.dtype)


def _negative_part(image):
    """`Σ max(−I, 0)`: negative pixels (reachable only with an identity
    transform) are penalised linearly beyond the value at `I = 0`, with slope −1,
    so the gradient pushes them back up instead of vanishing."""
    return jnp.sum(jnp.where(image < 0, -image, 0.0))


class SimpleEntropy(AbstractRegularizer):
    r"""Relative ("simple") entropy penalty, eht-imaging's `'simple'` with the sign
    flipped:

    `R(I) = Σ_p I_p ln(I_p / P_p)`, divided by the target flux `F` when
    `normalise=True`.

    Pixels where `I = 0` contribute 0 (the limit `I ln I → 0`; e.g. outside a
    [`eqmodels.PixelImage`][] mask), with a zero derivative. A negative pixel
    (possible with `transform="identity"`) contributes `|I_p|`: finite, with a
    gradient that pushes it back towards 0.
    """

    report_name = "simple"

    prior: Float[Array, "ny nx"]
    log_prior: Float[Array, "ny nx"]
    grid: ImageGrid | None = eqx.field(static=True)
    flux: Float[Array, ""] | None
    normalise: bool = eqx.field(static=True)

    def __init__(
        self,
        prior: Float[ArrayLike, "ny nx"] | ArraySequence | AbstractImageModel,
        *,
        flux: RealLike | None = None,
        normalise: bool = False,
    ):
        """**Arguments:**

        - `prior`: prior image `P` (>= 0), shape `(ny, nx)`, or an image model
          (its image). Where `P = 0` the image must be 0 too (e.g. outside a
          [`eqmodels.PixelImage.from_prior`][] mask): a positive pixel there makes
          the penalty `+inf`. `ln P` is kept beside `P` (for float32 images), so
          change the prior by building a new entropy, not with `eqx.tree_at`.
        - `flux`: target total flux `F` (Jy); needed when `normalise=True`.
        - `normalise`: divide by `F` (eht-imaging's `norm_reg=True`).
        """
        self.prior, self.log_prior = _prior_and_log(prior)
        self.grid = prior_grid(prior)
        self.normalise = check_flag("normalise", normalise)
        self.flux = optional_scalar("flux", flux, self.normalise, "when normalise=True")

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        check_image_shape(image, self.prior.shape, "SimpleEntropy")
        _, _, t = _log_ratio_terms(image, self.prior, self.log_prior)
        out = jnp.sum(t) + _negative_part(image)
        return out / as_dtype(self.flux, image) if self.normalise else out


class GullSkillingEntropy(AbstractRegularizer):
    r"""Gull-Skilling entropy penalty, eht-imaging's `'gs'` with the sign flipped:

    `R(I) = Σ_p (P_p − I_p + I_p ln(I_p / P_p))` (>= 0, zero at `I = P`), divided by
    the target flux `F` when `normalise=True`.

    Pixels where `I = 0` contribute `P_p` (the limit), with a zero derivative; a
    negative pixel contributes `P_p + |I_p|` (finite, with a gradient that pushes
    it back towards 0).
    """

    report_name = "gs"

    prior: Float[Array, "ny nx"]
    log_prior: Float[Array, "ny nx"]
    grid: ImageGrid | None = eqx.field(static=True)
    flux: Float[Array, ""] | None
    normalise: bool = eqx.field(static=True)

    def __init__(
        self,
        prior: Float[ArrayLike, "ny nx"] | ArraySequence | AbstractImageModel,
        *,
        flux: RealLike | None = None,
        normalise: bool = False,
    ):
        """**Arguments:**

        - `prior`: prior image `P` (>= 0), shape `(ny, nx)`, or an image model
          (its image). Where `P = 0` the image must be 0 too (e.g. outside a
          [`eqmodels.PixelImage.from_prior`][] mask): a positive pixel there makes
          the penalty `+inf`. `ln P` is kept beside `P` (for float32 images), so
          change the prior by building a new entropy, not with `eqx.tree_at`.
        - `flux`: target total flux `F` (Jy); needed when `normalise=True`.
        - `normalise`: divide by `F` (eht-imaging's `norm_reg=True`).
        """
        self.prior, self.log_prior = _prior_and_log(prior)
        self.grid = prior_grid(prior)
        self.normalise = check_flag("normalise", normalise)
        self.flux = optional_scalar("flux", flux, self.normalise, "when normalise=True")

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        check_image_shape(image, self.prior.shape, "GullSkillingEntropy")
        prior = as_dtype(self.prior, image)
        ok, i_s, t = _log_ratio_terms(image, prior, self.log_prior)
        # `(P − I) + I ln(I/P)` per pixel: near `I = P` the two nearly cancel
        # each other, not `P` against `I ln(I/P) − I` (a float32 value lost 1e-2).
        out = jnp.sum(jnp.where(ok, prior - i_s, prior) + t) + _negative_part(image)
        return out / as_dtype(self.flux, image) if self.normalise else out
