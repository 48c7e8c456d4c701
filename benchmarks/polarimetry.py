"""Polarimetric imaging benchmark (issue 37).

A. **Value + gradient of a polarimetric objective** against eht-imaging in the same
   run. Problem: M87 2017-04-11 lo band, full polarization (release 2023-D01-01,
   `*_hops_ALMArot`), scan-averaged and switched to Stokes by eht-imaging; the rows
   of eht-imaging's own `chisqdata` for `amp` (Stokes I), `pvis`, `m` and `vvis`;
   regularizers `hw` and `ptv` (normalised); `npix²` pixels over 128 µas,
   float64. The variables are eht-imaging's solver variables (Stokes I and
   `(a, φ, b)` before its `polcv` change of variables to `(ρ, φ, ψ)`: our
   `PolSphericalImage`), so both sides compute the same gradient:

   - **ehtim 1.3.2**: `chisq_amp`/`chisqgrad_amp`, `polchisq`/`polchisqgrad`
     (`ttype='direct'`, `pol_solve=(1, 1, 1, 1)`) and
     `polregularizer`/`polregularizergrad`, value and gradient computed separately
     as its imager calls them; `OPENBLAS_NUM_THREADS=1` (its best configuration on
     2 cores), set before numpy is imported.
   - **ours**: `eqx.filter_jit(eqx.filter_value_and_grad(lambda m, o: o(m)))`
     with the model and the `Objective` as arguments (Python dispatch included),
     for `DirectFT`, `SeparableFT` and `NUFFT` (eps 1e-12); the four data terms share one
     batched transform of the four planes.

   Target (issue 37): ours ≥ 20× eht-imaging.

B. **The batched four-plane transform against one Stokes I transform**:
   jitted value and gradient of `Σ |F x|²` for an `(ny, nx)` image and for the four
   planes of a `(4, ny, nx)` image through `forward.batched`, on the raw rows of the
   same file (7448), `DirectFT` and `NUFFT`. Target: ≤ 1.5×.

Run `python benchmarks/polarimetry.py [--quick] [--npix 64]`. Writes
`benchmarks/results/polarimetry.json`.
"""

import _common as C


BLAS = C.prepare_blas_env(1)  # before numpy is imported

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import pathlib  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402


ROOT = pathlib.Path(__file__).resolve().parents[1]
FILE = (
    ROOT.parent
    / "shared/data/eht/m87_2017_pol/hops_data/April11"
    / "SR2_M87_2017_101_lo_hops_ALMArot.uvfits"
)
FLUX = 0.6
FOV_UAS = 128.0
WEIGHTS = {"amp": 1.0, "pvis": 1.0, "m": 1.0, "vvis": 1.0, "hw": 1.0, "ptv": 1.0}
TARGET_VS_EHTIM = 20.0
TARGET_BATCHED = 1.5


@contextlib.contextmanager
def quiet():
    """eht-imaging's prints and numpy warnings (its loader divides by zero
    weights of flagged correlations) silenced."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def ehtim_problem(npix):
    """eht-imaging's observation, prior image and the rows (u, v, data, σ, A) of
    each data term, with finite data."""
    import ehtim

    with quiet():
        obs = ehtim.obsdata.load_uvfits(str(FILE), polrep="circ")
        obs = obs.avg_coherent(0.0, scan_avg=True).switch_polrep("stokes")
        prior = ehtim.image.make_empty(
            npix, FOV_UAS * ehtim.RADPERUAS, obs.ra, obs.dec, rf=obs.rf,
            source=obs.source, mjd=obs.mjd,
        )  # fmt: skip
        import ehtim.imaging.imager_utils as iu
        import ehtim.imaging.pol_imager_utils as pu

        rows = {}
        fields = {
            "amp": (iu.chisqdata_amp, ["u", "v", "amp", "sigma"], False),
            "pvis": (pu.chisqdata_pvis, ["u", "v", "pvis", "psigma"], True),
            "m": (pu.chisqdata_m, ["u", "v", "m", "msigma"], True),
            "vvis": (pu.chisqdata_vvis, ["u", "v", "vvis", "vsigma"], False),
        }
        for key, (fn, names, conj) in fields.items():
            if key == "amp":
                data, sigma, a = fn(obs, prior, [], debias=False)
                table = obs.unpack(names, debias=False)
            else:
                data, sigma, a = fn(obs, prior, [])
                table = obs.unpack(names, conj=conj)
            np.testing.assert_allclose(table[names[2]], data, rtol=1e-12)
            keep = np.isfinite(data) & np.isfinite(sigma)
            rows[key] = (
                table["u"][keep], table["v"][keep], data[keep], sigma[keep], a[keep]
            )  # fmt: skip
    return obs, prior, rows


def ehtim_objective(rows, prior, beam):
    import ehtim.imaging.imager_utils as iu
    import ehtim.imaging.pol_imager_utils as pu

    nx, ny, psize = prior.xdim, prior.ydim, prior.psize
    solve = (1, 1, 1, 1)  # (I, ρ, φ, ψ) all solved
    kw = dict(norm_reg=True, beam_size=beam)
    mask = np.ones(nx * ny, bool)

    def f(x):
        """Value and gradient in the solver variables `x = (I, a, φ, b)`, as its
        imager computes them: physical `imarr = polcv(x)`, the gradient times
        `polcv_chain(x)`."""
        imarr = pu.polcv(x)
        val = WEIGHTS["amp"] * iu.chisq_amp(imarr[0], *_amp_args(rows))
        grad = np.zeros_like(imarr)
        grad[0] += WEIGHTS["amp"] * iu.chisqgrad_amp(imarr[0], *_amp_args(rows))
        for key in ("pvis", "m", "vvis"):
            _, _, data, sigma, a = rows[key]
            val += WEIGHTS[key] * pu.polchisq(imarr, a, data, sigma, key)
            grad += WEIGHTS[key] * pu.polchisqgrad(
                imarr, a, data, sigma, key, pol_solve=solve
            )
        for key in ("hw", "ptv"):
            args = (imarr, None, mask, FLUX, FLUX, FLUX, nx, ny, psize, key)
            val += WEIGHTS[key] * pu.polregularizer(*args, **kw)
            grad += WEIGHTS[key] * pu.polregularizergrad(*args, pol_solve=solve, **kw)
        return val, grad * pu.polcv_chain(x)

    return f


def _amp_args(rows):
    _, _, data, sigma, a = rows["amp"]
    return a, data, sigma


def our_objective(em, rows, grid, forward, beam):
    terms = {
        "amp": em.AmpChi2,
        "pvis": em.PolVisChi2,
        "m": em.FracPolChi2,
        "vvis": em.StokesVChi2,
    }
    parts = []
    for key, cls in terms.items():
        u, v, data, sigma, _ = rows[key]
        fwd = em.make_forward(forward, grid, u, v)
        parts.append(WEIGHTS[key] * cls(fwd, data, sigma))
    parts.append(WEIGHTS["hw"] * em.HolographicEntropy(flux=FLUX, normalise=True))
    parts.append(WEIGHTS["ptv"] * em.PolTV(grid, flux=FLUX, beam=beam, normalise=True))
    return sum(parts)


def part_a(args, cfg, em, eqx, jax):
    obs, prior, rows = ehtim_problem(args.npix)
    grid = em.ImageGrid(prior.ydim, prior.xdim, prior.psize)
    beam = em.beam_from_uv(rows["amp"][0], rows["amp"][1])
    rng = np.random.default_rng(0)
    gauss = np.asarray(em.GaussianImage(grid, FLUX, em.uas_to_rad(40.0))())
    i = gauss * (1 + 0.05 * rng.standard_normal(grid.shape)) ** 2 + 1e-6 * FLUX
    # eht-imaging's solver variables (I, a, φ, b), `polcv` → (I, ρ, φ, ψ).
    params = np.stack(
        [
            rng.uniform(-0.5, 0.0, grid.shape),
            rng.uniform(-np.pi, np.pi, grid.shape),
            rng.uniform(-0.2, 0.2, grid.shape),
        ]
    )
    x = np.concatenate([i.reshape(1, -1), params.reshape(3, -1)])
    model = em.PolSphericalImage(
        em.PixelImage.from_image(i, grid, transform="identity"), params
    )
    eh = ehtim_objective(rows, prior, beam)
    eh_t, (eh_val, eh_grad) = C.time_call(lambda: eh(x), cfg)
    vg = eqx.filter_jit(eqx.filter_value_and_grad(lambda m, o: o(m)))
    out = {
        "rows": {k: int(r[2].size) for k, r in rows.items()},
        "npix": args.npix,
        "ehtim": eh_t.as_dict(),
    }
    n_loop = 20

    @eqx.filter_jit
    def in_loop(model, obj):
        """`n_loop` gradient steps in one compiled program (how the on-device
        solvers evaluate the objective): no Python dispatch per evaluation."""

        def body(m, _):
            v, g = eqx.filter_value_and_grad(lambda m: obj(m))(m)
            return eqx.apply_updates(m, jax.tree.map(lambda x: -1e-12 * x, g)), v

        return jax.lax.scan(body, model, None, length=n_loop)[1]

    table = [
        ["ehtim 1.3.2 functions", C.fmt_time(eh_t.median), "1.0", "-", "-", "-", "-"]
    ]
    for forward in args.forwards.split(","):
        obj = our_objective(em, rows, grid, forward, beam)
        t, (val, grad) = C.time_call(lambda obj=obj: vg(model, obj), cfg)
        tl, _ = C.time_call(lambda obj=obj: in_loop(model, obj), cfg)
        per_eval = tl.median / n_loop
        g = np.concatenate(
            [
                np.asarray(grad.intensity.params).reshape(1, -1),
                np.asarray(grad.params).reshape(3, -1),
            ]
        )
        err = max(C.rel_err(val, eh_val), C.rel_err(g, eh_grad))
        ratio = eh_t.median / t.median
        table.append(
            [
                f"ours, {forward} (shared: {sum(s.n_points for s in obj.shared)} pts)",
                C.fmt_time(t.median),
                C.fmt_ratio(ratio),
                C.fmt_time(per_eval),
                C.fmt_ratio(eh_t.median / per_eval),
                C.fmt_time(t.first),
                f"{err:.1e}",
            ]
        )
        out[forward] = {
            "timing": t.as_dict(),
            "speedup_vs_ehtim": ratio,
            "in_loop_per_eval_s": per_eval,
            "in_loop_speedup_vs_ehtim": eh_t.median / per_eval,
            "rel_err_vs_ehtim": err,
        }
    C.print_table(
        [
            "variant",
            "value+grad",
            "ehtim/ours",
            "in loop",
            "ehtim/loop",
            "first (compile)",
            "rel err",
        ],
        table,
        title=(
            f"A. polarimetric objective (amp + pvis + m + vvis + hw + ptv), "
            f"{args.npix}² over {FOV_UAS:g} µas, float64, median ms (per call: one "
            "eqx.filter_jit call, Python dispatch included; in loop: per evaluation "
            f"inside one compiled scan of {n_loop} gradient steps); target ≥ "
            f"{TARGET_VS_EHTIM:g}× eht-imaging"
        ),
    )
    return out


def part_b(args, cfg, em, jax, jnp):
    data = em.load_uvfits(FILE, polarization="full")
    grid = em.ImageGrid.from_fov(args.npix, FOV_UAS)
    u, v = np.asarray(data.u), np.asarray(data.v)
    rng = np.random.default_rng(1)
    image = jnp.asarray(rng.uniform(0.1, 1.0, grid.shape) / grid.npix)
    stokes = jnp.asarray(rng.uniform(-0.1, 1.0, (4, *grid.shape)) / grid.npix)
    out, table = {"rows": int(u.size)}, []
    for forward in args.forwards.split(","):
        fwd = em.make_forward(forward, grid, u, v)

        def single(x, f=fwd):
            vis = f(x)
            return jnp.sum(vis.real**2 + vis.imag**2)

        def batched(x, f=fwd):
            vis = f.batched(x)
            return jnp.sum(vis.real**2 + vis.imag**2)

        vg1 = jax.jit(jax.value_and_grad(single))
        vg4 = jax.jit(jax.value_and_grad(batched))
        t = C.time_interleaved(
            {"I": lambda: vg1(image), "IQUV": lambda: vg4(stokes)}, cfg
        )
        t1, t4 = t["I"][0], t["IQUV"][0]
        ratio = t4.median / t1.median
        table.append(
            [
                forward,
                C.fmt_time(t1.median),
                C.fmt_time(t4.median),
                f"{ratio:.2f}",
                f"{4 / ratio:.2f}",
            ]
        )
        out[forward] = {
            "single": t1.as_dict(),
            "batched4": t4.as_dict(),
            "ratio": ratio,
        }
    C.print_table(
        ["forward", "I (1 plane)", "IQUV (4 planes)", "ratio", "planes per I time"],
        table,
        title=(
            f"B. value + gradient of Σ|F x|², {u.size} raw rows, {args.npix}², "
            f"median; target ratio ≤ {TARGET_BATCHED:g}"
        ),
    )
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats (< 2 min)")
    ap.add_argument("--npix", type=int, default=64)
    ap.add_argument("--forwards", default="direct,separable,nufft")
    ap.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results" / "polarimetry.json")
    )
    args = ap.parse_args()
    cfg = C.QUICK_TIMING if args.quick else C.FULL_TIMING

    import equinox as eqx
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    import eqmodels as em

    env = C.environment_info()
    results = {"env": env, "blas": BLAS}
    if not FILE.is_file():
        raise SystemExit(f"{FILE} is not present (../shared/data)")
    try:
        with quiet():
            import ehtim  # noqa: F401
    except ImportError:
        print("eht-imaging is not installed: part A skipped")
    else:
        results["objective"] = part_a(args, cfg, em, eqx, jax)
    results["batched"] = part_b(args, cfg, em, jax, jnp)
    C.write_json(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
