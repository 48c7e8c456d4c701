"""Chi² of fractional-polarization visibilities `m̆ = P / I` (eht-imaging's `m`)."""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int, Scalar

from .._forward._base import AbstractForwardModel
from .._forward._select import ForwardLike
from .._grid import ImageGrid
from ._base import AbstractDataTerm
from ._common import index_key_leaf, live_rows, row_labels
from ._pol_common import (
    check_stokes_vis,
    complex_chi2,
    complex_residuals,
    complex_rows,
    polarization,
    stokes_rows,
    term_from_rows,
)


class FracPolChi2(AbstractDataTerm):
    """Chi² of fractional-polarization visibilities (eht-imaging's `'m'` term):

    `χ² = Σ_k w_k |m̂_k − m̆_k|² / (2N)`, `m̂ = (Q̂ + iÛ) / Î`, `w_k = 1/σ_k²`,

    with `N` the number of rows. The ratio `m̆ = P / I` of a baseline is
    insensitive to station gain amplitudes (equal in R and L). A polarimetric term:
    evaluated on a polarimetric image model or a `(4, ny, nx)` array (I, Q, U, V),
    whose I, Q and U planes it uses. A row of weight exactly 0 contributes exactly
    0 to the value and gradient, whatever its model `Î` (that is how rows are
    padded); `n_rows` keeps the true `N`. A live row where `Î = 0` gives a
    non-finite value, as in eht-imaging.

    [`eqmodels.FracPolChi2.from_data`][] takes eht-imaging's rows: each baseline
    and its conjugate (see there), so that its value is eht-imaging's `polchisq`.
    """

    forward: AbstractForwardModel | None
    m: Complex[Array, " n"]
    weight: Float[Array, " n"]
    n_rows: Int[Array, ""]
    stations: Int[Array, "n 2"]
    time_index: Int[Array, " n"]
    index_key: Int[Array, ""]

    polarimetric = True
    report_name = "m"
    reals_per_row = 2
    row_fields = ("m", "weight", "stations", "time_index")

    def __init__(
        self,
        forward: AbstractForwardModel,
        m: ArrayLike,
        sigma: ArrayLike,
        *,
        stations: ArrayLike | None = None,
        time_index: ArrayLike | None = None,
        index_key: int | ArrayLike | None = None,
    ):
        """**Arguments:**

        - `forward`: the forward model at the rows' `(u, v)`, points of shape `(n,)`.
        - `m`: observed fractional polarization `m̆ = (Q + iU) / I` per row
          (dimensionless, finite), shape `(n,)`.
        - `sigma`: its noise per real and imaginary part (> 0; for eht-imaging's
          data `sqrt((σ_Q² + σ_U² + σ_I² |m̆|²) / |I|²)`), shape `(n,)`.
        - `stations`, `time_index`: each row's station pair and time slot (see
          [`eqmodels.VisChi2`][]); default unknown (`-1`).
        - `index_key`: the fingerprint of the tables that `time_index` and
          `stations` point into; default unknown (`-1`).
        """
        self.m, self.weight, self.n_rows = complex_rows(
            forward, "FracPolChi2", "m", m, sigma, jy=False
        )
        self.forward = forward
        self.stations, self.time_index = row_labels(
            stations, time_index, tuple(forward.u.shape)
        )
        self.index_key = index_key_leaf(index_key)

    @classmethod
    def from_data(
        cls, data, grid: ImageGrid, *, forward: ForwardLike = "direct", **forward_kwargs
    ) -> "FracPolChi2":
        """The term for a polarimetric data set (a `PolVisData`, from
        `eqmodels.load_uvfits(path, polarization="full")`), with eht-imaging's rows
        (its `chisqdata_m`): from `data.stokes()`, `m̆ = (Q + iU) / I` and
        `σ = sqrt((σ_Q² + σ_U² + σ_I² |m̆|²) / |I|²)` on every row, **followed by
        each row's conjugate baseline** (`(−u, −v)`, `m̆ = (Q* + iU*) / I*` and its
        σ, the station pair swapped), so `N` is twice the number of rows used. Rows
        whose I, Q or U is flagged (NaN), or whose I is 0, are dropped
        (eht-imaging keeps them, and its χ² is then NaN).

        **Arguments:**

        - `data`: the polarimetric visibilities (e.g. scan-averaged).
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`, a forward-model class
          or a callable `(grid, u, v) -> forward model` (see
          [`eqmodels.make_forward`][]).
        - `**forward_kwargs`: options of the forward model (`pulse`, `eps`, `dtype`).
        """
        rows = stokes_rows(data, cls.__name__, conjugates=True)
        s, sig = rows["stokes"], rows["sigma"]
        with np.errstate(divide="ignore", invalid="ignore"):
            values = (s[:, 1] + 1j * s[:, 2]) / s[:, 0]
            sigma = np.sqrt(
                (sig[:, 1] ** 2 + sig[:, 2] ** 2 + (sig[:, 0] * np.abs(values)) ** 2)
                / np.abs(s[:, 0]) ** 2
            )
        return term_from_rows(
            cls,
            rows,
            values,
            sigma,
            grid,
            forward,
            forward_kwargs,
            needs="I, Q and U (and I != 0)",
        )

    def _model(self, vis: Complex[Array, "n 4"]) -> Complex[Array, " n"]:
        check_stokes_vis(self, vis, self.m.shape[0])
        # Dead (zero-weight) rows divide by 1: no NaN from a model Î of 0 there,
        # in the value or the gradient.
        live = live_rows(self.weight)
        return jnp.where(live, polarization(vis), 0) / jnp.where(live, vis[:, 0], 1)

    def residuals_from_vis(self, vis: Complex[Array, "n 4"]) -> Float[Array, " m"]:
        return complex_residuals(self.weight, self.n_rows, self._model(vis), self.m)

    def chi2_from_vis(self, vis: Complex[Array, "n 4"]) -> Scalar:
        return complex_chi2(self.weight, self.n_rows, self._model(vis), self.m)
