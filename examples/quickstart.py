"""Quick start: image a ring from synthetic, noisy EHT-like data.

1. Make a ring image (a stand-in for a black-hole shadow) on a 32×32 grid.
2. Observe it with the EHT 2017 array (shipped station table: Earth-rotation (u, v)
   tracks of M87 over one day, thermal noise from the stations' SEFDs).
3. Reconstruct it with `em.solve`: L-BFGS over the log-pixels of a `PixelImage`,
   VisChi2 plus a small smoothness penalty (TSV), the whole minimisation in one
   compiled program.

Run: `python examples/quickstart.py` (about 10 s on 2 CPU cores). Saves
`quickstart.png` into `--figures DIR` (default `examples/output/`) when matplotlib
is installed.
"""

import pathlib
import time

import jax


jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import eqmodels as em  # noqa: E402


def ring(grid, diameter_uas=44.0, width_uas=10.0, flux=0.6):
    """A Gaussian-profile ring, brighter in the south (like M87*)."""
    xx, yy = grid.coords()
    r = np.hypot(xx, yy)
    r0, w = em.uas_to_rad(diameter_uas) / 2, em.uas_to_rad(width_uas) / 2.355
    img = np.exp(-0.5 * ((r - r0) / w) ** 2) * (1.0 - 0.6 * yy / (r + 1e-30) * (r > 0))
    return flux * img / img.sum()


def main(n_steps=300, seed=0, figures=None):
    grid = em.ImageGrid.from_fov(32, 128.0)  # 32² pixels over 128 µas
    truth = ring(grid)
    array = em.EHT2017.select(["AA", "AP", "AZ", "JC", "LM", "PV", "SM"])
    data = em.observe(
        truth,
        grid,
        array,
        ra=187.7059,  # M87, degrees
        dec=12.3911,
        times=np.arange(0.0, 24.0, 0.25),  # a record every 15 min, hours UTC
        integration=60.0,  # seconds
        seed=seed,
    )
    print(data.summary())
    chi2 = em.VisChi2(em.NUFFT(grid, data.u, data.v), data.vis, data.sigma)

    # Start from a flat disk of the right total flux.
    xx, yy = grid.coords()
    disk = np.where(np.hypot(xx, yy) < em.uas_to_rad(50.0), 1.0, 1e-3)
    model = em.PixelImage.from_image(0.6 * disk / disk.sum(), grid)

    # The objective is a module: terms compose with arithmetic.
    objective = chi2 + 1.0 * grid.npix * em.TSV(grid)

    print(f"start: chi² = {float(chi2(model)):10.3f}")
    t0 = time.perf_counter()
    # L-BFGS with a backtracking line search (one objective evaluation per trial
    # point, reused by the next step), the whole loop compiled once; a second
    # solve of the same shapes reuses the program.
    solution = em.solve(objective, model, em.LBFGS(), max_steps=n_steps)
    elapsed = time.perf_counter() - t0
    print(
        f"  {int(solution.steps)} steps, stopped on {solution.reason}; "
        f"loss {float(solution.value):.4f}"
    )
    model = solution.model
    final = float(chi2(model))
    print(f"end:   chi² = {final:10.3f}  ({elapsed:.2f} s, compilation included)")
    img = np.asarray(model())
    corr = np.corrcoef(img.ravel(), truth.ravel())[0, 1]
    print(f"correlation with the true image: {corr:.3f}")
    save_png(truth, img, grid, figures)
    return final, corr


def save_png(truth, img, grid, folder=None):
    """Truth and reconstruction side by side, one colour scale (Jy/µas²)."""
    try:
        import matplotlib
    except ImportError:
        print("(matplotlib not installed: no PNG)")
        return
    matplotlib.use("Agg")
    out = pathlib.Path(folder or pathlib.Path(__file__).parent / "output")
    out.mkdir(parents=True, exist_ok=True)
    fig = em.plot_images([truth, img], grid, titles=["truth", "reconstruction"])
    fig.savefig(out / "quickstart.png", dpi=100)
    print(f"saved {out / 'quickstart.png'}")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="solver steps (300)")
    ap.add_argument("--seed", type=int, default=0, help="noise seed (0)")
    ap.add_argument(
        "--figures", help="save the figure (PNG) in this folder (examples/output/)"
    )
    args = ap.parse_args()
    main(n_steps=args.steps, seed=args.seed, figures=args.figures)
