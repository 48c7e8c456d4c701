"""Cost of the full closure covariance against independent closures (issue 39).

Problem: the shipped M87 2017-04-10 lo-band file (`em.example_uvfits()`),
scan-averaged; closure phases and log closure amplitudes (`closures="min"`),
`log_likelihood` of each term with `covariance="independent"` (the baseline,
measured in the same run) and `covariance="full"` (per-timestamp whitening,
precomputed at construction), jitted, median of repeats:

- **closure arithmetic**: `log_likelihood_from_vis(vis)` value and gradient with
  respect to the model visibilities (what the option adds to);
- **end to end**: value and gradient with respect to a 32² image (DirectFT).

Run `python benchmarks/closure_covariance.py [--quick]`. Writes
`benchmarks/results/closure_covariance.json`.
"""

import _common as C


BLAS = C.prepare_blas_env(1)  # before numpy is imported

import argparse  # noqa: E402
import pathlib  # noqa: E402


ROOT = pathlib.Path(__file__).resolve().parents[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats (~20 s)")
    ap.add_argument(
        "--out",
        default=str(ROOT / "benchmarks" / "results" / "closure_covariance.json"),
    )
    args = ap.parse_args()

    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import eqmodels as em

    env = C.environment_info()
    timing = C.QUICK_TIMING if args.quick else C.FULL_TIMING
    data = em.load_uvfits(em.example_uvfits()).scan_average()
    grid = em.ImageGrid(32, 32, em.uas_to_rad(4.0))
    image = jnp.full(grid.shape, 1.0 / grid.npix)
    rows, results = [], {}
    for make, cls in (
        (em.closure_phases, em.ClosurePhaseChi2),
        (em.log_closure_amplitudes, em.LogClosureAmpChi2),
    ):
        products = make(data)
        terms = {
            cov: cls.from_data(products, grid, covariance=cov)
            for cov in ("independent", "full")
        }
        vis = terms["independent"].model_vis(image)
        calls = {}
        for cov, term in terms.items():
            from_vis = jax.jit(
                jax.value_and_grad(
                    lambda re, im, t=term: t.log_likelihood_from_vis(
                        jax.lax.complex(re, im)
                    ),
                    argnums=(0, 1),
                )
            )
            whole = jax.jit(jax.value_and_grad(term.log_likelihood))
            calls[f"{cov} arithmetic"] = lambda f=from_vis: f(
                jnp.real(vis), jnp.imag(vis)
            )
            calls[f"{cov} end to end"] = lambda f=whole: f(image)
        timed = C.time_interleaved(calls, timing)
        cov = terms["full"].closure_covariance
        res = {
            "closures": int(products.sigma.size),
            "timestamps": int(cov.whiten.shape[0]),
            "largest_group": int(cov.whiten.shape[1]),
        }
        for what in ("arithmetic", "end to end"):
            t_ind = timed[f"independent {what}"][0]
            t_full = timed[f"full {what}"][0]
            res[what] = {
                "independent": t_ind.as_dict(),
                "full": t_full.as_dict(),
                "ratio_full_over_independent": t_full.median / t_ind.median,
            }
            rows.append(
                [
                    f"{cls.__name__} ({res['closures']} rows, {res['timestamps']} "
                    f"times, ≤{res['largest_group']}/time)",
                    what,
                    C.fmt_time(t_ind.median),
                    C.fmt_time(t_full.median),
                    C.fmt_ratio(t_full.median / t_ind.median),
                ]
            )
        results[cls.__name__] = res
    C.print_table(
        ["term", "value + gradient", "independent", "full", "full/independent"],
        rows,
        title="closure log-likelihood, full covariance vs independent "
        "(M87 2017-04-10 lo, scan-averaged; 32² DirectFT end to end), median",
    )
    out = C.write_json(
        args.out,
        {
            "mode": "quick" if args.quick else "full",
            "environment": env,
            "blas": C.blas_info(),
            "blas_env": BLAS,
            "results": results,
        },
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
