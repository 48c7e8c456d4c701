"""`ShardedChi2` (issue 8): the cost of sharding, the memory it saves, and processes.

Problem: the published round-1 M87 objective (04-11 lo from ../shared/data, else the
04-10 lo file shipped in eqmodels/data; scan-averaged; 64² over 128 µas; float64), value and
gradient w.r.t. the image, per `eqx.filter_jit` call. This machine has no
accelerator: devices are virtual CPU devices sharing the same cores, so the
multi-device times measure overhead, not speed-up.

1. **Overhead on one device**: the objective of `ShardedChi2` terms on a 1-device
   mesh vs the plain objective (target ≤ 1.1×), for DirectFT, SeparableFT and NUFFT.
2. **shard_map vs sharded arrays + jit** ("measure which"): the same terms with their
   row leaves placed as sharded arrays and the plain objective jitted (XLA's
   partitioner decides), against `ShardedChi2`'s explicit `shard_map`, on 1-8
   devices.
3. **Memory**: the bytes of the dense matrix each device holds (its addressable
   shard of `a_re` + `a_im`) vs device count, for the raw (unaveraged) visibilities.
4. **Processes**: the sharded objective over 4 devices in one process vs two
   `jax.distributed` processes of 2 devices each (loopback, gloo).

Run `python benchmarks/sharding.py [--quick]`; writes
`benchmarks/results/sharding.json`.
"""

import os


os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import _common as C  # noqa: E402
import jax  # noqa: E402


jax.config.update("jax_enable_x64", True)
jax.config.update("jax_num_cpu_devices", 8)

import equinox as eqx  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402


ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import eqmodels as em  # noqa: E402


DAY = "SR1_M87_2017_101_lo_hops_netcal_StokesI.uvfits"
CANDIDATES = [
    ROOT.parent / "shared" / "data" / "eht" / "m87_2017" / DAY,
    ROOT / "eqmodels" / "data" / "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits",
]
GRID = em.ImageGrid.from_fov(64, 128.0)


def load():
    path = next(p for p in CANDIDATES if p.is_file())
    return path, em.load_uvfits(path)


def round1(data, forward, wrap=lambda t: t):
    kw = {"eps": 1e-12} if forward == "nufft" else {}
    terms = [
        em.AmpChi2.from_data(em.amplitudes(data), GRID, forward=forward, **kw),
        em.ClosurePhaseChi2.from_data(
            em.closure_phases(data), GRID, forward=forward, **kw
        ),
        em.LogClosureAmpChi2.from_data(
            em.log_closure_amplitudes(data), GRID, forward=forward, **kw
        ),
    ]
    prior = np.asarray(em.GaussianImage(GRID, 0.6, em.uas_to_rad(40.0))())
    norm = dict(flux=0.6, beam=em.beam_from_uv(data.u, data.v), normalise=True)
    regs = [
        em.SimpleEntropy(prior, flux=0.6, normalise=True),
        em.TV(GRID, **norm),
        em.TSV(GRID, **norm),
        em.Flux(0.6, normalise=True),
    ]
    weights = [0.2, 1, 1, 100, 1, 1, 1e4]
    return em.Objective([wrap(t) for t in terms] + regs, weights), terms


def mesh_of(n):
    return Mesh(np.array(jax.devices()[:n]), ("rows",))


def placed_terms(terms, mesh):
    """The terms with their row leaves (and forward points) as sharded arrays,
    unwrapped: the plain objective under jit, XLA's partitioner deciding."""
    from eqmodels._sharding._mesh import padded_length, place
    from eqmodels._terms._sharded import _row_specs

    size = mesh.devices.size
    out = []
    for t in terms:
        t = t.pad_rows(padded_length(t.rows, size))
        out.append(place(t, _row_specs(t, "rows"), mesh))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results" / "sharding.json")
    )
    args = ap.parse_args()
    cfg = C.QUICK_TIMING if args.quick else C.FULL_TIMING
    path, raw = load()
    data = raw.scan_average()
    print(f"data: {path.name} ({data.n_rows} scan-averaged rows, {raw.n_rows} raw)")
    x = np.asarray(em.GaussianImage(GRID, 0.6, em.uas_to_rad(40.0))())
    vg = eqx.filter_jit(jax.value_and_grad(lambda x, o: o(x)))
    forwards = ["direct", "separable", "nufft"]
    record = {"data": path.name, "environment": C.environment_info()}

    # 1 + 2: overhead and shard_map vs sharded arrays.
    counts = [1, 2, 4] if args.quick else [1, 2, 4, 8]
    rows, overhead = [], {}
    for fwd in forwards:
        plain, terms = round1(data, fwd)
        fns = {"plain": lambda o=plain: vg(x, o)}
        for n in counts:
            mesh = mesh_of(n)
            sharded, _ = round1(data, fwd, lambda t, m=mesh: em.ShardedChi2(t, m))
            arrays = em.Objective(
                placed_terms(terms, mesh) + list(plain.terms[3:]), plain.weights
            )
            fns[f"shard_map×{n}"] = lambda o=sharded: vg(x, o)
            fns[f"arrays+jit×{n}"] = lambda o=arrays: vg(x, o)
        timed = C.time_interleaved(fns, cfg)
        base = timed["plain"][0].median
        ref_val = timed["plain"][1][0]
        for name, (t, (val, _)) in timed.items():
            rows.append(
                [
                    fwd,
                    name,
                    C.fmt_time(t.median),
                    C.fmt_ratio(t.median / base),
                    f"{C.rel_err(val, ref_val):.1e}",
                ]
            )
            overhead[f"{fwd}/{name}"] = {
                "timing": t.as_dict(),
                "ratio_vs_plain": t.median / base,
            }
    table1 = C.print_table(
        ["forward", "variant", "ms/call", "× plain", "rel err"],
        rows,
        title="value + gradient of the round-1 objective, per call (virtual CPU devices share 2 cores)",
    )
    record["overhead"] = overhead
    for fwd in forwards:
        r = overhead[f"{fwd}/shard_map×1"]["ratio_vs_plain"]
        print(
            f"{fwd}: ShardedChi2 on 1 device = {r:.2f}× the plain objective (target ≤ 1.1×: {'met' if r <= 1.1 else 'NOT met'})"
        )

    # 3: memory of the dense matrix per device.
    vis_raw = raw.take(np.arange(min(raw.n_rows, 2400))) if args.quick else raw
    term = em.VisChi2.from_data(vis_raw, GRID, forward="direct")
    mem_rows, memory = [], {}
    full = term.forward.a_re.nbytes + term.forward.a_im.nbytes
    for n in [1, 2, 4, 8]:
        s = em.ShardedChi2(term, mesh_of(n))
        per = (
            max(
                sum(sh.data.nbytes for sh in leaf.addressable_shards if sh.device == d)
                for d in mesh_of(n).devices.flat
                for leaf in [s.term.forward.a_re]
            )
            * 2
        )
        memory[n] = per
        mem_rows.append([str(n), C.fmt_bytes(per), f"{per / full:.3f}", f"{1 / n:.3f}"])
    table2 = C.print_table(
        ["devices", "matrix bytes per device", "fraction", "1/n"],
        mem_rows,
        title=f"DirectFT matrix of {term.rows} raw visibilities at 64² ({C.fmt_bytes(full)} in all)",
    )
    record["memory_per_device"] = memory

    # 4: one process of 4 devices vs two processes of 2.
    repeats = 5 if args.quick else 20
    proc_rows, procs = [], {}
    sys.path.insert(0, str(ROOT / "tests"))
    from multihost.problem import build, image

    mesh4 = mesh_of(4)
    x32 = image()
    for fwd in ("direct", "nufft"):
        one = build_sharded_on(mesh4, fwd, build)
        t1, _ = C.time_call(lambda o=one: vg(x32, o), cfg)
        procs[fwd] = {"one_process_4_devices": t1.median}
    two = run_two_processes(",".join(procs), repeats)
    for fwd in procs:
        t2 = float(np.median(two[fwd]["times"]))
        procs[fwd]["two_processes_2_devices_each"] = t2
        proc_rows.append(
            [
                fwd,
                C.fmt_time(procs[fwd]["one_process_4_devices"]),
                C.fmt_time(t2),
                C.fmt_ratio(t2 / procs[fwd]["one_process_4_devices"]),
            ]
        )
    table3 = C.print_table(
        ["forward", "1 process × 4 devices", "2 processes × 2", "ratio"],
        proc_rows,
        title="sharded round-1 objective (04-10 lo, 32²), value + gradient per call",
    )
    record["processes"] = procs
    record["report"] = "\n\n".join([table1, table2, table3])
    out = C.write_json(args.out, record)
    print(f"wrote {out}")


def build_sharded_on(mesh, fwd, build):
    """The multi-process problem, sharded over `mesh` in this process."""
    obj = build(fwd, sharded=False)
    terms = [em.ShardedChi2(t, mesh) for t in _data_terms(fwd)]
    return em.Objective(terms + list(obj.terms[3:]), obj.weights)


def _data_terms(fwd):
    from multihost.problem import DATA

    data = em.load_uvfits(DATA).scan_average()
    grid = em.ImageGrid.from_fov(32, 128.0)
    return [
        em.AmpChi2.from_data(em.amplitudes(data), grid, forward=fwd),
        em.ClosurePhaseChi2.from_data(em.closure_phases(data), grid, forward=fwd),
        em.LogClosureAmpChi2.from_data(
            em.log_closure_amplitudes(data), grid, forward=fwd
        ),
    ]


def run_two_processes(forwards: str, repeats: int) -> dict:
    worker = ROOT / "tests" / "multihost" / "worker.py"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "result.json"
        env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        ps = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(worker),
                    str(i),
                    str(port),
                    str(out),
                    forwards,
                    str(repeats),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )
            for i in (0, 1)
        ]
        try:
            for p in ps:
                p.wait(timeout=600)
        finally:
            for p in ps:
                if p.poll() is None:
                    p.kill()
        return json.loads(out.read_text())


if __name__ == "__main__":
    main()
