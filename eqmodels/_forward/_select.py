"""Build a forward model from a name, a class or a factory."""

from collections.abc import Callable
from typing import TypeAlias

import numpy as np

from .._custom_types import PointsLike
from .._grid import ImageGrid, same_grid
from .._validation import as_numpy, is_concrete
from ._base import AbstractForwardModel
from ._direct import DirectFT
from ._nufft import NUFFT
from ._separable import SeparableFT


FORWARD_KINDS: dict[str, type[AbstractForwardModel]] = {
    "direct": DirectFT,
    "separable": SeparableFT,
    "nufft": NUFFT,
}

ForwardLike: TypeAlias = (
    str
    | type[AbstractForwardModel]
    | Callable[[ImageGrid, PointsLike, PointsLike], AbstractForwardModel]
)


def make_forward(
    kind: ForwardLike,
    grid: ImageGrid,
    u: PointsLike,
    v: PointsLike,
    **kwargs,
) -> AbstractForwardModel:
    """Build a forward model from its short name, its class or a factory.

    **Arguments:**

    - `kind`: `"direct"` ([`eqmodels.DirectFT`][]), `"separable"`
      ([`eqmodels.SeparableFT`][]) or `"nufft"` ([`eqmodels.NUFFT`][]); or a
      subclass of [`eqmodels.AbstractForwardModel`][], built as the built-in ones
      are, `kind(grid, u, v, **kwargs)`; or any callable `(grid, u, v, **kwargs) ->
      forward model` (a `functools.partial` fixing options, a factory function).
    - `grid`, `u`, `v`: as for the forward models (arrays, lists or tuples).
    - `**kwargs`: passed on (`pulse`, `dtype`, and `eps` for the NUFFT).

    **Returns:** the forward model (checked to be an `AbstractForwardModel` on
    `grid` at the points' shape).
    """
    # Lists and tuples become numpy arrays here, so the models see arrays.
    u, v = (
        as_numpy(name, x) if is_concrete(x) and isinstance(x, list | tuple) else x
        for name, x in (("u", u), ("v", v))
    )
    if isinstance(kind, str):
        if kind not in FORWARD_KINDS:
            raise ValueError(
                f"`forward` must be one of {tuple(FORWARD_KINDS)}, a forward-model "
                f"class or a callable `(grid, u, v) -> forward model`, got {kind!r}."
            )
        cls = FORWARD_KINDS[kind]
        nufft_only = sorted({"eps", "opts", "backend"} & set(kwargs))
        if nufft_only and cls is not NUFFT:
            names = ", ".join(f"`{n}`" for n in nufft_only)
            raise TypeError(
                f"{names} {'is an option' if len(nufft_only) == 1 else 'are options'} "
                f"of the NUFFT only; `forward={kind!r}` is exact."
            )
        return cls(grid, u, v, **kwargs)
    if isinstance(kind, type):
        if not issubclass(kind, AbstractForwardModel):
            raise TypeError(
                f"`forward` is the class {kind.__name__}, not a forward model class: "
                "pass a subclass of `eqmodels.AbstractForwardModel` (built as "
                "`cls(grid, u, v, **kwargs)`), one of "
                f"{tuple(FORWARD_KINDS)}, or a callable `(grid, u, v) -> forward "
                "model`."
            )
    elif isinstance(kind, AbstractForwardModel):
        raise TypeError(
            f"`forward` is a built {type(kind).__name__}, not a way to build one: "
            f"pass its class (`forward={type(kind).__name__}`), a callable "
            "`(grid, u, v) -> forward model`, or build the term from the model "
            "itself (`Term(model, values, sigma)`)."
        )
    elif not callable(kind):
        raise TypeError(
            f"`forward` must be one of {tuple(FORWARD_KINDS)}, a subclass of "
            "`eqmodels.AbstractForwardModel` or a callable `(grid, u, v) -> forward "
            f"model`, got {type(kind).__name__}."
        )
    model = kind(grid, u, v, **kwargs)
    if not isinstance(model, AbstractForwardModel):
        raise TypeError(
            f"`forward` ({getattr(kind, '__name__', type(kind).__name__)}) returned "
            f"{type(model).__name__}, not a forward model: the callable must return "
            "an `eqmodels.AbstractForwardModel` (a subclass's instance)."
        )
    if tuple(np.shape(model.u)) != tuple(np.shape(u)) or not same_grid(
        model.grid, grid
    ):
        raise ValueError(
            f"`forward` ({getattr(kind, '__name__', type(kind).__name__)}) returned a "
            f"model on {model.grid!r} at points of shape {tuple(np.shape(model.u))}, "
            f"but was asked for {grid!r} at points of shape {tuple(np.shape(u))}: "
            "build the model on the `grid`, `u`, `v` it is given."
        )
    return model
