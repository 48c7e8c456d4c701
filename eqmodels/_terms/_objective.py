"""`AbstractTerm`, the base of everything an objective sums, and its composite
`Objective`, a weighted sum of terms.

The composite lives beside its base (as lineax keeps its composite operators
beside `AbstractLinearOperator`): a term's arithmetic (`w * term`, `term + term`)
returns an `Objective`, so the two share a module and no import goes in a circle.
The objective tells data terms from regularizers by their declarations
(`is_data`, `has_residuals`, `sharing()`), never by importing the data-term base.
"""

import abc
import numbers
from collections.abc import Sequence
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._custom_types import RealLike
from .._grid import ImageGrid, same_grid
from .._numerics import asarray
from .._sharding._mesh import sharded_parts, unsplit
from .._validation import check_flag, is_concrete
from ._inputs import (
    as_stokes,
    check_real_residuals,
    check_real_scalar,
    default_name,
    from_shared_vis,
    geometric_stokes_vis,
    geometric_vis,
    ImageLike,
    is_geometric,
    is_pol_geometric,
    is_stokes,
    planes_at,
    term_grid,
)
from ._shared import merge, raw_source, share_key, SharedForward, unwrap


class AbstractTerm(eqx.Module):
    """Base class of everything an [`eqmodels.Objective`][] sums: a module mapping an
    image (an `(ny, nx)` array or an [`eqmodels.AbstractImageModel`][]) to a scalar.

    Terms compose with arithmetic: `w * term` is an `Objective` with one weighted
    term, `a + b` an `Objective` holding both (nested sums are flattened), and
    `sum([...])` works too. Subclass [`eqmodels.AbstractDataTerm`][] or
    [`eqmodels.AbstractRegularizer`][] rather than this class directly: the
    `Objective` treats the two families differently (e.g. `chi2_offset`).

    **Data terms.** The class attribute `is_data` (set by
    [`eqmodels.AbstractDataTerm`][]) tells an objective which terms are χ² of
    data: `chi2_offset` applies to them, and their forward models may be shared
    (through their `sharing()`).

    **Sums of squares.** The class attribute `has_residuals` declares that the term
    is a sum of squares with a `residuals(image)` method (a real vector `r`,
    value `Σ r²`), what Gauss-Newton and Levenberg-Marquardt need. Data terms
    declare it; a regularizer does when it defines `residuals` (defining it sets
    the flag, unless the class sets `has_residuals` itself).

    **Polarimetric terms.** The class attribute `polarimetric` (default `False`)
    declares that the term is evaluated on the four Stokes planes of a
    polarimetric image (`(4, ny, nx)`, I, Q, U, V): a data term's
    `chi2_from_vis` / `residuals_from_vis` then receive the Stokes visibilities
    `(*points, 4)`, a regularizer's `penalty` the `(4, ny, nx)` planes. A term
    that does not declare it, given a polarimetric image, uses its I plane.

    **Multi-frequency terms.** The property `band_frequency` (default `None`) says at
    which frequency an objective evaluates a [`eqmodels.MultiFrequencyImage`][]
    for the term (see [`eqmodels.AtFrequency`][]). The class attribute
    `takes_model` (default `False`) declares a term that an objective hands the
    image argument as given (an image model, not its evaluated planes): what the
    spectral regularizers need, the model's spectral maps.

    **Report names.** The class attribute `report_name` is the key under which an
    objective reports the term (`"amp"`, `"cphase"`, `"tv"`, ... for the built-in
    terms, eht-imaging's short names). A subclass inherits its parent's unless it
    sets its own; a class that sets none is reported under its class name.
    """

    report_name: ClassVar[str | None] = None
    has_residuals: ClassVar[bool] = False
    polarimetric: ClassVar[bool] = False
    is_data: ClassVar[bool] = False
    takes_model: ClassVar[bool] = False

    @property
    def band_frequency(self) -> float | None:
        """The frequency (Hz) at which an objective evaluates a
        [`eqmodels.MultiFrequencyImage`][] for this term (`model.at(frequency)`;
        any other image is the same at every frequency), or `None` (default): the
        image as given (a multi-frequency model's `model()`, its reference
        frequency). Set by [`eqmodels.AtFrequency`][]; an objective serves the
        terms of one frequency from one shared transform, never mixing
        frequencies."""
        return None

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
             if type(t).is_data and t.forward is not None]  # fmt: skip
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
        self.share = check_flag("share", share)
        _check_one_grid(_unique_names(flat_names), flat_terms, groups)
        _check_one_dtype(_unique_names(flat_names), flat_terms, groups)
        _check_one_device_set(_unique_names(flat_names), flat_terms, groups)
        if self.share:
            flat_terms, groups = _share(flat_terms, groups)
        self.terms = tuple(flat_terms)
        self.shared = tuple(groups)
        self.weights = asarray(xp.concatenate(flat_w))
        self.names = _unique_names(flat_names)
        self.chi2_offset = check_flag("chi2_offset", chi2_offset)

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

    def _planes(self, image: ImageLike) -> dict:
        """The image's planes at each frequency the terms ask for (`None`: the
        image as given), each evaluated once: `{frequency: planes}`."""
        grid = objective_grid(self)
        freqs = []
        for t in self.terms:
            if not type(t).takes_model and t.band_frequency not in freqs:
                freqs.append(t.band_frequency)
        return {f: planes_at(image, grid, f) for f in freqs}

    def _term_input(self, t: AbstractTerm, image: ImageLike, planes: dict):
        """What term `t` is evaluated on: the image as given (`takes_model`, or a
        data term given a geometric model: its analytic visibilities) or its
        planes at the term's frequency."""
        if type(t).takes_model or (type(t).is_data and is_geometric(image)):
            return image
        return planes[t.band_frequency]

    def _served_vis(self, planes: dict, model=None) -> dict[int, Array]:
        """Each shared member's visibilities, by term position, from the planes
        at the group's frequency (`planes`: `{frequency: planes}`). Given a Stokes
        image `(4, ny, nx)`, a group with a polarimetric member transforms the four
        planes at once (its Stokes I members get the I column), a group without one
        the I plane alone. Given a geometric `model` (the same at every
        frequency), a group without a polarimetric member takes its visibilities
        at the shared points from the model."""
        served = {}
        for group in self.shared:
            if model is not None and not any(
                self.terms[m].polarimetric for m in group.members
            ):
                vis = geometric_vis(model, unwrap(group.forward)[0])
                served.update(zip(group.members, group.gather(vis)))
                continue
            if is_pol_geometric(model):
                # the analytic Stokes visibilities at the shared points; each
                # Stokes image is real, so a merged point's conjugate serves its
                # reverse plane by plane (as `SharedForward.stokes`)
                vis = geometric_stokes_vis(model, unwrap(group.forward)[0])
                for m, idx, cj in zip(group.members, group.index, group.conj):
                    v = jnp.where(cj[..., None], jnp.conj(vis[idx]), vis[idx])
                    served[m] = v if self.terms[m].polarimetric else v[..., 0]
                continue
            img = planes[self.terms[group.members[0]].band_frequency]
            stokes = is_stokes(img)
            pol = [self.terms[m].polarimetric for m in group.members]
            if not stokes:
                if any(pol):
                    m = group.members[pol.index(True)]
                    as_stokes(img, None, f"term {self.names[m]!r}")  # refuses
                served.update(zip(group.members, group(img)))
            elif any(pol):
                vis = group.stokes(img)
                served.update(
                    (m, v if p else v[..., 0])
                    for m, v, p in zip(group.members, vis, pol)
                )
            else:
                served.update(zip(group.members, group(img[0])))
        return served

    def values(self, image: ImageLike) -> tuple[Scalar, ...]:
        """Each term's own value (χ² or penalty, unweighted), in `self.names` order.

        **Arguments:** `image`, an `(ny, nx)` array or an image model (evaluated
        once; each shared transform too).
        """
        planes = self._planes(image)
        served = self._served_vis(planes, image if is_geometric(image) else None)
        values = tuple(
            from_shared_vis(t, "chi2_from_vis", served[i])
            if i in served
            else t(self._term_input(t, image, planes))
            for i, t in enumerate(self.terms)
        )
        for name, t, v in zip(self.names, self.terms, values):
            check_real_scalar(v, name, t)
        return values

    def log_likelihood(self, image: ImageLike) -> Scalar:
        """The Gaussian log-likelihood of all the data terms' data given `image`:
        the sum of each data term's `log_likelihood` (see
        [`eqmodels.AbstractDataTerm.log_likelihood_from_vis`][]), **unweighted**
        (the objective's weights and `chi2_offset` do not enter; regularizers are
        left out: a prior is the caller's), each term independent of the others.
        Shared transforms serve it as they serve the value.

        **Arguments:** `image`, an `(ny, nx)` array or an image model (a geometric
        model through its analytic visibilities).

        **Returns:** `ln L`, a scalar.
        """
        if not any(type(t).is_data for t in self.terms):
            raise ValueError(
                "the objective has no data term: its log-likelihood is undefined "
                "(regularizers are priors, not data)."
            )
        planes = self._planes(image)
        served = self._served_vis(planes, image if is_geometric(image) else None)
        parts = []
        for i, t in enumerate(self.terms):
            if not type(t).is_data:
                continue
            if i in served:
                v = from_shared_vis(t, "log_likelihood_from_vis", served[i])
            else:
                v = t.log_likelihood(self._term_input(t, image, planes))
            parts.append(check_real_scalar(v, self.names[i], t))
        return jnp.sum(jnp.stack(parts))

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
        planes = self._planes(image)
        served = self._served_vis(planes, image if is_geometric(image) else None)
        out = []
        for i, t in enumerate(self.terms):
            if i in served:
                r = from_shared_vis(t, "residuals_from_vis", served[i])
            else:
                r = t.residuals(self._term_input(t, image, planes))
            check_real_residuals(r, self.names[i], t)
            out.append(jnp.sqrt(self.weights[i]).astype(r.dtype) * r.reshape(-1))
        if len(out) == 1:
            return out[0]
        # A `ShardedChi2`'s residuals split over an Explicit mesh axis do not join
        # replicated ones (a regularizer's, an unsharded term's), nor make a length
        # the axis divides: gathered first (least-squares solvers gather the
        # residuals before their dense step anyway).
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
        return np.array([type(t).is_data for t in self.terms])

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
    # Terms at different frequencies (`AtFrequency`) see different images: one
    # shared transform per frequency, never one across them.
    for g in groups:
        forward, wrapping = unwrap(g.forward)
        key = share_key(forward)
        if key is None:
            out.append(g)
        else:
            source = (forward, g.members, g.index, g.conj)
            freq = terms[g.members[0]].band_frequency
            buckets.setdefault((key, wrapping, freq), []).append((source, g))
    for i, t in enumerate(terms):
        if not type(t).is_data:
            continue
        forward, wrapping = t.sharing()
        key = share_key(forward)
        if key is not None:
            buckets.setdefault((key, wrapping, t.band_frequency), []).append(
                (raw_source(forward, i), None)
            )
    for (_, wrapping, _), sources in buckets.items():
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
            sides.append((type(x).is_data, False, True))
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
