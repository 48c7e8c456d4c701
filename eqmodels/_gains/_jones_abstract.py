"""`AbstractJones`: what station Jones matrices declare, so that any model of them
works with `JonesCorrected`, `with_gains`, `WithGains` and Jones priors."""

import abc

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Int

from .._coherency import (
    adjugate,
    coherency_to_correlations,
    coherency_to_stokes,
    correlations_to_coherency,
    correlations_to_stokes,
    dagger,
    det,
    matmul,
    stokes_to_coherency,
)


class AbstractJones(eqx.Module):
    r"""Base class of station Jones matrices: a model of the 2×2 matrix `J_s`
    each station `s` puts on the sky's coherency,

    `C_obs,ab = J_a C_ab J_bᴴ`,

    `C_ab = [[RR, RL], [LR, LL]]` the circular-basis coherency of the sky's Stokes
    visibilities on the leg from `a` to `b` (`RR = I + V`, `RL = Q + iU`, ...),
    `C_obs` what the station pair's feeds record (in each station's own basis,
    circular or linear). [`eqmodels.StationJones`][] (`J = G D T Φ`: gains,
    leakage, feed basis, field rotation) is eqmodels' own; subclass this for
    another parametrisation.

    A subclass declares:

    - `matrices(stations, time_index)`: `J_a` and `J_b` of every leg, shape
      `(*points, 2, 2, 2)` (`[..., 0, :, :]` is `J_a`), traceable;
    - `station_names`, `feeds` (per station, `"circular"` or `"linear"`; the
      basis of the correlations it produces) and `index_key`, `n_time_slots`
      as [`eqmodels.AbstractGains`][] does.

    With these it works in [`eqmodels.JonesCorrected`][] (any polarimetric data
    term), [`eqmodels.with_gains`][] and [`eqmodels.WithGains`][] (a joint image +
    Jones solve).
    """

    station_names: eqx.AbstractVar[tuple[str, ...]]
    feeds: eqx.AbstractVar[tuple[str, ...]]
    index_key: eqx.AbstractVar[Int[Array, ""]]
    n_time_slots: eqx.AbstractVar[int | None]

    @abc.abstractmethod
    def matrices(
        self,
        stations: Int[ArrayLike, "*points 2"],
        time_index: Int[ArrayLike, " n"],
    ) -> Complex[Array, "*points 2 2 2"]:
        """`J_a` and `J_b` of every leg.

        **Arguments:**

        - `stations`: each leg's station pair `(a, b)`, shape `(*points, 2)`.
        - `time_index`: each row's time slot, shape `(n,)` (`points[0] == n`).

        **Returns:** shape `(*points, 2, 2, 2)`: `[..., 0, :, :]` is `J_a`,
        `[..., 1, :, :]` is `J_b`.
        """

    @property
    def n_stations(self) -> int:
        """Number of stations (columns of the station table)."""
        return len(self.station_names)

    def apply(
        self,
        stokes: Complex[Array, "*points 4"],
        stations: Int[ArrayLike, "*points 2"],
        time_index: Int[ArrayLike, " n"],
    ) -> Complex[Array, "*points 4"]:
        """The correlations the stations record of model Stokes visibilities:
        `C_obs = J_a C J_bᴴ`, in the file's order (RR, LL, RL, LR; XX, YY, XY, YX
        for linear feeds), each station in its own basis. What simulation
        (`observe`) and a Jones-corrected term compute.

        **Arguments:** `stokes` (I, Q, U, V last, `(*points, 4)`), each leg's
        `stations` `(*points, 2)` and each row's `time_index` `(n,)`.
        """
        j = self.matrices(stations, time_index).astype(stokes.dtype)
        c = stokes_to_coherency(stokes)
        return coherency_to_correlations(
            matmul(matmul(j[..., 0, :, :], c), dagger(j[..., 1, :, :]))
        )

    def apply_stokes(
        self,
        stokes: Complex[Array, "*points 4"],
        stations: Int[ArrayLike, "*points 2"],
        time_index: Int[ArrayLike, " n"],
    ) -> Complex[Array, "*points 4"]:
        """The corrupted visibilities as *effective* Stokes visibilities: what an
        ideal instrument with the same feeds would have to see to record
        [`eqmodels.AbstractJones.apply`][]'s correlations
        (`T_aᴴ J_a C J_bᴴ T_b`, as Stokes). How [`eqmodels.JonesCorrected`][]
        hands corrupted visibilities to a polarimetric term, which converts them
        to correlations itself.

        **Arguments:** as `apply`.
        """
        corr = self.apply(stokes, stations, time_index)
        linear = np.asarray([f == "linear" for f in self.feeds])
        if not linear.any():
            return coherency_to_stokes(correlations_to_coherency(corr))
        s = jnp.where(jnp.asarray(stations) >= 0, jnp.asarray(stations), 0)
        return correlations_to_stokes(corr, jnp.asarray(linear)[s])

    def apply_inverse(
        self,
        corr: Complex[Array, "*points 4"],
        stations: Int[ArrayLike, "*points 2"],
        time_index: Int[ArrayLike, " n"],
    ) -> Complex[Array, "*points 4"]:
        """Calibration: the sky's Stokes visibilities from recorded correlations,
        `C = J_a⁻¹ C_obs J_b⁻ᴴ` (eht-imaging's `apply_jones_inverse`, exact
        inverses), the inverse of [`eqmodels.AbstractJones.apply`][].

        **Arguments:** `corr` (file order, `(*points, 4)`), `stations`,
        `time_index` as in `apply`.

        **Returns:** I, Q, U, V, `(*points, 4)`.
        """
        j = self.matrices(stations, time_index).astype(corr.dtype)
        ja, jb = j[..., 0, :, :], j[..., 1, :, :]
        c = correlations_to_coherency(corr)
        c = matmul(matmul(adjugate(ja), c), dagger(adjugate(jb)))
        scale = det(ja) * jnp.conj(det(jb))
        return coherency_to_stokes(c / scale[..., None, None])
