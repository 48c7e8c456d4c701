"""Convergence diagnostics of MCMC draws: split R̂ and the effective sample size
(Gelman et al., *Bayesian Data Analysis* 3rd ed., §11.4–11.5; Stan's estimators,
without rank normalisation), in numpy on the host."""

import numpy as np


def _split(x: np.ndarray) -> np.ndarray:
    """`(chains, draws, ...)` → `(2·chains, draws // 2, ...)`: each chain's two
    halves (an odd middle draw dropped)."""
    c, d = x.shape[:2]
    h = d // 2
    if h < 2:
        raise ValueError(f"diagnostics need at least 4 draws per chain, got {d}.")
    return np.concatenate([x[:, :h], x[:, d - h :]], axis=0)


def _variances(x):
    n = x.shape[1]
    w = x.var(axis=1, ddof=1).mean(axis=0)
    b_over_n = x.mean(axis=1).var(axis=0, ddof=1)
    var_plus = (n - 1) / n * w + b_over_n
    return w, var_plus


def split_rhat(x: np.ndarray) -> np.ndarray:
    """Split R̂ of draws `x` of shape `(chains, draws, ...)`: `sqrt(var⁺/W)` over
    the chains' halves, `W` the mean within-half variance and
    `var⁺ = (n−1)/n W + B/n`. Near 1 (below 1.01) when the chains agree."""
    w, var_plus = _variances(_split(np.asarray(x, float)))
    return np.asarray(np.sqrt(var_plus / w))


def ess(x: np.ndarray) -> np.ndarray:
    """The effective sample size of draws `x` of shape `(chains, draws, ...)`:
    `M n / τ`, `τ = −1 + 2 Σ_k P_k` with `P_k = ρ_{2k} + ρ_{2k+1}` the paired
    autocorrelations (combined over the split chains as Stan does), summed while
    positive and made monotone (Geyer's initial monotone sequence). Stan and
    ArviZ (`ess(method="mean")`) add one more autocorrelation term where the sum
    stops; this estimate does not, and is 0.3–2 % off theirs at 1,000 draws per
    chain (up to ~10 % at 50)."""
    s = _split(np.asarray(x, float))
    m, n = s.shape[:2]
    w, var_plus = _variances(s)
    c = s - s.mean(axis=1, keepdims=True)
    size = 2 ** int(np.ceil(np.log2(2 * n)))
    f = np.fft.rfft(c, n=size, axis=1)
    acov = np.fft.irfft(f * np.conj(f), n=size, axis=1)[:, :n] / n  # (m, n, ...)
    rho = 1.0 - (w - acov.mean(axis=0)) / var_plus  # (n, ...)
    rho = rho.reshape(n, -1)
    out = np.empty(rho.shape[1])
    for j in range(rho.shape[1]):
        r = rho[:, j].copy()
        r[0] = 1.0  # as Stan: ρ_0 = 1
        pairs = r[: 2 * (n // 2)].reshape(-1, 2).sum(axis=1)
        neg = np.nonzero(pairs < 0)[0]
        pairs = pairs[: neg[0]] if neg.size else pairs
        pairs = np.minimum.accumulate(pairs)
        tau = -1.0 + 2.0 * pairs.sum()
        out[j] = m * n / max(tau, 1.0 / np.log10(m * n))
    return out.reshape(s.shape[2:])
