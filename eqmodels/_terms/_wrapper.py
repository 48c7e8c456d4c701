"""`AbstractTermWrapper`: a data term that wraps another and changes where its rows
or visibilities come from (station gains applied, rows split over devices, ...)."""

from collections.abc import Sequence

import equinox as eqx
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from .._forward._base import AbstractForwardModel, gather_index
from ._base import AbstractDataTerm
from ._inputs import default_name


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
    - `take_rows` / `pad_rows`: the inner term's rows gathered or padded, and the
      wrapper's own forward model's points with them when it holds one;
    - `sharing()` / `without_forward()` / `forward_path()`: the forward model an
      objective may share, the term without it, and where it sits in the tree,
      wherever the model is held.

    **Where the forward model lives.** Either the wrapper holds it (a `forward`
    field, the inner term built without one, as `GainCorrected` does) or the
    inner term does (a `forward` property returning `self.term.forward`, as
    `ShardedChi2` does). In the second case the wrapper shares only what the
    inner term shares (an inner term that evaluates its own model, see
    `share_forward`, keeps it).

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
    def polarimetric(self) -> bool:  # type: ignore[override]
        """The inner term's declaration."""
        return self.term.polarimetric

    @property
    def reals_per_row(self) -> int | None:  # type: ignore[override]
        """The inner term's declaration (the wrapper's χ² is the inner term's,
        of transformed visibilities)."""
        return self.term.reals_per_row

    @property
    def band_frequency(self) -> float | None:  # type: ignore[override]
        """The inner term's (an [`eqmodels.AtFrequency`][] inside sets it)."""
        return self.term.band_frequency

    @property
    def weight(self) -> Float[Array, " n *values"]:  # type: ignore[override]
        return self.term.weight

    @property
    def n_rows(self) -> Int[Array, ""]:  # type: ignore[override]
        return self.term.n_rows

    def row_paths(self) -> set[tuple[str, ...]]:
        return {("term", *p) for p in self.term.row_paths()}

    def _holds_forward(self) -> bool:
        """Whether the forward model is the wrapper's own (not the inner term's)."""
        return self.term.forward is None and self.forward is not None

    def forward_path(self) -> tuple[str, ...]:
        if self._holds_forward() or self.term.forward is None:
            return ("forward",)
        return ("term", *self.term.forward_path())

    def take_rows(
        self, index: ArrayLike | Sequence[int], *, n_rows: int | None = None
    ) -> "AbstractTermWrapper":
        idx = gather_index(index, self.rows, "index")
        out = eqx.tree_at(
            lambda t: t.term, self, self.term.take_rows(idx, n_rows=n_rows)
        )
        if self._holds_forward():
            out = eqx.tree_at(lambda t: t.forward, out, self.forward.take(idx))
        return out

    def pad_rows(self, length: int) -> "AbstractTermWrapper":
        n = self.rows
        inner = self.term.pad_rows(length)
        if inner is self.term:
            return self
        out = eqx.tree_at(lambda t: t.term, self, inner)
        if self._holds_forward():
            index = np.concatenate([np.arange(n), np.zeros(length - n, np.int64)])
            out = eqx.tree_at(lambda t: t.forward, out, self.forward.take(index))
        return out

    def sharing(self) -> tuple[AbstractForwardModel | None, object]:
        if self.term.forward is not None and self.term.sharing()[0] is None:
            return None, None
        return super().sharing()

    def without_forward(self) -> "AbstractTermWrapper":
        if self.term.forward is not None:
            return eqx.tree_at(lambda t: t.term, self, self.term.without_forward())
        return super().without_forward()
