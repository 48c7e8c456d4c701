"""From uvfits to an image: the published 2017 M87 recipe (EHT Paper IV), step by
step, with the public API.

`em.image_m87` runs the same recipe as one call; this script spells it out — data
preparation, the prior, the LMT's self-calibration, four rounds of L-BFGS with
restarts, each closed by self-calibration, the final blur, a FITS file and the
closure score — and draws a figure at each step. Every number is the pipeline's
(see docs/recipe.md); the image is `em.image_m87`'s up to rounding differences
grown through the non-convex solves, not bit for bit (3 % of the peak on both bands
of 2017-04-11, 8 % with `--fast` on the shipped file; docs/recipe.md says why).

Run:

    python examples/m87_walkthrough.py --fast --figures figures/
    python examples/m87_walkthrough.py LO.uvfits HI.uvfits --figures figures/

Without files it images the shipped one (2017-04-10, low band). `--fast` takes 30
L-BFGS steps per run and one restart; both it and the full recipe on both bands of
a day take 30–40 s on 2 CPU cores, mostly compiling. Figures need matplotlib.
"""

import argparse
import pathlib
import time

import jax


jax.config.update("jax_enable_x64", True)  # the recipe runs in float64

import numpy as np  # noqa: E402

import eqmodels as em  # noqa: E402


ROOT = pathlib.Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "examples" / "output" / "m87_walkthrough.fits"

ZBL = 0.6  # the compact flux (Jy)
UV_ZBLCUT = 0.1e9  # baselines shorter than this (λ) are intra-site


class Figures:
    """Saves figures as `<folder>/walkthrough_<name>.png`; does nothing without a
    folder or without matplotlib."""

    def __init__(self, folder, prefix="walkthrough_"):
        self.folder, self.prefix, self.saved = folder, prefix, []
        if folder is None:
            return
        try:
            import matplotlib
        except ImportError:
            print("(matplotlib is not installed: no figures)")
            self.folder = None
            return
        matplotlib.use("Agg")
        self.folder = pathlib.Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def __bool__(self):
        return self.folder is not None

    def subplots(self, *args, **kwargs):
        import matplotlib.pyplot as plt

        return plt.subplots(*args, layout="constrained", **kwargs)

    def save(self, fig, name):
        import matplotlib.pyplot as plt

        fig = getattr(fig, "figure", fig)  # an Axes or a Figure
        path = self.folder / f"{self.prefix}{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        self.saved.append(path)


# --8<-- [start:order_stations]
def order_stations(data):
    """Drop the stations without rows and order the others by the median SNR of
    their rows, highest first (eht-imaging's `reorder_tarr_snr`: the first
    stations are preferred as references when the closure sets are chosen)."""
    a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
    snr = np.asarray(data.snr)
    present = np.union1d(a1, a2)
    median = np.array([np.median(snr[(a1 == i) | (a2 == i)]) for i in present])
    order = present[np.argsort(-median, kind="stable")]
    new = np.full(data.n_stations, -1)
    new[order] = np.arange(order.size)
    return data.replace(
        station_names=tuple(data.station_names[i] for i in order),
        station_xyz=np.asarray(data.station_xyz)[order],
        ant1=new[a1],
        ant2=new[a2],
    )
    # --8<-- [end:order_stations]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("uvfits", nargs="*", help="one day's bands (default: shipped)")
    ap.add_argument("--fast", action="store_true", help="30 steps, 1 restart")
    ap.add_argument("--iterations", type=int, help="L-BFGS steps per run (100)")
    ap.add_argument("--restarts", type=int, help="restarts per round (3)")
    ap.add_argument("--npix", type=int, default=64, help="pixels per side (64)")
    ap.add_argument("--figures", help="save the figures (PNG) in this folder")
    ap.add_argument("-o", "--output", default=str(OUTPUT), help="the FITS image")
    args = ap.parse_args(argv)
    if args.iterations is not None and args.iterations < 1:
        ap.error(f"--iterations must be >= 1, got {args.iterations}.")
    if args.restarts is not None and args.restarts < 0:
        ap.error(f"--restarts must be >= 0, got {args.restarts}.")
    paths = args.uvfits or [str(em.example_uvfits())]
    iterations = (
        args.iterations if args.iterations is not None else (30 if args.fast else 100)
    )
    restarts = args.restarts if args.restarts is not None else (1 if args.fast else 3)
    figures = Figures(args.figures)
    t_start = time.perf_counter()

    # --8<-- [start:data]
    # 1. Data: each band scan-averaged, the bands joined. Each band's times move
    # by 1e-5 h per band index, so that every timestamp holds one band (the
    # pipeline's "avoid mixed closure products"; per-timestamp self-calibration
    # then solves each band on its own). Absent stations are dropped and the
    # others ordered by SNR.
    bands = [em.load_uvfits(p).scan_average() for p in paths]
    bands.sort(key=lambda d: min(d.band_freqs))  # the low band first, as given or not
    data = bands[0] if len(bands) == 1 else em.concatenate(bands)
    data = data.replace(time=np.asarray(data.time) + 1e-5 * np.asarray(data.band))
    data = order_stations(data)
    print(data.summary())
    if not {"AA", "AP"} <= set(data.station_names):
        # This script spells out the 2017 pipeline with 2017's station codes (its
        # noise budget and self-calibrated sites too); `eqmodels image` (that is,
        # `em.image_m87`) also maps the 2018 files' codes (APEX is AX there).
        ap.error(
            f"this walkthrough needs ALMA (AA) and APEX (AP) as the 2017 files name "
            f"them; the data have {list(data.station_names)}. For other files use "
            "`python -m eqmodels image` (em.image_m87)."
        )

    # 2. Compact flux: the intra-site baselines (< 0.1 Gλ) scaled to 0.6 Jy by
    # the median ALMA–APEX amplitude.
    data = em.rescale_zero_baseline(data, ZBL, uv_max=UV_ZBLCUT, baseline=("AA", "AP"))
    # --8<-- [end:data]
    if figures:
        fig, (ax_uv, ax_amp) = figures.subplots(1, 2, figsize=(11, 4.6))
        em.plot_uv_coverage(data, ax=ax_uv)
        em.plot_amplitudes(data, ax=ax_amp)
        ax_amp.set_title("amplitudes, short baselines at 0.6 Jy")
        figures.save(fig, "data")

    # --8<-- [start:prior]
    # 3. Resolution and noise: reverse-taper by 5 µas (the final image is blurred
    # by the same 5 µas), 2 % fractional noise on every visibility.
    taper = em.uas_to_rad(5.0)
    data0 = em.add_fractional_noise(em.reverse_taper(data, taper), 0.02)
    res = em.beam_from_uv(data0.u, data0.v)  # nominal resolution, 1 / longest

    # 4. Prior and first image: 64² pixels over 128 µas, a 40 µas FWHM Gaussian
    # of 0.6 Jy plus a 1e-3 copy offset by one FWHM (breaks the symmetry).
    grid = em.ImageGrid.from_fov(args.npix, 128.0)
    fwhm = em.uas_to_rad(40.0)
    prior = np.asarray(
        em.GaussianImage(grid, ZBL, fwhm)()
        + em.GaussianImage(grid, ZBL * 1e-3, fwhm, x0=fwhm, y0=fwhm)()
    )
    # --8<-- [end:prior]
    if figures:
        ax = em.plot_image(prior, grid, title="prior: 40 µas Gaussian, 0.6 Jy")
        figures.save(ax, "prior")

    # --8<-- [start:selfcal]
    # 5. The LMT: amplitude and phase self-calibration against a 60 µas Gaussian,
    # fitted on the baselines shorter than 2 Gλ (re-tapered), applied to all data.
    def selfcal(data, image, fit_on=None, **options):
        """Self-calibrate per timestamp on `fit_on` (default `data`); the gains
        found are applied to `data`."""
        fit_on = data if fit_on is None else fit_on
        _, gains = em.self_calibrate(
            fit_on, image, grid=grid, interval="timestamp", **options
        )
        return gains.calibrate(data)

    short = em.taper(data0.select_uvdist(uv_max=2e9), taper)
    gauss = np.asarray(em.GaussianImage(grid, ZBL, em.uas_to_rad(60.0))())
    data = selfcal(
        data0, gauss, fit_on=short, method="both", stations=["LM"], gain_tol=1.0
    )
    # --8<-- [end:selfcal]

    # --8<-- [start:objective]
    # eht-imaging's objective α(χ² − 1) + β R (`chi2_offset=True`), regularizers
    # normalised as the pipeline's. `weights` picks the data terms of a round.
    def round_objective(data, weights, systematic_noise):
        terms, w = [], []
        if "amp" in weights:
            amp = em.amplitudes(data, systematic_noise=systematic_noise)
            terms.append(em.AmpChi2.from_data(amp, grid, forward="separable"))
            w.append(weights["amp"])
        if "vis" in weights:
            vis = em.add_systematic_noise(data, systematic_noise)
            terms.append(em.VisChi2.from_data(vis, grid, forward="separable"))
            w.append(weights["vis"])
        cp = em.closure_phases(data, uv_min=UV_ZBLCUT)  # no intra-site triangles
        lca = em.log_closure_amplitudes(data)
        terms += [
            em.ClosurePhaseChi2.from_data(cp, grid, forward="separable"),
            em.LogClosureAmpChi2.from_data(lca, grid, forward="separable"),
        ]
        w += [weights["cphase"], weights["logcamp"]]
        norm = dict(flux=ZBL, beam=res, normalise=True)
        terms += [
            em.SimpleEntropy(prior, flux=ZBL, normalise=True),
            em.TV(grid, **norm),
            em.TSV(grid, **norm),
            em.Flux(ZBL, normalise=True),
        ]
        w += [100.0, 1.0, 1.0, 1e4]  # simple, tv, tv2, flux
        return em.Objective(terms, w, chi2_offset=True)

    # A round: one L-BFGS run from `start`, then `restarts` runs each from the
    # result blurred by the nominal resolution. Log pixels, the prior's mask.
    def run_round(r, objective, start):
        for run in range(restarts + 1):
            t0 = time.perf_counter()
            model = em.PixelImage.from_prior(prior, grid, init=start)
            sol = em.solve(
                objective, model, "lbfgs", max_steps=iterations, ftol=1e-4, gtol=1e-4
            )
            image = np.asarray(sol.model())
            start = em.blur_image(image, grid, res)  # the next run's start
            chi2 = {k: round(float(sol.report[k]), 3) for k in objective.names[:3]}
            print(
                f"round {r} run {run}: {int(sol.steps):3d} steps, objective "
                f"{float(sol.value):8.3f}, χ² {chi2} ({time.perf_counter() - t0:.1f} s)"
            )
        return image, {"objective": float(sol.value), **chi2}

    # --8<-- [end:objective]

    # --8<-- [start:round1]
    # 6. Round 1: amplitudes (weighted low: the gains are a priori), closure
    # phases and log closure amplitudes, with the per-site systematic noise; from
    # the prior. Then phase self-calibration to the image.
    sys12 = em.m87_systematic_noise()  # SP's entry (no SP data): ignored
    objective = round_objective(data, {"amp": 0.2, "cphase": 1, "logcamp": 1}, sys12)
    image, chi2 = run_round(1, objective, prior)
    rounds, reports = [image], [chi2]
    data = selfcal(data, image, method="phase")
    # --8<-- [end:round1]

    # --8<-- [start:rounds]
    # 7. Round 2: complex visibilities enter. Then phase self-calibration of the
    # pre-round-1 data to the image, and amplitude + phase of the LMT.
    objective = round_objective(data, {"vis": 2, "cphase": 10, "logcamp": 10}, sys12)
    image, chi2 = run_round(2, objective, em.blur_image(image, grid, res))
    rounds.append(image)
    reports.append(chi2)
    data = selfcal(data0, image, method="phase")
    data = selfcal(data, image, method="both", stations=["LM"], gain_tol=(0.02, 0.2))

    # 8. Rounds 3 and 4: heavier data weights, 1 % systematic noise, each closed
    # by amplitude + phase self-calibration (pre-round-1 data) of every station
    # but PV (the pipeline's `sites`: the IRAM 30 m keeps gain 1).
    pipeline_sites = ("SM", "JC", "AA", "AP", "LM", "SP", "AZ")
    # Rounds 2–4 share one objective structure: they reuse one compiled program.
    for r in (3, 4):
        objective = round_objective(
            data, {"vis": 10, "cphase": 20, "logcamp": 20}, 0.01
        )
        image, chi2 = run_round(r, objective, em.blur_image(image, grid, res))
        rounds.append(image)
        reports.append(chi2)
        sites = [s for s in pipeline_sites if s in data0.station_names]
        data = selfcal(
            data0, image, method="both", gain_tol=(0.02, 0.2), stations=sites
        )
    # --8<-- [end:rounds]
    if figures:
        fig = em.plot_images(
            rounds, grid, titles=[f"round {r}" for r in (1, 2, 3, 4)], panel_size=3.0
        )
        figures.save(fig, "rounds")

    # --8<-- [start:output]
    # 9. Output: the image blurred by 5 µas (undoing the reverse taper), saved as
    # FITS (eht-imaging's `load_fits` reads it), scored on closure quantities only
    # (so that images made with different self-calibrations compare).
    final = np.asarray(em.blur_image(image, grid, taper))
    pathlib.Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    em.save_fits(
        final, grid, args.output, ra=data0.ra, dec=data0.dec, freq=data0.band_freqs[0],
        mjd=data0.mjd, source=data0.source, overwrite=True,
    )  # fmt: skip
    score = em.closure_score(final, paths, grid=grid)
    print(f"total flux {final.sum():.3f} Jy; closure χ² {score}")
    # --8<-- [end:output]
    if figures:
        ax = em.plot_image(
            final, grid, beam=em.rad_to_uas(res),
            title=f"{data0.source}, MJD {data0.mjd}: final image",
        )  # fmt: skip
        figures.save(ax, "final")
        fig, (ax_cp, ax_amp) = figures.subplots(1, 2, figsize=(11, 4.2))
        cp = em.closure_phases(data0, uv_min=UV_ZBLCUT)
        em.plot_closure_phase_residuals(cp, final, grid, ax=ax_cp)
        em.plot_amplitudes(data, image, grid, ax=ax_amp, model_label="round 4")
        ax_amp.set_title("self-calibrated amplitudes (reverse-tapered)")
        figures.save(fig, "residuals")
    seconds = time.perf_counter() - t_start
    print(f"done in {seconds:.1f} s; wrote {args.output}")
    for path in figures.saved:
        print(f"saved {path}")
    return {
        "image": final,
        "grid": grid,
        "flux": float(final.sum()),
        "score": score,
        "rounds": reports,
        "seconds": seconds,
        "figures": [str(p) for p in figures.saved],
    }


if __name__ == "__main__":
    main()
