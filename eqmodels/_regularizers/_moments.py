"""Regularizers on the image's first and second moments: centroid, compactness,
Gaussian shape."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Scalar

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._numerics import FWHM_PER_SIGMA
from .._validation import check_flag, check_grid, check_radians, scalar_leaf
from ._base import (
    AbstractRegularizer,
    as_dtype,
    check_image_shape,
    coords,
    norm_args,
)


def safe_div(num, den):
    """`num / den`, and 0 where `den == 0` (the "double where": a moment of an
    image without flux is 0, value and gradient finite, never `0/0`)."""
    zero = den == 0
    return jnp.where(zero, 0.0, num / jnp.where(zero, jnp.ones_like(den), den))


class Centroid(AbstractRegularizer):
    r"""Centroid penalty (keeps the image centred on the phase centre):

    `R(I) = (Σ_p I_p x_p)² + (Σ_p I_p y_p)²`, divided by `b² F²` when
    `normalise=True`.

    `x`, `y` are the grid's pixel-centre coordinates (the forward model's origin).
    eht-imaging's `'cm'` measures from the centre of pixel `(ny/2, nx/2)` instead,
    half a pixel away on even grids: a deliberate difference.
    """

    report_name = "cm"

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

        - `grid`: the image grid.
        - `flux`, `beam`: `F` (Jy) and `b` (radians); needed when `normalise=True`.
        - `normalise`: divide by `b² F²`.
        """
        self.grid = check_grid(grid)
        self.normalise = check_flag("normalise", normalise)
        self.flux, self.beam = norm_args(self.normalise, flux, beam)

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        check_image_shape(image, self.grid.shape, "Centroid")
        xx, yy = coords(self.grid, image)
        mx = jnp.sum(image * xx)
        my = jnp.sum(image * yy)
        out = mx * mx + my * my
        if not self.normalise:
            return out
        bf = as_dtype(self.beam, image) * as_dtype(self.flux, image)
        return out / (bf * bf)


class Compactness(AbstractRegularizer):
    r"""Second moment about the centroid (eht-imaging's `'compact'`, sign flipped):

    `R(I) = Σ_p I_p ((x_p − x̄)² + (y_p − ȳ)²)`, `x̄ = Σ I x / F`, `ȳ = Σ I y / F`,

    divided by `F b²` when `normalise=True`. The centroid divides by the target flux
    `F` as eht-imaging does; with `flux=None` (and `normalise=False`) it divides by
    the image's own flux `Σ I` instead, the textbook second moment (an image
    without flux, `Σ I = 0`, has centroid 0 and penalty `Σ I r²`, 0 for an
    all-zero image, never `0/0`).
    """

    report_name = "compact"

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

        - `grid`: the image grid.
        - `flux`: target flux `F` (Jy): the centroid's denominator and part of the
          normalisation; `None` uses the image's flux (then `normalise` must be
          `False`).
        - `beam`: `b` (radians); needed when `normalise=True`.
        - `normalise`: divide by `F b²`.
        """
        self.grid = check_grid(grid)
        self.normalise = check_flag("normalise", normalise)
        self.flux, self.beam = norm_args(self.normalise, flux, beam)

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        check_image_shape(image, self.grid.shape, "Compactness")
        xx, yy = coords(self.grid, image)
        total = jnp.sum(image) if self.flux is None else as_dtype(self.flux, image)
        xbar = safe_div(jnp.sum(image * xx), total)
        ybar = safe_div(jnp.sum(image * yy), total)
        dx = xx - xbar
        dy = yy - ybar
        out = jnp.sum(image * (dx * dx + dy * dy))
        if not self.normalise:
            return out
        b = as_dtype(self.beam, image)
        return out / (as_dtype(self.flux, image) * b * b)


class Compactness2(AbstractRegularizer):
    r"""Squared-intensity moment about the phase centre (eht-imaging's
    `'compact2'`, sign flipped):

    `R(I) = Σ_p I_p² (x_p² + y_p²)`, divided by `F² b²` when `normalise=True`.
    """

    report_name = "compact2"

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

        - `grid`: the image grid.
        - `flux`, `beam`: `F` (Jy) and `b` (radians); needed when `normalise=True`.
        - `normalise`: divide by `F² b²`.
        """
        self.grid = check_grid(grid)
        self.normalise = check_flag("normalise", normalise)
        self.flux, self.beam = norm_args(self.normalise, flux, beam)

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        check_image_shape(image, self.grid.shape, "Compactness2")
        xx, yy = coords(self.grid, image)
        out = jnp.sum(image * image * (xx * xx + yy * yy))
        if not self.normalise:
            return out
        fb = as_dtype(self.flux, image) * as_dtype(self.beam, image)
        return out / (fb * fb)


class GaussianMoments(AbstractRegularizer):
    r"""Penalises the difference between the image's second moments and those of a
    target elliptical Gaussian (eht-imaging's `'rgauss'`, sign flipped):

    `R(I) = ((M_xx − G_xx)² + (M_yy − G_yy)² + 2 (M_xy − G_xy)²) / (θ_maj θ_min)²`

    where `M` is the image's flux-normalised covariance about its centroid
    (`M_xx = Σ I (x − x̄)² / Σ I`, ...), `G` the target's covariance (`σ = θ /
    sqrt(8 ln 2)` along the major axis at position angle `φ` east of north, and
    the minor axis), and `θ_maj`, `θ_min` the target FWHMs: the squared Frobenius
    distance of the two covariances, made dimensionless. Independent of the total
    flux and of the image's position. An image without flux (`Σ I = 0`) is
    given zero moments (`M = 0`, a finite penalty) instead of `0/0`.
    """

    report_name = "rgauss"

    grid: ImageGrid
    fwhm_major: Float[Array, ""]
    fwhm_minor: Float[Array, ""]
    angle: Float[Array, ""]

    def __init__(
        self,
        grid: ImageGrid,
        fwhm_major: RealLike,
        fwhm_minor: RealLike | None = None,
        angle: RealLike = 0.0,
    ):
        """**Arguments:**

        - `grid`: the image grid.
        - `fwhm_major`: the target's major-axis FWHM `θ_maj` (radians).
        - `fwhm_minor`: the minor-axis FWHM (radians); default `fwhm_major`.
        - `angle`: position angle `φ` of the major axis, radians east of north.
        """
        self.grid = check_grid(grid)
        self.fwhm_major = scalar_leaf("fwhm_major", fwhm_major, positive=True)
        self.fwhm_minor = scalar_leaf(
            "fwhm_minor",
            fwhm_major if fwhm_minor is None else fwhm_minor,
            positive=True,
        )
        check_radians("fwhm_major", self.fwhm_major)
        check_radians("fwhm_minor", self.fwhm_minor)
        self.angle = scalar_leaf("angle", angle)

    def target_covariance(self):
        """`(G_xx, G_yy, G_xy)` of the target Gaussian (radians²)."""
        return _covariance(self.fwhm_major, self.fwhm_minor, self.angle)

    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        check_image_shape(image, self.grid.shape, "GaussianMoments")
        # In pixel units (the penalty is dimensionless): radians⁴ would underflow
        # float32.
        p = self.grid.psize
        xx, yy = coords(self.grid, image)
        xx, yy = xx / p, yy / p
        total = jnp.sum(image)
        dx = xx - safe_div(jnp.sum(image * xx), total)
        dy = yy - safe_div(jnp.sum(image * yy), total)
        mxx = safe_div(jnp.sum(image * dx * dx), total)
        myy = safe_div(jnp.sum(image * dy * dy), total)
        mxy = safe_div(jnp.sum(image * dx * dy), total)
        # The target in pixels too, behind an optimisation barrier: without it XLA
        # folds the divisions by `p` into one by `p⁴` after squaring
        # `fwhm_major · fwhm_minor` (radians⁴, ~1e-39: 0 in float32), giving
        # `0 · inf = NaN` whenever the term is an argument of a compiled program.
        maj, mnr, angle = jax.lax.optimization_barrier(
            tuple(
                as_dtype(x, image)
                for x in (self.fwhm_major / p, self.fwhm_minor / p, self.angle)
            )
        )
        gxx, gyy, gxy = _covariance(maj, mnr, angle)
        num = (mxx - gxx) ** 2 + (myy - gyy) ** 2 + 2.0 * (mxy - gxy) ** 2
        scale = maj * mnr
        return num / (scale * scale)


def _covariance(fwhm_major, fwhm_minor, angle):
    """`(G_xx, G_yy, G_xy)` of a Gaussian of FWHMs `fwhm_major`, `fwhm_minor` with
    its major axis at position angle `angle` (in the FWHMs' units, squared)."""
    s_maj = fwhm_major / FWHM_PER_SIGMA
    s_min = fwhm_minor / FWHM_PER_SIGMA
    sa, ca = jnp.sin(angle), jnp.cos(angle)
    v_maj, v_min = s_maj * s_maj, s_min * s_min
    return (
        v_maj * sa * sa + v_min * ca * ca,
        v_maj * ca * ca + v_min * sa * sa,
        (v_maj - v_min) * sa * ca,
    )
