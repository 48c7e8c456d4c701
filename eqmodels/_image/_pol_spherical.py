"""eht-imaging's polarimetric image variables: (I, ρ, φ, ψ) with its change of
variables, for parity."""

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Real

from .._custom_types import ArraySequence
from .._grid import ImageGrid
from .._validation import check_grid, is_concrete, resolve_float_dtype
from ._base import evaluated_on
from ._pixel import PixelImage
from ._pol_base import AbstractPolImageModel
from ._pol_common import (
    check_intensity,
    check_order,
    embed_planes,
    free_pixel_planes,
    stokes_on_grid,
)


#: eht-imaging's widths of its arctan changes of variables (`TANWIDTH_M`,
#: `TANWIDTH_PSI` in `ehtim/imaging/pol_imager_utils.py`).
TANWIDTH_M = 0.5
TANWIDTH_PSI = 1.0

_POL_TRANSFORMS = ("polcv", "mcv")


class PolSphericalImage(AbstractPolImageModel):
    r"""A polarimetric pixel image in eht-imaging's variables, for parity with its
    polarimetric imager: the Poincaré-sphere point of each pixel in spherical
    coordinates,

    `Q = I ρ cos ψ cos φ`, `U = I ρ cos ψ sin φ`, `V = I ρ sin ψ`,

    i.e. `P = Q + iU = I ρ cos ψ e^{iφ}` with `φ = 2χ` (twice the EVPA, east of
    north), `ρ = √(Q² + U² + V²) / I` the polarized fraction and `ψ` the latitude on
    the sphere (`v = V / I = ρ sin ψ`, `m = |P| / I = ρ cos ψ`). eht-imaging's
    `imarr = (I, ρ, φ, ψ)` (`make_q_image`, `make_u_image`, `make_v_image` in
    `ehtim/imaging/pol_imager_utils.py`).

    The free parameters are eht-imaging's *solver* variables, per free pixel:
    Stokes I through a [`eqmodels.PixelImage`][] (`intensity`; eht-imaging's
    `'log'` transform is `transform="log"`), and `params = (a, φ, b)` mapped by its
    change of variables `pol_transform`:

    - `"polcv"` (full polarization, eht-imaging's `pol_next='IQUV'`):
      `ρ = ½ + arctan(a / 0.5) / π ∈ (0, 1)`, `ψ = arctan(b / 1) ∈ (−π/2, π/2)`
      (`TANWIDTH_M = 0.5`, `TANWIDTH_PSI = 1`).
    - `"mcv"` (linear polarization with the circular fraction held,
      `pol_next='P'`/`'IP'`): `b` is `v = V / I`, held fixed (no gradient, as
      eht-imaging does not solve for it; `|v| < 1`), and
      `m = (1 − |v|)(½ + arctan(a / 0.5) / π)`, so that `m + |v| < 1`;
      `Q = I m cos φ`, `U = I m sin φ`, `V = I v` (eht-imaging's `mcv`, which
      writes the same point as `ρ = √(m² + v²)`, `ψ = arcsin(v / ρ)`).

    Both keep `Q² + U² + V² ≤ I²` by construction. As in eht-imaging, zero
    polarization is the limit `a → −∞`, where the derivative in `a` vanishes:
    start from a nonzero polarization. ([`eqmodels.PolPixelImage`][] has no such
    limit.)
    """

    intensity: PixelImage
    params: Float[Array, "3 nfree"]
    pol_transform: Literal["polcv", "mcv"] = eqx.field(static=True)

    def __init__(
        self,
        intensity: PixelImage,
        params: Real[ArrayLike, "..."] | ArraySequence,
        *,
        pol_transform: str = "polcv",
    ):
        """**Arguments:**

        - `intensity`: the Stokes I pixels, a [`eqmodels.PixelImage`][] (its
          transform and embed mask are the model's).
        - `params`: the solver variables `(a, φ, b)` (eht-imaging's `imarr[1:]`
          before `polcv` / `mcv`): shape `(3, ny, nx)`, or `(3, nfree)` for the
          free pixels of the mask. With `"mcv"`, `b = v` must satisfy `|v| < 1`.
        - `pol_transform`: `"polcv"` or `"mcv"` (eht-imaging's names).
        """
        self.intensity = check_intensity(intensity)
        if pol_transform not in _POL_TRANSFORMS:
            raise ValueError(
                f"`pol_transform` must be one of {_POL_TRANSFORMS} (eht-imaging's "
                f"changes of variables), got {pol_transform!r}."
            )
        self.pol_transform = pol_transform
        params = free_pixel_planes(
            "params", params, intensity, 3, intensity.params.dtype
        )
        if pol_transform == "mcv" and is_concrete(params):
            # Indexed on the host: `params[2]` of a JAX array would be a program
            # of its own (traced, compiled or loaded) in a fresh process.
            v = np.asarray(params)[2]
            if not np.all(np.abs(v) < 1):
                raise ValueError(
                    f"`params[2]` is the circular fraction v = V / I with "
                    f"`pol_transform='mcv'` and must satisfy |v| < 1; got up to "
                    f"{np.abs(v).max():.4g}."
                )
        self.params = params

    @property
    def grid(self) -> ImageGrid:
        """The image grid (the intensity's)."""
        return self.intensity.grid

    def _linear_circular(self):
        """`(m, φ, v)` per free pixel: `|P| / I`, `2χ`, `V / I`."""
        a, phi, b = self.params
        s = 0.5 + jnp.arctan(a / TANWIDTH_M) / jnp.pi
        if self.pol_transform == "polcv":
            psi = jnp.arctan(b / TANWIDTH_PSI)
            return s * jnp.cos(psi), phi, s * jnp.sin(psi)
        v = jax.lax.stop_gradient(b)
        return (1.0 - jnp.abs(v)) * s, phi, v

    def __call__(self) -> Float[Array, "4 ny nx"]:
        # One compiled program when called outside `jit` (a fresh process then
        # loads one program, not one per operation); inlined inside `jit`.
        return _stokes_planes(self)

    def physical(self) -> Float[Array, "4 ny nx"]:
        """eht-imaging's physical `imarr`: the planes `(I, ρ, φ, ψ)` (after its
        change of variables), `(4, ny, nx)` (0 off the mask)."""
        m, phi, v = self._linear_circular()
        rho = jnp.sqrt(m * m + v * v)
        psi = jnp.arctan2(v, m)  # = arcsin(v / ρ) for m >= 0, 0 at ρ = 0
        f = embed_planes(jnp.stack([rho, phi, psi]), self.intensity)
        return jnp.concatenate([self.intensity()[None], f])

    @classmethod
    def from_stokes(
        cls,
        stokes: Real[ArrayLike, "..."] | ArraySequence | AbstractPolImageModel,
        grid: ImageGrid,
        *,
        transform: str = "log",
        mask: Bool[ArrayLike, "ny nx"] | ArraySequence | None = None,
        pol_transform: str = "polcv",
        dtype=None,
    ) -> "PolSphericalImage":
        """A `PolSphericalImage` whose `__call__()` returns `stokes` (on the
        mask), to rounding: eht-imaging's inverse change of variables (`polcv_r`,
        `mcv_r`).

        **Arguments:**

        - `stokes`: the planes I, Q, U, V, `(4, ny, nx)` Jy/pixel (concrete), or
          a polarimetric image model on `grid`. On the mask I must be > 0 and the
          polarized fraction `ρ` < 1; with `"mcv"`, `m + |v| < 1`
          (`m = |P| / I`, `v = V / I`).
        - `grid`: the [`eqmodels.ImageGrid`][].
        - `transform`, `mask`, `dtype`: as for [`eqmodels.PixelImage`][].
        - `pol_transform`: `"polcv"` or `"mcv"`.
        """
        check_order(stokes, grid, "PolSphericalImage.from_stokes")
        check_grid(grid)
        stokes = evaluated_on(stokes, grid, "stokes", f"`grid` is {grid!r}.")
        if not is_concrete(stokes):
            raise TypeError(
                "`stokes` must be concrete: build the model outside `jit`/`vmap`."
            )
        dtype = resolve_float_dtype(dtype, stokes)
        stokes = stokes_on_grid(stokes, grid)
        intensity = PixelImage.from_image(
            stokes[0], grid, transform=transform, mask=mask, dtype=dtype
        )
        idx = np.asarray(intensity.indices)
        i = stokes[0].reshape(-1)[idx]
        q, u, v = stokes[1:].reshape(3, -1)[:, idx]
        if np.any(i <= 0):
            raise ValueError(
                "`stokes` has I <= 0 on the mask: eht-imaging's variables need I > 0 "
                "(ρ = |(Q, U, V)| / I); use an embed `mask` or a positive floor."
            )
        m, vf = np.hypot(q, u) / i, v / i
        phi = np.arctan2(u, q)
        if pol_transform == "polcv":
            rho = np.sqrt(m * m + vf * vf)
            if np.any(rho >= 1):
                raise ValueError(
                    f"`stokes` has a polarized fraction ρ >= 1 at {int((rho >= 1).sum())}"
                    f" pixel(s) (up to {rho.max():.4g}); 'polcv' represents ρ < 1: "
                    "scale Q, U, V down there."
                )
            a = TANWIDTH_M * np.tan(np.pi * (rho - 0.5))
            b = TANWIDTH_PSI * np.tan(np.arctan2(vf, m))
        elif pol_transform == "mcv":
            over = m + np.abs(vf) >= 1
            if np.any(over):
                raise ValueError(
                    f"`stokes` has m + |v| >= 1 at {int(over.sum())} pixel(s) "
                    "(m = |P| / I, v = V / I); eht-imaging's 'mcv' represents "
                    "m < 1 − |v| only: scale Q, U (or V) down there, or use "
                    "`pol_transform='polcv'`."
                )
            a = TANWIDTH_M * np.tan(np.pi * (m / (1 - np.abs(vf)) - 0.5))
            b = vf
        else:
            raise ValueError(
                f"`pol_transform` must be one of {_POL_TRANSFORMS}, got "
                f"{pol_transform!r}."
            )
        return cls(intensity, np.stack([a, phi, b]), pol_transform=pol_transform)


@eqx.filter_jit(inline=True)
def _stokes_planes(model: PolSphericalImage) -> Float[Array, "4 ny nx"]:
    """`model()`: the Stokes planes from the intensity and `(m, φ, v)`."""
    m, phi, v = model._linear_circular()
    f = embed_planes(
        jnp.stack([m * jnp.cos(phi), m * jnp.sin(phi), v]), model.intensity
    )
    i = model.intensity()
    return jnp.concatenate([i[None], i[None] * f])
