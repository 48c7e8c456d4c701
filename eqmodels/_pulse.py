"""Pixel pulses: the Fourier transform of the shape of one pixel.

A pixel image is a sum of pulses centred on the pixel centres; its visibility is the
pixel DFT multiplied by the pulse's transform `P(u, v)`.
"""

import abc
import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float


def _xp(*arrays):
    """numpy for numpy inputs (host-side matrix builds stay in float64), else jnp."""
    return jnp if any(isinstance(a, jax.Array) for a in arrays) else np


class AbstractPulse(eqx.Module):
    """Base class of pixel pulses.

    Subclass it and implement `__call__(u, v, psize)` returning the real Fourier
    transform of one pixel, normalised to 1 at `u = v = 0`. It must work on numpy
    and on JAX arrays alike (the dense models build their matrix with numpy; the
    NUFFT evaluates the pulse under `jit`), so use `jnp`-compatible operations.

    **Even pulses.** The class attribute `even` (default `False`) declares
    `P(−u, −v) = P(u, v)` (true of every real pixel shape symmetric about its
    centre, and of eqmodels' own pulses). A shared transform merges the points
    `±(u, v)` only when the pulse declares it; an undeclared pulse's points are
    kept apart (an odd pulse would make a shared objective differ from its terms).
    """

    even: ClassVar[bool] = False

    @abc.abstractmethod
    def __call__(
        self, u: Float[ArrayLike, "*p"], v: Float[ArrayLike, "*p"], psize: float
    ) -> Float[Array, "*p"]:
        """**Arguments:** `u`, `v` in wavelengths; `psize` in radians.

        **Returns:** `P(u, v)`.
        """


class DeltaPulse(AbstractPulse):
    """A point per pixel: `P(u, v) = 1`."""

    even = True

    def __call__(self, u, v, psize):
        xp = _xp(u, v)
        dtype = xp.result_type(u, v, float)  # as the other pulses compute
        return xp.ones(np.broadcast_shapes(np.shape(u), np.shape(v)), dtype)


class BoxPulse(AbstractPulse):
    """A square top-hat pixel: `P = sinc(u·psize) · sinc(v·psize)`."""

    even = True

    def __call__(self, u, v, psize):
        xp = _xp(u, v)
        return xp.sinc(u * psize) * xp.sinc(v * psize)


class TrianglePulse(AbstractPulse):
    """A triangle (bilinear) pixel, the default: `P = sinc(u·psize)² · sinc(v·psize)²`
    with `sinc(t) = sin(πt)/(πt)`."""

    even = True

    def __call__(self, u, v, psize):
        xp = _xp(u, v)
        return (xp.sinc(u * psize) * xp.sinc(v * psize)) ** 2


class GaussianPulse(AbstractPulse):
    """A circular Gaussian pixel of full width at half maximum `fwhm` pixels:
    `P = exp(-π² (fwhm·psize)² (u² + v²) / (4 ln 2))`.

    eht-imaging's `GaussPulse2D` is narrower: σ = psize/3, i.e.
    `GaussianPulse(fwhm=math.sqrt(8 * math.log(2)) / 3)` (≈ 0.785 pixels), which
    equals it to rounding; the default (`fwhm=1`) gives 0.71 of its amplitude
    at `(u, v) = (0.5/psize, 0)` and half of it at `u = v = 0.5/psize`."""

    even = True

    fwhm: float = eqx.field(static=True, default=1.0, converter=float)

    def __check_init__(self):
        if not (math.isfinite(self.fwhm) and self.fwhm > 0):
            raise ValueError(f"`fwhm` must be > 0 (in pixels), got {self.fwhm}.")

    def __call__(self, u, v, psize):
        w = self.fwhm * psize
        xp = _xp(u, v)
        return xp.exp(-(math.pi**2) * w * w * (u * u + v * v) / (4.0 * math.log(2.0)))
