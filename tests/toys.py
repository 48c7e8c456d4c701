"""Users' modules shared by several tests: subclasses of eqmodels' bases written as
a user would (in a module outside `eqmodels`)."""

import jax
import jax.numpy as jnp
import numpy as np

import eqmodels as em


class FluxDensityChi2(em.AbstractDataTerm):
    """A user term written only as `chi2_from_vis`: χ² of the total-intensity
    visibility amplitudes' squared deviation, `(1/N) Σ w (|V̂|² − P)²`."""

    forward: em.AbstractForwardModel | None
    power: jax.Array
    weight: jax.Array
    n_rows: jax.Array

    row_fields = ("power", "weight")

    def __init__(self, forward, power, sigma):
        self.forward = forward
        self.power = jnp.asarray(power)
        self.weight = jnp.asarray(1.0 / np.asarray(sigma) ** 2)
        self.n_rows = em.n_rows_leaf(len(power))

    def chi2_from_vis(self, vis):
        d = jnp.real(vis) ** 2 + jnp.imag(vis) ** 2 - self.power
        return jnp.sum(self.weight * d * d) / self.n_rows

    def residuals_from_vis(self, vis):
        d = jnp.real(vis) ** 2 + jnp.imag(vis) ** 2 - self.power
        return jnp.sqrt(self.weight / self.n_rows) * d


class OwnCall(em.AmpChi2):
    """Overrides `__call__`: served by its own forward model, never shared."""

    def __call__(self, image):
        return 2.0 * super().__call__(image)


class PowerChi2(em.AbstractDataTerm):
    """docs/extending.md's data term: χ² = (1/N) Σ w (|V̂|² − P)²."""

    forward: em.AbstractForwardModel | None
    power: jax.Array
    weight: jax.Array
    n_rows: jax.Array
    report_name = "power"
    row_fields = ("power", "weight")

    def __init__(self, forward, power, sigma):
        self.forward = forward
        self.power = jnp.asarray(power)
        self.weight = jnp.asarray(1.0 / np.asarray(sigma) ** 2)
        self.n_rows = em.n_rows_leaf(np.shape(power)[0])

    def residuals_from_vis(self, vis):
        return jnp.sqrt(self.weight / self.n_rows) * (jnp.abs(vis) ** 2 - self.power)

    def chi2_from_vis(self, vis):
        r = self.residuals_from_vis(vis)
        return jnp.sum(r * r)


class ComplexResiduals(PowerChi2):
    def residuals_from_vis(self, vis):
        return jnp.sqrt(self.weight / self.n_rows) * (vis - 1)


class VectorPenalty(em.AbstractRegularizer):
    def penalty(self, image):
        return jnp.sum(image**2, axis=0)


class IntegerModel(em.AbstractImageModel):
    grid: em.ImageGrid

    def __call__(self):
        return jnp.ones(self.grid.shape, jnp.int32)


class SumSquares(em.AbstractRegularizer):
    """A user's sum-of-squares regularizer (defines `residuals`)."""

    prior: jax.Array

    def penalty(self, image):
        return jnp.sum((image - self.prior) ** 2)

    def residuals(self, image):
        return (image - self.prior).ravel()


class StokesToyChi2(em.AbstractDataTerm):
    """A user's polarimetric term: χ² of the four Stokes visibilities,
    `Σ w |V̂ − V|² / (2N)` over rows and Stokes columns (`vis`, `weight` `(n, 4)`)."""

    forward: em.AbstractForwardModel | None
    vis: jax.Array
    weight: jax.Array
    n_rows: jax.Array

    polarimetric = True
    report_name = "stokes_toy"
    row_fields = ("vis", "weight")

    def __init__(self, forward, vis, sigma):
        self.forward = forward
        self.vis = jnp.asarray(vis)
        self.weight = jnp.asarray(1.0 / np.asarray(sigma) ** 2)
        self.n_rows = em.n_rows_leaf(np.shape(vis)[0])

    def chi2_from_vis(self, vis):
        d = vis - self.vis
        return jnp.sum(self.weight * (d.real**2 + d.imag**2)) / (2 * self.n_rows)

    def residuals_from_vis(self, vis):
        d = vis - self.vis
        s = jnp.sqrt(self.weight / (2 * self.n_rows))
        return jnp.concatenate([(s * d.real).ravel(), (s * d.imag).ravel()])


class StokesToyPenalty(em.AbstractRegularizer):
    """A user's polarimetric regularizer: `Σ (Q² + U² + V²)` (Jy²)."""

    polarimetric = True
    report_name = "pol_power"

    def penalty(self, stokes):
        return jnp.sum(stokes[1:] ** 2)


class StokesToyImage(em.AbstractPolImageModel):
    """A user's polarimetric image model: four free planes."""

    grid: em.ImageGrid
    planes: jax.Array

    def __call__(self):
        return self.planes
