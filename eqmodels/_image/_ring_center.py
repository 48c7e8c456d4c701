"""The centre and radius of a ring in an image: the point about which the radius
of the brightest point along each direction varies least (the idea of
eht-imaging's ring extractor, REx, used by EHT M87* Paper IV)."""

import math
import numbers

import numpy as np
from jaxtyping import ArrayLike, Real

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._validation import check_grid


def _bilinear(image: np.ndarray, px: np.ndarray, py: np.ndarray) -> np.ndarray:
    """`image` at fractional pixel positions (column `px`, row `py`), bilinear,
    0 outside the image."""
    ny, nx = image.shape
    x0 = np.floor(px).astype(np.int64)
    y0 = np.floor(py).astype(np.int64)
    fx, fy = px - x0, py - y0
    out = np.zeros(np.broadcast(px, py).shape)
    for dy, wy in ((0, 1.0 - fy), (1, fy)):
        for dx, wx in ((0, 1.0 - fx), (1, fx)):
            xi, yi = x0 + dx, y0 + dy
            inside = (xi >= 0) & (xi < nx) & (yi >= 0) & (yi < ny)
            vals = image[np.clip(yi, 0, ny - 1), np.clip(xi, 0, nx - 1)]
            out += np.where(inside, vals, 0.0) * wx * wy
    return out


def _length(name: str, x, *, positive: bool) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"`{name}` must be a number (radians), got {x!r}.")
    x = float(x)
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"`{name}` must be finite and {bound} (radians), got {x!r}.")
    return x


def ring_center(
    image: Real[ArrayLike, "..."],
    grid: ImageGrid,
    *,
    r_min: RealLike,
    r_max: RealLike,
    search: RealLike | None = None,
    n_angles: int = 72,
) -> dict[str, float]:
    r"""The centre and radius of the ring in a Stokes I image.

    Along `n_angles` directions from a trial centre (position angles evenly spaced
    from north through east), the radius of the brightest point between `r_min`
    and `r_max` is found (the image sampled bilinearly every quarter pixel); the
    centre is the trial centre where these radii spread least (smallest standard
    deviation), the radius their mean. A trial centre from which some direction is
    brightest at `r_min` or `r_max` is passed over (that direction did not cross
    the ring). The trial centres fill a square of half-width `search` about the
    image's intensity centroid, every pixel, then every quarter pixel about the
    best of those. This is the idea of eht-imaging's ring extractor (REx), with
    which EHT M87* Paper IV measured its rings: for a ring brighter on one side
    the centroid lies towards the bright side and this centre does not. A
    measurement on the host (numpy), not differentiable.

    Polarimetric quantities defined about the ring's centre (Palumbo et al.
    2020's `β_m`, [`eqmodels.beta_m`][]) take `x0`, `y0` and an annulus about
    `radius` from it.

    **Arguments:**

    - `image`: the Stokes I image `(ny, nx)` on `grid` (Jy/pixel), or the four
      Stokes planes `(4, ny, nx)` (Stokes I is used).
    - `grid`: the [`eqmodels.ImageGrid`][].
    - `r_min`, `r_max`: the radii searched for the brightest point (radians;
      `0 <= r_min < r_max`): bracket the ring, away from the centre (e.g. 10 and
      35 µas for M87's ring of radius about 20 µas).
    - `search`: the half-width of the square of trial centres about the centroid
      (radians; default 8 pixels).
    - `n_angles`: the number of directions (at least 8).

    **Returns:** a `dict` of floats: `x0`, `y0` (radians, +x east, +y north),
    `radius` (radians) and `radius_std` (the spread of the radii there,
    radians).
    """
    check_grid(grid)
    arr = np.asarray(image, dtype=np.float64)
    if arr.shape == (4, *grid.shape):
        arr = arr[0]
    if arr.shape != tuple(grid.shape):
        raise ValueError(
            f"`image` has shape {arr.shape}; expected a Stokes I image on the grid "
            f"{tuple(grid.shape)} (or the four planes, (4, {grid.ny}, {grid.nx}))."
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError("ring_center: `image` has NaN or inf pixels.")
    total = float(arr.sum())
    if not total > 0:
        raise ValueError(
            f"ring_center: the image's total flux is {total!r}; the search starts "
            "at its intensity centroid and needs it positive."
        )
    lo = _length("r_min", r_min, positive=False)
    hi = _length("r_max", r_max, positive=True)
    if not hi > lo:
        raise ValueError(f"`r_max` ({hi!r}) must exceed `r_min` ({lo!r}).")
    if isinstance(n_angles, bool) or not isinstance(n_angles, int | np.integer):
        raise TypeError(f"`n_angles` must be an integer, got {n_angles!r}.")
    if n_angles < 8:
        raise ValueError(f"`n_angles` must be at least 8, got {n_angles}.")
    # Pixel (ix, iy) is at x = (nx/2 − 1/2 − ix)·psize, y = (ny/2 − 1/2 − iy)·psize.
    pixel = float(grid.psize)
    x, y = np.asarray(grid.x, np.float64), np.asarray(grid.y, np.float64)
    half = 8 * pixel if search is None else _length("search", search, positive=False)
    cx = float((arr.sum(axis=0) * x).sum() / total)
    cy = float((arr.sum(axis=1) * y).sum() / total)

    radii = np.linspace(lo, hi, max(2, int(math.ceil(4 * (hi - lo) / pixel)) + 1))
    angles = 2 * np.pi * np.arange(int(n_angles)) / int(n_angles)
    ray_x = np.sin(angles)[:, None] * radii[None, :]  # east of north
    ray_y = np.cos(angles)[:, None] * radii[None, :]

    def spreads(xs, ys):
        """The spread and mean of the peak radii about each (xs[j], ys[k]),
        one column of trial centres at a time (memory: one column's rays)."""
        spread = np.empty((xs.size, ys.size))
        mean = np.empty((xs.size, ys.size))
        py = (grid.ny / 2 - 0.5) - (ys[:, None, None] + ray_y) / pixel
        for j, xj in enumerate(xs):
            px = np.broadcast_to((grid.nx / 2 - 0.5) - (xj + ray_x) / pixel, py.shape)
            at = np.argmax(_bilinear(arr, px, py), axis=-1)
            peak = radii[at]
            # A direction whose brightest point is at r_min or r_max did not
            # cross the ring there: that centre is not one.
            edge = ((at == 0) | (at == radii.size - 1)).any(axis=-1)
            spread[j] = np.where(edge, np.inf, peak.std(axis=-1))
            mean[j] = peak.mean(axis=-1)
        return spread, mean

    # A pixel-spaced search over the square, then a quarter-pixel one about its
    # best centre.
    best_x, best_y = cx, cy
    for step, reach in ((pixel, half), (pixel / 4, pixel)):
        k = int(math.floor(reach / step + 1e-9))
        offsets = step * np.arange(-k, k + 1)
        xs, ys = best_x + offsets, best_y + offsets
        spread, mean = spreads(xs, ys)
        j, i = np.unravel_index(int(np.argmin(spread)), spread.shape)
        if not np.isfinite(spread[j, i]):
            raise ValueError(
                "ring_center: from every trial centre some direction is brightest "
                "at `r_min` or `r_max`: widen [r_min, r_max] to bracket the ring, "
                "or `search` to reach its centre."
            )
        best_x, best_y = float(xs[j]), float(ys[i])
        best = (float(spread[j, i]), best_x, best_y, float(mean[j, i]))
    spread, x0, y0, radius = best
    return {"x0": float(x0), "y0": float(y0), "radius": radius, "radius_std": spread}
