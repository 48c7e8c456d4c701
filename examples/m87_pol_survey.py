"""A synthetic-data survey of the polarimetric recipe's weights (issue 38), as EHT
M87* Paper VII chose its imaging parameters: known polarized images observed with
the coverage, noise and (uncorrected) leakage of a real 2017 night, imaged by the
recipe's polarimetric stage with each candidate weight set, and scored against the
truth at the papers' 20 µas resolution.

    python examples/m87_pol_survey.py                  # the survey (2017-04-11)
    python examples/m87_pol_survey.py --shard 0/2 ...  # half of it (run two at once)
    python examples/m87_pol_survey.py --report FILE    # the table of a run (--day)
    python examples/m87_pol_survey.py --quick          # one truth, two weight sets

Every run appends one JSON line to `--out` (runs already there are skipped, so a
cut-off survey resumes). The truths share the EHT pipeline's Stokes I image of
2017-04-11 (`../shared/data/reference/`), held fixed in the imaging as the recipe
holds its own Stokes I image; their polarization is an EVPA pattern twisting with
position angle (a pure `β₂` mode), a fraction peaking in the south-west, and for
two of them an EVPA scrambled on scales below the beam (EHT M87* Paper VIII's
reading of the low resolved fraction).
"""

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

import jax


jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import eqmodels as em  # noqa: E402
from eqmodels._data._recipe_ops import blur_image  # noqa: E402
from eqmodels._recipe import _m87_pol as R  # noqa: E402


SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
DAYS = {"05": "095", "06": "096", "10": "100", "11": "101"}
#: D-terms of the synthetic observations at the stations the release did not
#: correct (their size and sign as the recipe fits them on the real 2017 days,
#: docs/benchmarks.md), the same in both bands; ALMA, APEX, SMA, JCMT none.
DTERMS = {
    "PV": (-0.05 + 0.01j, 0.05 - 0.01j),
    "AZ": (0.02 + 0.05j, -0.02 + 0.05j),
    "LM": (0.01 - 0.03j, -0.02 + 0.02j),
}
#: The truths: `m0` the fraction's azimuthal mean, `a` its south-west asymmetry,
#: `beta2_deg` the EVPA pattern's twist (∠β₂ of the unblurred, unscrambled
#: pattern), `scramble_deg` the rms of an EVPA field correlated over
#: `SCRAMBLE_FWHM_UAS` (0: none), `net` an added uniform fraction at `net_evpa_deg`
#: (`uniform`: that alone, 10 %, the case where a uniform polarization and the
#: D-terms are hardest to tell apart).
TRUTHS = {
    "twist": dict(m0=0.09, a=0.5, beta2_deg=-150.0, scramble_deg=0.0, net=0.0,
                  net_evpa_deg=0.0),
    "scrambled": dict(m0=0.14, a=0.5, beta2_deg=-140.0, scramble_deg=35.0,
                      net=0.0, net_evpa_deg=0.0),
    "scrambled_net": dict(m0=0.12, a=0.6, beta2_deg=-160.0, scramble_deg=45.0,
                          net=0.02, net_evpa_deg=-30.0),
    "weak": dict(m0=0.06, a=0.3, beta2_deg=-130.0, scramble_deg=25.0, net=0.01,
                 net_evpa_deg=60.0),
    "uniform": dict(m0=0.0, a=0.0, beta2_deg=0.0, scramble_deg=0.0, net=0.10,
                    net_evpa_deg=17.0),
}  # fmt: skip
SCRAMBLE_FWHM_UAS = 8.0
#: The weights surveyed: `ptv` and `hw` of every round (round 1 has no `ptv`, as
#: the recipe's) and the polarization mask (fraction of the Stokes I peak).
PTV = (10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0)
HW = (0.1, 1.0, 10.0)
MASK = (0.01, 0.05, 0.1)
BLUR_UAS = R.SUMMARY_BLUR_UAS
#: `--stokes-v`: Stokes V on the `twist` truth, `v0` a fraction of I varying as
#: `cos(φ − v_pa_deg)` (a dipole across the ring) plus a uniform `v_net` (EHT M87*
#: Paper IX: resolved ⟨|v|⟩ under 3.7 %, net under 1 %), and none at all (the
#: spurious V the recipe makes).
V_TRUTHS = {
    "v_dipole": dict(v0=0.03, v_pa_deg=90.0, v_net=0.0),
    "v_net": dict(v0=0.0, v_pa_deg=0.0, v_net=-0.01),
    "v_none": dict(v0=0.0, v_pa_deg=0.0, v_net=0.0),
}
#: `--stokes-v`: the V weights surveyed (`vvis` data term, `l1v`, `vtv`
#: regularizers), the linear polarization's at the recipe's `POL_ROUNDS`.
VVIS = (1.0, 5.0, 20.0)
L1V = (0.1, 1.0, 10.0)
VTV = (10.0, 100.0, 1000.0)


def reference_image(path: Path):
    image, grid = em.load_fits(path)
    return np.asarray(image, np.float64), grid


def truth_stokes(i_img: np.ndarray, grid, spec: dict, seed: int) -> np.ndarray:
    """The four planes of one truth on the Stokes I image `i_img`."""
    xx, yy = grid.coords()
    x0 = float((i_img * xx).sum() / i_img.sum())
    y0 = float((i_img * yy).sum() / i_img.sum())
    phi = np.arctan2(xx - x0, yy - y0)  # position angle, east of north
    m = spec["m0"] * (1.0 + spec["a"] * np.cos(phi - np.deg2rad(225.0)))
    chi = phi + 0.5 * np.deg2rad(spec["beta2_deg"])  # P ∝ exp(i(2φ + ∠β₂))
    if spec["scramble_deg"] > 0:
        rng = np.random.default_rng(seed)
        field = rng.standard_normal(grid.shape)
        field = np.array(blur_image(field, grid, em.uas_to_rad(SCRAMBLE_FWHM_UAS)))
        field *= np.deg2rad(spec["scramble_deg"]) / field.std()
        chi = chi + field
    p = m * i_img * np.exp(2j * chi)
    p = p + spec["net"] * i_img * np.exp(2j * np.deg2rad(spec["net_evpa_deg"]))
    return np.stack([i_img, p.real, p.imag, np.zeros_like(i_img)])


def with_stokes_v(stokes: np.ndarray, grid, spec: dict) -> np.ndarray:
    """`stokes` with the V plane of a `V_TRUTHS` entry."""
    i_img = stokes[0]
    xx, yy = grid.coords()
    x0 = float((i_img * xx).sum() / i_img.sum())
    y0 = float((i_img * yy).sum() / i_img.sum())
    phi = np.arctan2(xx - x0, yy - y0)
    out = stokes.copy()
    out[3] = i_img * (
        spec["v0"] * np.cos(phi - np.deg2rad(spec["v_pa_deg"])) + spec["v_net"]
    )
    return out


def coverage(day: str):
    """The day's two bands prepared as the recipe prepares them (scan-averaged,
    joined, intra-site rows scaled), without the intra-site baselines."""
    base = SHARED / "eht" / "m87_2017_pol" / "hops_data" / f"April{day}"
    doy = DAYS[day]
    lo, hi = (
        base / f"SR2_M87_2017_{doy}_{b}_hops_zbl-dtcal+selfcal.uvfits"
        for b in ("lo", "hi")
    )
    data = R.prepare_pol_data(lo, hi)
    uv = np.hypot(np.asarray(data.u), np.asarray(data.v))
    return data.take(np.flatnonzero(uv >= R.POL_UV_MIN))


def rounds_for(ptv: float, hw: float) -> list[dict]:
    out = []
    for r in R.POL_ROUNDS:
        r = dict(r)
        r["hw"] = hw
        if "ptv" in r:
            r["ptv"] = ptv
        out.append(r)
    return out


def scores(truth: np.ndarray, image: np.ndarray, grid) -> dict:
    """The recipe's summary (20 µas) of both and the P images' normalised
    cross-correlation at 20 µas."""
    t = R.pol_summary(truth, grid, BLUR_UAS)
    s = R.pol_summary(image, grid, BLUR_UAS)
    fwhm = em.uas_to_rad(BLUR_UAS)
    pt, ps = (
        np.asarray(blur_image(x[1], grid, fwhm))
        + 1j * np.asarray(blur_image(x[2], grid, fwhm))
        for x in (truth, image)
    )
    nx = float(np.real(np.vdot(pt, ps)) / (np.linalg.norm(pt) * np.linalg.norm(ps)))
    keys = ("m_net", "m_avg", "beta2_abs", "beta2_arg_deg", "evpa_net_deg")
    return {
        "truth": {k: float(t[k]) for k in keys},
        "image": {k: float(s[k]) for k in keys},
        "beta2_dist": float(abs(complex(t["beta2"]) - complex(s["beta2"]))),
        "p_nxcorr": nx,
    }


def scores_v(truth: np.ndarray, image: np.ndarray, grid) -> dict:
    """The net and image-averaged circular fractions (20 µas) of both and the V
    images' normalised cross-correlation at 20 µas (`None` for a truth without V)."""
    t = R.pol_summary(truth, grid, BLUR_UAS)
    s = R.pol_summary(image, grid, BLUR_UAS)
    fwhm = em.uas_to_rad(BLUR_UAS)
    vt, vs = (np.asarray(blur_image(x[3], grid, fwhm)) for x in (truth, image))
    norm = np.linalg.norm(vt) * np.linalg.norm(vs)
    nx = float(np.vdot(vt, vs) / norm) if np.any(vt) and norm > 0 else None
    keys = ("v_net", "v_avg")
    return {
        "truth_v": {k: float(t[k]) for k in keys},
        "image_v": {k: float(s[k]) for k in keys},
        "v_nxcorr": nx,
    }


def run_one(
    data,
    truth,
    grid,
    ptv,
    hw,
    mask,
    seed,
    fast,
    v_weights=None,
    iterations=None,
    tol=None,
    scale_power=None,
    scale_power_v=None,
):
    syn = em.observe_same(truth, grid, data, dterms=DTERMS, seed=seed)
    t = time.perf_counter()
    rounds = rounds_for(ptv, hw)
    if v_weights is not None:
        rounds = [dict(r, **v_weights) for r in rounds]
    model, jones, start, rounds = R.image_polarization(
        syn, truth[0], grid, rounds=rounds, mask_fraction=mask, fast=fast,
        stokes_v=v_weights is not None, iterations=iterations, tol=tol,
        scale_power=scale_power, scale_power_v=scale_power_v,
    )  # fmt: skip
    image = np.asarray(model())
    d = np.asarray(jones.dterms())
    names = syn.station_names
    dterm_err = max(
        float(np.abs(d[:, names.index(s)] - np.array(v)[None]).max())
        for s, v in DTERMS.items()
        if s in names
    )
    out = scores(truth, image, grid)
    if v_weights is not None:
        out.update(scores_v(truth, image, grid), chi2_vvis=rounds[-1]["terms"]["vvis"])
    out.update(
        seconds=time.perf_counter() - t,
        chi2_m=rounds[-1]["terms"].get("m"),
        chi2_pvis=rounds[-1]["terms"].get("pvis"),
        dterm_err=dterm_err,
        objective=rounds[-1]["end"],
        round_steps=[e["steps"] for e in rounds],
        reasons=[e["reason"] for e in rounds],
    )
    return out


def configs(quick: bool):
    if quick:
        return [(100.0, 1.0, 0.01), (1000.0, 1.0, 0.01)]
    return list(itertools.product(PTV, HW, MASK))


def _tol(row: dict) -> float:
    """A run's stopping tolerance (runs recorded before `tol` was: 1e-6, the
    recipe's until then)."""
    return row.get("tol", 1e-6)


def _power(row: dict) -> float:
    """The exponent of the coordinates a run's rounds solved in (runs recorded
    before `scale_power` was: 0, the `PolPixelImage`'s own)."""
    return row.get("scale_power", 0.0)


def _power_v(row: dict) -> float:
    """The exponent of a V-survey run's circular component (runs recorded before
    `scale_power_v` was: their `scale_power`, which then applied to it too)."""
    return row.get("scale_power_v", _power(row))


def _rows(path: Path, day: str) -> list[dict]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [r for r in rows if r["day"] == day]


def report(path: Path, day: str = "11") -> str:
    """The table of a run's weight sets on one day's coverage, best first."""
    rows = _rows(path, day)
    by = {}
    for r in rows:
        key = (r["ptv"], r["hw"], r["mask"], r.get("iterations", "?"), _tol(r))
        key += (_power(r),)
        by.setdefault(key, []).append(r)
    lines = [
        "| ptv | hw | mask | max steps | tol | scale power | P nxcorr (mean, min) "
        "| Δ⟨|m|⟩ (pp, mean) | Δ|m_net| (pp) | |Δβ₂| | Δ∠β₂ (deg) | χ² m / pvis "
        "| D-term err |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def mean(xs):
        return float(np.mean(xs))

    order = sorted(by, key=lambda k: -mean([r["p_nxcorr"] for r in by[k]]))
    for k in order:
        rs = by[k]
        dm = [100 * (r["image"]["m_avg"] - r["truth"]["m_avg"]) for r in rs]
        dn = [100 * (r["image"]["m_net"] - r["truth"]["m_net"]) for r in rs]
        da = [
            (r["image"]["beta2_arg_deg"] - r["truth"]["beta2_arg_deg"] + 180) % 360
            - 180
            for r in rs
        ]
        lines.append(
            f"| {k[0]:g} | {k[1]:g} | {k[2]:g} | {k[3]} | {k[4]:g} | {k[5]:g} | "
            f"{mean([r['p_nxcorr'] for r in rs]):.3f}, "
            f"{min(r['p_nxcorr'] for r in rs):.3f} | {mean(dm):+.2f} "
            f"({min(dm):+.1f}..{max(dm):+.1f}) | {mean(dn):+.2f} | "
            f"{mean([r['beta2_dist'] for r in rs]):.4f} | {mean(da):+.1f} | "
            f"{mean([r['chi2_m'] for r in rs]):.2f} / "
            f"{mean([r['chi2_pvis'] for r in rs]):.2f} | "
            f"{max(r['dterm_err'] for r in rs):.3f} |"
        )
    truths = {r["truth_name"]: r["truth"] for r in rows}
    lines.append("")
    lines.append("Truths (20 µas): " + "; ".join(
        f"{n}: ⟨|m|⟩ {100 * t['m_avg']:.1f} %, |m_net| {100 * t['m_net']:.1f} %, "
        f"|β₂| {t['beta2_abs']:.3f} at {t['beta2_arg_deg']:.0f}°"
        for n, t in truths.items()
    ))  # fmt: skip
    return "\n".join(lines)


def report_v(path: Path, day: str = "11") -> str:
    """The table of a `--stokes-v` run on one day's coverage."""
    rows = _rows(path, day)
    by = {}
    for r in rows:
        key = (r["vvis"], r["l1v"], r["vtv"], r.get("iterations", "?"), _tol(r))
        key += (r.get("lin_ptv", "?"), r.get("lin_hw", "?"), _power(r), _power_v(r))
        by.setdefault(key, []).append(r)
    lines = [
        "| vvis | l1v | vtv | max steps | tol | linear ptv, hw | scale power (V) "
        "| V nxcorr (mean, min) | Δv_net (pp, max) | Δ⟨|v|⟩ (pp, mean) "
        "| spurious ⟨|v|⟩ (pp) | χ² vvis |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def score(rs):
        return np.mean([r["v_nxcorr"] for r in rs if r["v_nxcorr"] is not None])

    for k in sorted(by, key=lambda k: -score(by[k])):
        rs = by[k]
        nx = [r["v_nxcorr"] for r in rs if r["v_nxcorr"] is not None]
        dn = [100 * (r["image_v"]["v_net"] - r["truth_v"]["v_net"]) for r in rs]
        da = [100 * (r["image_v"]["v_avg"] - r["truth_v"]["v_avg"]) for r in rs]
        spur = [100 * r["image_v"]["v_avg"] for r in rs if r["truth_name"] == "v_none"]
        lines.append(
            f"| {k[0]:g} | {k[1]:g} | {k[2]:g} | {k[3]} | {k[4]:g} | {k[5]}, {k[6]} | "
            f"{k[7]:g} ({k[8]:g}) | "
            f"{np.mean(nx):.3f}, {min(nx):.3f} | "
            f"{max(dn, key=abs):+.2f} | {np.mean(da):+.2f} | "
            f"{(np.mean(spur) if spur else float('nan')):.2f} | "
            f"{np.mean([r['chi2_vvis'] for r in rs]):.2f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--day", default="11", choices=sorted(DAYS))
    ap.add_argument("--out", default="pol_survey.jsonl")
    ap.add_argument("--shard", default="0/1", help="k/n: run every n-th run from k")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fast", action="store_true", help="50 steps per round")
    ap.add_argument(
        "--iterations",
        type=int,
        metavar="N",
        help="at most N L-BFGS steps per round (default the recipe's "
        "POL_ITERATIONS, or POL_ITERATIONS_FAST with --fast); recorded in each "
        "run: the tables keep runs of different N apart",
    )
    ap.add_argument(
        "--stokes-v",
        action="store_true",
        help="survey the Stokes V weights (vvis, l1v, vtv) instead",
    )
    ap.add_argument(
        "--configs",
        metavar="A,B,C;...",
        help="only these weight sets, PTV,HW,MASK (VVIS,L1V,VTV with --stokes-v); "
        "default the whole grid",
    )
    ap.add_argument(
        "--tol",
        type=float,
        metavar="T",
        help="the rounds' ftol and gtol (default the recipe's POL_STOP); recorded "
        "in each run, as --iterations",
    )
    ap.add_argument(
        "--scale-power",
        type=float,
        metavar="P",
        help="the exponent of the coordinates the rounds solve in for Q, U "
        "(default the recipe's POL_SCALE_POWER; 0: the PolPixelImage's own); "
        "recorded in each run, as --iterations",
    )
    ap.add_argument(
        "--scale-power-v",
        type=float,
        metavar="P",
        help="with --stokes-v: that exponent for V (default the recipe's "
        "POL_SCALE_POWER_V); recorded in each run",
    )
    ap.add_argument("--report", metavar="FILE")
    ap.add_argument(
        "--reference",
        default=str(SHARED / "reference" / "m87_2017_101_ehtim_pipeline.fits"),
    )
    args = ap.parse_args(argv)
    if args.iterations is not None and args.iterations < 1:
        ap.error(f"--iterations must be >= 1, got {args.iterations}.")
    if args.tol is not None and not 0 < args.tol < 1:
        ap.error(f"--tol must be in (0, 1), got {args.tol}.")
    if args.scale_power is not None and not (
        np.isfinite(args.scale_power) and args.scale_power >= 0
    ):
        ap.error(f"--scale-power must be a finite number >= 0, got {args.scale_power}.")
    if args.scale_power_v is not None:
        if not args.stokes_v:
            ap.error("--scale-power-v is V's exponent: give it with --stokes-v.")
        if not (np.isfinite(args.scale_power_v) and args.scale_power_v >= 0):
            ap.error(
                f"--scale-power-v must be a finite number >= 0, got "
                f"{args.scale_power_v}."
            )
    table = report_v if args.stokes_v else report
    if args.report:
        print(table(Path(args.report), args.day))
        return 0
    k, n = (int(x) for x in args.shard.split("/"))
    if not os.path.isfile(args.reference):
        print(f"no reference image at {args.reference}", file=sys.stderr)
        return 2
    i_img, grid = reference_image(Path(args.reference))
    data = coverage(args.day)
    fast = args.fast or args.quick
    steps = args.iterations or (R.POL_ITERATIONS_FAST if fast else R.POL_ITERATIONS)
    tol = R.POL_STOP if args.tol is None else args.tol
    power = R.POL_SCALE_POWER if args.scale_power is None else args.scale_power
    power_v = R.POL_SCALE_POWER_V if args.scale_power_v is None else args.scale_power_v
    if args.stokes_v:
        names = list(V_TRUTHS)[:1] if args.quick else list(V_TRUTHS)
        cfgs = (
            [(5.0, 1.0, 100.0)]
            if args.quick
            else list(itertools.product(VVIS, L1V, VTV))
        )
        fields = ("vvis", "l1v", "vtv")
    else:
        names = list(TRUTHS)[:1] if args.quick else list(TRUTHS)
        cfgs = configs(args.quick)
        fields = ("ptv", "hw", "mask")
    lin = R.POL_ROUNDS[1]
    # What else a run depends on: its step limit, tolerance and coordinates, and
    # for the V survey the linear weights it runs with (the recipe's).
    setting = (steps, tol, power)
    if args.stokes_v:
        setting += (power_v, lin["ptv"], lin["hw"])

    def setting_of(r):
        v = (r["lin_ptv"], r["lin_hw"]) if "lin_ptv" in r else (None, None)
        out = (r.get("iterations"), _tol(r), _power(r))
        return out + ((_power_v(r), *v) if args.stokes_v else ())

    if args.configs:
        cfgs = [tuple(float(x) for x in c.split(",")) for c in args.configs.split(";")]
    out = Path(args.out)
    done = set()
    if out.is_file():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            if all(f in r for f in fields) and setting_of(r) == setting:
                done.add((r["truth_name"], *(r[f] for f in fields), r["day"]))
    plan = [(name, cfg) for cfg in cfgs for name in names]
    for j, (name, cfg) in enumerate(plan):
        if j % n != k or (name, *cfg, args.day) in done:
            continue
        if args.stokes_v:
            seed = 10 + list(V_TRUTHS).index(name)
            base = truth_stokes(i_img, grid, TRUTHS["twist"], seed)
            truth = with_stokes_v(base, grid, V_TRUTHS[name])
            r = run_one(
                data, truth, grid, lin["ptv"], lin["hw"], R.POL_MASK_FRACTION,
                seed, fast, v_weights=dict(zip(fields, cfg)),
                iterations=steps, tol=tol, scale_power=power, scale_power_v=power_v,
            )  # fmt: skip
        else:
            seed = list(TRUTHS).index(name)
            truth = truth_stokes(i_img, grid, TRUTHS[name], seed)
            r = run_one(
                data, truth, grid, *cfg, seed, fast, iterations=steps, tol=tol,
                scale_power=power,
            )  # fmt: skip
        r.update(truth_name=name, day=args.day, **dict(zip(fields, cfg)))
        r["iterations"] = steps
        r["tol"] = tol
        r["scale_power"] = power
        if args.stokes_v:
            r["scale_power_v"] = power_v
        if args.stokes_v:
            r.update(lin_ptv=lin["ptv"], lin_hw=lin["hw"])
        with out.open("a") as f:
            f.write(json.dumps(r) + "\n")
        weights = " ".join(f"{f} {x:g}" for f, x in zip(fields, cfg))
        if args.stokes_v:
            what = (
                f"v_net {100 * r['image_v']['v_net']:+.2f} "
                f"({100 * r['truth_v']['v_net']:+.2f})  <|v|> "
                f"{100 * r['image_v']['v_avg']:.2f} ({100 * r['truth_v']['v_avg']:.2f})"
            )
        else:
            what = (
                f"nxcorr {r['p_nxcorr']:.3f}  <|m|> {100 * r['image']['m_avg']:.1f} % "
                f"(truth {100 * r['truth']['m_avg']:.1f})  m_net "
                f"{100 * r['image']['m_net']:.2f} ({100 * r['truth']['m_net']:.2f})  "
                f"β2 {r['image']['beta2_abs']:.3f} {r['image']['beta2_arg_deg']:.0f}° "
                f"({r['truth']['beta2_abs']:.3f} {r['truth']['beta2_arg_deg']:.0f}°)"
            )
        print(f"{name:14s} {weights}: {what}  {r['seconds']:.0f} s", flush=True)
    if out.is_file():
        print(table(out, args.day))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
