"""Closure sets: which triangles and quadrangles are formed at each timestamp.

Built once on the host from the station indices; the result is, for every closure
row, the data rows of its legs and the orientation sign of each leg (+1 when the
closure walks the baseline as stored, `ant1 → ant2`; -1 when it walks it
backwards, so the leg's visibility is `conj V` at `(-u, -v)`).

Sets (eht-imaging compatible, stations in station-table order, `s0` the first
station present at that timestamp — the reference):

- triangles, `"min"`: `(s0, j, k)` for every `j < k` among the others: with `n`
  stations and every baseline present, `(n-1)(n-2)/2` independent closure phases.
  Legs `s0→j`, `j→k`, `k→s0`.
- triangles, `"all"`: every `(i, j, k)`, `i < j < k`; legs `i→j`, `j→k`, `k→i`.
- quadrangles `(a, b, c, d)` give `C = |V_ab||V_cd| / (|V_ad||V_bc|)` (legs in
  that order). `"min"`: for `i = 3..n-1`, `j = 1..i-1`, `k = 1` if `j = i-1` else
  `j+1`: the quadrangle `(s0, s_i, s_j, s_k)`; `n(n-3)/2` independent closure
  amplitudes when every baseline is present. `"all"`: every 4 stations, in the
  three orders `(a,b,c,d)`, `(a,c,b,d)`, `(a,b,d,c)`.

A closure is skipped when one of its baselines is missing at that timestamp (so
with missing baselines `"min"` can hold fewer than the maximal number of
independent closures — eht-imaging behaves the same way).
"""

import itertools

import numpy as np


CLOSURE_SETS = ("min", "all")


def check_closures(closures) -> str:
    if closures not in CLOSURE_SETS:
        raise ValueError(
            f"`closures` must be one of {CLOSURE_SETS} ('min': a minimal "
            f"independent set per timestamp; 'all': every closure), got {closures!r}."
        )
    return closures


def _triangles(sites, closures):
    if closures == "min":
        ref, rest = sites[0], sites[1:]
        return [(ref, j, k) for j, k in itertools.combinations(rest, 2)]
    return list(itertools.combinations(sites, 3))


def _quadrangles(sites, closures):
    if closures == "min":
        quads = []
        for i in range(3, len(sites)):
            for j in range(1, i):
                k = 1 if j == i - 1 else j + 1
                quads.append((sites[0], sites[i], sites[j], sites[k]))
        return quads
    out = []
    for a, b, c, d in itertools.combinations(sites, 4):
        out += [(a, b, c, d), (a, c, b, d), (a, b, d, c)]
    return out


def _tri_legs(t):
    return ((t[0], t[1]), (t[1], t[2]), (t[2], t[0]))


def _quad_legs(q):
    a, b, c, d = q
    return ((a, b), (c, d), (a, d), (b, c))


def closure_index(time, band, ant1, ant2, kind: str, closures: str):
    """Closure rows of kind `"triangle"` or `"quadrangle"`.

    **Arguments:** per-row numpy arrays `time`, `band`, `ant1`, `ant2` of the
    rows allowed to enter closures.

    **Returns:** `(rows, signs, stations, times)`: `rows` `(m, L)` indices into
    the given arrays, `signs` `(m, L)` ±1.0, `stations` `(m, 3 or 4)` station
    indices, `times` `(m,)`; `L` = 3 legs for triangles, 4 for quadrangles.
    """
    check_closures(closures)
    if kind == "triangle":
        make, legs_of, nleg, nst = _triangles, _tri_legs, 3, 3
    elif kind == "quadrangle":
        make, legs_of, nleg, nst = _quadrangles, _quad_legs, 4, 4
    else:  # pragma: no cover - internal
        raise ValueError(kind)
    rows, signs, stations, times = [], [], [], []
    order = np.lexsort((band, time))
    ts, bs = time[order], band[order]
    cut = np.flatnonzero((np.diff(ts) != 0) | (np.diff(bs) != 0)) + 1
    for grp in np.split(order, cut):
        lookup = {}
        for r in grp:
            a, b = int(ant1[r]), int(ant2[r])
            if (a, b) in lookup:
                raise ValueError(
                    f"baseline ({a}, {b}) appears more than once at time {time[r]!r} h "
                    f"(band {band[r]}): closures need one row per baseline and "
                    "timestamp; average the data or give the bands distinct `band` "
                    "indices."
                )
            lookup[(a, b)] = (r, 1.0)
            lookup[(b, a)] = (r, -1.0)
        sites = sorted(set(ant1[grp].tolist()) | set(ant2[grp].tolist()))
        if len(sites) < nst:
            continue
        for poly in make(sites, closures):
            legs = [lookup.get(leg) for leg in legs_of(poly)]
            if any(leg is None for leg in legs):
                continue
            rows.append([leg[0] for leg in legs])
            signs.append([leg[1] for leg in legs])
            stations.append(poly)
            times.append(time[grp[0]])
    if not rows:
        return (
            np.zeros((0, nleg), np.int64),
            np.zeros((0, nleg)),
            np.zeros((0, nst), np.int64),
            np.zeros(0),
        )
    return (
        np.array(rows, np.int64),
        np.array(signs, np.float64),
        np.array(stations, np.int64),
        np.array(times, np.float64),
    )
