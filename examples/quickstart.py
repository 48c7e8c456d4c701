"""Quick start: image a ring from synthetic, noisy EHT-like data.

1. Make a ring image (a stand-in for a black-hole shadow) on a 32×32 grid.
2. Sample it at synthetic (u, v) tracks with thermal noise.
3. Reconstruct it with a plain `eqx.filter_jit` + optax training loop over a
   `PixelImage`: VisChi2 plus a small smoothness penalty written inline.

Run: `python examples/quickstart.py` (about 20 s on 2 CPU cores). Saves
`examples/output/quickstart.png` when matplotlib is installed.
"""

import pathlib
import time

import jax


jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import eqmodels as em  # noqa: E402


def ring(grid, diameter_uas=44.0, width_uas=10.0, flux=0.6):
    """A Gaussian-profile ring, brighter in the south (like M87*)."""
    xx, yy = grid.coords()
    r = np.hypot(xx, yy)
    r0, w = em.uas_to_rad(diameter_uas) / 2, em.uas_to_rad(width_uas) / 2.355
    img = np.exp(-0.5 * ((r - r0) / w) ** 2) * (1.0 - 0.6 * yy / (r + 1e-30) * (r > 0))
    return flux * img / img.sum()


def synthetic_tracks(n_baselines=21, n_times=24, max_uv=8.5e9, seed=0):
    """Elliptical (u, v) tracks, as Earth rotation draws them for a handful of
    stations (a stand-in here; `eqmodels.observe` computes real ones)."""
    rng = np.random.default_rng(seed)
    h = np.linspace(-1.2, 1.2, n_times)  # hour angle span, radians
    length = rng.uniform(0.08, 1.0, n_baselines) * max_uv
    angle = rng.uniform(0, np.pi, n_baselines)
    ecc = rng.uniform(0.3, 0.9, n_baselines)
    u = length[:, None] * np.cos(angle[:, None] + h)
    v = length[:, None] * ecc[:, None] * np.sin(angle[:, None] + h)
    u, v = u.ravel(), v.ravel()
    return np.concatenate([u, -u]), np.concatenate([v, -v])


def tsv(img):
    """Total squared variation: a simple smoothness penalty."""
    return jnp.sum(jnp.diff(img, axis=0) ** 2) + jnp.sum(jnp.diff(img, axis=1) ** 2)


def main(n_steps=1000, seed=0):
    grid = em.ImageGrid.from_fov(32, 128.0)  # 32² pixels over 128 µas
    truth = ring(grid)
    u, v = synthetic_tracks(seed=seed)
    rng = np.random.default_rng(seed)
    forward = em.NUFFT(grid, u, v)
    sigma = np.full(u.shape, 0.01)  # Jy
    noise = sigma * (rng.standard_normal(u.shape) + 1j * rng.standard_normal(u.shape))
    vis = np.asarray(forward(jnp.asarray(truth))) + noise
    chi2 = em.VisChi2(forward, vis, sigma)
    print(f"{u.size} visibilities, grid {grid}")

    # Start from a flat disk of the right total flux.
    xx, yy = grid.coords()
    disk = np.where(np.hypot(xx, yy) < em.uas_to_rad(50.0), 1.0, 1e-3)
    model = em.PixelImage.from_image(0.6 * disk / disk.sum(), grid)

    weight_tsv = 1.0 * grid.npix

    def loss(m, term):
        img = m()
        return term(img) + weight_tsv * tsv(img)

    optimiser = optax.adam(0.03)
    state = optimiser.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(m, s, term):
        value, grads = eqx.filter_value_and_grad(loss)(m, term)
        updates, s = optimiser.update(grads, s, m)
        return eqx.apply_updates(m, updates), s, value

    print(f"start: chi² = {float(chi2(model)):10.3f}")
    t0 = time.perf_counter()
    for i in range(n_steps):
        model, state, value = step(model, state, chi2)
        if i % 100 == 0:
            print(f"  step {i:4d}  loss {float(value):10.4f}")
    elapsed = time.perf_counter() - t0
    final = float(chi2(model))
    print(f"end:   chi² = {final:10.3f}  ({n_steps} steps in {elapsed:.2f} s)")
    img = np.asarray(model())
    corr = np.corrcoef(img.ravel(), truth.ravel())[0, 1]
    print(f"correlation with the true image: {corr:.3f}")
    save_png(truth, img, grid)
    return final, corr


def save_png(truth, img, grid):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no PNG)")
        return
    out = pathlib.Path(__file__).parent / "output"
    out.mkdir(exist_ok=True)
    half = em.rad_to_uas(grid.fov[1]) / 2
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    for ax, im, title in zip(axes, (truth, img), ("truth", "reconstruction")):
        ax.imshow(im, cmap="afmhot", extent=(half, -half, -half, half))
        ax.set_title(title)
        ax.set_xlabel("Δα (µas)")
    axes[0].set_ylabel("Δδ (µas)")
    fig.tight_layout()
    fig.savefig(out / "quickstart.png", dpi=100)
    print(f"saved {out / 'quickstart.png'}")


if __name__ == "__main__":
    main()
