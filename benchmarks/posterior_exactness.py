"""NUTS, mean-field VI and Pathfinder against a closed-form posterior (issue 39,
"exact where exactness is possible").

Problem: tests/test_posterior.py's linear-Gaussian posterior (a 4×4 identity-
transform `PixelImage` through a `DirectFT` at 10 visibilities, `VisChi2`, a
`GMRFPrior`): mean `m = P⁻¹(AᵀWy + Qμ)`, precision `P = AᵀWA + Q`, in numpy.
Per pixel:

- NUTS (`method="nuts"`, 4 chains × `draws`, 400 warm-up steps): z of the mean,
  `(x̄ − m_i) / (σ̂_i / sqrt(ESS_i))`, and z of the variance,
  `(σ̂_i² / Σ_ii − 1) / sqrt(2 / ESS_i)` (a Gaussian's sample variance).
- mean-field VI (`method="meanfield"`, 16 independent fits): the known optimum is
  the exact mean and the variances `1/P_ii`; t of the fits' average mean and
  log scale, with their spread over the 16 fits as the error.
- Pathfinder (`method="pathfinder"`, 4 paths): its mean's error in posterior σ
  and its scales over the posterior's σ (an approximation: no z).

Wall time of each method (compilation included, one call) over NUTS's in the same
run. Run `python benchmarks/posterior_exactness.py [--quick]`; writes
`benchmarks/results/posterior_exactness.json`.
"""

import argparse
import json
import pathlib
import sys
import time


ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402


jax.config.update("jax_enable_x64", True)

import eqmodels as em  # noqa: E402
from tests.test_posterior import Problem  # noqa: E402


def timed(f):
    t0 = time.perf_counter()
    out = f()
    jax.block_until_ready(out.positions)
    dt = time.perf_counter() - t0
    print(f"  ran in {dt:.1f} s", flush=True)
    return out, dt


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer draws")
    args = parser.parse_args()
    draws = 300 if args.quick else 1000
    problem = Problem()
    mean, cov, prec = problem.exact()
    sd = np.sqrt(np.diag(cov))
    mf_sd = 1 / np.sqrt(np.diag(prec))
    post, key = problem.posterior, jax.random.key(0)

    nuts, t_nuts = timed(
        lambda: em.sample(
            post, key=key, num_warmup=400, num_samples=draws, num_chains=4
        )
    )
    x = np.asarray(nuts.positions)
    flat = x.reshape(-1, x.shape[-1])
    n_eff = nuts.ess()
    z_mean = (flat.mean(0) - mean) / (flat.std(0, ddof=1) / np.sqrt(n_eff))
    z_var = (flat.var(0, ddof=1) / np.diag(cov) - 1) / np.sqrt(2 / n_eff)

    fits = 16
    mf, t_mf = timed(
        lambda: em.sample(
            post, key=key, method="meanfield", num_chains=fits, num_samples=draws
        )
    )
    mu, s = np.asarray(mf.stats["mean"]), np.asarray(mf.stats["scale"])
    t_mf_mean = (mu.mean(0) - mean) / (mu.std(0, ddof=1) / np.sqrt(fits))
    ls = np.log(s)
    t_mf_scale = (ls.mean(0) - np.log(mf_sd)) / (ls.std(0, ddof=1) / np.sqrt(fits))

    pf, t_pf = timed(
        lambda: em.sample(
            post, key=key, method="pathfinder", num_chains=4, num_samples=draws
        )
    )
    pf_err = (np.asarray(pf.stats["mean"]) - mean) / sd  # (4, n)
    pf_scale = np.asarray(pf.stats["scale"]) / sd

    print(
        f"{draws} draws per chain; NUTS ESS {n_eff.min():.0f}-{n_eff.max():.0f}"
        f" of {flat.shape[0]}"
    )
    head = (
        "| pixel | m | σ | NUTS z(mean) | NUTS z(var) | MF t(mean) | "
        "MF s·√P_ii | MF t(ln s) | PF abs. err/σ (max of 4) | PF s/σ (range) |"
    )
    print(head)
    print("|" + "---|" * 11)
    rows = []
    for i in range(mean.size):
        row = dict(
            pixel=i,
            mean=mean[i],
            sd=sd[i],
            nuts_z_mean=z_mean[i],
            nuts_z_var=z_var[i],
            mf_t_mean=t_mf_mean[i],
            mf_scale_ratio=float(s[:, i].mean() / mf_sd[i]),
            mf_t_log_scale=t_mf_scale[i],
            pf_err=float(np.abs(pf_err[:, i]).max()),
            pf_scale_lo=float(pf_scale[:, i].min()),
            pf_scale_hi=float(pf_scale[:, i].max()),
        )
        rows.append({k: float(v) for k, v in row.items()})
        print(
            f"| {i} | {mean[i]:.4f} | {sd[i]:.4f} | {z_mean[i]:+.2f} | "
            f"{z_var[i]:+.2f} | {t_mf_mean[i]:+.2f} | {row['mf_scale_ratio']:.4f} | "
            f"{t_mf_scale[i]:+.2f} | {row['pf_err']:.3f} | "
            f"{row['pf_scale_lo']:.2f}-{row['pf_scale_hi']:.2f} |"
        )
    summary = {
        "nuts_max_abs_z_mean": float(np.abs(z_mean).max()),
        "nuts_rms_z_mean": float(np.sqrt(np.mean(z_mean**2))),
        "nuts_max_abs_z_var": float(np.abs(z_var).max()),
        "nuts_rms_z_var": float(np.sqrt(np.mean(z_var**2))),
        "mf_max_abs_t_mean": float(np.abs(t_mf_mean).max()),
        "mf_max_abs_t_log_scale": float(np.abs(t_mf_scale).max()),
        "mf_max_scale_rel_err": float(np.abs(s / mf_sd - 1).max()),
        "mf_sd_over_posterior_sd": [
            float((mf_sd / sd).min()),
            float((mf_sd / sd).max()),
        ],
        "pf_max_mean_err_sigma": float(np.abs(pf_err).max()),
        "pf_num_iterations": np.asarray(pf.stats["num_iterations"]).tolist(),
        "seconds": {"nuts": t_nuts, "meanfield": t_mf, "pathfinder": t_pf},
        "time_over_nuts": {"meanfield": t_mf / t_nuts, "pathfinder": t_pf / t_nuts},
    }
    print(json.dumps(summary, indent=1))
    out = ROOT / "benchmarks" / "results" / "posterior_exactness.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"draws": draws, "rows": rows, "summary": summary}, indent=1)
    )


if __name__ == "__main__":
    main()
