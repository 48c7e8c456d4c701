"""eht-imaging as an optional oracle for the polarimetric regularizers: each one's
value equals `polregularizer(..., stype)` (rtol 1e-9) on an M87-like polarized
image, and our gradient equals central finite differences of eht-imaging's value.

eht-imaging (GPLv3) is only *called* here, never copied. Its `polregularizer`
returns the penalty to minimise (the entropies `sm`, `shw`, … with their sign
flipped), as ours do. It works on `(I, ρ, φ, ψ)`: `ρ = |(Q, U, V)| / I`,
`φ = arg(Q + iU)` (twice the EVPA), `ψ = atan2(V, |Q + iU|)`; the conversion is
below. Deliberate difference: our `PolEntropy` adds `ε = 1e-16` to `m²` (finite at
zero polarization); it changes nothing at this tolerance.
"""

import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose


pytestmark = pytest.mark.slow  # the eht-imaging oracle

ehtim = pytest.importorskip("ehtim")
with contextlib.redirect_stdout(io.StringIO()):
    import ehtim.imaging.pol_imager_utils as piu

# ny != nx: eht-imaging's (xdim, ydim) order and row orientation are checked.
GRID = em.ImageGrid(14, 16, em.uas_to_rad(3.0))
FLUX = 1.0
VFLUX = -0.012
BEAM = em.uas_to_rad(20.0)
RTOL = 1e-9


def _m87_like(seed=0):
    """I ~ 1 Jy in total, m in 0.1–0.3, EVPA anywhere, |v| <= 0.02."""
    rng = np.random.default_rng(seed)
    i = rng.uniform(0.2, 1.0, GRID.shape)
    i *= FLUX / i.sum()
    m = rng.uniform(0.1, 0.3, GRID.shape)
    chi = rng.uniform(0.0, np.pi, GRID.shape)
    v = rng.uniform(-0.02, 0.02, GRID.shape)
    return np.stack([i, i * m * np.cos(2 * chi), i * m * np.sin(2 * chi), i * v])


def _imarr(stokes):
    """eht-imaging's `(I, ρ, φ, ψ)`, each flattened `(ny·nx,)` (row-major, row 0
    first, as its image vectors)."""
    i, q, u, v = (p.ravel() for p in stokes)
    p = np.hypot(q, u)
    rho = np.sqrt(q**2 + u**2 + v**2) / i
    return np.stack([i, rho, np.arctan2(u, q), np.arctan2(v, p)])


def _ehtim(stype, norm):
    mask = np.ones(GRID.npix, bool)

    def value(stokes):
        return piu.polregularizer(
            _imarr(stokes), None, mask, FLUX, 0.3 * FLUX, VFLUX, GRID.nx, GRID.ny,
            GRID.psize, stype, norm_reg=norm, beam_size=BEAM,
        )  # fmt: skip

    return value


def _ours(stype, norm):
    n = dict(normalise=norm)
    return {
        "msimple": em.PolEntropy(flux=FLUX, **n),
        "hw": em.HolographicEntropy(flux=FLUX, **n),
        "ptv": em.PolTV(GRID, flux=FLUX, beam=BEAM, **n),
        "l1v": em.StokesVL1(vflux=VFLUX, **n),
        "l2v": em.StokesVL2(vflux=VFLUX, **n),
        "vtv": em.StokesVTV(GRID, vflux=VFLUX, beam=BEAM, **n),
        "vtv2": em.StokesVTSV(GRID, vflux=VFLUX, beam=BEAM, **n),
        "vflux": em.StokesVFlux(VFLUX, **n),
    }[stype]


CASES = [(s, n) for s in piu.REGULARIZERS_POL for n in (False, True)]


def test_every_ehtim_regularizer_is_covered():
    assert set(piu.REGULARIZERS_POL) == {
        "msimple", "hw", "ptv", "l1v", "l2v", "vtv", "vtv2", "vflux"
    }  # fmt: skip


@pytest.mark.parametrize("stype,norm", CASES, ids=[f"{s}-{n}" for s, n in CASES])
def test_value_and_gradient_equal_ehtim(stype, norm):
    stokes = _m87_like(1)
    reg = _ours(stype, norm)
    assert reg.report_name == stype
    ref = _ehtim(stype, norm)
    val, grad = jax.jit(jax.value_and_grad(lambda x: reg(x)))(jnp.asarray(stokes))
    with np.errstate(all="ignore"):
        want = ref(stokes)
        # Central differences of eht-imaging's value along random directions
        # (step 1e-6 of each plane's scale; the image stays physical).
        rng = np.random.default_rng(2)
        scale = np.abs(stokes).max(axis=(1, 2))[:, None, None]
        h = 1e-6
        for _ in range(3):
            d = rng.normal(size=stokes.shape) * scale
            fd = (ref(stokes + h * d) - ref(stokes - h * d)) / (2 * h)
            assert_allclose(np.sum(np.asarray(grad) * d), fd, rtol=1e-6, err=stype)
    assert_allclose(val, want, rtol=RTOL, err=stype)
