"""A polarimetric M87 recipe: the published Stokes I recipe ([`image_m87`]), then
linear (and optionally circular) polarization with the Stokes I image fixed and the
D-terms of the stations that zero-baseline calibration did not correct fitted with
the image. Modeled on the eht-imaging polarimetric imaging of EHT M87* Paper VII
(EHT Collaboration 2021, ApJL 910, L12) and eht-imaging's own polarimetric example
(`examples/example_pol.py`) and leakage calibration (`calibrating/pol_cal.py`).

Every number is a module constant with its source; the steps are documented in
`docs/recipe.md` ("Polarimetric recipe").
"""

import numbers
import os
import time

import equinox as eqx
import jax
import numpy as np

from .._compile import run_once_jit
from .._data._polvisdata import concatenate_pol, PolVisData
from .._data._recipe_ops import blur_image
from .._data._uvfits import load_uvfits
from .._gains._joint import WithGains
from .._gains._jones_corrected import JonesCorrected
from .._gains._jones_priors import DTermPrior
from .._gains._selfcal import self_calibrate
from .._gains._station_jones import StationJones
from .._grid import ImageGrid
from .._image._pixel import PixelImage
from .._image._pol_pixel import PolPixelImage
from .._image._pol_rescaled import (
    check_scale_power,
    rescaled_filter,
    RescaledPolPixels,
)
from .._image._pol_summary import polarization_summary
from .._image._ring_center import ring_center
from .._regularizers._pol_entropy import HolographicEntropy
from .._regularizers._pol_smoothness import PolTV
from .._regularizers._stokes_v import StokesVL1, StokesVTV
from .._solvers._solve import solve
from .._terms._base import Objective
from .._terms._frac_pol import FracPolChi2
from .._terms._pol_vis import PolVisChi2
from .._terms._stokes_v import StokesVChi2
from .._units import uas_to_rad
from .._validation import check_flag
from ._m87 import BAND_TIME_SHIFT_H, image_m87, UV_ZBLCUT, ZBL


#: Stations whose D-terms the `*_hops_zbl-dtcal+selfcal` files of the 2017 M87
#: polarimetric release (2023-D01-01, its README) already corrected from the
#: zero baselines: ALMA, APEX, SMA, JCMT. Their D-terms are held at 0 (see
#: `FIXED_DTERM_SIGMA`); every other station's are fitted (LMT, SMT, IRAM 30 m,
#: SPT in 2017).
ZBL_CORRECTED_STATIONS = ("AA", "AP", "SM", "JC")
#: The Gaussian prior (σ of the real and imaginary parts) on the fitted D-terms:
#: eht-imaging's `leakage_cal` default `leakage_tol=0.1`. It enters as the
#: log-prior of the pvis likelihood (weight `w_pvis / 2N`, as `DTermPrior`'s
#: docs prescribe), not added to the reduced χ² as `leakage_cal` adds it: there
#: it acts as σ = 0.1/√(2N), about 0.6 % on a day of M87, and pulls a leakage of
#: several % to near 0 (on synthetic data with 5 % leakage it recovered < 1 %).
DTERM_PRIOR_SIGMA = 0.1
#: The prior that holds the zero-baseline-corrected stations' D-terms near 0
#: (eht-imaging's `leakage_cal(sites=...)` leaves them out of the fit; a prior of
#: 0.1 % keeps them within 0.6 % of 0 on the four 2017 days).
FIXED_DTERM_SIGMA = 1e-3
#: Self-calibration of the polarimetric data to the Stokes I image before the
#: polarimetric rounds (one complex gain per station and timestamp, the same for
#: R and L, eht-imaging's `self_cal` of the Stokes I pipeline): amplitude
#: tolerances of rounds 3-4 of the Stokes I recipe (`gain_tol=(0.02, 0.2)`).
SELFCAL_GAIN_TOL = (0.02, 0.2)
#: The polarimetric data terms leave out the intra-site baselines (shorter than
#: this, λ; ALMA-APEX, SMA-JCMT), as the Stokes I recipe's closure phases do
#: (`UV_ZBLCUT`): their fractional polarization is that of the arcsecond-scale
#: emission around the compact source (the jet), which the 128 µas image does
#: not hold; on 2017-04-10 they alone gave a χ² of the `m` term near 10 (the
#: other baselines about 1 each).
POL_UV_MIN = UV_ZBLCUT
#: Free polarization pixels: where the fixed Stokes I image exceeds this fraction
#: of its peak (elsewhere Q = U = V = 0); Paper VII shows and measures
#: polarization only where I is above 10 % of the peak, this keeps 10x fainter
#: pixels free so that the cut is a measurement choice, not an imaging one. (On
#: synthetic data a 5 or 10 % mask scores better, but on the 2017 days it fits
#: the data worse and drives |m_net| under 1 %: the real data carry polarized
#: flux in fainter pixels; docs/recipe.md, "How the polarimetric weights were
#: chosen".)
POL_MASK_FRACTION = 0.01
#: The starting point of the polarization: uniform 5 % linear polarization at
#: EVPA 0 (eht-imaging starts polarized, its `ρ' → −∞` being unreachable; ours
#: has no singularity at 0 but the start must break the EVPA symmetry).
INIT_FRACTION = 0.05
#: Rounds of polarimetric imaging, after eht-imaging's `make_image_P` sequence in
#: its polarimetric example (`examples/example_pol.py`: `{'m': 1}, {'hw': 1}`,
#: then `{'m': 5}, {'hw': 1, 'ptv': 100}`), extended as Paper VII's eht-imaging
#: imaging does: with the `pvis` term and the D-terms solved with the image
#: (`dterms`: whether the D-terms move in that round). eht-imaging's
#: `chi2_offset`-style objective `Σ α (χ² − 1) + Σ β R`. The regularizer weights
#: (`hw` 100, `ptv` 3; the example's `hw` 1, `ptv` 100) were chosen, as Paper VII
#: chose its parameters, by a synthetic-data survey (`examples/m87_pol_survey.py`;
#: docs/recipe.md "How the polarimetric weights were chosen"): with the 1 % mask
#: and each round run to convergence (`POL_STOP`, in the coordinates of
#: `POL_SCALE_POWER`), the best P-image fidelity on
#: five known images observed with 2017-04-11's coverage, noise and leakage among
#: the sets whose mean ⟨|m|⟩ and |m_net| are within 0.5 percentage points of the
#: truth. The regularizers are **not** normalised: the example's weights are for
#: eht-imaging's `Imager` default `norm_reg=False` (normalised, `ptv` would weigh
#: about 20x more at M87's flux and resolution, and dominate the fit).
POL_ROUNDS = (
    {"m": 1.0, "hw": 100.0, "dterms": False},
    {"m": 5.0, "hw": 100.0, "ptv": 3.0, "dterms": False},
    {"m": 5.0, "pvis": 5.0, "hw": 100.0, "ptv": 3.0, "dterms": True},
    {"m": 5.0, "pvis": 5.0, "hw": 100.0, "ptv": 3.0, "dterms": True},
)
#: With `stokes_v`: eht-imaging's Stokes V data term `vvis` and regularizers
#: `l1v`, `vtv` in every round (unnormalised as the others), weights from the
#: survey's Stokes V part (`--stokes-v`: the best V-image fidelity on a dipolar
#: 3 %, a uniform −1 % and no V, with the linear weights then, `ptv` 10, at
#: `POL_STOP`, in the `PolPixelImage`'s coordinates), kept with the linear
#: weights and coordinates now, where it scores within the survey's spread of the
#: best (docs/recipe.md, "How the polarimetric weights were chosen").
STOKES_V_TERMS = {"vvis": 50.0, "l1v": 1.0, "vtv": 3000.0}
#: The most L-BFGS steps per polarimetric round: a cap, not the stop, well above
#: what a round on the 2017 days takes. Each round runs until `POL_STOP`
#: (eht-imaging stops each round at `maxit`, 200 by default, where the reported
#: quantities still depend on where the optimizer stopped; docs/recipe.md, "Where
#: the rounds stop", has what that changed and how far `POL_STOP` settles them).
#: With `fast`, 50 steps (for CI and demos: not converged).
POL_ITERATIONS = 50000
POL_ITERATIONS_FAST = 50
#: The resolution at which the EHT M87* polarization papers quote the image
#: quantities (Paper VII compares its methods' images, Paper VIII the GRMHD
#: models, blurred to 20 µas FWHM): `summary_20uas` of the report.
SUMMARY_BLUR_UAS = 20.0
#: `β₂` about the ring (`summary_20uas_ring` of the report): the ring's centre
#: and radius from [`eqmodels.ring_center`][] on the Stokes I image, the brightest
#: point searched between these radii (µas; M87's ring has a radius of about
#: 20 µas), and the annulus of ± this (µas) about that radius.
RING_SEARCH_UAS = (10.0, 35.0)
RING_ANNULUS_UAS = 15.0
#: The rounds' `ftol` and `gtol`: a round stops when a step lowers the objective
#: by less than this fraction of it (`gtol`: or no gradient component exceeds
#: it). The Stokes I recipe's 1e-6 stops on the slow tail of the optimisation,
#: where the reported quantities still move; at 1e-8, in the coordinates of
#: `POL_SCALE_POWER`, they hold against 1e-10 on all four 2017 days (docs/recipe.md,
#: "Where the rounds stop").
POL_STOP = 1e-8
#: The rounds solve for the polarization vectors in rescaled coordinates,
#: `w = z · (I / I_max)^-POL_SCALE_POWER` per pixel (`RescaledPolPixels`: the
#: same objective and images; with 1, `z` is about the polarized flux in units of
#: the peak). In `w` itself (0) the curvature spans four decades across the 1 %
#: mask and L-BFGS leaves the faint pixels' polarization unsettled at `POL_STOP`
#: (docs/recipe.md, "Where the rounds stop").
POL_SCALE_POWER = 1.0
#: With `stokes_v`, the exponent of the circular component's coordinates: 0, V
#: in the `PolPixelImage`'s own. V is held by its regularizers, and rescaled (0.5)
#: its rounds end lower but recover known V images worse, and the survey's best
#: set there stalls at the `l1v` kink of the V = 0 start (docs/recipe.md, "How
#: the polarimetric weights were chosen").
POL_SCALE_POWER_V = 0.0


# ------------------------------------------------------------------ data
def _as_pol(x, name: str) -> PolVisData:
    if isinstance(x, PolVisData):
        return x
    if isinstance(x, str | os.PathLike):
        return load_uvfits(x, polarization="full")
    raise TypeError(
        f"`{name}` must be a uvfits path or a PolVisData (full polarization: "
        f"`load_uvfits(path, polarization='full')`), got {type(x).__name__}."
    )


def _check_cross_hands(data: PolVisData, name: str) -> None:
    corr = np.asarray(data.corr)[:, 2:]
    ok = np.isfinite(corr) & (np.abs(corr) > 0)
    if not ok.any():
        raise ValueError(
            f"`{name}` has no cross-hand data (RL, LR are all zero or flagged): a "
            "Stokes I file cannot be imaged in polarization; give a file of the "
            "polarimetric release (e.g. `*_hops_zbl-dtcal+selfcal.uvfits`)."
        )


def prepare_pol_data(lo, hi, *, zbl: float = ZBL) -> PolVisData:
    """The polarimetric data before self-calibration: each band scan-averaged and
    the two joined (lowest frequency band 0), each band's times shifted by
    `BAND_TIME_SHIFT_H` per band index (one band per timestamp, as the Stokes I
    recipe), and the intra-site baselines (shorter than `UV_ZBLCUT`) scaled to
    the compact flux `zbl` (all four correlations and σ by `zbl` over the median
    Stokes I amplitude on ALMA-APEX, else on all intra-site rows), as the Stokes I
    recipe's `rescale_zero_baseline`. Rows without Stokes I are dropped."""
    parts = []
    for name, x in (("lo", lo), ("hi", hi)):
        d = _as_pol(x, name)
        _check_cross_hands(d, name)
        parts.append(d.scan_average())
    parts.sort(key=lambda p: min(p.band_freqs))
    if parts[0].mjd != parts[1].mjd:
        raise ValueError(
            f"`lo` and `hi` are from different days (MJD {parts[0].mjd} and "
            f"{parts[1].mjd}): the recipe images one day's two bands."
        )
    data = concatenate_pol(parts)
    band = np.asarray(data.band)
    if band.max() > 0:
        data = data.replace(time=np.asarray(data.time) + BAND_TIME_SHIFT_H * band)
    vis, _ = data.stokes()
    ok = np.isfinite(vis[:, 0])
    if not ok.all():
        data = data.take(np.flatnonzero(ok))
        vis = vis[ok]
    uv = np.hypot(np.asarray(data.u), np.asarray(data.v))
    short = uv < UV_ZBLCUT
    if not short.any():
        raise ValueError(
            "the data have no intra-site baseline (shorter than "
            f"{UV_ZBLCUT:g} λ), which the recipe scales to the compact flux `zbl`."
        )
    names = data.station_names
    a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
    on = short
    if {"AA", "AP"} <= set(names):
        i, j = names.index("AA"), names.index("AP")
        pair = ((a1 == i) & (a2 == j)) | ((a1 == j) & (a2 == i))
        if pair.any():
            on = pair
    factor = np.where(short, zbl / float(np.median(np.abs(vis[on, 0]))), 1.0)
    return data.replace(
        corr=np.asarray(data.corr) * factor[:, None],
        sigma=np.asarray(data.sigma) * factor[:, None],
    )


def selfcal_pol(data: PolVisData, image, grid: ImageGrid) -> PolVisData:
    """`data` self-calibrated to the Stokes I `image`: one complex gain per
    station and timestamp ([`eqmodels.self_calibrate`][] of `data.stokes_i()`,
    amplitude and phase, tolerances `SELFCAL_GAIN_TOL`), divided out of all four
    correlations alike (`σ` by its modulus). The same gain for R and L leaves the
    fractional polarization of every row unchanged."""
    si = data.stokes_i()
    _, gains = self_calibrate(
        si, image, grid=grid, interval="timestamp", method="both",
        gain_tol=SELFCAL_GAIN_TOL,
    )  # fmt: skip
    st = np.stack([np.asarray(data.ant1), np.asarray(data.ant2)], axis=1)
    f = np.asarray(gains.at(si).factor(st, np.asarray(data.time_index)))
    return data.replace(
        corr=np.asarray(data.corr) / f[:, None],
        sigma=np.asarray(data.sigma) / np.abs(f)[:, None],
    )


def pol_jones(data: PolVisData) -> StationJones:
    """Station Jones matrices for `data`: gains 1 (frozen: the data are
    self-calibrated), D-terms 0, **one set of D-terms per band** (the leakage
    differs between the bands; each time slot holds one band), with the field
    rotation removed before the leakage (`field_rotation_corrected=True`: the
    release's files carry the parallactic-angle rotation)."""
    base = StationJones.from_data(data, "track", "track", field_rotation_corrected=True)
    n_slots, n_st = int(base.n_time_slots), len(data.station_names)
    slot_band = np.zeros(n_slots, np.int32)
    ti, band = np.asarray(data.time_index), np.asarray(data.band)
    slot_band[ti] = band
    kd = int(band.max()) + 1
    present = np.zeros((kd, n_st), bool)
    for b in range(kd):
        rows = band == b
        present[b, np.asarray(data.ant1)[rows]] = True
        present[b, np.asarray(data.ant2)[rows]] = True
    zeros = np.zeros((kd, n_st, 2))
    return StationJones(
        base.log_amp, base.phase, zeros, zeros.copy(), base.slot_interval,
        slot_band, data.station_names,
        field_rotation=np.angle(np.asarray(base.rotation)),
        feeds=base.feeds, present=base.present, dterm_present=present,
        index_key=base.index_key, field_rotation_corrected=True,
    )  # fmt: skip


_ROUND_KEYS = ("m", "pvis", "hw", "ptv")
_V_KEYS = tuple(STOKES_V_TERMS)


def check_pol_rounds(rounds, stokes_v: bool = False) -> tuple:
    """`rounds` (`None`: `POL_ROUNDS`) checked: a non-empty sequence of dicts
    whose keys are data terms `m`, `pvis`, regularizers `hw`, `ptv` (weights
    finite and >= 0, at least one data term > 0), with `stokes_v` also the
    Stokes V weights `vvis`, `l1v`, `vtv` (replacing `STOKES_V_TERMS`' in that
    round), and `dterms` (bool, default False: whether the D-terms move in that
    round)."""
    if rounds is None:
        return POL_ROUNDS
    if isinstance(rounds, dict) or not isinstance(rounds, list | tuple) or not rounds:
        raise ValueError(
            "`pol_rounds` must be a non-empty list of dicts, one per round, e.g. "
            "`[{'m': 5.0, 'hw': 1.0, 'ptv': 100.0, 'dterms': False}]` (the "
            f"recipe's `POL_ROUNDS`), got {rounds!r}."
        )
    out = []
    for k, r in enumerate(rounds):
        if not isinstance(r, dict):
            raise ValueError(f"`pol_rounds[{k}]` must be a dict, got {r!r}.")
        keys = _ROUND_KEYS + (_V_KEYS if stokes_v else ())
        extra = set(r) - set(keys) - {"dterms"}
        if extra:
            v_hint = (
                ""
                if stokes_v or not extra & set(_V_KEYS)
                else " (the Stokes V weights need `stokes_v=True`)"
            )
            raise ValueError(
                f"`pol_rounds[{k}]` has unknown key(s) {sorted(extra)}: the keys "
                f"are the weights {list(keys)} and `dterms` (bool){v_hint}."
            )
        w = {}
        for key in keys:
            if key in r:
                x = r[key]
                if isinstance(x, bool) or not isinstance(x, numbers.Real):
                    raise ValueError(
                        f"`pol_rounds[{k}][{key!r}]` must be a number, got {x!r}."
                    )
                if not (np.isfinite(x) and x >= 0):
                    raise ValueError(
                        f"`pol_rounds[{k}][{key!r}]` must be finite and >= 0, got "
                        f"{x!r}."
                    )
                if x > 0 or key in _V_KEYS:  # a zero weight leaves the term out
                    w[key] = float(x)
        if not any(w.get(key, 0.0) > 0 for key in ("m", "pvis")):
            raise ValueError(
                f"`pol_rounds[{k}]` has no data term: give `m` or `pvis` a weight > 0."
            )
        w["dterms"] = check_flag(f"pol_rounds[{k}]['dterms']", r.get("dterms", False))
        out.append(w)
    return tuple(out)


def check_pol_iterations(iterations, name: str = "pol_iterations") -> int | None:
    """`iterations` (L-BFGS steps per polarimetric round) as an `int`, or `None`
    (the recipe's default); anything but a positive integer is refused, naming
    the argument `name`."""
    if iterations is None:
        return None
    if (
        isinstance(iterations, bool)
        or not isinstance(iterations, int | np.integer)
        or iterations < 1
    ):
        raise ValueError(
            f"`{name}` must be a positive integer (L-BFGS steps per polarimetric "
            f"round) or None for the recipe's default, got {iterations!r}."
        )
    return int(iterations)


def check_pol_tol(tol, name: str = "pol_tol") -> float | None:
    """`tol` (the polarimetric rounds' `ftol` and `gtol`) as a `float`, or `None`
    (the recipe's `POL_STOP`); anything but a number in (0, 1) is refused, naming
    the argument `name`."""
    if tol is None:
        return None
    if (
        isinstance(tol, bool)
        or not isinstance(tol, int | float | np.integer | np.floating)
        or not 0 < tol < 1
    ):
        raise ValueError(
            f"`{name}` must be a number in (0, 1) (the relative decrease of the "
            f"objective, and the gradient, below which a polarimetric round stops; "
            f"the recipe's is {POL_STOP:g}) or None for that default, got {tol!r}."
        )
    return float(tol)


# ------------------------------------------------------------------ objectives
def pol_round_objective(
    data: PolVisData,
    grid: ImageGrid,
    jones: StationJones,
    weights: dict,
    *,
    stokes_v: bool = False,
    forward: str = "separable",
) -> WithGains:
    """One polarimetric round's objective over `(PolPixelImage, StationJones)`:
    `Σ α (χ² − 1) + Σ β R` of the round's `weights` (data terms `m`, `pvis`
    and, with `stokes_v`, `vvis` through the Jones matrices; regularizers `hw`,
    `ptv`, and `l1v`, `vtv` with `stokes_v`, unnormalised), plus
    the D-term prior (the log-prior of the first data term's likelihood: its
    weight over `2N`)."""
    wts = dict(weights)
    wts.pop("dterms", None)
    if stokes_v:
        for key, weight in STOKES_V_TERMS.items():
            wts.setdefault(key, weight)
    wts = {key: weight for key, weight in wts.items() if weight > 0}
    terms, w = [], []
    makers = {"m": FracPolChi2, "pvis": PolVisChi2, "vvis": StokesVChi2}
    for key, cls in makers.items():
        if key in wts:
            terms.append(
                JonesCorrected(cls.from_data(data, grid, forward=forward), jones)
            )
            w.append(wts[key])
    regs = {
        "hw": lambda: HolographicEntropy(),
        "ptv": lambda: PolTV(grid),
        "l1v": lambda: StokesVL1(),
        "vtv": lambda: StokesVTV(grid),
    }
    for key, make in regs.items():
        if key in wts:
            terms.append(make())
            w.append(wts[key])
    fixed = {
        s: FIXED_DTERM_SIGMA for s in jones.station_names if s in ZBL_CORRECTED_STATIONS
    }
    # The log-prior of the first polarimetric data term's likelihood: that term
    # is `Σ w |r|² / 2N`, so the prior `Σ |d / σ|²` gets its weight over `2N`.
    first = terms[0]
    terms.append(DTermPrior(jones, DTERM_PRIOR_SIGMA, station_sigma=fixed))
    w.append(w[0] / (2.0 * int(first.n_rows)))
    return WithGains(Objective(terms, w, chi2_offset=True))


def _filters(model: RescaledPolPixels, jones: StationJones, dterms: bool):
    """`solve`'s `params`: the (rescaled) polarization vectors always, never the
    Stokes I pixels (fixed), the D-terms in the rounds that fit them, never the
    gains."""
    jones_f = jax.tree.map(lambda _: False, jones)
    if dterms:
        jones_f = eqx.tree_at(lambda j: (j.d_real, j.d_imag), jones_f, (True, True))
    return (rescaled_filter(model), jones_f)


_value_and_report = run_once_jit(lambda obj, model: obj.value_and_report(model))


def _report(objective, model):
    value, rep = _value_and_report(objective, model)
    return float(value), {k: float(v) for k, v in rep.items()}


# ------------------------------------------------------------------ summary
def pol_summary(
    stokes: np.ndarray, grid: ImageGrid, blur_uas: float = 0.0, ring=None
) -> dict:
    """[`eqmodels.polarization_summary`][] of `stokes` blurred by a circular
    Gaussian of `blur_uas` µas (each plane; 0: as it is), with `β₂` about the
    Stokes I centroid over the whole image, or with `ring` (a
    [`eqmodels.ring_center`][] result) about the ring's centre in the annulus of
    ±`RING_ANNULUS_UAS` about its radius (Palumbo et al. 2020's form)."""
    planes = np.asarray(stokes, np.float64)
    if blur_uas > 0:
        fwhm = uas_to_rad(blur_uas)
        planes = np.stack([np.asarray(blur_image(p, grid, fwhm)) for p in planes])
    if ring is not None:
        w = uas_to_rad(RING_ANNULUS_UAS)
        return polarization_summary(
            planes, grid, x0=ring["x0"], y0=ring["y0"],
            r_min=max(ring["radius"] - w, 0.0), r_max=ring["radius"] + w,
        )  # fmt: skip
    i = planes[0]
    x0 = float((i * grid.x[None, :]).sum() / i.sum())
    y0 = float((i * grid.y[:, None]).sum() / i.sum())
    return polarization_summary(planes, grid, x0=x0, y0=y0)


def image_polarization(
    data: PolVisData,
    image_i: np.ndarray,
    grid: ImageGrid,
    *,
    stokes_v: bool = False,
    fast: bool = False,
    forward: str = "separable",
    rounds=None,
    mask_fraction: float | None = None,
    iterations: int | np.integer | None = None,
    tol: float | np.floating | None = None,
    scale_power: float | int | np.floating | np.integer | None = None,
    scale_power_v: float | int | np.floating | np.integer | None = None,
    log=None,
):
    """The polarimetric rounds (`POL_ROUNDS`) on prepared, self-calibrated data
    with the Stokes I image `image_i` fixed: [`image_m87_pol`][]'s second stage.
    `rounds`, `mask_fraction`, `iterations` and `tol` replace `POL_ROUNDS`,
    `POL_MASK_FRACTION`, the L-BFGS steps per round and `POL_STOP` (see
    [`image_m87_pol`][]'s `pol_rounds`, `pol_mask`, `pol_iterations` and
    `pol_tol`); `scale_power` and `scale_power_v` (`>= 0`) replace
    `POL_SCALE_POWER` and `POL_SCALE_POWER_V`, the exponents of the coordinates
    the rounds solve in for Q, U and for V (0: the `PolPixelImage`'s own;
    `scale_power_v` only with `stokes_v`).

    **Returns:** `(model, jones, start, rounds)`: the final `PolPixelImage`, the
    `StationJones` (fitted D-terms), the first objective and its terms at the
    start, and one entry per round (`start`, `end` objective, `terms`, `steps`,
    `reason`, `seconds`).
    """
    say = log if log is not None else (lambda line: None)
    jones = pol_jones(data)
    fitted = [s for s in data.station_names if s not in ZBL_CORRECTED_STATIONS]
    say(f"D-terms fitted for {fitted} (held at 0: zero-baseline corrected)")
    pol_rounds = check_pol_rounds(rounds, stokes_v)
    iterations = check_pol_iterations(iterations, "iterations")
    tol = POL_STOP if (tol := check_pol_tol(tol, "tol")) is None else tol
    power = check_scale_power(scale_power)
    power = POL_SCALE_POWER if power is None else power
    v_power = check_scale_power(scale_power_v, "scale_power_v")
    if v_power is not None and not stokes_v:
        raise ValueError(
            "`scale_power_v` is the exponent of Stokes V's coordinates: give it "
            "with `stokes_v=True`, or leave it out."
        )
    if stokes_v and v_power is None:
        v_power = POL_SCALE_POWER_V
    mask = POL_MASK_FRACTION if mask_fraction is None else mask_fraction
    intensity = PixelImage.from_prior(
        image_i, grid, clipfloor=mask * float(image_i.max())
    )
    model = RescaledPolPixels(
        PolPixelImage.init(intensity, frac=INIT_FRACTION, evpa=0.0, circular=stokes_v),
        power,
        v_power=v_power,
    )
    if iterations is None:
        iterations = POL_ITERATIONS_FAST if fast else POL_ITERATIONS
    rounds, start = [], None
    t = time.perf_counter()
    for r, weights in enumerate(pol_rounds, start=1):
        objective = pol_round_objective(
            data, grid, jones, weights, stokes_v=stokes_v,
            forward=forward,
        )  # fmt: skip
        if r == 1:
            v0, terms0 = _report(objective, (model, jones))
            start = {"value": v0, "terms": terms0}
            chi2 = "  ".join(
                f"{k} {terms0[k]:.3f}" for k in ("m", "vvis") if k in terms0
            )
            say(f"pol start: objective {v0:.4g}  χ² {chi2}")
        sol = solve(
            objective, (model, jones), "lbfgs", max_steps=iterations,
            ftol=tol, gtol=tol,
            params=_filters(model, jones, weights["dterms"]),
        )  # fmt: skip
        model, jones = sol.model
        entry = {
            "round": r,
            "end": float(sol.value),
            "terms": {k: float(v) for k, v in sol.report.items()},
            "start": float(sol.stats["initial_value"]),
            "steps": int(sol.steps),
            "reason": str(sol.reason),
            "seconds": time.perf_counter() - t,
        }
        t = time.perf_counter()
        rounds.append(entry)
        chi2 = "  ".join(
            f"{k} {entry['terms'][k]:.3f}"
            for k in ("m", "pvis", "vvis")
            if k in entry["terms"]
        )
        say(
            f"pol round {r}: {entry['steps']} steps, objective "
            f"{entry['start']:.4g} -> {entry['end']:.4g}"
            f"  χ² {chi2}  ({entry['seconds']:.1f} s)"
        )
    return model.unscaled(), jones, start, rounds


# ------------------------------------------------------------------ the recipe
def image_m87_pol(
    lo,
    hi,
    *,
    stokes_v: bool = False,
    npix: int = 64,
    fov: float = 128.0,
    iterations: int | None = None,
    restarts: int | None = None,
    fast: bool = False,
    zbl: float | None = None,
    prior_fwhm: float | None = None,
    forward: str = "separable",
    pol_rounds=None,
    pol_mask: float | None = None,
    pol_iterations: int | np.integer | None = None,
    pol_tol: float | np.floating | None = None,
    pol_scale_power: float | int | np.floating | np.integer | None = None,
    pol_scale_power_v: float | int | np.floating | np.integer | None = None,
    log=None,
):
    """Image M87 in full polarization: the published Stokes I recipe
    ([`eqmodels.image_m87`][]) on the Stokes I of the two bands, then the linear
    polarization (and Stokes V with `stokes_v`) with that Stokes I image fixed and
    the D-terms of the stations that zero-baseline calibration did not correct
    (all but ALMA, APEX, SMA, JCMT) fitted with the image. Modeled on eht-imaging's
    polarimetric imaging for EHT M87* Paper VII; the steps and numbers are in
    docs/recipe.md ("Polarimetric recipe").

    **Arguments:**

    - `lo`, `hi`: one day's two bands, uvfits paths of the polarimetric release
      (`*_hops_zbl-dtcal+selfcal.uvfits`) or [`eqmodels.PolVisData`][].
    - `stokes_v`: also image Stokes V (`vvis`, `l1v`, `vtv`); else V = 0.
    - `npix`, `fov`: the grid (64 pixels over 128 µas).
    - `iterations`, `restarts`: the Stokes I recipe's (see
      [`eqmodels.image_m87`][]).
    - `fast`: the Stokes I recipe's `fast` settings and at most 50 L-BFGS steps
      per polarimetric round instead of running each to convergence (for CI and
      demos).
    - `zbl`: the compact flux (Jy; `None`: M87's 0.6).
    - `prior_fwhm`: the Stokes I recipe's prior size (µas; `None`: M87's 40).
    - `forward`: the forward model of the data terms.
    - `pol_rounds`: the polarimetric rounds, a list of dicts of weights (`m`,
      `pvis`, `hw`, `ptv`) and `dterms` (whether the D-terms move in that round);
      `None`: the recipe's `POL_ROUNDS`.
    - `pol_mask`: the polarization is free where the Stokes I image exceeds this
      fraction of its peak (in `[0, 1)`; `None`: `POL_MASK_FRACTION`).
    - `pol_iterations`: the most L-BFGS steps per polarimetric round (`None`:
      `POL_ITERATIONS`, or `POL_ITERATIONS_FAST` with `fast`).
    - `pol_tol`: the polarimetric rounds' `ftol` and `gtol`, in (0, 1) (`None`:
      `POL_STOP`, 1e-8; a looser one stops the rounds before the reported
      quantities settle, docs/recipe.md "Where the rounds stop").
    - `pol_scale_power`, `pol_scale_power_v`: the exponents `>= 0` of the
      coordinates the rounds solve in, `w = z · (I / I_max)^-p` per pixel, for
      Q, U and for V (`None`: `POL_SCALE_POWER`, 1, and `POL_SCALE_POWER_V`, 0;
      0: the `PolPixelImage`'s own `w`, where L-BFGS settles the faint pixels far
      more slowly; `pol_scale_power_v` only with `stokes_v`). The objective is
      the same.
    - `log`: a callable taking one line of progress (e.g. `print`), or `None`.

    **Returns:** `(stokes, report)`: the `(4, ny, nx)` image (I, Q, U, V in
    Jy/pixel; I is the Stokes I recipe's) and a dict with `grid`, `data` (the
    self-calibrated `PolVisData`), `stokes_i` (the Stokes I recipe's report),
    `start` and `rounds` (per polarimetric round: objective, each term's value,
    steps, stop reason, seconds), `dterms` (`{station: {"lo": (d_R, d_L),
    "hi": (d_R, d_L)}}`, complex; `fitted` lists the fitted stations),
    `summary` ([`eqmodels.polarization_summary`][] of the image, `β₂` about the
    Stokes I centroid), `summary_20uas` (the same of the image blurred to 20 µas,
    the resolution of the EHT papers' numbers), `ring` (the Stokes I ring's
    centre and radius, [`eqmodels.ring_center`][]), `summary_20uas_ring` (as
    `summary_20uas`, but `β₂` about the ring's centre in the annulus of ±15 µas
    about its radius, Palumbo et al. 2020's form) and `time_s`.
    """
    say = log if log is not None else (lambda line: None)
    stokes_v = check_flag("stokes_v", stokes_v)
    fast = check_flag("fast", fast)
    if forward not in ("direct", "separable", "nufft"):
        raise ValueError(
            f"`forward` must be 'direct', 'separable' or 'nufft', got {forward!r}."
        )
    if not jax.config.read("jax_enable_x64"):
        raise RuntimeError(
            "the recipe runs in float64: call `jax.config.update('jax_enable_x64', "
            "True)` first."
        )
    pol_rounds = check_pol_rounds(pol_rounds, stokes_v)
    pol_iterations = check_pol_iterations(pol_iterations)
    pol_tol = check_pol_tol(pol_tol)
    pol_scale_power = check_scale_power(pol_scale_power, "pol_scale_power")
    pol_scale_power_v = check_scale_power(pol_scale_power_v, "pol_scale_power_v")
    if pol_scale_power_v is not None and not stokes_v:
        raise ValueError(
            "`pol_scale_power_v` is the exponent of Stokes V's coordinates: give "
            "it with `stokes_v=True`, or leave it out."
        )
    if pol_mask is not None and (
        isinstance(pol_mask, bool)
        or not isinstance(pol_mask, int | float)
        or not 0 <= pol_mask < 1
    ):
        raise ValueError(
            f"`pol_mask` must be a fraction of the Stokes I peak in [0, 1) (e.g. "
            f"0.01), got {pol_mask!r}."
        )
    t0 = time.perf_counter()
    zbl_used = ZBL if zbl is None else zbl
    # Read (and check) the polarimetric data first: a Stokes I file is refused
    # before the Stokes I recipe runs.
    raw = (_as_pol(lo, "lo"), _as_pol(hi, "hi"))
    for name, d in zip(("lo", "hi"), raw):
        _check_cross_hands(d, name)
    say("Stokes I: the published 2017 M87 recipe on the bands' Stokes I")
    image_i, rep_i = image_m87(
        [d.stokes_i() for d in raw], npix=npix, fov=fov, iterations=iterations,
        restarts=restarts, fast=fast, zbl=zbl, prior_fwhm=prior_fwhm,
        forward=forward, log=log,
    )  # fmt: skip
    grid = rep_i["grid"]
    data = prepare_pol_data(*raw, zbl=zbl_used)
    data = selfcal_pol(data, image_i, grid)
    uv = np.hypot(np.asarray(data.u), np.asarray(data.v))
    data = data.take(np.flatnonzero(uv >= POL_UV_MIN))
    say(
        f"polarization: {data.n_rows} scan-averaged rows, stations {data.station_names}"
    )
    model, jones, start, rounds = image_polarization(
        data, image_i, grid, stokes_v=stokes_v, fast=fast, forward=forward,
        rounds=pol_rounds, mask_fraction=pol_mask, iterations=pol_iterations,
        tol=pol_tol, scale_power=pol_scale_power,
        scale_power_v=pol_scale_power_v,
        log=log,
    )  # fmt: skip
    stokes = np.array(model())
    stokes[0] = image_i  # the Stokes I recipe's image, exactly
    d = np.asarray(jones.dterms())
    bands = (
        ("lo", "hi") if d.shape[0] == 2 else tuple(str(b) for b in range(d.shape[0]))
    )
    dterms = {
        s: {b: (complex(d[k, j, 0]), complex(d[k, j, 1])) for k, b in enumerate(bands)}
        for j, s in enumerate(data.station_names)
    }
    summary = pol_summary(stokes, grid)
    summary_blur = pol_summary(stokes, grid, SUMMARY_BLUR_UAS)
    ring = ring_center(
        image_i, grid, r_min=uas_to_rad(RING_SEARCH_UAS[0]),
        r_max=uas_to_rad(RING_SEARCH_UAS[1]),
    )  # fmt: skip
    summary_ring = pol_summary(stokes, grid, SUMMARY_BLUR_UAS, ring=ring)
    report = {
        "grid": grid,
        "data": data,
        "stokes_i": rep_i,
        "start": start,
        "rounds": rounds,
        "dterms": dterms,
        "fitted": [n for n in data.station_names if n not in ZBL_CORRECTED_STATIONS],
        "summary": summary,
        "summary_20uas": summary_blur,
        "ring": ring,
        "summary_20uas_ring": summary_ring,
        "time_s": time.perf_counter() - t0,
    }
    return stokes, report
