"""The crescent of Kamruddin & Dexter (2013): a disk minus a smaller one."""

import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._numerics import safe_sqrt
from .._validation import check_grid, is_concrete, scalar_leaf
from ._base import AbstractGeometricModel
from ._common import jinc, model_dtype, points, size_leaf, soft_step


class Crescent(AbstractGeometricModel):
    r"""A uniform disk of radius `R` (centred on the phase centre) with a smaller
    disk of radius `r`, centred at `(dx, dy)` and lying inside it, cut out
    (Kamruddin & Dexter 2013):

    `I = F / (π (R² − r²))` inside the outer disk and outside the inner one,
    `V(u, v) = F [R² J̃(2πRρ) − r² J̃(2πrρ) e^{2πi(u dx + v dy)}] / (R² − r²)`,

    with `J̃(z) = 2 J_1(z)/z`. The brightest side faces away from the shift
    (position angle of `(−dx, −dy)`). Edges render as [`eqmodels.Disk`][]'s.
    """

    grid: ImageGrid
    flux: Float[Array, ""]
    radius: Float[Array, ""]
    inner_radius: Float[Array, ""]
    dx: Float[Array, ""]
    dy: Float[Array, ""]

    def __init__(
        self,
        grid: ImageGrid,
        flux: RealLike,
        radius: RealLike,
        inner_radius: RealLike,
        *,
        dx: RealLike = 0.0,
        dy: RealLike = 0.0,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][] it renders on.
        - `flux`: total flux `F` (Jy).
        - `radius`: the outer radius `R` (radians, > 0).
        - `inner_radius`: the cut-out disk's radius `r` (radians, `0 < r < R`).
        - `dx`, `dy`: the cut-out disk's centre (radians; `sqrt(dx² + dy²) + r ≤
          R`: inside the outer disk). `(0, 0)` is an annulus.
        - `dtype`: float32 / float64 (default: JAX's default float).
        """
        self.grid = check_grid(grid)
        dtype = model_dtype(dtype)
        self.flux = scalar_leaf("flux", flux, dtype)
        self.radius = size_leaf("radius", radius, dtype)
        self.inner_radius = size_leaf("inner_radius", inner_radius, dtype)
        self.dx = scalar_leaf("dx", dx, dtype)
        self.dy = scalar_leaf("dy", dy, dtype)
        leaves = (self.radius, self.inner_radius, self.dx, self.dy)
        if all(is_concrete(a) for a in leaves):
            big, small = float(self.radius), float(self.inner_radius)
            shift = math.hypot(float(self.dx), float(self.dy))
            if not small < big:
                raise ValueError(
                    f"`inner_radius`={small:.4g} must be below `radius`={big:.4g} "
                    "(radians): the cut-out disk lies inside the outer one."
                )
            if shift + small > big * (1 + 4 * np.finfo(dtype).eps):
                raise ValueError(
                    f"the cut-out disk reaches outside the outer one: its shift "
                    f"sqrt(dx² + dy²)={shift:.4g} plus `inner_radius`={small:.4g} "
                    f"exceeds `radius`={big:.4g} (radians); shift it by at most "
                    "`radius - inner_radius`."
                )

    def visibility(self, u, v):
        u, v = points(u, v, self.flux.dtype)
        rho = safe_sqrt(u * u + v * v)
        big, small = self.radius**2, self.inner_radius**2
        phase = jnp.exp(2j * math.pi * (u * self.dx + v * self.dy))
        outer = big * jinc(2 * math.pi * self.radius * rho)
        inner = small * jinc(2 * math.pi * self.inner_radius * rho) * phase
        return self.flux * (outer - inner) / (big - small)

    def intensity(self, x, y, resolution=0.0):
        x, y = points(x, y, self.flux.dtype)
        r_out = safe_sqrt(x * x + y * y)
        ix, iy = x - self.dx, y - self.dy
        r_in = safe_sqrt(ix * ix + iy * iy)
        level = self.flux / (math.pi * (self.radius**2 - self.inner_radius**2))
        inside = soft_step(self.radius - r_out, resolution)
        hole = soft_step(self.inner_radius - r_in, resolution)
        return level * (inside - hole)
