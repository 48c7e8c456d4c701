"""`AtFrequency`: a data term of one band of a multi-frequency data set, which sees
a multi-frequency image at its band's frequency."""

import equinox as eqx
from jaxtyping import Array, Complex, Float, Scalar

from .._forward._base import AbstractForwardModel
from .._image._multifreq import check_frequency, MultiFrequencyImage
from ._base import AbstractDataTerm, from_shared_vis
from ._inputs import ImageLike, planes_at
from ._wrapper import AbstractTermWrapper


class AtFrequency(AbstractTermWrapper):
    """A data term at the frequency `freq` (Hz) of its band: given a
    [`eqmodels.MultiFrequencyImage`][] `model`, it evaluates its inner term on
    `model.at(freq)`; given an image array or any other model, on that image (the
    same at every frequency).

    ```python
    band_terms = [
        em.AtFrequency(em.VisChi2.from_data(d, grid), d.band_freqs[0])
        for d in bands
    ]
    objective = sum(band_terms) + 1e3 * em.SpectralTV(grid, "alpha") + em.TV(grid)
    objective(em.MultiFrequencyImage(em.PixelImage.from_image(img, grid), 228e9))
    ```

    Inside an [`eqmodels.Objective`][] the image model is evaluated at each band's
    frequency once, and the data terms of one band (with the same kind of forward
    model) share **one** transform, as every objective's terms do; terms of
    different frequencies never share one (their images differ). Regularizers and
    unwrapped terms see `model()`, the image at the reference frequency.

    The wrapper goes outside the others: `AtFrequency(GainCorrected(term, gains),
    freq)` for per-band station gains, `AtFrequency(polarimetric_term, freq)` for
    a polarimetric band. The inner term keeps its forward model, its rows and
    its report name.
    """

    term: AbstractDataTerm
    freq: float = eqx.field(static=True)

    def __init__(self, term: AbstractDataTerm, freq: float):
        """**Arguments:**

        - `term`: a data term (built-in, wrapped, or your own) on its band's data,
          `(u, v)` in wavelengths of that band.
        - `freq`: the band's frequency in Hz (e.g. `data.band_freqs[0]`;
          `227e9`, not `227`).
        """
        if isinstance(term, AtFrequency):
            raise TypeError(
                "`term` is already an AtFrequency: a term has one frequency; give "
                "its inner term (`term.term`)."
            )
        if not isinstance(term, AbstractDataTerm):
            raise TypeError(
                f"`term` must be a data term, got {type(term).__name__}: "
                "regularizers act on the image at the reference frequency (or, "
                "the spectral ones, on the spectral maps); an objective's terms are "
                "wrapped one by one."
            )
        self.freq = check_frequency("freq", freq)
        self.term = term

    # The wrapper evaluates its inner term's model on the image at `freq`, and is
    # served from a shared transform like any term.
    share_forward = True

    @property
    def band_frequency(self) -> float:  # type: ignore[override]
        return self.freq

    @property
    def forward(self) -> AbstractForwardModel | None:
        """The inner term's forward model."""
        return self.term.forward

    def model_vis(self, image: ImageLike) -> Complex[Array, "*points"]:
        """The inner term's model visibilities of the image at `freq`: of
        `model.at(freq)` for a [`eqmodels.MultiFrequencyImage`][]; of the image
        itself otherwise (the same at every frequency; a geometric model keeps
        its analytic visibilities, as in an objective)."""
        if not isinstance(image, MultiFrequencyImage):
            return self.term.model_vis(image)
        grid = None if self.forward is None else self.forward.grid
        return self.term.model_vis(planes_at(image, grid, self.freq))

    def chi2_from_vis(self, vis: Complex[Array, "*points"]) -> Scalar:
        return from_shared_vis(self.term, "chi2_from_vis", vis)

    def residuals_from_vis(self, vis: Complex[Array, "*points"]) -> Float[Array, " m"]:
        return from_shared_vis(self.term, "residuals_from_vis", vis)
