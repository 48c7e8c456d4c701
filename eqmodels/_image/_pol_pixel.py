"""Free pixels on the Poincaré sphere: a polarimetric pixel image, physical by
construction."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Real

from .._custom_types import ArraySequence, RealLike
from .._grid import ImageGrid
from .._validation import check_grid, host_real, is_concrete, resolve_float_dtype
from ._base import evaluated_on
from ._pixel import _mask_indices, PixelImage
from ._pol_base import AbstractPolImageModel
from ._pol_common import (
    check_intensity,
    check_order,
    embed_planes,
    free_pixel_planes,
    stokes_on_grid,
)


#: Below this `|w|²` the ball map uses its Taylor series (`tanh(r)/r` at `r → 0`).
_SERIES_BELOW = 1e-4


def ball_scale(s):
    """`tanh(√s) / √s` for `s = |w|² ≥ 0`: an even analytic function of `|w|`,
    computed with finite value and derivative at `s = 0` (Taylor series
    `1 − s/3 + 2s²/15 − 17s³/315` below `s = 1e-4`, error < 1e-17)."""
    small = s < _SERIES_BELOW
    r = jnp.sqrt(jnp.where(small, 1.0, s))
    series = 1.0 + s * (-1.0 / 3 + s * (2.0 / 15 + s * (-17.0 / 315)))
    return jnp.where(small, series, jnp.tanh(r) / r)


def _inverse_scale(rho):
    """`artanh(ρ) / ρ` (1 at `ρ = 0`), on the host: `w = f · artanh(|f|) / |f|`."""
    rho = np.asarray(rho)
    safe = np.where(rho > 0, rho, 0.5)
    return np.where(rho > 0, np.arctanh(safe) / safe, 1.0)


class PolPixelImage(AbstractPolImageModel):
    r"""A polarimetric image whose pixels are free parameters on the Poincaré
    sphere, physical by construction.

    Stokes I is a [`eqmodels.PixelImage`][] (`intensity`: log pixels by default, so
    `I > 0`; any embed mask). Each free pixel carries an unconstrained vector
    `w ∈ ℝ³` (`pol`) mapped into the open unit ball:

    `f = tanh(|w|) · w / |w|`,  `(Q, U, V) = I · f`,

    so the polarized fraction is `ρ = √(Q² + U² + V²) / I = tanh(|w|) < 1` and the
    direction of `w` is the point on the Poincaré sphere (EVPA
    `χ = ½ atan2(w_U, w_Q)` east of north, ellipticity from `w_V`):
    `Q² + U² + V² ≤ I²` always. The map `w ↦ f` is analytic everywhere — no
    coordinate singularity at zero polarization (`w = 0`, where `∂f/∂w` is the
    identity, so an optimiser leaves it freely) nor at the poles (pure circular
    polarization) — so values and gradients are finite for every `w`.

    With `circular=False` each pixel carries `w ∈ ℝ²` (`w_Q`, `w_U`) and `V = 0`
    exactly: linear polarization only, as EHT polarimetric imaging usually fits.

    Build one from a Stokes image with [`eqmodels.PolPixelImage.from_stokes`][], or
    from a Stokes I pixel model and a uniform starting polarization with
    [`eqmodels.PolPixelImage.init`][].
    """

    intensity: PixelImage
    pol: Float[Array, "k nfree"]
    circular: bool = eqx.field(static=True)

    def __init__(
        self,
        intensity: PixelImage,
        pol: Real[ArrayLike, "..."] | ArraySequence,
        *,
        circular: bool = True,
    ):
        """**Arguments:**

        - `intensity`: the Stokes I pixels, a [`eqmodels.PixelImage`][] (its
          transform and embed mask are the model's).
        - `pol`: the unconstrained polarization vectors `w`: shape `(3, ny, nx)`
          (`(2, ny, nx)` with `circular=False`), or one per free pixel of the
          mask, `(3, nfree)` / `(2, nfree)`. Off the mask Q = U = V = 0.
        - `circular`: `False` for linear polarization only (`V = 0`).
        """
        self.intensity = check_intensity(intensity)
        if not isinstance(circular, bool):
            raise TypeError(f"`circular` must be True or False, got {circular!r}.")
        self.circular = circular
        k = 3 if circular else 2
        self.pol = free_pixel_planes("pol", pol, intensity, k, intensity.params.dtype)

    @property
    def grid(self) -> ImageGrid:
        """The image grid (the intensity's)."""
        return self.intensity.grid

    def fraction(self) -> Float[Array, "3 ny nx"]:
        """The fractional polarization `(Q, U, V) / I = tanh(|w|) w / |w|`,
        `(3, ny, nx)` (0 off the mask; the V plane is 0 with `circular=False`)."""
        w = self.pol
        f = embed_planes(w * ball_scale(jnp.sum(w * w, axis=0))[None], self.intensity)
        if not self.circular:
            f = jnp.concatenate([f, jnp.zeros_like(f[:1])])
        return f

    def __call__(self) -> Float[Array, "4 ny nx"]:
        i = self.intensity()
        return jnp.concatenate([i[None], i[None] * self.fraction()])

    @classmethod
    def from_stokes(
        cls,
        stokes: Real[ArrayLike, "..."] | ArraySequence | AbstractPolImageModel,
        grid: ImageGrid,
        *,
        transform: str = "log",
        mask: Bool[ArrayLike, "ny nx"] | ArraySequence | None = None,
        circular: bool = True,
        dtype=None,
    ) -> "PolPixelImage":
        """A `PolPixelImage` whose `__call__()` returns `stokes` (on the mask), to
        rounding.

        **Arguments:**

        - `stokes`: the planes I, Q, U, V, `(4, ny, nx)` Jy/pixel, or a
          polarimetric image model on `grid`. Where I is 0 (possible with
          `transform="identity"`) Q, U, V must be 0; elsewhere the polarized
          fraction `√(Q² + U² + V²) / |I|` must be < 1 (the model cannot reach
          1). Values off the mask are ignored.
        - `grid`: the [`eqmodels.ImageGrid`][].
        - `transform`, `mask`, `dtype`: as for [`eqmodels.PixelImage`][] (the
          Stokes I pixels; the log transform needs I > 0 on the mask).
        - `circular`: `False` for linear polarization only; the V plane must then
          be 0.
        """
        check_order(stokes, grid, "PolPixelImage.from_stokes")
        check_grid(grid)
        stokes = evaluated_on(stokes, grid, "stokes", f"`grid` is {grid!r}.")
        dtype = resolve_float_dtype(dtype, stokes)
        stokes = stokes_on_grid(stokes, grid)
        intensity = PixelImage.from_image(
            stokes[0], grid, transform=transform, mask=mask, dtype=dtype
        )
        idx = _mask_indices(mask, grid)  # on the host, also under `jit`
        i = stokes[0].reshape(-1)[idx]
        p = stokes[1:].reshape(3, -1)[:, idx]
        if not isinstance(circular, bool):
            raise TypeError(f"`circular` must be True or False, got {circular!r}.")
        if is_concrete(stokes):
            _check_fraction(i, p, circular, intensity)
            zero = i == 0
            f = p / np.where(zero, 1.0, i)
            w = f * _inverse_scale(np.sqrt(np.sum(f * f, axis=0)))
        else:  # traced: no checks, the same map in jnp
            zero = i == 0
            f = p / jnp.where(zero, 1.0, i)[None]
            rho = jnp.sqrt(jnp.sum(f * f, axis=0))
            safe = jnp.where(rho > 0, rho, 0.5)
            w = f * jnp.where(rho > 0, jnp.arctanh(safe) / safe, 1.0)[None]
        return cls(intensity, w if circular else w[:2], circular=circular)

    @classmethod
    def init(
        cls,
        intensity: PixelImage,
        *,
        frac: RealLike = 0.1,
        evpa: RealLike = 0.0,
        vfrac: RealLike = 0.0,
        circular: bool = True,
    ) -> "PolPixelImage":
        """A starting point: the Stokes I pixels `intensity` with a uniform
        fractional polarization.

        **Arguments:**

        - `intensity`: a [`eqmodels.PixelImage`][], e.g.
          `PixelImage.from_prior(prior, grid, clipfloor=..., flux=...)`
          (eht-imaging's setup: log pixels on an embed mask, rescaled to the
          total flux).
        - `frac`: the linear polarized fraction `|P| / I`, ≥ 0.
        - `evpa`: the EVPA `χ`, radians east of north (`Q + iU = I·frac·e^{2iχ}`).
        - `vfrac`: the circular fraction `V / I` (0 with `circular=False`).
          `frac² + vfrac²` must be < 1.
        - `circular`: `False` for linear polarization only.
        """
        intensity = check_intensity(intensity)
        vals = {}
        for name, x in (("frac", frac), ("evpa", evpa), ("vfrac", vfrac)):
            v = host_real(x)
            if v is None or not np.isfinite(v):
                raise TypeError(f"`{name}` must be a finite real number, got {x!r}.")
            vals[name] = v
        m, chi, v = vals["frac"], vals["evpa"], vals["vfrac"]
        if m < 0:
            raise ValueError(
                f"`frac` must be >= 0, got {m} (for the perpendicular direction "
                "add π/2 to `evpa`)."
            )
        if not m * m + v * v < 1:
            raise ValueError(
                f"`frac`² + `vfrac`² must be < 1 (polarized fraction below 1), got "
                f"frac={m}, vfrac={v}."
            )
        if not circular and v != 0:
            raise ValueError(
                f"`vfrac`={v} with `circular=False` (V fixed at 0): drop `vfrac` or "
                "pass `circular=True`."
            )
        f = np.array([m * np.cos(2 * chi), m * np.sin(2 * chi), v])
        w = f * _inverse_scale(np.sqrt(np.sum(f * f)))
        nfree = int(intensity.indices.shape[0])
        w = np.repeat(w[:, None], nfree, axis=1)
        return cls(intensity, w if circular else w[:2], circular=circular)


def _check_fraction(i, p, circular: bool, intensity: PixelImage) -> None:
    """Refuse (concrete) Stokes planes the model cannot represent, naming the
    first offending pixel."""
    shape = intensity.grid.shape
    idx = np.asarray(intensity.indices)

    def where(bad):  # the first offending pixel, (row, column)
        return tuple(int(k) for k in np.unravel_index(idx[np.argmax(bad)], shape))

    if not circular and np.any(p[2] != 0):
        bad = p[2] != 0
        raise ValueError(
            f"`stokes` has V != 0 at {int(bad.sum())} pixel(s), first at "
            f"{where(bad)}, but `circular=False` fixes V at 0: pass `circular=True`, "
            "or zero the V plane (`stokes[3] = 0`)."
        )
    pol2 = np.sum(p * p, axis=0)
    zero = i == 0
    if np.any(zero & (pol2 > 0)):
        bad = zero & (pol2 > 0)
        raise ValueError(
            f"`stokes` is polarized where I = 0 at {int(bad.sum())} pixel(s), first "
            f"at {where(bad)}: Q, U, V must be 0 where I is (a polarized fraction "
            "< 1)."
        )
    over = ~zero & (pol2 >= i * i)
    if np.any(over):
        frac = np.sqrt(np.max(pol2[over] / i[over] ** 2))
        raise ValueError(
            f"`stokes` has a polarized fraction √(Q² + U² + V²) / |I| >= 1 at "
            f"{int(over.sum())} pixel(s), first at {where(over)} (up to {frac:.4g}); "
            "the model represents fractions < 1 only: scale Q, U, V down there (e.g. "
            "by `0.99 * I / √(Q² + U² + V²)`)."
        )
