"""`AbstractTermWrapper`: a data term that wraps another and changes where its rows
or visibilities come from (station gains applied, rows split over devices, ...)."""

import equinox as eqx
from jaxtyping import Array, Float, Int

from ._base import AbstractDataTerm, default_name


class AbstractTermWrapper(AbstractDataTerm):
    """Base class of data terms that wrap another data term, `term`: they keep its
    arithmetic (`chi2_from_vis`, `residuals_from_vis`) and change where its rows or
    visibilities come from, as [`eqmodels.GainCorrected`][] (model visibilities
    through station gains) and [`eqmodels.ShardedChi2`][] (rows split over a device
    mesh) do.

    A wrapper is a data term itself: it composes into an [`eqmodels.Objective`][],
    shares transforms, pads and stacks like any other. What it inherits here is the
    public interface the objective and the sharing code use:

    - `weight`, `n_rows`: the inner term's (padding rows included);
    - `report_name`: the inner term's report key (`amp`, `vis`, ...);
    - `row_paths()`: the inner term's per-row leaves, under `("term", ...)` (the
      rows live in the inner term; override it if the wrapper holds per-row leaves
      of its own);
    - `sharing()` / `without_forward()`: as for every data term (the forward model
      is `self.forward`, held by the wrapper or delegated to the inner term;
      override both when the inner term holds it).

    Subclasses hold `term` and `forward` (a field or a property) and implement
    `chi2_from_vis` / `residuals_from_vis` (usually by transforming the
    visibilities and calling the inner term's). The wrapper's own `row_fields`
    stay `("weight",)`: `weight` is the inner term's, reached through `term`.
    """

    term: eqx.AbstractVar[AbstractDataTerm]

    @property
    def report_name(self) -> str:  # type: ignore[override]
        """The inner term's report name."""
        return default_name(self.term)

    @property
    def weight(self) -> Float[Array, " n *values"]:  # type: ignore[override]
        return self.term.weight

    @property
    def n_rows(self) -> Int[Array, ""]:  # type: ignore[override]
        return self.term.n_rows

    def row_paths(self) -> set[tuple[str, ...]]:
        return {("term", *p) for p in self.term.row_paths()}
