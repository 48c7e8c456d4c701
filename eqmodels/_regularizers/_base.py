"""The regularizer interface, and the checks and normalisation constants shared by
the regularizers."""

import abc
import math
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._custom_types import ArraySequence
from .._grid import ImageGrid
from .._image._base import AbstractImageModel
from .._numerics import asarray
from .._terms._inputs import (
    as_image,
    as_stokes,
    check_real_scalar,
    default_name,
    ImageLike,
    term_grid,
)
from .._terms._objective import AbstractTerm
from .._validation import as_real, check_radians, is_concrete, scalar_leaf


class AbstractRegularizer(AbstractTerm):
    """Base class of regularizers: a penalty on the image, to be **minimised**.

    `reg(image)` accepts an `(ny, nx)` array or an [`eqmodels.AbstractImageModel`][];
    subclasses implement `penalty(image)` on the array (a polarimetric regularizer,
    declaring `polarimetric = True`, gets the four Stokes planes `(4, ny, nx)`; a
    Stokes I one given a polarimetric image, its I plane). Regularizers compose with
    data terms into an [`eqmodels.Objective`][]: `100 * SimpleEntropy(...) + ...`.

    Entropies are returned with eht-imaging's sign flipped (eht-imaging maximises
    `S`, we minimise `−S`), so every regularizer here is a penalty.

    A penalty that is a sum of squares may define the optional
    `residuals(image)` (see below; `has_residuals` then says so).
    """

    has_residuals: ClassVar[bool] = False

    @abc.abstractmethod
    def penalty(self, image: Float[Array, "ny nx"]) -> Scalar:
        """**Arguments:** `image`, a real `(ny, nx)` array (Jy/pixel).

        **Returns:** the penalty (a scalar).
        """

    def __call__(self, image: ImageLike) -> Scalar:
        """**Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** the penalty (a scalar).
        """
        if self.polarimetric:
            arr = as_stokes(image, term_grid(self), type(self).__name__)
        else:
            arr = as_image(image, term_grid(self))
        return check_real_scalar(self.penalty(arr), default_name(self), self)

    def residuals(self, image: ImageLike) -> Float[Array, " m"]:
        """Optional: the real residual vector `r` of a penalty that is a sum of
        squares, `penalty = Σ r²` (what Gauss-Newton and Levenberg-Marquardt
        minimise). A subclass that defines it declares `has_residuals = True` (set
        for it when it defines `residuals` and says nothing); the base's raises.

        **Arguments:** `image`, an `(ny, nx)` array or an image model.
        """
        raise NotImplementedError(
            f"{type(self).__name__} is not a sum of squares (it declares no "
            "`residuals`): least-squares solvers need one; minimise the objective "
            "with a gradient solver instead, or define `residuals(image)` on it."
        )


def check_image_shape(image: Float[Array, "..."], shape: tuple[int, ...], who: str):
    if tuple(image.shape) != tuple(shape):
        raise ValueError(
            f"{who}: `image` has shape {tuple(image.shape)} but the regularizer is "
            f"built for {tuple(shape)} (ny, nx); a batch of images goes through "
            "`jax.vmap`."
        )


def optional_scalar(name: str, x, needed: bool, why: str) -> Float[Array, ""] | None:
    if x is None:
        if needed:
            raise ValueError(f"`{name}` is required {why}.")
        return None
    return scalar_leaf(name, x, positive=True)


def norm_args(normalise: bool, flux, beam):
    """`(flux, beam)` as optional positive scalar leaves, both required when
    `normalise` is true."""
    why = "when normalise=True"
    beam = optional_scalar(
        "beam", beam, normalise, why + " (e.g. `beam_from_uv(u, v)`)"
    )
    if beam is not None:
        check_radians("beam", beam)
    return optional_scalar("flux", flux, normalise, why), beam


def prior_grid(prior) -> ImageGrid | None:
    """The grid of a prior given as an image model (kept, so that an objective
    refuses terms on another grid), else `None`."""
    return prior.grid if isinstance(prior, AbstractImageModel) else None


def check_prior(
    prior: Float[ArrayLike, "ny nx"] | ArraySequence | AbstractImageModel,
    *,
    nonneg: bool = True,
):
    if isinstance(prior, AbstractImageModel):
        prior = prior()  # e.g. a GaussianImage: its image
    prior = as_real("prior", prior)
    if is_concrete(prior):
        prior = np.asarray(prior)
        if prior.ndim != 2:
            raise ValueError(
                f"`prior` must be an image of shape (ny, nx), got shape {prior.shape}."
            )
        if nonneg and np.any(prior < 0):
            raise ValueError(
                "`prior` has negative pixels; a prior image must be >= 0 (pixels "
                "where it is 0 must be 0 in the image too, e.g. outside a mask)."
            )
        if nonneg and not np.any(prior > 0):
            raise ValueError(
                "`prior` is zero everywhere: the entropy of any positive image is "
                "then infinite. Give a prior image with flux (e.g. a Gaussian)."
            )
    return asarray(prior, jnp.result_type(float))


def check_eps(eps: float, name: str = "eps") -> float:
    try:
        eps = float(eps)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be a float, got {eps!r}.")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"`{name}` must be finite and >= 0, got {eps}.")
    return eps


def as_dtype(x: Float[Array, "*s"], like: Float[Array, "..."]) -> Float[Array, "*s"]:
    """Cast a held constant to the image's dtype (float32 images stay float32)."""
    return asarray(x, like.dtype)


def coords(grid: ImageGrid, like: Float[Array, "..."]):
    """Pixel-centre coordinate images `(xx, yy)` in radians, the image's dtype."""
    xx, yy = grid.coords()
    return asarray(xx, like.dtype), asarray(yy, like.dtype)


def beam_from_uv(
    u: Float[ArrayLike, "*p"] | ArraySequence, v: Float[ArrayLike, "*p"] | ArraySequence
) -> float:
    """The nominal resolution `b = 1 / max |(u, v)|` (radians), eht-imaging's
    `obs.res()`, used by the regularizers' normalisations.

    **Arguments:** `u`, `v` in wavelengths (e.g. `data.u`, `data.v`).

    **Returns:** `b` in radians.
    """
    u = as_real("u", u)
    v = as_real("v", v)
    if u.shape != v.shape:
        raise ValueError(f"`u` and `v` differ in shape: {u.shape} and {v.shape}.")
    if u.size == 0:
        raise ValueError("`u` is empty: the beam needs at least one baseline.")
    longest = float(np.max(np.hypot(u, v)))
    if not longest > 0:
        raise ValueError(
            "every baseline has `u` = `v` = 0 (autocorrelations only?): the nominal "
            "beam `1 / max |(u, v)|` is undefined."
        )
    return 1.0 / longest
