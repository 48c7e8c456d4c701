"""Data operations of the published 2017 M87 eht-imaging recipe (EHT Collaboration
2019, Paper IV; data product 2019-D01-02): zero-baseline flux rescaling, Gaussian
taper and reverse taper of visibilities, and a circular Gaussian blur of an image.

Systematic and fractional noise live in `_noise.py`
([`eqmodels.add_systematic_noise`][], [`eqmodels.add_fractional_noise`][]) and
flagging by uv distance is [`eqmodels.VisData.select_uvdist`][] (eht-imaging's
`flag_uvdist`: keep `uv_min <= |uv| <= uv_max`).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Real

from .._custom_types import RealScalar
from .._grid import ImageGrid
from .._numerics import asarray
from .._validation import check_radians, positive_number
from ._visdata import check_visdata, VisData


#: A Gaussian's FWHM over its standard deviation, `2 sqrt(2 ln 2)`.
FWHM_PER_SIGMA = 2.0 * math.sqrt(2.0 * math.log(2.0))


def _check_data(data):
    check_visdata(data)


def taper_kernel(data: VisData, fwhm: float) -> np.ndarray:
    """The visibility-domain Gaussian `exp(-2π² σ² |uv|²)`, `σ = fwhm / (2 sqrt(2
    ln 2))` (the Fourier transform of a unit-flux image-domain Gaussian of FWHM
    `fwhm` radians), per row."""
    s = fwhm / FWHM_PER_SIGMA
    u, v = np.asarray(data.u), np.asarray(data.v)
    return np.exp(-2.0 * np.pi**2 * s**2 * (u**2 + v**2))


def taper(data: VisData, fwhm: RealScalar) -> VisData:
    """Taper the visibilities with a circular Gaussian (convolve the sky with a
    Gaussian of FWHM `fwhm`): `V → K V`, `σ → K σ` with
    `K = exp(-2π² σ_g² |uv|²)`, `σ_g = fwhm / (2 sqrt(2 ln 2))` (eht-imaging's
    `Obsdata.taper`).

    **Arguments:** `data`, a [`eqmodels.VisData`][]; `fwhm`, the image-domain FWHM
    in radians (e.g. `em.uas_to_rad(20)`).

    **Returns:** a new `VisData`. Raises `ValueError` when the kernel underflows
    (to 0, or to below the smallest normal number of the data's dtype) on some row:
    a FWHM far beyond the data's resolution.
    """
    _check_data(data)
    k = taper_kernel(data, positive_number("fwhm", fwhm, allow_zero=True))
    sigma = np.asarray(data.sigma) * k
    if np.any(k == 0) or np.any(sigma < np.finfo(np.asarray(data.sigma).dtype).tiny):
        raise ValueError(
            f"`fwhm`={fwhm!r} rad tapers the longest baselines to zero (the kernel "
            f"is {float(k.min()):.3g} there): use a FWHM comparable to the beam, in "
            "radians (a few µas to tens of µas, e.g. `em.uas_to_rad(20)`)."
        )
    return data.replace(vis=np.asarray(data.vis) * k, sigma=sigma)


def reverse_taper(data: VisData, fwhm: RealScalar) -> VisData:
    """Undo a taper (deconvolve a Gaussian of FWHM `fwhm`): `V → V / K`,
    `σ → σ / K` (eht-imaging's `Obsdata.reverse_taper`; the M87 recipe reverse-tapers
    the data by 5 µas before imaging and blurs its final image by the same 5 µas).

    **Arguments:** `data`, a [`eqmodels.VisData`][]; `fwhm`, radians.

    **Returns:** a new `VisData`. Raises `ValueError` when the kernel underflows to 0
    on some row, or `V / K` or `σ / K` would overflow the data's dtype (a FWHM far
    beyond the data's resolution).
    """
    _check_data(data)
    k = taper_kernel(data, positive_number("fwhm", fwhm, allow_zero=True))
    # The results must fit the data's dtype (float32 without x64).
    big = np.finfo(np.asarray(data.sigma).dtype).max
    vis, sigma = np.asarray(data.vis), np.asarray(data.sigma)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        fits = np.all(np.maximum(np.abs(vis), sigma) / k < big)
    if np.any(k == 0) or not fits:
        raise ValueError(
            f"`fwhm`={fwhm!r} rad makes the reverse taper overflow on the longest "
            "baselines: use a FWHM comparable to the beam (a few µas to tens of µas)."
        )
    return data.replace(vis=vis / k, sigma=sigma / k)


def _zbl_rows(data, uv_max):
    return data.uvdist < uv_max


def rescale_zero_baseline(
    data: VisData,
    flux: RealScalar,
    *,
    uv_max: RealScalar = 0.1e9,
    current: RealScalar | None = None,
    baseline: tuple[str, str] | None = None,
) -> VisData:
    """Scale the short (intra-site) baselines to a chosen compact flux, as the M87
    recipe does before imaging (`zbl = 0.6` Jy): every row with `|uv| < uv_max` has
    `V` and `σ` multiplied by `flux / current`, where `current` is the flux now
    seen on those baselines.

    **Arguments:**

    - `data`: a [`eqmodels.VisData`][].
    - `flux`: the compact flux to scale to (Jy, > 0).
    - `uv_max`: baselines shorter than this (wavelengths) are rescaled (default
      0.1 Gλ, the recipe's `uv_zblcut`).
    - `current`: the present zero-baseline flux (Jy). Default: the median amplitude
      on `baseline` if given (the recipe uses ALMA–APEX, `("AA", "AP")`), else on
      all rows shorter than `uv_max`.
    - `baseline`: a station pair to measure `current` on.

    **Returns:** a new `VisData` (long baselines unchanged).
    """
    _check_data(data)
    flux = positive_number("flux", flux)
    uv_max = positive_number("uv_max", uv_max)
    short = _zbl_rows(data, uv_max)
    if not short.any():
        # Refused whatever gives `current`: with `baseline` or `current` too, a
        # `uv_max` in Gλ by mistake would otherwise silently rescale nothing.
        raise ValueError(
            f"no baseline is shorter than `uv_max`={uv_max:g} λ (shortest "
            f"{data.uvdist.min():.4g} λ): nothing to rescale; `uv_max` is in "
            "wavelengths (the recipe's 0.1 Gλ is `0.1e9`)."
        )
    amp = np.abs(np.asarray(data.vis))
    if current is None:
        if baseline is not None:
            if not isinstance(baseline, tuple | list) or len(baseline) != 2:
                raise TypeError(
                    f"`baseline` must be a pair of station names, got {baseline!r}."
                )
            i, j = data._station_indices("baseline", list(baseline))
            a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
            on = ((a1 == i) & (a2 == j)) | ((a1 == j) & (a2 == i))
            if not on.any():
                raise ValueError(
                    f"`baseline`={tuple(baseline)!r} has no rows in this data: "
                    f"present baselines are {data.baselines()}."
                )
            if not short[on].all():
                raise ValueError(
                    f"`baseline`={tuple(baseline)!r} is not a short baseline: "
                    f"{int((~short[on]).sum())} of its {int(on.sum())} rows are "
                    f"longer than `uv_max`={uv_max:g} λ. The zero-baseline flux is "
                    "measured on an intra-site pair (the recipe's `('AA', 'AP')`)."
                )
            current = float(np.median(amp[on]))
        else:
            current = float(np.median(amp[short]))
    current = positive_number("current", current)
    scale = np.where(short, flux / current, 1.0)
    return data.replace(
        vis=np.asarray(data.vis) * scale, sigma=np.asarray(data.sigma) * scale
    )


#: `blur_image` refuses a FWHM this many times the image's width (a flat image,
#: from millions of filter taps).
_MAX_BLUR_FIELDS = 1000.0


def blur_matrix(n: int, sigma_pix: float, truncate: float = 4.0) -> np.ndarray:
    """The `(n, n)` matrix of a 1-d Gaussian filter of standard deviation
    `sigma_pix` pixels: taps `exp(-x²/(2σ²))` for `|x| <= int(truncate σ + 0.5)`,
    normalised to sum 1, with half-sample symmetric reflection at the edges
    (`d c b a | a b c d | d c b a`) — the same filter as
    `scipy.ndimage.gaussian_filter1d(mode="reflect")`."""
    radius = int(truncate * sigma_pix + 0.5)
    x = np.arange(-radius, radius + 1)
    w = np.exp(-0.5 * x**2 / sigma_pix**2) if sigma_pix > 0 else (x == 0) * 1.0
    w = w / w.sum()
    if radius >= n:
        # The reflections repeat every 2n pixels: taps 2n apart read the same
        # pixel, so fold them first (memory 2n per row, not the kernel's length).
        w = np.bincount(np.mod(x, 2 * n), weights=w, minlength=2 * n)
        x = np.arange(2 * n)
    out = np.zeros((n, n))
    rows = np.arange(n)[:, None]
    m = np.mod(rows + x[None, :], 2 * n)
    src = np.where(m < n, m, 2 * n - 1 - m)
    np.add.at(
        out, (np.broadcast_to(rows, src.shape), src), np.broadcast_to(w, src.shape)
    )
    return out


def blur_image(
    image: Real[ArrayLike, "ny nx"],
    grid: ImageGrid,
    fwhm: RealScalar,
) -> Float[Array, "ny nx"]:
    """Convolve an image with a circular Gaussian of FWHM `fwhm` (radians), as
    eht-imaging's `Image.blur_circ` (a truncated Gaussian filter at 4σ with
    reflecting edges, `scipy.ndimage.gaussian_filter`): the recipe's final 5 µas
    blur. Linear in the image (a matrix on each axis, built once per call on the
    host), so it is differentiable and works under `jit` / `vmap` over images.

    **Arguments:**

    - `image`: an `(ny, nx)` array on `grid` (Jy/pixel).
    - `grid`: its [`eqmodels.ImageGrid`][].
    - `fwhm`: the Gaussian's FWHM in radians (`em.uas_to_rad(5)`); 0 returns the
      image.

    **Returns:** the blurred image (the flux is kept, up to what the reflection
    at the edges folds back in).
    """
    if not isinstance(grid, ImageGrid):
        raise TypeError(f"`grid` must be an ImageGrid, got {type(grid).__name__}.")
    fwhm = positive_number("fwhm", fwhm, allow_zero=True)
    check_radians("fwhm", fwhm)  # µas given as radians
    n_fields = fwhm / (max(grid.ny, grid.nx) * grid.psize)
    if n_fields > _MAX_BLUR_FIELDS:
        # Its taps (4σ each side) would take gigabytes, to give a flat image.
        raise ValueError(
            f"`fwhm` = {fwhm:g} rad is {n_fields:.3g} times the image's width: the "
            "blur would flatten it. The FWHM is in radians (`em.uas_to_rad(5.0)` "
            "for the recipe's 5 µas)."
        )
    img = asarray(image)
    if not jnp.issubdtype(img.dtype, jnp.floating):  # integer or bool pixels
        img = img.astype(jnp.result_type(float))
    if img.shape[-2:] != (grid.ny, grid.nx):
        raise ValueError(
            f"`image` has shape {tuple(img.shape)} but `grid` is ({grid.ny}, "
            f"{grid.nx})."
        )
    s = fwhm / FWHM_PER_SIGMA / grid.psize
    by = asarray(blur_matrix(grid.ny, s), img.dtype)
    bx = asarray(blur_matrix(grid.nx, s), img.dtype)
    hi = jax.lax.Precision.HIGHEST
    return jnp.matmul(jnp.matmul(by, img, precision=hi), bx.T, precision=hi)
