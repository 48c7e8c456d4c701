"""`ShardedChi2`: any data term with its rows split over a device mesh."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxtyping import Array, Complex, Float, Scalar

from .._forward._base import AbstractForwardModel
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
    split_specs,
)
from ._base import AbstractDataTerm, check_rows_declared, n_rows_leaf
from ._closure_covariance import has_closure_covariance
from ._common import index_key_leaf
from ._inputs import from_shared_vis, ImageLike, is_geometric, planes_at
from ._objective import AbstractTerm
from ._wrapper import AbstractTermWrapper


class ShardedChi2(AbstractTermWrapper, AbstractSharded):
    r"""Any data term with its rows split over one axis of a device mesh.

    The rows are padded to a multiple of the axis size with rows of weight exactly 0
    (copies of row 0: finite values, never σ = 0), so they add exactly 0 to the
    value and every gradient; the χ² keeps its true normalisation `n_rows`. Every
    per-row leaf and the forward model's points are split over the devices (a
    `DirectFT` keeps `1/n` of its matrix on each); the image is replicated (its gradient is the
    sum of the devices' shares, which `shard_map`'s transpose forms without
    replication tracking; see docs/conventions.md on jax-finufft's pitfalls); each device
    computes its rows' share of the χ² and a `psum` adds them:

    `χ² = Σ_d Σ_{k ∈ rows(d)} f(row k) / N` — the terms are sums over rows divided
    by `N`, and a padding row's share is exactly 0, so the sharded value is the
    unsharded one, to rounding.

    It is a data term itself: usable alone, in an [`eqmodels.Objective`][], under
    `jit`, `grad` and `jax.vmap`. Inside an objective, sharded members whose
    transforms can be shared are served by **one** transform at their distinct
    points, split over the same mesh ([`eqmodels.ShardedForward`][]), so sharding
    does not undo the sharing.

    Works on one host and on several (`jax.distributed`): every array leaf is placed
    as a global array, each process materialising only its own devices' rows.
    """

    term: AbstractDataTerm
    mesh: Mesh = eqx.field(static=True)
    axis_name: str = eqx.field(static=True)

    def __init__(
        self,
        term: AbstractTerm,
        mesh: Any = None,
        axis_name: str = "rows",
    ):
        """**Arguments:**

        - `term`: any data term (built-in or a user's) with its own forward model.
        - `mesh`: a `jax.sharding.Mesh` (Auto or Explicit axes, any number of axes;
          the others replicate). Default: one axis over every device of every
          process.
        - `axis_name`: the mesh axis the rows are split over.

        A mesh axis with more devices than the term has rows is refused (use a
        smaller mesh, or let an objective share the transform). The padding rows
        go at the end, so with fewer than twice as many rows as devices the last
        devices may still hold padding only (9 rows on 8 devices: 2 rows each,
        the last three devices padding).

        In a multi-process run every process passes the same, whole, term (each
        keeps only its own devices' rows); construction checks that they do.
        """
        if isinstance(term, ShardedChi2):
            raise TypeError(
                "`term` is already a ShardedChi2: wrap the inner term once."
            )
        if isinstance(term, type) and issubclass(term, AbstractDataTerm):
            raise TypeError(
                f"`term` is the class {term.__name__}, not a term: wrap a built term "
                f"(`ShardedChi2({term.__name__}(...), mesh)`), or build it split "
                f"with `ShardedChi2.from_data({term.__name__}, data, grid, "
                "mesh=mesh)`."
            )
        if not isinstance(term, AbstractDataTerm):
            raise TypeError(
                "`term` must be a data term (an `AbstractDataTerm`), got "
                f"{type(term).__name__}."
            )
        if not isinstance(term.forward, AbstractForwardModel):
            raise ValueError(
                "`term` has no forward model of its own (a member of an objective "
                "that shares its transform?): wrap the term you built, then build "
                "the objective from the wrapped terms."
            )
        if term.forward.point_fields is None:
            raise TypeError(
                f"`term`'s forward model ({type(term.forward).__name__}) does not "
                "declare `point_fields`, so its points cannot be split over devices."
            )
        mesh, axis_name, size = check_mesh(mesh, axis_name)
        # First of the checks that read the data: a process refusing its own
        # (different) term alone would leave the others waiting in this collective.
        check_same_on_every_process(term, mesh, "`term`")
        if np.ndim(term.n_rows) > 0:
            raise ValueError(
                "`term` is a stack of terms (`pad_and_stack`: its leaves have a "
                "leading batch axis): wrap each term in ShardedChi2 first, then stack "
                "the sharded terms (`em.pad_and_stack([ShardedChi2(a, mesh), "
                "ShardedChi2(b, mesh)])`)."
            )
        check_rows_declared(term)
        if has_closure_covariance(term):
            raise ValueError(
                "a closure term with `covariance='full'` couples its rows within "
                "each timestamp, so they cannot be split over devices: build it "
                "with `covariance='independent'` to shard it."
            )
        n = term.rows
        if n < size:
            raise ValueError(
                f"the mesh axis {axis_name!r} has {size} devices but the term has only "
                f"{n} rows: a device would hold padding rows only. Use a smaller "
                "mesh (e.g. `jax.make_mesh((k,), ('rows',))` with k <= "
                f"{n}), or shard a bigger term."
            )
        padded = term.pad_rows(padded_length(n, size))
        self.term = place(padded, _row_specs(padded, axis_name), mesh)
        self.mesh = mesh
        self.axis_name = axis_name

    @classmethod
    def from_data(
        cls,
        term_cls: type,
        data: Any,
        grid: Any,
        *,
        mesh: Any = None,
        axis_name: str = "rows",
        **kwargs,
    ) -> "ShardedChi2":
        """Build `term_cls.from_data(data, grid, **kwargs)` already split over the
        mesh, each process computing **only its own devices' rows** (for `DirectFT`,
        only its share of the matrix): what a multi-host run needs when no host can
        hold the whole problem. Equal to `ShardedChi2(term_cls.from_data(...))`.

        **Arguments:**

        - `term_cls`: a data-term class with a `from_data` (e.g. `em.AmpChi2`).
        - `data`: its data (a `VisData` or a product such as `em.amplitudes(d)`);
          every process passes the same data.
        - `grid`: the image grid.
        - `mesh`, `axis_name`: as for the constructor.
        - `**kwargs`: passed on to `term_cls.from_data` (`forward="direct"`, ...).
        """
        if not (isinstance(term_cls, type) and hasattr(term_cls, "from_data")):
            raise TypeError(
                "`term_cls` must be a data-term class with a `from_data` (e.g. "
                f"`em.AmpChi2`), got {type(term_cls).__name__}: the arguments are "
                "`from_data(term_cls, data, grid, mesh=...)`."
            )
        mesh, axis_name, size = check_mesh(mesh, axis_name)
        check_same_on_every_process(data, mesh, "`data`")
        n = int(np.shape(data.u)[0])
        if n == 0:
            raise ValueError(
                "`data` have no rows (empty `u`): there is nothing to split; check "
                "the selection or averaging that produced them."
            )
        if n < size:
            raise ValueError(
                f"the mesh axis {axis_name!r} has {size} devices but the data have "
                f"only {n} rows: use a smaller mesh."
            )
        length = padded_length(n, size)
        index = np.concatenate([np.arange(n), np.zeros(length - n, np.int64)])
        slots = getattr(data, "time_index", None)
        slots = None if slots is None else np.asarray(slots)
        table = getattr(data, "index_key", None)
        row_sharding = NamedSharding(mesh, P(axis_name))
        pieces = {}
        for device, (where,) in row_sharding.addressable_devices_indices_map(
            (length,)
        ).items():
            rows = index[where]
            term = term_cls.from_data(_take_data_rows(data, rows, n), grid, **kwargs)
            live = np.arange(length)[where] < n
            pieces[device] = _as_piece(term, rows, live, n, slots, table)
        proto = next(iter(pieces.values()))
        specs = _row_specs(proto, axis_name)

        # None leaves kept (an optional field of a term, e.g. a closure term's
        # whitening when independent): one entry per spec, in the same order.
        def is_none(x):
            return x is None

        leaves = [
            jax.tree_util.tree_leaves(piece, is_leaf=is_none)
            for piece in pieces.values()
        ]
        spec_leaves = jax.tree_util.tree_leaves(specs, is_leaf=is_none)
        devices = list(pieces)
        out = []
        for k, spec in enumerate(spec_leaves):
            local = [ls[k] for ls in leaves]
            if not (eqx.is_array(local[0]) and spec == P(axis_name)):
                out.append(local[0])
                continue
            shape = (local[0].shape[0] * size, *local[0].shape[1:])
            sharding = NamedSharding(mesh, spec)
            arrays = [jax.device_put(x, d) for x, d in zip(local, devices)]
            out.append(
                jax.make_array_from_single_device_arrays(shape, sharding, arrays)
            )
        term = jax.tree_util.tree_unflatten(
            jax.tree_util.tree_structure(proto, is_leaf=is_none), out
        )
        # Already padded and split: the constructor only places the replicated
        # leaves.
        return cls(term, mesh, axis_name)

    # The forward model lives in the wrapped term (padding rows included); weight,
    # n_rows, report_name and row_paths come from `AbstractTermWrapper`.
    @property
    def forward(self) -> AbstractForwardModel | None:
        return self.term.forward

    # Evaluated per device through its own `__call__` / `residuals` when not served
    # from a shared transform; `sharing` says when it is.
    share_forward = True

    def chi2_from_vis(self, vis: Complex[Array, "*points"]) -> Scalar:
        """The wrapped term's χ² from visibilities at its (padded) points (an
        objective's shared transform hands them over), each device's rows on that
        device: inside `shard_map`, so that a term's own gathers (a `GainCorrected`
        term's gain lookups) index local rows, which JAX refuses to resolve on
        split arrays of an Explicit mesh."""
        return compiled(_chi2_of_vis, self, vis)

    def residuals_from_vis(self, vis: Complex[Array, "*points"]) -> Float[Array, " m"]:
        return compiled(_residuals_of_vis, self, vis)

    def _rows_of_vis(self, fn, vis, out_spec):
        split = P(self.axis_name)
        if has_explicit_axes(self.mesh):
            # On Explicit axes `shard_map` takes only inputs already split as its
            # `in_specs` say; a shared transform's visibilities may be replicated.
            vis = jax.sharding.reshard(vis, NamedSharding(self.mesh, split))
        return jax.shard_map(
            fn,
            mesh=self.mesh,
            in_specs=(_row_specs(self.term, self.axis_name), split),
            out_specs=out_spec,
            check_vma=False,
        )(self.term, vis)

    def _sharded(self, fn, image, out_spec):
        axis = self.axis_name
        fwd = self.term.forward
        if is_geometric(image):
            # A geometric model (the same at every frequency) goes to the devices
            # as itself, replicated, so that each device's rows get its analytic
            # visibilities, as the unsharded term's do (not its render's).
            leaves, static = eqx.partition(image, eqx.is_array)
            body = lambda t, x: fn(t, eqx.combine(x, static))  # noqa: E731
            given = leaves
        else:
            body = fn
            given = planes_at(
                image, None if fwd is None else fwd.grid, self.band_frequency
            )
        # Without replication tracking (`check_vma=False`) shard_map's transpose
        # sums the replicated image's cotangent over the devices itself: right for
        # every forward model and backend (with tracking, the NUFFT's transforms
        # need the image marked device-varying first).
        return jax.shard_map(
            body,
            mesh=self.mesh,
            in_specs=(_row_specs(self.term, axis), P()),
            out_specs=out_spec,
            check_vma=False,
        )(self.term, given)

    def __call__(self, image: ImageLike) -> Scalar:
        """**Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** the χ², each device's rows evaluated on that device.
        """
        return compiled(_sharded_value, self, image)

    def log_likelihood(self, image: ImageLike) -> Scalar:
        """The wrapped term's normalised Gaussian log-likelihood (see
        [`eqmodels.AbstractDataTerm.log_likelihood_from_vis`][]), from the χ²
        evaluated where the rows live (padding rows, of weight 0, contribute
        nothing).

        **Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** `ln L`, a scalar.
        """
        return self._log_likelihood_from_chi2(self(image))

    def residuals(self, image: ImageLike) -> Float[Array, " m"]:
        """The residuals of every (padded) row, computed where the rows live and
        concatenated device by device (padding rows give exact zeros); `Σ r²` is the
        χ².

        **Arguments:** `image`, an `(ny, nx)` array or an image model.
        """
        return compiled(_sharded_residuals, self, image)

    def take_rows(self, index, *, n_rows=None):
        raise NotImplementedError(
            "take rows of the wrapped term (`sharded.term`) and wrap the result again."
        )

    def pad_rows(self, length: int) -> "ShardedChi2":
        """The same term with `length` rows, split over the same mesh: the wrapped
        term (already padded to a multiple of the axis size) padded further with
        rows of weight exactly 0 and placed again. What
        [`eqmodels.pad_to_match`][] calls to bring data sets of different lengths
        to one shape (a `survey` over data sets).

        **Arguments:** `length`, a multiple of the mesh axis's size, at least
        `self.rows`.
        """
        if length == self.rows:  # already that long: nothing to pad
            return self
        size = self.mesh.shape[self.axis_name]
        if length % size:
            raise ValueError(
                f"`length` ({length}) is not a multiple of the mesh axis "
                f"{self.axis_name!r}'s {size} devices, so the rows could not be split "
                f"evenly: pad to {padded_length(length, size)} (data sets sharded on "
                "one mesh, padded with `em.pad_to_match`, always are)."
            )
        # Not through the constructor: a member of a sharing objective holds no
        # forward model of its own.
        padded = self.term.pad_rows(length)
        padded = place(padded, _row_specs(padded, self.axis_name), self.mesh)
        return eqx.tree_at(lambda s: s.term, self, padded)

    def sharing(self):
        """The wrapped term's forward model, to be shared split over this mesh
        (`(forward, (mesh, axis_name))`); `(None, None)` when the wrapped term
        shares nothing (it is then evaluated through this wrapper's own
        `__call__`, per device)."""
        forward, _ = super().sharing()
        if forward is None:
            return None, None
        return forward, (self.mesh, self.axis_name)


# The bodies of the public methods, module-level functions so that `compiled`
# caches one program per structure of term (see `compiled`).
def _sharded_value(term: ShardedChi2, image):
    axis = term.axis_name
    return term._sharded(lambda t, x: jax.lax.psum(t(x), axis), image, P())


def _sharded_residuals(term: ShardedChi2, image):
    return term._sharded(lambda t, x: t.residuals(x), image, P(term.axis_name))


def _chi2_of_vis(term: ShardedChi2, vis):
    axis = term.axis_name
    return term._rows_of_vis(
        lambda t, v: jax.lax.psum(from_shared_vis(t, "chi2_from_vis", v), axis),
        vis,
        P(),
    )


def _residuals_of_vis(term: ShardedChi2, vis):
    return term._rows_of_vis(
        lambda t, v: from_shared_vis(t, "residuals_from_vis", v),
        vis,
        P(term.axis_name),
    )


def _take_data_rows(data, rows: np.ndarray, n: int):
    """The rows `rows` of a data set or product (a `VisData` via its `take`; a
    product by slicing every array leaf with `n` rows)."""
    take = getattr(data, "take", None)
    if callable(take):
        return take(rows)
    taken = jax.tree_util.tree_map(
        lambda x: x[rows] if eqx.is_array(x) and x.ndim and x.shape[0] == n else x,
        data,
    )
    if np.shape(taken.u)[:1] != (len(rows),):
        raise TypeError(
            f"`data` ({type(data).__name__}) has no `take` and is not a pytree of "
            "arrays, so ShardedChi2.from_data cannot take each device's rows: pass "
            "a VisData, a product (`em.amplitudes(d)`, ...) or a NamedTuple of "
            "arrays, or build the term and wrap it (`ShardedChi2(term, mesh)`)."
        )
    return taken


def _as_piece(term, rows, live, n, slots, table):
    """A device's share: weight 0 on its padding rows (`~live`), the whole data
    set's `n_rows` and time slots (and their table's fingerprint). A term's N
    counts its values, `n_rows / rows` per row (a `VisChi2` on `(n, k)` points
    counts `k`)."""
    if term.rows != len(rows):
        raise ValueError(
            f"{type(term).__name__}.from_data gave {term.rows} rows for "
            f"{len(rows)} rows of data (it adds or drops rows: conjugate baselines, "
            "flagged rows), so ShardedChi2.from_data cannot split it by data rows; "
            "build the term and wrap it (`ShardedChi2(term, mesh)`)."
        )
    per_row, rest = divmod(int(term.n_rows), term.rows)
    if rest:
        raise ValueError(
            f"{type(term).__name__}.from_data gave n_rows={int(term.n_rows)} for "
            f"{term.rows} rows, not a whole number per row: ShardedChi2.from_data "
            "cannot count the whole data set's N; build the term and wrap it "
            "(`ShardedChi2(term, mesh)`)."
        )
    live = np.reshape(live, live.shape + (1,) * (np.ndim(term.weight) - 1))
    weight = term.weight * asarray(live, term.weight.dtype)
    term = eqx.tree_at(
        lambda t: (t.weight, t.n_rows), term, (weight, n_rows_leaf(n * per_row))
    )
    if slots is not None and "time_index" in term.row_fields:
        term = eqx.tree_at(
            lambda t: t.time_index, term, asarray(slots[rows], jnp.int32)
        )
    if table is not None and hasattr(term, "index_key"):
        term = eqx.tree_at(lambda t: t.index_key, term, index_key_leaf(table))
    return term


def _row_specs(term: AbstractDataTerm, axis_name: str):
    prefixes = set(term.row_paths())
    if term.forward is not None:
        prefixes |= forward_prefixes(term.forward, *term.forward_path())
    return split_specs(term, prefixes, axis_name)
