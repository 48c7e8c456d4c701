"""Matrix-free forward model via jax-finufft."""

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Complex, Float

from .._custom_types import PointsLike, RealLike
from .._grid import ImageGrid
from .._image._base import AbstractImageModel
from .._numerics import asarray
from .._pulse import AbstractPulse
from .._validation import is_concrete
from ._base import AbstractForwardModel, check_pulse, prepare_points
from ._nufft_ops import mark_varying_like, nufftax_module as _nufftax, type2


BACKENDS = ("auto", "finufft", "nufftax")


# The coarsest tolerance taken: a transform's relative error of that order (1 %),
# beyond which a fit would fit the transform's errors (0.5 gave 5 % errors).
_MAX_EPS = 1e-2


def _resolve_backend(backend, points) -> str:
    """The transform library: jax-finufft where it runs (the PyPI wheels are
    CPU-only), else nufftax (pure JAX, runs on GPUs); a clear error, at
    construction, when neither can run where the points live."""
    if backend not in BACKENDS:
        raise ValueError(f"`backend` must be one of {BACKENDS}, got {backend!r}.")
    if backend == "nufftax" and _nufftax() is None:
        raise ImportError(
            "`backend='nufftax'` needs the nufftax package: "
            "`pip install 'eqmodels[gpu]'` (or `pip install nufftax`)."
        )
    if backend != "auto":
        return backend
    platforms = (
        {d.platform for d in points.devices()}
        if is_concrete(points)
        else {jax.default_backend()}
    )
    off_cpu = bool(platforms - {"cpu"})
    if not off_cpu:
        return "finufft"
    import jax_finufft.lowering  # imported when first needed: it slows start-up

    if jax_finufft.lowering.jax_finufft_gpu is not None:
        return "finufft"
    if _nufftax() is not None:
        return "nufftax"
    raise RuntimeError(
        f"NUFFT points were placed on {sorted(platforms)}, but the installed "
        "jax-finufft has no GPU support (the PyPI wheels are CPU-only) and nufftax "
        "is not installed. Install the GPU backend (`pip install 'eqmodels[gpu]'`), "
        "or build jax-finufft with CUDA (JAX_FINUFFT_USE_CUDA=ON), or build the "
        "model on the CPU (`with jax.default_device(jax.devices('cpu')[0]): ...`), "
        "or use `SeparableFT` / `DirectFT`, which run anywhere."
    )


class NUFFT(AbstractForwardModel):
    """Matrix-free forward model: a type-2 non-uniform FFT (jax-finufft; or
    nufftax, pure JAX, on GPUs — see `backend`), wrapped in primitives of our own
    that are linear in the image (the transpose is the type-1 transform with the
    same `iflag`).

    Memory is `O(N + ny·nx)`; accuracy is set by `eps` (relative, FINUFFT's
    tolerance; `1e-12` agrees with [`eqmodels.DirectFT`][] to ~1e-12). Works under
    `jit`, `vmap` (a batch of images becomes one multi-transform call), `grad` and
    `shard_map` (points sharded, image replicated: handled automatically).

    Points beyond the grid's Nyquist limit (`|u|·psize ≥ ½`) are computed exactly,
    as by the dense models, with an [`eqmodels.AliasingWarning`][].

    **Derivatives.** Every JAX transformation, at any order, with either backend:
    reverse mode (`jax.grad`, `jax.vjp`, `jax.jacrev`), forward mode (`jax.jvp`,
    `jax.jacfwd`, `jax.linearize`), `jax.hessian`, `jax.linear_transpose`, under
    `jit`, `vmap` and `shard_map`. The points are data: a model built from traced
    `u`, `v` has zero derivatives with respect to them.
    """

    grid: ImageGrid
    u: Float[Array, "*points"]
    v: Float[Array, "*points"]
    pulse: AbstractPulse
    py: Float[Array, " n"]
    px: Float[Array, " n"]
    factor: Complex[Array, " n"]
    eps: float = eqx.field(static=True)
    opts: Any = eqx.field(static=True)
    backend: str = eqx.field(static=True)

    point_fields = ("py", "px", "factor")
    hermitian_points = True

    def __init__(
        self,
        grid: ImageGrid,
        u: PointsLike,
        v: PointsLike,
        pulse: AbstractPulse | None = None,
        *,
        eps: RealLike | None = None,
        opts=None,
        dtype=None,
        backend: str = "auto",
    ):
        """**Arguments:**

        - `grid`: the [`eqmodels.ImageGrid`][].
        - `u`, `v`: points in wavelengths, same shape (any leading shape).
        - `pulse`: pixel pulse, default [`eqmodels.TrianglePulse`][].
        - `eps`: FINUFFT relative tolerance, at most `1e-2` (static: a new value
          recompiles); default `1e-12` in float64, `1e-6` in float32 (its floor).
        - `opts`: FINUFFT options, a `jax_finufft.options.Opts` (static), e.g.
          `Opts(nthreads=1)` when other processes share the cores. The mode order
          is fixed (centred): `modeord` must stay `False`.
        - `dtype`: `float32` or `float64`; default from `u`, `v`.
        - `backend`: the transform library (static). `"finufft"` (jax-finufft,
          with our own derivative and batching rules), `"nufftax"` (pure JAX, runs
          on GPUs: the `gpu` extra), or `"auto"` (default): jax-finufft where it
          runs — the CPU, or a GPU with a CUDA build of jax-finufft — else nufftax.
          Both give the same numbers to `eps`.
        """
        u, v, dtype = prepare_points(grid, u, v, dtype, "NUFFT")
        if eps is None:
            eps = 1e-6 if dtype == np.float32 else 1e-12
        if isinstance(eps, (str, bytes, bool)) or not is_concrete(eps):
            raise TypeError(
                f"`eps` must be a number, set outside `jit` (it is static: a new value "
                f"recompiles), got {eps!r}."
            )
        try:
            eps = float(eps)
        except (TypeError, ValueError):
            raise TypeError(f"`eps` must be a float, got {eps!r}.")
        if not (math.isfinite(eps) and 0 < eps <= _MAX_EPS):
            raise ValueError(
                f"`eps` must be in (0, {_MAX_EPS:g}], got {eps}: it is the transform's "
                "relative error (the defaults are 1e-12 in float64, 1e-6 in float32)."
            )
        # float32(1e-6) is 9.99999997e-07: the floor is compared in float32.
        if dtype == np.float32 and np.float32(eps) < np.float32(1e-6):
            raise ValueError(
                f"`eps`={eps} is below what float32 transforms reach; use eps >= 1e-6, "
                "or float64 (`jax.config.update('jax_enable_x64', True)` first, then "
                "`dtype=jnp.float64`)."
            )
        if opts is not None:
            import jax_finufft.options

            if not isinstance(opts, jax_finufft.options.Opts):
                raise TypeError(
                    "`opts` must be a `jax_finufft.options.Opts` or None, got "
                    f"{type(opts).__name__}."
                )
            if opts.modeord:
                raise ValueError(
                    "`opts.modeord` must be False: the NUFFT uses centred modes."
                )
        self.grid = grid
        self.u = asarray(u)
        self.v = asarray(v)
        self.pulse = check_pulse(pulse)
        self.eps = eps
        self.opts = opts
        self.backend = _resolve_backend(backend, self.u)
        if self.backend == "nufftax" and opts is not None:
            raise ValueError(
                "`opts` are FINUFFT options: the nufftax backend takes none."
            )
        # Points and the per-point factor (pixel pulse times the half-pixel phase of
        # each even axis: centred modes sit half a pixel off the phase centre there)
        # are fixed: computed once, on the host in float64 when the points are
        # concrete, and held as leaves.
        xp = np if is_concrete(u) else jnp
        u64 = xp.reshape(xp.asarray(u, np.float64 if xp is np else None), (-1,))
        v64 = xp.reshape(xp.asarray(v, np.float64 if xp is np else None), (-1,))
        if xp is jnp:  # traced points are data: no derivative (the transform's is 0)
            u64, v64 = jax.lax.stop_gradient(u64), jax.lax.stop_gradient(v64)
        psize = grid.psize
        shift = xp.zeros_like(u64)
        if grid.nx % 2 == 0:
            shift = shift - math.pi * psize * u64
        if grid.ny % 2 == 0:
            shift = shift - math.pi * psize * v64
        factor = self.pulse(u64, v64, psize) * xp.exp(1j * shift)
        ctype = np.complex64 if dtype == np.float32 else np.complex128
        self.py = asarray((2.0 * math.pi * psize) * v64, dtype)
        self.px = asarray((2.0 * math.pi * psize) * u64, dtype)
        self.factor = asarray(factor, ctype)

    def __call__(
        self, image: Float[Array, "ny nx"] | AbstractImageModel
    ) -> Complex[Array, "*points"]:
        image = self._check_image(image)
        image = mark_varying_like(image, self.py, self.px)
        raw = type2(
            image.astype(self.factor.dtype),
            self.py,
            self.px,
            backend=self.backend,
            eps=self.eps,
            ny=self.grid.ny,
            nx=self.grid.nx,
            opts=self.opts,
        )
        return (self.factor * raw).reshape(self.u.shape)

    def at(self, u: PointsLike, v: PointsLike) -> "NUFFT":
        return NUFFT(
            self.grid,
            u,
            v,
            self.pulse,
            eps=self.eps,
            opts=self.opts,
            dtype=self.dtype,
            backend=self.backend,
        )
