"""The pixel grid every image lives on."""

import math

import equinox as eqx
import numpy as np

from ._custom_types import RealLike
from ._units import RAD_PER_UAS


#: Largest accepted pixel (radians, about 3.4 arcminutes): a larger value is almost
#: certainly an angle in other units.
MAX_PSIZE: float = 1e-3
#: Smallest accepted pixel (radians, about 2e-5 µas, far below any interferometer's
#: resolution): a smaller value is almost certainly an angle converted twice.
MIN_PSIZE: float = 1e-16


class ImageGrid(eqx.Module):
    """A regular `ny × nx` pixel grid with square pixels of side `psize` radians.

    Conventions (eht-imaging compatible): the image array is `img[iy, ix]`; row 0 is
    north (+y, top); column 0 is east (+x, left, RA grows to the left). Pixel centres
    are

    - `x[ix] = (nx/2 - 1/2 - ix) * psize`
    - `y[iy] = (ny/2 - 1/2 - iy) * psize`

    so for an even axis the phase centre lies on the corner between the central
    pixels. All fields are static: a grid is configuration, not a parameter.
    """

    ny: int = eqx.field(static=True)
    nx: int = eqx.field(static=True)
    psize: float = eqx.field(static=True)

    def __init__(self, ny: int, nx: int, psize: float | int):
        """**Arguments:**

        - `ny`: number of pixel rows (north–south).
        - `nx`: number of pixel columns (east–west).
        - `psize`: pixel side in radians (use [`eqmodels.uas_to_rad`][] to convert);
          values outside `[1e-16, 1e-3]` rad are refused as almost certainly in
          other units.

        **Raises:** `TypeError` for non-integer sizes or a non-numeric `psize`,
        `ValueError` for sizes < 1 or a non-finite or implausible `psize`.
        """
        for name, n in (("ny", ny), ("nx", nx)):
            if isinstance(n, bool) or not isinstance(n, int | np.integer):
                raise TypeError(f"`{name}` must be an integer, got {n!r}.")
            if n < 1:
                raise ValueError(f"`{name}` must be >= 1, got {n}.")
        if isinstance(psize, str | bytes | bool):
            raise TypeError(f"`psize` must be a float in radians, got {psize!r}.")
        try:
            psize = float(psize)
        except (TypeError, ValueError):
            raise TypeError(f"`psize` must be a float in radians, got {psize!r}.")
        if not (math.isfinite(psize) and psize > 0):
            raise ValueError(f"`psize` must be finite and > 0 (radians), got {psize}.")
        if psize > MAX_PSIZE:
            raise ValueError(
                f"`psize`={psize} rad looks like it is not in radians (it is over 3 "
                "arcminutes); convert with `eqmodels.uas_to_rad` first."
            )
        if psize < MIN_PSIZE:
            raise ValueError(
                f"`psize`={psize:.3g} rad ({psize / RAD_PER_UAS:.3g} µas) is far below "
                "any resolvable pixel: an angle was probably converted to radians "
                "twice (e.g. a field of view in radians passed to `from_fov`, which "
                "expects µas). Pass `psize` in radians: `eqmodels.uas_to_rad(2.0)`."
            )
        self.ny = int(ny)
        self.nx = int(nx)
        self.psize = psize

    @classmethod
    def from_fov(
        cls, npix: int | tuple[int, int], fov_uas: RealLike | int
    ) -> "ImageGrid":
        """A grid from a pixel count and the field of view in µas.

        **Arguments:**

        - `npix`: `n` for an `n × n` grid, or `(ny, nx)`.
        - `fov_uas`: field of view along x (columns), in microarcseconds (a
          number or a 0-d array);
          `psize = fov / nx`. A field of view that gives a pixel below 1e-16 rad
          (e.g. one given in radians) is refused.

        **Returns:** the `ImageGrid`.

        **Raises:** `TypeError` / `ValueError` naming `npix` or `fov_uas`.
        """
        if isinstance(npix, int | np.integer) and not isinstance(npix, bool):
            ny = nx = npix
        else:
            try:
                ny, nx = npix
            except (TypeError, ValueError):
                raise TypeError(
                    f"`npix` must be an integer n (an n × n grid) or a pair (ny, nx), "
                    f"got {npix!r}."
                ) from None
        for name, n in (("npix", ny), ("npix", nx)):
            if isinstance(n, bool) or not isinstance(n, int | np.integer):
                raise TypeError(f"`{name}` must hold integers, got {npix!r}.")
            if n < 1:
                raise ValueError(f"`{name}` must be >= 1 pixel, got {npix!r}.")
        if isinstance(fov_uas, bool | str | bytes) or np.ndim(fov_uas) != 0:
            raise TypeError(f"`fov_uas` must be a number of µas, got {fov_uas!r}.")
        try:
            fov_uas = float(fov_uas)  # a Python or numpy number, or a 0-d array
        except (TypeError, ValueError):
            raise TypeError(
                f"`fov_uas` must be a number of µas, got {fov_uas!r}."
            ) from None
        if not (math.isfinite(fov_uas) and fov_uas > 0):
            raise ValueError(
                f"`fov_uas` must be a finite positive number of µas, got {fov_uas!r}."
            )
        psize = float(fov_uas) * RAD_PER_UAS / int(nx)
        if psize > MAX_PSIZE:
            raise ValueError(
                f"`fov_uas`={fov_uas:g} gives pixels of {psize:.3g} rad (over 3 "
                "arcminutes): `from_fov` expects the field of view in µas (e.g. "
                "`fov_uas=128.0`)."
            )
        if psize < MIN_PSIZE:
            raise ValueError(
                f"`fov_uas`={fov_uas!r} gives a pixel of {psize / RAD_PER_UAS:.3g} µas: "
                "the field of view looks like it is in radians; `from_fov` expects "
                f"µas (e.g. `fov_uas=128.0`, or `eqmodels.rad_to_uas({fov_uas!r})`)."
            )
        return cls(ny, nx, psize)

    @property
    def shape(self) -> tuple[int, int]:
        """`(ny, nx)`."""
        return (self.ny, self.nx)

    @property
    def npix(self) -> int:
        """Total number of pixels, `ny * nx`."""
        return self.ny * self.nx

    @property
    def x(self) -> np.ndarray:
        """Pixel-centre x coordinates (radians), shape `(nx,)`, decreasing."""
        return (self.nx / 2 - 0.5 - np.arange(self.nx)) * self.psize

    @property
    def y(self) -> np.ndarray:
        """Pixel-centre y coordinates (radians), shape `(ny,)`, decreasing."""
        return (self.ny / 2 - 0.5 - np.arange(self.ny)) * self.psize

    def coords(self) -> tuple[np.ndarray, np.ndarray]:
        """Pixel-centre coordinate images `(xx, yy)`, each of shape `(ny, nx)`."""
        xx, yy = np.meshgrid(self.x, self.y)
        return xx, yy

    @property
    def fov(self) -> tuple[float, float]:
        """Field of view `(ny * psize, nx * psize)` in radians."""
        return (self.ny * self.psize, self.nx * self.psize)

    @property
    def max_uv(self) -> float:
        """The Nyquist limit of the grid, `0.5 / psize` wavelengths."""
        return 0.5 / self.psize

    def __repr__(self) -> str:
        return (
            f"ImageGrid(ny={self.ny}, nx={self.nx}, psize={self.psize!r} "
            f"[{self.psize / RAD_PER_UAS:.4g} µas])"
        )


def same_grid(a: ImageGrid, b: ImageGrid) -> bool:
    """The same pixels: equal shapes and pixel sizes equal to 1e-9 (a grid from
    `from_fov` and one from `ImageGrid(ny, nx, psize)` may differ by rounding)."""
    return a.shape == b.shape and math.isclose(a.psize, b.psize, rel_tol=1e-9)
