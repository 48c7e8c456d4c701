"""A `PolPixelImage` in rescaled coordinates: its polarization vectors scaled per
pixel by the Stokes I brightness, the coordinates the polarimetric recipe solves
in."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._grid import ImageGrid
from .._validation import host_real, is_concrete
from ._pol_base import AbstractPolImageModel
from ._pol_pixel import PolPixelImage


def check_scale_power(
    power, name: str = "scale_power", *, optional: bool = True
) -> float | None:
    """`power` (the exponent of `RescaledPolPixels`) as a `float`, or `None`
    (the recipe's default, where `optional`); anything but a finite number
    `>= 0` is refused, naming the argument `name`."""
    if power is None and optional:
        return None
    value = None if power is None else host_real(power)
    if value is None or not np.isfinite(value) or value < 0:
        raise ValueError(
            f"`{name}` must be a finite number >= 0 (the polarization vectors "
            f"are solved for as w = z · (I / I_max)^-{name}; 0: w itself) or "
            f"None for the recipe's default, got {power!r}."
        )
    return value


class RescaledPolPixels(AbstractPolImageModel):
    r"""A [`eqmodels.PolPixelImage`][] in rescaled coordinates: its polarization
    vectors are `w = z · s`, with one fixed scale per free pixel and component
    `s_p = (I_p / I_max)^(−power)` (`v_power` for the circular component, if
    any), and `z` the parameters.

    The same images and objectives: only the coordinates an optimiser walks in
    differ (a diagonal preconditioner, built into the model). They matter when the
    Stokes I pixels are held fixed and the mask reaches faint pixels: the curvature
    of a polarimetric objective along `w_p` grows with the pixel's brightness
    (`∝ I_p²` from data terms, `∝ I_p` from `hw`, `ptv`), so with a mask at 1 % of
    the peak it spans four decades, and L-BFGS moves the faint pixels'
    polarization so slowly that an image's polarization fractions still drift when
    its stopping test is met. With `power = 1`, `z_p ≈ P_p / I_max` for small
    fractions: the polarized flux in units of the peak, in which the data terms'
    curvature is the same in every pixel. The polarimetric recipe
    ([`eqmodels.image_m87_pol`][]) solves in these coordinates.

    `scale` is held fixed (its gradient is stopped), so a `solve` with the default
    `params` moves `z` and the Stokes I pixels, as it would the `PolPixelImage`'s
    `pol` and pixels. [`eqmodels.RescaledPolPixels.unscaled`][] gives the
    `PolPixelImage` back.

    Where the data barely see a component (Stokes V, usually) its curvature comes
    from the regularizers, `∝ I_p`: `power = 0.5` evens that out, and `power = 1`
    overshoots (the faint pixels then the stiff ones); hence `v_power`.
    """

    image: PolPixelImage
    z: Float[Array, "k nfree"]
    scale: Float[Array, "k nfree"]

    def __init__(
        self,
        image: PolPixelImage,
        power: float | int | np.floating | np.integer,
        *,
        v_power: float | int | np.floating | np.integer | None = None,
    ):
        """**Arguments:**

        - `image`: the `PolPixelImage` (its `pol` is the starting point; the
          model keeps its Stokes I pixels, mask and `circular`, and zeros in place
          of its `pol`, which `z · scale` replaces).
        - `power`: the exponent, a finite number `>= 0` (0: `z = w`).
        - `v_power`: the exponent of the circular component (`None`: `power`);
          only for a `circular` image.
        """
        if not isinstance(image, PolPixelImage):
            raise TypeError(
                f"`image` must be an eqmodels.PolPixelImage, got {type(image).__name__}."
            )
        power = check_scale_power(power, "power", optional=False)
        v_power = check_scale_power(v_power, "v_power")
        if v_power is not None and not image.circular:
            raise ValueError(
                "`v_power` is the exponent of the circular component: `image` has "
                "none (`circular=False`). Leave `v_power` out."
            )
        intensity = image.intensity
        i_free = jnp.ravel(intensity())[intensity.indices]
        if is_concrete(i_free) and not bool(jnp.all(i_free > 0)):
            raise ValueError(
                "`image`'s Stokes I must be > 0 on every free pixel to rescale by it "
                "(a log-transformed `PixelImage` is)."
            )
        ratio = i_free / jnp.max(i_free)
        powers = [power] * image.pol.shape[0]
        if v_power is not None:
            powers[-1] = v_power
        scale = jnp.stack([ratio ** (-p) for p in powers])
        if is_concrete(scale) and not bool(jnp.all(jnp.isfinite(scale))):
            raise ValueError(
                f"`power` {power:g} (or `v_power`) is too large for this image: "
                f"(I / I_max)^-power overflows on its faintest free pixel "
                f"(I / I_max = {float(jnp.min(ratio)):.3g}). Use a smaller power "
                "(1 makes z about P / I_max)."
            )
        self.scale = scale.astype(image.pol.dtype)
        self.z = image.pol / self.scale
        self.image = eqx.tree_at(lambda m: m.pol, image, jnp.zeros_like(image.pol))

    @property
    def grid(self) -> ImageGrid:
        """The image grid."""
        return self.image.grid

    def unscaled(self) -> PolPixelImage:
        """The `PolPixelImage` these coordinates describe (`pol = z · scale`)."""
        pol = self.z * jax.lax.stop_gradient(self.scale)
        return eqx.tree_at(lambda m: m.pol, self.image, pol)

    def __call__(self) -> Float[Array, "4 ny nx"]:
        return self.unscaled()()


def rescaled_filter(model: RescaledPolPixels):
    """A `solve` `params` filter of `model` selecting `z` alone."""
    spec = jax.tree.map(lambda _: False, model)
    return eqx.tree_at(lambda m: m.z, spec, True)
