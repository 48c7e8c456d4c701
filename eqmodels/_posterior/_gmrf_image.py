"""`GMRFImage`: a log image under a Gaussian Markov random field whose
hyperparameters (the marginal scale σ and the correlation length ρ) are parameters
of the model, in the centred or the non-centred parametrisation."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Real

from .._grid import ImageGrid
from .._image._base import AbstractImageModel
from .._validation import (
    as_real,
    check_flag,
    check_grid,
    is_concrete,
    resolve_float_dtype,
)
from ._gmrf import dct2_matrix, laplacian_eigenvalues


class FrozenArray:
    """A read-only numpy array held in a static field (configuration, not a
    parameter): hashed and compared by value, so equal ones share a compiled
    program."""

    __slots__ = ("value", "_hash")

    def __init__(self, value: np.ndarray):
        value = np.array(value, dtype=np.float64)
        value.setflags(write=False)
        self.value = value
        self._hash = hash((value.shape, value.tobytes()))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, FrozenArray)
            and self.value.shape == other.value.shape
            and bool(np.array_equal(self.value, other.value))
        )

    def __repr__(self) -> str:
        return f"FrozenArray(shape={self.value.shape})"


def gmrf_tau_kappa(
    sigma: Float[ArrayLike, ""], rho: Float[ArrayLike, ""], lam: Float[Array, "ny nx"]
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """`(τ, κ)` of the field `Q = τ (κ² I + Δ)` with correlation length `ρ`
    (`κ = 1/ρ`) and pixel-averaged marginal variance `σ²`:
    `τ = c(κ) / σ²`, `c(κ) = (1/n) Σ_jk 1/(κ² + λ_jk) = tr((κ²I + Δ)⁻¹)/n`."""
    kappa = 1.0 / rho
    c = jnp.mean(1.0 / (kappa**2 + lam))
    return c / sigma**2, kappa


class GMRFImage(AbstractImageModel):
    r"""A log image `x` (the image is `exp(x)`, Jy/pixel) under a Gaussian Markov
    random field whose hyperparameters are parameters of the model, for sampling
    them with the image (pair it with [`eqmodels.GMRFHyperPrior`][] and give
    `sigma` and `rho` hyperpriors of `support="positive"`):

    `x ~ N(μ, Q⁻¹)`, `Q = τ (κ² I + Δ)`, `κ = 1/ρ`, `τ = c(κ) / σ²`,

    with `Δ` the pixel grid's graph Laplacian (4-neighbours, free boundaries, as
    [`eqmodels.GMRFPrior`][]) and `c(κ) = tr((κ² I + Δ)⁻¹)/n`, so that

    - `rho` (`ρ`) is the correlation length in pixels, and
    - `sigma` (`σ`) is the marginal standard deviation of `x` averaged over the
      pixels (`Σ_i Var x_i / n = σ²` exactly; the pixels at the edges vary a
      little more than those inside).

    This σ, ρ parametrisation (Comrade's choice of names; its field is on a
    periodic grid and its σ multiplies a unit-precision field) keeps the two
    nearly orthogonal: changing ρ does not change the image's overall scale of
    fluctuations.

    **Parametrisations** (`centred`):

    - non-centred (`centred=False`, the default): `params` is white noise
      `ζ ~ N(0, I)` in the field's eigenbasis and
      `x = μ + V diag((τ (κ² + λ_jk))^{-1/2}) ζ`, where `V` (the orthonormal 2-D
      inverse DCT-II, two small matrix products) diagonalises the Neumann Laplacian,
      `Δ = V diag(λ_jk) Vᵀ`, `λ_jk = 4 sin²(πj/2n_y) + 4 sin²(πk/2n_x)`. The prior
      of `params` does not depend on σ, ρ: the funnel between a field and its
      scale that makes centred hierarchical models hard for NUTS is gone. Use
      it when the data constrain the image weakly (typical of VLBI).
    - centred (`centred=True`): `params` is `x` itself and the prior is the
      GMRF density with its `σ`, `ρ`-dependent normalisation. Better when the
      data pin the image down.

    The two give the same distribution of images (the test-suite checks the
    non-centred map's covariance against `Q⁻¹`).
    """

    grid: ImageGrid
    params: Float[Array, "ny nx"]
    sigma: Float[Array, ""]
    rho: Float[Array, ""]
    frozen_mean: FrozenArray = eqx.field(static=True)
    centred: bool = eqx.field(static=True)

    def __init__(
        self,
        grid: ImageGrid,
        *,
        sigma: Real[ArrayLike, "..."],
        rho: Real[ArrayLike, "..."],
        mean: Real[ArrayLike, "..."] = 0.0,
        params: Real[ArrayLike, "..."] | None = None,
        centred: bool = False,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][].
        - `sigma`: `σ > 0`, the pixel-averaged marginal standard deviation of
          the log image (a parameter; e.g. 1 for fluctuations of a factor e).
        - `rho`: `ρ > 0`, the correlation length in pixels (a parameter).
        - `mean`: `μ`, the mean log image: a scalar or an `(ny, nx)` array (e.g.
          the log of a Gaussian prior image). Fixed, not a parameter: concrete
          (numpy, outside `jit`).
        - `params`: the starting `(ny, nx)` parameters: `ζ` (non-centred) or `x`
          (centred). Default: 0 (non-centred) or `μ` (centred), the image
          `exp(μ)`.
        - `centred`: the parametrisation (see above); default `False`.
        - `dtype`: float32 / float64; default from the inputs.
        """
        check_grid(grid)
        centred = check_flag("centred", centred)
        shape = (int(grid.ny), int(grid.nx))
        for name, val in (("sigma", sigma), ("rho", rho)):
            if np.ndim(val) != 0:
                raise ValueError(
                    f"`{name}` must be a scalar, got shape {np.shape(val)}."
                )
            if is_concrete(val) and not (
                np.isfinite(np.asarray(val, float)) and float(val) > 0
            ):
                raise ValueError(
                    f"`{name}` must be finite and > 0, got {val!r}"
                    + (
                        " (the correlation length in pixels)."
                        if name == "rho"
                        else " (the marginal standard deviation of the log image)."
                    )
                )
        if not is_concrete(mean):
            raise TypeError(
                "`mean` must be concrete (a number or a numpy array, outside "
                "`jit`): it is fixed configuration, not a parameter."
            )
        mean = np.asarray(as_real("mean", mean), np.float64)
        if mean.shape == ():
            mean = np.full(shape, float(mean))
        if mean.shape != shape:
            raise ValueError(
                f"`mean` has shape {mean.shape}; expected a scalar or the grid's "
                f"{shape} (a mean log image)."
            )
        if not np.all(np.isfinite(mean)):
            raise ValueError(
                "`mean` has non-finite values: it is a mean *log* image (take the "
                "log of a strictly positive prior image)."
            )
        if params is None:
            params = mean if centred else np.zeros(shape)
        else:
            params = as_real("params", params)
            if tuple(np.shape(params)) != shape:
                raise ValueError(
                    f"`params` has shape {tuple(np.shape(params))}; expected the "
                    f"grid's {shape}."
                )
        dtype = resolve_float_dtype(dtype, params, sigma, rho)
        self.grid = grid
        self.params = jnp.asarray(params, dtype)
        self.sigma = jnp.asarray(sigma, dtype)
        self.rho = jnp.asarray(rho, dtype)
        self.frozen_mean = FrozenArray(mean)
        self.centred = bool(centred)

    @property
    def mean(self) -> np.ndarray:
        """`μ`, the mean log image, `(ny, nx)` (numpy)."""
        return self.frozen_mean.value

    def tau_kappa(self) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """`(τ, κ)` of the field's precision `Q = τ (κ² I + Δ)` at the model's
        `sigma`, `rho`."""
        lam = jnp.asarray(laplacian_eigenvalues(*self.grid.shape), self.params.dtype)
        return gmrf_tau_kappa(self.sigma, self.rho, lam)

    def log_image(self) -> Float[Array, "ny nx"]:
        """`x`, the log image, `(ny, nx)`."""
        if self.centred:
            return self.params
        lam = jnp.asarray(laplacian_eigenvalues(*self.grid.shape), self.params.dtype)
        tau, kappa = gmrf_tau_kappa(self.sigma, self.rho, lam)
        amp = 1.0 / jnp.sqrt(tau * (kappa**2 + lam))
        dtype = self.params.dtype
        cy = jnp.asarray(dct2_matrix(self.grid.ny), dtype)
        cx = jnp.asarray(dct2_matrix(self.grid.nx), dtype)
        field = cy.T @ (amp * self.params) @ cx  # the 2-D inverse DCT-II
        return jnp.asarray(self.mean, self.params.dtype) + field

    def __call__(self) -> Float[Array, "ny nx"]:
        """**Returns:** the image `exp(x)`, `(ny, nx)`, Jy/pixel."""
        return jnp.exp(self.log_image())
