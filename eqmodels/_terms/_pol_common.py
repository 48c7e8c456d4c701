"""Helpers shared by the polarimetric data terms (eht-imaging's `pvis`, `m`,
`vvis`): the checked rows of a term with one complex value per row, the χ² and
residuals of complex values, and the rows `from_data` takes from a polarimetric
data set.

Each term is arithmetic on the Stokes visibilities `(n, 4)` (I, Q, U, V last) at its
rows: `PolVisChi2` on `P̂ = Q̂ + iÛ`, `FracPolChi2` on `m̂ = P̂ / Î`, `StokesVChi2`
on `V̂`; all three use eht-imaging's normalisation
`χ² = Σ_k w_k |x̂_k − x_k|² / (2N)`, `w_k = 1/σ_k²`, `N` the number of rows.
"""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Complex, Float, Int, Scalar

from .._forward._select import make_forward
from .._numerics import asarray
from .._validation import (
    as_complex,
    as_real,
    check_nonempty,
    check_same_shape,
    is_concrete,
)
from ._base import n_rows_leaf
from ._common import (
    _pairs,
    abs2,
    check_amplitudes,
    check_forward,
    inverse_variance,
    values_dtype,
)


def complex_rows(
    forward, term: str, name: str, values, sigma, *, jy: bool
) -> tuple[Complex[Array, " n"], Float[Array, " n"], Int[Array, ""]]:
    """The checked `(values, weight, n_rows)` of a term with one complex value per
    row: `forward`'s points `(n,)`, `values` finite (and plausible amplitudes in Jy
    when `jy`), `sigma` finite and > 0, all of shape `(n,)`; `weight = 1/σ²`."""
    check_forward(forward, None, term)
    dtype, ctype = values_dtype(forward)
    values = as_complex(name, values)
    if jy and is_concrete(values):
        check_amplitudes(name, np.abs(values), term=term, jy=True)
    sigma = as_real("sigma", sigma)
    check_nonempty("sigma", sigma)
    check_same_shape((name, "sigma", "forward.u"), values, sigma, forward.u)
    n = int(np.shape(values)[0])
    return asarray(values, ctype), inverse_variance(sigma, dtype), n_rows_leaf(n)


def check_stokes_vis(term, vis, n: int) -> None:
    """`vis` is the Stokes visibilities of the term's `n` rows, `(n, 4)` (shapes
    are static: checked when traced, at no cost)."""
    if tuple(jnp.shape(vis)) != (n, 4):
        raise ValueError(
            f"{type(term).__name__}: `vis` has shape {tuple(jnp.shape(vis))}, but the "
            f"term needs the Stokes visibilities of its {n} rows, shape ({n}, 4) "
            "(I, Q, U, V last: `term.model_vis(stokes_image)`); for a batch, "
            "`jax.vmap` over it."
        )


def complex_chi2(
    weight: Float[Array, " n"],
    n_rows: Int[Array, ""],
    model: Complex[Array, " n"],
    data: Complex[Array, " n"],
) -> Scalar:
    """`Σ w |model − data|² / (2N)`."""
    return jnp.sum(weight * abs2(model - data)) / (2 * n_rows)


def complex_residuals(
    weight: Float[Array, " n"],
    n_rows: Int[Array, ""],
    model: Complex[Array, " n"],
    data: Complex[Array, " n"],
) -> Float[Array, " m"]:
    """The real and imaginary parts of `sqrt(w / (2N)) (model − data)`, so that
    `Σ r² = complex_chi2(...)`."""
    d = model - data
    s = jnp.sqrt(weight / (2 * n_rows))
    return jnp.concatenate([s * d.real, s * d.imag])


def polarization(stokes: Complex[Array, "n 4"]) -> Complex[Array, " n"]:
    """`P̂ = Q̂ + iÛ` from Stokes visibilities `(n, 4)`."""
    return stokes[:, 1] + 1j * stokes[:, 2]


# --------------------------------------------------------------------------- data


def stokes_rows(data, term: str, *, conjugates: bool) -> dict:
    """The rows of a polarimetric data set as `from_data` needs them: `u`, `v`,
    `stokes` and `sigma` (`(n, 4)`, I, Q, U, V, NaN where flagged, from
    `data.stokes()`), `stations` (`(n, 2)` or `None`), `time_index` and
    `index_key`. With `conjugates`, the rows followed by their conjugate baselines
    (eht-imaging's `unpack(..., conj=True)`): `(−u, −v)`, each Stokes visibility
    conjugated (the transform of a real plane at the reversed baseline), the same σ,
    the station pair swapped, the same time slot."""
    stokes = getattr(data, "stokes", None)
    if not callable(stokes) or not all(hasattr(data, n) for n in ("u", "v")):
        raise TypeError(
            f"`data` must be a polarimetric data set for `{term}.from_data` (a "
            "`PolVisData` from `eqmodels.load_uvfits(path, polarization='full')`: "
            f"anything with `u`, `v` and `stokes()`), got {type(data).__name__}."
        )
    vis, sigma = stokes()
    vis = np.asarray(vis, np.complex128)
    sigma = np.asarray(sigma, np.float64)
    u = np.asarray(data.u, np.float64)
    v = np.asarray(data.v, np.float64)
    n = u.shape[0] if u.ndim == 1 else -1
    if u.ndim != 1 or vis.shape != (n, 4) or sigma.shape != (n, 4):
        raise TypeError(
            f"`data` must be a polarimetric data set for `{term}.from_data`: `u` of "
            "shape (n,) and `stokes()` giving visibilities and sigmas of shape "
            f"(n, 4); got `u` {u.shape}, `stokes()` {vis.shape} and {sigma.shape}."
        )
    stations = _pairs(data)
    time_index = getattr(data, "time_index", None)
    time_index = None if time_index is None else np.asarray(time_index)
    if conjugates:
        u, v = np.concatenate([u, -u]), np.concatenate([v, -v])
        vis = np.concatenate([vis, np.conj(vis)])
        sigma = np.concatenate([sigma, sigma])
        if stations is not None:
            stations = np.concatenate([stations, stations[:, ::-1]])
        if time_index is not None:
            time_index = np.concatenate([time_index, time_index])
    return dict(
        u=u,
        v=v,
        stokes=vis,
        sigma=sigma,
        stations=stations,
        time_index=time_index,
        index_key=getattr(data, "index_key", None),
    )


def term_from_rows(
    cls, rows: dict, values, sigma, grid, forward, forward_kwargs, *, needs: str
):
    """`cls(forward model at the kept rows, values, sigma, ...)`, keeping the rows
    whose `values` and `sigma` are finite (the others need a flagged quantity:
    `needs` names them in the error when none is left)."""
    with np.errstate(invalid="ignore"):
        keep = np.isfinite(values) & np.isfinite(sigma)
    if not keep.any():
        raise ValueError(
            f"`{cls.__name__}.from_data`: no row of `data` has {needs} (all flagged): "
            "nothing to fit."
        )
    fwd = make_forward(
        forward, grid, rows["u"][keep], rows["v"][keep], **forward_kwargs
    )
    stations, time_index = rows["stations"], rows["time_index"]
    return cls(
        fwd,
        values[keep],
        sigma[keep],
        stations=None if stations is None else stations[keep],
        time_index=None if time_index is None else time_index[keep],
        index_key=rows["index_key"],
    )
