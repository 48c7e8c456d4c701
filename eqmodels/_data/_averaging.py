"""Scan detection and coherent averaging (eht-imaging compatible estimators).

For `N` visibilities averaged together: `V = (1/N) Σ V_k`,
`σ = sqrt(Σ σ_k²) / N` (the noise of the unweighted mean), `(u, v)` the mean
position, `tint` the summed integration time. These are eht-imaging's
`avg_coherent` estimators (`err_type='predicted'`).
"""

import math

import numpy as np

from .._validation import host_real


#: 1960-01-01 0 h UTC as an MJD: eht-imaging's epoch for fixed-interval bins.
_MJD_1960 = 36934


def find_scans(time: np.ndarray, gap_s) -> tuple[np.ndarray, np.ndarray]:
    """Scans from gaps in the timestamps.

    **Returns:** `(edges, ids)`: `edges` `(n_scans, 2)` `[start, end]` hours and
    `ids` the scan index of every entry of `time`.
    """
    value = host_real(gap_s)
    if value is None or not (math.isfinite(value) and value > 0):
        raise ValueError(f"`gap` must be a positive number of seconds, got {gap_s!r}.")
    gap_s = value
    # float64 on the host: a float32 `time` (JAX without x64) is widened exactly.
    uniq, inverse = np.unique(np.asarray(time, np.float64), return_inverse=True)
    new_scan = np.concatenate([[False], np.diff(uniq) > gap_s / 3600.0])
    scan_of_unique = np.cumsum(new_scan)
    n_scans = int(scan_of_unique[-1]) + 1
    starts = np.array([uniq[scan_of_unique == s].min() for s in range(n_scans)])
    ends = np.array([uniq[scan_of_unique == s].max() for s in range(n_scans)])
    return np.stack([starts, ends], axis=1), scan_of_unique[inverse]


def _average(data, group_key: np.ndarray, time_of_group):
    """Average the rows of `data` sharing `(group_key, band, ant1, ant2)`.

    `time_of_group(times, keys)` gives the output time from the member times (per
    group) and the group key.
    """
    data._check_no_duplicates("averaging")
    a = data._arrays()
    keys = np.stack([group_key, a["band"], a["ant1"], a["ant2"]], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    ng = uniq.shape[0]
    count = np.bincount(inverse, minlength=ng).astype(np.float64)

    def mean(x):
        return np.bincount(inverse, weights=x, minlength=ng) / count

    if "corr" in a:  # polarimetric: each correlation over its unflagged entries
        vis_or_corr = _average_corr(a, inverse, ng)
    else:
        vis = mean(a["vis"].real) + 1j * mean(a["vis"].imag)
        sigma = (
            np.sqrt(np.bincount(inverse, weights=a["sigma"] ** 2, minlength=ng)) / count
        )
        vis_or_corr = {"vis": vis, "sigma": sigma}
    tmin = np.full(ng, np.inf)
    np.minimum.at(tmin, inverse, a["time"])
    time = time_of_group(tmin, uniq[:, 0])
    out = {
        "u": mean(a["u"]),
        "v": mean(a["v"]),
        **vis_or_corr,
        "time": time,
        "tint": np.bincount(inverse, weights=a["tint"], minlength=ng),
        "band": uniq[:, 1],
        "ant1": uniq[:, 2],
        "ant2": uniq[:, 3],
    }
    order = np.lexsort((out["ant2"], out["ant1"], out["band"], out["time"]))
    return data.replace(**{k: x[order] for k, x in out.items()})


def _average_corr(a, inverse, ng) -> dict:
    """Per correlation of a polarimetric data set: the same estimators over the
    group's unflagged entries of that correlation (`N` counts them); a correlation
    with none is flagged (NaN) in the averaged row."""
    corr, sig, flag = a["corr"], a["sigma"], a["flag"]
    out_c = np.full((ng, corr.shape[1]), np.nan + 1j * np.nan)
    out_s = np.full((ng, corr.shape[1]), np.nan)
    for k in range(corr.shape[1]):
        ok = ~flag[:, k]
        n_k = np.bincount(inverse, weights=ok.astype(np.float64), minlength=ng)
        has = n_k > 0
        safe = np.where(has, n_k, 1.0)
        c = np.where(ok, corr[:, k], 0.0)
        s2 = np.where(ok, sig[:, k], 0.0) ** 2
        re = np.bincount(inverse, weights=c.real, minlength=ng) / safe
        im = np.bincount(inverse, weights=c.imag, minlength=ng) / safe
        s = np.sqrt(np.bincount(inverse, weights=s2, minlength=ng)) / safe
        out_c[has, k] = (re + 1j * im)[has]
        out_s[has, k] = s[has]
    return {"corr": out_c, "sigma": out_s, "flag": ~np.isfinite(out_s)}


def scan_average(data, gap_s):
    """Coherent scan average; the output time is each group's first timestamp
    (as eht-imaging, so a baseline that starts late in a scan gets its own time)."""
    _, ids = find_scans(np.asarray(data.time), gap_s)
    return _average(data, ids, lambda tmin, key: tmin)


def time_average(data, seconds):
    """Coherent average over fixed bins of `seconds` aligned on 1960-01-01.

    The bins are computed in float64 whatever the dtype of `data.time`: seconds
    since 1960 are ~1.8e9, where float32 (JAX's default without x64) is spaced
    128 s apart and would merge unrelated records into one bin.
    """
    value = host_real(seconds)
    if value is None or not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"`seconds` must be a positive averaging interval, got {seconds!r}."
        )
    seconds = value
    offset_s = (data.mjd - _MJD_1960) * 86400.0
    time = np.asarray(data.time)
    t_s = offset_s + time.astype(np.float64) * 3600.0
    return _average(
        data,
        _bins(t_s, np.abs(np.spacing(time)).astype(np.float64) * 3600.0, seconds),
        lambda tmin, key: ((key + 0.5) * seconds - offset_s) / 3600.0,
    )


def _bins(t_s, ulp_s, seconds):
    """The bin (`⌊t / seconds⌋`) of each record time `t_s` (seconds since 1960).

    A uvfits file stores times in float32 parts (a resolution of ~5 ms), so a
    record stamped on a bin edge may be read a few ms either side of it. Times are
    therefore placed by their value rounded to 0.1 s, as eht-imaging does: a
    record within 0.05 s of an edge falls in the bin the edge starts. The rounded
    times are whole tenths of a second, counted as integers, so an interval that
    is too (37.5 s, 10 s) has exact edges. Intervals under 0.2 s, which such a
    rounding would blur, use the stored time, moved up by one unit in its last
    place (`ulp_s`) so that a time just below an edge through rounding of its own
    dtype still starts the bin.
    """
    if seconds < 0.2:
        return np.floor((t_s + ulp_s) / seconds).astype(np.int64)
    tenths = np.round(t_s * 10.0).astype(np.int64)
    per_bin = seconds * 10.0
    if abs(per_bin - round(per_bin)) < 1e-9 * per_bin:  # whole tenths: exact
        return tenths // int(round(per_bin))
    return np.floor(tenths / per_bin).astype(np.int64)
