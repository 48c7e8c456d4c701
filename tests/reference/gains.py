"""Plain-numpy references for station gains (no JAX, no code shared with the
package), with analytic gradients derived by hand.

A row with station pair `(a, b)` at time slot `t` (interval `k = slot[t]`) sees the
factor `f = g_a conj(g_b) = exp(la[k,a] + la[k,b] + i (ph[k,a] − ph[k,b]))`, so
`∂f/∂la[k,a] = ∂f/∂la[k,b] = f`, `∂f/∂ph[k,a] = i f`, `∂f/∂ph[k,b] = −i f`.
"""

import numpy as np


def gain_factor(la, ph, slot, stations, time_index):
    """`g_a conj(g_b)` per row (`stations` `(n, 2)`)."""
    k = np.asarray(slot)[np.asarray(time_index)]
    a, b = stations[:, 0], stations[:, 1]
    return np.exp(la[k, a] + la[k, b] + 1j * (ph[k, a] - ph[k, b]))


def _scatter(shape, k, a, b, ca, cb):
    out = np.zeros(shape)
    np.add.at(out, (k, a), ca)
    np.add.at(out, (k, b), cb)
    return out


def vis_chi2(a0, img, vis, sigma, la, ph, slot, stations, time_index):
    """`χ² = Σ w |f V̂ − V|² / (2N)`; returns `(value, ∂/∂img, ∂/∂la, ∂/∂ph)`."""
    x = np.ravel(img)
    vhat = a0 @ x
    f = gain_factor(la, ph, slot, stations, time_index)
    r = f * vhat - vis
    w = 1.0 / sigma**2
    n = r.size
    value = np.sum(w * np.abs(r) ** 2) / (2 * n)
    # ∂χ²/∂θ = Σ w Re(conj(r) ∂(f V̂)/∂θ) / N
    c = w * np.conj(r) / n
    g_img = np.real(a0.T @ (c * f)).reshape(np.shape(img))
    d_la = np.real(c * f * vhat)
    d_ph = np.real(c * 1j * f * vhat)
    k = np.asarray(slot)[np.asarray(time_index)]
    a, b = stations[:, 0], stations[:, 1]
    g_la = _scatter(la.shape, k, a, b, d_la, d_la)
    g_ph = _scatter(ph.shape, k, a, b, d_ph, -d_ph)
    return value, g_img, g_la, g_ph


def amp_chi2(a0, img, amp, sigma, la, ph, slot, stations, time_index):
    """`χ² = Σ w (|f V̂| − A)² / N`; returns `(value, ∂/∂img, ∂/∂la, ∂/∂ph)`."""
    x = np.ravel(img)
    vhat = a0 @ x
    f = gain_factor(la, ph, slot, stations, time_index)
    m = np.abs(f) * np.abs(vhat)
    w = 1.0 / sigma**2
    n = m.size
    value = np.sum(w * (m - amp) ** 2) / n
    c = 2 * w * (m - amp) / n
    # ∂|V̂|/∂x = Re(conj(V̂) A) / |V̂|; ∂m/∂la_a = ∂m/∂la_b = m; phases: 0.
    g_img = np.real(a0.T @ (c * np.abs(f) * np.conj(vhat) / np.abs(vhat)))
    k = np.asarray(slot)[np.asarray(time_index)]
    a, b = stations[:, 0], stations[:, 1]
    g_la = _scatter(la.shape, k, a, b, c * m, c * m)
    return value, g_img.reshape(np.shape(img)), g_la, np.zeros_like(ph)


def amplitude_prior(la, above, below):
    """`Σ (la / τ)²`, `τ = above` where `la > 0` else `below` (per station)."""
    tol = np.where(la > 0, above[None, :], below[None, :])
    return np.sum((la / tol) ** 2), 2 * la / tol**2


def phase_reference(ph, station, sigma, present=None):
    """`Σ_k (φ_ref,k / σ)²`: `φ_ref,k` the phase of `station` where it is present
    in interval `k`, else (or when `station` is None) the mean phase of the stations
    present there (`present`: `(k, s)` booleans, default all)."""
    w = np.ones_like(ph) if present is None else np.asarray(present, float)
    n = np.maximum(w.sum(axis=1), 1.0)
    mean = (w * ph).sum(axis=1) / n
    dmean = w / n[:, None]  # ∂ mean_k / ∂ φ_k,s
    if station is None:
        use_mean = np.ones(ph.shape[0], bool)
    else:
        use_mean = w[:, station] == 0
    ref = np.where(use_mean, mean, ph[:, station] if station is not None else 0.0)
    dref = np.where(use_mean[:, None], dmean, 0.0)
    if station is not None:
        dref[~use_mean, station] = 1.0
    return np.sum((ref / sigma) ** 2), 2 * (ref / sigma**2)[:, None] * dref


def smoothness_present(la, ph, amp_sigma, phase_sigma, present):
    """`smoothness` with `Δ` between each station's consecutive intervals *with
    data* (`present`), loop by loop: `(value, d/d la, d/d φ)`."""
    value = 0.0
    g_la = np.zeros_like(la)
    g_ph = np.zeros_like(ph)
    for s in range(la.shape[1]):
        ks = [k for k in range(la.shape[0]) if present[k, s]]
        for a, b in zip(ks[:-1], ks[1:]):
            da, dp = la[b, s] - la[a, s], ph[b, s] - ph[a, s]
            value += (da / amp_sigma) ** 2 + (2 * np.sin(dp / 2) / phase_sigma) ** 2
            g_la[b, s] += 2 * da / amp_sigma**2
            g_la[a, s] -= 2 * da / amp_sigma**2
            g_ph[b, s] += 2 * np.sin(dp) / phase_sigma**2
            g_ph[a, s] -= 2 * np.sin(dp) / phase_sigma**2
    return value, g_la, g_ph


def smoothness(la, ph, amp_sigma, phase_sigma):
    """`Σ (Δla/σ_a)² + (2 sin(Δφ/2)/σ_φ)²` over consecutive intervals."""
    da = np.diff(la, axis=0)
    dp = np.diff(ph, axis=0)
    value = np.sum((da / amp_sigma) ** 2) + np.sum(
        (2 * np.sin(dp / 2) / phase_sigma) ** 2
    )
    # d/dΔ (2 sin(Δ/2))² = 2 sin(Δ)
    ca = 2 * da / amp_sigma**2
    cp = 2 * np.sin(dp) / phase_sigma**2
    g_la = np.zeros_like(la)
    g_ph = np.zeros_like(ph)
    g_la[1:] += ca
    g_la[:-1] -= ca
    g_ph[1:] += cp
    g_ph[:-1] -= cp
    return value, g_la, g_ph
