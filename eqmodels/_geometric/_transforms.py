"""Coordinate transforms of a geometric model: shift, rotation, stretch."""

import math

import jax.numpy as jnp
from jaxtyping import Array, Float

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._validation import scalar_leaf
from ._base import AbstractGeometricModel, check_model
from ._common import points


class Shifted(AbstractGeometricModel):
    r"""A geometric model moved by `(dx, dy)` radians (`+x` east, `+y` north):

    `I'(x, y) = I(x − dx, y − dy)`, `V'(u, v) = V(u, v) e^{2πi (u dx + v dy)}`.
    """

    model: AbstractGeometricModel
    dx: Float[Array, ""]
    dy: Float[Array, ""]

    def __init__(self, model: AbstractGeometricModel, dx: RealLike, dy: RealLike):
        """**Arguments:**

        - `model`: the geometric model (with a closed-form intensity: shift a
          `Blurred` model's inner model instead).
        - `dx`, `dy`: the shift in radians (east, north).
        """
        self.model = check_model("model", model)
        self.dx = scalar_leaf("dx", dx, model.dtype)
        self.dy = scalar_leaf("dy", dy, model.dtype)

    @property
    def grid(self) -> ImageGrid:  # type: ignore[override]
        return self.model.grid

    def visibility(self, u, v):
        u, v = points(u, v, self.dx.dtype)
        phase = jnp.exp(2j * math.pi * (u * self.dx + v * self.dy))
        return self.model.visibility(u, v) * phase

    def intensity(self, x, y, resolution=0.0):
        x, y = points(x, y, self.dx.dtype)
        return self.model.intensity(x - self.dx, y - self.dy, resolution)

    def sample_points(self):
        pts = self.model.sample_points()
        if pts is None:
            return None
        x, y, f = pts
        return x + self.dx, y + self.dy, f


class Rotated(AbstractGeometricModel):
    r"""A geometric model rotated by `angle` radians east of north (a feature at
    position angle `θ` moves to `θ + angle`):

    `I'(x, y) = I(x cos α − y sin α, x sin α + y cos α)`, and the same rotation
    of `(u, v)` for `V'` (a rotation keeps `u x + v y`).
    """

    model: AbstractGeometricModel
    angle: Float[Array, ""]

    def __init__(self, model: AbstractGeometricModel, angle: RealLike):
        """**Arguments:**

        - `model`: the geometric model (with a closed-form intensity).
        - `angle`: the rotation `α`, radians east of north.
        """
        self.model = check_model("model", model)
        self.angle = scalar_leaf("angle", angle, model.dtype)

    @property
    def grid(self) -> ImageGrid:  # type: ignore[override]
        return self.model.grid

    def _back(self, a, b):
        c, s = jnp.cos(self.angle), jnp.sin(self.angle)
        return a * c - b * s, a * s + b * c

    def visibility(self, u, v):
        u, v = points(u, v, self.angle.dtype)
        return self.model.visibility(*self._back(u, v))

    def intensity(self, x, y, resolution=0.0):
        x, y = points(x, y, self.angle.dtype)
        return self.model.intensity(*self._back(x, y), resolution)

    def sample_points(self):
        pts = self.model.sample_points()
        if pts is None:
            return None
        x, y, f = pts
        c, s = jnp.cos(self.angle), jnp.sin(self.angle)
        return x * c + y * s, -x * s + y * c, f


class Stretched(AbstractGeometricModel):
    r"""A geometric model stretched by `sx` along `x` (east) and `sy` along `y`
    (north), its flux kept:

    `I'(x, y) = I(x/sx, y/sy) / (sx sy)`, `V'(u, v) = V(sx u, sy v)`.

    Stretch along another direction with `Rotated(Stretched(Rotated(m, −α), sx,
    sy), α)`. A stretched m-ring: `Stretched(MRing(...), sx, sy)`; a stretched
    thick one: `Blurred(Stretched(MRing(...), sx, sy), fwhm)`. Sharp features
    render spread over `resolution / sqrt(sx sy)` in the model's own frame.
    """

    model: AbstractGeometricModel
    sx: Float[Array, ""]
    sy: Float[Array, ""]

    def __init__(self, model: AbstractGeometricModel, sx: RealLike, sy: RealLike):
        """**Arguments:**

        - `model`: the geometric model (with a closed-form intensity).
        - `sx`, `sy`: the stretch factors (> 0) along `x` and `y`.
        """
        self.model = check_model("model", model)
        self.sx = scalar_leaf("sx", sx, model.dtype, positive=True)
        self.sy = scalar_leaf("sy", sy, model.dtype, positive=True)

    @property
    def grid(self) -> ImageGrid:  # type: ignore[override]
        return self.model.grid

    def visibility(self, u, v):
        u, v = points(u, v, self.sx.dtype)
        return self.model.visibility(self.sx * u, self.sy * v)

    def intensity(self, x, y, resolution=0.0):
        x, y = points(x, y, self.sx.dtype)
        h = resolution / jnp.sqrt(self.sx * self.sy)
        return self.model.intensity(x / self.sx, y / self.sy, h) / (self.sx * self.sy)

    def sample_points(self):
        pts = self.model.sample_points()
        if pts is None:
            return None
        x, y, f = pts
        return x * self.sx, y * self.sy, f
