"""Leakage D-terms per station in the complex plane."""

from collections.abc import Mapping, Sequence

import numpy as np

from .._gains._station_jones import StationJones
from .._validation import check_flag
from ._mpl import new_axes


# tab10's colours, written out so that importing the module needs no matplotlib.
_TAB10 = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
_MARKERS = {"R": "o", "L": "x"}


def dterm_table(dterms) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """D-terms per station as `{station: (d_R, d_L)}`, each a 1-d complex numpy
    array (one value per leakage interval), from any of the forms
    [`eqmodels.plot_dterms`][] takes."""
    if isinstance(dterms, StationJones):
        d = np.asarray(dterms.dterms())  # (kd, s, 2)
        present = np.asarray(dterms.dterm_present)  # (kd, s)
        return {
            name: (d[present[:, s], s, 0], d[present[:, s], s, 1])
            for s, name in enumerate(dterms.station_names)
            if present[:, s].any()
        }
    to_dict = getattr(dterms, "to_dict", None)
    if callable(to_dict) and not isinstance(dterms, Mapping):
        dterms = to_dict()
    if not isinstance(dterms, Mapping):
        raise TypeError(
            "`dterms` must be a StationJones, a dict {station: (d_R, d_L)}, or an "
            f"object with a `.to_dict()` returning one; got {type(dterms).__name__}."
        )
    out = {}
    for name, pair in dterms.items():
        try:
            d_r, d_l = pair
        except (TypeError, ValueError):
            raise ValueError(
                f"`dterms[{name!r}]` must be a pair (d_R, d_L) (complex numbers, or "
                f"arrays with one value per interval), got {pair!r}."
            ) from None
        d_r = np.atleast_1d(np.asarray(d_r, dtype=complex)).ravel()
        d_l = np.atleast_1d(np.asarray(d_l, dtype=complex)).ravel()
        if not (np.all(np.isfinite(d_r)) and np.all(np.isfinite(d_l))):
            raise ValueError(f"`dterms[{name!r}]` has non-finite D-terms.")
        out[str(name)] = (d_r, d_l)
    return out


def plot_dterms(
    dterms,
    ax=None,
    *,
    stations: Sequence[str] | None = None,
    title: str | None = None,
    markersize: float | int = 40.0,
    legend: bool = True,
):
    """Leakage D-terms per station in the complex plane: `d_R` as circles, `d_L`
    as crosses, one colour per station, one point per leakage interval (one for
    a D-term per track).

    **Arguments:**

    - `dterms`: an [`eqmodels.StationJones`][] (its D-terms, where each station
      has data), a dict `{station: (d_R, d_L)}` (complex numbers, or arrays with
      one value per interval), or an object with a `.to_dict()` returning such a
      dict (e.g. a D-term table).
    - `ax`: the matplotlib Axes to draw on (default: a new figure).
    - `stations`: which stations, in this order (default: all, as given).
    - `title`: the panel title.
    - `markersize`: the markers' area in points².
    - `legend`: a legend of the stations' colours and the two feeds' markers.

    **Returns:** the matplotlib `Axes`; each station's R and L points are one
    `PathCollection` each, whose `get_gid()` is `"<station>:R"` or `"<station>:L"`
    and whose offsets are `(Re d, Im d)`.
    """
    table = dterm_table(dterms)
    legend = check_flag("legend", legend)
    if stations is not None:
        if isinstance(stations, str):
            raise TypeError(
                f"`stations` must be a list of station names, got the string "
                f"{stations!r}."
            )
        missing = [s for s in stations if s not in table]
        if missing:
            raise ValueError(
                f"`stations` names {missing}, which have no D-terms here; the "
                f"D-terms are of {list(table)}."
            )
        table = {s: table[s] for s in stations}
    ax = new_axes(ax, figsize=(5.0, 4.6))
    from matplotlib.lines import Line2D

    handles = []
    for k, (name, (d_r, d_l)) in enumerate(table.items()):
        color = _TAB10[k % len(_TAB10)]
        for feed, d in (("R", d_r), ("L", d_l)):
            ax.scatter(
                d.real, d.imag, s=markersize, marker=_MARKERS[feed], color=color,
                gid=f"{name}:{feed}", zorder=3,
            )  # fmt: skip
        handles.append(Line2D([], [], color=color, marker="s", ls="", label=name))
    ax.axhline(0.0, color="0.6", lw=0.8, zorder=1)
    ax.axvline(0.0, color="0.6", lw=0.8, zorder=1)
    # Symmetric limits with some room: D-terms are compared by their distance
    # from 0, on equal scales.
    values = [np.concatenate(pair) for pair in table.values()]
    values = np.concatenate(values) if values else np.zeros(1)
    r = max(float(np.max(np.abs(values.real), initial=0.0)),
            float(np.max(np.abs(values.imag), initial=0.0)))  # fmt: skip
    r = 1.15 * r if r > 0 else 0.1
    ax.set_xlim(-r, r)
    ax.set_ylim(-r, r)
    ax.set_aspect("equal")
    ax.set_xlabel("Re D")
    ax.set_ylabel("Im D")
    if title is not None:
        ax.set_title(title)
    if legend and table:
        for feed in ("R", "L"):
            handles.append(
                Line2D([], [], color="0.2", marker=_MARKERS[feed], ls="",
                       label=f"D_{feed}")
            )  # fmt: skip
        ax.legend(handles=handles, fontsize="small", loc="best")
    return ax
