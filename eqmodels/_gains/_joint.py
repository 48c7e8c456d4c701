"""`WithGains`: the objective of a joint image + gain solve, as `solve` and
`survey` take it."""

from collections.abc import Sequence

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PyTree, Scalar

from .._custom_types import RealLike
from .._terms._base import AbstractTerm, as_objective, Objective
from ._corrected import check_same_tables
from ._with_gains import (
    check_gains_class,
    gains_in,
    is_gain_corrected,
    is_gains,
    with_gains,
)


class WithGains(eqx.Module):
    """The objective of a joint image + gain solve: called with the model pair
    `(image_model, gains)`, it puts `gains` into every
    [`eqmodels.GainCorrected`][] term and gain prior of `objective` and evaluates
    that at the image model,

    `WithGains(objective)((image_model, gains)) == with_gains(objective, gains)(image_model)`,

    so that [`eqmodels.solve`][] moves the image and the gains together, any
    solver (L-BFGS, Adam, Gauss-Newton / Levenberg-Marquardt on the residuals):

    ```python
    joint = em.WithGains(objective)
    sol = em.solve(joint, (image_model, gains), max_steps=200)
    image_model, gains = sol.model
    ```

    It composes like a term (`joint + 10 * em.TSV(grid)`, `2 * joint`: still a
    `WithGains`) and reports like its objective (`names`, `report`,
    `value_and_report`). [`eqmodels.survey`][] takes a list of them, also over
    data sets with gains of their own (each configuration's model holding its
    own data set's gains).
    Freeze one side with `params` (a filter per half of the pair): the image
    while the gains settle, `params=(False, em.is_real_float_array)`; the gains,
    `params=(em.is_real_float_array, False)`.
    """

    objective: Objective

    def __init__(self, objective: AbstractTerm):
        """**Arguments:** `objective`, an [`eqmodels.Objective`][] (or one term)
        holding at least one `GainCorrected` term or gain prior: what the gains
        act on.
        """
        if isinstance(objective, WithGains):
            raise TypeError(
                "`objective` is already a WithGains: pass it as it is (or its "
                "`objective`)."
            )
        if not isinstance(objective, AbstractTerm):
            raise TypeError(
                "`objective` must be an `eqmodels.Objective` or a term holding "
                f"station gains, got {type(objective).__name__}."
            )
        if not gains_in(objective):
            raise ValueError(
                "`objective` holds no station gains (no `GainCorrected` term, no "
                "gain prior): there is nothing for the gains to act on. Wrap the "
                "data terms, `em.GainCorrected(term, gains)`, or solve the "
                "objective itself for the image alone."
            )
        self.objective = as_objective(objective)

    @property
    def names(self) -> tuple[str, ...]:
        """The objective's report keys."""
        return self.objective.names

    @property
    def is_data_term(self) -> np.ndarray:
        """Which of the objective's terms are data terms."""
        return self.objective.is_data_term

    @property
    def weights(self) -> Float[Array, " n"]:
        """The objective's weights."""
        return self.objective.weights

    def with_weights(
        self, weights: Float[ArrayLike, " n"] | Sequence[int | RealLike]
    ) -> "WithGains":
        """The same joint objective with other weights (one per term, in
        `self.names` order): a survey over weights."""
        return WithGains(self.objective.with_weights(weights))

    # numpy must defer `array * joint` to `__rmul__`, as for terms.
    __array_ufunc__ = None

    def __add__(self, other) -> "WithGains":
        """`joint + term` (or `+ joint`): the joint objective of the sum."""
        if isinstance(other, WithGains):
            other = other.objective
        if not isinstance(other, AbstractTerm):
            return NotImplemented
        return WithGains(self.objective + other)

    def __radd__(self, other) -> "WithGains":
        if isinstance(other, int | float) and other == 0:
            return self  # `sum([...])` starts from 0
        if not isinstance(other, AbstractTerm):
            return NotImplemented
        return WithGains(other + self.objective)

    def __mul__(self, weight) -> "WithGains":
        """`w * joint`: every weight times `w`."""
        return WithGains(self.objective * weight)

    def __rmul__(self, weight) -> "WithGains":
        return self.__mul__(weight)

    def __truediv__(self, weight) -> "WithGains":
        return WithGains(self.objective / weight)

    def at(self, model: tuple) -> Objective:
        """The objective with `model`'s gains put in (`with_gains`).

        **Arguments:** `model`, the pair `(image_model, gains)`.
        """
        _, gains = _pair(model)
        return with_gains(self.objective, gains)

    def check_model(self, model: PyTree) -> None:
        """Refuse a model that is not a pair `(image_model, gains)`, whose gains
        are of another class than the objective's, or on another station table
        than the gains the objective was built with (a gain prior's tolerances
        and reference station are per column), or index other time slots or
        stations than its `GainCorrected` terms (where the fingerprints are
        concrete, i.e. outside `jit`).
        [`eqmodels.solve`][] and [`eqmodels.survey`][] call it before compiling.
        """
        _, gains = _pair(model)
        check_gains_class(self.objective, gains)
        for node in gains_in(self.objective):
            if node.station_names != gains.station_names:
                raise ValueError(
                    "the model's gains are on the stations "
                    f"{list(gains.station_names)}, the objective's gains (its gain "
                    f"priors and terms) on {list(node.station_names)}: build the "
                    "model's gains from the objective's data set "
                    "(`StationGains.from_data(data)`, or `gains.at(data)`)."
                )
        for node in jax.tree.leaves(self.objective, is_leaf=is_gain_corrected):
            if is_gain_corrected(node):
                check_same_tables(node.term, gains)

    def values(self, model: tuple) -> tuple[Scalar, ...]:
        """Each term's value (unweighted) at `model`, in `self.names` order."""
        return self.at(model).values(model[0])

    def residuals(self, model: tuple) -> Float[Array, " m"]:
        """The objective's residual vector at `model` (`Σ r² = Σ_i w_i T_i`):
        what Gauss-Newton and Levenberg-Marquardt solve on."""
        return self.at(model).residuals(model[0])

    def report(self, model: tuple) -> dict[str, Scalar]:
        """`{name: value}` of every term at `model`."""
        return self.at(model).report(model[0])

    def value_and_report(self, model: tuple) -> tuple[Scalar, dict[str, Scalar]]:
        """`(self(model), self.report(model))` from one evaluation."""
        return self.at(model).value_and_report(model[0])

    def __call__(self, model: tuple) -> Scalar:
        """**Arguments:** `model`, the pair `(image_model, gains)` (an image model
        or an `(ny, nx)` image, and a [`eqmodels.StationGains`][] or other
        [`eqmodels.AbstractGains`][]).

        **Returns:** the objective's value.
        """
        return self.at(model)(model[0])


def _pair(model) -> tuple:
    if (
        isinstance(model, tuple | list)
        and len(model) == 2
        and is_gains(model[0])
        and not is_gains(model[1])
    ):
        raise TypeError(
            "a WithGains objective takes the model pair `(image_model, gains)`, "
            "got `(gains, image_model)`: swap the two."
        )
    if not isinstance(model, tuple | list) or len(model) != 2 or not is_gains(model[1]):
        got = (
            f"a {type(model).__name__} of {len(model)}"
            if isinstance(model, tuple | list)
            else f"a {type(model).__name__}"
        )
        raise TypeError(
            "a WithGains objective takes the model pair `(image_model, gains)` "
            f"(gains a StationGains or other `AbstractGains`, or a StationJones), "
            f"got {got}: solve "
            "`(image_model, em.StationGains.from_data(data))`."
        )
    return model[0], model[1]
