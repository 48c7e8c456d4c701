"""Checks of solver settings at construction."""

import numpy as np


def positive_int(name, value, minimum=1):
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or value < minimum
    ):
        raise ValueError(f"`{name}` must be an int ≥ {minimum}, got {value!r}.")
    return int(value)


def real(name, value, *, low=0.0, high=None, low_open=False, high_open=True):
    """`value` as a float, checked to be a real number in the interval from `low` to
    `high` (open or closed at each end; `high=None`: no upper bound)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise TypeError(f"`{name}` must be a real number, got {value!r}.")
    v = float(value)
    above = v > low if low_open else v >= low
    below = high is None or (v < high if high_open else v <= high)
    if not (np.isfinite(v) and above and below):
        lo = f"{'(' if low_open else '['}{low:g}"
        hi = "inf)" if high is None else f"{high:g}{')' if high_open else ']'}"
        raise ValueError(
            f"`{name}` must be a finite number in {lo}, {hi}, got {value!r}."
        )
    return v
