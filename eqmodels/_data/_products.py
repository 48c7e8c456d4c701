"""Containers of derived data products, ready for row-independent data terms.

Every product row carries the (u, v) of each of its legs, **already oriented**: the
sign of each baseline (whether the closure walks it forwards or backwards) is folded
into the leg's (u, v), since `V(-u, -v) = conj V(u, v)` for a real image. `sign`
records it. `stations` holds the station indices of each row (into the parent
`VisData.station_names`), `time` the timestamp in hours, `time_index` its index
into the parent's `timestamps()` and `index_key` the fingerprint of the parent's
timestamps and station table (`VisData.index_key`).
"""

import equinox as eqx
from jaxtyping import Array, Complex, Float, Int


class AmpProducts(eqx.Module):
    """Visibility amplitudes: one leg per row. `amp` is debiased unless the
    constructor was told otherwise."""

    u: Float[Array, " n"]
    v: Float[Array, " n"]
    amp: Float[Array, " n"]
    sigma: Float[Array, " n"]
    time: Float[Array, " n"]
    stations: Int[Array, "n 2"]
    time_index: Int[Array, " n"]
    index_key: int = eqx.field(static=True, default=-1)


class BispectrumProducts(eqx.Module):
    """Bispectra `B = V1 V2 V3` over closed triangles (legs 1→2, 2→3, 3→1)."""

    u: Float[Array, "n 3"]
    v: Float[Array, "n 3"]
    sign: Float[Array, "n 3"]
    bispectrum: Complex[Array, " n"]
    sigma: Float[Array, " n"]
    time: Float[Array, " n"]
    stations: Int[Array, "n 3"]
    legs: Int[Array, "n 3 2"]
    time_index: Int[Array, " n"]
    index_key: int = eqx.field(static=True, default=-1)


class ClosurePhaseProducts(eqx.Module):
    """Closure phases `ψ = arg(V1 V2 V3)`, **radians** (value and sigma);
    `leg_sigma` is each leg's linearised phase noise `σ/|V|` (radians; what a
    full closure covariance needs), `None` when not known."""

    u: Float[Array, "n 3"]
    v: Float[Array, "n 3"]
    sign: Float[Array, "n 3"]
    cphase: Float[Array, " n"]
    sigma: Float[Array, " n"]
    time: Float[Array, " n"]
    stations: Int[Array, "n 3"]
    legs: Int[Array, "n 3 2"]
    time_index: Int[Array, " n"]
    index_key: int = eqx.field(static=True, default=-1)
    leg_sigma: Float[Array, "n 3"] | None = None


class ClosureAmpProducts(eqx.Module):
    """Closure amplitudes `C = |V1||V2| / (|V3||V4|)` over quadrangles."""

    u: Float[Array, "n 4"]
    v: Float[Array, "n 4"]
    camp: Float[Array, " n"]
    sigma: Float[Array, " n"]
    time: Float[Array, " n"]
    stations: Int[Array, "n 4"]
    legs: Int[Array, "n 4 2"]
    time_index: Int[Array, " n"]
    index_key: int = eqx.field(static=True, default=-1)


class LogClosureAmpProducts(eqx.Module):
    """Log closure amplitudes `ln C = ln|V1| + ln|V2| - ln|V3| - ln|V4|`;
    `leg_sigma` is each leg's linearised log-amplitude noise `σ/|V|` (what a
    full closure covariance needs), `None` when not known."""

    u: Float[Array, "n 4"]
    v: Float[Array, "n 4"]
    logcamp: Float[Array, " n"]
    sigma: Float[Array, " n"]
    time: Float[Array, " n"]
    stations: Int[Array, "n 4"]
    legs: Int[Array, "n 4 2"]
    time_index: Int[Array, " n"]
    index_key: int = eqx.field(static=True, default=-1)
    leg_sigma: Float[Array, "n 4"] | None = None
