"""`sample`: NUTS or HMC with window adaptation (blackjax) over a `Posterior`,
chains vmapped, checkpointed and resumable; `Samples`, what it returns."""

import hashlib
import os
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray, PyTree

from .._progress import progress_bar
from .._solvers._checkpoint import fingerprint
from .._validation import check_flag
from ._checkpoint import open_sample_folder
from ._diagnostics import ess, split_rhat
from ._mcmc import run_chains
from ._placement import chain_starts
from ._posterior import Posterior
from ._requirements import check_posterior, import_blackjax
from ._vi import check_vi_args, sample_vi, VI_METHODS


METHODS = ("nuts", "hmc", *VI_METHODS)
CHAIN_METHODS = ("vectorized", "sequential")


class Samples(eqx.Module):
    """What [`eqmodels.sample`][] returns.

    - `draws`: the model at every draw, its leaves stacked with leading axes
      `(num_chains, num_samples)` (`eqx.filter_vmap` over both axes evaluates
      anything of a model, e.g. `eqx.filter_vmap(eqx.filter_vmap(lambda m: m()))`).
    - `positions`: the flat unconstrained vectors sampled, `(chains, samples, n)`
      (see [`eqmodels.Posterior.to_unconstrained`][]).
    - `log_density`: the sampled density (unconstrained, with the log-Jacobian)
      at each draw, `(chains, samples)`.
    - `stats`: `acceptance_rate`, `is_divergent`, `num_integration_steps`
      (each `(chains, samples)`; HMC's is its fixed number), and the adapted
      `step_size` `(chains,)` and `inverse_mass_matrix` `(chains, n)`
      (`(chains, n, n)` with `dense_mass=True`). For
      `method="meanfield"`: `elbo`
      `(chains, num_steps)` (the ELBO estimate at each step), the fitted
      Gaussian's `mean` and `scale` (its standard deviations) `(chains, n)`,
      and `log_q` `(chains, samples)` (its log density at the draws). For
      `method="pathfinder"`: `elbo` `(chains,)` (of the approximation drawn
      from), `elbo_path` `(chains, num_steps + 1)` (at each point of the
      L-BFGS path, `-inf` past its end), `num_iterations` and
      `best_iteration` `(chains,)`, the approximation's `mean` and `scale`
      (the square root of its covariance's diagonal) `(chains, n)`, and
      `log_q` `(chains, samples)`.
    """

    draws: PyTree
    positions: Float[Array, "chains samples n"]
    log_density: Float[Array, "chains samples"]
    stats: dict

    @property
    def divergences(self) -> Int[Array, " chains"]:
        """The number of divergent transitions of each chain (NUTS, HMC)."""
        if "is_divergent" not in self.stats:
            raise ValueError(
                "these draws are from variational inference (no transitions, no "
                "divergences): compare `stats['elbo']` across chains instead."
            )
        return jnp.sum(self.stats["is_divergent"], axis=1)

    def rhat(self, of: Callable[[PyTree], ArrayLike] | None = None) -> np.ndarray:
        """Split R̂ of each unconstrained coordinate (`positions`, `(n,)`, numpy),
        or of each element of `of(draw)`: below about 1.01 when the chains agree
        (BDA3 §11.4; needs ≥ 4 draws).

        **Arguments:** `of` (optional), a function of one draw's model returning an
        array (e.g. `lambda m: m.log_image()`, a pixel image of a reparametrised
        model), evaluated at every draw (`eqx.filter_vmap` over the chains and
        draws).

        **Returns:** `(n,)` for the positions; the shape of `of`'s output otherwise.
        """
        return split_rhat(self._quantity(of, "rhat"))

    def ess(self, of: Callable[[PyTree], ArrayLike] | None = None) -> np.ndarray:
        """The effective sample size of each unconstrained coordinate (`(n,)`,
        numpy; Stan's estimator over the split chains, ArviZ's
        `ess(method="mean")`), or of each element of `of(draw)` (as in `rhat`)."""
        return ess(self._quantity(of, "ess"))

    def _quantity(self, of, name: str) -> np.ndarray:
        if of is None:
            return np.asarray(self.positions)
        if not callable(of):
            raise TypeError(
                f"`of` must be a function of one draw's model (e.g. "
                f"`samples.{name}(lambda m: m.log_image())`), got {of!r}."
            )
        values = eqx.filter_vmap(eqx.filter_vmap(of))(self.draws)
        if not eqx.is_array(values):
            raise TypeError(
                f"`of` must return one array per draw, got {type(values).__name__}."
            )
        return np.asarray(values)


def sample(
    posterior: Posterior,
    init: PyTree | None = None,
    *,
    key: PRNGKeyArray,
    method: str = "nuts",
    num_warmup: int = 500,
    num_samples: int = 500,
    num_chains: int = 4,
    jitter: float = 0.1,
    target_acceptance_rate: float = 0.8,
    num_integration_steps: int | None = None,
    dense_mass: bool = False,
    chain_method: str | None = None,
    mesh: Mesh | None = None,
    axis_name: str = "chains",
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    progress: bool = False,
    callback: Callable[[int, Samples], None] | None = None,
    num_steps: int | None = None,
    learning_rate: float | Callable | None = None,
    num_mc: int | None = None,
    history_size: int | None = None,
) -> Samples:
    """Draw from a [`eqmodels.Posterior`][] with NUTS or HMC (blackjax's `nuts` or
    `hmc`, with `window_adaptation` of the step size and a diagonal or dense mass
    matrix), all chains in one compiled program. Sampling is in the posterior's flat
    unconstrained coordinates (positive leaves as `ln θ`, their Jacobian
    included); the draws are returned as models.

    After the warm-up (one compiled program), the draws are made in chunks of
    `checkpoint_every` compiled steps; between chunks the chains' state can be
    saved (`checkpoint`), progress shown (`progress`) and the draws so far looked
    at (`callback`). Draw `j` of a chain uses the key `fold_in(k, j)` of its
    chain's key `k`, so the draws do not depend on the chunking: a chunked run,
    an unchunked one and a resumed one give the same draws, bit for bit (on one
    device configuration).

    **Arguments:**

    - `posterior`: the [`eqmodels.Posterior`][].
    - `init`: the starting model (default: the posterior's `model`); each chain
      starts at it plus a uniform jitter in `[−jitter, jitter]` on every
      unconstrained coordinate.
    - `key`: a `jax.random.key`.
    - `method`: `"nuts"` (the No-U-Turn sampler), `"hmc"` (Hamiltonian Monte
      Carlo with `num_integration_steps` leapfrog steps per draw), or
      variational inference: `"meanfield"` (mean-field Gaussian VI) or
      `"pathfinder"` (Pathfinder; both below).
    - `num_warmup`: adaptation steps (discarded); `num_samples`: draws kept per
      chain; `num_chains`: independent chains.
    - `jitter`: the half-width of the starting jitter (0: all chains start at
      `init`).
    - `target_acceptance_rate`: the dual-averaging target of the adaptation.
    - `num_integration_steps`: HMC's leapfrog steps per draw (default 10;
      `method="hmc"` only: NUTS chooses its own).
    - `dense_mass`: adapt a dense inverse mass matrix (the draws' covariance,
      regularised as Stan does) instead of a diagonal one: for posteriors with
      strongly correlated coordinates, where a diagonal one leaves NUTS many
      small steps along the correlations (or divergences). It costs an `n × n`
      matrix-vector product per leapfrog step (nothing beside a density of a few
      dozen parameters) and needs enough warm-up draws to estimate `n²/2`
      covariances.
    - `chain_method`: how the chains share the compiled program:
      `"vectorized"` (`jax.vmap`: the chains' steps batched, what a GPU wants;
      each NUTS step then runs as long as the longest of the chains' trajectories)
      or `"sequential"` (`lax.map`: one chain after another, each at its own
      trajectory length, the density unbatched: several times faster on a CPU,
      where batching buys little and turns data-dependent branches into
      selects of both). Default (`None`): `"sequential"` on a CPU without a
      `mesh`, else `"vectorized"`. A `mesh` needs `"vectorized"` (its chains
      axis is batched and sharded). The draws are the same up to rounding.
    - `mesh`, `axis_name`: to spread the chains over devices, a
      `jax.sharding.Mesh` with an axis `axis_name` whose size divides
      `num_chains`: the chains' starts and keys are sharded along it (the
      posterior replicated), and the compiled programs run each device's
      chains there (the mesh's axes are used as automatic ones). The mesh may
      span the processes of a `jax.distributed` run (every process calls
      `sample` with the same arguments; each runs its devices' chains; the
      result's arrays are global: gather them with
      `jax.experimental.multihost_utils.process_allgather`), without
      `checkpoint`, `progress` or `callback`. Default: no sharding.
    - `checkpoint`: a folder (created) for the run's state: after warm-up and
      after every chunk, the chains' state, the adapted step sizes and mass
      matrices, the chains' keys and the chunk's draws are written to it
      (atomically), with a fingerprint of the posterior and the settings.
      Called again with the same folder and arguments (after a crash, a
      `kill`, a pre-empted job), `sample` reads back what is there and runs only
      the rest: the result is the one of an uninterrupted run. A larger
      `num_samples` continues the chains (a smaller one returns the first
      draws). A folder of another run (other posterior, `init`, `key`, `method`,
      `num_warmup`, `num_chains`, `jitter`, target or integration steps), in use
      by another process, or with a missing or corrupt file is refused
      (`CheckpointError`, a `ValueError`, naming what differs or the file).
    - `checkpoint_every`: draws per chunk (default: a tenth of `num_samples`
      with `checkpoint`, `progress` or `callback`, else all of them in one
      chunk).
    - `progress`: show the warm-up and the draws, chunk by chunk, with the
      acceptance rate and divergences so far (tqdm when installed, else a line
      per chunk on stderr). Never inside the compiled programs.
    - `callback`: `callback(done, samples)` after each chunk computed by this
      call, with the [`eqmodels.Samples`][] of the `done` draws so far (to
      watch R̂ grow better; raising from it stops the run, its checkpoint kept).

    Variational inference (`method="meanfield"` or `"pathfinder"`, see
    [Variational inference](posteriors.md#variational-inference)): each chain
    fits its own Gaussian approximation from its start and draws `num_samples`
    independent draws from it (with `mesh`, each device fits its own chains);
    `num_warmup`, `target_acceptance_rate`, `num_integration_steps`,
    `dense_mass`, `chain_method`, `checkpoint`, `checkpoint_every`, `progress`
    and `callback` are the samplers' and refused there. Their arguments (refused by
    the other methods; `None`: the default):

    - `num_steps`: Adam steps (meanfield, default 2000) or the most L-BFGS
      iterations (pathfinder, default 100).
    - `learning_rate` (meanfield): Adam's initial step size, decayed to 0 over
      `num_steps` (cosine; default 0.02), or an optax schedule `step -> rate`
      used as it is.
    - `num_mc`: the draws of each ELBO estimate (meanfield: per gradient step,
      default 10; pathfinder: per point of the path, default 100).
    - `history_size` (pathfinder): the L-BFGS history (default 10).

    **Returns:** [`eqmodels.Samples`][] (draws, log densities, statistics).
    """
    vi_options = check_vi_args(
        method,
        dict(
            num_steps=num_steps,
            learning_rate=learning_rate,
            num_mc=num_mc,
            history_size=history_size,
        ),
        dict(
            num_warmup=num_warmup,
            target_acceptance_rate=target_acceptance_rate,
            mesh=mesh,
            axis_name=axis_name,
            num_integration_steps=num_integration_steps,
            dense_mass=dense_mass,
            chain_method=chain_method,
            checkpoint=checkpoint,
            checkpoint_every=checkpoint_every,
            progress=progress,
            callback=callback,
        ),
        sample,
    )
    if method in VI_METHODS:
        positions, logdens, stats = sample_vi(
            posterior,
            init,
            key=key,
            method=method,
            num_samples=num_samples,
            num_chains=num_chains,
            jitter=jitter,
            options=vi_options,
            mesh=mesh,
            axis_name=axis_name,
        )
        draws = eqx.filter_vmap(eqx.filter_vmap(posterior.from_unconstrained))(
            positions
        )
        return Samples(draws, positions, logdens, stats)
    blackjax = import_blackjax("sample")
    check_posterior(posterior)
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}, got {method!r}.")
    for name, v, lo in (
        ("num_warmup", num_warmup, 1),
        ("num_samples", num_samples, 1),
        ("num_chains", num_chains, 1),
    ):
        if not _is_int(v) or v < lo:
            raise ValueError(f"`{name}` must be an int ≥ {lo}, got {v!r}.")
    if not (np.isfinite(jitter) and jitter >= 0):
        raise ValueError(f"`jitter` must be finite and ≥ 0, got {jitter!r}.")
    if not 0 < target_acceptance_rate < 1:
        raise ValueError(
            "`target_acceptance_rate` must be in (0, 1), got "
            f"{target_acceptance_rate!r}."
        )
    if method == "hmc":
        if num_integration_steps is None:
            num_integration_steps = 10
        if not _is_int(num_integration_steps) or num_integration_steps < 1:
            raise ValueError(
                "`num_integration_steps` must be an int ≥ 1 (HMC's leapfrog steps "
                f"per draw), got {num_integration_steps!r}."
            )
        num_integration_steps = int(num_integration_steps)
    elif num_integration_steps is not None:
        raise ValueError(
            f"`num_integration_steps` is for `method='hmc'`; {method!r} chooses its "
            "own number of steps: leave it out."
        )
    dense_mass = check_flag("dense_mass", dense_mass)
    if chain_method is not None and chain_method not in CHAIN_METHODS:
        raise ValueError(
            f"`chain_method` must be one of {CHAIN_METHODS} or None (automatic), got "
            f"{chain_method!r}."
        )
    if mesh is not None and chain_method == "sequential":
        raise ValueError(
            "`chain_method='sequential'` cannot spread the chains over a `mesh`: "
            "give `chain_method='vectorized'` (or None) with a mesh."
        )
    if chain_method is None:
        on_cpu = jax.default_backend() == "cpu"
        chain_method = "sequential" if on_cpu and mesh is None else "vectorized"
    if checkpoint_every is not None and (
        not _is_int(checkpoint_every) or checkpoint_every < 1
    ):
        raise ValueError(
            "`checkpoint_every` must be an int ≥ 1 (draws per chunk) or None, got "
            f"{checkpoint_every!r}."
        )
    progress = check_flag("progress", progress)
    if callback is not None and not callable(callback):
        raise TypeError(
            f"`callback` must be callable(done, samples) or None, got {callback!r}."
        )
    if checkpoint is not None and not isinstance(checkpoint, str | os.PathLike):
        raise TypeError(
            "`checkpoint` must be a folder path (str or os.PathLike) or None, got "
            f"{type(checkpoint).__name__}."
        )
    z0, z0s, keys, place, mesh, axis_name = chain_starts(
        posterior, init, key, num_chains, jitter, mesh, axis_name
    )

    num_samples = int(num_samples)
    if checkpoint_every is None:
        chunked = checkpoint is not None or progress or callback is not None
        checkpoint_every = -(-num_samples // 10) if chunked else num_samples
    folder = None
    if jax.process_count() > 1 and (
        checkpoint is not None or progress or callback is not None
    ):
        raise ValueError(
            "`checkpoint`, `progress` and `callback` are not available in a "
            "multi-process run (they read every chain's draws on one host): run "
            "without them (the chains run as one program across the processes)."
        )
    if checkpoint is not None:
        # Before anything runs: what cannot be fingerprinted is refused now.
        try:
            posterior_fp = fingerprint(posterior, None, None)
        except ValueError as e:
            raise ValueError(
                f"`checkpoint`: the posterior cannot be fingerprinted: {e}"
            ) from None
        meta = {
            "posterior": posterior_fp,
            "options": {
                "method": method,
                "num_warmup": int(num_warmup),
                "num_chains": int(num_chains),
                "jitter": float(jitter),
                "target_acceptance_rate": float(target_acceptance_rate),
                "num_integration_steps": num_integration_steps,
                # (only when set: earlier runs' folders keep their fingerprint)
                **({"dense_mass": True} if dense_mass else {}),
                "init": _digest(z0),
                "key": _digest(jax.random.key_data(key)),
                "key_impl": str(jax.random.key_impl(key)),
            },
        }
        folder = open_sample_folder(checkpoint, meta)

    def draws_of(positions):
        return eqx.filter_vmap(eqx.filter_vmap(posterior.from_unconstrained))(positions)

    on_chunk = None
    if callback is not None:

        def on_chunk(done, positions, logdens, stats):
            callback(done, Samples(draws_of(positions), positions, logdens, stats))

    bar = progress_bar(num_samples, progress, desc="sample", unit="draw", units="draws")
    try:
        positions, logdens, stats = run_chains(
            posterior,
            z0s,
            keys,
            blackjax=blackjax,
            method=method,
            num_integration_steps=num_integration_steps,
            num_warmup=int(num_warmup),
            num_samples=num_samples,
            target=float(target_acceptance_rate),
            sequential=chain_method == "sequential",
            dense=dense_mass,
            chunk=int(checkpoint_every),
            place=place,
            folder=folder,
            bar=bar,
            on_chunk=on_chunk,
        )
    finally:
        if folder is not None:
            folder.close()
        if bar is not None:
            bar.close()
    return Samples(draws_of(positions), positions, logdens, stats)


def _is_int(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | np.integer)


def _digest(x) -> str:
    a = np.ascontiguousarray(np.asarray(x))
    return hashlib.sha256(f"{a.shape}{a.dtype}".encode() + a.tobytes()).hexdigest()
