"""`SimplexImage`: an image as its total flux times a point of the simplex, the
softmax of free logits with the last pixel's logit fixed at 0."""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Real

from .._grid import ImageGrid
from .._image._base import AbstractImageModel, evaluated_on
from .._validation import as_real, check_grid, is_concrete, resolve_float_dtype


class SimplexImage(AbstractImageModel):
    r"""An image `I = F · s`: the total flux `F > 0` (Jy, the leaf `flux`) times
    the pixel fractions `s` on the simplex (`s_i > 0`, `Σ s_i = 1`), given by
    `n − 1` free logits `y` (the leaf `logits`, in the image's row-major pixel
    order) through the additive log-ratio map

    `s_i = e^{y_i} / (1 + Σ_j e^{y_j})` for `i < n`, `s_n = 1 / (1 + Σ_j e^{y_j})`:

    the softmax of `(y, 0)`, the last pixel's logit fixed at 0 as the reference
    (`y_i = ln(s_i / s_n)`). It is one-to-one between `ℝⁿ⁻¹` and the open
    simplex, so the flux and the shape are separate parameters: the model for a
    [`eqmodels.DirichletPrior`][] on the shape (its log density includes the
    Jacobian of this map) and a flat-in-log prior on the flux, e.g.
    `em.ParameterPrior(lambda m: m.flux, lambda f: -jnp.log(f), support="positive")`
    (improper: let the data, e.g. a short baseline, set the flux).

    Comrade's `ImageSimplex` uses a stick-breaking map instead; the fixed
    reference logit is simpler, and the Dirichlet's log density in these logits
    is concave, easy for NUTS.
    """

    grid: ImageGrid
    logits: Float[Array, " n_minus_1"]
    flux: Float[Array, ""]

    def __init__(
        self,
        grid: ImageGrid,
        logits: Real[ArrayLike, "..."] | None = None,
        *,
        flux: Real[ArrayLike, "..."] = 1.0,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][] (at least 2 pixels).
        - `logits`: the `ny·nx − 1` free logits (default 0: a flat image).
        - `flux`: the total flux `F > 0`, Jy.
        - `dtype`: float32 / float64; default from the inputs.
        """
        check_grid(grid)
        n = int(grid.npix)
        if n < 2:
            raise ValueError(
                "`grid` has one pixel: a simplex image needs at least 2 (with one, "
                "the image is its flux)."
            )
        if np.ndim(flux) != 0:
            raise ValueError(f"`flux` must be a scalar, got shape {np.shape(flux)}.")
        if is_concrete(flux) and not (
            np.isfinite(np.asarray(flux, float)) and float(flux) > 0
        ):
            raise ValueError(f"`flux` must be finite and > 0 (Jy), got {flux!r}.")
        if logits is None:
            logits = np.zeros(n - 1)
        else:
            logits = as_real("logits", logits)
            if tuple(np.shape(logits)) != (n - 1,):
                raise ValueError(
                    f"`logits` has shape {tuple(np.shape(logits))}; expected "
                    f"({n - 1},): one per pixel but the last (its logit is fixed at "
                    "0). Use `SimplexImage.from_image` to start from an image."
                )
            if is_concrete(logits) and not np.all(np.isfinite(np.asarray(logits))):
                raise ValueError("`logits` has non-finite values.")
        dtype = resolve_float_dtype(dtype, logits, flux)
        self.grid = grid
        self.logits = jnp.asarray(logits, dtype)
        self.flux = jnp.asarray(flux, dtype)

    @classmethod
    def from_image(
        cls,
        image: Real[ArrayLike, "..."] | AbstractImageModel,
        grid: ImageGrid,
        *,
        dtype=None,
    ) -> "SimplexImage":
        """The `SimplexImage` whose `__call__()` returns `image` (strictly
        positive): `flux = Σ image`, `logits_i = ln(image_i / image_last)`.

        **Arguments:**

        - `image`: `(ny, nx)` Jy/pixel, or an image model on `grid`.
        - `grid`, `dtype`: as for the constructor.
        """
        check_grid(grid)
        image = evaluated_on(image, grid, "image", f"`grid` is {grid!r}.")
        if not is_concrete(image):
            raise TypeError("`image` must be concrete (build the model outside jit).")
        image = np.asarray(as_real("image", image), np.float64)
        if image.shape != grid.shape:
            raise ValueError(
                f"`image` has shape {image.shape}, the grid is {grid.shape}."
            )
        if not np.all(np.isfinite(image)) or np.any(image <= 0):
            raise ValueError(
                "`image` must be finite and strictly positive (a point of the open "
                "simplex): add a small floor, e.g. `np.maximum(image, 1e-6 * "
                "image.max())`."
            )
        flat = np.log(image.reshape(-1))
        return cls(grid, flat[:-1] - flat[-1], flux=float(image.sum()), dtype=dtype)

    def log_fractions(self) -> Float[Array, "ny nx"]:
        """`ln s`, the log pixel fractions, `(ny, nx)` (`Σ s = 1`)."""
        full = jnp.concatenate([self.logits, jnp.zeros((1,), self.logits.dtype)])
        return jax.nn.log_softmax(full).reshape(self.grid.shape)

    def fractions(self) -> Float[Array, "ny nx"]:
        """`s`, the pixel fractions, `(ny, nx)` (`Σ s = 1`)."""
        return jnp.exp(self.log_fractions())

    def __call__(self) -> Float[Array, "ny nx"]:
        """**Returns:** the image `F · s`, `(ny, nx)`, Jy/pixel."""
        return self.flux * self.fractions()
