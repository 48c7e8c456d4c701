"""A uniform disk with analytic visibilities."""

import math

from jaxtyping import Array, Float

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._numerics import safe_sqrt
from .._validation import check_grid, scalar_leaf
from ._base import AbstractGeometricModel
from ._common import jinc, model_dtype, points, size_leaf, soft_step


class Disk(AbstractGeometricModel):
    r"""A uniform disk of radius `R` centred on the phase centre:

    `I = F/(π R²)` inside `r < R`, 0 outside;
    `V(u, v) = F · 2 J_1(z)/z`, `z = 2π R ρ`, `ρ = sqrt(u² + v²)`.

    Rendered with its edge spread over a pixel (`soft_step`: the fraction of a
    pixel inside a straight edge), so the rendered flux is `F` to second order in
    `psize / R`.
    """

    grid: ImageGrid
    flux: Float[Array, ""]
    radius: Float[Array, ""]

    def __init__(
        self, grid: ImageGrid, flux: RealLike, radius: RealLike, *, dtype=None
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][] it renders on.
        - `flux`: total flux `F` (Jy).
        - `radius`: the radius `R` (radians, > 0).
        - `dtype`: float32 / float64 (default: JAX's default float).
        """
        self.grid = check_grid(grid)
        dtype = model_dtype(dtype)
        self.flux = scalar_leaf("flux", flux, dtype)
        self.radius = size_leaf("radius", radius, dtype)

    def visibility(self, u, v):
        u, v = points(u, v, self.flux.dtype)
        rho = safe_sqrt(u * u + v * v)
        return self.flux * jinc(2 * math.pi * self.radius * rho) + 0j

    def intensity(self, x, y, resolution=0.0):
        x, y = points(x, y, self.flux.dtype)
        r = safe_sqrt(x * x + y * y)
        level = self.flux / (math.pi * self.radius**2)
        return level * soft_step(self.radius - r, resolution)
