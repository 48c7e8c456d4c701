"""A neural-field image model: an `eqx.nn.MLP` maps sky coordinates to brightness.

Any `AbstractImageModel` subclass plugs into the data terms, regularizers and
objectives: declare a `grid` field and implement `__call__()` returning the
`(ny, nx)` image. Here the parameters are the MLP's weights; the image is

    I(x, y) = F · softplus(mlp(φ(x, y))) / Σ softplus(...)

with φ fixed Fourier features of the pixel-centre coordinates (so the MLP can
represent sharp structure) and F the total flux. We fit it to synthetic closure
phases and amplitudes of a ring with optax: both reach χ² ≈ 1 and the image
correlates with the truth at ≈ 0.7.

Run: `python examples/neural_field.py` (about 10 s on 2 CPU cores).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import eqmodels as em


jax.config.update("jax_enable_x64", True)


# --8<-- [start:model]
class NeuralField(em.AbstractImageModel):
    """An image whose brightness is an MLP of the sky position."""

    grid: em.ImageGrid
    mlp: eqx.nn.MLP
    flux: float = eqx.field(static=True)
    n_freqs: int = eqx.field(static=True)

    def __init__(self, grid, flux, *, key, width=32, depth=2, n_freqs=4):
        self.grid = grid
        self.flux = float(flux)
        self.n_freqs = n_freqs
        self.mlp = eqx.nn.MLP(
            in_size=2 + 4 * n_freqs,
            out_size="scalar",
            width_size=width,
            depth=depth,
            activation=jax.nn.tanh,
            key=key,
        )

    def features(self):
        """Fourier features of the pixel centres, coordinates scaled to [-1, 1]."""
        xx, yy = self.grid.coords()
        half = 0.5 * self.grid.nx * self.grid.psize
        xy = jnp.stack([jnp.asarray(xx) / half, jnp.asarray(yy) / half], -1)
        k = jnp.pi * jnp.arange(1, self.n_freqs + 1)
        ang = xy[..., :, None] * k[None, None, None, :]  # (ny, nx, 2, K)
        feats = [
            xy,
            jnp.sin(ang).reshape(*xy.shape[:2], -1),
            jnp.cos(ang).reshape(*xy.shape[:2], -1),
        ]
        return jnp.concatenate(feats, -1).reshape(-1, 2 + 4 * self.n_freqs)

    def __call__(self):
        raw = jax.nn.softplus(jax.vmap(self.mlp)(self.features()))
        return (self.flux * raw / jnp.sum(raw)).reshape(self.grid.shape)
        # --8<-- [end:model]


def synthetic_data(grid, truth, n_stations=8, n_times=12, seed=0):
    """Closure phases and amplitudes of `truth` (uv tracks from rotating stations)."""
    rng = np.random.default_rng(seed)
    r = 4e9 * np.sqrt(rng.uniform(0.05, 1.0, n_stations))  # EHT-like, ≤ 8e9 λ
    phi = rng.uniform(0, 2 * np.pi, n_stations)
    base = np.stack([r * np.cos(phi), r * np.sin(phi)], 1)
    pairs = [(i, j) for i in range(n_stations) for j in range(i + 1, n_stations)]
    tris = [(0, i, j) for i in range(1, n_stations) for j in range(i + 1, n_stations)]
    vis_uv, tri_uv = [], []
    for t in range(n_times):
        a = np.pi * t / n_times
        p = base @ np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]).T
        vis_uv += [p[i] - p[j] for i, j in pairs]
        tri_uv += [[p[i] - p[j], p[j] - p[k], p[k] - p[i]] for i, j, k in tris]
    vis_uv, tri_uv = np.array(vis_uv), np.array(tri_uv)
    amp_fwd = em.SeparableFT(grid, vis_uv[:, 0], vis_uv[:, 1])
    cp_fwd = em.SeparableFT(grid, tri_uv[..., 0], tri_uv[..., 1])
    vis = np.asarray(eqx.filter_jit(lambda f, x: f(x))(amp_fwd, truth))
    sigma = 0.01 * np.abs(vis).max() * np.ones(vis.size)
    amp = np.abs(vis) + sigma * rng.standard_normal(vis.size)
    legs = np.asarray(eqx.filter_jit(lambda f, x: f(x))(cp_fwd, truth))
    cphase = np.angle(legs.prod(axis=1))
    sig_cp = np.full(cphase.size, 0.05)
    cphase = cphase + sig_cp * rng.standard_normal(cphase.size)
    return em.AmpChi2(amp_fwd, amp, sigma), em.ClosurePhaseChi2(cp_fwd, cphase, sig_cp)


def main(n_steps=800, seed=0, verbose=True):
    grid = em.ImageGrid.from_fov(32, 100.0)
    ring = em.RingImage(
        grid, 1.0, em.uas_to_rad(45.0), em.uas_to_rad(10.0), asymmetry=0.5
    )
    truth = ring()
    amp, cphase = synthetic_data(grid, truth, seed=seed)
    # Closure phases and amplitudes do not fix the position: pin the centroid.
    centroid = em.Centroid(
        grid,
        flux=1.0,
        beam=em.beam_from_uv(amp.forward.u, amp.forward.v),
        normalise=True,
    )
    objective = amp + cphase + 1e3 * centroid
    model = NeuralField(grid, 1.0, key=jax.random.key(seed), n_freqs=3)
    opt = optax.adam(2e-2)
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(model, state, objective):
        loss, grads = eqx.filter_value_and_grad(lambda m, o: o(m))(model, objective)
        updates, state = opt.update(
            grads, state, eqx.filter(model, eqx.is_inexact_array)
        )
        return eqx.apply_updates(model, updates), state, loss

    for i in range(n_steps):
        model, state, loss = step(model, state, objective)
        if verbose and i % 200 == 0:
            print(f"step {i:4d}  objective {float(loss):.4g}")
    image, report = eqx.filter_jit(lambda m, o: (m(), o.report(m)))(model, objective)
    corr = float(np.corrcoef(np.ravel(image), np.ravel(truth))[0, 1])
    if verbose:
        print({k: round(float(v), 3) for k, v in report.items()}, f"corr {corr:.3f}")
    return {k: float(v) for k, v in report.items()}, corr


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=800, help="solver steps (800)")
    ap.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the stations, the noise and the network's initialisation (0)",
    )
    args = ap.parse_args()
    main(n_steps=args.steps, seed=args.seed)
