"""The azimuthal β_m decomposition of a Stokes image (Palumbo et al. 2020)."""

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Real

from .._custom_types import ArraySequence, RealLike
from .._grid import ImageGrid
from .._validation import check_grid, host_real, input_dtype, is_concrete
from ._base import evaluated_on
from ._parametric import pixel_offsets
from ._pol_base import AbstractPolImageModel
from ._pol_common import check_order, stokes_on_grid
from ._pol_mring import azimuth_phasor


_PLANES = {"I": 0, "P": None, "V": 3}


def beta_m(
    stokes: Real[ArrayLike, "..."] | ArraySequence | AbstractPolImageModel,
    grid: ImageGrid,
    m: int | Sequence[int],
    *,
    pol: str = "P",
    r_min: RealLike = 0.0,
    r_max: RealLike | None = None,
    x0: RealLike = 0.0,
    y0: RealLike = 0.0,
) -> Complex[Array, "..."]:
    r"""The azimuthal mode coefficients `β_m` of a Stokes image (Palumbo, Wong &
    Prather 2020, ApJ 894, 156, eq. 1):

    `β_m = (1 / I_ann) ∫_{r_min}^{r_max} ∫_0^{2π} P(r, φ) e^{−imφ} r dφ dr`,
    `I_ann = ∫_{r_min}^{r_max} ∫_0^{2π} I(r, φ) r dφ dr`,

    with `P = Q + iU` (`pol="P"`), or V or I in its place (`pol="V"`, `"I"`),
    `(r, φ)` polar coordinates about `(x0, y0)` and `φ` the **position angle east
    of north** (the convention of eht-imaging's m-ring models and of
    [`eqmodels.PolMRingImage`][], whose `β^P_m` it returns for a thin ring). On
    the pixel grid the integrals are sums over the pixels whose centres lie in the
    annulus `r_min ≤ r ≤ r_max` (the image is in Jy/pixel, so each pixel carries
    its area); a pixel exactly at the centre contributes to `m = 0` only.
    `|β_2|` measures how ordered the EVPA pattern is, `arg β_2` its twist
    (EHT M87* Paper VII). Differentiable in the image (and traceable).

    **Arguments:**

    - `stokes`: the planes I, Q, U, V, `(4, ny, nx)`, or a polarimetric image model
      on `grid`.
    - `grid`: the [`eqmodels.ImageGrid`][].
    - `m`: the mode, an integer, or a sequence of them.
    - `pol`: `"P"` (linear polarization, default), `"V"` or `"I"`.
    - `r_min`, `r_max`: the annulus (radians; default the whole image).
    - `x0`, `y0`: its centre (radians; +x east, +y north).

    **Returns:** `β_m`, complex: a scalar for an integer `m`, else one per mode.
    """
    check_order(stokes, grid, "beta_m")
    check_grid(grid)
    stokes = evaluated_on(stokes, grid, "stokes", f"`grid` is {grid!r}.")
    # float32 in, float32 out; anything else in JAX's default float.
    single = input_dtype(stokes) == np.float32
    stokes = stokes_on_grid(stokes, grid)
    stokes = jnp.asarray(stokes, jnp.float32 if single else jnp.result_type(float))
    if pol not in _PLANES:
        raise ValueError(f"`pol` must be one of {tuple(_PLANES)}, got {pol!r}.")
    scalar = isinstance(m, int | np.integer) and not isinstance(m, bool)
    modes = [m] if scalar else list(m) if isinstance(m, Sequence) else None
    if (
        modes is None
        or not modes
        or not all(
            isinstance(k, int | np.integer) and not isinstance(k, bool) for k in modes
        )
    ):
        raise TypeError(
            f"`m` must be an integer or a non-empty sequence of integers, got {m!r}."
        )
    bounds = {}
    for name, x in (("r_min", r_min), ("r_max", r_max), ("x0", x0), ("y0", y0)):
        if x is None:
            continue
        v = host_real(x) if is_concrete(x) else x
        if v is None or (is_concrete(v) and not np.isfinite(v)):
            raise TypeError(f"`{name}` must be a finite real number, got {x!r}.")
        bounds[name] = v
    if r_max is not None and is_concrete(r_max) and not bounds["r_max"] > r_min:
        raise ValueError(
            f"`r_max`={bounds['r_max']} must be > `r_min`={bounds['r_min']} "
            "(radians; the annulus)."
        )
    dx, dy = pixel_offsets(grid, bounds["x0"], bounds["y0"], stokes.dtype)
    r = jnp.sqrt(dx * dx + dy * dy) * grid.psize
    inside = r >= bounds["r_min"]
    if r_max is not None:
        inside = inside & (r <= bounds["r_max"])
    c, s = azimuth_phasor(dx, dy)
    z = c - 1j * s  # e^{−iφ}
    if pol == "P":
        plane = stokes[1] + 1j * stokes[2]
    else:
        plane = stokes[_PLANES[pol]]
    i_ann = jnp.sum(jnp.where(inside, stokes[0], 0.0))
    out = []
    for k in modes:
        k = int(k)
        phase = (z if k >= 0 else jnp.conj(z)) ** abs(k) if k else jnp.ones_like(z)
        out.append(jnp.sum(jnp.where(inside, plane * phase, 0.0)) / i_ann)
    return out[0] if scalar else jnp.stack(out)
