"""Points beyond the image grid's Nyquist limit: a warning, the same for every
forward model."""

import numpy as np

from .._validation import warn_user


class AliasingWarning(UserWarning):
    """Some `(u, v)` points lie beyond the image grid's Nyquist limit,
    `|u|·psize ≥ ½` or `|v|·psize ≥ ½` (see [`eqmodels.ImageGrid.max_uv`][]).

    Every forward model computes the pixel model's visibilities there exactly
    (`DirectFT`, `SeparableFT` and `NUFFT` agree), as eht-imaging does. But a grid
    of pixel size `psize` holds no structure finer than `2·psize`: beyond the limit
    the model's visibilities are aliases of lower spatial frequencies, damped only by
    the pixel pulse, so fitting data there fits the aliases. Use a smaller `psize`
    (more pixels over the same field of view) or drop the longest baselines.

    It is a warning, not an error, because the numbers are right and a coarse grid
    is sometimes what one wants (a quick look, a survey at low resolution).
    Silence it with
    `warnings.filterwarnings("ignore", category=eqmodels.AliasingWarning)`.
    """


def warn_beyond_nyquist(grid, u: np.ndarray, v: np.ndarray, who: str) -> None:
    """Warn (an [`eqmodels.AliasingWarning`][]) when any of the concrete points
    `u`, `v` lies beyond `grid`'s Nyquist limit."""
    reach = np.maximum(np.abs(u), np.abs(v)) * grid.psize
    beyond = int(np.count_nonzero(reach >= 0.5))
    if beyond:
        warn_user(
            f"{who}: {beyond} of {reach.size} (u, v) points lie beyond the grid's "
            f"Nyquist limit ({grid.max_uv:.4g} wavelengths; the farthest reaches "
            f"{2 * float(reach.max()):.3g}× it). The visibilities there are exact for "
            "the pixel model but alias lower spatial frequencies the grid cannot "
            "tell apart: use a smaller `psize` (more pixels over the same field of "
            "view) or drop the longest baselines. See `eqmodels.AliasingWarning`.",
            AliasingWarning,
        )
