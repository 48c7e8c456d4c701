"""Plain numpy, written from the formulas of docs/multifrequency.md: the image of a
multi-frequency model at a frequency, its gradient, and the spectral regularizers
(eht-imaging's `l2_spec`, `tv_spec` with the sign flipped)."""

import numpy as np


C = 299_792_458.0


def image_at(i0, alpha, beta, freq, freq0):
    """`I₀ (ν/ν₀)^(α + β ln(ν/ν₀))`, written as the power."""
    r = freq / freq0
    return i0 * r ** (alpha + beta * np.log(r))


def image_at_grad(i0, alpha, beta, freq, freq0, w):
    """Gradient of `Σ w I_ν` w.r.t. `(I₀, α, β)`."""
    x = np.log(freq / freq0)
    f = np.exp(alpha * x + beta * x * x)
    i = i0 * f
    return w * f, w * i * x, w * i * x * x


def stokes_at(stokes0, alpha, beta, alpha_pol, beta_pol, rm, freq, freq0):
    """The polarimetric image at `freq`, through eht-imaging's variables
    `(I, ρ, φ = 2χ, ψ)`: `ρ' = ρ₀/(1 − ρ₀)` scaled by the power law, `ρ = ρ'/(1+ρ')`,
    `φ = φ₀ + 2 RM (λ² − λ₀²)`, `ψ` kept."""
    i0, q0, u0, v0 = stokes0
    x = np.log(freq / freq0)
    i = i0 * np.exp(alpha * x + beta * x * x)
    rho0 = np.sqrt(q0**2 + u0**2 + v0**2) / i0
    phi0 = np.arctan2(u0, q0)
    psi = np.arcsin(v0 / (i0 * rho0))
    rhop = rho0 / (1 - rho0) * np.exp(alpha_pol * x + beta_pol * x * x)
    rho = rhop / (1 + rhop)
    phi = phi0 + 2 * rm * ((C / freq) ** 2 - (C / freq0) ** 2)
    return np.stack(
        [
            i,
            i * rho * np.cos(phi) * np.cos(psi),
            i * rho * np.sin(phi) * np.cos(psi),
            i * rho * np.sin(psi),
        ]
    )


def l2_spec(a, prior, normalise):
    out = np.sum((a - prior) ** 2)
    return out / a.size if normalise else out


def l2_spec_grad(a, prior, normalise):
    out = 2 * (a - prior)
    return out / a.size if normalise else out


def tv_spec(a, eps, norm):
    """`Σ sqrt((a[i+1,j]−a)² + (a[i,j+1]−a)² + ε) / norm`, zero beyond the edge."""
    pad = np.pad(a, ((0, 1), (0, 1)))
    d1 = pad[1:, :-1] - a
    d2 = pad[:-1, 1:] - a
    return np.sum(np.sqrt(d1**2 + d2**2 + eps)) / norm


def tv_spec_grad(a, eps, norm):
    ny, nx = a.shape
    pad = np.pad(a, ((0, 1), (0, 1)))
    d1 = pad[1:, :-1] - a
    d2 = pad[:-1, 1:] - a
    s = np.sqrt(d1**2 + d2**2 + eps)
    g = -(d1 + d2) / s
    # a[i, j] is the "next row" of pixel (i−1, j) and the "next column" of (i, j−1).
    g[1:, :] += d1[:-1, :] / s[:-1, :]
    g[:, 1:] += d2[:, :-1] / s[:, :-1]
    return g / norm
