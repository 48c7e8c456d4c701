"""`GainCorrected`: a data term whose model visibilities pass through station
gains before its arithmetic."""

import equinox as eqx
import numpy as np
from jaxtyping import Array, Complex, Float, Int, Scalar

from .._forward._base import AbstractForwardModel
from .._sharding._mesh import AbstractSharded
from .._terms._base import AbstractDataTerm, from_shared_vis
from .._terms._wrapper import AbstractTermWrapper
from .._validation import is_concrete
from ._abstract import AbstractGains
from ._jones_abstract import AbstractJones


class GainCorrected(AbstractTermWrapper):
    """A data term seen through station gains:

    `χ²(V̂) = term.χ²(g_a conj(g_b) V̂_ab)`

    for every leg of every row (its station pair and time slot are the inner
    term's `stations` and `time_index`). Works for every data term (built-in or a
    user's that carries those two leaves) and every forward model; the wrapper
    holds the forward model and the inner term holds none, so inside an
    [`eqmodels.Objective`][] it shares a transform like any other term. Closure
    phases and closure amplitudes are gain-invariant: wrapping them changes
    nothing but the cost.

    The gains are a leaf: differentiate through them (a joint image + gain
    solve, see [`eqmodels.with_gains`][]) or freeze them with a filter.
    """

    term: AbstractDataTerm
    gains: AbstractGains
    forward: AbstractForwardModel | None

    def __init__(self, term: AbstractDataTerm, gains: AbstractGains):
        """**Arguments:**

        - `term`: a data term whose rows carry `stations` (each leg's station pair)
          and `time_index` (each row's time slot), e.g. built with `from_data`.
        - `gains`: [`eqmodels.StationGains`][] (or any
          [`eqmodels.AbstractGains`][]) for the same data set (same station table
          and time slots; carry gains to other data with
          [`eqmodels.StationGains.at`][]).
        """
        if not isinstance(term, AbstractDataTerm):
            raise TypeError(f"`term` must be a data term, got {type(term).__name__}.")
        if term.polarimetric:
            raise TypeError(
                f"`term` is a polarimetric term ({type(term).__name__}): "
                "`GainCorrected` applies one complex gain per station (Stokes I); "
                "station gains and leakage of polarimetric data are Jones matrices, "
                "`eqmodels.StationJones`."
            )
        if isinstance(term, GainCorrected):
            raise TypeError(
                "`term` is already a GainCorrected: give its inner term "
                "(`term.term`) and one set of gains."
            )
        if isinstance(term, AbstractSharded):
            raise TypeError(
                f"`term` is a {type(term).__name__}: wrap the other way round, "
                "`ShardedChi2(GainCorrected(term, gains), mesh)` (the rows, gains "
                "applied, are what is split over the devices)."
            )
        if not isinstance(gains, AbstractGains):
            raise TypeError(
                f"`gains` must be station gains, got {type(gains).__name__}; build "
                "them with `StationGains.from_data(data, interval)` (or subclass "
                "`eqmodels.AbstractGains`)."
            )
        for name in ("stations", "time_index"):
            if name not in type(term).row_fields:
                raise TypeError(
                    f"{type(term).__name__} has no `{name}` leaf: gains need each "
                    "row's station pairs and time slot (declare `stations` and "
                    "`time_index` fields and list them in `row_fields`, as the "
                    "built-in terms do)."
                )
        st, ti = term.stations, term.time_index
        if is_concrete(st) and is_concrete(ti):
            st, ti = np.asarray(st), np.asarray(ti)
            if st.size and (st.min() < 0 or ti.min() < 0):
                raise ValueError(
                    f"`term` ({type(term).__name__}) has rows with unknown stations or "
                    "time slots (-1): build it with `from_data` from a VisData or its "
                    "products, so every row knows its stations and time slot."
                )
            if st.size and st.max() >= gains.n_stations:
                raise ValueError(
                    f"`term` refers to station index {int(st.max())} but `gains` has "
                    f"{gains.n_stations} stations: build the gains from the same data "
                    "set (`StationGains.from_data(data)`) or carry them with "
                    "`gains.at(data)`."
                )
            check_same_tables(term, gains)
            n_slots = gains.n_time_slots
            if ti.size and n_slots is not None and ti.max() >= n_slots:
                raise ValueError(
                    f"`term` refers to time slot {int(ti.max())} but `gains` covers "
                    f"{n_slots} time slots: build the gains from the data set the term "
                    "comes from, or carry them with `gains.at(data)`."
                )
        self.forward = term.forward
        self.term = eqx.tree_at(
            lambda t: t.forward, term, None, is_leaf=lambda x: x is None
        )
        self.gains = gains

    @property
    def stations(self) -> Int[Array, "*points 2"]:
        return self.term.stations

    @property
    def time_index(self) -> Int[Array, " n"]:
        return self.term.time_index

    def corrupted(self, vis: Complex[Array, "*points"]) -> Complex[Array, "*points"]:
        """The model visibilities with the gains applied."""
        return self.gains.apply(vis, self.term.stations, self.term.time_index)

    def chi2_from_vis(self, vis: Complex[Array, "*points"]) -> Scalar:
        return from_shared_vis(self.term, "chi2_from_vis", self.corrupted(vis))

    def residuals_from_vis(self, vis: Complex[Array, "*points"]) -> Float[Array, " m"]:
        return from_shared_vis(self.term, "residuals_from_vis", self.corrupted(vis))


def check_same_tables(term, gains: AbstractGains | AbstractJones) -> None:
    """Refuse a term and gains whose `index_key`s (fingerprints of the time slots
    and station table their indices point into) are both known and differ. Checked
    on concrete keys only (under `jit` they are traced)."""
    theirs, ours = getattr(term, "index_key", None), gains.index_key
    if theirs is None or not (is_concrete(theirs) and is_concrete(ours)):
        return
    theirs, ours = np.asarray(theirs), np.asarray(ours)
    if np.any((theirs >= 0) & (ours >= 0) & (theirs != ours)):
        raise ValueError(
            f"`term` ({type(term).__name__}) and `gains` index the time slots or "
            "stations of different data sets (their `index_key` fingerprints "
            "differ), e.g. a term built from a time selection, another band or an "
            "averaging of the data the gains were built on, or from data whose "
            "stations are listed in another order: its `time_index` and `stations` "
            "would pick other intervals' and stations' gains. Carry the gains to the "
            "term's data with `gains.at(data)`, or build the gains from it."
        )
