"""Lazy matplotlib: the package imports without it; a plot asks for it."""

import importlib


def pyplot():
    """`matplotlib.pyplot`, imported on first use.

    **Raises:** `ImportError` naming the `plot` extra when matplotlib is missing.
    """
    try:
        return importlib.import_module("matplotlib.pyplot")
    except ImportError as e:
        raise ImportError(
            "eqmodels' plots need matplotlib, which is not installed: "
            'install the plot extra with `pip install "eqmodels[plot]"`.'
        ) from e


def new_axes(ax, figsize=(5.0, 4.5)):
    """`ax` itself, or the axes of a new figure when `ax` is None."""
    if ax is None:
        _, ax = pyplot().subplots(figsize=figsize)
        return ax
    if not hasattr(ax, "figure") or not hasattr(ax, "scatter"):
        raise TypeError(f"`ax` must be a matplotlib Axes or None, got {ax!r}.")
    return ax
