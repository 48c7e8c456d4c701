"""The thin m-ring (Johnson et al. 2020) with analytic visibilities."""

import math
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._validation import check_grid, is_concrete, scalar_leaf
from ._base import AbstractGeometricModel
from ._bessel import bessel_j, MAX_ORDER
from ._common import model_dtype, points, polar, refuse_zero_resolution, size_leaf


class MRing(AbstractGeometricModel):
    r"""A thin ring of radius `R` with an azimuthal Fourier series (the m-ring of
    Johnson et al. 2020), centred on the phase centre:

    `I(r, θ) = F/(2π r) δ(r − R) Σ_{m=−M}^{M} β_m e^{imθ}`, `β_0 = 1`,
    `β_{−m} = β_m*`,

    `θ` the position angle east of north (`x = r sin θ`, `y = r cos θ`). With
    `u = ρ sin ψ`, `v = ρ cos ψ` and our `e^{+2πi(ux + vy)}` (Jacobi–Anger),

    `V(u, v) = F [J_0(z) + Σ_{m=1}^{M} i^m J_m(z) · 2 Re(β_m e^{imψ})]`,
    `z = 2π R ρ`

    (Johnson et al.'s `e^{im(ψ − π/2)}` is the same series in the opposite sign
    convention: `i^m = e^{imπ/2}` here). No `β` (`beta=()`) is the uniform thin
    ring, `F J_0(z)`. A thick m-ring is `Blurred(MRing(...), fwhm)`, a stretched
    one `Stretched(MRing(...), ...)`; a shifted one `Shifted`.

    `β_m` is held as two real leaves, `beta_re` and `beta_im` (shape `(M,)`, `m =
    1..M`). Rendered from `4π max(ny, nx)` point samples along the ring (at
    most a quarter pixel apart for a ring inside the field), each deposited on
    its four nearest pixels (the rendered flux is `F` exactly, for a ring inside
    the grid); `intensity` spreads the ring radially by a triangle of half-width
    `resolution` (> 0).
    """

    grid: ImageGrid
    flux: Float[Array, ""]
    radius: Float[Array, ""]
    beta_re: Float[Array, " m"]
    beta_im: Float[Array, " m"]

    def __init__(
        self,
        grid: ImageGrid,
        flux: RealLike,
        radius: RealLike,
        beta: ArrayLike | Sequence[complex | float] = (),
        *,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][] it renders on.
        - `flux`: total flux `F` (Jy).
        - `radius`: the ring's radius `R` (radians, > 0).
        - `beta`: the complex coefficients `β_1 ... β_M` (`M ≤ 20`; `()`: a
          uniform ring). `|β_1| = 0.2` brightens the side at position angle
          `arg β_1` by `1 + 2·0.2`.
        - `dtype`: float32 / float64 (default: JAX's default float).
        """
        self.grid = check_grid(grid)
        dtype = model_dtype(dtype)
        self.flux = scalar_leaf("flux", flux, dtype)
        self.radius = size_leaf("radius", radius, dtype)
        if is_concrete(beta):
            b = np.asarray(beta)
            if b.ndim != 1:
                raise ValueError(
                    f"`beta` must be a 1-d sequence β_1 ... β_M (complex), got shape "
                    f"{b.shape}."
                )
            if b.size > MAX_ORDER:
                raise ValueError(
                    f"`beta` has {b.size} coefficients, more than the {MAX_ORDER} "
                    "orders the Bessel functions are tested to."
                )
            if not np.all(np.isfinite(b)):
                raise ValueError("`beta` must be finite.")
        b = jnp.asarray(beta)
        self.beta_re = jnp.real(b).astype(dtype).reshape(-1)
        self.beta_im = jnp.imag(b).astype(dtype).reshape(-1)

    @property
    def order(self) -> int:
        """`M`, the number of `β` coefficients."""
        return int(self.beta_re.shape[0])

    def _series(self, e, bessel):
        """`Σ_{m=1}^{M} c_m · 2 Re(β_m e^m)` for `e = e^{iψ}`, `c_m` = `bessel[m]`
        (`i^m J_m(z)` or a radial weight)."""
        out = 0.0
        power = jnp.ones_like(e)
        for m in range(1, self.order + 1):
            power = power * e
            beta = self.beta_re[m - 1] + 1j * self.beta_im[m - 1]
            out = out + bessel[m] * 2.0 * jnp.real(beta * power)
        return out

    def visibility(self, u, v):
        u, v = points(u, v, self.flux.dtype)
        rho, e = polar(u, v)
        z = 2 * math.pi * self.radius * rho
        j = bessel_j(self.order, z)
        im = [1, 1j, -1, -1j]
        terms = [im[m % 4] * j[m] for m in range(self.order + 1)]
        return self.flux * (j[0] + self._series(e, terms))

    def sample_points(self):
        n = int(math.ceil(4 * math.pi * max(self.grid.shape)))
        theta = np.asarray(2 * np.pi * (np.arange(n) + 0.5) / n, self.flux.dtype)
        ctype = jnp.result_type(self.flux.dtype, jnp.complex64)
        e = jnp.asarray(np.exp(1j * theta), ctype)
        ones = [1.0] * (self.order + 1)
        flux = self.flux / n * (1.0 + self._series(e, ones))
        s, c = jnp.asarray(np.sin(theta)), jnp.asarray(np.cos(theta))
        return self.radius * s, self.radius * c, flux

    def intensity(self, x, y, resolution=0.0):
        refuse_zero_resolution(resolution, "an `MRing`")
        x, y = points(x, y, self.flux.dtype)
        r, e = polar(x, y)
        h = jnp.asarray(resolution, x.dtype)
        tri = jnp.maximum(0.0, 1.0 - jnp.abs(r - self.radius) / h) / h
        ok = r > 0
        radial = jnp.where(ok, tri / (2 * math.pi * jnp.where(ok, r, 1.0)), 0.0)
        ones = [1.0] * (self.order + 1)
        return self.flux * radial * (1.0 + self._series(e, ones))
