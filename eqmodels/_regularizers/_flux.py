"""Total-flux constraint."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Scalar

from .._custom_types import RealLike
from .._terms._inputs import as_image, ImageLike
from .._validation import check_flag, scalar_leaf
from ._base import AbstractRegularizer, as_dtype


class Flux(AbstractRegularizer):
    r"""Total-flux penalty, eht-imaging's `'flux'` with the sign flipped:

    `R(I) = (Σ_p I_p − F)²`, divided by `F²` when `normalise=True`.
    """

    report_name = "flux"

    flux: Float[Array, ""]
    normalise: bool = eqx.field(static=True)

    def __init__(self, flux: RealLike, *, normalise: bool = False):
        """**Arguments:**

        - `flux`: the target total flux `F` (Jy, > 0).
        - `normalise`: divide by `F²`.
        """
        self.flux = scalar_leaf("flux", flux, positive=True)
        self.normalise = check_flag("normalise", normalise)

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        _check_2d(image)
        f = as_dtype(self.flux, image)
        d = jnp.sum(image) - f
        return d * d / (f * f) if self.normalise else d * d

    def residuals(self, image: ImageLike) -> Float[Array, " 1"]:
        """`[Σ I − F]` (divided by `F` when normalised): the penalty is its square,
        so Gauss-Newton and Levenberg-Marquardt take it.

        **Arguments:** `image`, an `(ny, nx)` array or an image model.
        """
        img = as_image(image)
        _check_2d(img)
        f = as_dtype(self.flux, img)
        d = (jnp.sum(img) - f).reshape(1)
        return d / f if self.normalise else d


def _check_2d(image):
    if image.ndim != 2:
        raise ValueError(
            f"Flux: `image` must be (ny, nx), got {image.shape}; a batch of images "
            "goes through `jax.vmap`."
        )
