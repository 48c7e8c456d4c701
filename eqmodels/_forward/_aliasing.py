"""Points at the wrong scale for the image grid: beyond its Nyquist limit (an
`AliasingWarning`), or all within a tiny fraction of one fringe across its field
of view (u, v in Gλ by mistake). Warnings, the same for every forward model."""

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


# Below this many fringe cycles across the field of view at the longest (u, v)
# point, the data see nothing but the total flux. EHT points given in Gλ by
# mistake reach ~5e-9 over a 128 µas field (in wavelengths: ~5), and the shortest
# real baseline (intra-site JCMT–SMA, 1.2e5 λ) still reaches ~7e-5 over 128 µas.
_UNRESOLVED_CYCLES = 1e-5


def warn_unresolved_field(grid, u: np.ndarray, v: np.ndarray, who: str) -> None:
    """Warn when even the longest of the concrete, not all zero, points `u`, `v`
    makes fewer than `1e-5` fringe cycles across `grid`'s field of view: every
    visibility is then the total flux to 1e-10, and the usual cause is `u`, `v`
    in Gλ (or Mλ) where wavelengths are expected."""
    longest = float(np.max(np.maximum(np.abs(u), np.abs(v)), initial=0.0))
    cycles = longest * max(grid.nx, grid.ny) * grid.psize
    if 0.0 < cycles < _UNRESOLVED_CYCLES:
        warn_user(
            f"{who}: the longest (u, v) point, {longest:.3g} wavelengths, makes "
            f"{cycles:.2g} fringe cycles across the grid's field of view: the "
            "visibilities see only the image's total flux. `u` and `v` must be in "
            "wavelengths (not Gλ or Mλ: multiply those by 1e9 or 1e6), and the "
            "grid's `psize` in radians."
        )
