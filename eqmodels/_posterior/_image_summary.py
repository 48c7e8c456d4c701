"""`image_summary`: per-pixel posterior mean, standard deviation and quantiles
of the draws' rendered images; `ImageSummary`, what it returns."""

from collections.abc import Sequence

import equinox as eqx
import numpy as np
from jaxtyping import Float

from .._grid import ImageGrid
from ._draws import (
    check_batch_size,
    check_num_draws,
    check_samples,
    draws_shape,
    flat_draws,
    map_draws,
    one_draw,
)
from ._sample import Samples


class ImageSummary(eqx.Module):
    """What [`eqmodels.image_summary`][] returns (numpy arrays, each the shape of
    one rendered image: `(ny, nx)`, or `(4, ny, nx)` for a polarimetric model).

    - `mean`: the per-pixel posterior mean.
    - `std`: the per-pixel posterior standard deviation (`ddof=1`).
    - `quantiles`: the probabilities asked for, and `quantile_images` the
      per-pixel quantiles, `(len(quantiles), *image)` (numpy's `np.quantile`,
      linear interpolation): a `(0.025, 0.975)` pair bounds the per-pixel 95 %
      central credible interval (marginal per pixel, not a joint band).
    - `num_draws`: the draws summarised; `grid`: the model's
      [`eqmodels.ImageGrid`][] (None when the model has none).
    """

    mean: Float[np.ndarray, "..."]
    std: Float[np.ndarray, "..."]
    quantile_images: Float[np.ndarray, "k ..."]
    quantiles: tuple[float, ...] = eqx.field(static=True)
    num_draws: int = eqx.field(static=True)
    grid: ImageGrid | None = eqx.field(static=True)

    def quantile(self, q: float) -> np.ndarray:
        """The per-pixel quantile image at probability `q` (one of `quantiles`)."""
        for p, img in zip(self.quantiles, self.quantile_images):
            if np.isclose(p, q, rtol=0, atol=1e-12):
                return img
        raise ValueError(
            f"`q`={q!r} is not one of the summary's quantiles {self.quantiles}: "
            "ask `image_summary(..., quantiles=...)` for it."
        )


def _render(model):
    return model()


def image_summary(
    samples: Samples,
    *,
    quantiles: Sequence[float] = (0.025, 0.5, 0.975),
    num_draws: int | None = None,
    batch_size: int = 64,
) -> ImageSummary:
    """Per-pixel summaries of the posterior image: each draw's model is rendered
    (`model()`, the image a pixel model holds or a geometric model's render on its
    grid) and the mean, standard deviation and quantiles are taken over the draws
    at every pixel.

    **Arguments:**

    - `samples`: [`eqmodels.Samples`][] (from [`eqmodels.sample`][]).
    - `quantiles`: probabilities in `[0, 1]` (default: the 95 % central interval
      and the median).
    - `num_draws`: summarise this many draws, evenly spaced over the chains
      (default: every draw).
    - `batch_size`: draws rendered at once (memory against speed); the images
      come back to the host, `num_draws × pixels` floats.

    **Returns:** [`eqmodels.ImageSummary`][].
    """
    check_samples(samples)
    qs = np.asarray(quantiles, dtype=float)
    if qs.ndim != 1 or qs.size == 0 or not np.all((qs >= 0) & (qs <= 1)):
        raise ValueError(
            "`quantiles` must be a non-empty sequence of probabilities in [0, 1], "
            f"got {quantiles!r}."
        )
    batch_size = check_batch_size(batch_size)
    c, s = draws_shape(samples)
    if c * s < 2:
        raise ValueError(
            f"`samples` holds {c * s} draw: a standard deviation needs at least 2."
        )
    index = check_num_draws(num_draws, c * s)
    models = flat_draws(samples, index)
    first = one_draw(models)
    if not callable(first):
        raise TypeError(
            f"the draws' model ({type(first).__name__}) is not callable: an image "
            "summary renders each draw with `model()` (an image model)."
        )
    images = np.asarray(map_draws(_render, models, batch_size), dtype=float)
    grid = getattr(first, "grid", None)
    return ImageSummary(
        mean=images.mean(axis=0),
        std=images.std(axis=0, ddof=1),
        quantile_images=np.quantile(images, qs, axis=0),
        quantiles=tuple(float(q) for q in qs),
        num_draws=int(images.shape[0]),
        grid=grid if isinstance(grid, ImageGrid) else None,
    )
