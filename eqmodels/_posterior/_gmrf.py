"""A Gaussian Markov random field prior on an image's pixels (Comrade's imaging
default): precision `Q = τ (κ² I + Δ)` with `Δ` the grid's graph Laplacian."""

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, PyTree, Scalar

from .._grid import ImageGrid
from .._validation import is_concrete
from ._priors import AbstractPrior


def pixel_params(model: PyTree) -> Float[Array, "..."]:
    """The default `where` of [`eqmodels.GMRFPrior`][]: `model.params`."""
    return model.params


def laplacian_eigenvalues(ny: int, nx: int) -> np.ndarray:
    """The eigenvalues of the `(ny, nx)` grid's graph Laplacian (free, Neumann
    boundaries: each pixel coupled to its 4 neighbours inside the grid),
    `4 sin²(π j / 2ny) + 4 sin²(π k / 2nx)`, shape `(ny, nx)` (the DCT-II basis)."""
    ly = 4.0 * np.sin(np.pi * np.arange(ny) / (2 * ny)) ** 2
    lx = 4.0 * np.sin(np.pi * np.arange(nx) / (2 * nx)) ** 2
    return ly[:, None] + lx[None, :]


@functools.lru_cache(maxsize=32)
def dct2_matrix(n: int) -> np.ndarray:
    """The orthonormal DCT-II matrix `C` (`(n, n)`, read-only), row `k` the
    eigenvector `∝ cos(πk(i + ½)/n)` of the path graph's Laplacian with eigenvalue
    `4 sin²(πk/2n)`: `C x` analyses, `Cᵀ c` synthesises."""
    k = np.arange(n)[:, None]
    c = np.sqrt(2.0 / n) * np.cos(np.pi * k * (np.arange(n)[None, :] + 0.5) / n)
    c[0] /= np.sqrt(2.0)
    c.setflags(write=False)
    return c


class GMRFPrior(AbstractPrior):
    r"""A Gaussian Markov random field on an image's pixels `x` (the parameters of a
    [`eqmodels.PixelImage`][]: the log image for the default `transform="log"`):

    `ln p(x) = ½ ln det Q − ½ (x − μ)ᵀ Q (x − μ) − (n/2) ln 2π`,
    `Q = τ (κ² I + Δ)`,

    where `Δ` is the graph Laplacian of the pixel grid with free (Neumann)
    boundaries, `(x)ᵀ Δ x = Σ (x_i − x_j)²` over the pairs of neighbouring pixels
    (4-neighbours). `ln det Q = n ln τ + Σ_{jk} ln(κ² + λ_jk)` with
    `λ_jk = 4 sin²(πj/2ny) + 4 sin²(πk/2nx)`, the Laplacian's eigenvalues
    (closed form, no factorisation). `1/κ` is the correlation length in pixels;
    `τ` scales the precision (every variance scales as `1/τ`). This is the first-order Matérn-like
    field Comrade uses as its imaging default; the hyperparameters are fixed
    (not sampled): to sample them, see [`eqmodels.GMRFImage`][] and
    [`eqmodels.GMRFHyperPrior`][].
    """

    tau: Float[Array, ""]
    kappa: Float[Array, ""]
    mean: Float[Array, "ny nx"]
    shape: tuple[int, int] = eqx.field(static=True)
    where: Callable = eqx.field(static=True)
    support: str = eqx.field(static=True)

    def __init__(
        self,
        grid: ImageGrid,
        *,
        tau: float | ArrayLike,
        kappa: float | ArrayLike,
        mean: float | ArrayLike = 0.0,
        where: Callable[[PyTree], Float[Array, "..."]] = pixel_params,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][] of the image.
        - `tau`: the precision scale `τ > 0`.
        - `kappa`: `κ > 0`, the inverse correlation length in pixels (`κ = 0`
          would make `Q` singular: an improper prior).
        - `mean`: `μ`, a scalar or an `(ny, nx)` array (e.g. the log of a prior
          image for a log-pixel image).
        - `where`: selects the pixels from the model (default `model.params`);
          the leaf must hold all `ny·nx` pixels (no embed mask).
        """
        if not isinstance(grid, ImageGrid):
            raise TypeError(f"`grid` must be an ImageGrid, got {type(grid).__name__}.")
        for name, val in (("tau", tau), ("kappa", kappa)):
            if np.ndim(val) != 0:
                raise ValueError(
                    f"`{name}` must be a scalar, got shape {np.shape(val)}."
                )
            if is_concrete(val) and not (np.isfinite(val) and float(val) > 0):
                raise ValueError(
                    f"`{name}` must be finite and > 0, got {val!r}"
                    + (
                        " (κ = 0 makes the precision singular: an improper prior)."
                        if name == "kappa"
                        else "."
                    )
                )
        shape = (int(grid.ny), int(grid.nx))
        mean = jnp.asarray(mean, float)
        if mean.shape == ():
            mean = jnp.full(shape, mean)
        if mean.shape != shape:
            raise ValueError(
                f"`mean` has shape {mean.shape}; expected a scalar or {shape}."
            )
        if not callable(where):
            raise TypeError(f"`where` must be a function of the model, got {where!r}.")
        self.tau = jnp.asarray(tau, float)
        self.kappa = jnp.asarray(kappa, float)
        self.mean = mean
        self.shape = shape
        self.where = where
        self.support = "real"

    def log_density(self, value: Float[Array, "..."]) -> Scalar:
        """**Arguments:** `value`, the pixels, shape `(ny, nx)` or `(ny·nx,)`.

        **Returns:** `ln p(value)`, normalised.
        """
        ny, nx = self.shape
        if value.size != ny * nx:
            raise ValueError(
                f"GMRFPrior on a {ny}×{nx} grid got {value.size} pixels "
                f"(shape {value.shape}): it needs every pixel (a PixelImage "
                "without an embed mask, on the prior's grid)."
            )
        d = value.reshape(ny, nx) - self.mean.astype(value.dtype)
        return gmrf_log_density(d, self.tau, self.kappa)

    def sample(self, key: PRNGKeyArray) -> Float[Array, "ny nx"]:
        """A draw from the field: `x = μ + Cyᵀ (a ⊙ ζ) Cx`, `ζ ~ N(0, I)`,
        `a_jk = (τ (κ² + λ_jk))^{-1/2}` and `C` the orthonormal DCT-II matrices
        (the Laplacian's eigenbasis), so `cov(x) = Q⁻¹` exactly.

        **Arguments:** `key`, a `jax.random` key.

        **Returns:** the pixels, `(ny, nx)`.
        """
        ny, nx = self.shape
        dtype = self.mean.dtype
        lam = jnp.asarray(laplacian_eigenvalues(ny, nx), dtype)
        amp = 1.0 / jnp.sqrt(self.tau * (self.kappa**2 + lam))
        zeta = jax.random.normal(key, (ny, nx), dtype)
        cy = jnp.asarray(dct2_matrix(ny), dtype)
        cx = jnp.asarray(dct2_matrix(nx), dtype)
        return self.mean + cy.T @ (amp * zeta) @ cx


def gmrf_log_density(
    d: Float[Array, "ny nx"], tau: Float[ArrayLike, ""], kappa: Float[ArrayLike, ""]
) -> Scalar:
    """`½ ln det Q − ½ dᵀ Q d − (n/2) ln 2π` with `Q = τ (κ² I + Δ)` on the grid of
    `d` (the pixels minus the mean), `ln det Q` from the Laplacian's closed-form
    eigenvalues."""
    ny, nx = d.shape
    grad2 = jnp.sum(jnp.diff(d, axis=0) ** 2) + jnp.sum(jnp.diff(d, axis=1) ** 2)
    k2 = kappa**2
    quad = tau * (k2 * jnp.sum(d**2) + grad2)
    lam = jnp.asarray(laplacian_eigenvalues(ny, nx), d.dtype)
    n = ny * nx
    logdet = n * jnp.log(tau) + jnp.sum(jnp.log(k2 + lam))
    return 0.5 * logdet - 0.5 * quad - 0.5 * n * np.log(2 * np.pi)
