"""`AbstractGains`: what station gains declare, so that any model of them works
with `GainCorrected`, `with_gains`, `WithGains` and gain priors."""

import abc

import equinox as eqx
from jaxtyping import Array, ArrayLike, Complex, Int


class AbstractGains(eqx.Module):
    r"""Base class of station gains: a model of the complex factor

    `V̂_ab → g_a · conj(g_b) · V̂_ab`

    that a leg from station `a` to station `b` in a row of time slot `t` puts on
    the model visibilities (the *forward* corruption, true sky → measured data).
    [`eqmodels.StationGains`][] (one complex gain per solution interval and
    station) is eqmodels' own; subclass this for another parametrisation (one gain
    per station for the whole track, amplitudes only, a polynomial in time, ...).

    A subclass declares:

    - `factor(stations, time_index)`: `g_a conj(g_b)` for every leg, traceable
      (under `jit`, `vmap` and `grad`: the parameters are the module's float
      array leaves).
    - `station_names` (a tuple of str, usually a static field): the data set's
      station table, which the rows' `stations` index.
    - `index_key` (an integer 0-d array leaf, `-1` when unknown): the fingerprint
      of the data set's time slots and station table
      ([`eqmodels.VisData.index_key`][]) that the gains' indices follow;
      [`eqmodels.GainCorrected`][] and [`eqmodels.with_gains`][] refuse a term
      whose key differs.
    - `n_time_slots` (an int, or `None` for gains that do not depend on time):
      how many of the data set's time slots (`VisData.timestamps()`, what a
      row's `time_index` points into) the gains cover; `GainCorrected` refuses a
      term whose rows point beyond.

    With these, a user's gains work in [`eqmodels.GainCorrected`][] (any data
    term, any forward model), [`eqmodels.with_gains`][] and
    [`eqmodels.WithGains`][] (a joint solve with any solver), gain priors of the
    user's own ([`eqmodels.AbstractGainPrior`][]) and a [`eqmodels.survey`][]
    whose configurations' gains have one structure (the same tree and array
    shapes). What reads `StationGains`' per-interval tables is refused with a
    message naming the class: the built-in priors, and a survey that pads the
    gains of data sets with different solution intervals to one table.
    """

    station_names: eqx.AbstractVar[tuple[str, ...]]
    index_key: eqx.AbstractVar[Int[Array, ""]]
    n_time_slots: eqx.AbstractVar[int | None]

    @abc.abstractmethod
    def factor(
        self,
        stations: Int[ArrayLike, "*points 2"],
        time_index: Int[ArrayLike, " n"],
    ) -> Complex[Array, "*points"]:
        """`g_a · conj(g_b)` for every leg.

        **Arguments:**

        - `stations`: each leg's station pair `(a, b)` (columns of
          `station_names`), shape `(*points, 2)`.
        - `time_index`: each row's time slot, shape `(n,)` (`points[0] == n`).

        **Returns:** the complex factor, shape `points`.
        """

    @property
    def n_stations(self) -> int:
        """Number of stations (columns of the station table)."""
        return len(self.station_names)

    def apply(
        self,
        vis: Complex[Array, "*points"],
        stations: Int[ArrayLike, "*points 2"],
        time_index: Int[ArrayLike, " n"],
    ) -> Complex[Array, "*points"]:
        """The corrupted model visibilities `g_a conj(g_b) V̂_ab`
        (`vis * self.factor(stations, time_index)`).

        **Arguments:** `vis` (shaped like the points), each leg's `stations`
        `(*points, 2)` and each row's `time_index` `(n,)`.
        """
        f = self.factor(stations, time_index)
        return vis * f.astype(vis.dtype)
