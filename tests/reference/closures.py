"""Plain-numpy closure quantities and closure-set properties, written from the
formulas (CONVENTIONS.md and eht-imaging 1.3.2's documented behaviour).

Nothing here decides *which* closures to form. The tests take the closures the
package formed (a timestamp and a tuple of station names per row) and

1. recompute each value by looking every leg up in the raw visibility table
   (`VisTable.leg`), from the formulas, one closure at a time;
2. check properties of each timestamp's set that do not depend on how it was
   chosen, through design matrices over the baselines present at that timestamp
   (rows = closures, columns = baselines as stored, `t1 → t2`):

   - closure phases: `+1` for a leg walked as stored, `-1` for one walked
     backwards (`arg conj V = -arg V`), so row · (baseline phases) = ψ;
   - log closure amplitudes: `+1, +1, -1, -1` on the `|V|` of the legs
     `ab, cd, ad, bc` (C = |V_ab||V_cd| / (|V_ad||V_bc|), eht-imaging's).

   A set is *independent* when its design matrix has full row rank; a set
   *spans* another when every row of the other lies in its row space. A closure
   is *closed* when it is blind to station-based errors: with the incidence
   matrix `B` (baselines × stations; `-1` at `t1`, `+1` at `t2`) a phase row
   satisfies `row · B = 0`, and an amplitude row `row · |B| = 0`.

Stations are addressed by name; a table holds one band.
"""

import itertools
import math

import numpy as np


# ------------------------------------------------------------------ raw table
class VisTable:
    """The raw visibilities, keyed by `(time, t1, t2)` with station names."""

    def __init__(self, time, ant1, ant2, u, v, vis, sigma, names):
        self.rows = {}
        for t, a, b, uu, vv, x, s in zip(time, ant1, ant2, u, v, vis, sigma):
            key = (float(t), names[int(a)], names[int(b)])
            assert key not in self.rows, f"duplicate baseline {key}"
            self.rows[key] = (float(uu), float(vv), complex(x), float(s))

    def times(self):
        return sorted({k[0] for k in self.rows})

    def baselines(self, time):
        """The baselines stored at `time`, as `(t1, t2)` name pairs."""
        return sorted((k[1], k[2]) for k in self.rows if k[0] == time)

    def leg(self, time, a, b):
        """The visibility walked from station `a` to `b`: `(vis, sigma, u, v, sign)`
        (`sign = -1` and `conj V` at `(-u, -v)` when stored as `b → a`), or None."""
        if (time, a, b) in self.rows:
            u, v, x, s = self.rows[(time, a, b)]
            return x, s, u, v, 1.0
        if (time, b, a) in self.rows:
            u, v, x, s = self.rows[(time, b, a)]
            return np.conj(x), s, -u, -v, -1.0
        return None


# ------------------------------------------------------------------ leg order
def triangle_legs(stations):
    a, b, c = stations
    return [(a, b), (b, c), (c, a)]


def quadrangle_legs(stations):
    """Legs of C = |V_ab||V_cd| / (|V_ad||V_bc|), numerator first."""
    a, b, c, d = stations
    return [(a, b), (c, d), (a, d), (b, c)]


def _legs(table, time, pairs):
    legs = [table.leg(time, x, y) for x, y in pairs]
    assert all(leg is not None for leg in legs), (time, pairs, "leg not in table")
    return legs


# ------------------------------------------------------------------ values
def bispectrum(table, time, stations):
    """B = V_ab V_bc V_ca, σ_B = |B| sqrt(Σ σ_i²/|V_i|²), ψ = arg B, σ_ψ = σ_B/|B|."""
    legs = _legs(table, time, triangle_legs(stations))
    v1, v2, v3 = (leg[0] for leg in legs)
    bis = v1 * v2 * v3
    rel = sum((leg[1] / abs(leg[0])) ** 2 for leg in legs)
    sig = abs(bis) * math.sqrt(rel)
    return dict(
        bispectrum=bis,
        sigma=sig,
        cphase=math.atan2(bis.imag, bis.real),
        sigma_cphase=sig / abs(bis),
        u=[leg[2] for leg in legs],
        v=[leg[3] for leg in legs],
        sign=[leg[4] for leg in legs],
    )


def _debias_force_nonzero(amp, sigma):
    if amp > sigma:
        return math.sqrt(amp**2 - sigma**2)
    if amp < sigma:
        return sigma
    return 0.0


def closure_amplitude(table, time, stations, debias=True):
    """C = |V_ab||V_cd| / (|V_ad||V_bc|) and ln C for the quadrangle (a, b, c, d),
    with eht-imaging's debiasing when `debias`."""
    legs = _legs(table, time, quadrangle_legs(stations))
    amps, sig = [abs(leg[0]) for leg in legs], [leg[1] for leg in legs]
    if debias:
        amps = [_debias_force_nonzero(x, s) for x, s in zip(amps, sig)]
    isnr2 = [(s / x) ** 2 for x, s in zip(amps, sig)]
    camp = amps[0] * amps[1] / (amps[2] * amps[3])
    camp_sig = camp * math.sqrt(sum(isnr2))
    logcamp = sum(math.log(x) for x in amps[:2]) - sum(math.log(x) for x in amps[2:])
    if debias:
        camp = camp / (1 + isnr2[2] + isnr2[3])
        logcamp += 0.5 * (isnr2[0] + isnr2[1] - isnr2[2] - isnr2[3])
    return dict(
        camp=camp,
        sigma_camp=camp_sig,
        logcamp=logcamp,
        sigma_logcamp=math.sqrt(sum(isnr2)),
        u=[leg[2] for leg in legs],
        v=[leg[3] for leg in legs],
    )


def debiased_amplitudes(vis, sigma):
    amp = np.abs(vis)
    return np.array(
        [math.sqrt(a * a - s * s) if a > s else 0.0 for a, s in zip(amp, sigma)]
    )


# ------------------------------------------------------------------ set properties
def _columns(baselines):
    return {tuple(bl): k for k, bl in enumerate(baselines)}


def phase_design(closures, baselines):
    """Rows: triangles (station-name tuples); columns: `baselines` as stored.
    +1 where a leg walks the stored baseline forwards, -1 backwards."""
    col = _columns(baselines)
    m = np.zeros((len(closures), len(baselines)))
    for r, st in enumerate(closures):
        for a, b in triangle_legs(st):
            if (a, b) in col:
                m[r, col[(a, b)]] += 1.0
            else:
                m[r, col[(b, a)]] -= 1.0
    return m


def logamp_design(closures, baselines):
    """Rows: quadrangles; +1, +1, -1, -1 on the |V| of legs ab, cd, ad, bc."""
    col = _columns(baselines)
    m = np.zeros((len(closures), len(baselines)))
    for r, st in enumerate(closures):
        for (a, b), w in zip(quadrangle_legs(st), (1.0, 1.0, -1.0, -1.0)):
            m[r, col[(a, b)] if (a, b) in col else col[(b, a)]] += w
    return m


def incidence(baselines):
    """Baselines × stations: -1 at `t1`, +1 at `t2`; and the station names."""
    names = sorted({s for bl in baselines for s in bl})
    idx = {s: k for k, s in enumerate(names)}
    b = np.zeros((len(baselines), len(names)))
    for r, (t1, t2) in enumerate(baselines):
        b[r, idx[t1]] = -1.0
        b[r, idx[t2]] = 1.0
    return b, names


def rank(m):
    return int(np.linalg.matrix_rank(m)) if m.size else 0


def rowspace_residual(basis, rows):
    """Largest residual of the least-squares fit of each row of `rows` by the rows
    of `basis` (0 when every row lies in their span)."""
    if rows.shape[0] == 0:
        return 0.0
    if basis.shape[0] == 0:
        return float(np.max(np.abs(rows)))
    coef = np.linalg.lstsq(basis.T, rows.T, rcond=None)[0]
    return float(np.max(np.abs(basis.T @ coef - rows.T)))


def closed_triangles(baselines):
    """Every station triple whose three baselines are all present (as sets)."""
    have = {frozenset(bl) for bl in baselines}
    names = sorted({s for bl in baselines for s in bl})
    return {
        frozenset(t)
        for t in itertools.combinations(names, 3)
        if all(frozenset(p) in have for p in itertools.combinations(t, 2))
    }


def closed_four_cycles(baselines):
    """Every 4-cycle (as a set of 4 baselines) whose baselines are all present:
    each of the 3 distinct closure amplitudes of 4 stations is the ratio of the
    two perfect matchings of one 4-cycle."""
    have = {frozenset(bl) for bl in baselines}
    names = sorted({s for bl in baselines for s in bl})
    out = set()
    for a, b, c, d in itertools.combinations(names, 4):
        for w, x, y, z in ((a, b, c, d), (a, c, b, d), (a, b, d, c)):
            cyc = frozenset(frozenset(p) for p in ((w, x), (x, y), (y, z), (z, w)))
            if cyc <= have:
                out.add(cyc)
    return out


def quadrangle_cycle(stations):
    """The 4 baselines of a quadrangle's legs, as a 4-cycle."""
    return frozenset(frozenset(p) for p in quadrangle_legs(stations))


def max_independent(n, kind):
    """Independent closures of `n` stations with every baseline present."""
    if kind == "triangle":
        return (n - 1) * (n - 2) // 2 if n >= 3 else 0
    return n * (n - 3) // 2 if n >= 4 else 0
