"""`to_arviz`: a `Samples` as an ArviZ data tree (posterior and sampler
statistics), for ArviZ's diagnostics and plots."""

from typing import Any

import numpy as np

from ._draws import check_samples, leaf_names
from ._sample import Samples


# `Samples.stats` key → ArviZ's `sample_stats` name (ArviZ's conventions).
_STATS = (
    ("acceptance_rate", "acceptance_rate"),
    ("is_divergent", "diverging"),
    ("num_integration_steps", "n_steps"),
)


def to_arviz(
    samples: Samples,
    *,
    coords: dict[str, Any] | None = None,
    dims: dict[str, list[str]] | None = None,
):
    """The draws of [`eqmodels.sample`][] as an ArviZ data tree (an
    `xarray.DataTree` from `arviz_base.from_dict`, the format of ArviZ ≥ 1.0), for
    ArviZ's diagnostics (`arviz_stats.rhat`, `ess`, `summary`) and plots.

    - `posterior`: one variable per real floating-point leaf of the draws, named
      by the shortest tail of its path that no other leaf shares (`radius`,
      `beta_re`, `params`; `parts.0.flux` where two parts of a sum have one), with dims
      `(chain, draw, <name>_dim_0, ...)`. The leaves are in the model's own
      coordinates (a `support="positive"` leaf as `θ`, not `ln θ`); integer
      leaves (a pixel image's `indices`) are left out.
    - `sample_stats`: `lp` (the sampled log density, unconstrained, with the
      Jacobian), `diverging`, `acceptance_rate`, `n_steps` (leapfrog steps) and
      `step_size` (each chain's adapted step, repeated over its draws).

    ArviZ's `rhat` and `ess` are rank-normalised by default; `method="split"` and
    `method="mean"` are the estimators of [`eqmodels.Samples.rhat`][] and
    [`eqmodels.Samples.ess`][] (no rank normalisation: equal to them to rounding
    on the same coordinates, tested). Note that `Samples.rhat()` / `ess()` are of
    the unconstrained coordinates, these of the model's leaves: they differ on
    `support="positive"` leaves (`ln θ` against `θ`) unless rank-normalised.

    Needs `arviz-base` (`pip install "eqmodels[posterior]"`; ArviZ ≥ 1.0 installs
    it). For the older ArviZ 0.x, build its `InferenceData` from the groups:
    `az.InferenceData(**{g: tree[g].to_dataset() for g in tree.children})`.

    **Arguments:**

    - `samples`: [`eqmodels.Samples`][].
    - `coords`, `dims`: passed to `arviz_base.from_dict` (name a variable's
      dimensions, e.g. `dims={"params": ["pixel"]}`).

    **Returns:** an `xarray.DataTree` with groups `posterior` and `sample_stats`.
    """
    check_samples(samples)
    try:
        import arviz_base
    except ImportError as e:
        raise ImportError(
            "`to_arviz` needs arviz-base (ArviZ ≥ 1.0's converters): "
            "`pip install arviz-base` (or the `eqmodels[posterior]` extra)."
        ) from e
    posterior = {name: np.asarray(leaf) for name, leaf in leaf_names(samples.draws)}
    if not posterior:
        raise ValueError(
            "the draws have no real floating-point array leaves to export."
        )
    c, s = np.shape(samples.log_density)[:2]
    stats = {"lp": np.asarray(samples.log_density)}
    for key, name in _STATS:
        if key in samples.stats:
            stats[name] = np.asarray(samples.stats[key])
    if "step_size" in samples.stats:
        step = np.asarray(samples.stats["step_size"])
        stats["step_size"] = np.broadcast_to(step.reshape(c, 1), (c, s)).copy()
    return arviz_base.from_dict(
        {"posterior": posterior, "sample_stats": stats}, coords=coords, dims=dims
    )
