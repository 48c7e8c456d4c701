"""(u, v) coverage."""

import numpy as np

from .._data._visdata import VisData
from .._validation import check_flag
from ._mpl import new_axes


# tab20's colours (`matplotlib.colormaps["tab20"]`, written out so that importing
# the module needs no matplotlib), each with three marker shapes: 60 styles.
_TAB20 = (
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728",
    "#ff9896", "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2",
    "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d", "#17becf", "#9edae5",
)  # fmt: skip
_BASELINE_STYLES = tuple((c, m) for m in ("o", "s", "^") for c in _TAB20)


COLOR_BY = (None, "baseline", "time")


def _check_data(data):
    if not isinstance(data, VisData):
        raise TypeError(
            f"`data` must be an eqmodels.VisData, got {type(data).__name__}."
        )


def plot_uv_coverage(
    data: VisData,
    *,
    ax=None,
    color_by: str | None = "baseline",
    markersize: float = 4.0,
    legend: bool = True,
):
    """The (u, v) coverage: every row at `(u, v)` and its conjugate `(−u, −v)`
    (the same measurement, `V(−u, −v) = V*(u, v)` for a real image), in Gλ, with
    equal axis scales.

    **Arguments:**

    - `data`: an [`eqmodels.VisData`][].
    - `ax`: the matplotlib Axes to draw on (default: a new figure).
    - `color_by`: `"baseline"` (one colour and legend entry per baseline, default),
      `"time"` (a colour bar in hours UTC) or `None` (one colour).
    - `markersize`: the marker size in points.
    - `legend`: with `color_by="baseline"`, add a legend.

    **Returns:** the matplotlib `Axes`.
    """
    _check_data(data)
    if color_by not in COLOR_BY:
        raise ValueError(f"`color_by` must be one of {COLOR_BY}, got {color_by!r}.")
    ax = new_axes(ax, figsize=(5.0, 5.0))
    u = np.asarray(data.u) / 1e9
    v = np.asarray(data.v) / 1e9
    s = markersize**2
    if color_by == "baseline":
        a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
        for k, (i, j) in enumerate(sorted(set(zip(a1.tolist(), a2.tolist())))):
            sel = (a1 == i) & (a2 == j)
            label = f"{data.station_names[i]}-{data.station_names[j]}"
            uu = np.concatenate([u[sel], -u[sel]])
            vv = np.concatenate([v[sel], -v[sel]])
            # 20 colours, then the next marker shape: every baseline its own style
            # (matplotlib's 10-colour cycle repeated from the 11th baseline on).
            color, marker = _BASELINE_STYLES[k % len(_BASELINE_STYLES)]
            ax.scatter(
                uu, vv, s=s, label=label, linewidths=0, color=color, marker=marker
            )
        if check_flag("legend", legend):
            ax.legend(fontsize="x-small", ncols=2, markerscale=1.5, loc="best")
    elif color_by == "time":
        t = np.asarray(data.time)
        pts = ax.scatter(
            np.concatenate([u, -u]),
            np.concatenate([v, -v]),
            c=np.concatenate([t, t]),
            s=s,
            cmap="viridis",
            linewidths=0,
        )
        ax.figure.colorbar(pts, ax=ax).set_label("time (h UTC)")
    else:
        ax.scatter(np.concatenate([u, -u]), np.concatenate([v, -v]), s=s, linewidths=0)
    ax.set_xlabel("u (Gλ)")
    ax.set_ylabel("v (Gλ)")
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_title(f"{data.source}: (u, v) coverage")
    return ax
