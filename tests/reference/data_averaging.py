"""Plain-numpy coherent averaging and scan finding from the definitions, with
Python loops (independent of eqmodels' vectorised implementation)."""

import numpy as np


def find_scans(times, gap_hours):
    """List of (start, end) for runs of sorted distinct times separated by gaps
    larger than `gap_hours`."""
    uniq = sorted(set(float(t) for t in times))
    scans = [[uniq[0], uniq[0]]]
    for prev, cur in zip(uniq[:-1], uniq[1:]):
        if cur - prev > gap_hours:
            scans.append([cur, cur])
        else:
            scans[-1][1] = cur
    return scans


def scan_average(time, ant1, ant2, u, v, vis, sigma, gap_hours):
    """Dict (scan, ant1, ant2) -> (time, u, v, vis, sigma): unweighted mean,
    sigma = sqrt(sum sigma^2)/N, time = first time of the group."""
    scans = find_scans(time, gap_hours)
    groups = {}
    for k in range(len(time)):
        s = next(i for i, (a, b) in enumerate(scans) if a <= time[k] <= b)
        groups.setdefault((s, int(ant1[k]), int(ant2[k])), []).append(k)
    out = {}
    for key, ks in groups.items():
        n = len(ks)
        out[key] = (
            min(time[k] for k in ks),
            sum(u[k] for k in ks) / n,
            sum(v[k] for k in ks) / n,
            sum(vis[k] for k in ks) / n,
            np.sqrt(sum(sigma[k] ** 2 for k in ks)) / n,
        )
    return out
