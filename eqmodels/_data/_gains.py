"""Station-based (antenna) gain corruptions of visibility data."""

import numpy as np
from jaxtyping import ArrayLike

from ._visdata import VisData


def apply_gains(
    data: VisData,
    gains: ArrayLike,
) -> VisData:
    """Multiply each visibility by its stations' complex gains,
    `V_ij → g_i conj(g_j) V_ij`, and its sigma by `|g_i||g_j|` (a gain scales the
    signal and the noise alike, so SNRs — and closure quantities — are unchanged).

    **Arguments:**

    - `data`: a [`eqmodels.VisData`][].
    - `gains`: complex gains, shape `(n_stations,)` (constant in time) or
      `(n_timestamps, n_stations)`, row `k` applying at `data.timestamps()[k]`.

    **Returns:** a new `VisData`.
    """
    g = np.asarray(gains)
    if not np.issubdtype(g.dtype, np.number):
        raise TypeError(f"`gains` must be numeric (complex), got dtype {g.dtype}.")
    g = g.astype(np.complex128)
    n_st = data.n_stations
    times = data.timestamps()
    if g.shape == (n_st,):
        g = np.broadcast_to(g, (len(times), n_st))
    if g.shape != (len(times), n_st):
        raise ValueError(
            f"`gains` must have shape (n_stations,) = ({n_st},) or (n_timestamps, "
            f"n_stations) = ({len(times)}, {n_st}), got {np.shape(gains)}."
        )
    if not np.all(np.isfinite(g)) or np.any(g == 0):
        raise ValueError("`gains` must be finite and non-zero.")
    k = np.searchsorted(times, np.asarray(data.time))
    a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
    g1, g2 = g[k, a1], g[k, a2]
    return data.replace(
        vis=g1 * np.conj(g2) * np.asarray(data.vis),
        sigma=np.abs(g1) * np.abs(g2) * np.asarray(data.sigma),
    )
