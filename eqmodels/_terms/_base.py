"""`AbstractDataTerm`, the base of data terms (χ² of a data product, arithmetic on
model visibilities), and the row helpers every data term uses.

A data term is **arithmetic on model visibilities**: `chi2_from_vis(vis)` and
`residuals_from_vis(vis)`. Who evaluates the forward model is not its business: the
term alone (`term(image)` evaluates its own model once and hands over), or an
objective that evaluates one shared model for many terms and gathers each term's
visibilities.

The names of `_inputs` and `_objective` that other modules import from here are
re-exported.
"""

import abc
from collections.abc import Sequence
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int, Scalar

from .._forward._base import (
    AbstractForwardModel,
    gather_index,
    stokes_vis,
    take_rows,
)
from .._numerics import asarray
from .._validation import is_concrete
from ._inputs import (
    as_image as as_image,
    as_planes as as_planes,
    as_stokes as as_stokes,
    check_real_residuals as check_real_residuals,
    check_real_scalar as check_real_scalar,
    default_name as default_name,
    from_shared_vis as from_shared_vis,
    geometric_stokes_vis as geometric_stokes_vis,
    geometric_vis as geometric_vis,
    ImageLike as ImageLike,
    is_geometric as is_geometric,
    is_pol_geometric as is_pol_geometric,
    term_grid as term_grid,
)
from ._objective import (
    AbstractTerm as AbstractTerm,
    as_objective as as_objective,
    check_weights as check_weights,
    Objective as Objective,
    objective_grid as objective_grid,
    provides_residuals as provides_residuals,
)


class AbstractDataTerm(AbstractTerm):
    """Base class of data terms (χ² of some data product).

    A data term is arithmetic on model visibilities. Subclasses implement

    - `chi2_from_vis(vis)`: the χ² from the model visibilities at the term's points
      (`vis` shaped like `forward.u`: `(n,)`, `(n, 3)`, `(n, 4)`, ...);
    - `residuals_from_vis(vis)`: a real vector `r` with `χ² = Σ r²` (what
      Gauss-Newton and Jacobian work need);

    and hold these fields:

    - `forward`: the forward model at the term's points (`None` inside an
      [`eqmodels.Objective`][] that serves the term from a shared transform);
    - `weight`: `1/σ²` per row; a row of weight exactly 0 contributes exactly 0 to
      the value and every gradient (that is how rows are padded);
    - `n_rows`: the number of real rows `N` the χ² is normalised by, a 0-d integer
      array leaf (padding does not change it, and data sets padded to one length
      share one tree structure and one compiled program).

    **Likelihood.** The class attribute `reals_per_row` (default `None`) declares
    that the χ² is the mean of `(r/σ)²` over `reals_per_row · N` real data values
    (2 for complex data, σ per real and imaginary part; 1 for real data) with one
    weight `1/σ²` per row, shared by its real values: that is all
    [`eqmodels.AbstractDataTerm.log_likelihood_from_vis`][] needs. Every built-in
    term declares it.

    **Rows.** A term is row-independent: every row carries its own points, observed
    values, weight and (for the built-in terms) its legs' station pairs `stations`
    (`(*points, 2)` indices into the data set's station table, `-1` when unknown)
    and its time slot `time_index` (`(n,)`, `-1` when unknown). The class attribute
    `row_fields` names the per-row leaves (leading axis = rows); together with the
    forward model's point gather that is all [`eqmodels.AbstractDataTerm.take_rows`][]
    and [`eqmodels.AbstractDataTerm.pad_rows`][] need, for any term, a user's too.

    `term(image)` and `term.residuals(image)` evaluate the forward model once and
    hand over. An objective calls `chi2_from_vis` / `residuals_from_vis` directly:
    override those, not `__call__`. **Sharing is declared** by the class attribute
    `share_forward` (default `True`): whether an objective may hand
    `chi2_from_vis` / `residuals_from_vis` the visibilities of a shared transform.
    A class that overrides `__call__`, `model_vis` or `residuals` in its own body
    and does not set `share_forward` itself gets `False` (it is then evaluated
    through those overrides and its own forward model, correctly, unshared); set
    `share_forward = True` on it to share anyway (an override that only logs, say).
    Read nothing from `self.forward` in `chi2_from_vis` /
    `residuals_from_vis`: a member of a sharing objective holds `forward=None`;
    keep per-row quantities derived from the points in `row_fields` leaves.
    """

    forward: eqx.AbstractVar[AbstractForwardModel | None]
    weight: eqx.AbstractVar[Float[Array, " n"]]
    n_rows: eqx.AbstractVar[Int[Array, ""]]

    row_fields: ClassVar[tuple[str, ...]] = ("weight",)
    share_forward: ClassVar[bool] = True
    reals_per_row: ClassVar[int | None] = None
    is_data = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # The safe default of the declaration for a class that evaluates its own
        # model and says nothing: not served from a shared transform.
        if "share_forward" not in cls.__dict__ and any(
            name in cls.__dict__ for name in ("__call__", "model_vis", "residuals")
        ):
            cls.share_forward = False

    @abc.abstractmethod
    def chi2_from_vis(self, vis: Complex[Array, "*points"]) -> Scalar:
        """**Arguments:** `vis`, the model visibilities at the term's points.

        **Returns:** the χ² (a scalar).
        """

    @abc.abstractmethod
    def residuals_from_vis(self, vis: Complex[Array, "*points"]) -> Float[Array, " m"]:
        """**Arguments:** `vis`, the model visibilities at the term's points.

        **Returns:** the real residual vector `r`, with `χ² = Σ r²`.
        """

    def model_vis(self, image: ImageLike) -> Complex[Array, "*points"]:
        """The model visibilities at the term's points (one forward evaluation):
        shaped like the points, or `(*points, 4)` (Stokes I, Q, U, V last) for a
        term that declares `polarimetric`. A geometric model
        ([`eqmodels.AbstractGeometricModel`][]) gives its analytic visibilities at
        the points (no pixel transform; a pixel part of a hybrid
        [`eqmodels.Sum`][] goes through the term's forward model); a polarimetric
        one ([`eqmodels.AbstractPolGeometricModel`][]) its Stokes visibilities
        for a polarimetric term.

        **Arguments:** `image`, an `(ny, nx)` array or an image model (a
        polarimetric one, or a `(4, ny, nx)` array, for a polarimetric term).
        """
        if self.forward is None:
            raise ValueError(
                f"this {type(self).__name__} belongs to an `Objective` that evaluates "
                "its visibilities with a shared transform (`objective.shared`), so it "
                "holds no forward model of its own: evaluate it through the objective "
                "(`objective.report(image)`), or use the term you built the objective "
                "from."
            )
        if self.polarimetric:
            if is_pol_geometric(image):
                return geometric_stokes_vis(image, self.forward)
            stokes = as_stokes(image, self.forward.grid, type(self).__name__)
            return stokes_vis(self.forward, stokes)
        if is_geometric(image):
            return geometric_vis(image, self.forward)
        return self.forward(as_image(image, self.forward.grid))

    def __call__(self, image: ImageLike) -> Scalar:
        """**Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** the χ² (a scalar).
        """
        return check_real_scalar(
            self.chi2_from_vis(self.model_vis(image)), default_name(self), self
        )

    def residuals(self, image: ImageLike) -> Float[Array, " m"]:
        """**Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** the real residual vector `r`, with `χ² = Σ r²`.
        """
        return self.residuals_from_vis(self.model_vis(image))

    def log_likelihood_from_vis(self, vis: Complex[Array, "*points"]) -> Scalar:
        r"""The Gaussian log-likelihood of the data given the model visibilities at
        the term's points, with its normalisation:

        `ln L = −½ Σ_j (r_j/σ_j)² − Σ_j ln σ_j − (n/2) ln 2π`

        over the term's `n = reals_per_row · N` real data values (a complex value
        counts as two, each with its σ), computed as
        `−½ n χ² + (reals_per_row/2) Σ_k ln w_k − (n/2) ln 2π` from the χ² (which
        is the mean of `(r/σ)²`) and the live rows' weights `w_k = 1/σ_k²`
        (padding rows, of weight 0, contribute nothing). Closure quantities are
        treated as **independent** (as eht-imaging and Comrade do by default):
        their covariance through shared baselines is ignored
        ([`eqmodels.ClosurePhaseChi2`][] and [`eqmodels.LogClosureAmpChi2`][]
        offer it with `covariance="full"`). A closure phase
        contributes `−(1 − cos Δ)/σ² − ln σ − ½ ln 2π`, the Gaussian in the
        chord `2 sin(Δ/2)` (Δ wrapped, in radians: Comrade's choice for closure
        phases too), which is the Gaussian `−Δ²/(2σ²)` for small `Δ`.

        **Arguments:** `vis`, the model visibilities at the term's points.

        **Returns:** `ln L`, a scalar.
        """
        return self._log_likelihood_from_chi2(self.chi2_from_vis(vis))

    def _log_likelihood_from_chi2(self, chi2: Scalar) -> Scalar:
        """`ln L` from the term's χ² and its live rows' weights (see
        `log_likelihood_from_vis`)."""
        k = self.reals_per_row
        if k is None:
            raise NotImplementedError(
                f"{type(self).__name__} does not declare `reals_per_row` (how many "
                "real data values each row's weight covers), so its χ² cannot be "
                "turned into a normalised log-likelihood: set the class attribute "
                "(2 for complex data, 1 for real data) if its χ² is the mean of "
                "(r/σ)² over those values (see `AbstractDataTerm`)."
            )
        w = self.weight
        live = w > 0
        log_w = jnp.sum(jnp.where(live, jnp.log(jnp.where(live, w, 1.0)), 0.0))
        n = (k * self.n_rows).astype(chi2.dtype)
        return -0.5 * n * chi2 + 0.5 * k * log_w - 0.5 * n * np.log(2 * np.pi)

    def log_likelihood(self, image: ImageLike) -> Scalar:
        """The Gaussian log-likelihood of the data given `image` (see
        [`eqmodels.AbstractDataTerm.log_likelihood_from_vis`][]).

        **Arguments:** `image`, an `(ny, nx)` array or an image model (a geometric
        model is evaluated through its analytic visibilities).

        **Returns:** `ln L`, a scalar.
        """
        return check_real_scalar(
            self.log_likelihood_from_vis(self.model_vis(image)),
            default_name(self),
            self,
        )

    @property
    def rows(self) -> int:
        """Number of rows held (real and padding)."""
        return int(self.weight.shape[0])

    def take_rows(
        self, index: ArrayLike | Sequence[int], *, n_rows: int | None = None
    ) -> "AbstractDataTerm":
        """The term restricted to (or rearranged as) the rows `index`: every
        per-row leaf and the forward model's points gathered (nothing is
        recomputed; `index` may be traced).

        **Arguments:**

        - `index`: integer row indices (repeats allowed).
        - `n_rows`: the χ² normalisation of the result. Default: unchanged, so the
          pieces of a split term sum to the whole term's χ²; for a standalone
          subset pass its count as the term counts `N` (`len(index)`; times `k`
          for a `VisChi2` on points shaped `(n, k)`, whose `N` counts
          visibilities).

        **Returns:** a term of the same class.
        """
        idx = gather_index(index, self.rows, "index")
        names = tuple(self.row_fields)
        if "weight" not in names:  # pragma: no cover - a class declaration error
            raise TypeError(f"{type(self).__name__}.row_fields must list 'weight'.")
        check_rows_declared(self)
        new = [take_rows(getattr(self, name), idx) for name in names]
        where = lambda t: tuple(getattr(t, n) for n in names)  # noqa: E731
        out = eqx.tree_at(where, self, tuple(new))
        if self.forward is not None:
            out = eqx.tree_at(lambda t: t.forward, out, self.forward.take(idx))
        if n_rows is not None:
            out = eqx.tree_at(lambda t: t.n_rows, out, n_rows_leaf(n_rows))
        return out

    def pad_rows(self, length: int) -> "AbstractDataTerm":
        """The term with padding rows appended up to `length` rows: copies of row 0
        (finite points and values) with weight exactly 0, so the value and every
        gradient are unchanged; `n_rows` keeps the true count. This is the way to
        pad (never σ = 0, which the constructors refuse).

        **Arguments:** `length`, the total number of rows (≥ the current count).
        """
        n = self.rows
        if isinstance(length, bool) or not isinstance(length, int | np.integer):
            raise TypeError(f"`length` must be an integer, got {length!r}.")
        if length < n:
            raise ValueError(
                f"`length`={length} is below the term's {n} rows: padding only adds "
                "rows (use `take_rows` to drop some)."
            )
        if length == n:
            return self
        index = np.concatenate([np.arange(n), np.zeros(length - n, np.int64)])
        out = self.take_rows(index)
        # Rows are the leading axis (a weight may have more: a VisChi2 on points
        # shaped `(n, k)`).
        live = (np.arange(length) < n).reshape((length,) + (1,) * (out.weight.ndim - 1))
        weight = out.weight * asarray(live, out.weight.dtype)
        return eqx.tree_at(lambda t: t.weight, out, weight)

    def row_paths(self) -> set[tuple[str, ...]]:
        """Attribute paths of the per-row leaves (leading axis = rows): the
        `row_fields` themselves. A wrapper whose rows live in an inner term
        ([`eqmodels.AbstractTermWrapper`][]) returns that term's paths under its own
        attribute. What device sharding splits."""
        return {(f,) for f in self.row_fields}

    def forward_path(self) -> tuple[str, ...]:
        """The attribute path of the forward model in the term's tree: `("forward",)`
        (a wrapper whose inner term holds it: `("term", "forward")`). What device
        sharding splits the points of."""
        return ("forward",)

    def sharing(self) -> tuple[AbstractForwardModel | None, object]:
        """What an [`eqmodels.Objective`][] may share for this term: `(forward,
        wrapping)`, the forward model (`None`: nothing, the term is evaluated
        through its own `__call__` / `residuals`) and how the shared model is to be
        wrapped (`None`: plainly; `(mesh, axis_name)`: split over a device mesh, as
        [`eqmodels.ShardedChi2`][] asks). `(self.forward, None)` when the class
        declares `share_forward`, else `(None, None)`."""
        if not type(self).share_forward:
            return None, None
        return self.forward, None

    def without_forward(self) -> "AbstractDataTerm":
        """The term without its own forward model (a member of a sharing
        objective, served from `objective.shared`)."""
        return eqx.tree_at(lambda t: t.forward, self, None, is_leaf=lambda x: x is None)


def check_rows_declared(term: AbstractDataTerm) -> None:
    """Every array field whose leading axis has the row count must be declared in
    `row_fields` (or be the forward model / `n_rows`): an undeclared one would keep
    its rows while the others are gathered, padded or split."""
    n = term.rows
    declared = set(term.row_fields) | {"forward", "n_rows"}
    for name in getattr(type(term), "__dataclass_fields__", {}):
        if name in declared:
            continue
        x = getattr(term, name, None)
        if eqx.is_array(x) and x.ndim >= 1 and x.shape[0] == n:
            raise TypeError(
                f"{type(term).__name__}.{name} has one entry per row but is not listed "
                f"in `{type(term).__name__}.row_fields` {tuple(term.row_fields)}: "
                "declare every per-row leaf there so its rows can be gathered, padded "
                "and split."
            )


def n_rows_leaf(n: int | np.integer | Int[Array, ""]) -> Int[Array, ""]:
    """`n` (a positive integer: the number of real rows a data term's χ² is
    normalised by) as the 0-d int32 leaf data terms hold; a traced `n` passes
    through unchecked."""
    if not is_concrete(n):
        return asarray(n, jnp.int32)
    if isinstance(n, bool) or int(n) != n or int(n) < 1:
        raise ValueError(f"`n_rows` must be a positive integer, got {n!r}.")
    return asarray(int(n), jnp.int32)
