"""`MultiFrequencyImage`: any image model made multi-frequency by a spectral index
and curvature per pixel (and, for a polarimetric model, a fractional-polarization
index and a Faraday rotation measure)."""

import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._grid import ImageGrid
from .._numerics import asarray
from .._validation import as_real, is_concrete
from ._base import AbstractImageModel


#: Speed of light (m/s), for the rotation measure's λ² = (c/ν)².
SPEED_OF_LIGHT = 299_792_458.0

_SPECTRAL = ("alpha", "beta", "alpha_pol", "beta_pol", "rm")
_POL_ONLY = ("alpha_pol", "beta_pol", "rm")


def check_frequency(name: str, freq) -> float:
    """One frequency in Hz, a positive finite number in 1e6–1e13 Hz (the range
    `load_uvfits` accepts): a frequency in GHz (`230.0`) is refused."""
    if isinstance(freq, bool) or not isinstance(freq, int | float | np.number):
        if not (isinstance(freq, np.ndarray | jax.Array) and np.ndim(freq) == 0):
            raise TypeError(f"`{name}` must be a frequency in Hz, got {freq!r}.")
        if not is_concrete(freq):
            raise TypeError(
                f"`{name}` must be a concrete number (it is static), got a traced "
                "value."
            )
    value = float(freq)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"`{name}` must be finite and > 0 (Hz), got {freq!r}.")
    if not 1e6 <= value <= 1e13:
        raise ValueError(
            f"`{name}` = {value:g} is outside 1e6–1e13 Hz: frequencies are in Hz "
            "(230 GHz is `230e9`)."
        )
    return value


def _spectral_leaf(name: str, x, grid: ImageGrid, dtype):
    """A spectral parameter: a scalar (one value for every pixel) or an `(ny, nx)`
    map on `grid`, real and finite, as an array leaf."""
    if x is None:
        return None
    arr = as_real(name, x)
    shape = tuple(np.shape(arr))
    if shape not in ((), tuple(grid.shape)):
        raise ValueError(
            f"`{name}` has shape {shape} but the base image model is on a "
            f"{grid.ny}×{grid.nx} grid: give a scalar (one value for every pixel) "
            f"or a map of shape {tuple(grid.shape)} (ny, nx) on the model's grid."
        )
    if is_concrete(arr) and not np.all(np.isfinite(np.asarray(arr))):
        raise ValueError(f"`{name}` has non-finite values: every value must be finite.")
    return asarray(arr, dtype)


class MultiFrequencyImage(AbstractImageModel):
    r"""An image model made multi-frequency (eht-imaging's form): at frequency `ν`,
    with `x = ln(ν/ν₀)`,

    `I_ν = I₀ exp(α x + β x²) = I₀ (ν/ν₀)^(α + β ln(ν/ν₀))`

    per pixel, where `I₀ = base()` is the image at the reference frequency `ν₀`
    and `α` (spectral index) and `β` (curvature) are maps `(ny, nx)` or scalars
    (one value for every pixel). `model()` is the image at `ν₀` (what
    regularizers on `I₀` see); `model.at(ν)` the image at `ν`.

    **Polarimetric base** (`(4, ny, nx)`): the polarized part `(Q, U, V)` keeps its
    direction on the Poincaré sphere except for a Faraday rotation of the EVPA,

    `χ(λ) = χ₀ + RM (λ² − λ₀²)`, `λ = c/ν`,

    and its fraction `m = sqrt(Q² + U² + V²)/I` follows eht-imaging's
    fractional-polarization index: `m'/(1 + m')` with
    `m' = m'₀ exp(α_p x + β_p x²)`, `m'₀ = m₀/(1 − m₀)`, so that `m < 1` at
    every frequency and `m = m₀` at `ν₀` (for `m ≪ 1`, `α_p` is the index of `m`
    itself). Without `alpha_pol` / `beta_pol` the fraction is the same at every
    frequency; without `rm`, the EVPA. (eht-imaging's `image_at_freq` with
    `rho = m'₀` and its dimensionless `rm = 2 RM c²/ν₀²`; circular polarization
    keeps its angle `ψ`, as there.)

    **Free or fixed.** Every spectral map given is a leaf, differentiated like the
    base's parameters; `fixed=("beta",)` (any of `"alpha"`, `"beta"`,
    `"alpha_pol"`, `"beta_pol"`, `"rm"`) holds those at their values (their
    gradient is exactly 0). A map not given (`beta=None`, ...) is 0 and holds
    no parameter.

    In an [`eqmodels.Objective`][], data terms wrapped in
    [`eqmodels.AtFrequency`][] see `model.at(ν)` of their band; other terms see
    `model()`, the image at `ν₀`; spectral regularizers
    ([`eqmodels.SpectralL2`][], [`eqmodels.SpectralTV`][]) the maps.
    """

    base: AbstractImageModel
    alpha: Float[Array, "*ny_nx"]
    beta: Float[Array, "*ny_nx"] | None
    alpha_pol: Float[Array, "*ny_nx"] | None
    beta_pol: Float[Array, "*ny_nx"] | None
    rm: Float[Array, "*ny_nx"] | None
    freq0: float = eqx.field(static=True)
    fixed: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        base: AbstractImageModel,
        freq0: float,
        alpha: Float[ArrayLike, "*ny_nx"] | float = 0.0,
        beta: Float[ArrayLike, "*ny_nx"] | float | None = None,
        *,
        alpha_pol: Float[ArrayLike, "*ny_nx"] | float | None = None,
        beta_pol: Float[ArrayLike, "*ny_nx"] | float | None = None,
        rm: Float[ArrayLike, "*ny_nx"] | float | None = None,
        fixed: Sequence[str] = (),
    ):
        """**Arguments:**

        - `base`: any image model (pixels, parametric, your own; Stokes I or
          polarimetric): the image at `freq0`.
        - `freq0`: the reference frequency `ν₀` in Hz (e.g. `228e9`).
        - `alpha`: spectral index `α`, a scalar or an `(ny, nx)` map (default 0).
        - `beta`: spectral curvature `β` (default `None`: none).
        - `alpha_pol`, `beta_pol`: index and curvature of the fractional
          polarization (polarimetric base only).
        - `rm`: rotation measure (rad/m²; polarimetric base only).
        - `fixed`: names of the maps held fixed (no gradient).
        """
        if not isinstance(base, AbstractImageModel):
            raise TypeError(
                f"`base` must be an image model (an `AbstractImageModel`), got "
                f"{type(base).__name__}: wrap an image array as "
                "`PixelImage.from_image(image, grid)` first."
            )
        if isinstance(base, MultiFrequencyImage):
            raise TypeError(
                "`base` is already a MultiFrequencyImage: give its base image model "
                "(`base.base`) and one set of spectral maps."
            )
        self.freq0 = check_frequency("freq0", freq0)
        pol = bool(base.polarimetric)
        given = dict(alpha_pol=alpha_pol, beta_pol=beta_pol, rm=rm)
        if not pol:
            extra = [k for k, v in given.items() if v is not None]
            if extra:
                raise ValueError(
                    f"`{extra[0]}` is given but `base` ({type(base).__name__}) is a "
                    "Stokes I model: polarization spectra need a polarimetric base "
                    "(e.g. `PolPixelImage`)."
                )
        if isinstance(fixed, str):
            fixed = (fixed,)
        fixed = tuple(fixed)
        for name in fixed:
            if name not in _SPECTRAL:
                raise ValueError(f"`fixed` names {name!r}: choose from {_SPECTRAL}.")
        dtype = jnp.result_type(float)
        self.base = base
        grid = base.grid
        self.alpha = _spectral_leaf("alpha", alpha, grid, dtype)
        self.beta = _spectral_leaf("beta", beta, grid, dtype)
        self.alpha_pol = _spectral_leaf("alpha_pol", alpha_pol, grid, dtype)
        self.beta_pol = _spectral_leaf("beta_pol", beta_pol, grid, dtype)
        self.rm = _spectral_leaf("rm", rm, grid, dtype)
        missing = [n for n in fixed if getattr(self, n) is None]
        if missing:
            raise ValueError(
                f"`fixed` names {missing[0]!r}, which is not given (it is 0 and "
                "holds no parameter): give it a value, or drop it from `fixed`."
            )
        self.fixed = fixed

    @property
    def grid(self) -> ImageGrid:  # type: ignore[override]
        """The base model's grid."""
        return self.base.grid

    @property
    def polarimetric(self) -> bool:  # type: ignore[override]
        """The base model's declaration."""
        return self.base.polarimetric

    def spectral(self, name: str) -> Float[Array, "ny nx"] | None:
        """The map `name` (`"alpha"`, `"beta"`, `"alpha_pol"`, `"beta_pol"`,
        `"rm"`) as an `(ny, nx)` array (a scalar broadcast; a fixed one without
        gradient), or `None` when not given."""
        if name not in _SPECTRAL:
            raise ValueError(f"`name` must be one of {_SPECTRAL}, got {name!r}.")
        x = getattr(self, name)
        if x is None:
            return None
        if name in self.fixed:
            x = jax.lax.stop_gradient(x)
        return jnp.broadcast_to(x, self.grid.shape)

    def __call__(self) -> Float[Array, "ny nx"] | Float[Array, "4 ny nx"]:
        """**Returns:** the image at the reference frequency `freq0` (the base
        model's), `(ny, nx)` or `(4, ny, nx)`, Jy/pixel."""
        return self.base()

    def at(self, freq: float) -> Float[Array, "ny nx"] | Float[Array, "4 ny nx"]:
        """The image at frequency `freq`.

        **Arguments:** `freq`, in Hz (a number: frequencies are static).

        **Returns:** `(ny, nx)`, or `(4, ny, nx)` for a polarimetric base, Jy/pixel.
        """
        freq = check_frequency("freq", freq)
        image = asarray(self.base())
        return spectral_image(image, self._maps(image.dtype), freq, self.freq0)

    def _maps(self, dtype) -> dict:
        return {
            n: (None if (m := self.spectral(n)) is None else m.astype(dtype))
            for n in _SPECTRAL
        }


def _poly(x: float, a, b):
    """`a x + b x²` (terms that are `None` are 0)."""
    out = 0.0
    if a is not None:
        out = out + a * x
    if b is not None:
        out = out + b * (x * x)
    return out


def spectral_image(image, maps: dict, freq: float, freq0: float):
    """`image` (at `freq0`; `(ny, nx)` or `(4, ny, nx)`) carried to `freq` by the
    spectral `maps` (see `MultiFrequencyImage`)."""
    x = math.log(freq / freq0)
    scale = jnp.exp(_poly(x, maps["alpha"], maps["beta"]))
    if image.ndim == 2:
        return image * scale
    i0, q0, u0, v0 = image[0], image[1], image[2], image[3]
    s = scale
    if maps["alpha_pol"] is not None or maps["beta_pol"] is not None:
        g = jnp.exp(_poly(x, maps["alpha_pol"], maps["beta_pol"]))
        # m₀ = |P₀|/I₀, NaN-safe where P₀ or I₀ is 0 (then m(ν)/m₀ = g).
        p2 = q0 * q0 + u0 * u0 + v0 * v0
        ok = (p2 > 0) & (i0 > 0)
        p = jnp.sqrt(jnp.where(ok, p2, 1.0))
        m0 = jnp.where(ok, p / jnp.where(ok, i0, 1.0), 0.0)
        # m(ν)/m₀ for m = m'/(1 + m'), m' = m'₀ g, m'₀ = m₀/(1 − m₀).
        s = s * g / ((1.0 - m0) + m0 * g)
    if maps["rm"] is not None:
        lam2 = (SPEED_OF_LIGHT / freq) ** 2 - (SPEED_OF_LIGHT / freq0) ** 2
        dphi = 2.0 * maps["rm"] * lam2
        c, sn = jnp.cos(dphi), jnp.sin(dphi)
        q, u = c * q0 - sn * u0, sn * q0 + c * u0
    else:
        q, u = q0, u0
    return jnp.stack([i0 * scale, s * q, s * u, s * v0])
