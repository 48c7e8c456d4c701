"""Polarimetric imaging of M87 on 2017-04-11, step by step, with the public API.

From the EHT's full-polarization release (2023-D01-01, the zero-baseline
D-term-calibrated and self-calibrated low-band file) and a fixed Stokes I image
(the EHT pipeline's 2017-04-11 image), it images the linear polarization with the
polarimetric visibilities `pvis` and the fractional polarization visibilities
`m`, regularized by the holographic entropy `hw` and the polarimetric total
variation `ptv` (eht-imaging's terms), in rounds: one for the image alone, then
the image jointly with the D-terms of the stations that the zero-baseline
calibration did not correct. It prints the summary numbers of EHT M87* Paper VII
(net and image-averaged fractional polarization, β₂, EVPA) and draws the
polarization figure, the D-terms and the residuals.

Run:

    python examples/m87_pol_walkthrough.py --figures figures/
    python examples/m87_pol_walkthrough.py --fast

Needs the shared data folder (`../shared/data` next to the checkout, or give the
file and the Stokes I image). `--fast` takes 30 L-BFGS steps per round instead of
200. Figures need matplotlib.
"""

import argparse
import pathlib
import time

import jax


jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import eqmodels as em  # noqa: E402


ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
UVFITS = (
    SHARED / "eht" / "m87_2017_pol" / "hops_data" / "April11"
    / "SR2_M87_2017_101_lo_hops_zbl-dtcal+selfcal.uvfits"
)  # fmt: skip
STOKES_I = SHARED / "reference" / "m87_2017_101_ehtim_pipeline.fits"

#: Stations whose D-terms the zero-baseline calibration corrected in this file
#: (ALMA, APEX, SMA, JCMT; JCMT has no data on this day).
ZBL_CORRECTED = ("AA", "AP", "SM", "JC")


class Figures:
    """Saves figures as `<folder>/pol_m87_<name>.png`; does nothing without a
    folder or without matplotlib."""

    def __init__(self, folder, prefix="pol_m87_"):
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

    def save(self, fig, name, dpi=80):
        import matplotlib.pyplot as plt

        fig = getattr(fig, "figure", fig)  # an Axes or a Figure
        path = self.folder / f"{self.prefix}{name}.png"
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
        self.saved.append(path)


# --8<-- [start:prior]
class StationDTermPrior(em.AbstractGainPrior):
    """A Gaussian prior on the D-terms with one σ per station: `Σ |d|² / σ_s²`
    (what `em.DTermPrior(jones, σ, station_sigma={...})` does, written out to
    show a prior of one's own). A tiny σ holds a station's D-terms at 0."""

    report_name = "dterm"
    gains: em.StationJones
    sigma: jnp.ndarray  # (n_stations,)

    def __init__(self, jones, sigma):
        self.gains = jones
        self.sigma = jnp.asarray([sigma[s] for s in jones.station_names])

    def gain_residuals(self, gains):
        s = self.sigma[None, :, None]  # (intervals, stations, R/L)
        return jnp.concatenate(
            [(gains.d_real / s).reshape(-1), (gains.d_imag / s).reshape(-1)]
        )

    # --8<-- [end:prior]


# --8<-- [start:summary]
def summary(stokes, grid, blur_uas=20.0):
    """EHT M87* Paper VII's numbers, on the image blurred to 20 µas: the net
    fractional polarization `|Σ P| / Σ I`, the image-averaged `⟨|m|⟩ = Σ |P| / Σ I`,
    `β₂` (amplitude, phase in degrees) and the net EVPA `½ arg Σ P` (degrees east of
    north)."""
    fwhm = em.uas_to_rad(blur_uas)
    i, q, u = (np.asarray(em.blur_image(stokes[k], grid, fwhm)) for k in range(3))
    p = q + 1j * u
    beta2 = complex(em.beta_m(np.stack([i, q, u, 0 * i]), grid, 2))
    return {
        "m_net": float(abs(p.sum()) / i.sum()),
        "m_avg": float(np.abs(p).sum() / i.sum()),
        "beta2_amp": abs(beta2),
        "beta2_deg": float(np.degrees(np.angle(beta2))),
        "evpa_deg": float(np.degrees(0.5 * np.angle(p.sum()))),
    }
    # --8<-- [end:summary]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("uvfits", nargs="?", default=str(UVFITS), help="the data")
    ap.add_argument("--stokes-i", default=str(STOKES_I), help="fixed Stokes I FITS")
    ap.add_argument("--fast", action="store_true", help="30 steps per round")
    ap.add_argument("--iterations", type=int, help="L-BFGS steps per round (200)")
    ap.add_argument("--figures", help="save the figures (PNG) in this folder")
    args = ap.parse_args(argv)
    if args.iterations is not None and args.iterations < 1:
        ap.error(f"--iterations must be >= 1, got {args.iterations}.")
    iterations = args.iterations or (30 if args.fast else 200)
    for path in (args.uvfits, args.stokes_i):
        if not pathlib.Path(path).is_file():
            ap.error(f"{path} is not there (the shared data folder, ../shared/data).")
    figures = Figures(args.figures)
    t_start = time.perf_counter()

    # --8<-- [start:data]
    # 1. Data: all four correlations (RR, LL, RL, LR), scan-averaged.
    data = em.load_uvfits(args.uvfits, polarization="full").scan_average()
    print(data.summary())
    # --8<-- [end:data]

    # --8<-- [start:stokes_i]
    # 2. Stokes I, fixed: the EHT pipeline's image of the day (64² over 128 µas,
    # positive everywhere).
    image, grid = em.load_fits(args.stokes_i)
    intensity = em.PixelImage.from_image(image, grid, transform="identity")
    flux = float(image.sum())
    # The starting point: 10 % linear polarization, EVPA 0 everywhere.
    model = em.PolPixelImage.init(intensity, frac=0.1, evpa=0.0, circular=False)
    # What moves: the polarization leaf `pol`; Stokes I stays as it is.
    pol_only = eqx.tree_at(lambda m: m.pol, jax.tree.map(lambda _: False, model), True)
    # --8<-- [end:stokes_i]

    # --8<-- [start:terms]
    # 3. Data terms (through the exact SeparableFT) and regularizers,
    # eht-imaging's: pvis (P = Q + iU), m (P / I, free of the stations' gain
    # amplitudes), hw and ptv normalised by the flux and the nominal beam.
    pvis = em.PolVisChi2.from_data(data, grid, forward="separable")
    m = em.FracPolChi2.from_data(data, grid, forward="separable")
    beam = em.beam_from_uv(data.u, data.v)
    hw = em.HolographicEntropy(flux=flux, normalise=True)
    ptv = em.PolTV(grid, flux=flux, beam=beam, normalise=True)
    # --8<-- [end:terms]

    # --8<-- [start:round1]
    # 4. Round 1: the image alone, D-terms taken as corrected. eht-imaging's
    # objective Σ w (χ² − 1) + Σ w R.
    def objective(pvis, m, w):
        return em.Objective(
            [pvis, m, hw, ptv], [w["pvis"], w["m"], w["hw"], w["ptv"]],
            names=["pvis", "m", "hw", "ptv"], chi2_offset=True,
        )  # fmt: skip

    weights = {"pvis": 1.0, "m": 5.0, "hw": 1.0, "ptv": 10.0}
    t0 = time.perf_counter()
    sol = em.solve(
        objective(pvis, m, weights), model, max_steps=iterations, params=pol_only
    )
    model = sol.model
    rounds = [_row(1, sol, t0)]
    # --8<-- [end:round1]

    # --8<-- [start:dterms]
    # 5. Rounds 2 and 3: the image and the D-terms together. One D-term per
    # station and feed for the track; the release's files have the field
    # rotation removed (`field_rotation_corrected=True`). Gains stay at 1 (the
    # file is self-calibrated). The D-terms of the stations the zero-baseline
    # calibration did not correct get a 5 % Gaussian prior; those it corrected
    # are held at 0 (σ = 1e-4). The prior is weighed as the log-prior of the
    # pvis likelihood.
    jones = em.StationJones.from_data(data, "track", "track",
                                      field_rotation_corrected=True)  # fmt: skip
    dterms_only = eqx.tree_at(
        lambda j: (j.d_real, j.d_imag),
        jax.tree.map(lambda _: False, jones),
        (True, True),
    )
    n_pvis = int(pvis.n_rows)
    sigma = {s: 1e-4 if s in ZBL_CORRECTED else 0.05 for s in jones.station_names}
    for r, weights in (
        (2, {"pvis": 1.0, "m": 5.0, "hw": 1.0, "ptv": 10.0}),
        (3, {"pvis": 5.0, "m": 20.0, "hw": 1.0, "ptv": 30.0}),
    ):
        joint = objective(
            em.JonesCorrected(pvis, jones), em.JonesCorrected(m, jones), weights
        ) + (weights["pvis"] / (2 * n_pvis)) * StationDTermPrior(jones, sigma)
        t0 = time.perf_counter()
        sol = em.solve(
            em.WithGains(joint), (model, jones), max_steps=iterations,
            params=(pol_only, dterms_only),
        )  # fmt: skip
        model, jones = sol.model
        rounds.append(_row(r, sol, t0))
    # --8<-- [end:dterms]

    # --8<-- [start:summary_call]
    # 6. The numbers of Paper VII, and the D-terms found.
    stokes = np.asarray(model())
    numbers = summary(stokes, grid)
    print(
        f"net |m| {numbers['m_net']:.3f}, <|m|> {numbers['m_avg']:.3f}, "
        f"|β2| {numbers['beta2_amp']:.3f}, arg β2 {numbers['beta2_deg']:.0f}°, "
        f"EVPA {numbers['evpa_deg']:.0f}°"
    )
    d = np.asarray(jones.dterms())[0]  # (stations, R/L)
    dterms = {s: (d[k, 0], d[k, 1]) for k, s in enumerate(jones.station_names)}
    for s, (d_r, d_l) in dterms.items():
        note = " (zero-baseline corrected)" if s in ZBL_CORRECTED else ""
        print(f"D-terms {s}: R {d_r:.3f}, L {d_l:.3f}{note}")
    # --8<-- [end:summary_call]

    if figures:
        # --8<-- [start:figures]
        ax = em.plot_polarization(
            stokes, grid, beam=em.rad_to_uas(beam), m_range=(0.0, 0.5),
            title=f"{data.source} {data.mjd} (2017-04-11), Stokes I fixed",
        )  # fmt: skip
        figures.save(ax, "polarization")
        ax = em.plot_dterms(jones, title="D-terms (fitted with the image)")
        figures.save(ax, "dterms")
        fig = em.plot_pol_residuals(data, stokes, grid, jones=jones)
        figures.save(fig, "residuals", dpi=70)
        # --8<-- [end:figures]
    seconds = time.perf_counter() - t_start
    print(f"done in {seconds:.1f} s")
    for path in figures.saved:
        print(f"saved {path}")
    return {
        "rounds": rounds,
        "summary": numbers,
        "dterms": {s: [[d.real, d.imag] for d in pair] for s, pair in dterms.items()},
        "stokes": stokes,
        "seconds": seconds,
        "figures": [str(p) for p in figures.saved],
    }


def _row(r, sol, t0):
    """Print and return one round's line."""
    report = {k: float(v) for k, v in sol.report.items()}
    print(
        f"round {r}: {int(sol.steps):3d} steps, objective {float(sol.value):9.4f}, "
        + ", ".join(f"{k} {v:.3f}" for k, v in report.items())
        + f" ({time.perf_counter() - t0:.1f} s)"
    )
    return {"round": r, "steps": int(sol.steps), "objective": float(sol.value),
            **report}  # fmt: skip


if __name__ == "__main__":
    main()
