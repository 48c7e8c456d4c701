"""Smoothness regularizers: total variation (TV) and total squared variation
(TSV)."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._numerics import safe_hypot, safe_sqrt
from .._terms._inputs import as_image, ImageLike
from .._validation import check_flag, check_grid
from ._base import (
    AbstractRegularizer,
    as_dtype,
    check_eps,
    check_image_shape,
    norm_args,
)


def forward_differences(image):
    """`(d_row, d_col)`: `I[i+1, j] − I[i, j]` and `I[i, j+1] − I[i, j]` with the
    image zero beyond its last row / column (eht-imaging's boundary)."""
    zero_row = jnp.zeros_like(image[:1, :])
    zero_col = jnp.zeros_like(image[:, :1])
    d_row = jnp.concatenate([image[1:, :], zero_row], axis=0) - image
    d_col = jnp.concatenate([image[:, 1:], zero_col], axis=1) - image
    return d_row, d_col


class TV(AbstractRegularizer):
    r"""Total variation (isotropic), eht-imaging's `'tv'` with the sign flipped:

    `R(I) = Σ_{i,j} sqrt((I[i+1,j] − I[i,j])² + (I[i,j+1] − I[i,j])² + ε)`,

    the image being zero beyond its last row and column; divided by `F·p/b`
    (target flux, pixel size, beam) when `normalise=True`.

    The square root is NaN-safe: where its argument is exactly 0 (a flat patch
    with `ε = 0`) the derivative is 0 rather than NaN, so flat and symmetric
    images have finite gradients for every `ε >= 0`. `ε = 0` (the default)
    reproduces eht-imaging's values; `ε > 0` makes the penalty smooth.
    """

    report_name = "tv"

    grid: ImageGrid
    flux: Float[Array, ""] | None
    beam: Float[Array, ""] | None
    eps: float = eqx.field(static=True)
    normalise: bool = eqx.field(static=True)

    def __init__(
        self,
        grid: ImageGrid,
        *,
        eps: float = 0.0,
        flux: RealLike | None = None,
        beam: RealLike | None = None,
        normalise: bool = False,
    ):
        """**Arguments:**

        - `grid`: the image grid (`p = grid.psize`).
        - `eps`: smoothing `ε >= 0` (Jy²/pixel²).
        - `flux`, `beam`: `F` (Jy) and `b` (radians, e.g. `beam_from_uv(u, v)`);
          needed when `normalise=True`.
        - `normalise`: divide by `F·p/b`.
        """
        self.grid = check_grid(grid)
        self.eps = check_eps(eps)
        self.normalise = check_flag("normalise", normalise)
        self.flux, self.beam = norm_args(self.normalise, flux, beam)

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        check_image_shape(image, self.grid.shape, "TV")
        d_row, d_col = forward_differences(image)
        if image.dtype == jnp.float32 and self.eps < np.finfo(np.float32).tiny:
            # float32 squares of differences below ~1e-19 flush to 0 (a faint
            # pixel's gradient would vanish); scaled, they do not. (float64 keeps
            # eht-imaging's form, the same bits; it underflows only below 1e-154.)
            # An `ε` below float32's normal range is 0 there (so 1e-50 takes this
            # scaled form too; the unscaled one would lose the faint pixels).
            out = jnp.sum(safe_hypot(d_row, d_col))
        else:
            out = jnp.sum(safe_sqrt(d_row * d_row + d_col * d_col + self.eps))
        if not self.normalise:
            return out
        norm = as_dtype(self.flux, image) * self.grid.psize / as_dtype(self.beam, image)
        return out / norm


class TSV(AbstractRegularizer):
    r"""Total squared variation, eht-imaging's `'tv2'` with the sign flipped:

    `R(I) = Σ_{i,j} (I[i+1,j] − I[i,j])² + (I[i,j+1] − I[i,j])²`,

    the image being zero beyond its last row and column; divided by
    `p⁴ F² / b⁴` when `normalise=True`.
    """

    report_name = "tv2"

    grid: ImageGrid
    flux: Float[Array, ""] | None
    beam: Float[Array, ""] | None
    normalise: bool = eqx.field(static=True)

    def __init__(
        self,
        grid: ImageGrid,
        *,
        flux: RealLike | None = None,
        beam: RealLike | None = None,
        normalise: bool = False,
    ):
        """**Arguments:**

        - `grid`: the image grid (`p = grid.psize`).
        - `flux`, `beam`: `F` (Jy) and `b` (radians); needed when `normalise=True`.
        - `normalise`: divide by `p⁴ F² / b⁴`.
        """
        self.grid = check_grid(grid)
        self.normalise = check_flag("normalise", normalise)
        self.flux, self.beam = norm_args(self.normalise, flux, beam)

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        check_image_shape(image, self.grid.shape, "TSV")
        d_row, d_col = forward_differences(image)
        out = jnp.sum(d_row * d_row + d_col * d_col)
        if not self.normalise:
            return out
        f = as_dtype(self.flux, image)
        pb = self.grid.psize / as_dtype(self.beam, image)
        return out / (pb**4 * f * f)

    def _norm(self, image):
        """`p² F / b²`: the square root of the normalisation."""
        pb = self.grid.psize / as_dtype(self.beam, image)
        return pb * pb * as_dtype(self.flux, image)

    def residuals(self, image: ImageLike) -> Float[Array, " m"]:
        """The differences (divided by `p² F / b²` when normalised): the penalty is
        their sum of squares, so Gauss-Newton and Levenberg-Marquardt take it.

        **Arguments:** `image`, an `(ny, nx)` array or an image model.
        """
        img = as_image(image, self.grid)
        check_image_shape(img, self.grid.shape, "TSV")
        d_row, d_col = forward_differences(img)
        r = jnp.concatenate([d_row.reshape(-1), d_col.reshape(-1)])
        return r / self._norm(img) if self.normalise else r
