"""`BandShardedChi2` and `shard_bands`: the bands of a multi-frequency objective
over one axis of a device mesh, each band's rows over another."""

from collections.abc import Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._numerics import asarray
from .._sharding._mesh import (
    AbstractSharded,
    check_mesh,
    check_same_on_every_process,
    compiled,
    forward_prefixes,
    has_explicit_axes,
    padded_length,
    place,
)
from ._at_frequency import AtFrequency
from ._base import AbstractDataTerm, check_rows_declared
from ._closure_covariance import has_closure_covariance
from ._inputs import default_name, ImageLike, is_geometric, planes_at
from ._objective import AbstractTerm, Objective
from ._wrapper import AbstractTermWrapper


class BandShardedChi2(AbstractTerm, AbstractSharded):
    r"""The data terms of several bands, one of each band
    ([`eqmodels.AtFrequency`][] terms of one kind), evaluated **each band on its own
    devices**: on a 2-d mesh `(bands, rows)` the bands are split over the `bands`
    axis and each band's rows over the `rows` axis of its device group.

    `value = Σ_b w_b χ²_b(model.at(ν_b))`, the weighted sum of the bands' χ²
    (`w_b` = `weights`, default 1): the same number as the unsharded terms, to
    rounding. The model is evaluated at every band's frequency (on every device:
    the image is small) and each device group receives its bands' images; each
    device computes its rows' share of its band's χ², a `psum` over the `rows`
    axis adds the shares, and the per-band values come back split over `bands`.
    The image gradient is the sum of the devices' shares, as for
    [`eqmodels.ShardedChi2`][] (whose padding it shares: rows of weight exactly 0
    up to one length for every band, a multiple of the `rows` axis).

    The bands' terms are stacked into one tree (one leading band axis), so they
    must be of one class with one kind of forward model on one grid (the
    different row counts are padded); a band axis of `k` devices takes a number
    of bands divisible by `k` (each group evaluates its `B/k` bands in turn).

    It is one term of an objective (`takes_model`: it reads the model at its
    bands' frequencies itself), reported under one name (`"cphase_bands"`, ...):
    the per-band values are `band_values(model)`. `chi2_offset` subtracts 1 from
    it once, not per band. [`eqmodels.shard_bands`][] builds these from an
    objective's band terms.
    """

    term: AbstractDataTerm
    band_weights: Float[Array, " bands"]
    freqs: tuple[float, ...] = eqx.field(static=True)
    mesh: Mesh = eqx.field(static=True)
    band_axis: str = eqx.field(static=True)
    axis_name: str = eqx.field(static=True)
    name: str = eqx.field(static=True)

    is_data: ClassVar[bool] = True
    takes_model: ClassVar[bool] = True
    has_residuals: ClassVar[bool] = True

    def __init__(
        self,
        terms: Sequence[AbstractTerm],
        mesh: Any,
        band_axis: str = "bands",
        row_axis: str = "rows",
        weights: Float[ArrayLike, " bands"] | Sequence[float] | None = None,
    ):
        """**Arguments:**

        - `terms`: one [`eqmodels.AtFrequency`][] data term per band, all of one
          class with one kind of forward model on one grid, each at a different
          frequency.
        - `mesh`: a `jax.sharding.Mesh` with the axes `band_axis` and `row_axis`
          (e.g. `jax.make_mesh((2, 2), ("bands", "rows"))`).
        - `band_axis`: the mesh axis the bands are split over; its size must
          divide the number of bands.
        - `row_axis`: the mesh axis each band's rows are split over.
        - `weights`: one weight per band (default all 1), e.g. the weights the
          terms had in an objective.
        """
        terms = list(terms)
        if not terms:
            raise ValueError("`terms` is empty: give one AtFrequency term per band.")
        for t in terms:
            if not isinstance(t, AtFrequency):
                raise TypeError(
                    "`terms` must be AtFrequency terms (one per band: "
                    "`em.AtFrequency(term, freq)`), got "
                    f"{type(t).__name__}."
                )
        freqs = tuple(t.freq for t in terms)
        if len(set(freqs)) != len(freqs):
            raise ValueError(
                f"`terms` has two terms at one frequency ({list(freqs)}): give one "
                "term per band; terms of another kind go in another BandShardedChi2."
            )
        inner = [t.term for t in terms]
        wrapped = [
            type(t).__name__ for t in inner if isinstance(t, AbstractTermWrapper)
        ]
        if wrapped:
            raise TypeError(
                f"`terms` wrap {wrapped[0]} terms (e.g. per-band station gains): "
                "their rows are not split over devices; keep them as ordinary "
                "(replicated) terms of the objective, as `em.shard_bands` does."
            )
        if len({type(t) for t in inner}) > 1:
            raise TypeError(
                "`terms` wrap data terms of different classes "
                f"({sorted({type(t).__name__ for t in inner})}): one class per "
                "BandShardedChi2 (build one for each kind of term)."
            )
        mesh, band_axis, n_groups = check_mesh(mesh, band_axis)
        _, row_axis, size = check_mesh(mesh, row_axis)
        if band_axis == row_axis:
            raise ValueError(
                f"`band_axis` and `row_axis` are both {band_axis!r}: use two axes of "
                "a 2-d mesh (e.g. `jax.make_mesh((2, 2), ('bands', 'rows'))`)."
            )
        if len(terms) % n_groups:
            raise ValueError(
                f"{len(terms)} bands cannot be split evenly over the mesh axis "
                f"{band_axis!r} of {n_groups} devices: use a band axis whose size "
                f"divides {len(terms)}."
            )
        for t in inner:
            if np.ndim(t.n_rows) > 0:
                raise ValueError(
                    "`terms` wraps a stack of terms (`pad_and_stack`): give one "
                    "term per band."
                )
            if t.forward is None:
                raise ValueError(
                    "a band's term has no forward model of its own (a member of an "
                    "objective that shares its transform?): give the terms you "
                    "built, or use `em.shard_bands(objective, mesh)`."
                )
            check_rows_declared(t)
            if has_closure_covariance(t):
                raise ValueError(
                    "a closure term with `covariance='full'` couples its rows within "
                    "each timestamp, so they cannot be split over devices: build it "
                    "with `covariance='independent'` to shard it."
                )
        check_same_on_every_process(inner, mesh, "`terms`")
        length = padded_length(max(t.rows for t in inner), size)
        if min(t.rows for t in inner) < size:
            raise ValueError(
                f"the mesh axis {row_axis!r} has {size} devices but a band's term "
                f"has only {min(t.rows for t in inner)} rows: use a smaller row axis."
            )
        padded = [t.pad_rows(length) for t in inner]
        arrays, statics = zip(*(eqx.partition(t, eqx.is_array) for t in padded))
        structures = {jax.tree_util.tree_structure(a) for a in arrays}
        if len(structures) > 1 or any(
            not eqx.tree_equal(s, statics[0]) for s in statics[1:]
        ):
            raise ValueError(
                "the bands' terms differ in structure (forward models of different "
                "kinds or grids, different options): build every band's term the "
                "same way (one `forward=`, one grid)."
            )
        shapes = [[np.shape(x) for x in jax.tree_util.tree_leaves(a)] for a in arrays]
        if any(s != shapes[0] for s in shapes[1:]):
            raise ValueError(
                "the bands' terms have leaves of different shapes after padding "
                "their rows (a forward model whose size depends on the data?): "
                "build every band's term the same way."
            )
        stacked = jax.tree_util.tree_map(
            lambda *xs: np.stack([np.asarray(x) for x in xs]), *arrays
        )
        term = eqx.combine(stacked, statics[0])
        if weights is None:
            weights = np.ones(len(terms))
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (len(terms),):
            raise ValueError(
                f"`weights` has shape {weights.shape}, expected ({len(terms)},): "
                "one weight per band."
            )
        self.term = place(term, _specs(term, band_axis, row_axis), mesh)
        self.band_weights = place(asarray(weights, _dtype(term)), P(), mesh)
        self.freqs = freqs
        self.mesh = mesh
        self.band_axis = band_axis
        self.axis_name = row_axis
        self.name = f"{default_name(inner[0])}_bands"

    @property
    def report_name(self) -> str:  # type: ignore[override]
        return self.name

    @property
    def forward(self) -> None:
        """None: the bands' forward models live in the stacked term and are never
        shared with other terms."""
        return None

    def sharing(self):
        return None, None

    def _images(self, image: ImageLike):
        if is_geometric(image):
            # The same at every frequency: each band's rows get its analytic
            # visibilities, as the unsharded terms' do (not its render's).
            return image
        grid = self.term.forward.grid
        return jnp.stack([planes_at(image, grid, f) for f in self.freqs])

    def band_values(self, image: ImageLike) -> Float[Array, " bands"]:
        """Each band's χ², unweighted, in `freqs` order.

        **Arguments:** `image`, a [`eqmodels.MultiFrequencyImage`][] (an array or
        any other model is the same at every frequency).
        """
        return compiled(_band_values, self, self._images(image))

    def __call__(self, image: ImageLike) -> Scalar:
        """**Arguments:** `image`, a [`eqmodels.MultiFrequencyImage`][].

        **Returns:** `Σ_b w_b χ²_b`, each band evaluated on its device group.
        """
        values = self.band_values(image)
        return jnp.sum(self.band_weights.astype(values.dtype) * values)

    def residuals(self, image: ImageLike) -> Float[Array, " m"]:
        """Every band's (padded) residuals scaled by `sqrt(w_b)`, concatenated band
        by band (padding rows give exact zeros); `Σ r²` is the value.

        **Arguments:** `image`, a [`eqmodels.MultiFrequencyImage`][].
        """
        res = compiled(_band_residuals, self, self._images(image))
        scale = jnp.sqrt(self.band_weights).astype(res.dtype)
        return (scale[:, None] * res).reshape(-1)

    def log_likelihood(self, image: ImageLike) -> Scalar:
        """The bands' normalised Gaussian log-likelihoods, summed (see
        [`eqmodels.AbstractDataTerm.log_likelihood_from_vis`][]): each band's
        from its χ² (evaluated on its device group) and its live rows' weights;
        **unweighted** (the band weights do not enter, as in
        [`eqmodels.Objective.log_likelihood`][]).

        **Arguments:** `image`, a [`eqmodels.MultiFrequencyImage`][].

        **Returns:** `ln L`, a scalar.
        """
        k = self.term.reals_per_row
        if k is None:
            raise NotImplementedError(
                f"{type(self.term).__name__} does not declare `reals_per_row`: its "
                "χ² cannot be turned into a normalised log-likelihood (see "
                "`AbstractDataTerm`)."
            )
        chi2 = self.band_values(image)
        w = self.term.weight
        live = w > 0
        log_w = jnp.where(live, jnp.log(jnp.where(live, w, 1.0)), 0.0)
        log_w = jnp.sum(log_w.reshape(w.shape[0], -1), axis=1)
        n = (k * jnp.asarray(self.term.n_rows)).astype(chi2.dtype)
        return jnp.sum(-0.5 * n * chi2 + 0.5 * k * log_w - 0.5 * n * np.log(2 * np.pi))

    def _mapped(self, fn, images, out_spec):
        band, rows = self.band_axis, self.axis_name
        specs = _specs(self.term, band, rows)
        if is_geometric(images):  # one model, replicated on every device
            leaves, static = eqx.partition(images, eqx.is_array)
            return jax.shard_map(
                lambda t, x: fn(t, eqx.combine(x, static)),
                mesh=self.mesh,
                in_specs=(specs, P()),
                out_specs=out_spec,
                check_vma=False,
            )(self.term, leaves)
        if has_explicit_axes(self.mesh):
            images = jax.sharding.reshard(images, NamedSharding(self.mesh, P(band)))
        return jax.shard_map(
            fn,
            mesh=self.mesh,
            in_specs=(specs, P(band)),
            out_specs=out_spec,
            check_vma=False,
        )(self.term, images)


def _band_values(term: BandShardedChi2, images):
    rows = term.axis_name

    def body(t, x):
        return jax.lax.psum(_per_band(lambda ti, xi: ti(xi), t, x), rows)

    return term._mapped(body, images, P(term.band_axis))


def _band_residuals(term: BandShardedChi2, images):
    def body(t, x):
        return _per_band(lambda ti, xi: ti.residuals(xi), t, x)

    return term._mapped(body, images, P(term.band_axis, term.axis_name))


def _per_band(fn, terms, images):
    """`fn(term_b, image_b)` for each band `b` of the stacked `terms`: `images`
    stacked band by band, or one geometric model (the same for every band)."""
    return jax.vmap(fn, in_axes=(0, None if is_geometric(images) else 0))(terms, images)


def _dtype(term) -> Any:
    return np.asarray(term.weight).dtype


def _specs(term: AbstractDataTerm, band_axis: str, row_axis: str):
    """`P(band, rows)` for the per-row leaves and forward points of the stacked
    term, `P(band)` for its other array leaves (one per band)."""
    prefixes = set(term.row_paths())
    prefixes |= forward_prefixes(term.forward, *term.forward_path())
    leaves, treedef = jax.tree_util.tree_flatten_with_path(term)
    specs = []
    for path, _ in leaves:
        names = tuple(
            k.name if isinstance(k, jax.tree_util.GetAttrKey) else None for k in path
        )
        split = any(names[: len(p)] == p for p in prefixes)
        specs.append(P(band_axis, row_axis) if split else P(band_axis))
    return jax.tree_util.tree_unflatten(treedef, specs)


def shard_bands(
    objective: Objective | Sequence[AbstractTerm],
    mesh: Any,
    band_axis: str = "bands",
    row_axis: str = "rows",
) -> Objective:
    """The objective with its band terms ([`eqmodels.AtFrequency`][]) split over a
    2-d mesh: the terms of one kind (one class of inner term, one per band) become
    one [`eqmodels.BandShardedChi2`][] (bands over `band_axis`, each band's rows
    over `row_axis`), carrying their weights; the other terms (regularizers,
    spectral regularizers, terms not at a frequency, and band terms whose inner
    term is a wrapper such as `AtFrequency(GainCorrected(term, gains), ν)`:
    per-band station gains) stay as they are, replicated, evaluated on every
    device. The value and gradient are the objective's, to rounding.

    ```python
    mesh = jax.make_mesh((4, 2), ("bands", "rows"))   # 4 bands x 2 row shards
    sharded = em.shard_bands(objective, mesh)
    ```

    **Arguments:**

    - `objective`: the terms (a list: data terms, weighted ones `w * term`,
      regularizers), or an [`eqmodels.Objective`][] built with `share=False`
      (an objective that shares transforms holds its members without their
      forward models); its band terms are `AtFrequency` terms (not already
      sharded), one of each kind per band.
    - `mesh`, `band_axis`, `row_axis`: as for [`eqmodels.BandShardedChi2`][].

    **Returns:** the new `Objective` (same `chi2_offset`; names: the kinds'
    `"<name>_bands"` after the unchanged terms).
    """
    if isinstance(objective, AbstractTerm) and not isinstance(objective, Objective):
        objective = [objective]
    if not isinstance(objective, Objective):
        if not isinstance(objective, Sequence):
            raise TypeError(
                "`objective` must be a list of terms or an Objective, got "
                f"{type(objective).__name__}."
            )
        objective = Objective(list(objective), share=False)
    if objective.chi2_offset:
        raise ValueError(
            "`objective` has `chi2_offset=True`: a BandShardedChi2 is one term "
            "(the offset would be subtracted once, not per band); build the "
            "objective without the offset."
        )
    weights = np.asarray(objective.weights)
    kept, kept_w = [], []
    groups: dict[Any, list[list[int]]] = {}
    for i, t in enumerate(objective.terms):
        if (
            not isinstance(t, AtFrequency)
            or not isinstance(t.term, AbstractDataTerm)
            or isinstance(t.term, AbstractTermWrapper)  # e.g. per-band gains
        ):
            kept.append(t)
            kept_w.append(weights[i])
            continue
        key = (type(t.term), type(t.term.forward), default_name(t.term))
        for group in groups.setdefault(key, []):
            if all(objective.terms[j].freq != t.freq for j in group):
                group.append(i)
                break
        else:
            groups[key].append([i])
    if not groups:
        raise ValueError(
            "`objective` has no AtFrequency data term: there are no bands to split."
        )
    rebuilt = []
    for kind_groups in groups.values():
        for group in kind_groups:
            members = [_with_forward(objective, j) for j in group]
            rebuilt.append(
                BandShardedChi2(
                    members, mesh, band_axis, row_axis, weights=weights[group]
                )
            )
    return Objective(
        [*kept, *rebuilt],
        np.concatenate([np.asarray(kept_w), np.ones(len(rebuilt))]),
        share=True,
    )


def _with_forward(objective: Objective, j: int) -> AtFrequency:
    """Term `j` of the objective with its own forward model (a member of a shared
    transform holds none: its group's model at its own points is taken)."""
    t = objective.terms[j]
    if t.term.forward is not None:
        return t
    raise ValueError(
        f"term {objective.names[j]!r} holds no forward model of its own (it shares "
        "a transform): give `shard_bands` the list of terms instead (or an "
        "objective built with `em.Objective(terms, share=False)`)."
    )
