"""The term interfaces and their composite: `AbstractTerm`, `AbstractDataTerm` and
`Objective`.

`AbstractTerm` is the common base of data terms and regularizers. Its arithmetic
(`w * term`, `term + term`) builds an [`eqmodels.Objective`][], which lives here,
beside the base whose operators return it (as lineax keeps its composite operators
beside `AbstractLinearOperator`): no import cycle, no imports inside functions.

A data term is **arithmetic on model visibilities**: `chi2_from_vis(vis)` and
`residuals_from_vis(vis)`. Who evaluates the forward model is not its business: the
term alone (`term(image)` evaluates its own model once and hands over), or an
objective that evaluates one shared model for many terms and gathers each term's
visibilities.
"""

import abc
import numbers
from collections.abc import Sequence
from typing import ClassVar, TypeAlias

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int, Scalar

from .._custom_types import RealLike
from .._forward._base import AbstractForwardModel, gather_index, take_rows
from .._grid import ImageGrid, same_grid
from .._image._base import AbstractImageModel, evaluated_on
from .._numerics import asarray
from .._sharding._mesh import sharded_parts, unsplit
from .._validation import is_concrete
from ._shared import merge, raw_source, share_key, SharedForward, unwrap


ImageLike: TypeAlias = Float[ArrayLike, "ny nx"] | AbstractImageModel


def as_image(
    image: Float[ArrayLike, "ny nx"] | AbstractImageModel,
    grid: ImageGrid | None = None,
) -> Float[Array, "ny nx"]:
    """An image array from an image array or an image model; an image model must be
    on `grid` (when given; grids are static, so this is checked at trace time)."""
    if isinstance(image, AbstractImageModel):
        arr = asarray(
            evaluated_on(
                image,
                grid,
                "image",
                f"the term is built on {grid!r}: build the image model on the "
                "term's grid (same shape and pixel size), or the term on the "
                "model's.",
            )
        )
        # A model returning integers slipped past the array checks below.
        who = f"`image` ({type(image).__name__}() returned {arr.dtype})"
    elif isinstance(image, eqx.Module) or callable(image):
        raise TypeError(
            f"`image` is a {type(image).__name__}, neither an image array nor an "
            "image model: a model of your own must subclass "
            "`eqmodels.AbstractImageModel` (its `__call__` returns the image; see "
            "docs/extending.md), or pass `model()`, the image array."
        )
    elif hasattr(image, "imvec") and hasattr(image, "xdim"):
        # From a user walkthrough: JAX's own message named an object dtype.
        raise TypeError(
            "`image` is an eht-imaging Image: pass its pixels, "
            "`image.imvec.reshape(image.ydim, image.xdim)` (Jy/pixel; row 0 north, "
            "column 0 east, as eqmodels' images), with a grid of its pixel size, "
            "`em.ImageGrid(image.ydim, image.xdim, image.psize)`."
        )
    else:
        try:
            arr = asarray(image)
        except TypeError:
            raise TypeError(
                f"`image` must be an image array (ny, nx) in Jy/pixel or an "
                f"eqmodels image model, got {type(image).__name__}."
            ) from None
        who = "`image`"
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        raise TypeError(
            f"{who} must be a real floating-point array (Jy/pixel), got "
            f"{arr.dtype}: cast it first (`image.astype(float)`); an integer image "
            "would turn the terms' constants into integers."
        )
    if arr.dtype not in (jnp.float32, jnp.float64):
        raise TypeError(
            f"{who} must be float32 or float64, got {arr.dtype}: the pixel size "
            "(~1e-11 rad) and the terms' constants underflow in half precision. "
            "Cast it first (`image.astype(jnp.float32)`)."
        )
    return arr


def term_grid(term: "AbstractTerm") -> ImageGrid | None:
    """The grid a term is built on: its forward model's (a data term; `None` when it
    is served by an objective's shared transform), or a regularizer's `grid` field
    (`None` for one that holds none)."""
    fwd = getattr(term, "forward", None)
    if isinstance(fwd, AbstractForwardModel):
        return fwd.grid
    grid = getattr(term, "grid", None)
    return grid if isinstance(grid, ImageGrid) else None


class AbstractTerm(eqx.Module):
    """Base class of everything an [`eqmodels.Objective`][] sums: a module mapping an
    image (an `(ny, nx)` array or an [`eqmodels.AbstractImageModel`][]) to a scalar.

    Terms compose with arithmetic: `w * term` is an `Objective` with one weighted
    term, `a + b` an `Objective` holding both (nested sums are flattened), and
    `sum([...])` works too. Subclass [`eqmodels.AbstractDataTerm`][] or
    [`eqmodels.AbstractRegularizer`][] rather than this class directly: the
    `Objective` treats the two families differently (e.g. `chi2_offset`).

    **Sums of squares.** The class attribute `has_residuals` declares that the term
    is a sum of squares with a `residuals(image)` method (a real vector `r`,
    value `Σ r²`), what Gauss-Newton and Levenberg-Marquardt need. Data terms
    declare it; a regularizer does when it defines `residuals` (defining it sets
    the flag, unless the class sets `has_residuals` itself).

    **Report names.** The class attribute `report_name` is the key under which an
    objective reports the term (`"amp"`, `"cphase"`, `"tv"`, ... for the built-in
    terms, eht-imaging's short names). A subclass inherits its parent's unless it
    sets its own; a class that sets none is reported under its class name.
    """

    report_name: ClassVar[str | None] = None
    has_residuals: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # A class that defines `residuals` declares a sum of squares unless it says
        # otherwise (`has_residuals = False`).
        if "has_residuals" not in cls.__dict__ and "residuals" in cls.__dict__:
            cls.has_residuals = True

    # numpy must defer `array * term` to `__rmul__` (which rejects non-scalars)
    # rather than broadcasting the term into an object array.
    __array_ufunc__ = None

    @abc.abstractmethod
    def __call__(self, image: ImageLike) -> Scalar:
        """**Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** the scalar value of the term.
        """

    def __mul__(self, weight) -> "Objective":
        obj = as_objective(self)
        w = _scalar_weight(weight)
        dtype = obj.weights.dtype
        if is_concrete(w) and is_concrete(obj.weights):
            # On the host: eager arithmetic on the weights would compile.
            weights = np.asarray(obj.weights) * np.asarray(w).astype(dtype)
            return obj.with_weights(asarray(weights, dtype))
        return obj.with_weights(obj.weights * w.astype(dtype))

    def __rmul__(self, weight) -> "Objective":
        return self.__mul__(weight)

    def __truediv__(self, weight) -> "Objective":
        w = _scalar_weight(weight)
        if is_concrete(w) and float(w) == 0:
            raise ZeroDivisionError(
                "a term divided by a `weight` of 0: the weight would be infinite; "
                "to switch a term off multiply it by 0 (`0 * term`)."
            )
        return self.__mul__(1.0 / w)

    def __add__(self, other) -> "Objective":
        if not isinstance(other, AbstractTerm):
            _refuse_number(other, "+")
            return NotImplemented
        return _concatenate(self, other)

    def __radd__(self, other) -> "Objective":
        # `sum(terms)` starts from the integer 0.
        if isinstance(other, int | float) and other == 0:
            return as_objective(self)
        _refuse_number(other, "+")
        return NotImplemented

    def __sub__(self, other) -> "Objective":
        if isinstance(other, AbstractTerm):
            raise TypeError(
                "terms cannot be subtracted (`a - b`): a negative weight turns a "
                "term's penalty into a reward, which the optimiser drives up without "
                "bound. Add terms with weights >= 0 (`a + 0.1 * b`); to reward a "
                "quantity, write a term whose penalty is its negative."
            )
        _refuse_number(other, "-")
        return NotImplemented

    def __rsub__(self, other) -> "Objective":
        _refuse_number(other, "-")
        return NotImplemented


def provides_residuals(x) -> bool:
    """Whether `x` is a sum of squares with `residuals(image)`: a term's declared
    `has_residuals`; for an object that is not a term (a user's module handed to
    a solver or a check), whether it has a callable `residuals`."""
    if isinstance(x, AbstractTerm):
        return bool(type(x).has_residuals)
    return callable(getattr(x, "residuals", None))


def check_real_scalar(value, name: str, term: "AbstractTerm"):
    """`value`, checked to be a real scalar: a term's value (χ² or penalty) is one
    real number; a vector would be summed, broadcast against weights or stacked
    without a word. Shapes and dtypes are static: checked at trace time."""
    if jnp.shape(value) != () or not jnp.issubdtype(
        jnp.result_type(value), jnp.floating
    ):
        raise TypeError(
            f"term {name!r} ({type(term).__name__}) returned "
            f"{jnp.result_type(value)}{list(jnp.shape(value))}, not a real scalar: "
            "a term's value (χ² or penalty) must be one real number (sum it)."
        )
    return value


def from_shared_vis(term: "AbstractDataTerm", method: str, vis):
    """`term.chi2_from_vis(vis)` (or `residuals_from_vis`) for a member of a sharing
    objective, which holds `forward=None`: a method that reads `self.forward` gets
    an error naming the class and the fix instead of a bare `'NoneType' object has
    no attribute ...` from inside the user's code (from a review)."""
    try:
        return getattr(term, method)(vis)
    except AttributeError as e:
        if term.forward is not None or "'NoneType'" not in str(e):
            raise
        raise AttributeError(
            f"{type(term).__name__}.{method} failed with {e!r} inside an "
            "`Objective` that shares a transform, whose terms hold `forward=None`. "
            "If it reads `self.forward`: compute what you need from the points in "
            "`__init__` and keep it in a `row_fields` leaf (see "
            "docs/extending.md), or override `model_vis` to opt out of sharing."
        ) from e


def default_name(term: AbstractTerm) -> str:
    """The report key of a term: its `report_name` (a class attribute, or a
    property of a wrapper that reports its inner term's), else its class name."""
    return term.report_name or type(term).__name__


def _refuse_number(other, op: str) -> None:
    """`term + 3`, `term - 1`: a `TypeError` saying what an objective is, instead
    of Python's "unsupported operand type(s)"."""
    if isinstance(other, numbers.Number) or (
        isinstance(other, np.ndarray | jax.Array) and other.ndim == 0
    ):
        raise TypeError(
            f"a number cannot be added to or subtracted from a term (`term {op} "
            f"{other}`): an objective is a weighted sum of terms, `w * term`, and a "
            "constant moves neither its minimiser nor its gradient. For "
            "eht-imaging's `χ² − 1`, build `Objective(terms, weights, "
            "chi2_offset=True)`."
        )


def _scalar_weight(weight):
    if isinstance(weight, AbstractTerm):
        raise TypeError(
            "a term can only be multiplied by a scalar weight, not by another term."
        )
    # A number stays on the host (`jnp.asarray` of a Python scalar compiles).
    w = weight if isinstance(weight, jax.Array) else np.asarray(weight)
    if w.ndim != 0:
        raise TypeError(
            f"a term's weight must be a scalar, got shape {w.shape}; for a survey over "
            "weights, `jax.vmap` over `Objective.with_weights`."
        )
    if jnp.iscomplexobj(w):
        raise TypeError("a term's weight must be real, got a complex number.")
    if not (jnp.issubdtype(w.dtype, jnp.number) or w.dtype == jnp.bool_):
        raise TypeError(f"a term's weight must be a real number, got {weight!r}.")
    if w.dtype == jnp.bool_:
        raise TypeError("a term's weight must be a real number, got a boolean.")
    check_weights("weight", w)
    return w


def _all_concrete(tree) -> bool:
    """No tracer among the leaves of `tree` (an array, or a sequence of numbers)."""
    return all(is_concrete(leaf) for leaf in jax.tree.leaves(tree))


def _real_weights(weights):
    """`weights` (an array, or a sequence as a numpy array), refused unless its
    dtype is an integer or floating one (booleans, complex numbers and strings
    are not weights)."""
    if not isinstance(weights, jax.Array):
        # A sequence may hold traced numbers (`with_weights([w, 1.0])` under vmap).
        weights = (np if _all_concrete(weights) else jnp).asarray(weights)
    if not (
        jnp.issubdtype(weights.dtype, jnp.integer)
        or jnp.issubdtype(weights.dtype, jnp.floating)
    ):
        raise TypeError(f"`weights` must be real numbers, got dtype {weights.dtype}.")
    return weights


def check_weights(name: str, weights) -> None:
    """Concrete weights are finite and `>= 0`: a NaN or inf weight makes the
    objective NaN or inf, and a negative one turns a penalty into a reward (the
    optimiser would drive that term up). 0 switches a term off."""
    if not is_concrete(weights):
        return
    w = np.asarray(weights)
    if not np.isfinite(w).all():
        raise ValueError(
            f"`{name}` must be finite, got {w.tolist()}: a NaN or inf weight makes "
            "the objective NaN or inf."
        )
    if (w < 0).any():
        raise ValueError(
            f"`{name}` must be >= 0, got {w.tolist()}: a negative weight turns the "
            "term's penalty into a reward, which the optimiser drives up without "
            "bound. Use 0 to switch a term off; to reward a quantity, write a term "
            "whose penalty is its negative."
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
        """The model visibilities at the term's points (one forward evaluation).

        **Arguments:** `image`, an `(ny, nx)` array or an image model.
        """
        if self.forward is None:
            raise ValueError(
                f"this {type(self).__name__} belongs to an `Objective` that evaluates "
                "its visibilities with a shared transform (`objective.shared`), so it "
                "holds no forward model of its own: evaluate it through the objective "
                "(`objective.report(image)`), or use the term you built the objective "
                "from."
            )
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


def check_real_residuals(r, name: str | None, term) -> None:
    """Residuals are real floats (a least-squares solver squares them): a complex
    vector (e.g. `V − V̂` returned as is) is refused, naming the term."""
    if not jnp.issubdtype(jnp.result_type(r), jnp.floating):
        who = f"term {name!r} ({type(term).__name__})" if name else type(term).__name__
        raise TypeError(
            f"{who} returned residuals of dtype {jnp.result_type(r)}: residuals must "
            "be real (stack the real and imaginary parts of complex ones)."
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


def _unique_names(names: Sequence[str]) -> tuple[str, ...]:
    seen: set[str] = set()
    out = []
    for name in names:
        new, k = name, 2
        while new in seen:
            new, k = f"{name}_{k}", k + 1
        seen.add(new)
        out.append(new)
    return tuple(out)


def _check_one_dtype(names, terms, groups) -> None:
    """Every data term of an objective computes in one precision: an image of
    either dtype would be refused by one of them, each naming the other's."""
    kinds = [(getattr(t.forward, "dtype", None), n) for n, t in zip(names, terms)
             if isinstance(t, AbstractDataTerm) and t.forward is not None]  # fmt: skip
    kinds += [(g.forward.dtype, names[g.members[0]]) for g in groups]
    kinds = [(np.dtype(d), n) for d, n in kinds if d is not None]
    for d, n in kinds[1:]:
        if d != kinds[0][0]:
            raise ValueError(
                f"`terms` compute in different precisions: {kinds[0][1]!r} in "
                f"{kinds[0][0]} but {n!r} in {d}; build every data term with one "
                "dtype (`dtype=` of the constructors, or data of one precision)."
            )


def _mesh_devices(tree) -> list[tuple[int, ...]]:
    """The devices (ids, in the meshes' order) of the sharded modules
    (`sharded_parts`: `ShardedChi2`, `ShardedForward`, ...) in `tree`."""
    return [tuple(d.id for d in x.mesh.devices.flat) for x in sharded_parts(tree)]


def _check_one_device_set(names, terms, groups) -> None:
    """Every sharded member of an objective is split over the same devices in the
    same order: JAX refuses to evaluate terms committed to other devices (or the
    same ones in another order) in one program, with a message naming neither."""
    seen = [(d, n) for n, t in zip(names, terms) for d in _mesh_devices(t)]
    seen += [(d, names[g.members[0]]) for g in groups for d in _mesh_devices(g.forward)]
    for devices, name in seen[1:]:
        first, first_name = seen[0]
        if devices != first:
            raise ValueError(
                f"`terms` are split over different devices: {first_name!r} over "
                f"devices {list(first)} but {name!r} over {list(devices)}; build "
                "every ShardedChi2 of an objective on one mesh (or meshes over the "
                "same devices in the same order)."
            )


def _check_one_grid(names, terms, groups) -> None:
    """Every term of an objective is on one grid: data terms (their own forward
    model, or their shared transform's) and regularizers that hold a grid. Two
    grids of one shape but different pixel sizes would otherwise combine silently."""
    seen: list[tuple[ImageGrid, str]] = []
    grids = [(term_grid(t), n) for n, t in zip(names, terms)]
    grids += [(g.forward.grid, names[g.members[0]]) for g in groups]
    for grid, name in grids:
        if grid is None:
            continue
        for other, other_name in seen:
            if not same_grid(grid, other):
                raise ValueError(
                    f"`terms` are on different image grids: {other_name!r} on "
                    f"{other!r} but {name!r} on {grid!r}; build every data term "
                    "and regularizer on one grid (same shape and pixel size)."
                )
        if not seen:
            seen.append((grid, name))
    # Regularizers that hold a prior image (entropies, weighted L1) but no grid.
    shapes = [(seen[0][0].shape, f"the grid of {seen[0][1]!r}")] if seen else []
    for name, t in zip(names, terms):
        prior = getattr(t, "prior", None)
        if getattr(prior, "ndim", 0) != 2:
            continue
        shape = tuple(prior.shape)
        for other, what in shapes[:1]:
            if shape != other:
                raise ValueError(
                    f"`terms` disagree on the image shape: {what} is {other} (ny, nx) "
                    f"but the prior of {name!r} is {shape}; build every prior on the "
                    "objective's grid."
                )
        shapes.append((shape, f"the prior of {name!r}"))


def objective_grid(objective: "Objective") -> ImageGrid | None:
    """The one grid of an objective's terms (`None` if none holds a grid)."""
    for g in objective.shared:
        return g.forward.grid
    for t in objective.terms:
        grid = term_grid(t)
        if grid is not None:
            return grid
    return None


class Objective(AbstractTerm):
    r"""A weighted sum of data terms and regularizers:

    `J(I) = Σ_i w_i T_i(I)`, or, with `chi2_offset=True`, eht-imaging's
    `J(I) = Σ_d w_d (χ²_d(I) − 1) + Σ_r w_r R_r(I)` (data terms offset by 1).

    Usually built by arithmetic on terms, `0.2 * amp + cphase + 100 * entropy`;
    the weights are one array leaf, so `jax.vmap` over
    [`eqmodels.Objective.with_weights`][] evaluates a whole survey of weightings.
    `objective(image_or_model)` returns the scalar (use it directly under
    `eqx.filter_value_and_grad`); `objective.report(image)` the value of each term.

    **Shared transforms.** With `share=True` (default), data terms whose forward
    models can share (they declare their per-point leaves, as `DirectFT`,
    `SeparableFT` and `NUFFT` do, and agree on class, grid, pulse, options and
    dtype) are served by one model at their distinct points (legs equal up to sign
    are merged): one NUFFT instead of one per term, or a dense matrix with one row
    per distinct baseline instead of one per leg. Each shared model is evaluated
    once per call and every member gets its visibilities by a gather, through
    `chi2_from_vis`; the result is the same to rounding. This holds for the built-in
    terms, their subclasses and users' terms alike.

    Member terms **drop their own forward model** (`term.forward is None` in
    `objective.terms`): the objective holds the shared models (`objective.shared`)
    and the per-row data, nothing else. Evaluate members through the objective
    (`report`, `values`), or keep the terms you built it from.
    """

    terms: tuple[AbstractTerm, ...]
    weights: Float[Array, " n"]
    shared: tuple[SharedForward, ...]
    names: tuple[str, ...] = eqx.field(static=True)
    chi2_offset: bool = eqx.field(static=True)
    share: bool = eqx.field(static=True)

    def __init__(
        self,
        terms: Sequence[AbstractTerm],
        weights: Float[ArrayLike, " n"] | Sequence[int | RealLike] | None = None,
        *,
        names: Sequence[str] | None = None,
        chi2_offset: bool = False,
        share: bool = True,
    ):
        """**Arguments:**

        - `terms`: data terms and regularizers (an `Objective` among them is
          flattened: its terms and shared transforms join, its weights multiplied
          in; the outer `chi2_offset` applies).
        - `weights`: one weight per term (default all 1).
        - `names`: report keys (default: each class's `report_name`, e.g. `amp`,
          `cphase`, `simple`, `tv`, made unique with `_2`, `_3`). A name given to
          a nested objective prefixes its terms' names (`"data.amp"`).
        - `chi2_offset`: subtract 1 from every data term (eht-imaging's
          `α(χ² − 1)`); changes the value, not the gradient.
        - `share`: serve compatible data terms from one transform (see above).
          With `False` no new sharing is set up (groups already built inside a
          nested objective are kept).
        """
        terms = tuple(terms)
        if not terms:
            raise ValueError("`terms` is empty: an objective needs at least one term.")
        for t in terms:
            if not isinstance(t, AbstractTerm):
                raise TypeError(
                    "every term must be a data term or a regularizer (an "
                    f"`AbstractTerm`), got {type(t).__name__}."
                )
        # Concrete weights are combined in numpy (no tiny device kernel compiled
        # per shape while an objective is assembled); traced ones in jnp.
        wdtype = jnp.result_type(float)
        nested = [t.weights for t in terms if isinstance(t, Objective)]
        xp = np if _all_concrete([weights, *nested]) else jnp
        if weights is None:
            weights = xp.ones(len(terms), wdtype)
        weights = xp.asarray(_real_weights(weights))
        weights = weights.astype(wdtype)
        if weights.shape != (len(terms),):
            raise ValueError(
                f"`weights` has shape {weights.shape} but there are {len(terms)} "
                "terms: one weight per term."
            )
        check_weights("weights", weights)
        if names is not None:
            if isinstance(names, str):
                raise TypeError(
                    f"`names` must be a sequence of strings, one per term, got the "
                    f"string {names!r}: write `names=({names!r},)`."
                )
            names = tuple(names)
            if len(names) != len(terms) or not all(isinstance(n, str) for n in names):
                raise ValueError(
                    f"`names` must be {len(terms)} strings, one per term, got {names!r}."
                )
        # Flatten nested objectives (their shared groups join, members shifted).
        flat_terms: list[AbstractTerm] = []
        flat_w, flat_names, groups = [], [], []
        for i, t in enumerate(terms):
            if isinstance(t, Objective):
                groups.extend(g.shifted(len(flat_terms)) for g in t.shared)
                flat_terms.extend(t.terms)
                flat_w.append(weights[i] * xp.asarray(t.weights))
                # A name given to a nested objective prefixes its terms' names.
                prefix = "" if names is None else f"{names[i]}."
                flat_names.extend(prefix + n for n in t.names)
            else:
                flat_terms.append(t)
                flat_w.append(weights[i : i + 1])
                flat_names.append(default_name(t) if names is None else names[i])
        self.share = bool(share)
        _check_one_grid(_unique_names(flat_names), flat_terms, groups)
        _check_one_dtype(_unique_names(flat_names), flat_terms, groups)
        _check_one_device_set(_unique_names(flat_names), flat_terms, groups)
        if self.share:
            flat_terms, groups = _share(flat_terms, groups)
        self.terms = tuple(flat_terms)
        self.shared = tuple(groups)
        self.weights = asarray(xp.concatenate(flat_w))
        self.names = _unique_names(flat_names)
        self.chi2_offset = bool(chi2_offset)

    def with_weights(
        self, weights: Float[ArrayLike, " n"] | Sequence[int | RealLike]
    ) -> "Objective":
        """The same objective with other weights (works with traced weights, e.g.
        inside `jax.vmap` for a survey).

        **Arguments:** `weights`, one per term, in `self.names` order.

        **Returns:** the new `Objective` (terms and shared transforms reused).
        """
        weights = asarray(_real_weights(weights))
        if weights.shape != self.weights.shape:
            raise ValueError(
                f"`weights` has shape {weights.shape}, expected {self.weights.shape} "
                f"(one per term: {self.names})."
            )
        check_weights("weights", weights)
        return eqx.tree_at(
            lambda o: o.weights, self, weights.astype(self.weights.dtype)
        )

    def _served_vis(self, img) -> dict[int, Array]:
        """Each shared member's visibilities, by term position."""
        served = {}
        for group in self.shared:
            served.update(zip(group.members, group(img)))
        return served

    def values(self, image: ImageLike) -> tuple[Scalar, ...]:
        """Each term's own value (χ² or penalty, unweighted), in `self.names` order.

        **Arguments:** `image`, an `(ny, nx)` array or an image model (evaluated
        once; each shared transform too).
        """
        img = as_image(image, objective_grid(self))
        served = self._served_vis(img)
        values = tuple(
            from_shared_vis(t, "chi2_from_vis", served[i]) if i in served else t(img)
            for i, t in enumerate(self.terms)
        )
        for name, t, v in zip(self.names, self.terms, values):
            check_real_scalar(v, name, t)
        return values

    def residuals(self, image: ImageLike) -> Float[Array, " m"]:
        """One real residual vector for the whole objective: the terms' residuals
        scaled by `sqrt(w_i)` and concatenated, so `Σ r² = Σ_i w_i T_i(I)` (without
        the `chi2_offset`, a constant). What Gauss-Newton and Levenberg-Marquardt
        solvers need.

        Every term must provide residuals (declare `has_residuals`): data terms do;
        a regularizer does when it defines `residuals(image)` (a penalty that is a
        sum of squares).

        **Arguments:** `image`, an `(ny, nx)` array or an image model.
        """
        for name, t in zip(self.names, self.terms):
            if not provides_residuals(t):
                raise TypeError(
                    f"term {name!r} ({type(t).__name__}) is not a sum of squares (it "
                    "has no `residuals`): least-squares solvers need every term to "
                    "be one; drop it or minimise the objective instead."
                )
        if is_concrete(self.weights) and np.any(np.asarray(self.weights) < 0):
            raise ValueError(
                "residuals need non-negative weights (they are scaled by sqrt(w)); "
                f"got {np.asarray(self.weights)}."
            )
        img = as_image(image, objective_grid(self))
        served = self._served_vis(img)
        out = []
        for i, t in enumerate(self.terms):
            if i in served:
                r = from_shared_vis(t, "residuals_from_vis", served[i])
            else:
                r = t.residuals(img)
            check_real_residuals(r, self.names[i], t)
            out.append(jnp.sqrt(self.weights[i]).astype(r.dtype) * r.reshape(-1))
        if len(out) == 1:
            return out[0]
        # A `ShardedChi2`'s residuals split over an Explicit mesh axis do not join
        # replicated ones (a regularizer's, an unsharded term's), nor make a length
        # the axis divides: gathered first (from a review; least-squares solvers
        # gather the residuals before their dense step anyway).
        return jnp.concatenate([unsplit(r) for r in out])

    def __call__(self, image: ImageLike) -> Scalar:
        """**Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** the objective `Σ_i w_i T_i(I)` (offset as configured).
        """
        return self._total(self.values(image))

    def _total(self, values: tuple[Scalar, ...]) -> Scalar:
        vals = jnp.stack(values)
        if self.chi2_offset:
            vals = vals - asarray(self.is_data_term, vals.dtype)
        return jnp.sum(self.weights.astype(vals.dtype) * vals)

    def report(self, image: ImageLike) -> dict[str, Scalar]:
        """Each term's value, for logging and ranking.

        **Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** `{name: value}`: every data term's χ² and every regularizer's
        penalty, unweighted and without the offset.
        """
        return dict(zip(self.names, self.values(image)))

    def value_and_report(self, image: ImageLike) -> tuple[Scalar, dict[str, Scalar]]:
        """`(objective(image), objective.report(image))` from one evaluation of the
        terms: for `jax.value_and_grad(..., has_aux=True)` in a training loop that
        logs the terms ([`eqmodels.solve`][] uses it so that its program holds one
        copy of the objective, not a second for the final report).

        **Arguments:** `image`, an `(ny, nx)` array or an image model.
        """
        values = self.values(image)
        return self._total(values), dict(zip(self.names, values))

    @property
    def is_data_term(self) -> np.ndarray:
        """Boolean mask over the terms: which are data terms."""
        return np.array([isinstance(t, AbstractDataTerm) for t in self.terms])

    def __repr__(self) -> str:
        w = self.weights
        concrete = not isinstance(w, jax.core.Tracer) and np.ndim(w) == 1
        parts = [
            f"{f'{float(w[i]):g}' if concrete else '?'} * {n}"
            for i, n in enumerate(self.names)
        ]
        return f"Objective({' + '.join(parts)}, chi2_offset={self.chi2_offset})"


def _share(terms: list[AbstractTerm], groups: list[SharedForward]):
    """Merge every shareable data term and every existing group with the same share
    key into one group; members drop their own forward model."""
    buckets: dict = {}  # share key -> (wrapping, [(source, is_group)])
    out: list[SharedForward] = []
    for g in groups:
        forward, wrapping = unwrap(g.forward)
        key = share_key(forward)
        if key is None:
            out.append(g)
        else:
            source = (forward, g.members, g.index, g.conj)
            buckets.setdefault((key, wrapping), []).append((source, g))
    for i, t in enumerate(terms):
        if not isinstance(t, AbstractDataTerm):
            continue
        forward, wrapping = t.sharing()
        key = share_key(forward)
        if key is not None:
            buckets.setdefault((key, wrapping), []).append(
                (raw_source(forward, i), None)
            )
    for (_, wrapping), sources in buckets.items():
        if len(sources) == 1 and sources[0][1] is not None:
            out.append(sources[0][1])  # an existing group, nothing new to join
            continue
        group = merge([src for src, _ in sources], wrapping)
        if group is not None:
            out.append(group)
    terms = list(terms)
    for g in out:
        for m in g.members:
            if terms[m].sharing()[0] is not None:
                terms[m] = terms[m].without_forward()
    out.sort(key=lambda g: g.members[0])
    return terms, out


def as_objective(term: AbstractTerm) -> Objective:
    """`term` itself if it is an `Objective`, else a one-term `Objective`."""
    return term if isinstance(term, Objective) else Objective((term,))


def _concatenate(a: AbstractTerm, b: AbstractTerm) -> Objective:
    """`a + b`: the terms of both, weights kept, shared transforms merged."""
    sides = []
    for x in (a, b):
        if isinstance(x, Objective):
            sides.append((x.is_data_term.any(), x.chi2_offset, x.share))
        else:  # a bare term: offset off, sharing on
            sides.append((isinstance(x, AbstractDataTerm), False, True))
    (a_data, a_off, a_share), (b_data, b_off, b_share) = sides
    # The offset only concerns data terms: a side without any has no say (so
    # `Objective([...], chi2_offset=True) + 10 * TV(grid)` keeps the offset).
    if a_data and b_data and a_off != b_off:
        raise ValueError(
            "cannot add objectives whose data terms disagree on `chi2_offset`; add "
            "them first, then set it on the sum: "
            "`Objective([a + b], chi2_offset=True)`."
        )
    offset = a_off if a_data else b_off if b_data else False
    return Objective((a, b), chi2_offset=offset, share=a_share and b_share)
