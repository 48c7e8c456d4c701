"""Spectral regularizers: penalties on a multi-frequency image's spectral maps
(eht-imaging's `l2_alpha`, `tv_alpha`, `l2_beta`, `tv_beta`, ...)."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._image._multifreq import MultiFrequencyImage
from .._numerics import asarray, safe_sqrt
from .._terms._inputs import check_real_scalar, default_name
from .._validation import (
    as_real,
    check_flag,
    check_grid,
    check_radians,
    is_concrete,
    scalar_leaf,
)
from ._base import AbstractRegularizer, check_eps
from ._smoothness import forward_differences


#: Spectral map → eht-imaging's suffix of its regularizer names.
_SUFFIX = {
    "alpha": "alpha",
    "beta": "beta",
    "alpha_pol": "alphap",
    "beta_pol": "betap",
    "rm": "rm",
}


def _check_which(which) -> str:
    if which not in _SUFFIX:
        raise ValueError(
            f"`which` must be one of {tuple(_SUFFIX)} (the spectral map to "
            f"regularize), got {which!r}."
        )
    return which


def spectral_map(reg, image) -> Float[Array, "ny nx"]:
    """The map `reg.which` of the multi-frequency model `image`, refused unless
    `image` is a [`eqmodels.MultiFrequencyImage`][] on `reg.grid` that has it."""
    name = type(reg).__name__
    if not isinstance(image, MultiFrequencyImage):
        raise TypeError(
            f"{name} regularizes a spectral map, so it needs the image model "
            f"itself, a MultiFrequencyImage, got {type(image).__name__}: pass the "
            "model (`objective(model)`), not its image."
        )
    if tuple(image.grid.shape) != tuple(reg.grid.shape) or not np.isclose(
        image.grid.psize, reg.grid.psize, rtol=1e-12, atol=0.0
    ):
        raise ValueError(
            f"{name} is built on {reg.grid!r} but the image model is on "
            f"{image.grid!r}: build it on the model's grid."
        )
    out = image.spectral(reg.which)
    if out is None:
        raise ValueError(
            f"{name}(which={reg.which!r}): the MultiFrequencyImage has no "
            f"`{reg.which}` map (it is 0 and holds no parameter): give it one "
            f"(`{reg.which}=0.0`) or drop the regularizer."
        )
    return out


class AbstractSpectralRegularizer(AbstractRegularizer):
    """Base class of penalties on one spectral map (`which`: `"alpha"`, `"beta"`,
    `"alpha_pol"`, `"beta_pol"` or `"rm"`) of a
    [`eqmodels.MultiFrequencyImage`][]. An objective hands these terms the image
    model itself (`takes_model`); `penalty` receives the `(ny, nx)` map."""

    takes_model: ClassVar[bool] = True

    grid: eqx.AbstractVar[ImageGrid]
    which: eqx.AbstractVar[str]

    def __call__(self, image: MultiFrequencyImage) -> Scalar:
        """**Arguments:** `image`, a [`eqmodels.MultiFrequencyImage`][].

        **Returns:** the penalty on its map `which`.
        """
        return check_real_scalar(
            self.penalty(spectral_map(self, image)), default_name(self), self
        )


class SpectralL2(AbstractSpectralRegularizer):
    r"""Squared distance of a spectral map from a prior, eht-imaging's `l2_alpha`
    (`l2_beta`, `l2_alphap`, `l2_betap`, `l2_rm`; the penalty its
    `regularizer_mf` returns):

    `R(α) = Σ_ij (α_ij − α_prior,ij)²`, divided by the number of pixels `N` when
    `normalise=True` (eht-imaging's `norm_reg`).
    """

    grid: ImageGrid
    prior: Float[Array, "*ny_nx"]
    which: str = eqx.field(static=True)
    normalise: bool = eqx.field(static=True)

    def __init__(
        self,
        grid: ImageGrid,
        which: str = "alpha",
        *,
        prior: Float[ArrayLike, "*ny_nx"] | float = 0.0,
        normalise: bool = False,
    ):
        """**Arguments:**

        - `grid`: the image grid.
        - `which`: the map (`"alpha"`, `"beta"`, `"alpha_pol"`, `"beta_pol"`,
          `"rm"`).
        - `prior`: the map's prior, a scalar or an `(ny, nx)` map (default 0).
        - `normalise`: divide by the number of pixels.
        """
        self.grid = check_grid(grid)
        self.which = _check_which(which)
        prior = as_real("prior", prior)
        if np.shape(prior) not in ((), tuple(grid.shape)):
            raise ValueError(
                f"`prior` has shape {np.shape(prior)}: give a scalar or a map of "
                f"shape {tuple(grid.shape)} (ny, nx) on the grid."
            )
        if is_concrete(prior) and not np.all(np.isfinite(np.asarray(prior))):
            raise ValueError("`prior` has non-finite values.")
        self.prior = asarray(prior, jnp.result_type(float))
        self.normalise = check_flag("normalise", normalise)

    @property
    def report_name(self) -> str:  # type: ignore[override]
        """eht-imaging's name: `l2_alpha`, `l2_beta`, ..."""
        return f"l2_{_SUFFIX[self.which]}"

    def residuals(self, image: MultiFrequencyImage) -> Float[Array, " m"]:
        """`r = (α − α_prior)/sqrt(N)` (or without `sqrt(N)`), `R = Σ r²`."""
        x = spectral_map(self, image)
        r = (x - asarray(self.prior, x.dtype)).reshape(-1)
        return r / np.sqrt(x.size) if self.normalise else r

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        d = image - asarray(self.prior, image.dtype)
        out = jnp.sum(d * d)
        return out / image.size if self.normalise else out


class SpectralTV(AbstractSpectralRegularizer):
    r"""Total variation of a spectral map, eht-imaging's `tv_alpha` (`tv_beta`,
    `tv_alphap`, `tv_betap`, `tv_rm`; the penalty its `regularizer_mf` returns):

    `R(α) = Σ_ij sqrt((α[i+1,j] − α[i,j])² + (α[i,j+1] − α[i,j])² + ε)`,

    the map zero beyond its last row and column (eht-imaging's boundary), `ε =
    1e-12` by default (eht-imaging's); divided by `N p/b` when `normalise=True`
    (`N` pixels, pixel size `p`, beam `b`, default `b = p`: eht-imaging's
    `norm_reg` with its `beam_size`).
    """

    grid: ImageGrid
    beam: Float[Array, ""] | None
    which: str = eqx.field(static=True)
    eps: float = eqx.field(static=True)
    normalise: bool = eqx.field(static=True)

    def __init__(
        self,
        grid: ImageGrid,
        which: str = "alpha",
        *,
        eps: float = 1e-12,
        beam: RealLike | None = None,
        normalise: bool = False,
    ):
        """**Arguments:**

        - `grid`: the image grid.
        - `which`: the map (`"alpha"`, `"beta"`, `"alpha_pol"`, `"beta_pol"`,
          `"rm"`).
        - `eps`: smoothing `ε >= 0` (default eht-imaging's 1e-12).
        - `beam`: `b` in radians for the normalisation (default: the pixel size).
        - `normalise`: divide by `N p/b`.
        """
        self.grid = check_grid(grid)
        self.which = _check_which(which)
        self.eps = check_eps(eps)
        if beam is not None:
            beam = scalar_leaf("beam", beam, positive=True)
            check_radians("beam", beam)
        self.beam = beam
        self.normalise = check_flag("normalise", normalise)

    @property
    def report_name(self) -> str:  # type: ignore[override]
        """eht-imaging's name: `tv_alpha`, `tv_beta`, ..."""
        return f"tv_{_SUFFIX[self.which]}"

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        d_row, d_col = forward_differences(image)
        out = jnp.sum(safe_sqrt(d_row * d_row + d_col * d_col + self.eps))
        if not self.normalise:
            return out
        if self.beam is None:
            return out / image.size
        return out / (image.size * self.grid.psize / asarray(self.beam, image.dtype))
