"""Plain-numpy closure quantities written from the formulas (CONVENTIONS.md and
eht-imaging 1.3.2's documented behaviour), one timestamp and one closure at a
time, with stations addressed by name. Independent of eqmodels' implementation.

Input: a list of visibility records, each a dict with keys
`time, t1, t2, u, v, vis, sigma` (station names `t1`, `t2`), and the station
order `order` (a list of names: the reference station is the first present).
Outputs: lists of dicts, in the order closures are formed.
"""

import itertools
import math

import numpy as np


def records_from_arrays(time, ant1, ant2, u, v, vis, sigma, names):
    return [
        dict(
            time=float(t),
            t1=names[int(a)],
            t2=names[int(b)],
            u=float(uu),
            v=float(vv),
            vis=complex(x),
            sigma=float(s),
        )
        for t, a, b, uu, vv, x, s in zip(time, ant1, ant2, u, v, vis, sigma)
    ]


def _by_time(records):
    out = {}
    for r in records:
        out.setdefault(r["time"], []).append(r)
    return [out[t] for t in sorted(out)]


def _leg(table, a, b):
    """The visibility walked from station a to b: (vis, sigma, u, v, sign)."""
    for r in table:
        if r["t1"] == a and r["t2"] == b:
            return r["vis"], r["sigma"], r["u"], r["v"], 1.0
        if r["t1"] == b and r["t2"] == a:
            return np.conj(r["vis"]), r["sigma"], -r["u"], -r["v"], -1.0
    return None


def triangles(stations, count):
    if count == "min":
        ref, rest = stations[0], stations[1:]
        return [(ref, b, c) for b, c in itertools.combinations(rest, 2)]
    return list(itertools.combinations(stations, 3))


def quadrangles(stations, count):
    out = []
    if count == "min":
        s = stations
        for i in range(3, len(s)):
            for j in range(1, i):
                k = 1 if j == i - 1 else j + 1
                out.append((s[0], s[i], s[j], s[k]))
        return out
    for q in itertools.combinations(stations, 4):
        a, b, c, d = q
        out += [(a, b, c, d), (a, c, b, d), (a, b, d, c)]
    return out


def bispectra(records, order, count="min"):
    out = []
    for table in _by_time(records):
        present = {r["t1"] for r in table} | {r["t2"] for r in table}
        stations = [s for s in order if s in present]
        if len(stations) < 3:
            continue
        for a, b, c in triangles(stations, count):
            legs = [_leg(table, a, b), _leg(table, b, c), _leg(table, c, a)]
            if any(leg is None for leg in legs):
                continue
            v1, v2, v3 = (leg[0] for leg in legs)
            bis = v1 * v2 * v3
            rel = sum((leg[1] / abs(leg[0])) ** 2 for leg in legs)
            sig = abs(bis) * math.sqrt(rel)
            out.append(
                dict(
                    time=table[0]["time"],
                    stations=(a, b, c),
                    bispectrum=bis,
                    sigma=sig,
                    cphase=math.atan2(bis.imag, bis.real),
                    sigma_cphase=sig / abs(bis),
                    u=[leg[2] for leg in legs],
                    v=[leg[3] for leg in legs],
                    sign=[leg[4] for leg in legs],
                )
            )
    return out


def _debias_force_nonzero(amp, sigma):
    if amp > sigma:
        return math.sqrt(amp**2 - sigma**2)
    if amp < sigma:
        return sigma
    return 0.0


def closure_amplitudes(records, order, count="min", debias=True):
    """C = |V_ab||V_cd| / (|V_ad||V_bc|) per quadrangle (a, b, c, d)."""
    out = []
    for table in _by_time(records):
        present = {r["t1"] for r in table} | {r["t2"] for r in table}
        stations = [s for s in order if s in present]
        if len(stations) < 4:
            continue
        for a, b, c, d in quadrangles(stations, count):
            legs = [_leg(table, a, b), _leg(table, c, d), _leg(table, a, d)]
            legs.append(_leg(table, b, c))
            if any(leg is None for leg in legs):
                continue
            amps, sig = [abs(leg[0]) for leg in legs], [leg[1] for leg in legs]
            if debias:
                amps = [_debias_force_nonzero(x, s) for x, s in zip(amps, sig)]
            isnr2 = [(s / x) ** 2 for x, s in zip(amps, sig)]
            camp = amps[0] * amps[1] / (amps[2] * amps[3])
            camp_sig = camp * math.sqrt(sum(isnr2))
            logcamp = sum(math.log(x) for x in amps[:2]) - sum(
                math.log(x) for x in amps[2:]
            )
            if debias:
                camp = camp / (1 + isnr2[2] + isnr2[3])
                logcamp += 0.5 * (isnr2[0] + isnr2[1] - isnr2[2] - isnr2[3])
            out.append(
                dict(
                    time=table[0]["time"],
                    stations=(a, b, c, d),
                    camp=camp,
                    sigma_camp=camp_sig,
                    logcamp=logcamp,
                    sigma_logcamp=math.sqrt(sum(isnr2)),
                    u=[leg[2] for leg in legs],
                    v=[leg[3] for leg in legs],
                )
            )
    return out


def debiased_amplitudes(vis, sigma):
    amp = np.abs(vis)
    return np.array(
        [math.sqrt(a * a - s * s) if a > s else 0.0 for a, s in zip(amp, sigma)]
    )
