"""The geometric-model interface, and `Sum`, its composite.

A geometric model is a continuous image with a closed-form Fourier transform: its
visibilities are computed at the data's points directly (no pixel transform), and
it renders on its grid as any image model. `Sum` lives beside the base (as the
`Objective` beside `AbstractTerm`): `a + b` returns one, so the two share a module
and no import goes in a circle.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float

from .._forward._base import AbstractForwardModel
from .._grid import ImageGrid, same_grid
from .._image._base import AbstractImageModel


class AbstractGeometricModel(AbstractImageModel):
    r"""Base class of geometric models: an image `I(x, y)` (Jy/sr, `x` east, `y`
    north, radians) with analytic visibilities

    `V(u, v) = ∫∫ I(x, y) e^{+2πi (u x + v y)} dx dy`

    (u, v in wavelengths; the sign and phase centre of [`eqmodels.DirectFT`][],
    whose transform of the rendered model they are the continuous limit of).

    A data term given a geometric model evaluates `visibility` at its points
    instead of transforming the rendered image (so neither the grid's resolution
    nor its pixel pulse enters); regularizers, plots and `model()` get the image
    rendered on `grid`. Pass `model()` to a term to get the pixel transform
    instead.

    Subclasses hold `grid` and implement

    - `visibility(u, v)`: the complex visibilities at any points;
    - `intensity(x, y, resolution)`: Jy/sr at any points, with features sharper
      than `resolution` (radians; a disk's edge, a thin ring) spread over it so
      that point samples `resolution` apart integrate to the flux (the exact
      image at `resolution=0`, where it has one).

    `model()` samples `intensity` at the pixel centres with `resolution =
    psize` (times `psize²`: Jy/pixel); a model without a closed-form intensity
    (`has_intensity` false: [`eqmodels.Blurred`][], a [`eqmodels.Sum`][] holding
    one or a pixel model) overrides `render`. Models add with `+`
    ([`eqmodels.Sum`][]).
    """

    grid: eqx.AbstractVar[ImageGrid]

    @abc.abstractmethod
    def visibility(
        self, u: Float[ArrayLike, "*points"], v: Float[ArrayLike, "*points"]
    ) -> Complex[Array, "*points"]:
        """**Arguments:** `u`, `v`, the points in wavelengths (same shape).

        **Returns:** the complex visibilities (Jy), shaped like `u`.
        """

    @abc.abstractmethod
    def intensity(
        self,
        x: Float[ArrayLike, "*points"],
        y: Float[ArrayLike, "*points"],
        resolution: Float[ArrayLike, ""] | float = 0.0,
    ) -> Float[Array, "*points"]:
        """**Arguments:**

        - `x`, `y`: positions in radians (`x` east, `y` north), same shape.
        - `resolution`: the sampling scale (radians) over which sharp features
          are spread (0: the exact image, where it is a function).

        **Returns:** the intensity in Jy/sr, shaped like `x`.
        """

    @property
    def has_intensity(self) -> bool:
        """Whether `intensity` is available (closed-form)."""
        return True

    @property
    def has_visibility(self) -> bool:
        """Whether `visibility(u, v)` needs no forward model (false for a sum
        holding a pixel model, whose part goes through the term's transform)."""
        return True

    @property
    def dtype(self) -> np.dtype:
        """The real floating dtype of the parameters."""
        return np.dtype(jax.tree.leaves(self)[0].dtype)

    def visibility_through(
        self, forward: AbstractForwardModel
    ) -> Complex[Array, "*points"]:
        """The visibilities at `forward`'s points, in its complex dtype: analytic
        (`visibility(forward.u, forward.v)`), except for a pixel part of a
        [`eqmodels.Sum`][], transformed by `forward`. What a data term calls."""
        ctype = jnp.result_type(forward.dtype, jnp.complex64)
        return self.visibility(forward.u, forward.v).astype(ctype)

    def sample_points(
        self,
    ) -> tuple[Float[Array, " k"], Float[Array, " k"], Float[Array, " k"]] | None:
        """`(x, y, flux)`: point samples of a model concentrated on a curve (a
        thin ring: flux per sample, Jy, at positions in radians), which it
        renders by depositing them on the grid; `None` (the default) for a model
        rendered from its intensity. The coordinate transforms move the samples."""
        return None

    def render(self) -> Float[Array, "ny nx"]:
        """The image on `grid` (Jy/pixel): a model with `sample_points` deposits
        them (bilinear, cloud-in-cell: each sample's flux goes to its four
        nearest pixel centres, so the flux on the grid is kept exactly); any
        other samples `intensity` at the pixel centres with `resolution = psize`,
        times `psize²`."""
        pts = self.sample_points()
        if pts is not None:
            return deposit(self.grid, *pts)
        xx, yy = self.grid.coords()
        p = self.grid.psize
        dtype = self.dtype
        img = self.intensity(
            jnp.asarray(xx, dtype), jnp.asarray(yy, dtype), jnp.asarray(p, dtype)
        )
        return img * jnp.asarray(p * p, dtype)

    def __call__(self) -> Float[Array, "ny nx"]:
        return self.render()

    def __add__(self, other) -> "Sum":
        if not isinstance(other, AbstractImageModel):
            return NotImplemented
        return Sum(self, other)

    def __radd__(self, other) -> "Sum":
        if isinstance(other, int | float) and other == 0:  # `sum([...])`
            return Sum(self)
        if not isinstance(other, AbstractImageModel):
            return NotImplemented
        return Sum(other, self)


def check_model(name: str, model, *, need_intensity: bool = True):
    """`model`, checked to be a geometric model (with a closed-form intensity and
    analytic visibilities, when `need_intensity`): what a coordinate transform
    wraps."""
    if not isinstance(model, AbstractGeometricModel):
        raise TypeError(
            f"`{name}` must be a geometric model (`eqmodels.AbstractGeometricModel`: "
            f"`MRing`, `Disk`, ...), got {type(model).__name__}."
        )
    if model.polarimetric:
        raise ValueError(
            f"`{name}` is polarimetric ({type(model).__name__}): the coordinate "
            "transforms act on Stokes I models (a rotation would also turn the "
            "EVPA); transform the Stokes I model and polarize the result "
            "(`Polarized(Shifted(model, dx, dy), frac, evpa)`), or give a "
            "`PolMRing` its centre (`x0`, `y0`)."
        )
    if not model.has_visibility:
        raise ValueError(
            f"`{name}` holds a pixel model, whose visibilities need the term's "
            "transform: apply the transform to the geometric part only and add the "
            "pixel model after (`Sum(Shifted(ring, dx, dy), pixels)`)."
        )
    if need_intensity and not model.has_intensity:
        raise ValueError(
            f"`{name}` ({type(model).__name__}) has no closed-form intensity (a "
            "`Blurred` model, or a sum holding one), which this transform needs to "
            "render: blur last, `Blurred(Shifted(ring, dx, dy), fwhm)` (a shift or "
            "rotation commutes with a circular blur)."
        )
    return model


class Sum(AbstractGeometricModel):
    """The sum of image models, `I = Σ_i I_i`: geometric models (their visibilities
    add) and, for a **hybrid** model, pixel image models (e.g. a
    [`eqmodels.PixelImage`][]), whose visibilities a data term computes with its
    own transform of their image (the geometric parts' analytically). Built by
    `a + b` too (nested sums are flattened). Every part must be on one grid and
    of one precision (float32 or float64).
    """

    parts: tuple[AbstractImageModel, ...]

    def __init__(self, *parts: AbstractImageModel):
        """**Arguments:** `*parts`, image models on one grid (at least one
        geometric; any others are non-polarimetric image models)."""
        flat: list[AbstractImageModel] = []
        for p in parts:
            if isinstance(p, Sum):
                flat.extend(p.parts)
            elif isinstance(p, AbstractImageModel):
                if p.polarimetric:
                    raise ValueError(
                        f"`parts` holds a polarimetric model ({type(p).__name__}): a "
                        "`Sum` is a Stokes I image; sum the Stokes I models and "
                        "polarize the sum (`Polarized(a + b, frac, evpa)`), add "
                        "its I plane as a pixel model, or fit the polarimetric "
                        "model alone."
                    )
                flat.append(p)
            else:
                raise TypeError(
                    "`parts` must be image models (geometric models such as `MRing`, "
                    f"or pixel models such as `PixelImage`), got {type(p).__name__}."
                )
        if not any(isinstance(p, AbstractGeometricModel) for p in flat):
            raise ValueError(
                "`parts` holds no geometric model: a `Sum` needs at least one (for "
                "pixel models alone, add their images)."
            )
        grid = flat[0].grid
        for p in flat[1:]:
            if not same_grid(p.grid, grid):
                raise ValueError(
                    f"`parts` are on different grids: {type(flat[0]).__name__} on "
                    f"{grid!r} but {type(p).__name__} on {p.grid!r}; build every "
                    "part on one grid."
                )
        dtypes = {np.dtype(_dtype_of(p)) for p in flat}
        if len(dtypes) > 1:
            raise ValueError(
                f"`parts` compute in different precisions ({sorted(map(str, dtypes))}): "
                "build every part with one `dtype` (float32 or float64)."
            )
        self.parts = tuple(flat)

    @property
    def grid(self) -> ImageGrid:  # type: ignore[override]
        return self.parts[0].grid

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(jnp.result_type(*[_dtype_of(p) for p in self.parts]))

    @property
    def has_intensity(self) -> bool:
        return all(
            isinstance(p, AbstractGeometricModel) and p.has_intensity
            for p in self.parts
        )

    @property
    def has_visibility(self) -> bool:
        return all(
            isinstance(p, AbstractGeometricModel) and p.has_visibility
            for p in self.parts
        )

    def visibility(self, u, v):
        if not self.has_visibility:
            raise ValueError(
                "this `Sum` holds a pixel model, whose visibilities need a forward "
                "model: use `visibility_through(forward)` (what data terms do)."
            )
        return sum(p.visibility(u, v) for p in self.parts)

    def visibility_through(self, forward):
        ctype = jnp.result_type(forward.dtype, jnp.complex64)
        out = []
        for p in self.parts:
            if isinstance(p, AbstractGeometricModel):
                out.append(p.visibility_through(forward))
            else:
                out.append(forward(jnp.asarray(p(), forward.dtype)).astype(ctype))
        return sum(out)

    def intensity(self, x, y, resolution=0.0):
        if not self.has_intensity:
            raise ValueError(
                "this `Sum` holds a pixel or `Blurred` model, which has no "
                "closed-form intensity: render it on its grid (`model()`)."
            )
        return sum(p.intensity(x, y, resolution) for p in self.parts)

    def render(self):
        return sum(
            p.render() if isinstance(p, AbstractGeometricModel) else p()
            for p in self.parts
        )


def _dtype_of(model: AbstractImageModel):
    if isinstance(model, AbstractGeometricModel):
        return model.dtype
    leaves = [x for x in jax.tree.leaves(model) if eqx.is_inexact_array(x)]
    return leaves[0].dtype if leaves else jnp.result_type(float)


def deposit(grid: ImageGrid, x, y, flux) -> Float[Array, "ny nx"]:
    """Point fluxes at `(x, y)` (radians) spread bilinearly over the four nearest
    pixel centres (cloud-in-cell); samples beyond the outer pixel centres lose the
    share that falls off the grid."""
    p = grid.psize
    fx = (grid.nx / 2 - 0.5) - x / p  # fractional column index (x grows east/left)
    fy = (grid.ny / 2 - 0.5) - y / p
    ix0 = jnp.floor(jax.lax.stop_gradient(fx))
    iy0 = jnp.floor(jax.lax.stop_gradient(fy))
    tx, ty = fx - ix0, fy - iy0
    img = jnp.zeros(grid.shape, flux.dtype)
    for dy, wy in ((0, 1 - ty), (1, ty)):
        for dx, wx in ((0, 1 - tx), (1, tx)):
            iy = (iy0 + dy).astype(jnp.int32)
            ix = (ix0 + dx).astype(jnp.int32)
            ok = (iy >= 0) & (iy < grid.ny) & (ix >= 0) & (ix < grid.nx)
            w = jnp.where(ok, flux * wy * wx, 0.0)
            img = img.at[
                jnp.clip(iy, 0, grid.ny - 1), jnp.clip(ix, 0, grid.nx - 1)
            ].add(w)
    return img
