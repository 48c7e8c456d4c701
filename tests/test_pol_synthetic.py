"""The issue's synthetic check, end to end: a polarized m-ring observed with the
2017 EHT coverage of M87, 5 % D-terms, R/L gain errors, field rotation (removed
after the leakage, as in the released files) and thermal noise; a joint
Levenberg-Marquardt solve of the m-ring and the Jones matrices recovers the
D-terms within their errors and β₂ within its noise (pulls from the Fisher matrix
of the data and the priors, printed)."""

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em


pytestmark = pytest.mark.slow  # a joint solve over ~700 parameters

GRID = em.ImageGrid(32, 32, em.uas_to_rad(5.0))
M87 = dict(ra=187.7059, dec=12.3911, mjd=57854)
BETA2 = 0.12 - 0.15j
MOUNTS = {"AA": "nasmyth_l", "SM": "nasmyth_r", "JC": "nasmyth_r", "LM": "nasmyth_r"}


def mring(beta2, flux=0.6, beta_v=0.0):
    return em.PolMRingImage(
        GRID, flux, em.uas_to_rad(42.0), em.uas_to_rad(12.0),
        beta_i=[0.2 * np.exp(-2.0j)], beta_p=[0, 0.02, 0.01, 0.0, beta2],
        beta_v=[beta_v],
    )  # fmt: skip


def positions(params, select):
    """The positions in the flat parameter vector of the leaves `select` picks."""
    marker = jax.tree.map(jnp.zeros_like, params)
    leaves = select(marker)
    marker = eqx.tree_at(
        select, marker, tuple(jnp.full_like(x, k + 1) for k, x in enumerate(leaves))
    )
    flat, _ = jax.flatten_util.ravel_pytree(marker)
    return [np.flatnonzero(np.asarray(flat) == k + 1) for k in range(len(leaves))]


def test_joint_solve_recovers_dterms_and_beta2():
    rng = np.random.default_rng(7)
    names = em.EHT2017.names
    dterms = 0.05 * (
        rng.normal(size=(len(names), 2)) + 1j * rng.normal(size=(len(names), 2))
    )
    truth = mring(BETA2)
    data = em.observe(
        truth, GRID, em.EHT2017, **M87, times=np.linspace(0.5, 7.5, 15),
        dterms=dterms, mounts=MOUNTS, gain_sigma=0.03, seed=3, add_noise=True,
    )  # fmt: skip
    start = em.StationJones.from_data(data, "track", field_rotation_corrected=True)
    corr = em.JonesCorrected(em.CorrelationChi2.from_data(data, GRID), start)
    n = int(corr.n_rows)
    sigma_d = 0.05
    objective = (
        corr
        + em.DTermPrior(start, sigma_d) / (2 * n)
        + em.JonesGainPrior(start, 0.05, phase_sigma=0.01) / (2 * n)
    )
    joint = em.WithGains(objective)
    model = (mring(0.0, flux=0.5), start)
    sol = em.solve(joint, model, "levenberg-marquardt", max_steps=100)
    img_fit, jones_fit = sol.model

    params, static = eqx.partition(sol.model, em.is_real_float_array)
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    jac = jax.jacfwd(lambda p: joint.residuals(eqx.combine(unravel(p), static)))(flat)
    fisher = 2 * n * np.asarray(jac.T @ jac)
    # Parameters nothing constrains (a station that never sees M87, SP) drop out.
    free = np.diag(fisher) > 0
    sig = np.full(flat.size, np.inf)
    sig[free] = np.sqrt(np.diag(np.linalg.inv(fisher[np.ix_(free, free)])))
    fit = np.asarray(flat)

    where_re, where_im, where_bp = positions(
        params, lambda m: (m[1].d_real, m[1].d_imag, m[0].beta_p)
    )
    seen = free[where_re]
    print(f"stations {data.stations_present()}, constrained D-terms {seen.sum()}")
    assert seen.sum() >= 10
    d_fit = fit[where_re] + 1j * fit[where_im]
    d_true = dterms.reshape(-1)
    pulls = np.concatenate(
        [
            (d_fit.real - d_true.real)[seen] / sig[where_re][seen],
            (d_fit.imag - d_true.imag)[seen] / sig[where_im][seen],
        ]
    )
    # β₂ is the last (m = 2) row of beta_p, (real, imaginary).
    b2 = fit[where_bp[-2:]]
    b2_pull = (b2 - [BETA2.real, BETA2.imag]) / sig[where_bp[-2:]]
    print(
        f"D-term pulls: rms {np.sqrt(np.mean(pulls**2)):.2f}, max "
        f"{np.abs(pulls).max():.2f}; σ_d {np.median(sig[where_re][seen]):.4f}; "
        f"β₂ fit {complex(*b2):.4f} (true {BETA2}), pulls {np.round(b2_pull, 2)}"
    )
    assert np.all(np.abs(pulls) < 4.0)
    assert 0.4 < np.sqrt(np.mean(pulls**2)) < 2.0
    assert np.all(np.abs(b2_pull) < 4.0)
    # β₂ of the fitted image (Palumbo et al. 2020, over an annulus) too.
    got = complex(np.asarray(em.beta_m(img_fit, GRID, 2, r_min=em.uas_to_rad(10.0))))
    want = complex(np.asarray(em.beta_m(truth, GRID, 2, r_min=em.uas_to_rad(10.0))))
    assert abs(got - want) < 4 * np.hypot(*sig[where_bp[-2:]]) + 1e-3
