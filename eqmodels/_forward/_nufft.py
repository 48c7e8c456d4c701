"""Matrix-free forward model via jax-finufft."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float

from .._grid import ImageGrid
from .._pulse import AbstractPulse
from .._validation import is_concrete
from ._base import AbstractForwardModel, check_pulse, prepare_points
from ._finufft_ops import centred_ops


def _varying_axes(x) -> frozenset:
    """Mesh axes along which `x` varies inside `shard_map` (empty outside it).

    jax 0.10.2 spells it `aval.manual_axis_type.varying`; earlier releases `aval.vma`.
    """
    aval = jax.typeof(x)
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None:
        return frozenset(getattr(mat, "varying", ()))
    return frozenset(getattr(aval, "vma", ()))


def _mark_varying_like(image, *points):
    """Inside `shard_map`, mark a replicated image as device-varying wherever the
    points vary. Without it the gradient w.r.t. the replicated image is silently
    wrong (jax-finufft's primitives carry no varying-axes rule); `pcast`'s transpose
    is the `psum` that the gradient needs. A no-op outside `shard_map`."""
    missing = frozenset().union(*(_varying_axes(p) for p in points))
    missing = missing - _varying_axes(image)
    if not missing:
        return image
    return jax.lax.pcast(image, tuple(sorted(missing)), to="varying")


class NUFFT(AbstractForwardModel, strict=True):
    """Matrix-free forward model: a type-2 non-uniform FFT (jax-finufft), with a
    custom reverse-mode rule (the type-1 transform with the same `iflag`).

    Memory is `O(N + ny·nx)`; accuracy is set by `eps` (relative, FINUFFT's
    tolerance; `1e-12` agrees with [`eqmodels.DirectFT`][] to ~1e-12). Works under
    `jit`, `vmap` (a batch of images becomes one multi-transform call), `grad` and
    `shard_map` (points sharded, image replicated: handled automatically).

    Points must lie inside the grid's Nyquist limit, `|u|·psize < 1/2` and
    `|v|·psize < 1/2`: beyond it the image grid cannot represent the data.
    """

    grid: ImageGrid
    u: Float[Array, "*points"]
    v: Float[Array, "*points"]
    pulse: AbstractPulse
    eps: float = eqx.field(static=True)

    def __init__(
        self,
        grid: ImageGrid,
        u: ArrayLike,
        v: ArrayLike,
        pulse: AbstractPulse | None = None,
        *,
        eps: float | None = None,
        dtype=None,
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][].
        - `u`, `v`: points in wavelengths, same shape (any leading shape).
        - `pulse`: pixel pulse, default [`eqmodels.TrianglePulse`][].
        - `eps`: FINUFFT relative tolerance (static: a new value recompiles);
          default `1e-12` in float64, `1e-6` in float32 (its floor).
        - `dtype`: `float32` or `float64`; default from `u`, `v`.
        """
        u, v, dtype = prepare_points(grid, u, v, dtype)
        if eps is None:
            eps = 1e-6 if dtype == np.float32 else 1e-12
        try:
            eps = float(eps)
        except (TypeError, ValueError):
            raise TypeError(f"`eps` must be a float, got {eps!r}.")
        if not (math.isfinite(eps) and 0 < eps < 1):
            raise ValueError(f"`eps` must be in (0, 1), got {eps}.")
        if dtype == np.float32 and eps < 1e-6:
            raise ValueError(
                f"`eps`={eps} is below what float32 transforms reach; use eps >= 1e-6 "
                "or `dtype=jnp.float64`."
            )
        if is_concrete(u):
            for name, w in (("u", u), ("v", v)):
                worst = float(np.max(np.abs(w))) * grid.psize
                if worst >= 0.5:
                    raise ValueError(
                        f"`{name}` reaches |{name}|·psize = {worst:.4g} >= 0.5, beyond the "
                        f"grid's Nyquist limit ({grid.max_uv:.4g} wavelengths): use a "
                        "smaller `psize` (more pixels over the same field of view) or "
                        "drop the longest baselines."
                    )
        self.grid = grid
        self.u = jnp.asarray(u)
        self.v = jnp.asarray(v)
        self.pulse = check_pulse(pulse)
        self.eps = eps

    def __call__(self, image: Float[Array, "ny nx"]) -> Complex[Array, "*points"]:
        image = self._check_image(image)
        u = self.u.reshape(-1)
        v = self.v.reshape(-1)
        psize = self.grid.psize
        py = (2.0 * math.pi * psize) * v
        px = (2.0 * math.pi * psize) * u
        image = _mark_varying_like(image, py, px)
        _, _, transform = centred_ops(self.eps, self.grid.ny, self.grid.nx)
        ctype = jnp.complex64 if self.dtype == np.float32 else jnp.complex128
        raw = transform(image.astype(ctype), py, px)
        # Half-pixel shift for even axes (centred modes sit half a pixel off the
        # phase centre there), times the pixel pulse.
        shift = jnp.zeros_like(u)
        if self.grid.nx % 2 == 0:
            shift = shift - math.pi * psize * u
        if self.grid.ny % 2 == 0:
            shift = shift - math.pi * psize * v
        factor = self.pulse(u, v, psize) * jax.lax.complex(
            jnp.cos(shift), jnp.sin(shift)
        )
        return (factor * raw).reshape(self.u.shape)

    def at(self, u: ArrayLike, v: ArrayLike) -> "NUFFT":
        return NUFFT(self.grid, u, v, self.pulse, eps=self.eps, dtype=self.dtype)
