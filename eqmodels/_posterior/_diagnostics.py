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
    """The effective sample size of draws `x` of shape `(chains, draws, ...)`,
    Stan's estimator (its reference manual, "Effective sample size"; ArviZ's
    `ess(method="mean")`) over the split chains: `M n / τ` with
    `τ = −1 + 2 Σ_{t ≤ T} ρ_t + ρ_{T+1}`, the autocorrelations
    `ρ_t = 1 − (W − mean acov_t) / var⁺` combined over the chains, summed in
    pairs `ρ_{2k} + ρ_{2k+1}` while positive (Geyer's initial positive
    sequence, stopping at `T`) and made monotone (Geyer's initial monotone
    sequence), plus the next even autocorrelation `ρ_{T+1}` when it is
    positive (Stan's improved estimate for antithetic chains); `τ` at least
    `1 / log10(M n)`."""
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
        out[j] = m * n / _tau(rho[:, j], m * n)
    return out.reshape(s.shape[2:])


def _tau(r: np.ndarray, total: int) -> float:
    """Stan's integrated autocorrelation time of the combined autocorrelations
    `r` (`r[t]` at lag `t`; `r[0]` is taken as 1)."""
    n = r.size
    t_hat = np.zeros(n + 1)
    even, odd = 1.0, r[1]
    t_hat[0], t_hat[1] = even, odd
    t = 1
    while t < n - 3 and even + odd > 0:  # Geyer's initial positive sequence
        even, odd = r[t + 1], r[t + 2]
        if even + odd >= 0:
            t_hat[t + 1], t_hat[t + 2] = even, odd
        t += 2
    last = t - 2
    if even > 0:  # the improved estimate: the next even autocorrelation
        t_hat[last + 1] = even
    t = 1
    while t <= last - 2:  # Geyer's initial monotone sequence
        if t_hat[t + 1] + t_hat[t + 2] > t_hat[t - 1] + t_hat[t]:
            t_hat[t + 1] = t_hat[t + 2] = 0.5 * (t_hat[t - 1] + t_hat[t])
        t += 2
    tau = -1.0 + 2.0 * t_hat[: last + 1].sum() + t_hat[last + 1]
    return max(tau, 1.0 / np.log10(total))
