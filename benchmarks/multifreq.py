"""Value + gradient of a four-band multi-frequency imaging objective (issue 40).

Problem: M87 2018 day 111 (April 21), bands b1–b4 (213–229 GHz), each scan
averaged; 64² pixels over 128 µas; the model is a `PixelImage` of log-pixels (the
image `I₀` at the reference frequency `ν₀` = the bands' mean) and a spectral-index
map `α` (`I_ν = I₀ (ν/ν₀)^α`, no curvature); per band the data terms
`{amp 0.2, cphase 1, logcamp 1}` (12 terms); regularizers on `I₀`
`{simple 100, tv 1, flux 1e4}` (normalised) and on `α` `{l2_alpha 1, tv_alpha 1}`;
float64; no χ² offset on either side. The gradient is w.r.t. `(ln I₀, α)` at an
image near the Gaussian prior and a random `α` map.

Timed (median of repeats; compilation excluded, reported as `first`):

- **ehtim 1.3.2** (the oracle; if importable): eht-imaging's multi-frequency
  imager functions on the same data and DFT matrices, as its `Imager.objfunc` /
  `objgrad` compose them: `multifreq_imager_utils.image_at_freq` per band, the
  `imager_utils` χ² and χ²-gradient functions, `mf_all_grads_chain` for the
  gradients w.r.t. `(I₀, α)`, the Stokes I regularizers on `I₀` and
  `regularizer_mf` / `regularizergrad_mf` for `l2_alpha`, `tv_alpha` (value and
  gradient computed separately, as its imager does). eht-imaging is only called.
- **ours**: `eqx.filter_jit(eqx.filter_value_and_grad(lambda m, o: o(m)))` on a
  `MultiFrequencyImage` and the `Objective` of `AtFrequency` terms (one shared
  transform per band), SeparableFT, DirectFT and NUFFT (eps 1e-12); "in loop": inside one
  compiled `lax.scan` of gradient steps, per evaluation. The three are timed in
  turn, each call after one untimed call of the same function (its data in
  cache, as eht-imaging's consecutive calls are timed and as a user's loop
  calls it; timed right after the dense variant, the separable one would find
  its data evicted and take about twice as long).

Run `python benchmarks/multifreq.py [--quick]`. Writes
`benchmarks/results/multifreq.json`.
"""

import _common as C


BLAS = C.prepare_blas_env(1)  # before numpy is imported

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "eht" / "m87_2018"
BANDS = ("b1", "b2", "b3", "b4")
FILE = "L2V1_M87_2018_111_{}_hops_netcal_10s_StokesI.uvfits"
FLUX = 0.6
WEIGHTS = {"amp": 0.2, "cphase": 1.0, "logcamp": 1.0}
REG_WEIGHTS = {"simple": 100.0, "tv": 1.0, "flux": 1e4}
SPEC_WEIGHTS = {"l2_alpha": 1.0, "tv_alpha": 1.0}


def load_bands():
    import eqmodels as em

    paths = [DATA / FILE.format(b) for b in BANDS]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise SystemExit(f"data not found: {missing}")
    bands = em.MultiBandData([em.load_uvfits(p) for p in paths]).scan_average()
    out = []
    for d in bands:
        out.append(
            {
                "freq": float(d.band_freqs[0]),
                "amp": em.amplitudes(d),
                "cphase": em.closure_phases(d),
                "logcamp": em.log_closure_amplitudes(d),
            }
        )
    u = np.concatenate([np.asarray(d.u) for d in bands])
    v = np.concatenate([np.asarray(d.v) for d in bands])
    return bands, out, u, v


def build(bands, grid, prior, beam, forward):
    import eqmodels as em

    kw = {"eps": 1e-12} if forward == "nufft" else {}
    terms = []
    for b in bands:
        nu = b["freq"]
        terms += [
            WEIGHTS["amp"]
            * em.AtFrequency(
                em.AmpChi2.from_data(b["amp"], grid, forward=forward, **kw), nu
            ),
            WEIGHTS["cphase"]
            * em.AtFrequency(
                em.ClosurePhaseChi2.from_data(b["cphase"], grid, forward=forward, **kw),
                nu,
            ),
            WEIGHTS["logcamp"]
            * em.AtFrequency(
                em.LogClosureAmpChi2.from_data(
                    b["logcamp"], grid, forward=forward, **kw
                ),
                nu,
            ),
        ]
    norm = dict(flux=FLUX, beam=beam, normalise=True)
    regs = (
        REG_WEIGHTS["simple"] * em.SimpleEntropy(prior, flux=FLUX, normalise=True)
        + REG_WEIGHTS["tv"] * em.TV(grid, **norm)
        + REG_WEIGHTS["flux"] * em.Flux(FLUX, normalise=True)
        + SPEC_WEIGHTS["l2_alpha"] * em.SpectralL2(grid, "alpha")
        + SPEC_WEIGHTS["tv_alpha"] * em.SpectralTV(grid, "alpha")
    )
    return sum(terms) + regs


def dft(grid, u, v):
    """Dense complex matrix, triangle pulse (CONVENTIONS.md), as eht-imaging's
    `ftmatrix` but on our grid orientation (both sides get the same matrix)."""
    xx, yy = grid.coords()
    u = np.ravel(u)[:, None]
    v = np.ravel(v)[:, None]
    pulse = (np.sinc(u * grid.psize) * np.sinc(v * grid.psize)) ** 2
    return pulse * np.exp(2j * np.pi * (u * xx.ravel() + v * yy.ravel()))


def ehtim_objective(bands, grid, prior, beam, freq0):
    """eht-imaging's multi-frequency functions composed as its imager composes
    them; `f(lnI0, alpha) -> (value, (grad_lnI0, grad_alpha))`, or None."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import ehtim.imaging.imager_utils as iu
            import ehtim.imaging.multifreq_imager_utils as mfu
    except ImportError:
        return None
    g = grid
    per_band = []
    for b in bands:
        a, c, lc = b["amp"], b["cphase"], b["logcamp"]
        cu, cv = np.asarray(c.u), np.asarray(c.v)
        lu, lv = np.asarray(lc.u), np.asarray(lc.v)
        per_band.append(
            (
                np.log(b["freq"] / freq0),
                dft(g, a.u, a.v),
                np.asarray(a.amp),
                np.asarray(a.sigma),
                [dft(g, cu[:, i], cv[:, i]) for i in range(3)],
                np.rad2deg(np.asarray(c.cphase)),
                np.rad2deg(np.asarray(c.sigma)),
                [dft(g, lu[:, i], lv[:, i]) for i in range(4)],
                np.asarray(lc.logcamp),
                np.asarray(lc.sigma),
            )
        )
    p = np.ravel(prior)
    mask = np.ones(g.npix, bool)
    zeros = np.zeros(g.npix)
    spec = (mask, g.nx, g.ny, g.psize)

    def value(x, alpha):
        img = np.exp(x)
        arr = (img, alpha, zeros)
        val = 0.0
        for lr, A_a, amp, s_a, A_c, cp, s_c, A_l, lca, s_l in per_band:
            cur = mfu.image_at_freq(arr, lr)
            val += (
                WEIGHTS["amp"] * iu.chisq_amp(cur, A_a, amp, s_a)
                + WEIGHTS["cphase"] * iu.chisq_cphase(cur, A_c, cp, s_c)
                + WEIGHTS["logcamp"] * iu.chisq_logcamp(cur, A_l, lca, s_l)
            )
        val += (
            -REG_WEIGHTS["simple"] * iu.ssimple(img, p, FLUX, True)
            - REG_WEIGHTS["tv"] * iu.stv(img, g.nx, g.ny, g.psize, FLUX, True, beam)
            - REG_WEIGHTS["flux"] * iu.sflux(img, p, FLUX, True)
        )
        for name, w in SPEC_WEIGHTS.items():
            val += w * mfu.regularizer_mf(
                alpha, zeros, *spec, name, norm_reg=False, beam_size=beam
            )
        return val

    def grad(x, alpha):
        img = np.exp(x)
        arr = (img, alpha, zeros)
        gi, ga = np.zeros(g.npix), np.zeros(g.npix)
        for lr, A_a, amp, s_a, A_c, cp, s_c, A_l, lca, s_l in per_band:
            cur = mfu.image_at_freq(arr, lr)
            gc = (
                WEIGHTS["amp"] * iu.chisqgrad_amp(cur, A_a, amp, s_a)
                + WEIGHTS["cphase"] * iu.chisqgrad_cphase(cur, A_c, cp, s_c)
                + WEIGHTS["logcamp"] * iu.chisqgrad_logcamp(cur, A_l, lca, s_l)
            )
            d_i, d_a, _ = mfu.mf_all_grads_chain(gc, cur, arr, lr)
            gi += d_i
            ga += d_a
        gi += (
            -REG_WEIGHTS["simple"] * iu.ssimplegrad(img, p, FLUX, True)
            - REG_WEIGHTS["tv"] * iu.stvgrad(img, g.nx, g.ny, g.psize, FLUX, True, beam)
            - REG_WEIGHTS["flux"] * iu.sfluxgrad(img, p, FLUX, True)
        )
        for name, w in SPEC_WEIGHTS.items():
            ga += w * mfu.regularizergrad_mf(
                alpha, zeros, *spec, name, norm_reg=False, beam_size=beam
            )
        return gi * img, ga  # chain rule through I₀ = exp(x)

    def f(x, alpha):
        return value(x, alpha), grad(x, alpha)

    return f


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats (< 2 min)")
    ap.add_argument("--forwards", default="separable,direct,nufft", help="comma list")
    ap.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results" / "multifreq.json")
    )
    args = ap.parse_args()
    cfg = C.QUICK_TIMING if args.quick else C.FULL_TIMING

    import equinox as eqx
    import jax

    jax.config.update("jax_enable_x64", True)
    import eqmodels as em

    env = C.environment_info()
    if (env["loadavg"] or [0])[0] > 1:
        print(f"note: load average {env['loadavg']}: other processes compete")
    bands_data, bands, u, v = load_bands()
    print(bands_data.summary())
    rows = {
        b: {k: int(np.asarray(x[k].u).shape[0]) for k in ("amp", "cphase", "logcamp")}
        for b, x in zip(BANDS, bands)
    }
    grid = em.ImageGrid.from_fov(64, 128.0)
    prior = np.asarray(em.GaussianImage(grid, FLUX, em.uas_to_rad(40.0))())
    beam = em.beam_from_uv(u, v)
    freq0 = float(np.mean([b["freq"] for b in bands]))
    rng = np.random.default_rng(0)
    image = prior * (1 + 0.05 * rng.standard_normal(prior.shape)) ** 2
    alpha = rng.normal(0.0, 0.5, grid.shape)
    model = em.MultiFrequencyImage(em.PixelImage.from_image(image, grid), freq0, alpha)
    x = np.log(image).ravel()

    results, fns, loops, builds = {}, {}, {}, {}
    vg = eqx.filter_jit(eqx.filter_value_and_grad(lambda m, o: o(m)))
    n_loop = 10 if args.quick else 30

    @eqx.filter_jit
    def in_loop(model, obj):
        def body(m, _):
            val, g = eqx.filter_value_and_grad(lambda m: obj(m))(m)
            return eqx.apply_updates(m, jax.tree.map(lambda x: -1e-12 * x, g)), val

        return jax.lax.scan(body, model, None, length=n_loop)[1]

    for forward in args.forwards.split(","):
        t0 = time.perf_counter()
        obj = build(bands, grid, prior, beam, forward)
        builds[forward] = time.perf_counter() - t0
        fns[forward] = lambda obj=obj: vg(model, obj)
        loops[forward] = lambda obj=obj: in_loop(model, obj)

    eh = ehtim_objective(bands, grid, prior, beam, freq0)
    if eh is None:
        raise SystemExit("eht-imaging (the baseline) is not importable")
    eh_timing, (eh_val, (eh_gi, eh_ga)) = C.time_call(lambda: eh(x, alpha.ravel()), cfg)
    # Warm cache, as eht-imaging's consecutive calls (`time_call`): a user's
    # loop calls one objective, not three forward models in turn.
    timed = C.time_interleaved(fns, cfg, warm_cache=True)
    timed_loops = C.time_interleaved(loops, cfg, warm_cache=True)
    base = eh_timing.median
    table_rows = [
        ["ehtim 1.3.2 mf functions", C.fmt_time(base), "1.0", "-", "-", "-", "-", "-"]
    ]
    results["ehtim"] = {"timing": eh_timing.as_dict(), "value": float(eh_val)}
    for name, (t, (val, g)) in timed.items():
        err_v = C.rel_err(val, eh_val)
        err_gi = C.rel_err(np.ravel(g.base.params), eh_gi)
        err_ga = C.rel_err(np.ravel(g.alpha), eh_ga)
        tl = timed_loops[name][0]
        per_step = tl.median / n_loop
        table_rows.append(
            [
                name,
                C.fmt_time(t.median),
                C.fmt_ratio(base / t.median),
                C.fmt_time(per_step),
                C.fmt_ratio(base / per_step),
                C.fmt_time(t.first),
                f"{err_v:.1e}",
                f"{max(err_gi, err_ga):.1e}",
            ]
        )
        results[name] = {
            "timing": t.as_dict(),
            "speedup_vs_ehtim": base / t.median,
            "in_loop_per_eval_s": per_step,
            "in_loop_speedup_vs_ehtim": base / per_step,
            "value": float(val),
            "value_rel_err_vs_ehtim": err_v,
            "grad_lnI0_rel_err_vs_ehtim": err_gi,
            "grad_alpha_rel_err_vs_ehtim": err_ga,
            "build_s": builds[name],
        }
    table = C.print_table(
        [
            "variant",
            "ms/call",
            "ehtim/call",
            "ms in loop",
            "ehtim/loop",
            "first (compile)",
            "value err",
            "grad err",
        ],  # fmt: skip
        table_rows,
        title="value + gradient of a four-band objective (M87 2018-04-21 b1-b4, "
        "64², I₀ and α free, float64), median ms\n(per call: one eqx.filter_jit "
        "call after an untimed one, Python dispatch included; in loop: per "
        "evaluation inside one "
        f"compiled scan of {n_loop} gradient steps; errors relative to eht-imaging)",
    )
    ours = {k: r for k, r in results.items() if k != "ehtim"}
    best = min((r["timing"]["median"], k) for k, r in ours.items())
    best_loop = min((r["in_loop_per_eval_s"], k) for k, r in ours.items())
    ratio, ratio_loop = base / best[0], base / best_loop[0]
    met, met_loop = ratio >= 20, ratio_loop >= 20
    print(
        f"fastest per call: {best[1]} {best[0] * 1e3:.3g} ms = {ratio:.1f}× "
        f"eht-imaging (target ≥ 20×: {'met' if met else 'NOT met'}); in a compiled "
        f"loop: {best_loop[1]} {best_loop[0] * 1e3:.3g} ms = {ratio_loop:.1f}× "
        f"({'met' if met_loop else 'NOT met'})"
    )
    out = C.write_json(
        args.out,
        {
            "mode": "quick" if args.quick else "full",
            "data": [str(DATA / FILE.format(b)) for b in BANDS],
            "rows": rows,
            "freq0_hz": freq0,
            "environment": env,
            "blas": C.blas_info(),
            "blas_env": BLAS,
            "results": results,
            "fastest": best[1],
            "speedup_vs_ehtim": ratio,
            "target_20x_met": bool(met),
            "fastest_in_loop": best_loop[1],
            "in_loop_speedup_vs_ehtim": ratio_loop,
            "target_20x_met_in_loop": bool(met_loop),
            "loadavg_end": C.loadavg(),
            "report": table,
        },
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
