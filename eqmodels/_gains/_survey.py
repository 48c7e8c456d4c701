"""Gains of different data sets in one survey: padded to one shape under one
static table, and given back per configuration.

A `StationGains`' interval table (`bounds`), station names and bands are static
and its arrays are shaped by the data set, so the gains of two days differ in
structure and one `vmap` cannot stack them. None of the static tables enters the
arithmetic of eqmodels' own gain terms (the rows reach their gains through the
integer leaves `stations`, `time_index` and `slot_interval`; the priors weigh by
`present`), so `survey` pads every configuration's gains
to the largest `(intervals, stations, time slots)` with gain 1 where nothing
looks (`log_amp = phase = 0`, absent, no row pointing there), under placeholder
tables common to all, and puts each configuration's own tables back on its
solution (`SurveyResult[i]`).
"""

import functools
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np

from .._numerics import asarray
from ._abstract import AbstractGains
from ._corrected import GainCorrected
from ._priors import AbstractGainPrior, GainAmplitudePrior
from ._station_gains import StationGains
from ._with_gains import gains_in


def _signature(g: AbstractGains) -> tuple:
    if not isinstance(g, StationGains):
        # A user's gains: their tree (static fields included) and array shapes.
        leaves, treedef = jax.tree.flatten(g)
        return (type(g), treedef, tuple(np.shape(x) for x in leaves))
    return (
        np.shape(g.log_amp),
        np.shape(g.slot_interval),
        g.bounds,
        g.station_names,
        g.interval_freqs,
    )


def _is_station_gains(x) -> bool:
    return isinstance(x, StationGains)


def _table(g: StationGains) -> tuple:
    """What padding drops and `restore_gains` needs: shapes and static tables."""
    k, s = np.shape(g.log_amp)
    return (
        k,
        s,
        int(np.shape(g.slot_interval)[0]),
        np.ndim(g.slot_interval),
        g.bounds,
        g.station_names,
        g.interval_freqs,
    )


def stack_gains(
    configurations: Sequence[Any], model_index: int | None = 1
) -> tuple[list, tuple | None]:
    """Pad the gains of every configuration to one shape and table.

    **Arguments:**

    - `configurations`: one pytree per configuration (`survey`'s `(objective,
      model, solver)`).
    - `model_index`: where the model sits in each configuration (`None`: the
      configurations are the items themselves, no tables are kept).

    **Returns:** `(configurations, tables)`. When the gains at each position
    already agree in shape and table across configurations (or their number
    differs, which the survey's structure check reports), the configurations
    unchanged and `tables` `None`. Otherwise the padded configurations and, per
    configuration, the tables of the gains in its model (in `jax.tree.leaves`
    order), for `restore_gains`. Gains held by anything but a `GainCorrected`
    term, a gain prior declaring `reads_gain_tables = False` or (loosely) the
    model are refused: a module of a user's may read the tables.
    """
    configurations = list(configurations)
    found = [gains_in(c) for c in configurations]
    if not found or not found[0] or len({len(f) for f in found}) != 1:
        return configurations, None
    if all(len({_signature(f[j]) for f in found}) == 1 for j in range(len(found[0]))):
        return configurations, None
    for i, f in enumerate(found):
        for g in f:
            if not isinstance(g, StationGains):
                where = f"item {i}" if model_index is None else f"configuration {i}"
                name = type(g).__name__
                raise ValueError(
                    f"{where} holds gains of class `{name}`, and the gains of the "
                    "configurations differ in structure (solution intervals, "
                    "station table or array shapes). A survey pads such gains to "
                    "one table, which needs the per-interval layout of a "
                    "`StationGains` (`log_amp`, `phase`, `present`, "
                    f"`slot_interval`, `bounds`); `{name}` does not have it. Give "
                    "every configuration gains of one structure, or survey each "
                    "data set's configurations on their own."
                )
    every = [g for f in found for g in f]
    k = max(g.n_intervals for g in every)
    s = max(g.n_stations for g in every)
    t = max(int(np.shape(g.slot_interval)[0]) for g in every)
    per_station = any(np.ndim(g.slot_interval) == 2 for g in every)
    done: dict[int, StationGains] = {}  # one padding per gains object

    def gains(g):
        if id(g) not in done:
            done[id(g)] = _padded(g, k, s, t, per_station)
        return done[id(g)]

    def pad(x, where, loose):
        if isinstance(x, GainCorrected):
            return _replace(x, gains=gains(x.gains))
        if isinstance(x, GainAmplitudePrior):
            # Padded stations' log-amplitudes stay 0: any finite tolerance gives
            # them residual 0 (and gradient 0).
            tol = [
                asarray(
                    np.pad(np.asarray(a), (0, s - np.shape(a)[0]), constant_values=1.0)
                )
                for a in (x.tol_above, x.tol_below)
            ]
            return _replace(x, gains=gains(x.gains), tol_above=tol[0], tol_below=tol[1])
        if isinstance(x, AbstractGainPrior) and not type(x).reads_gain_tables:
            return _replace(x, gains=gains(x.gains))
        if isinstance(x, StationGains) and loose:
            return gains(x)
        if isinstance(x, StationGains | AbstractGainPrior):
            holder = (
                f"`{type(x).__name__}`"
                if isinstance(x, AbstractGainPrior)
                else "a module of your own (not a `GainCorrected` term or gain prior)"
            )
            raise ValueError(
                f"{where} holds station gains in {holder}. A survey over data sets "
                "whose gains differ in solution intervals or station table pads "
                "them to one shape under placeholder tables (`bounds`, station "
                "names, bands), which only eqmodels' own gain terms are known not "
                "to read. For a gain prior of your own whose arithmetic reads only "
                "the gains' arrays, set the class attribute `reads_gain_tables = "
                "False`; otherwise survey each data set's configurations on their "
                "own."
            )
        return x

    is_node = lambda x: isinstance(  # noqa: E731
        x, StationGains | AbstractGainPrior | GainCorrected
    )
    padded = []
    for i, c in enumerate(configurations):
        parts = [c] if model_index is None else list(c)
        parts = [
            jax.tree.map(
                functools.partial(
                    pad,
                    where=f"item {i}" if model_index is None else f"configuration {i}",
                    loose=j == model_index,
                ),
                part,
                is_leaf=is_node,
            )
            for j, part in enumerate(parts)
        ]
        padded.append(parts[0] if model_index is None else type(c)(parts))
    if model_index is None:
        return padded, None
    tables = tuple(
        tuple(_table(g) for g in gains_in(c[model_index])) for c in configurations
    )
    return padded, tables


def _replace(module, **fields):
    names = tuple(fields)
    return eqx.tree_at(
        lambda m: tuple(getattr(m, n) for n in names),
        module,
        tuple(fields[n] for n in names),
    )


def _padded(g: StationGains, k: int, s: int, t: int, per_station: bool):
    ki, si = g.n_intervals, g.n_stations
    slots = np.asarray(g.slot_interval)
    ti = slots.shape[0]
    if per_station:
        if slots.ndim == 1:
            slots = np.broadcast_to(slots[:, None], (ti, si))
        slots = np.pad(slots, ((0, t - ti), (0, s - si)), constant_values=-1)
    else:
        slots = np.pad(slots, (0, t - ti))  # interval 0: no row looks there
    grow = ((0, k - ki), (0, s - si))
    return StationGains(
        np.pad(np.asarray(g.log_amp), grow),
        np.pad(np.asarray(g.phase), grow),
        slots,
        [(float(i), float(i)) for i in range(k)],
        [f"#{j}" for j in range(s)],
        np.pad(np.asarray(g.present), grow),
        g.index_key,
        g.mjd,
    )


def restore_gains(model, tables: tuple):
    """`model` (one configuration's solution) with each padded `StationGains` cut
    back to its own shape and given back its own tables."""
    it = iter(tables)

    def back(x):
        if not _is_station_gains(x):
            return x
        k, s, t, ndim, bounds, names, freqs = next(it)
        slots = np.asarray(x.slot_interval)[:t]
        if slots.ndim == 2:  # per station (padded so, if given so or not)
            slots = slots[:, :s] if ndim == 2 else slots[:, 0]
        # On the host: an eager slice of a device array compiles per shape.
        return StationGains(
            np.asarray(x.log_amp)[:k, :s],
            np.asarray(x.phase)[:k, :s],
            slots,
            bounds,
            names,
            np.asarray(x.present)[:k, :s],
            x.index_key,
            x.mjd,
            freqs,
        )

    return jax.tree.map(back, model, is_leaf=_is_station_gains)
