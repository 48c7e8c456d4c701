"""eht-imaging as an optional oracle for the polarimetric data terms, on a real M87
2017 polarimetric file (04-11 lo band, HOPS, scan-averaged with eht-imaging): each
term's value equals eht-imaging's `polchisq(..., ttype='direct')` (rtol 1e-9) built
from the rows of its `chisqdata_pvis` / `_m` / `_vvis`; our `from_data` on the same
observation gives the same value; our gradients equal central finite differences of
eht-imaging's values in random directions.

eht-imaging (GPLv3) is only *called* here, never copied. It keeps rows whose data
are NaN (flagged RL / LR / RR on this file) and its χ² is then NaN; we drop them,
so it is compared on the rows with finite data and σ. Its image variables are
`(I, ρ, φ, ψ)` (`P = I ρ cos ψ e^{iφ}`, `V = I ρ sin ψ`); a Stokes image is
converted to them exactly.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose, float64_uvfits_copy, quiet


pytestmark = pytest.mark.slow  # the eht-imaging oracle on a real file

ehtim = pytest.importorskip("ehtim")
with quiet():
    import ehtim.imaging.pol_imager_utils as pu

FILE = "eht/m87_2017_pol/hops_data/April11/SR2_M87_2017_101_lo_hops_ALMArot.uvfits"
RTOL = 1e-9
NPIX, FOV_UAS = 16, 100.0
KINDS = {
    "pvis": (em.PolVisChi2, pu.chisqdata_pvis, ["u", "v", "pvis", "psigma"], True),
    "m": (em.FracPolChi2, pu.chisqdata_m, ["u", "v", "m", "msigma"], True),
    "vvis": (em.StokesVChi2, pu.chisqdata_vvis, ["u", "v", "vvis", "vsigma"], False),
}


@pytest.fixture(scope="module")
def setup(shared_data):
    path = shared_data / FILE
    if not path.is_file():
        pytest.skip(f"{FILE} is not present")
    with quiet():
        obs = ehtim.obsdata.load_uvfits(str(path), polrep="circ")
        obs = obs.avg_coherent(0.0, scan_avg=True).switch_polrep("stokes")
        prior = ehtim.image.make_empty(
            NPIX, FOV_UAS * ehtim.RADPERUAS, obs.ra, obs.dec, rf=obs.rf,
            source=obs.source, mjd=obs.mjd,
        )  # fmt: skip
    assert prior.pulse is ehtim.observing.pulses.trianglePulse2D  # = DirectFT's
    grid = em.ImageGrid(NPIX, NPIX, prior.psize)
    return obs, prior, grid


def stokes_image(grid, seed=0):
    """A random polarized image `(4, ny, nx)`, 0.6 Jy, fractional polarization up
    to 0.5 in random directions on the Poincaré sphere."""
    rng = np.random.default_rng(seed)
    i = 0.6 * rng.uniform(0.2, 1.0, grid.shape)
    i /= i.sum()
    frac = rng.uniform(0.05, 0.5, grid.shape)
    phi = rng.uniform(-np.pi, np.pi, grid.shape)  # 2 EVPA
    psi = rng.uniform(-0.5, 0.5, grid.shape)  # circular
    return np.stack(
        [
            i,
            i * frac * np.cos(psi) * np.cos(phi),
            i * frac * np.cos(psi) * np.sin(phi),
            i * frac * np.sin(psi),
        ]
    )


def ehtim_imarr(stokes):
    """eht-imaging's `(I, ρ, φ, ψ)` pixel vectors of a Stokes image."""
    i, q, u, v = (p.ravel() for p in stokes)
    lin = np.hypot(q, u)
    return np.array(
        [i, np.sqrt(lin**2 + v**2) / i, np.arctan2(u, q), np.arctan2(v, lin)]
    )


def ehtim_rows(obs, prior, kind):
    """eht-imaging's rows for `kind` with finite data and σ: `(u, v, data, sigma,
    A)`; `u`, `v` unpacked as its `chisqdata_*` unpacks them (the same call, the
    same order: checked on the data)."""
    _, chisqdata, fields, conj = KINDS[kind]
    with quiet():
        data, sigma, a = chisqdata(obs, prior, [])
        table = obs.unpack(fields, conj=conj)
    np.testing.assert_array_equal(table[fields[2]], data)
    keep = np.isfinite(data) & np.isfinite(sigma)
    assert 0.5 * data.size < keep.sum() < data.size  # this file has flagged rows
    return table["u"][keep], table["v"][keep], data[keep], sigma[keep], a[keep]


class EhtimStokesRows:
    """eht-imaging's Stokes table of an observation read as a polarimetric data set
    (`u`, `v`, `stokes()` as `PolVisData` gives them: I, Q, U, V and their σ,
    NaN where flagged)."""

    def __init__(self, obs):
        d = obs.data
        self.u, self.v = d["u"], d["v"]
        self._vis = np.stack([d["vis"], d["qvis"], d["uvis"], d["vvis"]], axis=1)
        self._sigma = np.stack(
            [d["sigma"], d["qsigma"], d["usigma"], d["vsigma"]], axis=1
        )

    def stokes(self):
        return self._vis, self._sigma


@pytest.mark.parametrize("kind", list(KINDS))
def test_value_equals_ehtim_polchisq(setup, kind):
    obs, prior, grid = setup
    u, v, data, sigma, a = ehtim_rows(obs, prior, kind)
    x = stokes_image(grid)
    with quiet():
        want = pu.polchisq(ehtim_imarr(x), a, data, sigma, kind, ttype="direct")
    term = KINDS[kind][0](em.DirectFT(grid, u, v), data, sigma)
    assert_allclose(jax.jit(lambda y: term(y))(jnp.asarray(x)), want, rtol=RTOL)
    # `from_data` builds the same rows from the observation's Stokes table.
    built = KINDS[kind][0].from_data(EhtimStokesRows(obs), grid)
    assert built.rows == data.size
    assert_allclose(jax.jit(lambda y: built(y))(jnp.asarray(x)), want, rtol=RTOL)


@pytest.mark.parametrize("kind", list(KINDS))
def test_gradient_equals_finite_differences_of_ehtim(setup, kind):
    obs, prior, grid = setup
    u, v, data, sigma, a = ehtim_rows(obs, prior, kind)
    term = KINDS[kind][0](em.DirectFT(grid, u, v), data, sigma)
    x = stokes_image(grid, seed=1)
    grad = np.asarray(jax.jit(jax.grad(lambda y: term(y)))(jnp.asarray(x)))

    def ehtim_value(y):
        with quiet():
            return pu.polchisq(ehtim_imarr(y), a, data, sigma, kind, ttype="direct")

    rng = np.random.default_rng(2)
    h = 1e-4 * np.abs(x).max()
    for _ in range(3):
        # Directions that keep the image physical over the step (|d| small).
        d = rng.normal(size=x.shape)
        # Fourth-order central differences: m is far from quadratic where Î is
        # small (|Î| reaches 0.5 % of the flux on these baselines).
        f = [ehtim_value(x + k * h * d) for k in (-2, -1, 1, 2)]
        fd = (8 * (f[2] - f[1]) - (f[3] - f[0])) / (12 * h)
        assert_allclose(np.sum(grad * d), fd, rtol=1e-7)


@pytest.mark.parametrize("kind", list(KINDS))
def test_from_data_of_load_uvfits_equals_ehtim_polchisq(
    shared_data, setup, kind, tmp_path
):
    """The whole path on the raw (unaveraged) file: our reader's `PolVisData`,
    `from_data`, the χ² — against eht-imaging's reader, `chisqdata_*` and
    `polchisq` on its rows with finite data (a float64 copy of the file:
    eht-imaging converts a float32 file's correlations to Stokes in float32)."""
    _, prior, grid = setup
    path = tmp_path / "f64.uvfits"
    float64_uvfits_copy(shared_data / FILE, path)
    with quiet():
        obs = ehtim.obsdata.load_uvfits(str(path), polrep="circ")
        obs = obs.switch_polrep("stokes")
    _, _, data, sigma, a = ehtim_rows(obs, prior, kind)
    x = stokes_image(grid, seed=3)
    with quiet():
        want = pu.polchisq(ehtim_imarr(x), a, data, sigma, kind, ttype="direct")
    ours = em.load_uvfits(path, polarization="full")
    term = KINDS[kind][0].from_data(ours, grid)
    assert term.rows == data.size
    assert_allclose(jax.jit(lambda y: term(y))(jnp.asarray(x)), want, rtol=RTOL)
