"""Total variation of the complex linear polarization `P = Q + iU`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._numerics import safe_sqrt
from .._validation import check_flag, check_grid
from ._base import AbstractRegularizer, as_dtype, check_eps, norm_args
from ._pol_inputs import check_stokes_shape
from ._smoothness import forward_differences


def _scaled_norm(parts):
    """`sqrt(Σ_k a_k²)` scaled by `max_k |a_k|` (as `safe_hypot`, for any number
    of parts): float32 squares below ~1e-19 flush to 0, scaled ones do not; value
    and derivative 0 where every part is 0 (or subnormal), NaN where one is."""
    m = jnp.abs(parts[0])
    for a in parts[1:]:
        m = jnp.maximum(m, jnp.abs(a))
    # Degree-1 homogeneous in the parts: the scale carries no gradient.
    m = jax.lax.stop_gradient(m)
    ok = ~(m < jnp.finfo(m.dtype).tiny)
    ms = jnp.where(ok, m, 1.0)
    q = jnp.where(ok, sum((a / ms) ** 2 for a in parts), 1.0)
    return jnp.where(ok, ms * jnp.sqrt(q), 0.0)


class PolTV(AbstractRegularizer):
    r"""Total variation of the linear polarization `P = Q + iU`, eht-imaging's
    `'ptv'` with the sign flipped:

    `R = Σ_{i,j} sqrt(|P[i+1,j] − P[i,j]|² + |P[i,j+1] − P[i,j]|² + ε)`,

    `|ΔP|² = ΔQ² + ΔU²`, the image being zero beyond its last row and column (as
    [`eqmodels.TV`][]); divided by `F·p/b` (the target **Stokes I** flux, as
    eht-imaging's, pixel size, beam) when `normalise=True`.

    The square root is NaN-safe: where its argument is exactly 0 (no
    polarization, or a flat patch, with `ε = 0`) the derivative is 0, so the
    gradient is finite for every `ε >= 0`. `ε = 0` (the default) reproduces
    eht-imaging's values.
    """

    report_name = "ptv"
    polarimetric = True

    grid: ImageGrid
    flux: Float[Array, ""] | None
    beam: Float[Array, ""] | None
    eps: float = eqx.field(static=True)
    normalise: bool = eqx.field(static=True)

    def __init__(
        self,
        grid: ImageGrid,
        *,
        eps: float = 0.0,
        flux: RealLike | None = None,
        beam: RealLike | None = None,
        normalise: bool = False,
    ):
        """**Arguments:**

        - `grid`: the image grid (`p = grid.psize`).
        - `eps`: smoothing `ε >= 0` (Jy²/pixel²).
        - `flux`, `beam`: `F` (Jy, Stokes I) and `b` (radians, e.g.
          `beam_from_uv(u, v)`); needed when `normalise=True`.
        - `normalise`: divide by `F·p/b`.
        """
        self.grid = check_grid(grid)
        self.eps = check_eps(eps)
        self.normalise = check_flag("normalise", normalise)
        self.flux, self.beam = norm_args(self.normalise, flux, beam)

    def penalty(self, stokes: Float[Array, "4 ny nx"]) -> Scalar:
        check_stokes_shape(stokes, "PolTV", self.grid.shape)
        dq_row, dq_col = forward_differences(stokes[1])
        du_row, du_col = forward_differences(stokes[2])
        parts = (dq_row, du_row, dq_col, du_col)
        if stokes.dtype == jnp.float32 and self.eps < np.finfo(np.float32).tiny:
            # As `TV`: float32 squares of faint differences flush to 0; scaled,
            # they keep their value and derivative.
            out = jnp.sum(_scaled_norm(parts))
        else:
            out = jnp.sum(safe_sqrt(sum(a * a for a in parts) + self.eps))
        if not self.normalise:
            return out
        norm = as_dtype(self.flux, stokes) * self.grid.psize
        return out / (norm / as_dtype(self.beam, stokes))
