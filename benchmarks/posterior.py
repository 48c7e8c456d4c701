"""Log-posterior of an m-ring + Gaussian on M87 amplitudes, against eht-imaging's
modeling functions; NUTS wall time; chains × devices scaling (issue 39).

Problem (Comrade.jl's benchmark problem, `benchmarks/benchmarks.{jl,py}` there):
M87 2017-04-06 (day 096) hi band, scan-averaged, debiased visibility amplitudes
(284 rows); a thick m-ring with `β_1` (`Blurred(MRing(...))`, centred) plus a
shifted elliptical Gaussian (`Shifted(EllipticalGaussian(...))`), summed (`Sum`):
11 parameters (ring flux, diameter, blur FWHM, `Re β_1`, `Im β_1`; Gaussian flux,
major and minor FWHM, position angle, shift x, y); flat priors on boxes;
the normalised Gaussian amplitude likelihood (`AmpChi2.log_likelihood`); float64.

A. **Log posterior, value and gradient** (in the model's own coordinates, flat
   priors; the same rows, σ and parameters on both sides):

   - **ehtim 1.3.2** (the oracle; needed): `ehtim.modeling.modeling_utils`'
     `objfunc` / `objgrad` (the negative log posterior its `modeler_func`
     minimises: `N/2 · χ²_amp − Σ ln π + Σ ln(√(2π) σ)`), on an `ehtim.model.Model`
     with a `thick_mring` (centre fixed) and a `gauss`, `COMPLEX_BASIS = 're-im'`
     (β as real and imaginary parts, as Comrade's benchmark), its module-level
     `globdict` set as `modeler_func` sets it (its `make_param_map`,
     `compute_likelihood_constants`; data from its `chisqdata` replaced by ours,
     row for row, so both sides see identical numbers). eht-imaging is only
     called.
   - **ours**: `Posterior(AmpChi2, [ParameterPrior ...], Sum(...))`;
     `log_density` and its gradient (`jax.grad`) and both together
     (`value_and_grad`) over the flat parameter vector (`unflatten`). Per call:
     `jax.jit` of a function of the flat vector alone, the posterior's arrays
     closed over — what a sampler or optimiser calls, and what `sample` compiles
     (its density of the flat vector) — each call timed right after an untimed
     one of the same function (`time_interleaved(warm_cache=True)`), so its data
     are in cache as eht-imaging's are in its consecutive calls (`time_call`);
     Python dispatch included. For reference, the same jitted with the
     posterior's arrays as arguments (a pytree flattened on every call: ~0.07 ms
     more). In a loop: per evaluation inside one compiled `lax.scan` of 100
     evaluations (no dispatch: what a compiled sampler pays). Per call with
     **synchronous CPU dispatch**: the same per-call timing in a fresh process
     started with `jax_cpu_enable_async_dispatch=False` (JAX's option, read
     when its CPU client starts: the calling thread runs the program itself
     instead of handing it to a worker thread and waiting for it, which costs
     tens of µs per call on a busy 2-core machine).

   First the agreement: value and gradient (converted to eht-imaging's units,
   µas and degrees) at the benchmark point and at random points of the prior.

B. **NUTS**: `eqmodels.sample` (blackjax NUTS, window adaptation; chains run
   one after another on a CPU, `chain_method="sequential"`) of the same
   likelihood and data, the model parametrised as Comrade's benchmark model
   (`SAMPLED`: total flux and ring fraction, ring diameter, blur FWHM ≥ 1 µas,
   β_1; the Gaussian's major FWHM, axis ratio, position angle and a shift
   bounded to ±80 µas), flat priors on boxes mapped to the real line by
   logistic transforms (`RingGauss` below: no walls for trajectories to hit).
   The chains start at the posterior's mode, the best end point of L-BFGS from
   the benchmark point and 31 draws of the prior (the posterior is multimodal
   in the Gaussian; L-BFGS from the benchmark point alone ends in a mode whose
   log density is ~300 below the best); 1 and 4 chains, diagonal and dense mass matrix, 2,000 draws after
   `--warmup` adaptation steps. Compile time, warm-up and draws are timed
   separately (a run with 1 draw gives the warm-up; compile = first call −
   second call); ESS/s from `Samples.ess()`.

C. **Chains × devices**: the same sampling in fresh processes with
   `XLA_FLAGS=--xla_force_host_platform_device_count=N` and
   `sample(mesh=...)` over N virtual CPU devices (`chain_method="vectorized"`
   on 1 device too, as a mesh needs). Virtual devices share the machine's
   cores: on a 2-core machine nothing scales beyond 2.

Run `python benchmarks/posterior.py [--quick]`; writes
`benchmarks/results/posterior.json`.
"""

import _common as C


BLAS = C.prepare_blas_env(1)  # before numpy is imported

import argparse  # noqa: E402
import builtins  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

import numpy as np  # noqa: E402


ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = (
    ROOT.parent
    / "shared"
    / "data"
    / "eht"
    / "m87_2017"
    / "SR1_M87_2017_096_hi_hops_netcal_StokesI.uvfits"
)
UAS = math.pi / 180 / 3600 * 1e-6
DEG = math.pi / 180

#: The parameters in eht-imaging's order (ring centre fixed at 0): name, benchmark
#: value and flat-prior box in natural units (Jy, µas, —, degrees), and the
#: factor to radians / Jy.
PARAMS = (
    ("ring F0", 0.26, (0.0, 2.0), 1.0),
    ("ring d", 42.5, (20.0, 60.0), UAS),
    ("ring alpha", 2.0, (0.0, 30.0), UAS),
    ("beta1 re", 0.23, (-0.5, 0.5), 1.0),
    ("beta1 im", -0.07, (-0.5, 0.5), 1.0),
    ("gauss F0", 0.84, (0.0, 2.0), 1.0),
    ("gauss FWHM_maj", 84.0, (0.0, 1000.0), UAS),
    ("gauss FWHM_min", 125.0, (0.0, 1000.0), UAS),
    ("gauss PA", 23.0, (0.0, 180.0), DEG),
    ("gauss x0", 54.0, (-300.0, 300.0), UAS),
    ("gauss y0", 14.0, (-300.0, 300.0), UAS),
)
NAT = np.array([p[1] for p in PARAMS])
LO = np.array([p[2][0] for p in PARAMS])
HI = np.array([p[2][1] for p in PARAMS])
SCALE = np.array([p[3] for p in PARAMS])


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


def load():
    import eqmodels as em

    if not DATA.is_file():
        raise SystemExit(f"data not found: {DATA}")
    data = em.load_uvfits(DATA).scan_average()
    # the EHT M87 pipeline's per-site systematic noise (the thermal σ alone gives
    # a reduced χ² in the thousands for any simple model: no posterior to sample)
    return data, em.amplitudes(data, systematic_noise=em.m87_systematic_noise())


# ---------------------------------------------------------------------------
# eht-imaging
# ---------------------------------------------------------------------------


class _NumpyGeneratorSum:
    """numpy, but `sum(generator)` is Python's `sum` (NumPy < 2's behaviour)."""

    def __init__(self, module):
        self._np = module

    def __getattr__(self, name):
        return getattr(self._np, name)

    def sum(self, a, *args, **kwargs):
        if isinstance(a, types.GeneratorType):
            return builtins.sum(a)
        return self._np.sum(a, *args, **kwargs)


def ehtim_posterior(amp):
    """eht-imaging's negative log posterior and its gradient on our rows:
    `(objfunc, objgrad, x0, info)` with `x0` its parameter vector at `NAT`."""
    with contextlib.redirect_stdout(io.StringIO()):
        import ehtim as eh
        import ehtim.model as ehmodel
        import ehtim.modeling.modeling_utils as mu

    ehmodel.COMPLEX_BASIS = "re-im"  # β as (Re, Im), as ours and Comrade's
    if "complex_" not in np.__dict__:
        # eht-imaging 1.3.2's m-ring constructors use `np.complex_`, an alias
        # NumPy 2 removed: restore it for this process (the benchmark only).
        np.complex_ = np.complex128
    # ... and `Model.sample_uv` sums its components with `np.sum(generator)`,
    # which NumPy < 2 handed to Python's `sum` and NumPy 2 refuses: give its
    # module a numpy whose `sum` does that fallback again (nothing else changes).
    if not isinstance(ehmodel.np, _NumpyGeneratorSum):
        ehmodel.np = _NumpyGeneratorSum(np)
    rad = NAT * SCALE
    m = eh.model.Model()
    m = m.add_thick_mring(
        F0=rad[0], d=rad[1], alpha=rad[2], x0=0.0, y0=0.0,
        beta_list=[rad[3] + 1j * rad[4]],
    )  # fmt: skip
    m = m.add_gauss(
        F0=rad[5], FWHM_maj=rad[6], FWHM_min=rad[7], PA=rad[8], x0=rad[9], y0=rad[10]
    )
    lo, hi = LO * SCALE, HI * SCALE
    names = [
        (0, "F0"), (0, "d"), (0, "alpha"), (0, "beta1_re"), (0, "beta1_im"),
        (1, "F0"), (1, "FWHM_maj"), (1, "FWHM_min"), (1, "PA"), (1, "x0"), (1, "y0"),
    ]  # fmt: skip
    prior = m.default_prior()
    for (j, name), a, b in zip(names, lo, hi):
        prior[j][name] = {"prior_type": "flat", "min": float(a), "max": float(b)}
    prior[0]["x0"] = {"prior_type": "fixed"}
    prior[0]["y0"] = {"prior_type": "fixed"}
    minimizer = "scipy.optimize.minimize"
    param_map, param_mask = mu.make_param_map(m, prior, minimizer, fit_model=True)
    if [(p[0], p[1]) for p in param_map] != names:
        raise RuntimeError(f"unexpected eht-imaging parameter order: {param_map}")
    # eht-imaging's own products (a cross-check of ours), then ours in their place
    with contextlib.redirect_stdout(io.StringIO()):
        obs = eh.obsdata.load_uvfits(str(DATA))
        obs.add_scans()
        obs = obs.avg_coherent(0.0, scan_avg=True)
        e_amp, e_sigma, e_uv, _ = mu.chisqdata(obs, "amp", pol="I")
    uv = np.stack([np.asarray(amp.u), np.asarray(amp.v)], axis=1)
    a, s = np.asarray(amp.amp, np.float64), np.asarray(amp.sigma, np.float64)
    same_rows = e_uv.shape == uv.shape and np.allclose(e_uv, uv, rtol=1e-6)
    info = {
        "ehtim_rows": int(e_amp.size),
        "rows": int(a.size),
        "same_rows": bool(same_rows),
        "amp_max_rel_diff": float(np.max(np.abs(e_amp - a)) / np.max(a))
        if same_rows
        else None,
        "sigma_max_rel_diff": float(np.max(np.abs(e_sigma - s) / s))
        if same_rows
        else None,
    }
    alpha, _, _, _, ln_norm = mu.compute_likelihood_constants(
        "amp", False, False, False, s, False, False, False
    )
    globdict = {
        "trial_model": m.copy(),
        "d1": "amp", "d2": False, "d3": False, "d4": False,
        "pol1": "I", "pol2": "I", "pol3": "I", "pol4": "I",
        "data1": a, "sigma1": s, "uv1": uv, "jonesdict1": None,
        "data2": False, "sigma2": False, "uv2": False, "jonesdict2": None,
        "data3": False, "sigma3": False, "uv3": False, "jonesdict3": None,
        "data4": False, "sigma4": False, "uv4": False, "jonesdict4": None,
        "alpha_d1": alpha, "alpha_d2": 0, "alpha_d3": 0, "alpha_d4": 0,
        "n_params": len(param_map), "n_gains": 0, "n_leakage": 0,
        "model_prior": prior, "param_map": param_map, "param_mask": param_mask,
        "gain_prior": None, "gain_list": [], "gain_init": None,
        "fit_leakage": False, "leakage_init": [], "leakage_fit": [],
        "station_leakages": None, "leakage_prior": None,
        "show_updates": False, "update_interval": 1,
        "gains_t1": None, "gains_t2": None,
        "minimizer_func": minimizer, "Obsdata": obs,
        "fit_pol": False, "fit_cpol": False,
        "flux": 1.0, "alpha_flux": 0, "fit_gains": False,
        "marginalize_gains": False, "ln_norm": ln_norm,
        "param_init": None, "test_gradient": False,
    }  # fmt: skip
    mu.globdict = globdict
    # its parameter vector: natural units (rescale factors of `param_map`)
    units = np.array([p[2] for p in param_map], np.float64)

    def to_x(nat):
        return np.asarray(nat, np.float64) * SCALE / units

    return mu.objfunc, mu.objgrad, to_x, units, info


# ---------------------------------------------------------------------------
# eqmodels
# ---------------------------------------------------------------------------


def uniform_log_prob(lo, hi, width=None):
    """The flat density on `[lo, hi]` (per unit of `width`, default `hi − lo`)."""
    import jax.numpy as jnp

    width = hi - lo if width is None else width

    def log_prob(x):
        inside = (x >= lo) & (x <= hi)
        return jnp.sum(jnp.where(inside, -jnp.log(width), -jnp.inf))

    return log_prob


def build_model(grid, nat, dtype=None):
    """`Sum(Blurred(MRing), Shifted(EllipticalGaussian))` at natural-unit
    parameters `nat` (the leaves in radians / Jy)."""
    import jax.numpy as jnp

    import eqmodels as em

    r = [nat[i] * SCALE[i] for i in range(len(PARAMS))]
    beta = jnp.reshape(r[3] + 1j * r[4], (1,))  # an array (a tracer when sampled)
    ring = em.Blurred(em.MRing(grid, r[0], r[1] / 2, beta, dtype=dtype), r[2])
    gauss = em.Shifted(
        em.EllipticalGaussian(
            grid, r[5], r[6], fwhm_minor=r[7], angle=r[8], dtype=dtype
        ),
        r[9],
        r[10],
    )
    return em.Sum(ring, gauss)


#: where each parameter lives in the `Sum` model (radians / Jy), and the
#: derivative of the leaf w.r.t. the parameter in radians (the diameter is 2R).
LEAVES = (
    (lambda m: m.parts[0].model.flux, 1.0),
    (lambda m: m.parts[0].model.radius, 0.5),
    (lambda m: m.parts[0].fwhm, 1.0),
    (lambda m: m.parts[0].model.beta_re, 1.0),
    (lambda m: m.parts[0].model.beta_im, 1.0),
    (lambda m: m.parts[1].model.flux, 1.0),
    (lambda m: m.parts[1].model.fwhm_major, 1.0),
    (lambda m: m.parts[1].model.fwhm_minor, 1.0),
    (lambda m: m.parts[1].model.angle, 1.0),
    (lambda m: m.parts[1].dx, 1.0),
    (lambda m: m.parts[1].dy, 1.0),
)


def our_posterior(amp, grid):
    import eqmodels as em

    model = build_model(grid, NAT)
    term = em.AmpChi2(
        em.DirectFT(grid, np.asarray(amp.u), np.asarray(amp.v)),
        np.asarray(amp.amp, np.float64),
        np.asarray(amp.sigma, np.float64),
    )
    priors = []
    for (where, d), lo, hi, s in zip(LEAVES, LO, HI, SCALE):
        # the box on the leaf (the diameter's box / 2 on the radius), the density
        # per unit of eht-imaging's parameter (per unit diameter for the ring)
        priors.append(
            em.ParameterPrior(
                where, uniform_log_prob(lo * s * d, hi * s * d, (hi - lo) * s)
            )
        )
    return em.Posterior(term, priors, model), term


def grad_in_ehtim_units(post, g_model, units):
    """Our gradient (a model) as d ln p / d(eht-imaging's parameters)."""
    out = []
    for (where, d), s, u in zip(LEAVES, SCALE, units):
        # θ_leaf = d · x_rad, x_rad = x_ehtim · u
        out.append(float(np.ravel(where(g_model))[0]) * d * u)
    return np.array(out)


# ---------------------------------------------------------------------------
# The sampled parametrisation: natural units
# ---------------------------------------------------------------------------


#: The sampled parametrisation (Comrade's benchmark model's, with the total flux
#: free): name, the benchmark point, and the prior box (flat) in natural units
#: (Jy, —, µas, —, —, µas, —, degrees, µas). Each box is mapped to the real line
#: by a logistic transform, its Jacobian in the density: no wall for a
#: trajectory to hit. Against the eht-imaging parametrisation of part A: the
#: fluxes as a total and the ring's fraction (the amplitudes fix the total well
#: and the split poorly: two strongly correlated fluxes become two nearly
#: independent coordinates), the Gaussian's sizes as its major FWHM and an
#: axis ratio ≤ 1 (one of the two mirror modes `(a, b, PA) ≡ (b, a, PA + 90°)`),
#: the blur FWHM bounded below (1 µas: the thin-ring limit is a flat direction
#: of the amplitudes' likelihood), the Gaussian's shift bounded to ±150 µas.
SAMPLED = (
    ("total flux", 1.10, (0.2, 3.0)),
    ("ring fraction", 0.26 / 1.10, (0.0, 1.0)),
    ("ring d", 42.5, (20.0, 60.0)),
    ("ring alpha", 2.0, (1.0, 30.0)),
    ("beta1 re", 0.23, (-0.5, 0.5)),
    ("beta1 im", -0.07, (-0.5, 0.5)),
    ("gauss FWHM_maj", 125.0, (1.0, 1000.0)),
    ("gauss axis ratio", 84.0 / 125.0, (0.05, 1.0)),
    ("gauss PA", 113.0 - 180.0, (-90.0, 90.0)),
    ("gauss x0", 54.0, (-80.0, 80.0)),
    ("gauss y0", 14.0, (-80.0, 80.0)),
)
S_NAT = np.array([p[1] for p in SAMPLED])
S_LO = np.array([p[2][0] for p in SAMPLED])
S_HI = np.array([p[2][1] for p in SAMPLED])


def to_box(u):
    """Natural-unit parameters from the unconstrained `u` (logistic map to the
    boxes) and the log-Jacobian `Σ ln |dθ/du|` (less the constant `Σ ln width`)."""
    import jax
    import jax.numpy as jnp

    s = jax.nn.sigmoid(u)
    theta = jnp.asarray(S_LO) + jnp.asarray(S_HI - S_LO) * s
    log_jac = jnp.sum(jax.nn.log_sigmoid(u) + jax.nn.log_sigmoid(-u))
    return theta, log_jac


def from_box(theta):
    t = (np.asarray(theta, np.float64) - S_LO) / (S_HI - S_LO)
    return np.log(t) - np.log1p(-t)


def ring_gauss_class():
    from jaxtyping import Array, Float

    import eqmodels as em

    class RingGauss(em.AbstractGeometricModel):
        """The benchmark's `Sum(Blurred(MRing), Shifted(EllipticalGaussian))`
        parametrised by one unconstrained vector `u` (`SAMPLED`, logistic maps to
        the prior boxes): what a user writes to sample a box-bounded model
        without walls."""

        grid: em.ImageGrid
        u: Float[Array, " 11"]

        def natural(self):
            """The `SAMPLED` parameters in natural units."""
            return to_box(self.u)[0]

        def build(self):
            t = self.natural()
            f_tot, frac, d, alpha, bre, bim, maj, ratio, pa, x, y = (
                t[i] for i in range(len(SAMPLED))
            )
            nat = [f_tot * frac, d, alpha, bre, bim, f_tot * (1 - frac)]
            nat += [maj, maj * ratio, pa, x, y]
            return build_model(self.grid, nat)

        def visibility(self, u, v):
            return self.build().visibility(u, v)

        def intensity(self, x, y, resolution=0.0):
            raise NotImplementedError("a Blurred ring has no closed-form intensity")

        @property
        def has_intensity(self):
            return False

        def render(self):
            return self.build().render()

    return RingGauss


def sampling_posterior(term, grid, nat=S_NAT):
    """The same likelihood, the `SAMPLED` parametrisation with flat priors on its
    boxes: the prior of `u` is the logistic map's Jacobian (`σ(u) σ(−u)` per
    coordinate: the flat density of `θ` pulled back to `u`)."""
    import jax
    import jax.numpy as jnp

    import eqmodels as em

    RingGauss = ring_gauss_class()
    model = RingGauss(grid, jnp.asarray(from_box(nat)))
    prior = em.ParameterPrior(
        lambda m: m.u,
        lambda u: jnp.sum(jax.nn.log_sigmoid(u) + jax.nn.log_sigmoid(-u)),
    )
    return em.Posterior(term, [prior], model)


# ---------------------------------------------------------------------------
# Part A
# ---------------------------------------------------------------------------


def per_call_functions(post):
    """The density of the flat vector and the three jitted functions timed per
    call (value, gradient, both): the posterior's arrays closed over (constants
    of the compiled program), as inside `sample`; one argument per call."""
    import equinox as eqx
    import jax

    dyn, static = eqx.partition(post, eqx.is_array)

    def density(theta, dyn):
        p = eqx.combine(dyn, static)
        return p.log_density(p.unflatten(theta))

    fns = {
        "value": jax.jit(lambda t: density(t, dyn)),
        "gradient": jax.jit(jax.grad(lambda t: density(t, dyn))),
        "value+gradient": jax.jit(jax.value_and_grad(lambda t: density(t, dyn))),
    }
    return density, dyn, fns


def child_per_call(args):
    """Part A's per-call timing in a process whose CPU dispatch is synchronous."""
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    import eqmodels as em

    cfg = C.QUICK_TIMING if args.quick else C.FULL_TIMING
    _, amp = load()
    grid = em.ImageGrid.from_fov(32, 160.0)
    post, _ = our_posterior(amp, grid)
    _, _, fns = per_call_functions(post)
    theta0 = post.flatten(build_model(grid, NAT))
    timed = C.time_interleaved(
        {k: (lambda f=f: f(theta0)) for k, f in fns.items()}, cfg, warm_cache=True
    )
    C.emit_child_result({k: t.as_dict() for k, (t, _) in timed.items()})


def part_a(amp, grid, cfg, n_loop, quick):
    import jax
    import jax.numpy as jnp

    objfunc, objgrad, to_x, units, info = ehtim_posterior(amp)
    post, term = our_posterior(amp, grid)
    density, dyn, fns = per_call_functions(post)
    f_vg = jax.jit(jax.value_and_grad(density))  # (agreement; dispatch reference)
    c_val, c_grad, c_vg = fns["value"], fns["gradient"], fns["value+gradient"]

    def loop_of(fn):
        @jax.jit
        def run(theta, dyn):
            def body(t, _):
                out = fn(t, dyn)
                return t * (1 + 1e-12), out

            return jax.lax.scan(body, theta, None, length=n_loop)[1]

        return run

    loops = {
        "value": loop_of(density),
        "gradient": loop_of(jax.grad(density)),
        "value+gradient": loop_of(jax.value_and_grad(density)),
    }

    # --- agreement: the benchmark point and random points of the prior box
    rng = np.random.default_rng(1)
    points = [NAT] + [
        LO + (HI - LO) * rng.uniform(0.1, 0.9, NAT.size) for _ in range(4)
    ]  # fmt: skip
    agreement = []
    for nat in points:
        model = build_model(grid, nat)
        theta = post.flatten(model)
        x = to_x(nat)
        v_eh = -float(objfunc(x))
        g_eh = -np.asarray(objgrad(x), np.float64)
        v, g = f_vg(theta, dyn)
        g_ours = grad_in_ehtim_units(post, post.unflatten(g), units)
        agreement.append(
            {
                "params": nat.tolist(),
                "log_post_ehtim": v_eh,
                "log_post_ours": float(v),
                "value_rel_err": abs(float(v) - v_eh) / abs(v_eh),
                "grad_rel_err": C.rel_err(g_ours, g_eh),
                "grad_ehtim": g_eh.tolist(),
                "grad_ours": g_ours.tolist(),
            }
        )
    # --- timing at the benchmark point
    theta0 = post.flatten(build_model(grid, NAT))
    x0 = to_x(NAT)
    t_eh_val, _ = C.time_call(lambda: objfunc(x0), cfg)
    t_eh_grad, _ = C.time_call(lambda: objgrad(x0), cfg)
    t_eh_vg, _ = C.time_call(lambda: (objfunc(x0), objgrad(x0)), cfg)
    # Ours round-robin (load drifts alike), each call timed right after an
    # untimed one of the same function (`warm_cache`): its data in cache, as
    # eht-imaging's consecutive calls (`time_call`) have theirs.
    per_call = C.time_interleaved(
        {
            "value": lambda: c_val(theta0),
            "gradient": lambda: c_grad(theta0),
            "value+gradient": lambda: c_vg(theta0),
            "value+gradient, arrays as arguments": lambda: f_vg(theta0, dyn),
        },
        cfg,
        warm_cache=True,
    )
    in_loop = C.time_interleaved(
        {k: (lambda fn=fn: fn(theta0, dyn)) for k, fn in loops.items()},
        cfg,
        warm_cache=True,
    )
    # per call again, in a fresh process with synchronous CPU dispatch
    sync = C.run_child([__file__, "--child-per-call"] + (["--quick"] if quick else []))
    if "error" in sync:
        raise SystemExit(f"per-call child failed: {json.dumps(sync)[:2000]}")
    # the sampled density (natural units, unconstrained vector) for reference
    import equinox as eqx

    spost = sampling_posterior(term, grid)
    sdyn, sstatic = eqx.partition(spost, eqx.is_array)

    def sdensity(z, sdyn):
        return eqx.combine(sdyn, sstatic).log_density_unconstrained(z)

    z0 = spost.to_unconstrained()
    s_vg = jax.jit(jax.value_and_grad(sdensity))
    s_check = float(s_vg(z0, sdyn)[0])
    s_loop = loop_of(jax.value_and_grad(sdensity))
    t_s_call, _ = C.time_call(lambda: s_vg(z0, sdyn), cfg)
    t_s_loop, _ = C.time_call(lambda: s_loop(z0, sdyn), cfg)
    del jnp
    eh = {"value": t_eh_val, "gradient": t_eh_grad, "value+gradient": t_eh_vg}
    rows, res = [], {}
    for k in ("value", "gradient", "value+gradient"):
        call = per_call[k][0]
        loop = in_loop[k][0].median / n_loop
        loop_min = in_loop[k][0].min / n_loop
        sync_median, sync_min = sync[k]["median"], sync[k]["min"]
        res[k] = {
            "ehtim": eh[k].as_dict(),
            "ours_call": call.as_dict(),
            "ours_call_sync_dispatch": sync[k],
            "ratio_call_sync_dispatch": eh[k].median / sync_median,
            "ratio_call_sync_dispatch_min": eh[k].min / sync_min,
            "ours_in_loop_s": loop,
            "ours_in_loop_min_s": loop_min,
            "ratio_call": eh[k].median / call.median,
            "ratio_in_loop": eh[k].median / loop,
            # from the minimum times (which a loaded machine's noise inflates less)
            "ratio_call_min": eh[k].min / call.min,
            "ratio_in_loop_min": eh[k].min / loop_min,
        }
        rows.append(
            [
                k,
                C.fmt_time(eh[k].median),
                C.fmt_time(call.median),
                C.fmt_ratio(eh[k].median / call.median),
                C.fmt_time(sync_median),
                C.fmt_ratio(eh[k].median / sync_median),
                C.fmt_time(loop),
                C.fmt_ratio(eh[k].median / loop),
                C.fmt_time(call.first),
            ]
        )
    t_args = per_call["value+gradient, arrays as arguments"][0]
    res["value+gradient_arrays_as_arguments"] = {
        "ours_call": t_args.as_dict(),
        "ratio_call": eh["value+gradient"].median / t_args.median,
    }
    res["sampled_density_value_grad"] = {
        "call": t_s_call.as_dict(),
        "in_loop_s": t_s_loop.median / n_loop,
        "value_at_start": s_check,
    }
    table = C.print_table(
        [
            "log posterior",
            "ehtim",
            "ours/call",
            "ehtim/ours",
            "ours/call sync",
            "ehtim/sync",
            "ours in loop",
            "ehtim/loop",
            "first (compile)",
        ],  # fmt: skip
        rows,
        title="A. m-ring + Gaussian log posterior on M87 2017-04-06 hi amplitudes "
        f"({info['rows']} rows, 11 parameters, float64); times are medians "
        "(ms, or µs)\n(ours/call: one jitted call of the flat vector, Python "
        "dispatch included, cache warm as eht-imaging's; sync: the same, CPU "
        "dispatch synchronous (jax_cpu_enable_async_dispatch=False); in loop: per "
        f"evaluation inside one compiled scan of {n_loop})",
    )
    worst_v = max(a["value_rel_err"] for a in agreement)
    worst_g = max(a["grad_rel_err"] for a in agreement)
    print(
        f"agreement with eht-imaging at {len(agreement)} points: value rel. err "
        f"≤ {worst_v:.1e}, gradient (max-norm) rel. err ≤ {worst_g:.1e}"
    )
    print(
        "the sampled density (natural units, unconstrained), value+gradient: "
        f"{C.fmt_time(t_s_call.median)} per call, "
        f"{C.fmt_time(t_s_loop.median / n_loop)} in a loop"
    )
    for k in ("value", "gradient", "value+gradient"):
        r = res[k]
        print(
            f"{k}: from minimum times eht-imaging {C.fmt_time(eh[k].min)}, ours "
            f"{C.fmt_time(per_call[k][0].min)} per call ({r['ratio_call_min']:.1f}×), "
            f"{C.fmt_time(r['ours_in_loop_min_s'])} in a loop "
            f"({r['ratio_in_loop_min']:.0f}×)"
        )
    print(
        "value+gradient per call with the posterior's arrays as arguments (a "
        f"pytree of {len(jax.tree.leaves(dyn))} leaves flattened per call): "
        f"{C.fmt_time(t_args.median)} ({eh['value+gradient'].median / t_args.median:.1f}×)"
    )
    r = res["value+gradient"]
    print(
        f"value+gradient: {r['ratio_call']:.1f}× eht-imaging per call, "
        f"{r['ratio_call_sync_dispatch']:.1f}× per call with synchronous dispatch, "
        f"{r['ratio_in_loop']:.1f}× in a compiled loop (target ≥ 30×)"
    )
    return {
        "data_check": info,
        "agreement": agreement,
        "max_value_rel_err": worst_v,
        "max_grad_rel_err": worst_g,
        "timing": res,
        "report": table,
    }, spost


# ---------------------------------------------------------------------------
# Part B: NUTS
# ---------------------------------------------------------------------------


def timed_sample(
    spost, init, chains, warmup, draws, mesh=None, key=0, dense=False, chain_method=None
):
    """First and second call of `sample` (compile = the difference)."""
    import jax

    import eqmodels as em

    def run():
        t0 = time.perf_counter()
        s = em.sample(
            spost,
            init,
            key=jax.random.key(key),
            num_warmup=warmup,
            num_samples=draws,
            num_chains=chains,
            jitter=0.02,
            mesh=mesh,
            dense_mass=dense,
            chain_method=chain_method,
        )
        jax.block_until_ready(s.positions)
        return time.perf_counter() - t0, s

    first, _ = run()
    second, s = run()
    return first, second, s


def sample_stats(s, draws_s):
    import jax

    ess = np.asarray(s.ess())
    pos = np.asarray(s.positions)
    theta = np.asarray(jax.vmap(jax.vmap(lambda u: to_box(u)[0]))(s.positions))
    theta = theta.reshape(-1, theta.shape[-1])
    return {
        "ess_min": float(ess.min()),
        "ess_median": float(np.median(ess)),
        "ess_min_per_s": float(ess.min() / draws_s),
        "ess_median_per_s": float(np.median(ess) / draws_s),
        "rhat_max": float(np.max(s.rhat())) if pos.shape[0] > 1 else None,
        "divergences": np.asarray(s.divergences).tolist(),
        "acceptance": float(np.mean(s.stats["acceptance_rate"])),
        "mean_steps": float(np.mean(s.stats["num_integration_steps"])),
        "steps_per_draw_max": int(np.max(s.stats["num_integration_steps"])),
        "ess": ess.tolist(),
        "rhat": None if pos.shape[0] == 1 else np.asarray(s.rhat()).tolist(),
        # in natural units (`SAMPLED`)
        "posterior_mean": dict(zip([p[0] for p in SAMPLED], theta.mean(0).tolist())),
        "posterior_std": dict(zip([p[0] for p in SAMPLED], theta.std(0).tolist())),
    }


def find_map(spost, n_starts=32, seed=0):
    """The posterior's mode: L-BFGS (scipy) on the unconstrained vector from the
    benchmark point and `n_starts − 1` draws of the prior (value and gradient
    from one jitted call), the best end point kept. Returns the model there, its
    log density, the time taken (compile included) and how many starts ended
    there (within 1 of its log density)."""
    import jax
    import jax.numpy as jnp
    import scipy.optimize

    t0 = time.perf_counter()
    f = jax.jit(jax.value_and_grad(lambda u: -spost.log_density_unconstrained(u)))

    def fun(u):
        v, g = f(jnp.asarray(u))
        return float(v), np.asarray(g, np.float64)

    rng = np.random.default_rng(seed)
    # the prior of `u` is the standard logistic (flat on the boxes)
    starts = [np.asarray(spost.to_unconstrained(), np.float64)]
    starts += [rng.logistic(size=starts[0].size) for _ in range(n_starts - 1)]
    ends = [
        scipy.optimize.minimize(
            fun, z, jac=True, method="L-BFGS-B", options={"maxiter": 3000}
        )
        for z in starts
    ]
    best = min(ends, key=lambda r: r.fun)
    elapsed = time.perf_counter() - t0
    hits = sum(r.fun < best.fun + 1 for r in ends)
    from_point = -float(ends[0].fun)
    model = spost.from_unconstrained(jnp.asarray(best.x))
    return model, -float(best.fun), elapsed, hits, from_point


def part_b(spost, configs, warmup, draws, split):
    import jax

    # The chains start at the posterior's mode (Comrade's figure includes its
    # Pathfinder start): the Gaussian has several modes (a large round one at
    # ln p ≈ 104, where L-BFGS from the benchmark point ends, a long thin one at
    # ≈ 163, ...), ~240 below the best; chains started elsewhere stay in them
    # for thousands of draws, or cross during warm-up, chain by chain.
    n_starts = 32
    init, lp_map, t_map, hits, lp_local = find_map(spost, n_starts)
    lp_start = float(spost.log_density_unconstrained(spost.to_unconstrained()))
    print(
        f"  MAP: ln p {lp_map:.2f} (benchmark point {lp_start:.2f}, L-BFGS from it "
        f"{lp_local:.2f}), reached by {hits} of {n_starts} starts, "
        f"{t_map:.2f} s (compile included): "
        + ", ".join(
            f"{n} {v:.4g}"
            for (n, _, _), v in zip(SAMPLED, np.asarray(init.natural()).tolist())
        ),
        flush=True,
    )
    out, rows = {}, []
    for chains, dense in configs:
        f_all, t_all, s = timed_sample(spost, init, chains, warmup, draws, dense=dense)
        if split:
            f_warm, t_warm, _ = timed_sample(
                spost, init, chains, warmup, 1, dense=dense
            )
            draws_s = max(t_all - t_warm, 1e-9)
        else:
            f_warm = t_warm = None
            draws_s = t_all  # warm-up included
        st = sample_stats(s, draws_s)
        name = f"{chains} chain{'s' if chains > 1 else ''}, {'dense' if dense else 'diagonal'}"
        out[name] = {
            "chains": chains,
            "dense_mass": dense,
            "chain_method": "sequential"
            if jax.default_backend() == "cpu"
            else "vectorized",
            "compile_s": f_all - t_all,
            "compile_warmup_only_s": None if f_warm is None else f_warm - t_warm,
            "warmup_s": t_warm,
            "draws_s": draws_s if split else None,
            "total_run_s": t_all,
            "first_call_s": f_all,
            **st,
        }
        print(f"  {name}: {out[name]}", flush=True)
        rows.append(
            [
                name,
                f"{f_all - t_all:.1f}",
                "-" if t_warm is None else f"{t_warm:.2f}",
                f"{draws_s:.2f}" if split else "-",
                f"{t_all:.2f}",
                f"{st['ess_min']:.0f}",
                f"{st['ess_min_per_s']:.0f}",
                "-" if st["rhat_max"] is None else f"{st['rhat_max']:.3f}",
                str(sum(st["divergences"])),
                f"{st['acceptance']:.2f}",
                f"{st['mean_steps']:.1f}",
                "-"
                if not split
                else f"{draws_s / (chains * draws * st['mean_steps']) * 1e6:.0f}",
            ]
        )
    table = C.print_table(
        [
            "NUTS",
            "compile s",
            f"warm-up ({warmup}) s",
            f"{draws} draws s",
            "run s",
            "min ESS",
            "min ESS/s",
            "R̂ max",
            "divergent",
            "accept",
            "steps/draw",
            "µs/step",
        ],  # fmt: skip
        rows,
        title=f"B. eqmodels.sample (NUTS) from the mode (L-BFGS from {n_starts} starts, {t_map:.1f} s), {draws} draws per chain after "
        f"{warmup} warm-up steps (Comrade: 165 s for Pathfinder + 2,000 HMC draws "
        "on a 2-core laptop; target ≤ 20 s)"
        + (
            ""
            if split
            else "\n(--quick: warm-up not timed apart; ESS/s over the whole run)"
        ),
    )
    return {
        "map": {
            "log_density": lp_map,
            "log_density_benchmark_point": lp_start,
            "time_s": t_map,
            "starts": n_starts,
            "starts_reaching_it": hits,
            "log_density_lbfgs_from_benchmark_point": lp_local,
            "params": dict(
                zip([p[0] for p in SAMPLED], np.asarray(init.natural()).tolist())
            ),
        },
        "runs": out,
        "report": table,
    }


# ---------------------------------------------------------------------------
# Part C: chains × devices (child processes)
# ---------------------------------------------------------------------------


def child(args):
    import jax

    jax.config.update("jax_enable_x64", True)
    import eqmodels as em

    _, amp = load()
    grid = em.ImageGrid.from_fov(32, 160.0)
    _, term = our_posterior(amp, grid)
    spost = sampling_posterior(term, grid)
    init = find_map(spost)[0]  # (the same starts: the same mode)
    n_dev = len(jax.devices())
    mesh = jax.make_mesh((n_dev,), ("chains",)) if n_dev > 1 else None
    out = {}
    for chains in [int(c) for c in args.child_chains.split(",")]:
        if chains % n_dev:
            continue
        first, second, s = timed_sample(
            spost,
            init,
            chains,
            args.child_warmup,
            args.child_draws,
            mesh=mesh,
            chain_method="vectorized",  # as a mesh needs: 1 and N devices alike
        )
        ess = np.asarray(s.ess())
        out[chains] = {
            "first_s": first,
            "run_s": second,
            "ess_min": float(ess.min()),
            "steps_total": int(np.sum(s.stats["num_integration_steps"])),
        }
    C.emit_child_result({"devices": n_dev, "runs": out})


def part_c(device_counts, chain_counts, warmup, draws):
    results, rows = {}, []
    for n in device_counts:
        env = {
            "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}",
            "JAX_PLATFORMS": "cpu",
        }
        res = C.run_child(
            [
                __file__,
                "--child",
                "--child-chains",
                ",".join(map(str, chain_counts)),
                "--child-warmup",
                str(warmup),
                "--child-draws",
                str(draws),
            ],  # fmt: skip
            env=env,
        )
        results[n] = res
        if "error" in res:
            print(f"{n} devices: {res['error']}\n{res.get('stderr_tail', '')}")
            continue
        for chains, r in res["runs"].items():
            steps_per_s = r["steps_total"] / r["run_s"]
            rows.append(
                [
                    f"{chains} × {n}",
                    f"{r['run_s']:.2f}",
                    f"{int(chains) * draws / r['run_s']:.0f}",
                    f"{steps_per_s:.0f}",
                    f"{r['ess_min'] / r['run_s']:.0f}",
                    f"{r['first_s'] - r['run_s']:.1f}",
                ]
            )
    table = C.print_table(
        [
            "chains × devices",
            "run s",
            "draws/s",
            "leapfrog steps/s",
            "min ESS/s",
            "compile s",
        ],  # fmt: skip
        rows,
        title=f"C. chains × virtual CPU devices ({warmup} warm-up + {draws} draws per "
        f"chain; {C.environment_info()['cpus_available']} cores: virtual devices "
        "share them)",
    )
    return {"results": results, "report": table}


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats and runs")
    ap.add_argument("--warmup", type=int, default=None, help="NUTS warm-up steps")
    ap.add_argument(
        "--draws", type=int, default=None, help="NUTS draws per chain (2000; 500 quick)"
    )
    ap.add_argument("--skip", default="", help="comma list of parts to skip (a,b,c)")
    ap.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results" / "posterior.json")
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-per-call", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-chains", default="1,2,4,8", help=argparse.SUPPRESS)
    ap.add_argument("--child-warmup", type=int, default=300, help=argparse.SUPPRESS)
    ap.add_argument("--child-draws", type=int, default=1000, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    if args.child_per_call:
        return child_per_call(args)
    cfg = C.QUICK_TIMING if args.quick else C.FULL_TIMING
    warmup = args.warmup or (300 if args.quick else 1000)
    draws = args.draws or (500 if args.quick else 2000)
    skip = set(filter(None, args.skip.split(",")))

    import jax

    jax.config.update("jax_enable_x64", True)
    import eqmodels as em

    env = C.environment_info()
    if (env["loadavg"] or [0])[0] > 1:
        print(f"note: load average {env['loadavg']}: other processes compete")
    data, amp = load()
    grid = em.ImageGrid.from_fov(32, 160.0)
    record = {
        "mode": "quick" if args.quick else "full",
        "data": str(DATA),
        "rows": int(np.asarray(amp.amp).size),
        "params": [p[0] for p in PARAMS],
        "benchmark_point": NAT.tolist(),
        "prior_box": [LO.tolist(), HI.tolist()],
        "environment": env,
        "blas": C.blas_info(),
        "blas_env": BLAS,
    }
    reports = []
    spost = None
    if "a" not in skip:
        record["a"], spost = part_a(amp, grid, cfg, 100, args.quick)
        reports.append(record["a"]["report"])
    if "b" not in skip:
        if spost is None:
            _, term = our_posterior(amp, grid)
            spost = sampling_posterior(term, grid)
        configs = [(1, True), (4, True)]
        if not args.quick:
            configs += [(1, False), (4, False)]
        record["b"] = part_b(spost, configs, warmup, draws, not args.quick)
        reports.append(record["b"]["report"])
    if "c" not in skip:
        if args.quick:
            record["c"] = part_c((1, 2), (4,), 200, 500)
        else:
            record["c"] = part_c((1, 2), (1, 2, 4, 8), 300, 1000)
        reports.append(record["c"]["report"])
    record["loadavg_end"] = C.loadavg()
    record["report"] = "\n\n".join(reports)
    out = C.write_json(args.out, record)
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
