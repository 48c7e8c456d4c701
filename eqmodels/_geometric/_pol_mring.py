"""The polarized m-ring (Palumbo et al. 2020) with analytic Stokes visibilities."""

import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Num

from .._custom_types import ArraySequence, RealLike
from .._grid import ImageGrid
from .._image._pol_mring import _check_physical, ring_coefficients
from .._numerics import FWHM_PER_SIGMA
from .._validation import check_grid, is_concrete, scalar_leaf
from ._base import deposit
from ._bessel import bessel_j, MAX_ORDER
from ._blurred import gaussian_blur
from ._common import model_dtype, points, polar, refuse_zero_resolution, size_leaf
from ._pol_base import AbstractPolGeometricModel


_I_POWERS = (1, 1j, -1, -1j)


class PolMRing(AbstractPolGeometricModel):
    r"""A polarized thin m-ring (Johnson et al. 2020; Palumbo et al. 2020), its
    Stokes I, linear polarization `P = Q + iU` and V azimuthal Fourier series
    around a ring of radius `R` centred at `(x0, y0)`, optionally convolved with
    a circular Gaussian of FWHM `w` (the thick m-ring):

    - `I(r, θ) = F/(2π r) δ(r − R) a_I(θ)`,
      `a_I = 1 + Σ_{m=1}^{M_I} 2 Re(β^I_m e^{imθ})`,
    - `P(r, θ) = F/(2π r) δ(r − R) Σ_{m=−M_P}^{M_P} β^P_m e^{imθ}`,
    - `V(r, θ) = F/(2π r) δ(r − R) (β^V_0 + Σ_{m=1}^{M_V} 2 Re(β^V_m e^{imθ}))`,

    `θ` the position angle east of north about the centre (as
    [`eqmodels.MRing`][] and [`eqmodels.PolMRingImage`][]). For a thin ring the
    `β^P_m` are Palumbo et al.'s `β_m` ([`eqmodels.beta_m`][] of the render:
    `β^P_2` is what EHT M87* Paper VII reports). With `u = ρ sin ψ`, `v = ρ cos ψ`,
    `z = 2π R ρ` (Jacobi–Anger, our `e^{+2πi(ux + vy)}`):

    - `V_I = F [J_0(z) + Σ_m i^m J_m(z) 2 Re(β^I_m e^{imψ})]`,
    - `V_P(u, v) = F Σ_{m=−M_P}^{M_P} β^P_m i^{|m|} J_{|m|}(z) e^{imψ}` (the
      transform of the complex image `P`), and `Q`, `U` being real images,
      `V_Q = ½ [V_P(u, v) + V_P(−u, −v)*]`, `V_U = (1/2i) [V_P(u, v) −
      V_P(−u, −v)*]`,
    - `V_V = F [β^V_0 J_0(z) + Σ_m i^m J_m(z) 2 Re(β^V_m e^{imψ})]`,

    each times `e^{2πi(u x0 + v y0)}` and, with `fwhm`, `e^{−2π² σ² ρ²}`
    (`σ = w / sqrt(8 ln 2)`).

    Construction refuses coefficients for which `a_I < 0` or `|a_P|² + a_V² >
    a_I²` at any of 4096 position angles (as [`eqmodels.PolMRingImage`][]);
    the visibilities being linear in the `β`, an optimiser's step beyond is not
    clipped. Rendered as [`eqmodels.MRing`][] is (samples along the ring
    deposited on their four nearest pixels, each Stokes plane alike), then
    convolved with the Gaussian as [`eqmodels.Blurred`][] is. `intensity` (Stokes
    I) is that of the thin ring (`fwhm=None`) only.
    """

    grid: ImageGrid
    flux: Float[Array, ""]
    radius: Float[Array, ""]
    beta_i: Float[Array, "mi 2"]
    beta_p: Float[Array, "mp 2"]
    beta_v: Float[Array, "mv 2"]
    x0: Float[Array, ""]
    y0: Float[Array, ""]
    fwhm: Float[Array, ""] | None

    def __init__(
        self,
        grid: ImageGrid,
        flux: RealLike,
        radius: RealLike,
        *,
        beta_i: Num[ArrayLike, " mi"] | ArraySequence = (),
        beta_p: Num[ArrayLike, " mp"] | ArraySequence = (0.0,),
        beta_v: Num[ArrayLike, " mv"] | ArraySequence = (0.0,),
        fwhm: RealLike | None = None,
        x0: RealLike = 0.0,
        y0: RealLike = 0.0,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][] it renders on.
        - `flux`: total Stokes I flux `F` (Jy).
        - `radius`: the ring's radius `R` (radians, > 0).
        - `beta_i`: `β^I_m` for `m = 1..M_I` (complex; `β^I_0 = 1`).
        - `beta_p`: `β^P_m` for `m = −M_P..M_P` (complex, `2M_P + 1` values,
          eht-imaging's `beta_list_pol` order): `beta_p=[0, 0, 0, 0, 0.2j]` is a
          pure `β_2 = 0.2i`.
        - `beta_v`: `β^V_m` for `m = 0..M_V` (complex; `β^V_0` real).
        - `fwhm`: the FWHM `w` of the Gaussian blurring the ring (radians, > 0);
          `None`: the thin ring.
        - `x0`, `y0`: the centre (radians; +x east, +y north).
        - `dtype`: float32 / float64 (default: JAX's default float).

        Every order is at most 20 (`M_I`, `M_P`, `M_V`).
        """
        self.grid = check_grid(grid)
        dtype = model_dtype(dtype)
        self.flux = scalar_leaf("flux", flux, dtype)
        self.radius = size_leaf("radius", radius, dtype)
        bi, bp, bv = ring_coefficients(beta_i, beta_p, beta_v)
        orders = {
            "beta_i": bi.shape[0],
            "beta_p": (bp.shape[0] - 1) // 2,
            "beta_v": bv.shape[0] - 1,
        }
        for name, m in orders.items():
            if m > MAX_ORDER:
                raise ValueError(
                    f"`{name}` reaches order {m}, beyond the {MAX_ORDER} orders the "
                    "Bessel functions are tested to."
                )
        self.beta_i = jnp.asarray(bi, dtype).reshape(-1, 2)
        self.beta_p = jnp.asarray(bp, dtype).reshape(-1, 2)
        self.beta_v = jnp.asarray(bv, dtype).reshape(-1, 2)
        self.x0 = scalar_leaf("x0", x0, dtype)
        self.y0 = scalar_leaf("y0", y0, dtype)
        self.fwhm = None if fwhm is None else size_leaf("fwhm", fwhm, dtype)
        if all(is_concrete(b) for b in (bi, bp, bv)):
            _check_physical(np.asarray(bi), np.asarray(bp), np.asarray(bv))

    @property
    def orders(self) -> tuple[int, int, int]:
        """`(M_I, M_P, M_V)`."""
        return (
            int(self.beta_i.shape[0]),
            (int(self.beta_p.shape[0]) - 1) // 2,
            int(self.beta_v.shape[0]) - 1,
        )

    @property
    def has_intensity(self) -> bool:
        return self.fwhm is None

    def coefficients(self) -> tuple[Complex[Array, " mi"], ...]:
        """`(β^I, β^P, β^V)` as complex arrays, in the constructor's orders
        (`m = 1..M_I`, `−M_P..M_P`, `0..M_V`)."""
        return tuple(
            b[:, 0] + 1j * b[:, 1] for b in (self.beta_i, self.beta_p, self.beta_v)
        )

    def _series(self, e, weight):
        """`(S_I, S_P(e), S_P(−e), S_V)` with `S = Σ β_m w_m e^m` (two-sided for
        `P`; `I` and `V` real series, `1 + Σ 2 Re(...)`): `weight[m]` is the
        radial weight of order `|m|` (`i^m J_m(z)`, or 1 for the image), `e =
        e^{iψ}`."""
        bi, bp, bv = self.coefficients()
        mi, mp, mv = self.orders
        power = [jnp.ones_like(e)]
        for _ in range(max(mi, mp, mv)):
            power.append(power[-1] * e)
        s_i = weight[0] + sum(
            (weight[m] * 2 * jnp.real(bi[m - 1] * power[m]) for m in range(1, mi + 1)),
            0.0,
        )
        s_v = jnp.real(bv[0]) * weight[0] + sum(
            (weight[m] * 2 * jnp.real(bv[m] * power[m]) for m in range(1, mv + 1)),
            0.0,
        )
        s_p = 0.0
        s_p_back = 0.0  # at −(u, v): e^{imψ} → (−1)^m e^{imψ}
        for m in range(-mp, mp + 1):
            em = power[m] if m >= 0 else jnp.conj(power[-m])
            term = bp[m + mp] * weight[abs(m)] * em
            s_p = s_p + term
            s_p_back = s_p_back + (term if m % 2 == 0 else -term)
        return s_i, s_p, s_p_back, s_v

    def stokes_visibility(self, u, v):
        u, v = points(u, v, self.flux.dtype)
        rho, e = polar(u, v)
        z = 2 * math.pi * self.radius * rho
        j = bessel_j(max(self.orders), z)
        weight = [_I_POWERS[m % 4] * j[m] for m in range(j.shape[0])]
        s_i, s_p, s_p_back, s_v = self._series(e, weight)
        vq = 0.5 * (s_p + jnp.conj(s_p_back))
        vu = -0.5j * (s_p - jnp.conj(s_p_back))
        ctype = jnp.result_type(self.flux.dtype, jnp.complex64)
        out = (
            jnp.stack([jnp.asarray(s, ctype) for s in (s_i, vq, vu, s_v)], axis=-1)
            * self.flux
        )
        phase = jnp.exp(2j * math.pi * (u * self.x0 + v * self.y0))
        if self.fwhm is not None:
            sigma = self.fwhm / FWHM_PER_SIGMA
            phase = phase * jnp.exp(-2.0 * math.pi**2 * sigma**2 * (u * u + v * v))
        return out * phase[..., None]

    def _profile(self, e):
        """`(a_I, Re a_P, Im a_P, a_V)` at the position angles `e = e^{iθ}`."""
        ones = [jnp.ones(e.shape, self.flux.dtype)] * (max(self.orders) + 1)
        a_i, a_p, _, a_v = self._series(e, ones)
        return jnp.stack([jnp.real(a_i), jnp.real(a_p), jnp.imag(a_p), jnp.real(a_v)])

    def render(self):
        n = int(math.ceil(4 * math.pi * max(self.grid.shape)))
        theta = np.asarray(2 * np.pi * (np.arange(n) + 0.5) / n, self.flux.dtype)
        ctype = jnp.result_type(self.flux.dtype, jnp.complex64)
        e = jnp.asarray(np.exp(1j * theta), ctype)
        flux = self.flux / n * self._profile(e)
        x = self.radius * jnp.asarray(np.sin(theta)) + self.x0
        y = self.radius * jnp.asarray(np.cos(theta)) + self.y0
        img = jnp.stack([deposit(self.grid, x, y, f) for f in flux])
        if self.fwhm is not None:
            img = gaussian_blur(self.grid, self.fwhm, img)
        return img

    def intensity(self, x, y, resolution=0.0):
        if self.fwhm is not None:
            raise ValueError(
                "a `PolMRing` with a `fwhm` has no closed-form intensity: render it "
                "on its grid (`model()`), or evaluate its visibilities."
            )
        refuse_zero_resolution(resolution, "a `PolMRing`")
        x, y = points(x, y, self.flux.dtype)
        r, e = polar(x - self.x0, y - self.y0)
        h = jnp.asarray(resolution, x.dtype)
        tri = jnp.maximum(0.0, 1.0 - jnp.abs(r - self.radius) / h) / h
        ok = r > 0
        radial = jnp.where(ok, tri / (2 * math.pi * jnp.where(ok, r, 1.0)), 0.0)
        return self.flux * radial * self._profile(e)[0]
