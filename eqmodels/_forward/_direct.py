"""Dense direct Fourier transform."""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Complex, Float

from .._custom_types import PointsLike
from .._grid import ImageGrid
from .._image._base import AbstractImageModel
from .._numerics import asarray
from .._pulse import AbstractPulse
from ._base import (
    AbstractForwardModel,
    check_pulse,
    prepare_points,
    require_concrete_points,
)
from ._separable import separable_factors


_HIGHEST = jax.lax.Precision.HIGHEST
# Rows of the matrix built per numpy block (bounds the temporaries to ~50 MB).
_BLOCK_BYTES = 48 * 2**20


def dft_matrix_parts(grid: ImageGrid, u, v, pulse: AbstractPulse, dtype):
    """Real and imaginary parts of the `(N, ny*nx)` DFT matrix, built on the host in
    float64 (in row blocks that bound the temporaries), then cast to `dtype`.

    The kernel is separable, `exp(2πi(u x + v y)) = exp(2πi u x) · exp(2πi v y)`, so
    trigonometric functions are evaluated on `N·(nx+ny)` values only and each
    entry is one complex product (agrees with `cos/sin` of the full phase to a few
    ulps).
    """
    u = np.asarray(u, np.float64).reshape(-1)
    v = np.asarray(v, np.float64).reshape(-1)
    n = u.size
    a_re = np.empty((n, grid.npix), dtype)
    a_im = np.empty((n, grid.npix), dtype)
    rows = max(1, _BLOCK_BYTES // (8 * grid.npix))
    for start in range(0, n, rows):
        sl = slice(start, min(n, start + rows))
        cx, sx, cy, sy, p = separable_factors(grid, u[sl], v[sl], pulse)
        cy, sy = p[:, None] * cy, p[:, None] * sy
        b = cx.shape[0]
        a_re[sl] = (
            cy[:, :, None] * cx[:, None, :] - sy[:, :, None] * sx[:, None, :]
        ).reshape(b, -1)
        a_im[sl] = (
            sy[:, :, None] * cx[:, None, :] + cy[:, :, None] * sx[:, None, :]
        ).reshape(b, -1)
    return a_re, a_im


class DirectFT(AbstractForwardModel):
    """The exact transform as a dense matrix, built once and held as array leaves.

    Memory is `2 · N · ny · nx` reals: pick it for small problems, or when the
    matrix is reused many times on a GPU. The real and imaginary parts are stored
    separately (real matmuls are faster than complex ones on a CPU) and multiplied at
    `Precision.HIGHEST` (TF32 is the GPU default otherwise).
    """

    grid: ImageGrid
    u: Float[Array, "*points"]
    v: Float[Array, "*points"]
    pulse: AbstractPulse
    a_re: Float[Array, "n npix"]
    a_im: Float[Array, "n npix"]

    point_fields = ("a_re", "a_im")
    hermitian_points = True

    def __init__(
        self,
        grid: ImageGrid,
        u: PointsLike,
        v: PointsLike,
        pulse: AbstractPulse | None = None,
        *,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][].
        - `u`, `v`: points in wavelengths, same shape (any leading shape, e.g.
          `(n, 3)` for closure triangles).
        - `pulse`: pixel pulse, default [`eqmodels.TrianglePulse`][].
        - `dtype`: `float32` or `float64`; default from `u`, `v`.
        """
        u, v, dtype = prepare_points(grid, u, v, dtype, "DirectFT")
        require_concrete_points(u, v, "DirectFT")
        self.pulse = check_pulse(pulse)
        self.grid = grid
        a_re, a_im = dft_matrix_parts(grid, u, v, self.pulse, dtype)
        self.u = asarray(u)
        self.v = asarray(v)
        self.a_re = asarray(a_re)
        self.a_im = asarray(a_im)

    def __call__(
        self, image: Float[Array, "ny nx"] | AbstractImageModel
    ) -> Complex[Array, "*points"]:
        x = self._check_image(image).reshape(-1)
        re = jnp.matmul(self.a_re, x, precision=_HIGHEST)
        im = jnp.matmul(self.a_im, x, precision=_HIGHEST)
        return jax.lax.complex(re, im).reshape(self.u.shape)

    def batched(self, images: Float[Array, "b ny nx"]) -> Complex[Array, " b *points"]:
        # One product with the images as columns (`A @ Xᵀ`): the matrix is read
        # once for all of them (measured faster than `jax.vmap` of the matvec,
        # which XLA lowers with the batch as the leading operand).
        x = jax.vmap(self._check_image)(images).reshape(images.shape[0], -1)
        re = jnp.matmul(self.a_re, x.T, precision=_HIGHEST)
        im = jnp.matmul(self.a_im, x.T, precision=_HIGHEST)
        return jax.lax.complex(re, im).T.reshape(images.shape[0], *self.u.shape)

    def at(self, u: PointsLike, v: PointsLike) -> "DirectFT":
        return DirectFT(self.grid, u, v, self.pulse, dtype=self.dtype)
