"""`with_gains`: put the current gains into every gain-corrected term and gain
prior of a tree (how a joint image + gain solve evaluates its objective)."""

import jax

from ._abstract import AbstractGains
from ._corrected import check_same_tables, GainCorrected
from ._jones_abstract import AbstractJones
from ._jones_corrected import JonesCorrected


def with_gains(tree, gains: AbstractGains | AbstractJones):
    """`tree` (a term, an objective, any PyTree) with every gains module inside it
    replaced by `gains`: how a joint image + gain solve puts its current gains into
    the objective (`with_gains(objective, gains)(image)`).

    **Arguments:** `tree`, any PyTree; `gains`, an [`eqmodels.AbstractGains`][]
    (e.g. a [`eqmodels.StationGains`][]) or station Jones matrices (an
    [`eqmodels.AbstractJones`][], e.g. [`eqmodels.StationJones`][]) of the class
    of the gains in `tree`.

    Like [`eqmodels.GainCorrected`][], it refuses gains whose `index_key` differs
    from that of a gain-corrected term in `tree` (checked where both are concrete,
    i.e. outside `jit`).
    """
    if not is_gains(gains):
        raise TypeError(
            "`gains` must be station gains (a StationGains, or a subclass of "
            "`eqmodels.AbstractGains`) or station Jones matrices (a StationJones), "
            f"got {type(gains).__name__}."
        )
    check_gains_class(tree, gains)
    for node in jax.tree_util.tree_leaves(tree, is_leaf=is_gain_corrected):
        if is_gain_corrected(node):
            check_same_tables(node.term, gains)
    return jax.tree_util.tree_map(
        lambda x: gains if is_gains(x) else x, tree, is_leaf=is_gains
    )


def check_gains_class(tree, gains: AbstractGains | AbstractJones) -> None:
    """Refuse `gains` of another class than the gains inside `tree` (the terms
    and priors built on one kind of gains read that kind's parameters)."""
    kinds = sorted({type(g).__name__ for g in gains_in(tree)} - {type(gains).__name__})
    if kinds:
        raise TypeError(
            f"`gains` is a {type(gains).__name__}, but the objective holds gains of "
            f"class {', '.join(kinds)}: the terms and priors built on one kind of "
            "gains read that kind's parameters. Give gains of the class the "
            "objective was built with."
        )


def is_gains(x) -> bool:
    """Whether `x` is a gains module, station gains or Jones matrices (an
    `is_leaf` for tree walks)."""
    return isinstance(x, AbstractGains | AbstractJones)


def is_gain_corrected(x) -> bool:
    """Whether `x` is a `GainCorrected` or `JonesCorrected` term (an `is_leaf`
    for tree walks)."""
    return isinstance(x, GainCorrected | JonesCorrected)


def gains_in(tree) -> list[AbstractGains | AbstractJones]:
    """Every gains module in `tree`, in `jax.tree.leaves` order."""
    return [x for x in jax.tree_util.tree_leaves(tree, is_leaf=is_gains) if is_gains(x)]
