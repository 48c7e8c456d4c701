"""The xs-ringauss of Benkevitch et al. (2016): a slashed eccentric ring plus a
Gaussian, with analytic visibilities."""

import math

import jax.numpy as jnp
from jaxtyping import Array, Float

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._image._parametric import gaussian_log_profile, gaussian_log_visibility
from .._numerics import FWHM_PER_SIGMA, safe_sqrt
from .._validation import check_grid, is_concrete, scalar_leaf
from ._base import AbstractGeometricModel
from ._bessel import bessel_j
from ._common import jinc, model_dtype, points, size_leaf, soft_step


def j2_ratio(z):
    """`2 J_2(z)/z²` (1/4 at 0), accurate in relative terms near 0 (its power
    series below `|z| = 1`, where `J_2 ≈ z²/8` would lose digits to the Bessel
    function's absolute error), derivatives finite."""
    small = jnp.abs(z) < 1.0
    zs = jnp.where(small, 1.0, z)
    big = 2.0 * bessel_j(2, zs)[2] / (zs * zs)
    # ½ Σ_k (−z²/4)^k / (k! (k+2)!), k ≤ 9 (the next term is below 1e-24 at |z| = 1)
    t = -0.25 * jnp.where(small, z, 0.0) ** 2
    series = jnp.zeros_like(t)
    for k in reversed(range(10)):
        series = series * t + 1.0 / (math.factorial(k) * math.factorial(k + 2))
    return jnp.where(small, 0.5 * series, big)


def _unit_interval(name: str, leaf, *, open_low: bool = False) -> None:
    if not is_concrete(leaf):
        return
    x = float(leaf)
    ok = (0.0 < x if open_low else 0.0 <= x) and x <= 1.0
    if not ok:
        low = "(0" if open_low else "[0"
        raise ValueError(f"`{name}` must lie in {low}, 1], got {x:.6g}.")


class XSRingauss(AbstractGeometricModel):
    r"""The "xs-ringauss" of Benkevitch et al. (2016) (the EHT's geometric
    crescent of the Sgr A* and M87* model-fitting papers): an eccentric,
    **s**lashed ring plus an elliptical Gaussian inside it, centred on the phase
    centre.

    In the frame `a = x sin φ + y cos φ` (along the symmetry axis, pointing to the
    thick, bright side at position angle `φ` east of north) and `b = x cos φ −
    y sin φ`:

    - the **ring** is the disk of radius `R` minus the disk of radius `R_in =
      (1 − ψ) R` centred at `a = −d`, `d = τ (R − R_in)` (`ψ` the fractional
      thickness, `τ` the eccentricity: `τ = 0` an annulus, `τ = 1` the inner disk
      touching the outer edge), with the linear brightness ("slash")
      `L(a) = c_0 + c_1 a`, `c_0 = (1 + f)/2`, `c_1 = (1 − f)/(2R)`: 1 at the
      thick side `a = R`, `f` (the fading) at `a = −R`;
      `I_ring = H L(a)` on the ring, `H = F (1 − g) / (π [c_0 (R² − R_in²) +
      c_1 d R_in²])` so that it holds the flux `F (1 − g)`;
    - the **Gaussian** holds `F g`, centred at `a = R_in − d` (the inner edge of the
      thick side), FWHM `w_a` along the axis and `w_b` across it.

    With `k_a = u sin φ + v cos φ`, `k = sqrt(u² + v²)`, `J̃(z) = 2 J_1(z)/z`,
    `G(z) = 2 J_2(z)/z²` (a disk of radius `ρ` with brightness `a` has the
    transform `2π² i ρ⁴ k_a G(2πρk)`, the `k_a`-derivative of the uniform one):

    `V = H [c_0 π R² J̃(2πRk) + 2π² i c_1 R⁴ k_a G(2πRk)
    − e^{−2πi k_a d} ((c_0 − c_1 d) π R_in² J̃(2πR_in k)
    + 2π² i c_1 R_in⁴ k_a G(2πR_in k))]
    + F g e^{2πi k_a (R_in − d)} e^{−2π² (σ_a² k_a² + σ_b² k_b²)}`,

    `k_b = u cos φ − v sin φ`, `σ = w / sqrt(8 ln 2)`. Move it with
    [`eqmodels.Shifted`][]; the smoothed xs-ringauss (the EHT's kernel `σ*`) is
    `Blurred(XSRingauss(...), fwhm)`. Edges render as [`eqmodels.Disk`][]'s
    (spread over a pixel), the Gaussian point-sampled.

    Benkevitch et al. and THEMIS give the Gaussian's size in units of `R` and as
    an axial ratio; here both FWHM are in radians.
    """

    grid: ImageGrid
    flux: Float[Array, ""]
    radius: Float[Array, ""]
    thickness: Float[Array, ""]
    eccentricity: Float[Array, ""]
    fading: Float[Array, ""]
    gauss_fraction: Float[Array, ""]
    gauss_fwhm: Float[Array, ""]
    gauss_fwhm_perp: Float[Array, ""]
    angle: Float[Array, ""]

    def __init__(
        self,
        grid: ImageGrid,
        flux: RealLike,
        radius: RealLike,
        thickness: RealLike,
        *,
        eccentricity: RealLike = 0.0,
        fading: RealLike = 1.0,
        gauss_fraction: RealLike = 0.0,
        gauss_fwhm: RealLike | None = None,
        gauss_fwhm_perp: RealLike | None = None,
        angle: RealLike = 0.0,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][] it renders on.
        - `flux`: total flux `F` (Jy), ring and Gaussian.
        - `radius`: the outer radius `R` (radians, > 0).
        - `thickness`: the fractional thickness `ψ` in `(0, 1]` (`R_in = (1 − ψ)
          R`; 1 is a disk).
        - `eccentricity`: `τ` in `[0, 1]`, the inner disk's shift `d = τ (R −
          R_in)` away from the thick side (0: a centred annulus).
        - `fading`: `f ≥ 0`, the brightness at the thin side relative to the thick
          one (1: uniform; the EHT fits take `[0, 1]`).
        - `gauss_fraction`: `g` in `[0, 1]`, the Gaussian's share of `F` (0: the
          xs-ring alone).
        - `gauss_fwhm`: the Gaussian's FWHM along the axis (radians, > 0;
          default `R`).
        - `gauss_fwhm_perp`: its FWHM across the axis (radians, > 0; default
          `gauss_fwhm`).
        - `angle`: `φ`, the position angle of the thick, bright side (radians
          east of north).
        - `dtype`: float32 / float64 (default: JAX's default float).
        """
        self.grid = check_grid(grid)
        dtype = model_dtype(dtype)
        self.flux = scalar_leaf("flux", flux, dtype)
        self.radius = size_leaf("radius", radius, dtype)
        self.thickness = scalar_leaf("thickness", thickness, dtype)
        _unit_interval("thickness", self.thickness, open_low=True)
        self.eccentricity = scalar_leaf("eccentricity", eccentricity, dtype)
        _unit_interval("eccentricity", self.eccentricity)
        self.fading = scalar_leaf("fading", fading, dtype)
        if is_concrete(self.fading) and not float(self.fading) >= 0:
            raise ValueError(
                f"`fading` must be >= 0 (the thin side's brightness relative to the "
                f"thick side's), got {float(self.fading):.6g}."
            )
        self.gauss_fraction = scalar_leaf("gauss_fraction", gauss_fraction, dtype)
        _unit_interval("gauss_fraction", self.gauss_fraction)
        wa = radius if gauss_fwhm is None else gauss_fwhm
        self.gauss_fwhm = size_leaf("gauss_fwhm", wa, dtype)
        wb = wa if gauss_fwhm_perp is None else gauss_fwhm_perp
        self.gauss_fwhm_perp = size_leaf("gauss_fwhm_perp", wb, dtype)
        self.angle = scalar_leaf("angle", angle, dtype)

    def _shape(self):
        """Dimensionless: `(s, δ, c_0, c_1 R, A)` with `s = R_in/R`, `δ = d/R`
        and `A = c_0 (1 − s²) + c_1 R δ s²` (the ring's area weighted by `L`, over
        `π R²`): no power of `R` beyond the second (`R⁴` underflows in float32)."""
        s = 1.0 - self.thickness
        delta = self.eccentricity * self.thickness
        c0 = 0.5 * (1.0 + self.fading)
        e1 = 0.5 * (1.0 - self.fading)
        area = c0 * (1.0 - s * s) + e1 * delta * s * s
        return s, delta, c0, e1, area

    def geometry(self):
        """`(R_in, d, c_0, c_1, H)`: the inner radius, the inner disk's shift, the
        slash's coefficients and the ring's level (Jy/sr per unit `L`)."""
        s, delta, c0, e1, area = self._shape()
        big = self.radius
        level = self.flux * (1.0 - self.gauss_fraction) / (math.pi * area * big * big)
        return s * big, delta * big, c0, e1 / big, level

    def _axis(self):
        return jnp.sin(self.angle), jnp.cos(self.angle)

    def visibility(self, u, v):
        u, v = points(u, v, self.flux.dtype)
        s, delta, c0, e1, area = self._shape()
        big = self.radius
        sn, cs = self._axis()
        ka = u * sn + v * cs
        k = safe_sqrt(u * u + v * v)
        zo = 2 * math.pi * big * k
        zi = s * zo
        rka = 2j * math.pi**2 * e1 * big * ka  # 2π² i c_1 R⁴ k_a / R²
        outer = c0 * math.pi * jinc(zo) + rka * j2_ratio(zo)
        inner = (
            s
            * s
            * ((c0 - e1 * delta) * math.pi * jinc(zi) + rka * s * s * j2_ratio(zi))
        )
        phase = jnp.exp(-2j * math.pi * ka * delta * big)
        ring = self.flux * (1.0 - self.gauss_fraction) / (math.pi * area)
        ring = ring * (outer - phase * inner)
        sa = self.gauss_fwhm / FWHM_PER_SIGMA
        sb = self.gauss_fwhm_perp / FWHM_PER_SIGMA
        gauss = jnp.exp(
            gaussian_log_visibility(u, v, sa, sb, self.angle)
            + 2j * math.pi * ka * (s - delta) * big
        )
        return ring + self.flux * self.gauss_fraction * gauss

    def intensity(self, x, y, resolution=0.0):
        x, y = points(x, y, self.flux.dtype)
        small, d, c0, c1, level = self.geometry()
        s, c = self._axis()
        a = x * s + y * c
        r_out = safe_sqrt(x * x + y * y)
        ix, iy = x + d * s, y + d * c  # from the inner disk's centre, a = −d
        r_in = safe_sqrt(ix * ix + iy * iy)
        inside = soft_step(self.radius - r_out, resolution)
        hole = soft_step(small - r_in, resolution)
        ring = level * (c0 + c1 * a) * (inside - hole)
        sa = self.gauss_fwhm / FWHM_PER_SIGMA
        sb = self.gauss_fwhm_perp / FWHM_PER_SIGMA
        gx, gy = (small - d) * s, (small - d) * c
        log_g = gaussian_log_profile(x - gx, y - gy, sa, sb, self.angle)
        peak = self.flux * self.gauss_fraction / (2 * math.pi * sa * sb)
        return ring + peak * jnp.exp(log_g)
