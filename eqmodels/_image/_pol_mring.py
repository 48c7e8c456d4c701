"""A polarized m-ring: azimuthal Fourier modes of I, P and V around a ring."""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Num

from .._custom_types import ArraySequence, RealLike
from .._grid import ImageGrid
from .._numerics import FWHM_PER_SIGMA, safe_sqrt
from .._validation import (
    as_numpy,
    check_grid,
    check_radians,
    is_concrete,
    resolve_float_dtype,
    scalar_leaf,
)
from ._parametric import check_inside, normalised, pixel_offsets, sigma_pixels
from ._pol_base import AbstractPolImageModel
from ._pol_common import clip_fraction


#: Position angles at which construction checks that the ring is physical.
_N_CHECK = 4096


def azimuth_phasor(dx, dy):
    """`e^{iφ} = (Δy + iΔx) / r` for the position angle `φ` east of north of
    `(Δx, Δy)` (+x east, +y north), as `(cos φ, sin φ)`; `(0, 0)` at `r = 0`
    (where the azimuth is undefined), with finite derivatives there."""
    r2 = dx * dx + dy * dy
    ok = r2 > 0
    r = jnp.where(ok, safe_sqrt(r2), 1.0)
    return jnp.where(ok, dy / r, 0.0), jnp.where(ok, dx / r, 0.0)


def _powers(c, s, n: int):
    """`[e^{imφ} for m = 0..n]` as complex arrays from `(cos φ, sin φ)`."""
    z = c + 1j * s
    out = [jnp.ones_like(z)]
    for _ in range(n):
        out.append(out[-1] * z)
    return out


def _as_coeffs(name: str, x, *, odd: bool = False):
    """A 1-d sequence of complex coefficients as a float `(n, 2)` array (real,
    imaginary), with a clear error naming `name`."""
    if not is_concrete(x):
        x = jnp.asarray(x)
        return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)
    arr = as_numpy(name, x)
    if not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"`{name}` must hold numbers, got dtype {arr.dtype}.")
    if arr.ndim != 1:
        raise ValueError(
            f"`{name}` must be a 1-d sequence of (complex) coefficients, got shape "
            f"{arr.shape}."
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"`{name}` has non-finite coefficients: pass finite values.")
    if odd and arr.size % 2 == 0:
        raise ValueError(
            f"`{name}` has {arr.size} coefficients; it lists m = −M..M (2M + 1 of "
            "them, eht-imaging's `beta_list_pol` order), e.g. `[0, 0, 0.1j, 0, 0]` "
            "for M = 2 (pad with zeros)."
        )
    arr = arr.astype(np.complex128)
    return np.stack([arr.real, arr.imag], axis=-1)


def ring_coefficients(beta_i, beta_p, beta_v):
    """The polarized m-ring's `β^I`, `β^P`, `β^V` as float `(n, 2)` arrays (see
    `_as_coeffs`), with the checks both ring models make: `β^P` lists `m = −M..M`,
    and `β^V` lists at least a real `β^V_0`."""
    bi = _as_coeffs("beta_i", beta_i)
    bp = _as_coeffs("beta_p", beta_p, odd=True)
    bv = _as_coeffs("beta_v", beta_v)
    if is_concrete(bv) and bv.shape[0] == 0:
        raise ValueError(
            "`beta_v` must list at least β^V_0 (pass `beta_v=[0.0]` for V = 0)."
        )
    if is_concrete(bv) and bv[0, 1] != 0:
        raise ValueError(
            f"`beta_v[0]` (β^V_0, the mean circular fraction) must be real, got "
            f"{complex(*bv[0])}: V is real."
        )
    return bi, bp, bv


class PolMRingImage(AbstractPolImageModel):
    r"""A polarized m-ring: a ring with a Gaussian radial profile whose Stokes I,
    linear polarization `P = Q + iU` and V vary around it as azimuthal Fourier
    series (Johnson et al. 2020's m-ring; the polarized m-ring of EHT M87* Paper
    VII and eht-imaging's `mring` models), rendered on the grid and differentiable
    in every parameter:

    - `I_p = F · R_p a_I(φ_p) / Σ_q R_q a_I(φ_q)`,
      `R = exp(−(r − d/2)² / (2σ_w²))`, `σ_w = w / √(8 ln 2)`,
    - `a_I(φ) = 1 + Σ_{m=1}^{M_I} 2 Re(β^I_m e^{imφ})`,
    - `P_p = I_p a_P(φ_p) / a_I(φ_p)`, `a_P(φ) = Σ_{m=−M_P}^{M_P} β^P_m e^{imφ}`,
    - `V_p = I_p a_V(φ_p) / a_I(φ_p)`,
      `a_V(φ) = β^V_0 + Σ_{m=1}^{M_V} 2 Re(β^V_m e^{imφ})` (`β^V_0` real),

    with `r`, `φ` the distance and **position angle east of north** of the pixel
    centre from `(x0, y0)` (`e^{iφ} = (Δy + iΔx) / r`, eht-imaging's
    `angle((y − y0) + i(x − x0))`; at the centre itself the azimuthal modes
    `m ≠ 0` are 0). The `β` are complex; the I and V series are real (their
    `m < 0` coefficients are the conjugates), P's is not. For a thin ring these are
    the `β_m` of [`eqmodels.beta_m`][] (Palumbo et al. 2020): `β^P_2` is the
    quantity EHT M87* Paper VII reports (`|β_2|`, `arg β_2`). The fractional
    polarization `(a_P, a_V) / a_I` depends on `φ` only.

    **Physical by construction.** Construction refuses coefficients for which
    `a_I(φ) < 0` or `|a_P(φ)|² + a_V(φ)² > a_I(φ)²` at any of 4096 position angles
    (`Q² + U² + V² ≤ I²`). An optimiser's step may still leave that set; the image
    then clips `a_I` at 0 (as [`eqmodels.RingImage`][] does) and scales the
    fractional polarization `(a_P, a_V) / a_I` back onto the unit ball where it
    exceeds 1, so that the rendered planes always obey `Q² + U² + V² ≤ I²` (value
    and derivatives: those of the image rendered). Parameters traced under `jit`
    are not checked.

    With `beta_i=[(A/2) e^{−iθ_A}]` the I plane is [`eqmodels.RingImage`][]'s with
    asymmetry `A` and bright side at `θ_A`.

    The radial profile multiplies the azimuthal series, as in
    [`eqmodels.RingImage`][], so the fractional polarization is the same at every
    radius. eht-imaging's `thick_mring` instead convolves a thin m-ring with a
    circular Gaussian, which damps mode `m` away from the ridge by
    `I_m(z) / I_0(z)` (modified Bessel functions); the two agree in the
    thin-ring limit.
    """

    grid: ImageGrid
    flux: Float[Array, ""]
    diameter: Float[Array, ""]
    width: Float[Array, ""]
    x0: Float[Array, ""]
    y0: Float[Array, ""]
    beta_i: Float[Array, "mi 2"]
    beta_p: Float[Array, "mp 2"]
    beta_v: Float[Array, "mv 2"]

    def __init__(
        self,
        grid: ImageGrid,
        flux: RealLike,
        diameter: RealLike,
        width: RealLike,
        *,
        x0: RealLike = 0.0,
        y0: RealLike = 0.0,
        beta_i: Num[ArrayLike, " mi"] | ArraySequence = (),
        beta_p: Num[ArrayLike, " mp"] | ArraySequence = (0.0,),
        beta_v: Num[ArrayLike, " mv"] | ArraySequence = (0.0,),
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][].
        - `flux`: total Stokes I flux `F` (Jy).
        - `diameter`: ring diameter `d` (radians; `eqmodels.uas_to_rad(40.0)`).
        - `width`: FWHM `w` of the radial profile (radians, > 0).
        - `x0`, `y0`: centre (radians; +x east, +y north).
        - `beta_i`: `β^I_m` for `m = 1..M_I` (complex; `β^I_0 = 1`).
        - `beta_p`: `β^P_m` for `m = −M_P..M_P` (complex, `2M_P + 1` values,
          eht-imaging's `beta_list_pol` order): `beta_p=[0, 0, 0, 0, 0.2j]` is a
          pure `β_2 = 0.2i`.
        - `beta_v`: `β^V_m` for `m = 0..M_V` (complex; `β^V_0` real,
          eht-imaging's `beta_list_cpol`).
        - `dtype`: float32 / float64 (default: JAX's default float).
        """
        self.grid = check_grid(grid)
        dtype = resolve_float_dtype(jnp.result_type(float) if dtype is None else dtype)
        self.flux = scalar_leaf("flux", flux, dtype)
        self.diameter = scalar_leaf("diameter", diameter, dtype, positive=True)
        self.width = scalar_leaf("width", width, dtype, positive=True)
        check_radians("diameter", self.diameter)
        check_radians("width", self.width)
        self.x0 = scalar_leaf("x0", x0, dtype)
        self.y0 = scalar_leaf("y0", y0, dtype)
        bi, bp, bv = ring_coefficients(beta_i, beta_p, beta_v)
        self.beta_i = jnp.asarray(bi, dtype)
        self.beta_p = jnp.asarray(bp, dtype)
        self.beta_v = jnp.asarray(bv, dtype)
        concrete = is_concrete(self.diameter) and is_concrete(self.width)
        check_inside(
            self.grid,
            self.x0,
            self.y0,
            0.5 * (self.diameter + self.width) if concrete else 0.0,
            "the ring (`diameter`, `width`, `x0`, `y0`: its outer half-maximum "
            "radius `(diameter + width) / 2`)",
        )
        if all(is_concrete(b) for b in (bi, bp, bv)):
            _check_physical(np.asarray(bi), np.asarray(bp), np.asarray(bv))

    def coefficients(self) -> tuple[Complex[Array, " mi"], ...]:
        """`(β^I, β^P, β^V)` as complex arrays, in the constructor's orders
        (`m = 1..M_I`, `−M_P..M_P`, `0..M_V`)."""
        return tuple(
            b[:, 0] + 1j * b[:, 1] for b in (self.beta_i, self.beta_p, self.beta_v)
        )

    def azimuthal(self, c, s):
        """`(a_I, a_P, a_V)` at the position angles given by `(cos φ, sin φ)` (any
        shape), unclipped: `a_P` complex."""
        bi, bp, bv = self.coefficients()
        mi, mp, mv = bi.shape[0], (bp.shape[0] - 1) // 2, bv.shape[0] - 1
        z = _powers(c, s, max(mi, mp, mv))
        one = jnp.ones_like(c)
        a_i = one + sum(2 * jnp.real(bi[k - 1] * z[k]) for k in range(1, mi + 1))
        a_p = sum(
            (
                bp[k + mp] * (z[k] if k >= 0 else jnp.conj(z[-k]))
                for k in range(-mp, mp + 1)
            ),
            jnp.zeros_like(z[0]),
        )
        a_v = jnp.real(bv[0]) * one + sum(
            2 * jnp.real(bv[k] * z[k]) for k in range(1, mv + 1)
        )
        return a_i, a_p, a_v

    def __call__(self) -> Float[Array, "4 ny nx"]:
        dx, dy = pixel_offsets(self.grid, self.x0, self.y0, self.flux.dtype)
        p = self.grid.psize
        r = safe_sqrt(dx * dx + dy * dy)
        s_w = sigma_pixels(self.width, p, FWHM_PER_SIGMA)
        log_radial = -0.5 * ((r - 0.5 * self.diameter / p) / s_w) ** 2
        a_i, a_p, a_v = self.azimuthal(*azimuth_phasor(dx, dy))
        i = self.flux * normalised(log_radial, a_i)
        pos = a_i > 0
        inv = jnp.where(pos, 1.0 / jnp.where(pos, a_i, 1.0), 0.0)
        fq, fu, fv = clip_fraction(jnp.real(a_p) * inv, jnp.imag(a_p) * inv, a_v * inv)
        return jnp.stack([i, fq * i, fu * i, fv * i])


def _check_physical(bi: np.ndarray, bp: np.ndarray, bv: np.ndarray) -> None:
    """Refuse coefficients whose ring is negative or over-polarized at some
    position angle (checked on a fine grid of angles, on the host)."""
    phi = np.linspace(0, 2 * np.pi, _N_CHECK, endpoint=False)
    bi, bp, bv = (b[:, 0] + 1j * b[:, 1] for b in (bi, bp, bv))
    mp = (bp.size - 1) // 2
    a_i = np.ones_like(phi) + sum(
        2 * np.real(bi[k - 1] * np.exp(1j * k * phi)) for k in range(1, bi.size + 1)
    )
    a_p = sum(bp[k + mp] * np.exp(1j * k * phi) for k in range(-mp, mp + 1))
    a_v = np.real(bv[0]) + sum(
        2 * np.real(bv[k] * np.exp(1j * k * phi)) for k in range(1, bv.size)
    )
    tol = 1e-12
    if np.any(a_i < -tol):
        k = int(np.argmin(a_i))
        raise ValueError(
            f"`beta_i` makes Stokes I negative around the ring (1 + Σ 2 Re(β_m "
            f"e^(imφ)) = {a_i[k]:.4g} at position angle {phi[k]:.4g} rad): keep "
            "Σ_m 2|β^I_m| <= 1, or check the coefficients."
        )
    n = np.sqrt(np.abs(a_p) ** 2 + a_v**2)
    over = n > np.maximum(a_i, 0) * (1 + tol) + tol
    if np.any(over):
        k = int(np.argmax(np.where(over, n - a_i, -np.inf)))
        raise ValueError(
            f"`beta_p` / `beta_v` over-polarize the ring: √(|a_P|² + a_V²) = "
            f"{n[k]:.4g} > a_I = {max(a_i[k], 0.0):.4g} at position angle "
            f"{phi[k]:.4g} rad "
            "(Q² + U² + V² <= I² is required): scale the polarization coefficients "
            "down (Σ|β^P_m| + |β^V_0| + Σ 2|β^V_m| <= 1 − Σ 2|β^I_m| suffices)."
        )
