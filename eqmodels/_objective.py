"""Objectives: weighted sums of data terms and regularizers, as one module."""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from ._regularizers._entropy import GullSkillingEntropy, SimpleEntropy
from ._regularizers._flux import Flux
from ._regularizers._moments import (
    Centroid,
    Compactness,
    Compactness2,
    GaussianMoments,
)
from ._regularizers._smoothness import TSV, TV
from ._regularizers._sparsity import L1, WeightedL1
from ._terms._amp import AmpChi2
from ._terms._base import AbstractDataTerm, AbstractTerm, as_image, ImageLike
from ._terms._bispectrum import BispectrumChi2
from ._terms._camp import ClosureAmpChi2
from ._terms._cphase import ClosurePhaseChi2
from ._terms._logcamp import LogClosureAmpChi2
from ._terms._shared import GivenVis, share_key, SharedForward
from ._terms._vis import VisChi2
from ._validation import is_concrete


# Short names (eht-imaging's) used as report keys.
_NAMES: dict[type, str] = {
    VisChi2: "vis",
    AmpChi2: "amp",
    BispectrumChi2: "bs",
    ClosurePhaseChi2: "cphase",
    LogClosureAmpChi2: "logcamp",
    ClosureAmpChi2: "camp",
    SimpleEntropy: "simple",
    GullSkillingEntropy: "gs",
    L1: "l1",
    WeightedL1: "l1w",
    TV: "tv",
    TSV: "tv2",
    Flux: "flux",
    Centroid: "cm",
    Compactness: "compact",
    Compactness2: "compact2",
    GaussianMoments: "rgauss",
}
# Data terms known to evaluate `self.forward(image)` exactly once, on the image they
# are given: these may be served by a shared transform.
_SHAREABLE_TERMS = (
    VisChi2,
    AmpChi2,
    BispectrumChi2,
    ClosurePhaseChi2,
    LogClosureAmpChi2,
    ClosureAmpChi2,
)


def default_name(term: AbstractTerm) -> str:
    """The report key of a term: eht-imaging's short name for the built-in terms,
    the class name otherwise."""
    return _NAMES.get(type(term), type(term).__name__)


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


class Objective(AbstractTerm, strict=True):
    r"""A weighted sum of data terms and regularizers:

    `J(I) = Σ_i w_i T_i(I)`, or, with `chi2_offset=True`, eht-imaging's
    `J(I) = Σ_d w_d (χ²_d(I) − 1) + Σ_r w_r R_r(I)` (data terms offset by 1).

    Usually built by arithmetic on terms, `0.2 * amp + cphase + 100 * entropy`;
    the weights are one array leaf, so `jax.vmap` over
    [`eqmodels.Objective.with_weights`][] evaluates a whole survey of weightings.
    `objective(image_or_model)` returns the scalar (use it directly under
    `eqx.filter_value_and_grad`); `objective.report(image)` the value of each term.

    **Shared transforms.** With `share=True` (default), built-in data terms whose
    forward models have the same type, grid, pulse, options and dtype are served by
    one transform at their distinct baselines (legs equal up to sign are merged):
    one NUFFT instead of one per term, or a dense matrix with one row per distinct
    baseline instead of one per leg. The result is the same to rounding. The shared
    points are a snapshot of the terms' points at construction: if you replace a
    term's points afterwards, rebuild the objective. The shared model is held
    besides the terms' own (for `DirectFT`, a second matrix with one row per
    distinct baseline).
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
        weights: Float[ArrayLike, " n"] | Sequence[float | int] | None = None,
        *,
        names: Sequence[str] | None = None,
        chi2_offset: bool = False,
        share: bool = True,
        _shared: tuple[SharedForward, ...] | None = None,
    ):
        """**Arguments:**

        - `terms`: data terms and regularizers (an `Objective` among them is
          flattened: its terms join, its weights multiplied in; the outer
          `chi2_offset` applies).
        - `weights`: one weight per term (default all 1).
        - `names`: report keys (default: eht-imaging's short names, `amp`,
          `cphase`, `simple`, `tv`, ..., made unique with `_2`, `_3`).
        - `chi2_offset`: subtract 1 from every data term (eht-imaging's
          `α(χ² − 1)`); changes the value, not the gradient.
        - `share`: serve compatible data terms from one transform (see above).
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
        xp = np if all(is_concrete(w) for w in [weights, *nested]) else jnp
        if weights is None:
            weights = xp.ones(len(terms), wdtype)
        weights = xp.asarray(weights)
        if weights.dtype == np.bool_ or np.iscomplexobj(weights):
            raise TypeError(f"`weights` must be real, got dtype {weights.dtype}.")
        weights = weights.astype(wdtype)
        if weights.shape != (len(terms),):
            raise ValueError(
                f"`weights` has shape {weights.shape} but there are {len(terms)} "
                "terms: one weight per term."
            )
        if names is not None:
            names = tuple(names)
            if len(names) != len(terms) or not all(isinstance(n, str) for n in names):
                raise ValueError(
                    f"`names` must be {len(terms)} strings, one per term, got {names!r}."
                )
        # Flatten nested objectives.
        flat_terms, flat_w, flat_names = [], [], []
        for i, t in enumerate(terms):
            if isinstance(t, Objective):
                flat_terms.extend(t.terms)
                flat_w.append(weights[i] * xp.asarray(t.weights))
                flat_names.extend(t.names)
            else:
                flat_terms.append(t)
                flat_w.append(weights[i : i + 1])
                flat_names.append(default_name(t) if names is None else names[i])
        self.terms = tuple(flat_terms)
        self.weights = jnp.asarray(xp.concatenate(flat_w))
        self.names = _unique_names(flat_names)
        self.chi2_offset = bool(chi2_offset)
        self.share = bool(share)
        if not self.share:
            self.shared = ()
        elif _shared is not None:  # internal: reused by `a + b` (see `concatenate`)
            self.shared = _shared
        else:
            self.shared = _build_shared(self.terms)

    def with_weights(
        self, weights: Float[ArrayLike, " n"] | Sequence[float | int]
    ) -> "Objective":
        """The same objective with other weights (works with traced weights, e.g.
        inside `jax.vmap` for a survey).

        **Arguments:** `weights`, one per term, in `self.names` order.

        **Returns:** the new `Objective` (terms and shared transforms reused).
        """
        weights = jnp.asarray(weights)
        if weights.shape != self.weights.shape:
            raise ValueError(
                f"`weights` has shape {weights.shape}, expected {self.weights.shape} "
                f"(one per term: {self.names})."
            )
        return eqx.tree_at(
            lambda o: o.weights, self, weights.astype(self.weights.dtype)
        )

    def values(self, image: ImageLike) -> tuple[Scalar, ...]:
        """Each term's own value (χ² or penalty, unweighted), in `self.names` order.

        **Arguments:** `image`, an `(ny, nx)` array or an image model (evaluated
        once).
        """
        img = as_image(image)
        terms = list(self.terms)
        for group in self.shared:
            for m, vis in zip(group.members, group(img)):
                fwd = terms[m].forward
                given = GivenVis(fwd, vis.reshape(fwd.u.shape))
                terms[m] = eqx.tree_at(lambda t: t.forward, terms[m], given)
        return tuple(t(img) for t in terms)

    def __call__(self, image: ImageLike) -> Scalar:
        """**Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** the objective `Σ_i w_i T_i(I)` (offset as configured).
        """
        vals = jnp.stack(self.values(image))
        if self.chi2_offset:
            vals = vals - jnp.asarray(self.is_data_term, vals.dtype)
        return jnp.sum(self.weights.astype(vals.dtype) * vals)

    def report(self, image: ImageLike) -> dict[str, Scalar]:
        """Each term's value, for logging and ranking.

        **Arguments:** `image`, an `(ny, nx)` array or an image model.

        **Returns:** `{name: value}`: every data term's χ² and every regularizer's
        penalty, unweighted and without the offset.
        """
        return dict(zip(self.names, self.values(image)))

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


def _shareable(term: AbstractTerm):
    """The share key of a built-in data term, or None."""
    if type(term) not in _SHAREABLE_TERMS:
        return None
    return share_key(term.forward)


def _build_shared(terms: tuple[AbstractTerm, ...]) -> tuple[SharedForward, ...]:
    groups: list[tuple[object, list[int]]] = []
    for i, t in enumerate(terms):
        key = _shareable(t)
        if key is None:
            continue
        for k, members in groups:
            if k == key:
                members.append(i)
                break
        else:
            groups.append((key, [i]))
    out = []
    for _, members in groups:
        sf = SharedForward.build([terms[m].forward for m in members], members)
        if sf is not None:
            out.append(sf)
    return tuple(out)


def as_objective(term: AbstractTerm) -> Objective:
    """`term` itself if it is an `Objective`, else a one-term `Objective`."""
    return term if isinstance(term, Objective) else Objective((term,))


def concatenate(a: AbstractTerm, b: AbstractTerm) -> Objective:
    """`a + b`: the terms of both, weights kept."""
    # A bare term joins without a one-term objective (and its shared transforms)
    # being built first.
    oa, ob = (
        x if isinstance(x, Objective) else Objective((x,), share=False) for x in (a, b)
    )
    # The offset only concerns data terms: a side without any has no say (so
    # `Objective([...], chi2_offset=True) + 10 * TV(grid)` keeps the offset).
    a_data, b_data = oa.is_data_term.any(), ob.is_data_term.any()
    if a_data and b_data and oa.chi2_offset != ob.chi2_offset:
        raise ValueError(
            "cannot add objectives whose data terms disagree on `chi2_offset`; add "
            "them first, then set it on the sum: "
            "`Objective([a + b], chi2_offset=True)`."
        )
    offset = oa.chi2_offset if a_data else ob.chi2_offset if b_data else False
    share = (oa.share or not isinstance(a, Objective)) and (
        ob.share or not isinstance(b, Objective)
    )
    # Objectives built term by term (`0.2 * amp + cphase + ... + 100 * tv`) would
    # rebuild the shared transforms at every `+`: when one side adds no shareable
    # data term, the other side's shared transforms serve the sum unchanged.
    reuse = None
    a_sharing = any(_shareable(t) is not None for t in oa.terms)
    b_sharing = any(_shareable(t) is not None for t in ob.terms)
    if not (a_sharing or b_sharing):
        reuse = ()
    elif share and not b_sharing and isinstance(a, Objective):
        reuse = oa.shared
    elif share and not a_sharing and isinstance(b, Objective):
        k = len(oa.terms)
        reuse = tuple(
            SharedForward(g.forward, g.index, g.conj, tuple(m + k for m in g.members))
            for g in ob.shared
        )
    return Objective(
        oa.terms + ob.terms,
        np.concatenate([oa.weights, ob.weights])
        if is_concrete(oa.weights) and is_concrete(ob.weights)
        else jnp.concatenate([oa.weights, ob.weights]),
        names=oa.names + ob.names,
        chi2_offset=offset,
        share=share,
        _shared=reuse,
    )
