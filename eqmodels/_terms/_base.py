"""The term interfaces: image → scalar.

`AbstractTerm` is the common base of data terms and regularizers. It carries the
composition dunders (`w * term`, `term + term`) that build an
[`eqmodels.Objective`][]; `AbstractDataTerm` (chi² of a data product) and
`eqmodels.AbstractRegularizer` (a penalty on the image) derive from it.
"""

import abc
from typing import TypeAlias

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._forward._base import AbstractForwardModel
from .._image._base import AbstractImageModel


ImageLike: TypeAlias = Float[ArrayLike, "ny nx"] | AbstractImageModel


def as_image(
    image: Float[ArrayLike, "ny nx"] | AbstractImageModel,
) -> Float[Array, "ny nx"]:
    """An image array from an image array or an image model."""
    return image() if isinstance(image, AbstractImageModel) else jnp.asarray(image)


class AbstractTerm(eqx.Module, strict=True):
    """Base class of everything an [`eqmodels.Objective`][] sums: a module mapping an
    image (an `(ny, nx)` array or an [`eqmodels.AbstractImageModel`][]) to a scalar.

    Terms compose with arithmetic: `w * term` is an `Objective` with one weighted
    term, `a + b` an `Objective` holding both (nested sums are flattened), and
    `sum([...])` works too. Subclass [`eqmodels.AbstractDataTerm`][] or
    [`eqmodels.AbstractRegularizer`][] rather than this class directly: the
    `Objective` treats the two families differently (e.g. `chi2_offset`).
    """

    # numpy must defer `array * term` to `__rmul__` (which rejects non-scalars)
    # rather than broadcasting the term into an object array.
    __array_ufunc__ = None

    @abc.abstractmethod
    def __call__(self, image: ImageLike) -> Scalar:
        """**Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** the scalar value of the term.
        """

    def __mul__(self, weight) -> "AbstractTerm":
        from .._objective import as_objective

        obj = as_objective(self)
        w = _scalar_weight(weight)
        return obj.with_weights(obj.weights * w.astype(obj.weights.dtype))

    def __rmul__(self, weight) -> "AbstractTerm":
        return self.__mul__(weight)

    def __truediv__(self, weight) -> "AbstractTerm":
        return self.__mul__(1.0 / _scalar_weight(weight))

    def __add__(self, other) -> "AbstractTerm":
        from .._objective import concatenate

        if not isinstance(other, AbstractTerm):
            return NotImplemented
        return concatenate(self, other)

    def __radd__(self, other) -> "AbstractTerm":
        from .._objective import as_objective

        # `sum(terms)` starts from the integer 0.
        if isinstance(other, int | float) and other == 0:
            return as_objective(self)
        return NotImplemented


def _scalar_weight(weight):
    if isinstance(weight, AbstractTerm):
        raise TypeError(
            "a term can only be multiplied by a scalar weight, not by another term."
        )
    w = jnp.asarray(weight)
    if w.ndim != 0:
        raise TypeError(
            f"a term's weight must be a scalar, got shape {w.shape}; for a survey over "
            "weights, `jax.vmap` over `Objective.with_weights`."
        )
    if jnp.iscomplexobj(w):
        raise TypeError("a term's weight must be real, got a complex number.")
    return w


class AbstractDataTerm(AbstractTerm, strict=True):
    """Base class of data terms (chi² of some data product).

    A data term maps an image (an `(ny, nx)` array or an
    [`eqmodels.AbstractImageModel`][]) to a scalar. It is **row-independent**: every
    data row carries its own points, observed value and weight, so rows can be
    padded (weight exactly 0) and split across devices. `n_rows` is the number of
    real rows the chi² is normalised by; padding must not change it.

    Subclasses implement `residuals(image)`, a real vector `r` with
    `chi² = Σ r²` (what Gauss-Newton and Jacobian work need); `__call__` defaults
    to that sum. A data term evaluates its forward model once, as
    `self.forward(image)`: an [`eqmodels.Objective`][] relies on this to serve
    several terms from one shared transform.
    """

    forward: eqx.AbstractVar[AbstractForwardModel]
    n_rows: eqx.AbstractVar[int]

    @abc.abstractmethod
    def residuals(self, image: ImageLike) -> Float[Array, " m"]:
        """**Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** the real residual vector `r`, with `chi² = Σ r²`.
        """

    def __call__(self, image: ImageLike) -> Scalar:
        """**Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** the chi² (a scalar).
        """
        r = self.residuals(image)
        return jnp.sum(r * r)
