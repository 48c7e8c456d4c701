"""Chi² of circular-polarization visibilities `V` (eht-imaging's `vvis`)."""

import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int, Scalar

from .._forward._base import AbstractForwardModel
from .._forward._select import ForwardLike
from .._grid import ImageGrid
from ._base import AbstractDataTerm
from ._common import index_key_leaf, row_labels
from ._pol_common import (
    check_stokes_vis,
    complex_chi2,
    complex_residuals,
    complex_rows,
    stokes_rows,
    term_from_rows,
)


class StokesVChi2(AbstractDataTerm):
    """Chi² of Stokes V visibilities (eht-imaging's `'vvis'` term):

    `χ² = Σ_k w_k |V̂_k − V_k|² / (2N)`, `w_k = 1/σ_k²`,

    with `N` the number of rows. A polarimetric term: evaluated on a polarimetric
    image model or a `(4, ny, nx)` array (I, Q, U, V), whose V plane it uses. A row
    of weight exactly 0 contributes exactly 0 (that is how rows are padded);
    `n_rows` keeps the true `N`.
    """

    forward: AbstractForwardModel | None
    vvis: Complex[Array, " n"]
    weight: Float[Array, " n"]
    n_rows: Int[Array, ""]
    stations: Int[Array, "n 2"]
    time_index: Int[Array, " n"]
    index_key: Int[Array, ""]

    polarimetric = True
    report_name = "vvis"
    reals_per_row = 2
    row_fields = ("vvis", "weight", "stations", "time_index")

    def __init__(
        self,
        forward: AbstractForwardModel,
        vvis: ArrayLike,
        sigma: ArrayLike,
        *,
        stations: ArrayLike | None = None,
        time_index: ArrayLike | None = None,
        index_key: int | ArrayLike | None = None,
    ):
        """**Arguments:**

        - `forward`: the forward model at the rows' `(u, v)`, points of shape `(n,)`.
        - `vvis`: observed Stokes V visibilities (Jy, finite), shape `(n,)`.
        - `sigma`: their thermal noise per real and imaginary part (Jy, > 0; for
          eht-imaging's data `σ_V = ½ sqrt(σ_RR² + σ_LL²)`), shape `(n,)`.
        - `stations`, `time_index`: each row's station pair and time slot (see
          [`eqmodels.VisChi2`][]); default unknown (`-1`).
        - `index_key`: the fingerprint of the tables that `time_index` and
          `stations` point into; default unknown (`-1`).
        """
        self.vvis, self.weight, self.n_rows = complex_rows(
            forward, "StokesVChi2", "vvis", vvis, sigma, jy=True
        )
        self.forward = forward
        self.stations, self.time_index = row_labels(
            stations, time_index, tuple(forward.u.shape)
        )
        self.index_key = index_key_leaf(index_key)

    @classmethod
    def from_data(
        cls, data, grid: ImageGrid, *, forward: ForwardLike = "direct", **forward_kwargs
    ) -> "StokesVChi2":
        """The term for a polarimetric data set (a `PolVisData`, from
        `eqmodels.load_uvfits(path, polarization="full")`), with eht-imaging's rows
        (its `chisqdata_vvis`): V and σ_V from `data.stokes()`, one row per data
        row (no conjugate baselines, unlike `pvis` and `m`). Rows whose V is
        flagged (NaN: RR or LL missing) are dropped (eht-imaging keeps them, and
        its χ² is then NaN).

        **Arguments:**

        - `data`: the polarimetric visibilities (e.g. scan-averaged).
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`, a forward-model class
          or a callable `(grid, u, v) -> forward model` (see
          [`eqmodels.make_forward`][]).
        - `**forward_kwargs`: options of the forward model (`pulse`, `eps`, `dtype`).
        """
        rows = stokes_rows(data, cls.__name__, conjugates=False)
        values = rows["stokes"][:, 3]
        sigma = np.asarray(rows["sigma"][:, 3])
        return term_from_rows(
            cls, rows, values, sigma, grid, forward, forward_kwargs, needs="V"
        )

    def residuals_from_vis(self, vis: Complex[Array, "n 4"]) -> Float[Array, " m"]:
        check_stokes_vis(self, vis, self.vvis.shape[0])
        return complex_residuals(self.weight, self.n_rows, vis[:, 3], self.vvis)

    def chi2_from_vis(self, vis: Complex[Array, "n 4"]) -> Scalar:
        check_stokes_vis(self, vis, self.vvis.shape[0])
        return complex_chi2(self.weight, self.n_rows, vis[:, 3], self.vvis)
