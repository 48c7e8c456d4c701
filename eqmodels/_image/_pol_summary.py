"""The summary numbers of a polarimetric image that the EHT's M87 polarization
papers quote (net and image-averaged fractional polarization, β₂, net EVPA)."""

import math

import numpy as np
from jaxtyping import ArrayLike, Real

from .._custom_types import RealLike
from .._grid import ImageGrid
from .._validation import check_grid
from ._base import evaluated_on
from ._beta import beta_m
from ._pol_base import AbstractPolImageModel
from ._pol_common import check_order, stokes_on_grid


def polarization_summary(
    stokes: Real[ArrayLike, "..."] | AbstractPolImageModel,
    grid: ImageGrid,
    *,
    r_min: RealLike = 0.0,
    r_max: RealLike | None = None,
    x0: RealLike = 0.0,
    y0: RealLike = 0.0,
) -> dict[str, float]:
    r"""The polarimetric quantities of EHT M87* Papers VII and VIII for an image.

    With sums over the pixels (the image in Jy/pixel) and `P = Q + iU`:

    - `flux`: `ΣI` (Jy);
    - `m_net`: the net linear polarization fraction `|ΣQ + iΣU| / ΣI`;
    - `m_avg`: the image-averaged linear polarization fraction
      `⟨|m|⟩ = Σ|P| / ΣI` (the intensity-weighted mean of `|m| = |P| / I`);
    - `evpa_net_deg`: the net electric-vector position angle
      `½ arg(ΣQ + iΣU)`, degrees east of north, in (−90, 90];
    - `v_net`: the net circular fraction `ΣV / ΣI` (signed), and `v_avg`:
      `Σ|V| / ΣI`;
    - `beta2`: Palumbo et al. (2020)'s `β₂` (complex; [`eqmodels.beta_m`][] with
      `m = 2` over the annulus below), with `beta2_abs` = `|β₂|` and
      `beta2_arg_deg` = `∠β₂` in degrees, in (−180, 180].

    The numbers are those of the image as given: the EHT papers quote them for
    images at their resolution (blur the image first, e.g. with
    [`eqmodels.blur_image`][], to compare with them).

    **Arguments:**

    - `stokes`: the Stokes planes `(4, ny, nx)` (I, Q, U, V; Jy/pixel) or a
      polarimetric image model on `grid`.
    - `grid`: the [`eqmodels.ImageGrid`][].
    - `r_min`, `r_max`, `x0`, `y0`: the annulus and its centre (radians) for `β₂`
      (default the whole image about the phase centre), as [`eqmodels.beta_m`][].

    **Returns:** a `dict` of Python numbers (`beta2` complex, the others `float`).
    """
    check_order(stokes, grid, "polarization_summary")
    check_grid(grid)
    planes = evaluated_on(stokes, grid, "stokes", f"`grid` is {grid!r}.")
    planes = np.asarray(stokes_on_grid(planes, grid), np.float64)
    if not np.all(np.isfinite(planes)):
        raise ValueError("polarization_summary: `stokes` has NaN or inf pixels.")
    i, q, u, v = planes
    flux = float(i.sum())
    if not flux > 0:
        raise ValueError(
            f"polarization_summary: the total Stokes I flux is {flux!r} Jy; the "
            "fractions are relative to it and need it positive."
        )
    p_net = complex(q.sum(), u.sum())
    beta2 = complex(
        beta_m(planes, grid, 2, pol="P", r_min=r_min, r_max=r_max, x0=x0, y0=y0)
    )
    evpa = 0.5 * math.degrees(math.atan2(p_net.imag, p_net.real))
    return {
        "flux": flux,
        "m_net": abs(p_net) / flux,
        "m_avg": float(np.hypot(q, u).sum()) / flux,
        "evpa_net_deg": 90.0 if evpa == -90.0 else evpa,
        "v_net": float(v.sum()) / flux,
        "v_avg": float(np.abs(v).sum()) / flux,
        "beta2": beta2,
        "beta2_abs": abs(beta2),
        "beta2_arg_deg": math.degrees(math.atan2(beta2.imag, beta2.real)),
    }
