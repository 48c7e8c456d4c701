"""Plain-numpy references for the forward model and the visibility chi², written
from CONVENTIONS.md (no JAX, no code shared with the package)."""

import numpy as np


def pixel_centres(ny, nx, psize):
    """x[ix] = (nx/2 - 1/2 - ix) psize, y[iy] = (ny/2 - 1/2 - iy) psize."""
    x = (nx / 2.0 - 0.5 - np.arange(nx)) * psize
    y = (ny / 2.0 - 0.5 - np.arange(ny)) * psize
    return x, y


def pulse(kind, u, v, psize, fwhm=1.0):
    if kind == "delta":
        return np.ones_like(u)
    if kind == "box":
        return np.sinc(u * psize) * np.sinc(v * psize)
    if kind == "triangle":
        return np.sinc(u * psize) ** 2 * np.sinc(v * psize) ** 2
    if kind == "gaussian":
        w = fwhm * psize
        return np.exp(-(np.pi**2) * w**2 * (u**2 + v**2) / (4 * np.log(2)))
    raise ValueError(kind)


def dft_matrix(ny, nx, psize, u, v, kind="triangle"):
    """A[k, p] = P(u_k, v_k) exp(+2πi (u_k x_p + v_k y_p)), p row-major over (iy, ix),
    complex128, built with an explicit loop over pixels (slow, obviously right)."""
    u = np.ravel(u).astype(np.float64)
    v = np.ravel(v).astype(np.float64)
    x, y = pixel_centres(ny, nx, psize)
    a = np.empty((u.size, ny * nx), np.complex128)
    for iy in range(ny):
        for ix in range(nx):
            a[:, iy * nx + ix] = np.exp(2j * np.pi * (u * x[ix] + v * y[iy]))
    return pulse(kind, u, v, psize)[:, None] * a


def vis_chi2(a, img, vis, sigma):
    """χ² = Σ |A x − V|² / σ² / (2N) and its analytic gradient w.r.t. the real
    image x: ∂χ²/∂x = Re(A^H (w r)) / N with r = A x − V, w = 1/σ²."""
    x = np.ravel(img)
    r = a @ x - np.ravel(vis)
    w = 1.0 / np.ravel(sigma) ** 2
    n = r.size
    value = np.sum(w * np.abs(r) ** 2) / (2 * n)
    grad = np.real(a.conj().T @ (w * r)) / n
    return value, grad.reshape(np.shape(img))
