"""Regularizers of the circular polarization, the Stokes V plane: sparsity (L1, L2),
smoothness (TV, TSV) and its total flux."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Scalar

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._terms._inputs import ImageLike
from .._validation import check_flag, check_grid, check_radians
from ._base import AbstractRegularizer, as_dtype, check_eps, optional_scalar
from ._pol_inputs import abs_vflux, check_stokes_shape, stokes_of, vflux_arg
from ._smoothness import forward_differences, TSV, TV
from ._sparsity import L1


def _beam_arg(beam, normalise: bool):
    beam = optional_scalar(
        "beam", beam, normalise, "when normalise=True (e.g. `beam_from_uv(u, v)`)"
    )
    if beam is not None:
        check_radians("beam", beam)
    return beam


class StokesVL1(AbstractRegularizer):
    r"""L1 norm of Stokes V, eht-imaging's `'l1v'` with the sign flipped:

    `R = Σ_p |V_p|`, divided by `|F_V|` (the target total Stokes V flux) when
    `normalise=True`. (Its derivative at `V_p = 0` is taken as 0.)
    """

    report_name = "l1v"
    polarimetric = True

    vflux: Float[Array, ""] | None
    normalise: bool = eqx.field(static=True)

    def __init__(self, *, vflux: RealLike | None = None, normalise: bool = False):
        """**Arguments:**

        - `vflux`: target total Stokes V flux `F_V` (Jy, either sign, non-zero);
          needed when `normalise=True`.
        - `normalise`: divide by `|F_V|`.
        """
        self.normalise = check_flag("normalise", normalise)
        self.vflux = vflux_arg(vflux, self.normalise)

    def penalty(self, stokes: Float[Array, "4 ny nx"]) -> Scalar:
        check_stokes_shape(stokes, "StokesVL1")
        out = L1().penalty(stokes[3])
        return out / abs_vflux(self.vflux, stokes) if self.normalise else out


class StokesVL2(AbstractRegularizer):
    r"""Squared L2 norm of Stokes V, eht-imaging's `'l2v'` with the sign flipped:

    `R = Σ_p V_p²`, divided by `F_V²` (the target total Stokes V flux, squared)
    when `normalise=True`. A sum of squares: `residuals` gives `V` (divided by
    `|F_V|`).
    """

    report_name = "l2v"
    polarimetric = True

    vflux: Float[Array, ""] | None
    normalise: bool = eqx.field(static=True)

    def __init__(self, *, vflux: RealLike | None = None, normalise: bool = False):
        """**Arguments:**

        - `vflux`: target total Stokes V flux `F_V` (Jy, either sign, non-zero);
          needed when `normalise=True`.
        - `normalise`: divide by `F_V²`.
        """
        self.normalise = check_flag("normalise", normalise)
        self.vflux = vflux_arg(vflux, self.normalise)

    def penalty(self, stokes: Float[Array, "4 ny nx"]) -> Scalar:
        check_stokes_shape(stokes, "StokesVL2")
        v = stokes[3]
        out = jnp.sum(v * v)
        if not self.normalise:
            return out
        f = abs_vflux(self.vflux, stokes)
        return out / (f * f)

    def residuals(self, image: ImageLike) -> Float[Array, " m"]:
        """The V pixels (divided by `|F_V|` when normalised): the penalty is their
        sum of squares.

        **Arguments:** `image`, a `(4, ny, nx)` array or a polarimetric image model.
        """
        stokes = stokes_of(self, image)
        check_stokes_shape(stokes, "StokesVL2")
        r = stokes[3].reshape(-1)
        return r / abs_vflux(self.vflux, stokes) if self.normalise else r


class StokesVTV(AbstractRegularizer):
    r"""Total variation of Stokes V, eht-imaging's `'vtv'` with the sign flipped:

    `R = Σ_{i,j} sqrt((V[i+1,j] − V[i,j])² + (V[i,j+1] − V[i,j])² + ε)`,

    the image being zero beyond its last row and column (as [`eqmodels.TV`][],
    NaN-safe at `ε = 0`); divided by `|F_V|·p/b` (target Stokes V flux, pixel
    size, beam) when `normalise=True`. `ε = 0` (the default) is eht-imaging's
    default `epsilon`.
    """

    report_name = "vtv"
    polarimetric = True

    grid: ImageGrid
    vflux: Float[Array, ""] | None
    beam: Float[Array, ""] | None
    eps: float = eqx.field(static=True)
    normalise: bool = eqx.field(static=True)

    def __init__(
        self,
        grid: ImageGrid,
        *,
        eps: float = 0.0,
        vflux: RealLike | None = None,
        beam: RealLike | None = None,
        normalise: bool = False,
    ):
        """**Arguments:**

        - `grid`: the image grid (`p = grid.psize`).
        - `eps`: smoothing `ε >= 0` (Jy²/pixel²).
        - `vflux`, `beam`: `F_V` (Jy, either sign, non-zero) and `b` (radians);
          needed when `normalise=True`.
        - `normalise`: divide by `|F_V|·p/b`.
        """
        self.grid = check_grid(grid)
        self.eps = check_eps(eps)
        self.normalise = check_flag("normalise", normalise)
        self.vflux = vflux_arg(vflux, self.normalise)
        self.beam = _beam_arg(beam, self.normalise)

    def penalty(self, stokes: Float[Array, "4 ny nx"]) -> Scalar:
        check_stokes_shape(stokes, "StokesVTV", self.grid.shape)
        out = TV(self.grid, eps=self.eps).penalty(stokes[3])
        if not self.normalise:
            return out
        norm = abs_vflux(self.vflux, stokes) * self.grid.psize
        return out / (norm / as_dtype(self.beam, stokes))


class StokesVTSV(AbstractRegularizer):
    r"""Total squared variation of Stokes V, eht-imaging's `'vtv2'` with the sign
    flipped:

    `R = Σ_{i,j} (V[i+1,j] − V[i,j])² + (V[i,j+1] − V[i,j])²`,

    the image being zero beyond its last row and column; divided by
    `p⁴ F_V² / b⁴` when `normalise=True`. A sum of squares: `residuals` gives
    the differences (divided by `p² |F_V| / b²`).
    """

    report_name = "vtv2"
    polarimetric = True

    grid: ImageGrid
    vflux: Float[Array, ""] | None
    beam: Float[Array, ""] | None
    normalise: bool = eqx.field(static=True)

    def __init__(
        self,
        grid: ImageGrid,
        *,
        vflux: RealLike | None = None,
        beam: RealLike | None = None,
        normalise: bool = False,
    ):
        """**Arguments:**

        - `grid`: the image grid (`p = grid.psize`).
        - `vflux`, `beam`: `F_V` (Jy, either sign, non-zero) and `b` (radians);
          needed when `normalise=True`.
        - `normalise`: divide by `p⁴ F_V² / b⁴`.
        """
        self.grid = check_grid(grid)
        self.normalise = check_flag("normalise", normalise)
        self.vflux = vflux_arg(vflux, self.normalise)
        self.beam = _beam_arg(beam, self.normalise)

    def _norm(self, like):
        """`p² |F_V| / b²`: the square root of the normalisation."""
        pb = self.grid.psize / as_dtype(self.beam, like)
        return pb * pb * abs_vflux(self.vflux, like)

    def penalty(self, stokes: Float[Array, "4 ny nx"]) -> Scalar:
        check_stokes_shape(stokes, "StokesVTSV", self.grid.shape)
        out = TSV(self.grid).penalty(stokes[3])
        if not self.normalise:
            return out
        n = self._norm(stokes)
        return out / (n * n)

    def residuals(self, image: ImageLike) -> Float[Array, " m"]:
        """The differences of V (divided by `p² |F_V| / b²` when normalised): the
        penalty is their sum of squares.

        **Arguments:** `image`, a `(4, ny, nx)` array or a polarimetric image model.
        """
        stokes = stokes_of(self, image)
        check_stokes_shape(stokes, "StokesVTSV", self.grid.shape)
        d_row, d_col = forward_differences(stokes[3])
        r = jnp.concatenate([d_row.reshape(-1), d_col.reshape(-1)])
        return r / self._norm(stokes) if self.normalise else r


class StokesVFlux(AbstractRegularizer):
    r"""Total Stokes V flux penalty, eht-imaging's `'vflux'` with the sign flipped:

    `R = (Σ_p V_p − F_V)²`, divided by `F_V²` when `normalise=True`. A square:
    `residuals` gives `[Σ V − F_V]` (divided by `|F_V|`).
    """

    report_name = "vflux"
    polarimetric = True

    vflux: Float[Array, ""]
    normalise: bool = eqx.field(static=True)

    def __init__(self, vflux: RealLike, *, normalise: bool = False):
        """**Arguments:**

        - `vflux`: the target total Stokes V flux `F_V` (Jy, either sign; 0 only
          without normalisation).
        - `normalise`: divide by `F_V²`.
        """
        self.normalise = check_flag("normalise", normalise)
        self.vflux = vflux_arg(vflux, self.normalise, required=True)

    def _diff(self, stokes):
        return jnp.sum(stokes[3]) - as_dtype(self.vflux, stokes)

    def penalty(self, stokes: Float[Array, "4 ny nx"]) -> Scalar:
        check_stokes_shape(stokes, "StokesVFlux")
        d = self._diff(stokes)
        if not self.normalise:
            return d * d
        f = abs_vflux(self.vflux, stokes)
        return d * d / (f * f)

    def residuals(self, image: ImageLike) -> Float[Array, " 1"]:
        """`[Σ V − F_V]` (divided by `|F_V|` when normalised): the penalty is its
        square.

        **Arguments:** `image`, a `(4, ny, nx)` array or a polarimetric image model.
        """
        stokes = stokes_of(self, image)
        check_stokes_shape(stokes, "StokesVFlux")
        d = self._diff(stokes).reshape(1)
        return d / abs_vflux(self.vflux, stokes) if self.normalise else d
