"""Pick a forward model by name."""

from .._custom_types import PointsLike
from .._grid import ImageGrid
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


def make_forward(
    kind: str,
    grid: ImageGrid,
    u: PointsLike,
    v: PointsLike,
    **kwargs,
) -> AbstractForwardModel:
    """Build a forward model from its short name.

    **Arguments:**

    - `kind`: `"direct"` ([`eqmodels.DirectFT`][]), `"separable"`
      ([`eqmodels.SeparableFT`][]) or `"nufft"` ([`eqmodels.NUFFT`][]).
    - `grid`, `u`, `v`: as for the forward models (arrays, lists or tuples).
    - `**kwargs`: passed on (`pulse`, `dtype`, and `eps` for the NUFFT).

    **Returns:** the forward model.
    """
    if not isinstance(kind, str) or kind not in FORWARD_KINDS:
        raise ValueError(
            f"`forward` must be one of {tuple(FORWARD_KINDS)}, got {kind!r}."
        )
    cls = FORWARD_KINDS[kind]
    nufft_only = sorted({"eps", "opts", "backend"} & set(kwargs))
    if nufft_only and cls is not NUFFT:
        names = ", ".join(f"`{n}`" for n in nufft_only)
        raise TypeError(
            f"{names} {'is an option' if len(nufft_only) == 1 else 'are options'} of "
            f"the NUFFT only; `forward={kind!r}` is exact."
        )
    # Lists and tuples become numpy arrays here, so the models see arrays.
    u, v = (
        as_numpy(name, x) if is_concrete(x) and isinstance(x, list | tuple) else x
        for name, x in (("u", u), ("v", v))
    )
    return cls(grid, u, v, **kwargs)
