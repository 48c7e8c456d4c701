"""Plain-numpy references for the polarimetric regularizers, written from the
formulas on the classes (eht-imaging's `polregularizer` values, in Stokes
variables), each returning `(penalty, ∂penalty/∂stokes)` with the gradient
`(4, ny, nx)` (planes I, Q, U, V) derived by hand.

`norm` is the divisor applied when normalisation is on (1 otherwise). Pixels must
have I > 0 (the entropies), m < 1 (`hw`)."""

import numpy as np

from tests.reference.regularizers import _adjoint_diffs, _diffs, flux, tsv, tv


def _grad(shape, **planes):
    out = np.zeros((4, *shape))
    for k, g in planes.items():
        out["iquv".index(k)] = g
    return out


def msimple(stokes, eps=1e-16, norm=1.0):
    """Σ ½ I ln(m² + ε), m² = (Q² + U²)/I²;
    ∂/∂I = ½ ln(m² + ε) − m²/(m² + ε), ∂/∂Q = Q / (I (m² + ε)) (U alike)."""
    i, q, u, _ = stokes
    m2 = (q**2 + u**2) / i**2
    s = m2 + eps
    value = np.sum(0.5 * i * np.log(s))
    grad = _grad(i.shape, i=0.5 * np.log(s) - m2 / s, q=q / (i * s), u=u / (i * s))
    return value / norm, grad / norm


def hw(stokes, norm=1.0):
    """Σ I [(1+m)/2 ln((1+m)/2) + (1−m)/2 ln((1−m)/2)], m = |P|/I; with h the
    bracket, h'(m) = artanh m: ∂/∂I = h − m artanh m,
    ∂/∂Q = (artanh(m)/m) Q/I (→ Q/I at m = 0; U alike)."""
    i, q, u, _ = stokes
    m = np.sqrt(q**2 + u**2) / i
    a, b = (1 + m) / 2, (1 - m) / 2
    h = a * np.log(a) + b * np.log(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(m > 0, np.arctanh(m) / m, 1.0)
    grad = _grad(i.shape, i=h - m * np.arctanh(m), q=ratio * q / i, u=ratio * u / i)
    return np.sum(i * h) / norm, grad / norm


def ptv(stokes, eps=0.0, norm=1.0):
    """Σ sqrt(|ΔP_row|² + |ΔP_col|² + ε) over forward differences (zero beyond the
    last row / column); ∂/∂ΔQ = ΔQ / sqrt(...) (U alike)."""
    qr, qc = _diffs(stokes[1])
    ur, uc = _diffs(stokes[2])
    s = np.sqrt(qr**2 + qc**2 + ur**2 + uc**2 + eps)
    grad = _grad(
        s.shape, q=_adjoint_diffs(qr / s, qc / s), u=_adjoint_diffs(ur / s, uc / s)
    )
    return np.sum(s) / norm, grad / norm


def _on_v(fn, stokes, *args):
    value, g = fn(stokes[3], *args)
    return value, _grad(stokes.shape[1:], v=g)


def l1v(stokes, norm=1.0):
    """Σ |V|; ∂/∂V = sign V."""
    return np.sum(np.abs(stokes[3])) / norm, _grad(
        stokes.shape[1:], v=np.sign(stokes[3]) / norm
    )


def l2v(stokes, norm=1.0):
    """Σ V²; ∂/∂V = 2V."""
    return np.sum(stokes[3] ** 2) / norm, _grad(
        stokes.shape[1:], v=2 * stokes[3] / norm
    )


def vtv(stokes, eps=0.0, norm=1.0):
    """TV of the V plane (`tests.reference.regularizers.tv`)."""
    return _on_v(tv, stokes, eps, norm)


def vtv2(stokes, norm=1.0):
    """TSV of the V plane (`tests.reference.regularizers.tsv`)."""
    return _on_v(tsv, stokes, norm)


def vflux(stokes, target, norm=1.0):
    """(Σ V − F_V)²; ∂/∂V = 2 (Σ V − F_V)."""
    return _on_v(flux, stokes, target, norm)
