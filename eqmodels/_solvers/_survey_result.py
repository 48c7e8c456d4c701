"""What a survey returns: the solutions of its configurations, ranked by χ²."""

import operator
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .._gains._survey import restore_gains
from ._solve import Solution


class SurveyResult(eqx.Module):
    """What [`eqmodels.survey`][] returns.

    - `solutions`: one [`eqmodels.Solution`][] whose leaves carry a leading axis of
      the `n` configurations, in the order given (`solutions.model`,
      `solutions.value`, `solutions.report["cphase"]`, `solutions.steps`, ...).
    - `data_names`: the report keys of the data terms (what `chi2` and `top_set`
      use).
    - `chunk_size`: configurations per device per chunk (as chosen for `"auto"`).
    - `computed_chunks`, `loaded_chunks`: which chunks this call computed and
      which it read back from the checkpoint folder.
    - `gains_tables`: `None`, or, when the configurations held station gains of
      different data sets, each configuration's gains tables (shapes, interval
      bounds, station names, bands). The survey runs such gains padded to one
      shape under placeholder tables (what `solutions.model` and a `callback`
      hold); `result[i]` gives configuration `i`'s gains back as its own.
    """

    solutions: Solution
    data_names: tuple[str, ...] = eqx.field(static=True)
    chunk_size: int = eqx.field(static=True)
    computed_chunks: tuple[int, ...] = eqx.field(static=True)
    loaded_chunks: tuple[int, ...] = eqx.field(static=True)
    gains_tables: tuple | None = eqx.field(static=True, default=None)

    def __len__(self) -> int:
        return int(np.shape(self.solutions.value)[0])

    def __getitem__(self, i: int) -> Solution:
        """The solution of configuration `i` (negative: from the end), its station
        gains, if any, on its own data set's tables."""
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError(
                f"index a survey's result by one configuration (an int), got "
                f"{type(i).__name__}; the whole batch is `result.solutions`."
            ) from None
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"configuration {i} of a survey of {n} configurations.")
        i %= n
        sol = jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, self.solutions)
        if self.gains_tables is None:
            return sol
        model = restore_gains(sol.model, self.gains_tables[i])
        return eqx.tree_at(lambda s: s.model, sol, model, is_leaf=lambda x: x is None)

    def chi2(self, names: Sequence[str] | None = None) -> Float[Array, " n"]:
        """The mean χ² over data terms per configuration (over `names`, default all
        data terms): the figure configurations are ranked by."""
        names = tuple(self.data_names if names is None else names)
        if not names and not self.solutions.report:
            raise ValueError(
                "no data terms to rank by: the objectives report no terms (bare "
                "terms, or callables without `report`). Wrap each term in an "
                "objective, `eqmodels.Objective([term])`, whose report names it, or "
                "rank by `solutions.value`."
            )
        if not names:
            raise ValueError(
                "no data terms to rank by: pass `names` (report keys), e.g. "
                f"`chi2(['cphase', 'logcamp'])`; the keys are "
                f"{tuple(self.solutions.report)}."
            )
        missing = [n for n in names if n not in self.solutions.report]
        if missing:
            raise ValueError(
                f"`names` {missing} are not report keys {tuple(self.solutions.report)}."
            )
        return jnp.mean(jnp.stack([self.solutions.report[n] for n in names]), axis=0)

    def ranking(self, names: Sequence[str] | None = None) -> Int[Array, " n"]:
        """Configuration indices, best (lowest `chi2`) first."""
        return jnp.argsort(self.chi2(names))

    def top_set(
        self, thresholds: float | dict[str, float], names: Sequence[str] | None = None
    ) -> np.ndarray:
        """The "top set": configurations whose χ² are all below thresholds, ranked.

        **Arguments:**

        - `thresholds`: one threshold for every data term, or `{name: threshold}`.
        - `names`: the data terms a scalar threshold applies to (default all).

        **Returns:** indices of the selected configurations, best first (by the
        mean χ² of the data terms among the thresholds' keys; of all data terms if
        there are none).
        """
        if not isinstance(thresholds, dict):
            names = tuple(self.data_names if names is None else names)
            thresholds = {n: float(thresholds) for n in names}
        for n in thresholds:
            if n not in self.solutions.report:
                raise ValueError(
                    f"threshold for {n!r}, which is not a report key "
                    f"{tuple(self.solutions.report)}."
                )
        ok = np.ones(len(self), bool)
        for n, t in thresholds.items():
            ok &= np.asarray(self.solutions.report[n]) <= t
        # Ranked by the data terms' χ² among the thresholds (a regularizer's
        # threshold selects, but its penalty is no χ²), else by all data terms.
        ranked = tuple(n for n in thresholds if n in self.data_names)
        order = np.asarray(self.ranking(ranked or None))
        return order[ok[order]]
