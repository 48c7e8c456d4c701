"""Polarimetric residuals against baseline length: the fractional polarization
visibility m̆ = P̆ / Ĩ and the cross-hand correlations, normalised by σ."""

import numpy as np
from jaxtyping import ArrayLike, Complex, Float

from .._data._polvisdata import PolVisData
from .._forward._separable import SeparableFT
from .._gains._jones_abstract import AbstractJones
from .._grid import ImageGrid
from .._image._base import AbstractImageModel
from .._numerics import asarray
from ._mpl import pyplot
from ._polarization import _stokes_and_grid


def _correlations_from_stokes(s: np.ndarray, basis: tuple[str, ...]) -> np.ndarray:
    """Ideal correlations `(n, 4)` in `basis`'s order from Stokes visibilities."""
    i, q, u, v = s.T
    if basis[0] == "RR":
        return np.stack([i + v, i - v, q + 1j * u, q - 1j * u], axis=1)
    return np.stack([i + q, i - q, u + 1j * v, u - 1j * v], axis=1)


def _stokes_from_correlations(c: np.ndarray, basis: tuple[str, ...]) -> np.ndarray:
    """Stokes visibilities `(n, 4)` from correlations (the inverse of the above;
    `PolVisData.stokes()`'s formulas)."""
    c1, c2, c3, c4 = c.T
    if basis[0] == "RR":
        return np.stack(
            [0.5 * (c1 + c2), 0.5 * (c3 + c4), 0.5j * (c4 - c3), 0.5 * (c1 - c2)],
            axis=1,
        )
    return np.stack(
        [0.5 * (c1 + c2), 0.5 * (c1 - c2), 0.5 * (c3 + c4), -0.5j * (c3 - c4)], axis=1
    )


def pol_residuals(
    data: PolVisData,
    model: Float[ArrayLike, "*stokes ny nx"]
    | AbstractImageModel
    | Complex[ArrayLike, "n 4"],
    grid: ImageGrid | None = None,
    *,
    jones: AbstractJones | None = None,
) -> dict[str, np.ndarray]:
    """The numbers [`eqmodels.plot_pol_residuals`][] draws, one entry per data
    row.

    The model's Stokes visibilities `Ŝ` (an image transformed exactly at the
    rows' `(u, v)`, or given) become ideal correlations (`RL = Q̂ + iÛ`,
    `LR = Q̂ − iÛ`; linear feeds `XY = Û + iV̂`, `YX = Û − iV̂`), seen through
    `jones` when given (`jones.apply`: the correlations the stations would
    record). Then

    - `m̆ = P / I` of the data and of the model (`P = Q + iU` and `I` from the
      correlations, as `PolVisData.stokes()` converts them), with the data's
      `σ_m = sqrt(σ_Q² + σ_U² + σ_I² |m̆|²) / |I|` (eht-imaging's `m` σ, as
      [`eqmodels.FracPolChi2`][]);
    - the normalised residuals `(m̆_model − m̆_data) / σ_m` and, for each cross
      hand, `(Ĉ − C) / σ_C`, real and imaginary parts each (so that both are
      standard normal for a right model).

    **Arguments:**

    - `data`: an [`eqmodels.PolVisData`][].
    - `model`: the Stokes planes `(4, ny, nx)` Jy/pixel with `grid`, a
      polarimetric image model, or model Stokes visibilities `(n, 4)` (I, Q, U, V
      per row).
    - `grid`: the image's [`eqmodels.ImageGrid`][], for an array.
    - `jones`: station Jones matrices of the data set (e.g. fitted
      [`eqmodels.StationJones`][] with its D-terms), or `None` for none.

    **Returns:** a dict of numpy arrays: `uvdist` (λ), `m_data`, `m_model`,
    `sigma_m`, `m_residual` (complex `(m̆_model − m̆_data) / σ_m`: NaN where the
    data lack m̆), `cross_names` (the two cross hands' names), `cross_residual`
    (`(n, 2)` complex, NaN where flagged).
    """
    if not isinstance(data, PolVisData):
        raise TypeError(
            f"`data` must be an eqmodels.PolVisData (`load_uvfits(path, "
            f"polarization='full')`), got {type(data).__name__}."
        )
    basis = tuple(data.basis)
    feeds = set(data.feeds)
    u, v = np.asarray(data.u), np.asarray(data.v)
    arr = None if isinstance(model, AbstractImageModel) else np.asarray(model)
    if arr is not None and np.iscomplexobj(arr):
        if arr.shape != (data.n_rows, 4):
            raise ValueError(
                f"`model` visibilities have shape {arr.shape}; expected one row of "
                f"Stokes I, Q, U, V per data row, ({data.n_rows}, 4)."
            )
        model_vis = arr.astype(complex)
    else:
        stokes, grid = _stokes_and_grid(model, grid)
        fwd = SeparableFT(grid, u, v)
        model_vis = np.asarray(fwd.batched(asarray(stokes))).T  # (4, n) -> (n, 4)
    if jones is not None:
        if not isinstance(jones, AbstractJones):
            raise TypeError(
                f"`jones` must be station Jones matrices (e.g. StationJones), got "
                f"{type(jones).__name__}."
            )
        stations = np.stack([np.asarray(data.ant1), np.asarray(data.ant2)], axis=-1)
        model_corr = np.asarray(
            jones.apply(asarray(model_vis), stations, np.asarray(data.time_index))
        )
    else:
        if len(feeds) > 1:
            raise ValueError(
                "`data` mixes circular and linear feeds: give the stations' `jones` "
                "(their feed bases) to convert the model."
            )
        model_corr = _correlations_from_stokes(model_vis, basis)
    model_s = _stokes_from_correlations(model_corr, basis)
    corr, sigma = (np.asarray(x) for x in data.correlations())
    s, ss = data.stokes()
    with np.errstate(invalid="ignore", divide="ignore"):
        m_data = (s[:, 1] + 1j * s[:, 2]) / s[:, 0]
        m_model = (model_s[:, 1] + 1j * model_s[:, 2]) / model_s[:, 0]
        sigma_m = np.sqrt(
            ss[:, 1] ** 2 + ss[:, 2] ** 2 + ss[:, 0] ** 2 * np.abs(m_data) ** 2
        ) / np.abs(s[:, 0])
        m_res = (m_model - m_data) / sigma_m
        cross_res = (model_corr[:, 2:] - corr[:, 2:]) / sigma[:, 2:]
    bad = ~(np.isfinite(m_res) & (sigma_m > 0))
    m_res = np.where(bad, np.nan + 0j, m_res)
    return {
        "uvdist": np.hypot(u, v),
        "m_data": m_data,
        "m_model": m_model,
        "sigma_m": sigma_m,
        "m_residual": m_res,
        "cross_names": np.asarray(basis[2:]),
        "cross_residual": cross_res,
    }


def plot_pol_residuals(
    data: PolVisData,
    model: Float[ArrayLike, "*stokes ny nx"]
    | AbstractImageModel
    | Complex[ArrayLike, "n 4"],
    grid: ImageGrid | None = None,
    *,
    jones: AbstractJones | None = None,
    axes=None,
    title: str | None = None,
):
    """Polarimetric data against a model, three panels against baseline length
    `|uv|` (Gλ):

    1. `|m̆|`, the amplitude of the fractional polarization visibility
       `m̆ = P̆ / Ĩ` (`P = Q + iU`), of the data (with `±σ_m` bars) and of the
       model;
    2. `(m̆_model − m̆_data) / σ_m`, real and imaginary parts;
    3. the cross-hand residuals `(Ĉ − C) / σ` of RL and LR (XY and YX for linear
       feeds), real and imaginary parts;

    the residual panels with the ±1 band and each series' RMS in the legend
    ([`eqmodels.pol_residuals`][] gives the numbers).

    **Arguments:**

    - `data`: an [`eqmodels.PolVisData`][].
    - `model`: the Stokes planes `(4, ny, nx)` with `grid`, a polarimetric image
      model, or model Stokes visibilities `(n, 4)`.
    - `grid`: the image's [`eqmodels.ImageGrid`][], for an array.
    - `jones`: station Jones matrices that corrupt the model (fitted D-terms),
      or `None`.
    - `axes`: three matplotlib Axes to draw on (default: a new figure).
    - `title`: the figure's title.

    **Returns:** the matplotlib `Figure`; its first three axes are the panels.
    """
    res = pol_residuals(data, model, grid, jones=jones)
    if axes is None:
        fig, axes = pyplot().subplots(1, 3, figsize=(14.0, 4.0), layout="constrained")
    else:
        axes = list(axes)
        if len(axes) != 3 or not all(hasattr(a, "scatter") for a in axes):
            raise TypeError("`axes` must be three matplotlib Axes, or None.")
        fig = axes[0].figure
    uvd = res["uvdist"] / 1e9
    ok = np.isfinite(res["m_residual"])
    ax = axes[0]
    ax.errorbar(
        uvd[ok], np.abs(res["m_data"][ok]), yerr=res["sigma_m"][ok], fmt="o",
        markersize=2.5, elinewidth=0.8, color="0.3", label="data",
    )  # fmt: skip
    ax.plot(
        uvd[ok], np.abs(res["m_model"][ok]), "o", markersize=2.5, color="tab:red",
        label="model", zorder=3,
    )  # fmt: skip
    ax.set_ylabel("|m̆| = |P̆ / Ĩ|")
    ax.set_ylim(
        0.0, min(1.5, 1.2 * float(np.max(np.abs(res["m_data"][ok]), initial=1.0)))
    )
    ax.legend(fontsize="small")
    _residual_panel(
        axes[1], uvd[ok], {"m̆": res["m_residual"][ok]}, "(m̆_model − m̆_data) / σ"
    )
    cross = res["cross_residual"]
    series = {str(name): cross[:, k] for k, name in enumerate(res["cross_names"])}
    _residual_panel(axes[2], uvd, series, "(model − data) / σ, cross hands")
    for ax in axes:
        ax.set_xlabel("|uv| (Gλ)")
        ax.set_xlim(left=0)
    if title is not None:
        fig.suptitle(title)
    return fig


_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple")


def _residual_panel(ax, uvd, series, ylabel):
    ax.axhspan(-1.0, 1.0, color="0.9", zorder=0)
    ax.axhline(0.0, color="0.5", lw=0.8, zorder=1)
    k = 0
    for name, r in series.items():
        ok = np.isfinite(r)
        for part, values, marker in (("Re", r.real, "o"), ("Im", r.imag, "^")):
            rms = float(np.sqrt(np.mean(values[ok] ** 2))) if ok.any() else np.nan
            ax.plot(
                uvd[ok], values[ok], marker, markersize=2.5, ls="",
                color=_COLORS[k % len(_COLORS)], label=f"{part} {name} (RMS {rms:.2f})",
                zorder=2,
            )  # fmt: skip
            k += 1
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
