"""A sharded run: the data terms' rows split over four devices (`em.ShardedChi2`),
the image and the regularizers replicated.

Four virtual CPU devices stand in for GPUs or hosts (on 2 cores they share the
same cores, so this shows how, not speed). The sharded objective's value and
gradient are the unsharded ones to rounding; `em.solve` then images M87 from the
shipped file with it (the recipe's first round, without self-calibration).

Run: `python examples/sharded.py --figures figures/` (about 15 s on 2 CPU cores);
`--steps N` sets the L-BFGS steps (100).
"""

import os


# Before jax is imported: four virtual CPU devices.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402

import equinox as eqx  # noqa: E402
import jax  # noqa: E402


jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import eqmodels as em  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "uvfits", nargs="?", default=str(em.example_uvfits()), help="a uvfits file"
    )
    ap.add_argument("--steps", type=int, default=100, help="L-BFGS steps (100)")
    ap.add_argument("--figures", help="save the figure (PNG) in this folder")
    args = ap.parse_args(argv)
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
    sys_noise = em.m87_systematic_noise()  # its entries for absent stations: ignored

    # --8<-- [start:sharded]
    # One mesh axis over the 4 devices (Explicit axes, jax.make_mesh's default;
    # Auto axes work too).
    mesh = jax.make_mesh((jax.device_count(),), ("rows",))
    amp = em.AmpChi2.from_data(
        em.amplitudes(data, systematic_noise=sys_noise), grid, forward="separable"
    )
    cphase = em.ClosurePhaseChi2.from_data(
        em.closure_phases(data, uv_min=0.1e9), grid, forward="separable"
    )
    logcamp = em.LogClosureAmpChi2.from_data(
        em.log_closure_amplitudes(data), grid, forward="separable"
    )
    regularizers = [
        em.SimpleEntropy(prior, flux=0.6, normalise=True),
        em.TV(grid, flux=0.6, beam=beam, normalise=True),
        em.TSV(grid, flux=0.6, beam=beam, normalise=True),
        em.Flux(0.6, normalise=True),
    ]
    weights = [0.2, 1.0, 1.0, 100.0, 1.0, 1.0, 1e4]

    def build(data_terms):
        return em.Objective([*data_terms, *regularizers], weights, chi2_offset=True)

    plain = build([amp, cphase, logcamp])
    sharded = build([em.ShardedChi2(t, mesh) for t in (amp, cphase, logcamp)])

    # The same value and gradient, to rounding.
    model = em.PixelImage.from_prior(prior, grid)
    value_and_grad = eqx.filter_jit(eqx.filter_value_and_grad(lambda m, o: o(m)))
    v_plain, g_plain = value_and_grad(model, plain)
    v_sharded, g_sharded = value_and_grad(model, sharded)
    grad_diff = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(jax.tree.leaves(g_plain), jax.tree.leaves(g_sharded))
    )
    print(
        f"{jax.device_count()} devices: objective {float(v_sharded):.12g} sharded, "
        f"{float(v_plain):.12g} plain; largest gradient difference {grad_diff:.2e}"
    )

    # A sharded objective is an objective: solve with it as with any other.
    solution = em.solve(sharded, model, max_steps=args.steps, ftol=1e-4, gtol=1e-4)
    image = np.asarray(solution.model())
    # --8<-- [end:sharded]
    chi2 = {
        k: round(float(solution.report[k]), 3) for k in ("amp", "cphase", "logcamp")
    }
    print(
        f"solve: {int(solution.steps)} steps, χ² {chi2}, flux {image.sum():.3f} Jy; "
        f"{time.perf_counter() - t_start:.1f} s"
    )
    figures = save_figure(args.figures, image, grid, beam) if args.figures else []
    return {
        "devices": jax.device_count(),
        "value_sharded": float(v_sharded),
        "value_plain": float(v_plain),
        "grad_diff": grad_diff,
        "chi2": chi2,
        "flux": float(image.sum()),
        "figures": figures,
    }


def save_figure(folder, image, grid, beam):
    """The image, as a PNG in `folder`."""
    try:
        import matplotlib
    except ImportError:
        print("(matplotlib is not installed: no figures)")
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ax = em.plot_image(
        image, grid, beam=em.rad_to_uas(beam),
        title=f"round 1, data sharded over {jax.device_count()} devices",
    )  # fmt: skip
    path = folder / "sharded.png"
    ax.figure.savefig(path, dpi=90)
    plt.close(ax.figure)
    print(f"saved {path}")
    return [str(path)]


if __name__ == "__main__":
    main()
