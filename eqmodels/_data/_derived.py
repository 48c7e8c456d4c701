"""Derived data products: debiased amplitudes, bispectra, closure phases, closure
amplitudes and log closure amplitudes, with eht-imaging's debiasing and sigmas.

Every function returns one of the containers of `eqmodels/_data/_products.py`:
each row carries the (u, v) of its legs **already oriented** (a leg walked
backwards has `(-u, -v)`, so a data term computes `V̂1 V̂2 V̂3` from the forward
model at the legs directly), the `sign` of each leg, the station indices and
the timestamp.

Formulas (docs/conventions.md; eht-imaging 1.3.2), with `σ_i` the visibility sigmas:

- amplitude: `A = sqrt(|V|² - σ²)` if `|V| > σ` else 0 (`debias=True`).
- bispectrum: `B = V1 V2 V3`, `σ_B = |B| sqrt(Σ σ_i²/|V_i|²)`.
- closure phase: `ψ = arg B`, `σ_ψ = σ_B / |B|` (radians).
- closure amplitude: with `p_i` the amplitudes debiased as eht-imaging does
  (`sqrt(|V|² - σ²)`, or `σ` where `|V| < σ`), `snr_i = p_i / σ_i`:
  `C = p1 p2 / (p3 p4)`, `σ_C = C sqrt(Σ 1/snr_i²)`, debiased
  `C / (1 + 1/snr3² + 1/snr4²)`.
- log closure amplitude: `ln C`, `σ = sqrt(Σ 1/snr_i²)`, debiased
  `+ ½ (1/snr1² + 1/snr2² - 1/snr3² - 1/snr4²)`.

With `debias=False` the raw amplitudes are used and no closure debiasing is done.
"""

import math
import numbers

import numpy as np

from .._numerics import asarray
from .._validation import check_flag
from ._closures import check_closures, closure_index
from ._noise import (
    add_fractional_noise,
    check_fraction,
    debiased_amplitude,
    systematic_level,
)
from ._products import (
    AmpProducts,
    BispectrumProducts,
    ClosureAmpProducts,
    ClosurePhaseProducts,
    LogClosureAmpProducts,
)
from ._visdata import check_uv_limit, check_visdata, VisData


def _check_data(data):
    check_visdata(data)


def _check_cut(name, x):
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x):
        raise ValueError(f"`{name}` must be a finite number or None, got {x!r}.")
    if x < 0:
        raise ValueError(f"`{name}` must be >= 0, got {x!r}.")
    return float(x)


def _empty(what, data, why):
    raise ValueError(
        f"no {what} can be formed from this data ({data.n_rows} rows, stations "
        f"{list(data.stations_present())}){why}."
    )


def _why_no_closures(data, idx, n_formed, nst, uv_min, snr_cut) -> str:
    """Why no closure of `nst` stations is left: the cut that removed them."""
    a1 = np.asarray(data.ant1)[idx]
    a2 = np.asarray(data.ant2)[idx]
    if n_formed:
        return f": {n_formed} were formed but none has a finite sigma" + (
            f" and SNR >= `snr_cut`={snr_cut}; lower `snr_cut`" if snr_cut else ""
        )
    if idx.size < data.n_rows:
        kept = len(set(a1.tolist()) | set(a2.tolist()))
        return (
            f": `uv_min`={uv_min} left {idx.size} of {data.n_rows} rows, on {kept} "
            f"stations, and no timestamp has {nst} stations with all "
            f"{3 if nst == 3 else 4} baselines among them; lower `uv_min`"
        )
    return (
        f" (no timestamp has {nst} stations with all {3 if nst == 3 else 4} "
        "baselines present)"
    )


def amplitudes(
    data: VisData,
    *,
    debias: bool = True,
    snr_cut: float | int | np.number | None = None,
    systematic_noise: float | int | dict = 0.0,
) -> AmpProducts:
    """Visibility amplitudes, one row per visibility.

    **Arguments:**

    - `data`: a [`eqmodels.VisData`][].
    - `debias`: `A = sqrt(|V|² - σ²)` where `|V| > σ`, else 0; `False` keeps `|V|`.
    - `snr_cut`: drop rows with `A/σ < snr_cut` (before systematic noise).
    - `systematic_noise`: per-station fraction `f` (`σ' = sqrt(σ² + 2 f² A²)`) or a
      dict `{station: f}` (`σ' = sqrt(σ² + (f1² + f2²) A²)`; stations it does not
      name: 0; entries for stations absent from `data` are ignored, so one table
      such as [`eqmodels.m87_systematic_noise`][] serves every day; see
      [`eqmodels.add_systematic_noise`][]).

    **Returns:** [`eqmodels.AmpProducts`][].
    """
    _check_data(data)
    snr_cut = _check_cut("snr_cut", snr_cut)
    vis = np.asarray(data.vis)
    sigma = np.asarray(data.sigma)
    amp = (
        debiased_amplitude(vis, sigma) if check_flag("debias", debias) else np.abs(vis)
    )
    level = systematic_level(data, systematic_noise)
    keep = np.ones(data.n_rows, bool) if snr_cut is None else amp / sigma >= snr_cut
    if not np.any(keep):
        _empty("amplitudes", data, f" above snr_cut={snr_cut}")
    sig = np.sqrt(sigma**2 + (level * amp) ** 2)
    return AmpProducts(
        u=asarray(np.asarray(data.u)[keep]),
        v=asarray(np.asarray(data.v)[keep]),
        amp=asarray(amp[keep]),
        sigma=asarray(sig[keep]),
        time=asarray(np.asarray(data.time)[keep]),
        stations=asarray(
            np.stack([np.asarray(data.ant1), np.asarray(data.ant2)], axis=1)[keep]
        ),
        time_index=asarray(data.time_index[keep]),
        index_key=data.index_key,
    )


def _slots(data, times):
    """`(times, time_index)`: each row's time and its index into the data set's
    time slots (`data.timestamps()`)."""
    return times, np.searchsorted(data.timestamps(), times)


def _closure_inputs(data, uv_min, fractional_noise):
    uv_min = _check_cut("uv_min", uv_min)
    if uv_min is not None:
        check_uv_limit("uv_min", uv_min)
    data._check_no_duplicates("closure quantities")
    if check_fraction("fractional_noise", fractional_noise) > 0:
        data = add_fractional_noise(data, fractional_noise)
    allowed = np.ones(data.n_rows, bool) if uv_min is None else data.uvdist >= uv_min
    idx = np.flatnonzero(allowed)
    a = data._arrays()
    return data, a, idx


def _legs(a, idx, kind, closures):
    rows, signs, stations, times = closure_index(
        a["time"][idx], a["band"][idx], a["ant1"][idx], a["ant2"][idx], kind, closures
    )
    rows = idx[rows]
    u = signs * a["u"][rows]
    v = signs * a["v"][rows]
    vis = a["vis"][rows]
    vis = np.where(signs > 0, vis, np.conj(vis))
    sig = a["sigma"][rows]
    # Each leg's station pair, oriented as the closure walks it.
    a1, a2 = a["ant1"][rows], a["ant2"][rows]
    legs = np.stack([np.where(signs > 0, a1, a2), np.where(signs > 0, a2, a1)], axis=-1)
    return u, v, signs, vis, sig, (stations, legs), times


def _bispectra_np(data, closures, uv_min, snr_cut, fractional_noise):
    _check_data(data)
    check_closures(closures)
    snr_cut = _check_cut("snr_cut", snr_cut)
    data, a, idx = _closure_inputs(data, uv_min, fractional_noise)
    u, v, signs, vis, sig, (stations, legs), times = _legs(a, idx, "triangle", closures)
    bis = vis[:, 0] * vis[:, 1] * vis[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        sig_b = np.abs(bis) * np.sqrt(np.sum(sig**2 / np.abs(vis) ** 2, axis=1))
        keep = np.isfinite(sig_b) & (sig_b > 0)
        if snr_cut is not None:
            keep &= np.abs(bis) / sig_b >= snr_cut
    if not np.any(keep):
        why = _why_no_closures(data, idx, keep.size, 3, uv_min, snr_cut)
        _empty("closed triangles", data, why)
    return (
        u[keep],
        v[keep],
        signs[keep],
        bis[keep],
        sig_b[keep],
        (stations[keep], legs[keep]),
        _slots(data, times[keep]),
        (sig / np.abs(vis))[keep],
    )


def bispectra(
    data: VisData,
    *,
    closures: str = "min",
    uv_min: float | int | None = None,
    snr_cut: float | int | np.number | None = None,
    fractional_noise: float | int | np.number = 0.0,
) -> BispectrumProducts:
    """Bispectra `B = V1 V2 V3` over closed triangles, per timestamp.

    **Arguments:**

    - `data`: a [`eqmodels.VisData`][] (closures never mix bands).
    - `closures`: `"min"` (a minimal independent set per timestamp,
      eht-imaging's; `(n-1)(n-2)/2` triangles with `n` stations) or `"all"`.
    - `uv_min`: leave out baselines shorter than this (wavelengths; e.g. the
      intra-site ALMA–APEX and JCMT–SMA baselines) before forming triangles.
    - `snr_cut`: drop triangles with `|B|/σ_B < snr_cut`.
    - `fractional_noise`: add `f |V|` in quadrature to each visibility sigma first,
      `f` in [0, 1] (see [`eqmodels.add_fractional_noise`][]).

    **Returns:** [`eqmodels.BispectrumProducts`][]; `σ_B = |B| sqrt(Σ σ_i²/|V_i|²)`.
    """
    u, v, signs, bis, sig_b, stations, times, _ = _bispectra_np(
        data, closures, uv_min, snr_cut, fractional_noise
    )
    return BispectrumProducts(
        u=asarray(u),
        v=asarray(v),
        sign=asarray(signs),
        bispectrum=asarray(bis),
        sigma=asarray(sig_b),
        time=asarray(times[0]),
        stations=asarray(stations[0]),
        legs=asarray(stations[1]),
        time_index=asarray(times[1]),
        index_key=data.index_key,
    )


def closure_phases(
    data: VisData,
    *,
    closures: str = "min",
    uv_min: float | int | None = None,
    snr_cut: float | int | np.number | None = None,
    fractional_noise: float | int | np.number = 0.0,
    systematic_cphase_noise: float | int | np.number = 0.0,
) -> ClosurePhaseProducts:
    """Closure phases `ψ = arg(V1 V2 V3)` in **radians**, per timestamp.

    **Arguments:** as [`eqmodels.bispectra`][] (`snr_cut` applies to the
    bispectrum SNR), plus

    - `systematic_cphase_noise`: a systematic closure-phase error in **degrees**,
      added in quadrature: `σ_ψ' = sqrt(σ_ψ² + (s π/180)²)` (eht-imaging's
      `systematic_cphase_noise`).

    **Returns:** [`eqmodels.ClosurePhaseProducts`][] with `σ_ψ = σ_B/|B|`.
    """
    if isinstance(systematic_cphase_noise, bool) or not isinstance(
        systematic_cphase_noise, numbers.Real
    ):
        raise TypeError(
            "`systematic_cphase_noise` must be a number of degrees, got "
            f"{systematic_cphase_noise!r}."
        )
    if not (math.isfinite(systematic_cphase_noise) and systematic_cphase_noise >= 0):
        raise ValueError(
            "`systematic_cphase_noise` must be finite and >= 0 (degrees), got "
            f"{systematic_cphase_noise!r}."
        )
    u, v, signs, bis, sig_b, stations, times, leg_sig = _bispectra_np(
        data, closures, uv_min, snr_cut, fractional_noise
    )
    sig = np.hypot(sig_b / np.abs(bis), math.radians(float(systematic_cphase_noise)))
    return ClosurePhaseProducts(
        u=asarray(u),
        v=asarray(v),
        sign=asarray(signs),
        cphase=asarray(np.angle(bis)),
        sigma=asarray(sig),
        time=asarray(times[0]),
        stations=asarray(stations[0]),
        legs=asarray(stations[1]),
        time_index=asarray(times[1]),
        index_key=data.index_key,
        leg_sigma=asarray(leg_sig),
    )


def _camp_np(data, closures, uv_min, snr_cut, fractional_noise, debias, log):
    debias = check_flag("debias", debias)
    _check_data(data)
    check_closures(closures)
    snr_cut = _check_cut("snr_cut", snr_cut)
    data, a, idx = _closure_inputs(data, uv_min, fractional_noise)
    u, v, signs, vis, sig, (stations, legs), times = _legs(
        a, idx, "quadrangle", closures
    )
    if debias:
        p = debiased_amplitude(vis, sig, force_nonzero=True)
    else:
        p = np.abs(vis)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv_snr2 = (sig / p) ** 2
        err = np.sqrt(np.sum(inv_snr2, axis=1))
        if log:
            val = np.log(p[:, 0]) + np.log(p[:, 1]) - np.log(p[:, 2]) - np.log(p[:, 3])
            if debias:
                val = val + 0.5 * (
                    inv_snr2[:, 0] + inv_snr2[:, 1] - inv_snr2[:, 2] - inv_snr2[:, 3]
                )
            snr = 1.0 / err
        else:
            val = p[:, 0] * p[:, 1] / (p[:, 2] * p[:, 3])
            err = val * err
            if debias:
                val = val / (1.0 + inv_snr2[:, 2] + inv_snr2[:, 3])
            snr = val / err
        keep = np.isfinite(val) & np.isfinite(err) & (err > 0)
        if snr_cut is not None:
            keep &= snr >= snr_cut
    if not np.any(keep):
        why = _why_no_closures(data, idx, keep.size, 4, uv_min, snr_cut)
        _empty("closed quadrangles", data, why)
    return (
        u[keep],
        v[keep],
        val[keep],
        err[keep],
        (stations[keep], legs[keep]),
        _slots(data, times[keep]),
        np.sqrt(inv_snr2)[keep],
    )


def closure_amplitudes(
    data: VisData,
    *,
    closures: str = "min",
    uv_min: float | int | None = None,
    snr_cut: float | int | np.number | None = None,
    fractional_noise: float | int | np.number = 0.0,
    debias: bool = True,
) -> ClosureAmpProducts:
    """Closure amplitudes `C = |V_ab||V_cd| / (|V_ad||V_bc|)` per quadrangle
    `(a, b, c, d)` = `stations` row; legs in that order (`u[:, 0]` is `ab`,
    `u[:, 1]` `cd`, `u[:, 2]` `ad`, `u[:, 3]` `bc`), eht-imaging's convention.

    **Arguments:** as [`eqmodels.bispectra`][] (`"min"`: `n(n-3)/2` quadrangles
    with `n` stations; `snr_cut` drops `C/σ_C < snr_cut`), plus `debias`
    (eht-imaging's amplitude and closure-amplitude debiasing, see the module
    docs).

    **Returns:** [`eqmodels.ClosureAmpProducts`][].
    """
    u, v, val, err, stations, times, _ = _camp_np(
        data, closures, uv_min, snr_cut, fractional_noise, debias, log=False
    )
    return ClosureAmpProducts(
        u=asarray(u),
        v=asarray(v),
        camp=asarray(val),
        sigma=asarray(err),
        time=asarray(times[0]),
        stations=asarray(stations[0]),
        legs=asarray(stations[1]),
        time_index=asarray(times[1]),
        index_key=data.index_key,
    )


def log_closure_amplitudes(
    data: VisData,
    *,
    closures: str = "min",
    uv_min: float | int | None = None,
    snr_cut: float | int | np.number | None = None,
    fractional_noise: float | int | np.number = 0.0,
    debias: bool = True,
) -> LogClosureAmpProducts:
    """Log closure amplitudes `ln|V_ab| + ln|V_cd| - ln|V_ad| - ln|V_bc|`, same
    quadrangles and leg order as [`eqmodels.closure_amplitudes`][];
    `σ = sqrt(Σ 1/snr_i²)`; `snr_cut` drops `1/σ < snr_cut`.

    **Returns:** [`eqmodels.LogClosureAmpProducts`][].
    """
    u, v, val, err, stations, times, leg_sig = _camp_np(
        data, closures, uv_min, snr_cut, fractional_noise, debias, log=True
    )
    return LogClosureAmpProducts(
        u=asarray(u),
        v=asarray(v),
        logcamp=asarray(val),
        sigma=asarray(err),
        time=asarray(times[0]),
        stations=asarray(stations[0]),
        legs=asarray(stations[1]),
        time_index=asarray(times[1]),
        index_key=data.index_key,
        leg_sigma=asarray(leg_sig),
    )
