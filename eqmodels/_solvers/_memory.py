"""One memory model for chunk sizes (Jacobian chunks, survey chunks).

A program run over chunks of `c` (Jacobian rows, survey configurations) needs
about `m0 + m1·c` bytes of temporary memory. `m0`, `m1` come from XLA's memory
analysis of the program compiled for two chunk sizes (no execution), and the
chunk chosen is the largest whose modelled memory fits a budget.
"""

from collections.abc import Callable

import numpy as np


def compiled_bytes(compiled) -> int | None:
    """Temporary plus output bytes of a compiled program (`None` where the backend
    has no memory analysis)."""
    analysis = compiled.memory_analysis()
    if analysis is None:
        return None
    return int(analysis.temp_size_in_bytes + analysis.output_size_in_bytes)


def linear_model(
    bytes_for: Callable[[int], int | None], c1: int, c2: int
) -> tuple[float, float]:
    """`(m0, m1)` in bytes with `bytes_for(c) ≈ m0 + m1·c`, from chunks `c1 < c2`
    (NaN where there is no memory analysis)."""
    b1, b2 = bytes_for(c1), bytes_for(c2)
    if b1 is None or b2 is None:
        return float("nan"), float("nan")
    m1 = max((b2 - b1) / (c2 - c1), 1.0)
    return max(b1 - m1 * c1, 0.0), m1


def largest_chunk(
    bytes_for: Callable[[int], int | None],
    c1: int,
    c2: int,
    budget: int | float,
    most: int,
    fallback: int = 64,
) -> int:
    """The largest chunk in `[1, most]` whose modelled memory fits `budget`
    bytes; `min(most, fallback)` without a memory analysis."""
    m0, m1 = linear_model(bytes_for, c1, c2)
    if not np.isfinite(m1):
        return min(most, fallback)
    return int(np.clip((budget - m0) // m1, 1, most))
