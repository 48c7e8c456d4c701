"""A survey: one objective, a grid of regularizer weights, every reconstruction in
one compiled program (`em.survey`), ranked by χ².

The objective is the M87 recipe's first round on the shipped file (amplitudes,
closure phases, log closure amplitudes; maximum entropy, total variation, total
squared variation and a flux constraint). The survey varies the entropy weight and
the total-variation weight over a grid of 4 × 4 (2 × 2 with `--fast`), runs
L-BFGS from the same Gaussian for each, and ranks the configurations by their mean
closure χ²; the best images are drawn side by side, and the χ² over the grid.

Run: `python examples/survey.py --figures figures/` (about 15 s on 2 CPU cores;
`--fast`: about 8 s).
"""

import argparse
import pathlib
import time

import jax


jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import numpy as np  # noqa: E402

import eqmodels as em  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "uvfits", nargs="?", default=str(em.example_uvfits()), help="a uvfits file"
    )
    ap.add_argument("--fast", action="store_true", help="2 × 2 weights, 30 steps")
    ap.add_argument("--steps", type=int, help="L-BFGS steps per configuration (100)")
    ap.add_argument("--figures", help="save the figure (PNG) in this folder")
    args = ap.parse_args(argv)
    n_side = 2 if args.fast else 4
    steps = args.steps or (30 if args.fast else 100)
    t_start = time.perf_counter()

    data = em.load_uvfits(args.uvfits).scan_average()
    # The compact flux measured on ALMA–APEX as the pipeline does; on every
    # intra-site baseline where APEX has another code (2018's files: AX).
    apex = ("AA", "AP") if {"AA", "AP"} <= set(data.station_names) else None
    data = em.rescale_zero_baseline(data, 0.6, baseline=apex)
    data = em.add_fractional_noise(data, 0.02)
    grid = em.ImageGrid.from_fov(64, 128.0)
    prior = np.asarray(em.GaussianImage(grid, 0.6, em.uas_to_rad(40.0))())
    beam = em.beam_from_uv(data.u, data.v)
    sys_noise = {
        k: f for k, f in em.m87_systematic_noise().items() if k in data.station_names
    }
    amp = em.amplitudes(data, systematic_noise=sys_noise)
    objective = em.Objective(
        [
            em.AmpChi2.from_data(amp, grid, forward="separable"),
            em.ClosurePhaseChi2.from_data(
                em.closure_phases(data, uv_min=0.1e9), grid, forward="separable"
            ),
            em.LogClosureAmpChi2.from_data(
                em.log_closure_amplitudes(data), grid, forward="separable"
            ),
            em.SimpleEntropy(prior, flux=0.6, normalise=True),
            em.TV(grid, flux=0.6, beam=beam, normalise=True),
            em.TSV(grid, flux=0.6, beam=beam, normalise=True),
            em.Flux(0.6, normalise=True),
        ],
        [0.2, 1.0, 1.0, 100.0, 1.0, 1.0, 1e4],
        chi2_offset=True,
    )

    # --8<-- [start:survey]
    # The grid of weights: entropy × total variation, the other weights as above.
    configs, objectives = [], []
    for w_simple in np.geomspace(10.0, 1000.0, n_side):
        for w_tv in np.geomspace(0.1, 10.0, n_side):
            w = np.asarray(objective.weights).copy()
            w[objective.names.index("simple")] = w_simple
            w[objective.names.index("tv")] = w_tv
            configs.append((w_simple, w_tv))
            objectives.append(objective.with_weights(w))

    model = em.PixelImage.from_prior(prior, grid)  # log pixels, from the prior
    result = em.survey(objectives, model, max_steps=steps, ftol=1e-4, gtol=1e-4)
    # Ranked by the closure χ² (the amplitudes are not self-calibrated yet).
    closures = ["cphase", "logcamp"]
    chi2 = np.asarray(result.chi2(closures))  # their mean, per configuration
    ranking = np.asarray(result.ranking(closures))  # best first
    report = {k: np.asarray(v) for k, v in result.solutions.report.items()}
    for i in ranking:
        terms = "  ".join(f"{k} {report[k][i]:6.3f}" for k in result.data_names)
        print(
            f"simple {configs[i][0]:6.1f}  tv {configs[i][1]:5.2f}  "
            f"closure χ² {chi2[i]:6.3f}  ({terms})"
        )
    # --8<-- [end:survey]
    print(f"{len(result)} configurations in {time.perf_counter() - t_start:.1f} s")

    # Every configuration's image, in one compiled call.
    images = np.asarray(
        eqx.filter_jit(eqx.filter_vmap(lambda m: m()))(result.solutions.model)
    )
    figures = []
    if args.figures:
        figures = save_figures(
            args.figures, images[ranking[:4]], grid, configs, chi2, ranking
        )
    return {
        "configs": configs,
        "chi2": chi2,
        "ranking": ranking,
        "fluxes": images.sum(axis=(1, 2)),
        "figures": figures,
    }


def save_figures(folder, images, grid, configs, chi2, ranking):
    """The best images (one colour scale) and the χ² over the grid of weights, as
    PNGs in `folder`."""
    try:
        import matplotlib
    except ImportError:
        print("(matplotlib is not installed: no figures)")
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    titles = [
        f"#{k + 1}: simple {configs[i][0]:.0f}, tv {configs[i][1]:.2g}\nχ² {chi2[i]:.2f}"
        for k, i in enumerate(ranking[: len(images)])
    ]
    fig = em.plot_images(images, grid, titles=titles, panel_size=3.0)
    fig.suptitle("the best configurations, ranked by mean closure χ²")
    paths = [folder / "survey.png", folder / "survey_chi2.png"]
    fig.savefig(paths[0], dpi=90)
    plt.close(fig)

    simple = np.unique([c[0] for c in configs])
    tv = np.unique([c[1] for c in configs])
    table = np.asarray(chi2).reshape(simple.size, tv.size)  # simple-major order
    fig, ax = plt.subplots(figsize=(4.8, 3.8), layout="constrained")
    norm = matplotlib.colors.LogNorm()
    mesh = ax.pcolormesh(
        np.arange(tv.size + 1), np.arange(simple.size + 1), table, norm=norm
    )
    for (i, j), value in np.ndenumerate(table):
        color = "k" if norm(value) > 0.6 else "w"
        ax.text(j + 0.5, i + 0.5, f"{value:.2f}", ha="center", va="center", color=color)
    ax.set_xticks(np.arange(tv.size) + 0.5, [f"{w:.2g}" for w in tv])
    ax.set_yticks(np.arange(simple.size) + 0.5, [f"{w:.0f}" for w in simple])
    ax.set_xlabel("TV weight")
    ax.set_ylabel("entropy (simple) weight")
    ax.set_title("mean closure χ² per configuration")
    cbar = fig.colorbar(mesh, ax=ax, format="%g")
    cbar.ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    fig.savefig(paths[1], dpi=90)
    plt.close(fig)
    for path in paths:
        print(f"saved {path}")
    return [str(p) for p in paths]


if __name__ == "__main__":
    main()
