"""`JonesCorrected`: a polarimetric data term whose model visibilities pass
through station Jones matrices before its arithmetic."""

import equinox as eqx
import numpy as np
from jaxtyping import Array, Complex, Float, Int, Scalar

from .._forward._base import AbstractForwardModel
from .._sharding._mesh import AbstractSharded
from .._terms._base import AbstractDataTerm, from_shared_vis
from .._terms._wrapper import AbstractTermWrapper
from .._validation import is_concrete
from ._corrected import check_same_tables
from ._jones_abstract import AbstractJones


class JonesCorrected(AbstractTermWrapper):
    """A polarimetric data term seen through station Jones matrices:

    `χ²(V̂) = term.χ²(S_eff)`, `S_eff` the Stokes visibilities whose ideal
    correlations are `J_a Ĉ J_bᴴ`

    ([`eqmodels.AbstractJones.apply_stokes`][]) for every leg of every row (its
    station pair and time slot are the inner term's `stations` and
    `time_index`). On a [`eqmodels.CorrelationChi2`][] this compares
    `J_a Ĉ J_bᴴ` with the recorded correlations, the model of eht-imaging's
    simulator; it works for every polarimetric data term that carries those two
    leaves (`PolVisChi2`, `FracPolChi2`, ...: they then see the leakage), the
    way [`eqmodels.GainCorrected`][] applies gains to Stokes I terms. Closure
    traces are invariant: wrapping a [`eqmodels.ClosureTraceChi2`][] changes
    nothing but the cost.

    The wrapper holds the forward model (the inner term none), so inside an
    [`eqmodels.Objective`][] it shares the one batched Stokes transform. The Jones
    module is a leaf: solve it with the image through [`eqmodels.WithGains`][]
    (`with_gains` puts the current matrices in).
    """

    term: AbstractDataTerm
    jones: AbstractJones
    forward: AbstractForwardModel | None

    def __init__(self, term: AbstractDataTerm, jones: AbstractJones):
        """**Arguments:**

        - `term`: a polarimetric data term whose rows carry `stations` and
          `time_index` (e.g. `CorrelationChi2.from_data(data, grid)`).
        - `jones`: [`eqmodels.StationJones`][] (or any
          [`eqmodels.AbstractJones`][]) for the same data set.
        """
        if not isinstance(term, AbstractDataTerm):
            raise TypeError(f"`term` must be a data term, got {type(term).__name__}.")
        if not term.polarimetric:
            raise TypeError(
                f"`term` ({type(term).__name__}) is a Stokes I term: Jones matrices "
                "act on the four correlations; wrap a polarimetric term "
                "(`CorrelationChi2`), or use `GainCorrected` with `StationGains`."
            )
        if isinstance(term, JonesCorrected):
            raise TypeError(
                "`term` is already a JonesCorrected: give its inner term "
                "(`term.term`) and one Jones module."
            )
        if isinstance(term, AbstractSharded):
            raise TypeError(
                f"`term` is a {type(term).__name__}: wrap the other way round, "
                "`ShardedChi2(JonesCorrected(term, jones), mesh)`."
            )
        if not isinstance(jones, AbstractJones):
            raise TypeError(
                f"`jones` must be station Jones matrices, got {type(jones).__name__}"
                "; build them with `StationJones.from_data(data)` (or subclass "
                "`eqmodels.AbstractJones`)."
            )
        for name in ("stations", "time_index"):
            if name not in type(term).row_fields:
                raise TypeError(
                    f"{type(term).__name__} has no `{name}` leaf: Jones matrices need "
                    "each row's station pairs and time slot (declare `stations` and "
                    "`time_index` fields and list them in `row_fields`)."
                )
        st, ti = term.stations, term.time_index
        if is_concrete(st) and is_concrete(ti):
            st, ti = np.asarray(st), np.asarray(ti)
            if st.size and (st.min() < 0 or ti.min() < 0):
                raise ValueError(
                    f"`term` ({type(term).__name__}) has rows with unknown stations or "
                    "time slots (-1): build it with `from_data` from the data set."
                )
            if st.size and st.max() >= jones.n_stations:
                raise ValueError(
                    f"`term` refers to station index {int(st.max())} but `jones` has "
                    f"{jones.n_stations} stations: build them from the same data set."
                )
            check_same_tables(term, jones)
            n_slots = jones.n_time_slots
            if ti.size and n_slots is not None and ti.max() >= n_slots:
                raise ValueError(
                    f"`term` refers to time slot {int(ti.max())} but `jones` covers "
                    f"{n_slots} time slots: build them from the data set the term "
                    "comes from."
                )
            linear = getattr(term, "linear", None)
            if linear is not None and is_concrete(linear) and st.size:
                mine = np.asarray([f == "linear" for f in jones.feeds])[st]
                if np.any(mine != np.asarray(linear)):
                    raise ValueError(
                        "`term` and `jones` disagree on the stations' feeds "
                        "(circular / linear): build both from the same data set."
                    )
        self.forward = term.forward
        self.term = eqx.tree_at(
            lambda t: t.forward, term, None, is_leaf=lambda x: x is None
        )
        self.jones = jones

    @property
    def stations(self) -> Int[Array, "*points 2"]:
        return self.term.stations

    @property
    def time_index(self) -> Int[Array, " n"]:
        return self.term.time_index

    def corrupted(
        self, vis: Complex[Array, "*points 4"]
    ) -> Complex[Array, "*points 4"]:
        """The model Stokes visibilities through the Jones matrices (effective
        Stokes, see [`eqmodels.AbstractJones.apply_stokes`][])."""
        return self.jones.apply_stokes(vis, self.term.stations, self.term.time_index)

    def chi2_from_vis(self, vis: Complex[Array, "*points 4"]) -> Scalar:
        return from_shared_vis(self.term, "chi2_from_vis", self.corrupted(vis))

    def residuals_from_vis(
        self, vis: Complex[Array, "*points 4"]
    ) -> Float[Array, " m"]:
        return from_shared_vis(self.term, "residuals_from_vis", self.corrupted(vis))
