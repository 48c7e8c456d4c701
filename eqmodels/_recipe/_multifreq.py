"""Multi-frequency imaging of several bands (issue 40): the published Stokes I
recipe per band, then one joint round fitting the image at a reference frequency
and a spectral-index map. The steps are documented in `docs/multifrequency.md`."""

import numpy as np

from .._data._derived import closure_phases, log_closure_amplitudes
from .._data._recipe_ops import taper
from .._image._multifreq import MultiFrequencyImage
from .._image._pixel import PixelImage
from .._regularizers._base import beam_from_uv
from .._regularizers._entropy import SimpleEntropy
from .._regularizers._flux import Flux
from .._regularizers._smoothness import TSV, TV
from .._regularizers._spectral import SpectralL2, SpectralTV
from .._solvers._solve import solve
from .._terms._at_frequency import AtFrequency
from .._terms._base import Objective
from .._terms._cphase import ClosurePhaseChi2
from .._terms._logcamp import LogClosureAmpChi2
from .._units import uas_to_rad
from ._m87 import (
    image_m87,
    REGULARIZERS,
    REVERSE_TAPER_UAS,
    ROUNDS,
    score_closures,
    UV_ZBLCUT,
    ZBL,
)


#: Weights of the spectral regularizers of the joint round (normalised: the mean
#: square of α, and its total variation per beam).
SPECTRAL_WEIGHTS = {"l2_alpha": 1.0, "tv_alpha": 1.0}


def image_multifreq(
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
    spectral_weights: dict | None = None,
):
    """Image several bands of one observation jointly: an image `I₀` at the
    reference frequency `ν₀` (the bands' mean) and a spectral-index map `α`,
    `I_ν = I₀ (ν/ν₀)^α`.

    1. Each band alone through [`eqmodels.image_m87`][] (the published Stokes I
       recipe: its rounds, restarts and self-calibrations).
    2. One joint round from the mean of the band images and `α = 0`: every band's
       closure phases and log closure amplitudes at its frequency
       ([`eqmodels.AtFrequency`][]; closures, so the per-band gains do not
       enter), on the prepared data with the recipe's 5 µas reverse taper undone
       (the band images of step 1 are the recipe's final images, blurred by those
       5 µas, so the joint model is an image of the same kind), weighted as in
       the recipe's last round (20 and 20 per band), the recipe's regularizers
       on `I₀` (`simple` towards the starting image, `tv`,
       `tv2`, `flux`; normalised) and [`eqmodels.SpectralL2`][] +
       [`eqmodels.SpectralTV`][] on `α` (`spectral_weights`), L-BFGS over
       `(ln I₀, α)`: at most 500 steps (30 with `fast`; `iterations` if given).

    **Arguments:**

    - `paths_or_data`: one uvfits path or [`eqmodels.VisData`][] per band (at
      least two, at different frequencies).
    - `npix`, `fov`, `iterations`, `restarts`, `stop`, `fast`, `zbl`,
      `prior_fwhm`, `forward`, `check_zbl`, `log`: as for
      [`eqmodels.image_m87`][] (`iterations` also bounds the joint round).
    - `spectral_weights`: `{"l2_alpha": w, "tv_alpha": w}` (default 1 and 1).

    **Returns:** `(model, report)`: the [`eqmodels.MultiFrequencyImage`][]
    (`model()` is `I₀` in Jy/pixel, `model.alpha` the α map) and a dict with
    `grid`, `freq0`, `freqs`, `bands` (each band's `(image, report)` from step 1),
    `data` (each band's prepared `VisData`), `start` / `end` (the joint
    objective's value and terms), `steps`, and `closures`: per band, its
    frequency and the [`eqmodels.closure_score`][] of the band's image alone
    (step 1) and of the joint model at the band's frequency, on the band's file
    or data as given (`{"freq", "alone", "joint", "n", "scatter", "within"}`;
    each of these a dict `{"cphase", "logcamp"}`: the two scores (the
    pipeline's scoring, 2 % fractional noise), the number of closures `N`, the
    standard deviation `√(2/N)` of a reduced χ² of `N` terms, and whether the
    joint score is at most the alone score plus that scatter).

    A joint model has fewer degrees of freedom than one image per band, and
    bands a few GHz apart cannot differ by more than `(ν/ν₀)^α` allows: a band's
    own image, which also fits that band's noise, can score lower on its band
    than the joint model by up to the χ² statistic's own scatter. `within`
    reports that comparison (docs/multifrequency.md).
    """
    say = log if log is not None else (lambda line: None)
    many = isinstance(paths_or_data, list | tuple)
    items = list(paths_or_data) if many else [paths_or_data]
    if len(items) < 2:
        raise ValueError(
            "`paths_or_data` must give at least two bands (a list of one uvfits "
            f"file or VisData per band), got {len(items)}."
        )
    weights = dict(SPECTRAL_WEIGHTS)
    if spectral_weights is not None:
        unknown = set(spectral_weights) - set(SPECTRAL_WEIGHTS)
        if unknown:
            raise ValueError(
                f"`spectral_weights` has unknown keys {sorted(unknown)}: give "
                f"{sorted(SPECTRAL_WEIGHTS)}."
            )
        weights.update(spectral_weights)
    kw = dict(
        npix=npix, fov=fov, iterations=iterations, restarts=restarts, stop=stop,
        fast=fast, zbl=zbl, prior_fwhm=prior_fwhm, forward=forward, log=log,
        check_zbl=check_zbl,
    )  # fmt: skip
    bands = []
    for k, item in enumerate(items):
        say(f"[band {k + 1}/{len(items)}] the Stokes I recipe")
        bands.append(image_m87([item], **kw))
    data = [rep["data"] for _, rep in bands]
    freqs = [float(np.mean(d.band_freqs)) for d in data]
    if len(set(freqs)) < len(freqs):
        raise ValueError(
            f"two bands are at one frequency ({freqs} Hz): give each band once."
        )
    grid = bands[0][1]["grid"]
    flux = ZBL if zbl is None else float(zbl)
    freq0 = float(np.mean(freqs))
    start = np.mean([np.asarray(img) for img, _ in bands], axis=0)
    start = np.maximum(start, 1e-6 * start.max())
    start *= flux / start.sum()
    u = np.concatenate([np.asarray(d.u) for d in data])
    v = np.concatenate([np.asarray(d.v) for d in data])
    beam = beam_from_uv(u, v)
    terms, w = [], []
    untaper = uas_to_rad(REVERSE_TAPER_UAS)
    for d, nu in zip(data, freqs):
        d = taper(d, untaper)
        terms += [
            AtFrequency(
                ClosurePhaseChi2.from_data(
                    closure_phases(d, uv_min=UV_ZBLCUT), grid, forward=forward
                ),
                nu,
            ),
            AtFrequency(
                LogClosureAmpChi2.from_data(
                    log_closure_amplitudes(d), grid, forward=forward
                ),
                nu,
            ),
        ]
        w += [ROUNDS[-1]["cphase"], ROUNDS[-1]["logcamp"]]
    norm = dict(flux=flux, beam=beam, normalise=True)
    terms += [
        SimpleEntropy(start, flux=flux, normalise=True),
        TV(grid, **norm),
        TSV(grid, **norm),
        Flux(flux, normalise=True),
        SpectralL2(grid, "alpha", normalise=True),
        SpectralTV(grid, "alpha", beam=beam, normalise=True),
    ]
    w += [REGULARIZERS[k] for k in ("simple", "tv", "tv2", "flux")]
    w += [weights["l2_alpha"], weights["tv_alpha"]]
    objective = Objective(terms, w, chi2_offset=True)
    model = MultiFrequencyImage(
        PixelImage.from_image(start, grid), freq0, np.zeros(grid.shape)
    )
    steps = (30 if fast else 500) if iterations is None else int(iterations)
    say(f"[joint] {len(items)} bands, ν₀ = {freq0 / 1e9:.3f} GHz: I₀ and α")
    value0, report0 = objective.value_and_report(model)
    sol = solve(objective, model, "lbfgs", max_steps=steps, ftol=stop, gtol=stop)
    value1, report1 = objective.value_and_report(sol.model)
    say(f"[joint] objective {float(value0):.4g} -> {float(value1):.4g}")
    scores = [
        _band_scores(np.asarray(image_b), np.asarray(sol.model.at(nu)), item, grid)
        | {"freq": nu}
        for (image_b, _), item, nu in zip(bands, items, freqs)
    ]
    for sc in scores:
        a, j, sd, ok = sc["alone"], sc["joint"], sc["scatter"], sc["within"]
        say(
            f"[joint] {sc['freq'] / 1e9:.3f} GHz closure χ² (alone -> joint): cphase "
            f"{a['cphase']:.3f} -> {j['cphase']:.3f}, logcamp "
            f"{a['logcamp']:.3f} -> {j['logcamp']:.3f} (scatter √(2/N) "
            f"{sd['cphase']:.2f}, {sd['logcamp']:.2f}: "
            f"{'within' if all(ok.values()) else 'NOT within'})"
        )
    return sol.model, {
        "grid": grid,
        "freq0": freq0,
        "freqs": freqs,
        "bands": bands,
        "data": data,
        "start": {"objective": float(value0), **_floats(report0)},
        "end": {"objective": float(value1), **_floats(report1)},
        "steps": int(sol.steps),
        "closures": scores,
    }


def _band_scores(alone, joint, item, grid) -> dict:
    """[`eqmodels.closure_score`][] of a band's own image and of the joint
    model's image at the band's frequency, with the closures' count `N`, the
    scatter `√(2/N)` of a reduced χ², and whether joint ≤ alone + scatter."""
    cp, lca = score_closures([item])
    kinds = {
        "cphase": ClosurePhaseChi2.from_data(cp, grid),
        "logcamp": LogClosureAmpChi2.from_data(lca, grid),
    }
    out = {"alone": {}, "joint": {}, "n": {}, "scatter": {}, "within": {}}
    for kind, term in kinds.items():
        out["alone"][kind] = float(term(alone))
        out["joint"][kind] = float(term(joint))
        n = int(np.asarray(cp.cphase if kind == "cphase" else lca.logcamp).size)
        out["n"][kind] = n
        out["scatter"][kind] = float(np.sqrt(2.0 / n))
        out["within"][kind] = bool(
            out["joint"][kind] <= out["alone"][kind] + out["scatter"][kind]
        )
    return out


def _floats(report: dict) -> dict:
    return {k: float(v) for k, v in report.items()}
