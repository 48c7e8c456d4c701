"""Sparsity regularizers: L1 and prior-weighted L1."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._custom_types import ArraySequence, RealLike
from .._grid import ImageGrid
from .._image._base import AbstractImageModel
from .._numerics import safe_hypot, safe_sqrt
from .._validation import check_flag, is_concrete
from ._base import (
    AbstractRegularizer,
    as_dtype,
    check_eps,
    check_image_shape,
    check_prior,
    optional_scalar,
    prior_grid,
)


class L1(AbstractRegularizer):
    r"""L1 norm of the image, eht-imaging's `'l1'` with the sign flipped:

    `R(I) = Σ_p |I_p|`, divided by the target flux `F` when `normalise=True`.
    (Its derivative at `I_p = 0` is taken as 0.)
    """

    report_name = "l1"

    flux: Float[Array, ""] | None
    normalise: bool = eqx.field(static=True)

    def __init__(self, *, flux: RealLike | None = None, normalise: bool = False):
        """**Arguments:**

        - `flux`: target total flux `F` (Jy); needed when `normalise=True`.
        - `normalise`: divide by `F`.
        """
        self.normalise = check_flag("normalise", normalise)
        self.flux = optional_scalar("flux", flux, self.normalise, "when normalise=True")

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        if image.ndim != 2:
            raise ValueError(f"L1: `image` must be (ny, nx), got {image.shape}.")
        # `x·sign(x)` is `|x|` exactly, with derivative `sign(x)`: 0 at 0 (that of
        # `jnp.abs` is 1 there, pushing a zero pixel negative).
        out = jnp.sum(image * jnp.sign(image))
        return out / as_dtype(self.flux, image) if self.normalise else out


class WeightedL1(AbstractRegularizer):
    r"""Prior-weighted L1, eht-imaging's `'l1w'` with the sign flipped:

    `R(I) = Σ_p sqrt(I_p² + ε) / (sqrt(P_p² + ε) + ε)`, `ε = 1e-10` by default
    (a smooth L1 that penalises flux where the prior is faint). No normalisation.
    """

    report_name = "l1w"

    prior: Float[Array, "ny nx"]
    grid: ImageGrid | None = eqx.field(static=True)
    eps: float = eqx.field(static=True)

    def __init__(
        self,
        prior: Float[ArrayLike, "ny nx"] | ArraySequence | AbstractImageModel,
        *,
        eps: float = 1e-10,
    ):
        """**Arguments:**

        - `prior`: prior image `P`, shape `(ny, nx)`.
        - `eps`: the smoothing `ε` (>= 0; 0 gives a plain weighted L1).
        """
        self.prior = check_prior(prior, nonneg=False)
        self.grid = prior_grid(prior)
        self.eps = check_eps(eps)
        if is_concrete(self.prior) and not np.any(np.asarray(self.prior)):
            # Every pixel weighted `1 / (sqrt(ε) + ε)` (1e5 by default): a plain
            # L1 scaled by an arbitrary constant, not a prior's weighting.
            raise ValueError(
                "`prior` is zero everywhere: it weights no pixel more than another "
                "(every weight is 1/(sqrt(eps) + eps)). Give the prior image (e.g. "
                "a Gaussian of the source's size), or use `L1` for a plain L1."
            )
        if self.eps == 0 and is_concrete(self.prior):
            stored = np.asarray(self.prior)
            # Subnormal pixels count as 0: XLA flushes them (1e-45 in float32).
            if np.any(np.abs(stored) < np.finfo(stored.dtype).tiny):
                raise ValueError(
                    "`eps`=0 with a `prior` that has zero (or, in its dtype, "
                    "subnormal) pixels divides by zero there: give `eps` > 0 (the "
                    "default 1e-10) or a prior without zeros."
                )

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        check_image_shape(image, self.prior.shape, "WeightedL1")
        prior = as_dtype(self.prior, image)
        if image.dtype == jnp.float64:  # eht-imaging's form, the same bits
            num = safe_sqrt(image * image + self.eps)
            den = jnp.sqrt(prior * prior + self.eps) + self.eps
        else:
            # float32 squares below ~1e-19 flush to 0 (a prior pixel of 1e-25
            # with ε = 0 would divide by 0): scaled hypotenuses,
            # `sqrt(x² + ε) = hypot(x, sqrt ε)`, keep them.
            root = jnp.full_like(image, np.sqrt(self.eps))
            num = safe_hypot(image, root)
            den = safe_hypot(prior, root) + self.eps
        return jnp.sum(num / den)
