"""The published 2017 M87 imaging recipe (EHT Collaboration 2019, Paper IV; the
eht-imaging pipeline of data product 2019-D01-02), from uvfits files to an image.

Every number below is the pipeline's. The steps are documented in `docs/recipe.md`.
"""

import math
import os
import time

import jax
import numpy as np

from .._compile import run_once_jit
from .._data._derived import amplitudes, closure_phases, log_closure_amplitudes
from .._data._fitsimage import image_metadata, load_fits
from .._data._noise import add_fractional_noise, add_systematic_noise
from .._data._recipe_ops import (
    blur_image,
    rescale_zero_baseline,
    reverse_taper,
    taper,
)
from .._data._uvfits import load_uvfits
from .._data._visdata import concatenate, VisData
from .._gains._selfcal import self_calibrate
from .._grid import ImageGrid
from .._image._base import AbstractImageModel
from .._image._gaussian import GaussianImage
from .._image._pixel import PixelImage
from .._regularizers._base import beam_from_uv
from .._regularizers._entropy import SimpleEntropy
from .._regularizers._flux import Flux
from .._regularizers._smoothness import TSV, TV
from .._solvers._solve import solve
from .._terms._amp import AmpChi2
from .._terms._base import Objective
from .._terms._cphase import ClosurePhaseChi2
from .._terms._logcamp import LogClosureAmpChi2
from .._terms._vis import VisChi2
from .._units import uas_to_rad
from .._validation import check_flag, warn_user


#: Total compact flux (Jy).
ZBL = 0.6
#: Baselines shorter than this (λ) are intra-site ("zero") baselines.
UV_ZBLCUT = 0.1e9
#: Reverse taper of the data and final blur of the image (µas).
REVERSE_TAPER_UAS = 5.0
#: Time shift per band index (hours) making every timestamp one band's.
BAND_TIME_SHIFT_H = 1e-5
#: Prior / initial Gaussian FWHM (µas).
PRIOR_FWHM_UAS = 40.0
#: Non-closing systematic noise added to every visibility.
FRACTIONAL_NOISE = 0.02
#: a-priori SEFD error budget per site (Paper IV / the pipeline script).
SEFD_ERROR_BUDGET = {
    "AA": 0.10,
    "AP": 0.11,
    "AZ": 0.07,
    "LM": 0.22,
    "PV": 0.10,
    "SM": 0.15,
    "JC": 0.14,
    "SP": 0.07,
}
#: The stations the closing self-calibrations of rounds 3 and 4 solve for (the
#: pipeline's `sites`): every 2017 station but the IRAM 30 m (PV), whose gains stay
#: 1 (those of the stations not in the data are ignored).
SELFCAL_STATIONS = ("SM", "JC", "AA", "AP", "LM", "SP", "AZ")
#: The 2017 sites under their codes in the 2018 files (APEX, JCMT, SMA, SMT): the
#: recipe's per-site settings apply to them under either code.
SITE_CODES_2018 = {"AX": "AP", "MM": "JC", "SW": "SM", "MG": "AZ"}
#: Regularizer weights (all rounds).
REGULARIZERS = {"simple": 100.0, "tv": 1.0, "tv2": 1.0, "flux": 1e4}
#: Data-term weights, systematic noise and closing self-calibration of each round.
ROUNDS = (
    {"amp": 0.2, "cphase": 1.0, "logcamp": 1.0},
    {"vis": 2.0, "cphase": 10.0, "logcamp": 10.0},
    {"vis": 10.0, "cphase": 20.0, "logcamp": 20.0},
    {"vis": 10.0, "cphase": 20.0, "logcamp": 20.0},
)


def m87_systematic_noise() -> dict[str, float]:
    """The per-site systematic noise of rounds 1 and 2: `((1 + e)^½ − 1) / 4` for
    the SEFD error `e` of each site, plus 0.15 for the LMT (the pipeline's numbers).

    Keyed by the 2017 station codes: for files with the 2018 codes, rename its keys
    first (`AP` → `AX`, `JC` → `MM`, `SM` → `SW`, `AZ` → `MG`; the recipe does);
    [`eqmodels.add_systematic_noise`][] refuses the table as it is there.
    """
    sys = {k: (math.sqrt(1.0 + e) - 1.0) * 0.25 for k, e in SEFD_ERROR_BUDGET.items()}
    sys["LM"] += 0.15
    return sys


def _site(code: str) -> str:
    """The 2017 code of a station (its own code unless a 2018 alias)."""
    return SITE_CODES_2018.get(code, code)


def _check_recipe_applies(
    data: VisData, zbl_given: bool, prior_given: bool = False
) -> None:
    """Refuse another source than M87 unless its own settings are given, and warn
    about stations the recipe has no settings for (no systematic noise, no
    self-calibration).

    The recipe's compact flux (`zbl`, 0.6 Jy) and prior size (`prior_fwhm`, 40 µas)
    are M87's: imaging Sgr A* with them gives a confident, wrong image. Another
    source (one whose name does not contain "M87") is imaged only when both are
    given; otherwise `ValueError`, naming both.
    """
    if "M87" not in str(data.source).upper() and not (zbl_given and prior_given):
        missing = [
            name
            for name, given in (("zbl", zbl_given), ("prior_fwhm", prior_given))
            if not given
        ]
        raise ValueError(
            f"the data's source is {data.source!r}, not M87: the recipe's settings "
            f"are M87's (compact flux zbl={ZBL} Jy, a {PRIOR_FWHM_UAS:g} µas "
            "Gaussian prior). Give the source's own compact flux and prior size, "
            "`zbl` (Jy) and `prior_fwhm` (µas) — the command line's --zbl and "
            f"--prior-fwhm; missing: {', '.join(missing)}."
        )
    unknown = [s for s in data.station_names if _site(s) not in SEFD_ERROR_BUDGET]
    if unknown:
        warn_user(
            f"stations {unknown} are not in the 2017 recipe's tables: they get no "
            "systematic noise in rounds 1-2 and no self-calibration in rounds 3-4 "
            f"(known: {sorted(SEFD_ERROR_BUDGET)}, and the 2018 codes "
            f"{sorted(SITE_CODES_2018)}).",
        )


class Progress:
    """Progress lines `[stage k/N] what` for the recipe's stages, through `say`
    (the recipe's `log`): data preparation, the LMT self-calibration, and for each
    round its imaging runs (the first compiles the round's objective) and its
    closing self-calibration; `N = 2 + 2 · rounds`. A round's line says which of
    all the imaging runs it makes (`runs 1-4 of 16`)."""

    def __init__(self, say, rounds: int, runs_per_round: int):
        self.say = say
        self.total = 2 + 2 * rounds
        self.runs_per_round = runs_per_round
        self.runs = rounds * runs_per_round
        self.done = 0

    def __call__(self, what: str) -> None:
        self.done += 1
        self.say(f"[stage {self.done}/{self.total}] {what}")

    def round(self, r: int, rounds: int, compiles: bool) -> None:
        """Round `r`'s line: its runs among all, and whether its objective is
        compiled first (a round with the previous round's terms reuses its
        program)."""
        first = (r - 1) * self.runs_per_round + 1
        last = r * self.runs_per_round
        runs = f"run {first}" if first == last else f"runs {first}-{last}"
        n = self.runs_per_round
        self(
            f"round {r}/{rounds}: {'compiling its objective, then ' if compiles else ''}"
            f"{n} L-BFGS run{'s' if n > 1 else ''} ({runs} of {self.runs})"
        )


# ------------------------------------------------------------------ data steps
def _as_data(x) -> VisData:
    if isinstance(x, VisData):
        return x
    if isinstance(x, str | os.PathLike):
        return load_uvfits(x)
    raise TypeError(f"expected a uvfits path or a VisData, got {type(x).__name__}.")


def load_bands(paths_or_data) -> VisData:
    """Each data set scan-averaged, then joined (one band per frequency), in order
    of day and frequency whatever the order given: the lowest band is band 0 (the
    pipeline shifts the others' times), so the image does not depend on the order
    of the files."""
    if not isinstance(paths_or_data, list | tuple):
        paths_or_data = [paths_or_data]  # one data set, or `_as_data`'s TypeError
    parts = [_as_data(x).scan_average() for x in paths_or_data]
    if not parts:
        raise ValueError("give at least one uvfits file or VisData.")
    parts.sort(key=lambda p: (p.mjd, min(p.band_freqs)))
    days = sorted({p.mjd for p in parts})
    if len(days) > 1:
        warn_user(
            f"the data sets are from {len(days)} days (MJD {days}): the recipe "
            "images one day's bands; the days are joined (each in its own hours "
            f"of MJD {days[0]}) and the image is dated MJD {days[0]}.",
        )
    return parts[0] if len(parts) == 1 else concatenate(parts)


def drop_absent_stations(data: VisData) -> VisData:
    """Remove stations with no rows from the station table (eht-imaging trims
    `obs.tarr` the same way)."""
    used = np.union1d(np.asarray(data.ant1), np.asarray(data.ant2))
    return _permute_stations(data, used)


def order_stations_by_snr(data: VisData) -> VisData:
    """Order the station table by the median SNR (`|V| / σ`) of each station's
    rows, highest first, as eht-imaging's `reorder_tarr_snr` does: the first
    stations are preferred as closure references when the minimal closure sets are
    chosen. (The median, not the sum: a sum favours the stations with the most
    rows, and changes most of the minimal closure amplitudes.) Every station must
    have rows (`drop_absent_stations` first)."""
    snr = np.asarray(data.snr)
    a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
    median = np.array(
        [np.median(snr[(a1 == i) | (a2 == i)]) for i in range(data.n_stations)]
    )
    # eht-imaging's order is `argsort(median)[::-1]`; ties (equal medians) are
    # broken by the later station first there, by the earlier one here.
    return _permute_stations(data, np.argsort(-median, kind="stable"))


def _permute_stations(data, order):
    order = np.asarray(order)
    new = np.full(data.n_stations, -1)
    new[order] = np.arange(order.size)
    return data.replace(
        station_names=tuple(data.station_names[i] for i in order),
        station_xyz=np.asarray(data.station_xyz)[order],
        ant1=new[np.asarray(data.ant1)],
        ant2=new[np.asarray(data.ant2)],
    )


#: `zbl` more than this factor above or below the data's zero-baseline flux (the
#: median intra-site amplitude, |uv| < 0.1 Gλ) is refused unless
#: `check_zbl=False` (the CLI's --zbl-anyway): a compact flux is some fraction of
#: the total (M87: 0.6 of about 1.2 Jy), not a flux in mJy or another source's.
ZBL_FACTOR = 10.0


def check_zbl_against_data(data: VisData, zbl: float) -> None:
    """Refuse a `zbl` more than `ZBL_FACTOR` from the data's zero-baseline flux."""
    short = np.asarray(data.uvdist) < UV_ZBLCUT
    if not short.any():
        return  # refused by `prepare_data` with its own message
    current = float(np.median(np.abs(np.asarray(data.vis))[short]))
    if current > 0 and not (1 / ZBL_FACTOR <= zbl / current <= ZBL_FACTOR):
        raise ValueError(
            f"`zbl`={zbl:g} Jy is {zbl / current:.3g} times the data's zero-baseline "
            f"flux ({current:.4g} Jy, the median amplitude of the {int(short.sum())} "
            f"intra-site rows shorter than {UV_ZBLCUT:g} λ), more than a factor "
            f"{ZBL_FACTOR:g} away: every short baseline would be rescaled by that "
            "much. Give the compact flux in Jy (M87: 0.6), or pass "
            "`check_zbl=False` (the command line's --zbl-anyway) to use it anyway."
        )


def prepare_data(paths_or_data, *, zbl: float = ZBL, check_zbl: bool = True) -> VisData:
    """The pipeline's data preparation, before any self-calibration: bands
    scan-averaged and joined, intra-site baselines rescaled to `zbl` (by
    `zbl` / the median ALMA–APEX amplitude), absent stations dropped, stations
    ordered by SNR, each band's times shifted by 1e-5 h per band index,
    reverse-tapered by 5 µas, 2 % fractional noise. With `check_zbl`, a `zbl`
    more than `ZBL_FACTOR` (10) from the data's zero-baseline flux is refused."""
    data = drop_absent_stations(load_bands(paths_or_data))
    # One band per timestamp (eht-imaging's pipeline adds 1e-5 h to the second
    # band's times "to avoid mixed closure products"): per-timestamp
    # self-calibration then solves each band on its own.
    band = np.asarray(data.band)
    if band.max() > 0:
        data = data.replace(time=np.asarray(data.time) + BAND_TIME_SHIFT_H * band)
    by_site = {_site(n): n for n in data.station_names}
    pair = (by_site["AA"], by_site["AP"]) if {"AA", "AP"} <= set(by_site) else None
    if pair is None and not np.any(data.uvdist < UV_ZBLCUT):
        raise ValueError(
            "the data have no intra-site baseline (ALMA-APEX, SMA-JCMT: shorter "
            f"than {UV_ZBLCUT:g} λ), which the recipe scales to the compact flux "
            f"`zbl`; shortest baseline {float(np.min(data.uvdist)):.4g} λ."
        )
    if check_flag("check_zbl", check_zbl):
        check_zbl_against_data(data, zbl)
    data = rescale_zero_baseline(data, zbl, uv_max=UV_ZBLCUT, baseline=pair)
    data = order_stations_by_snr(data)
    data = reverse_taper(data, uas_to_rad(REVERSE_TAPER_UAS))
    return add_fractional_noise(data, FRACTIONAL_NOISE)


def initial_image(
    grid: ImageGrid, zbl: float = ZBL, fwhm_uas: float = PRIOR_FWHM_UAS
) -> np.ndarray:
    """The prior and first image: a circular Gaussian of `fwhm_uas` (40 µas) FWHM
    and `zbl` Jy, plus a 1e-3 copy offset by one FWHM in both axes (breaks the
    symmetry)."""
    fwhm = uas_to_rad(fwhm_uas)
    g, g2 = _render(
        (
            GaussianImage(grid, zbl, fwhm),
            GaussianImage(grid, zbl * 1e-3, fwhm, x0=fwhm, y0=fwhm),
        )
    )
    return np.asarray(g) + np.asarray(g2)


@run_once_jit
def _render(models):
    """The images of `models`, in one program (not one eager program per
    operation and shape)."""
    return tuple(m() for m in models)


def selfcal_per_band(data: VisData, image, grid, *, fit_on=None, **kwargs) -> VisData:
    """[`eqmodels.self_calibrate`][] per timestamp (eht-imaging's
    `solution_interval=0`) on `fit_on` (default `data`), the gains applied to
    `data` (nearest timestamp).

    The bands of one day share timestamps after scan averaging, and their phases
    differ: one complex gain per station and scan for both bands cannot fit both,
    and its amplitude shrinks (the LMT gain came out 0.3 instead of about 0.85 on
    2017-04-11). As eht-imaging's pipeline, [`eqmodels.image_m87`][] shifts each
    band's times by 1e-5 h per band index ([`prepare_data`]), so that every
    timestamp holds one band and the solutions are per band. A row takes the
    nearest solution of either band (`bands="any"`), as eht-imaging's `applycal`
    on the merged bands (the LMT step solves on the short baselines only, and some
    LMT rows of one band have their nearest solution in the other).
    """
    fit_on = data if fit_on is None else fit_on
    _, gains = self_calibrate(fit_on, image, grid=grid, interval="timestamp", **kwargs)
    return gains.calibrate(data, bands="any", extrapolate=True)


# ------------------------------------------------------------------ objectives
def round_objective(
    data: VisData,
    grid: ImageGrid,
    prior: np.ndarray,
    weights: dict,
    systematic_noise,
    *,
    beam: float,
    zbl: float = ZBL,
    forward: str = "separable",
) -> Objective:
    """One round's objective, eht-imaging's `α(χ² − 1) + β R` (`chi2_offset=True`,
    normalised regularizers)."""
    terms, w = [], []
    if "amp" in weights:
        amp = amplitudes(data, systematic_noise=systematic_noise)
        terms.append(AmpChi2.from_data(amp, grid, forward=forward))
        w.append(weights["amp"])
    if "vis" in weights:
        vis = add_systematic_noise(data, systematic_noise)
        terms.append(VisChi2.from_data(vis, grid, forward=forward))
        w.append(weights["vis"])
    cp = closure_phases(data, uv_min=UV_ZBLCUT)
    terms.append(ClosurePhaseChi2.from_data(cp, grid, forward=forward))
    w.append(weights["cphase"])
    lca = log_closure_amplitudes(data)
    terms.append(LogClosureAmpChi2.from_data(lca, grid, forward=forward))
    w.append(weights["logcamp"])
    norm = dict(flux=zbl, beam=beam, normalise=True)
    terms += [
        SimpleEntropy(prior, flux=zbl, normalise=True),
        TV(grid, **norm),
        TSV(grid, **norm),
        Flux(zbl, normalise=True),
    ]
    w += [REGULARIZERS[k] for k in ("simple", "tv", "tv2", "flux")]
    return Objective(terms, w, chi2_offset=True)


_value_and_report = run_once_jit(
    lambda objective, image: objective.value_and_report(image)
)


def _report(objective, image):
    value, report = _value_and_report(objective, image)
    return float(value), {k: float(report[k]) for k in objective.names}


# ------------------------------------------------------------------ the recipe
def image_m87(
    paths_or_data,
    *,
    npix: int = 64,
    fov: float = 128.0,
    iterations: int | None = None,
    restarts: int | None = None,
    stop: float = 1e-4,
    fast: bool = False,
    zbl: float | None = None,
    prior_fwhm: float | None = None,
    forward: str = "separable",
    log=None,
    check_zbl: bool = True,
):
    """Image M87 with the published 2017 eht-imaging recipe (Paper IV).

    **Arguments:**

    - `paths_or_data`: uvfits paths and/or [`eqmodels.VisData`][] (one day's bands:
      low and high band).
    - `npix`, `fov`: the grid, `npix²` pixels over `fov` µas (64, 128).
    - `iterations`: L-BFGS steps per imaging run (100; 30 with `fast`).
    - `restarts`: runs from the blurred result after each round's first (3; 1
      with `fast`).
    - `stop`: scipy-style `ftol` and `gtol` of every run (1e-4).
    - `fast`: fewer iterations and restarts (for CI and demos).
    - `zbl`: the compact flux (Jy; `None`: M87's 0.6). One more than 10 times
      above or below the data's zero-baseline flux (the median intra-site
      amplitude) is refused.
    - `prior_fwhm`: the FWHM of the Gaussian prior and first image (µas; `None`:
      M87's 40). Data of another source than M87 are refused unless both `zbl`
      and `prior_fwhm` are given.
    - `check_zbl`: `False` to take a `zbl` far from the data's zero-baseline flux
      anyway.
    - `forward`: the forward model of the data terms.
    - `log`: a callable taking one line of progress (e.g. `print`), or `None`:
      a `[stage k/N]` line per stage (data, self-calibrations, each round's runs
      with the count of all runs) and a χ² table row per run.

    **Returns:** `(image, report)`: the final `(ny, nx)` image (Jy/pixel, blurred by
    5 µas) and a dict with `grid`, `data` (the prepared `VisData`), `start` (the
    round-1 objective and each term's value at the prior), `runs` (one entry per
    imaging run: round, run, final objective and each term's value, steps, stop
    reason, seconds), `rounds` (each round's last run), `time_s` and `stages_s`
    (seconds in data preparation, self-calibration, building objectives, imaging),
    `flux`, and `fits_metadata`: the source, position, frequency and date that
    `save_fits(image, report["grid"], path, data=report["data"])` writes (as the
    command line does), as keywords of `save_fits`.
    """
    say = log if log is not None else (lambda line: None)
    if npix is None:
        raise ValueError("`npix` must be an int >= 1, got None.")
    for name, value, low in (
        ("npix", npix, 1),
        ("iterations", iterations, 1),
        ("restarts", restarts, 0),
    ):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | np.integer)
            or value < low
        ):
            raise ValueError(f"`{name}` must be an int >= {low}, got {value!r}.")
    real = int | float | np.integer | np.floating
    if isinstance(fov, bool) or not isinstance(fov, real):
        raise TypeError(f"`fov` must be a number of µas, got {fov!r}.")
    # Checked here, by their own names, before any data are read: otherwise they
    # surface as `flux` / `ftol` errors, `stop`'s only after the self-calibration.
    for name, value, what in (
        ("zbl", zbl, "a compact flux in Jy, > 0"),
        ("prior_fwhm", prior_fwhm, "the prior's FWHM in µas, > 0"),
        ("stop", stop, "the runs' `ftol` and `gtol`, >= 0"),
    ):
        if value is None and name in ("zbl", "prior_fwhm"):
            continue
        number = not isinstance(value, bool) and isinstance(value, real)
        low_ok = number and (value > 0 if name != "stop" else value >= 0)
        if not (number and math.isfinite(value) and low_ok):
            raise ValueError(
                f"`{name}` must be a finite number ({what}), got {value!r}."
            )
    fast = check_flag("fast", fast)
    iterations = (30 if fast else 100) if iterations is None else int(iterations)
    restarts = (1 if fast else 3) if restarts is None else int(restarts)
    if not jax.config.read("jax_enable_x64"):
        raise RuntimeError(
            "the recipe runs in float64: call `jax.config.update('jax_enable_x64', "
            "True)` first."
        )
    t_start = time.perf_counter()
    clock = {"prepare": 0.0, "selfcal": 0.0, "objectives": 0.0, "imaging": 0.0}

    def tick(stage, t0):
        t = time.perf_counter()
        clock[stage] += t - t0
        return t

    prior_given = prior_fwhm is not None
    prior_fwhm = PRIOR_FWHM_UAS if prior_fwhm is None else float(prior_fwhm)
    if not fov >= 2 * prior_fwhm:
        raise ValueError(
            f"`fov` must be at least {2 * prior_fwhm:g} µas, got {fov:g}: the "
            "prior's symmetry-breaking copy sits one FWHM "
            f"({prior_fwhm:g} µas) from the centre in both axes."
        )
    grid = ImageGrid.from_fov(int(npix), float(fov))
    zbl_given = zbl is not None
    zbl = ZBL if zbl is None else zbl
    progress = Progress(say, len(ROUNDS), restarts + 1)
    progress("data: loading, scan-averaging, joining the bands, zero baselines")
    # A given `zbl` is checked against the data (M87's default is, for M87's
    # data; another source's is refused by `_check_recipe_applies` below).
    checked = check_flag("check_zbl", check_zbl) and zbl_given
    data0 = prepare_data(paths_or_data, zbl=zbl, check_zbl=checked)  # obs_sc_init
    _check_recipe_applies(data0, zbl_given=zbl_given, prior_given=prior_given)
    say(f"data: {data0.n_rows} scan-averaged rows, stations {data0.station_names}")
    res = beam_from_uv(data0.u, data0.v)  # nominal resolution (1/longest baseline)
    prior = initial_image(grid, zbl, prior_fwhm)
    taper_fwhm = uas_to_rad(REVERSE_TAPER_UAS)
    t = tick("prepare", t_start)

    # LMT amplitude+phase self-calibration against a 60 µas Gaussian, on the
    # short baselines (re-tapered: the reverse taper undone), applied to all data.
    data = data0
    has_lmt = "LM" in data0.station_names
    progress(f"self-calibration: {'the LMT' if has_lmt else 'none (no LMT)'}")
    if has_lmt:
        short = taper(data0.select_uvdist(uv_max=2e9), taper_fwhm)
        gauss = np.asarray(GaussianImage(grid, zbl, uas_to_rad(60.0))())
        data = selfcal_per_band(
            data0, gauss, grid, fit_on=short, method="both", stations=["LM"],
            gain_tol=1.0,
        )  # fmt: skip
    t = tick("selfcal", t)

    noise = m87_systematic_noise()
    sys12 = {n: noise[_site(n)] for n in data.station_names if _site(n) in noise}
    systematics = (sys12, sys12, 0.01, 0.01)
    runs, rounds = [], []
    start = None
    image = prior
    for r, weights in enumerate(ROUNDS, start=1):
        init = prior if r == 1 else np.asarray(blur_image(image, grid, res))
        objective = round_objective(
            data, grid, prior, weights, systematics[r - 1],
            beam=res, zbl=zbl, forward=forward,
        )  # fmt: skip
        t = tick("objectives", t)
        new_terms = r == 1 or weights.keys() != ROUNDS[r - 2].keys()
        progress.round(r, len(ROUNDS), compiles=new_terms)
        if r == 1:
            say(table_header())  # over round 1's rows
            v0, terms0 = _report(objective, init)
            start = {"value": v0, "terms": terms0}
            row = {"round": 1, "run": "-", "steps": 0, "end": v0, "terms": terms0}
            say(_table_row({**row, "seconds": 0.0}))
        for run in range(restarts + 1):
            if run > 0:
                init = np.asarray(blur_image(image, grid, res))
            model = PixelImage.from_prior(prior, grid, init=init)
            sol = solve(
                objective, model, "lbfgs", max_steps=iterations, ftol=stop, gtol=stop
            )
            image = np.asarray(sol.model())
            entry = {
                "round": r,
                "run": run,
                "end": float(sol.value),
                "terms": {k: float(v) for k, v in sol.report.items()},
                "steps": int(sol.steps),
                "reason": str(sol.reason),
                "seconds": time.perf_counter() - t,
            }
            t = tick("imaging", t)
            runs.append(entry)
            say(_table_row(entry))
        rounds.append(runs[-1])
        progress(f"round {r}/{len(ROUNDS)}: self-calibration")
        if r == 1:
            data = selfcal_per_band(data, image, grid, method="phase")
        elif r == 2:
            data = selfcal_per_band(data0, image, grid, method="phase")
            if "LM" in data.station_names:
                data = selfcal_per_band(
                    data, image, grid, method="both", stations=["LM"],
                    gain_tol=(0.02, 0.2),
                )  # fmt: skip
        else:
            data = selfcal_per_band(
                data0, image, grid, method="both", gain_tol=(0.02, 0.2),
                stations=[
                    n for site in SELFCAL_STATIONS for n in data0.station_names
                    if _site(n) == site
                ],
            )  # fmt: skip
        t = tick("selfcal", t)
    final = np.asarray(blur_image(image, grid, taper_fwhm))
    report = {
        "grid": grid,
        "data": data0,
        "start": start,
        "runs": runs,
        "rounds": rounds,
        "time_s": time.perf_counter() - t_start,
        "stages_s": clock,
        "flux": float(final.sum()),
        "fits_metadata": image_metadata(data0),
    }
    stages = ", ".join(f"{k} {v:.1f}" for k, v in clock.items())
    say(
        f"done in {report['time_s']:.1f} s ({stages} s); total flux "
        f"{report['flux']:.3f} Jy"
    )
    return final, report


TABLE_KEYS = ("amp", "vis", "cphase", "logcamp")


def table_header() -> str:
    cols = "".join(f"{k:>9}" for k in TABLE_KEYS)
    return f"{'round':>5} {'run':>3} {'steps':>5} {'objective':>12}{cols} {'s':>6}"


def _table_row(e) -> str:
    cols = "".join(
        f"{e['terms'][k]:9.3f}" if k in e["terms"] else f"{'-':>9}" for k in TABLE_KEYS
    )
    return (
        f"{e['round']:5d} {e['run']:>3} {e['steps']:5d} {e['end']:12.4g}{cols}"
        f" {e['seconds']:6.1f}"
    )


# ------------------------------------------------------------------ scoring
def closure_score(image, datasets, *, grid: ImageGrid | None = None) -> dict:
    """A calibration-independent score of an image against data: the closure-phase
    χ² (baselines shorter than 0.1 Gλ excluded) and the log-closure-amplitude χ²
    (intra-site baselines, < 0.1 Gλ, flagged), on the bands scan-averaged and
    joined, with 2 % fractional noise (how the EHT pipeline's image was scored:
    cphase 0.72, logcamp 0.70 on 2017-04-11).

    **Arguments:**

    - `image`: an `(ny, nx)` array of finite values (with `grid`), an image model
      (its own grid), or a FITS path ([`eqmodels.load_fits`][]).
    - `datasets`: uvfits paths and/or [`eqmodels.VisData`][] (unaveraged or
      scan-averaged).
    - `grid`: the image's grid when `image` is an array.

    **Returns:** `{"cphase": χ², "logcamp": χ²}` (no offset).
    """
    if isinstance(image, str | os.PathLike):
        if grid is not None:
            raise TypeError(
                "`grid` is read from the FITS file: give it only with an array image."
            )
        image, grid = load_fits(image)
    elif isinstance(image, AbstractImageModel):
        if grid is not None and grid != image.grid:
            raise ValueError(
                "`grid` differs from the image model's own grid: leave `grid` out."
            )
        image, grid = image(), image.grid
    if grid is None:
        raise TypeError("`grid` is required when `image` is an array.")
    if np.ma.isMaskedArray(image):
        raise TypeError(
            "`image` is a masked array: a score needs every pixel; pass "
            "`image.filled(0.0)` (or the fill value you mean)."
        )
    image = np.asarray(image, np.float64)
    if image.shape != grid.shape:
        raise ValueError(
            f"`image` has shape {image.shape}, but `grid` is {grid.shape}."
        )
    bad = int(np.sum(~np.isfinite(image)))
    if bad:
        raise ValueError(
            f"`image` has {bad} non-finite pixel(s) (NaN or inf): a score of it "
            "would be meaningless."
        )
    cp, lca = score_closures(datasets)
    return {
        "cphase": float(ClosurePhaseChi2.from_data(cp, grid)(image)),
        "logcamp": float(LogClosureAmpChi2.from_data(lca, grid)(image)),
    }


def score_closures(datasets):
    """The closure phases and log closure amplitudes that [`closure_score`][]
    scores against (its data preparation, shared with the multi-frequency
    recipe's per-band tolerance)."""
    data = add_fractional_noise(load_bands(datasets), FRACTIONAL_NOISE)
    cp = closure_phases(data, uv_min=UV_ZBLCUT)
    lca = log_closure_amplitudes(data.select_uvdist(uv_min=UV_ZBLCUT))
    return cp, lca
