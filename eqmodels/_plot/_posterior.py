"""Posterior plots: trace plots and corner plots of the draws, the posterior
mean and standard-deviation images, and posterior-predictive checks of closures."""

from collections.abc import Sequence

import numpy as np

from .._posterior._draws import check_samples, leaf_names
from .._posterior._image_summary import ImageSummary
from .._posterior._ppc import ClosurePPC
from .._posterior._sample import Samples
from ._image import plot_image
from ._mpl import pyplot


def _components(samples: Samples) -> dict[str, np.ndarray]:
    """Every scalar coordinate of the draws, `(chains, samples)` each: `name`
    for a scalar leaf, `name[i]` for element `i` of a leaf flattened; and `lp`."""
    out = {}
    for name, leaf in leaf_names(samples.draws):
        x = np.asarray(leaf)
        c, s = x.shape[:2]
        flat = x.reshape(c, s, -1)
        if x.ndim == 2:
            out[name] = flat[..., 0]
        else:
            for i in range(flat.shape[-1]):
                out[f"{name}[{i}]"] = flat[..., i]
    out["lp"] = np.asarray(samples.log_density)
    return out


def _select(samples, names, max_panels: int, what: str) -> dict[str, np.ndarray]:
    check_samples(samples)
    comps = _components(samples)
    if names is None:
        chosen = [n for n in comps if n != "lp"]
        if len(chosen) > max_panels:
            raise ValueError(
                f"the draws have {len(chosen)} coordinates, more than {max_panels} "
                f"for one {what}: choose some with `names=` (a variable such as "
                f"{chosen[0].split('[')[0]!r}, or elements such as {chosen[0]!r})."
            )
    else:
        if isinstance(names, str):
            names = [names]
        chosen = []
        for n in names:
            if n in comps:
                chosen.append(n)
                continue
            parts = [k for k in comps if k.split("[")[0] == n]
            if not parts:
                raise ValueError(
                    f"`names` has {n!r}, which is not a variable of the draws: "
                    f"choose from {sorted({k.split('[')[0] for k in comps})} (or "
                    "elements such as 'params[0]')."
                )
            chosen += parts
        if not chosen:
            raise ValueError("`names` is empty: name at least one variable.")
        if len(chosen) > max_panels:
            raise ValueError(
                f"`names` selects {len(chosen)} coordinates, more than {max_panels} "
                f"for one {what}: name fewer (or elements such as {chosen[0]!r})."
            )
    return {n: comps[n] for n in chosen}


def plot_trace(
    samples: Samples,
    names: str | Sequence[str] | None = None,
    *,
    max_panels: int = 12,
):
    """Trace plots: for each chosen coordinate, its value against the draw index
    (one line per chain) and its histogram per chain side by side. Chains that
    mix trace the same band and give the same histogram.

    **Arguments:**

    - `samples`: [`eqmodels.Samples`][].
    - `names`: variables as [`eqmodels.to_arviz`][] names them (`"radius"`,
      `"params"`: all its elements), elements (`"params[3]"`, of the leaf
      flattened), or `"lp"` (the sampled log density). Default: every
      coordinate, if there are at most `max_panels`.
    - `max_panels`: the most rows drawn (an image's pixels are too many: name a
      few).

    **Returns:** the matplotlib `Figure`: rows of `(trace, histogram)` axes,
    `figure.axes[2 i]` the trace of the `i`-th coordinate.
    """
    comps = _select(samples, names, max_panels, "trace plot")
    plt = pyplot()
    k = len(comps)
    fig, axes = plt.subplots(
        k, 2, figsize=(8.0, 1.8 * k + 0.4), squeeze=False, width_ratios=(3, 1)
    )
    for row, (name, x) in zip(axes, comps.items()):
        for ci, chain in enumerate(x):
            colour = f"C{ci % 10}"
            row[0].plot(chain, color=colour, linewidth=0.7, label=f"chain {ci}")
            row[1].hist(chain, bins=30, histtype="step", color=colour)
        row[0].set_ylabel(name)
        row[1].set_yticks([])
    axes[-1, 0].set_xlabel("draw")
    axes[0, 0].set_title(f"traces ({x.shape[0]} chains × {x.shape[1]} draws)")
    axes[0, 1].set_title("histograms")
    fig.tight_layout()
    return fig


def plot_corner(
    samples: Samples,
    names: str | Sequence[str] | None = None,
    *,
    bins: int = 20,
    truths: dict[str, float] | None = None,
    max_panels: int = 8,
):
    """A corner plot: each chosen coordinate's marginal histogram on the diagonal
    and the joint 2-D histograms of every pair below it (all chains pooled).
    Drawn with matplotlib alone (no extra package).

    **Arguments:**

    - `samples`: [`eqmodels.Samples`][].
    - `names`: as [`eqmodels.plot_trace`][] (default: every coordinate, at most
      `max_panels`).
    - `bins`: histogram bins per axis.
    - `truths`: reference values to mark, `{coordinate name: value}` (e.g. a
      simulation's truth), drawn as lines.
    - `max_panels`: the most coordinates drawn.

    **Returns:** the matplotlib `Figure` with a `k × k` grid of axes
    (`figure.axes[i * k + j]` is row `i`, column `j`; those above the diagonal
    are hidden).
    """
    comps = _select(samples, names, max_panels, "corner plot")
    if isinstance(bins, bool) or not isinstance(bins, int | np.integer) or bins < 2:
        raise ValueError(f"`bins` must be an int ≥ 2, got {bins!r}.")
    truths = {} if truths is None else dict(truths)
    unknown = sorted(set(truths) - set(comps))
    if unknown:
        raise ValueError(
            f"`truths` names {unknown}, which are not among the plotted "
            f"coordinates {list(comps)}."
        )
    plt = pyplot()
    names = list(comps)
    flat = {n: np.ravel(x) for n, x in comps.items()}
    k = len(names)
    fig, axes = plt.subplots(
        k, k, figsize=(2.0 * k + 0.5, 2.0 * k + 0.5), squeeze=False
    )
    for i, ni in enumerate(names):
        for j, nj in enumerate(names):
            ax = axes[i, j]
            if j > i:
                ax.set_visible(False)
                continue
            if i == j:
                ax.hist(flat[ni], bins=bins, histtype="step", color="k")
                ax.set_yticks([])
                if ni in truths:
                    ax.axvline(truths[ni], color="tab:blue")
            else:
                ax.hist2d(flat[nj], flat[ni], bins=bins, cmap="Greys")
                if nj in truths:
                    ax.axvline(truths[nj], color="tab:blue")
                if ni in truths:
                    ax.axhline(truths[ni], color="tab:blue")
            if i == k - 1:
                ax.set_xlabel(nj)
            else:
                ax.set_xticklabels([])
            if j == 0 and i > 0:
                ax.set_ylabel(ni)
            elif j > 0 and i != j:
                ax.set_yticklabels([])
    fig.tight_layout()
    return fig


def plot_image_summary(
    summary: ImageSummary,
    grid=None,
    *,
    units: str = "Jy/uas2",
    freq: float | None = None,
    panel_size: float = 4.0,
):
    """The posterior mean image and the per-pixel standard deviation side by side,
    each with its own colour bar (drawn as [`eqmodels.plot_image`][] does).

    **Arguments:**

    - `summary`: [`eqmodels.ImageSummary`][] (from [`eqmodels.image_summary`][])
      of a Stokes I model.
    - `grid`: the image grid (default: the summary's).
    - `units`, `freq`: as [`eqmodels.plot_image`][].
    - `panel_size`: width of one panel in inches.

    **Returns:** the matplotlib `Figure`; `figure.axes[0]` is the mean and
    `figure.axes[1]` the standard deviation (the colour bars follow).
    """
    if not isinstance(summary, ImageSummary):
        raise TypeError(
            "`summary` must be eqmodels.ImageSummary (from `eqmodels.image_summary`), "
            f"got {type(summary).__name__}."
        )
    if np.ndim(summary.mean) != 2:
        raise ValueError(
            f"`summary` is of images of shape {np.shape(summary.mean)}: this plot "
            "draws one `(ny, nx)` plane (a polarimetric summary: plot "
            "`summary.mean[0]` and `summary.std[0]` with `plot_images`)."
        )
    grid = summary.grid if grid is None else grid
    if grid is None:
        raise TypeError("`grid` is required: the summary holds no image grid.")
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(2 * panel_size + 1.0, panel_size))
    plot_image(
        summary.mean,
        grid,
        ax=axes[0],
        units=units,
        freq=freq,
        title=f"posterior mean ({summary.num_draws} draws)",
    )
    plot_image(
        summary.std,
        grid,
        ax=axes[1],
        units=units,
        freq=freq,
        title="posterior standard deviation",
        cmap="viridis",
        vmin=0.0,
    )
    fig.tight_layout()
    return fig


def plot_ppc(ppc: ClosurePPC, *, interval: float = 0.9):
    """A posterior-predictive check of closures in three panels:

    1. the observed closure quantities against time, over the replicated data's
       central `interval` (grey bars; for closure phases the replicated values
       are wrapped to within π of the observed one before the quantiles);
    2. each closure's p-value against time (near 0: the data are further from
       the model than its noise allows);
    3. the realized discrepancies, `chi2_replicated` against `chi2_observed` per
       draw, with the line `y = x` and the overall p-value (the fraction of
       points above the line).

    **Arguments:**

    - `ppc`: [`eqmodels.ClosurePPC`][] (from [`eqmodels.closure_ppc`][]).
    - `interval`: the central probability of the grey bars, in (0, 1).

    **Returns:** the matplotlib `Figure` (`figure.axes`: the three panels).
    """
    if not isinstance(ppc, ClosurePPC):
        raise TypeError(
            "`ppc` must be eqmodels.ClosurePPC (from `eqmodels.closure_ppc`), got "
            f"{type(ppc).__name__}."
        )
    if not 0 < interval < 1:
        raise ValueError(f"`interval` must be in (0, 1), got {interval!r}.")
    obs = np.asarray(ppc.observed)
    rep = np.asarray(ppc.replicated)
    if ppc.kind == "cphase":
        rep = obs + np.angle(np.exp(1j * (rep - obs)))
        scale, label = 180.0 / np.pi, "closure phase (deg)"
    else:
        scale, label = 1.0, "log closure amplitude"
    lo, hi = np.quantile(rep, [(1 - interval) / 2, (1 + interval) / 2], axis=0)
    t = np.asarray(ppc.time)
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15.0, 4.0))
    axes[0].vlines(t, lo * scale, hi * scale, color="0.7", linewidth=2.0)
    axes[0].plot(t, obs * scale, "o", markersize=3, color="tab:red")
    axes[0].set_xlabel("time (h UTC)")
    axes[0].set_ylabel(label)
    axes[0].set_title(
        f"observed (red) and replicated {100 * interval:g} % ({obs.size} closures)"
    )
    axes[1].axhspan(0.0, 0.05, color="0.9", zorder=0)
    axes[1].plot(t, ppc.p_values, "o", markersize=3, color="tab:blue")
    axes[1].set_ylim(-0.02, 1.02)
    axes[1].set_xlabel("time (h UTC)")
    axes[1].set_ylabel("p-value")
    axes[1].set_title(f"per-closure p-values ({ppc.kind})")
    c_obs, c_rep = np.asarray(ppc.chi2_observed), np.asarray(ppc.chi2_replicated)
    axes[2].plot(c_obs, c_rep, ".", markersize=3, color="tab:blue")
    top = float(max(c_obs.max(), c_rep.max()))
    bottom = float(min(c_obs.min(), c_rep.min()))
    axes[2].plot([bottom, top], [bottom, top], color="0.4", linewidth=0.8)
    axes[2].set_xlabel("χ² of the data (per draw)")
    axes[2].set_ylabel("χ² of the replication")
    axes[2].set_title(f"realized discrepancies: p = {ppc.p_value:.3g}")
    fig.tight_layout()
    return fig
