"""Chi² of complex visibilities."""

import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int, Scalar

from .._forward._base import AbstractForwardModel
from .._forward._select import ForwardLike
from .._grid import ImageGrid
from .._numerics import asarray
from .._validation import as_complex, as_real, check_same_shape, is_concrete
from ._base import AbstractDataTerm, n_rows_leaf
from ._common import (
    abs2,
    check_amplitudes,
    check_forward_type,
    check_vis_shape,
    index_key_leaf,
    inverse_variance,
    row_labels,
    term_from_data,
    values_dtype,
)


class VisChi2(AbstractDataTerm):
    """Chi² of complex visibilities (eht-imaging's `'vis'` term):

    `χ² = Σ_k w_k |V̂_k − V_k|² / (2N)`, `w_k = 1/σ_k²`, `N` = number of rows.

    A row with weight exactly 0 contributes exactly 0 (that is how rows are padded);
    `n_rows` keeps the true `N`.
    """

    forward: AbstractForwardModel | None
    vis: Complex[Array, "*points"]
    weight: Float[Array, "*points"]
    n_rows: Int[Array, ""]
    stations: Int[Array, "*points 2"]
    time_index: Int[Array, "*points"]
    index_key: Int[Array, ""]

    report_name = "vis"
    reals_per_row = 2
    row_fields = ("vis", "weight", "stations", "time_index")

    def __init__(
        self,
        forward: AbstractForwardModel,
        vis: ArrayLike,
        sigma: ArrayLike,
        *,
        stations: ArrayLike | None = None,
        time_index: ArrayLike | None = None,
        index_key: int | ArrayLike | None = None,
    ):
        """**Arguments:**

        - `forward`: the forward model (its points are the data's (u, v)).
        - `vis`: observed complex visibilities (Jy), the shape of `forward.u`.
        - `sigma`: thermal noise per visibility (Jy, > 0), same shape.
        - `stations`: each row's station pair `(ant1, ant2)` (indices into the data
          set's station table), shape `(*points, 2)`; default unknown (`-1`).
        - `time_index`: each row's time slot (index into the data set's
          timestamps); default unknown (`-1`).
        - `index_key`: the fingerprint of the tables that `time_index` and
          `stations` point into ([`eqmodels.VisData.index_key`][];
          `from_data` sets it, and [`eqmodels.GainCorrected`][] checks it
          against the gains'); default unknown (`-1`).
        """
        check_forward_type(forward, "VisChi2")
        if np.ndim(forward.u) == 0:
            raise ValueError(
                "`forward` has 0-d points (one scalar u, v): a term needs an axis of "
                "rows; build the forward model with u, v of shape (1,)."
            )
        dtype, ctype = values_dtype(forward)
        vis = as_complex("vis", vis)
        if is_concrete(vis):
            check_amplitudes("vis", np.abs(vis), term="VisChi2", jy=True)
        sigma = as_real("sigma", sigma)
        check_same_shape(("vis", "sigma", "forward.u"), vis, sigma, forward.u)
        self.forward = forward
        self.vis = asarray(vis, ctype)
        self.weight = inverse_variance(sigma, dtype)
        self.n_rows = n_rows_leaf(math.prod(np.shape(vis)))
        self.stations, self.time_index = row_labels(
            stations, time_index, tuple(forward.u.shape)
        )
        self.index_key = index_key_leaf(index_key)

    @classmethod
    def from_data(
        cls, data, grid: ImageGrid, *, forward: ForwardLike = "direct", **forward_kwargs
    ) -> "VisChi2":
        """The term for a `VisData` (or anything with `u`, `v`, `vis`, `sigma`).

        **Arguments:**

        - `data`: the visibilities (e.g. scan-averaged).
        - `grid`: the image grid.
        - `forward`: `"direct"`, `"separable"` or `"nufft"`, a forward-model class
          or a callable `(grid, u, v) -> forward model` (see
          [`eqmodels.make_forward`][]).
        - `**forward_kwargs`: options of the forward model (`pulse`, `eps`, `dtype`).
        """
        return term_from_data(
            cls,
            data,
            "vis",
            grid,
            forward,
            forward_kwargs,
            k=...,
            product="a `VisData`",
        )

    def residuals_from_vis(self, vis: Complex[Array, "*points"]) -> Float[Array, " m"]:
        check_vis_shape(self, vis, self.vis.shape)
        d = vis - self.vis
        s = jnp.sqrt(self.weight / (2 * self.n_rows))
        return jnp.concatenate([(s * d.real).reshape(-1), (s * d.imag).reshape(-1)])

    def chi2_from_vis(self, vis: Complex[Array, "*points"]) -> Scalar:
        check_vis_shape(self, vis, self.vis.shape)
        return jnp.sum(self.weight * abs2(vis - self.vis)) / (2 * self.n_rows)
