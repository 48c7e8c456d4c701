"""What terms take and give back: the image argument (`ImageLike`, `as_image`),
checks of a term's value and residuals, and the helpers every term and wrapper
uses to name itself and to evaluate from a shared transform's visibilities."""

from typing import TypeAlias

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._forward._base import AbstractForwardModel
from .._geometric._base import AbstractGeometricModel
from .._grid import ImageGrid, same_grid
from .._image._base import AbstractImageModel, evaluated_on
from .._image._multifreq import MultiFrequencyImage
from .._numerics import asarray
from .._validation import refuse_nonfinite_image


ImageLike: TypeAlias = (
    Float[ArrayLike, "ny nx"] | Float[ArrayLike, "4 ny nx"] | AbstractImageModel
)


def as_planes(
    image: Float[ArrayLike, "ny nx"] | Float[ArrayLike, "4 ny nx"] | AbstractImageModel,
    grid: ImageGrid | None = None,
) -> Float[Array, "ny nx"] | Float[Array, "4 ny nx"]:
    """The image as an array, as given: `(ny, nx)`, or the four Stokes planes
    `(4, ny, nx)` of a polarimetric image (an array, or a model declaring
    `polarimetric`). An image model must be on `grid` (when given; grids are static,
    so this is checked at trace time)."""
    if isinstance(image, AbstractImageModel):
        arr = asarray(
            evaluated_on(
                image,
                grid,
                "image",
                f"the term is built on {grid!r}: build the image model on the "
                "term's grid (same shape and pixel size), or the term on the "
                "model's.",
            )
        )
        # A model returning integers slipped past the array checks below.
        who = f"`image` ({type(image).__name__}() returned {arr.dtype})"
    elif isinstance(image, eqx.Module) or callable(image):
        raise TypeError(
            f"`image` is a {type(image).__name__}, neither an image array nor an "
            "image model: a model of your own must subclass "
            "`eqmodels.AbstractImageModel` (its `__call__` returns the image; see "
            "docs/extending.md), or pass `model()`, the image array."
        )
    elif hasattr(image, "imvec") and hasattr(image, "xdim"):
        # Named here: JAX's own message would name an object dtype.
        raise TypeError(
            "`image` is an eht-imaging Image: pass its pixels, "
            "`image.imvec.reshape(image.ydim, image.xdim)` (Jy/pixel; row 0 north, "
            "column 0 east, as eqmodels' images), with a grid of its pixel size, "
            "`em.ImageGrid(image.ydim, image.xdim, image.psize)`; for its "
            "polarimetric planes stack I, Q, U, V into a `(4, ny, nx)` array."
        )
    else:
        try:
            arr = asarray(image)
        except TypeError:
            raise TypeError(
                f"`image` must be an image array (ny, nx) in Jy/pixel or an "
                f"eqmodels image model, got {type(image).__name__}."
            ) from None
        who = "`image`"
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        raise TypeError(
            f"{who} must be a real floating-point array (Jy/pixel), got "
            f"{arr.dtype}: cast it first (`image.astype(float)`); an integer image "
            "would turn the terms' constants into integers."
        )
    if arr.dtype not in (jnp.float32, jnp.float64):
        raise TypeError(
            f"{who} must be float32 or float64, got {arr.dtype}: the pixel size "
            "(~1e-11 rad) and the terms' constants underflow in half precision. "
            "Cast it first (`image.astype(jnp.float32)`)."
        )
    refuse_nonfinite_image("image", arr, "a term")
    return arr


def is_geometric(image) -> bool:
    """Whether `image` is a geometric model, whose visibilities data terms take
    from the model (analytically) rather than from a transform of its render."""
    return isinstance(image, AbstractGeometricModel)


def geometric_vis(model: AbstractGeometricModel, forward: AbstractForwardModel):
    """A geometric model's visibilities at `forward`'s points (the model on
    `forward`'s grid: one pixel model may be part of it, and the model must render
    where the terms' regularizers see it)."""
    if not same_grid(model.grid, forward.grid):
        raise ValueError(
            f"`image` is a {type(model).__name__} on {model.grid!r} but the term is "
            f"built on {forward.grid!r}: build the model on the term's grid (same "
            "shape and pixel size), or the term on the model's."
        )
    return model.visibility_through(forward)


def is_pol_geometric(image) -> bool:
    """Whether `image` is a polarimetric geometric model, whose Stokes
    visibilities polarimetric data terms take from the model (analytically)."""
    return isinstance(image, AbstractGeometricModel) and image.polarimetric


def geometric_stokes_vis(model, forward: AbstractForwardModel):
    """A polarimetric geometric model's Stokes visibilities `(*points, 4)` at
    `forward`'s points (the model on `forward`'s grid, as for `geometric_vis`)."""
    if not same_grid(model.grid, forward.grid):
        raise ValueError(
            f"`image` is a {type(model).__name__} on {model.grid!r} but the term is "
            f"built on {forward.grid!r}: build the model on the term's grid (same "
            "shape and pixel size), or the term on the model's."
        )
    return model.stokes_visibility_through(forward)


def planes_at(
    image: ImageLike, grid: ImageGrid | None, freq: float | None
) -> Float[Array, "ny nx"] | Float[Array, "4 ny nx"]:
    """`as_planes(image, grid)` at frequency `freq` (Hz): a
    [`eqmodels.MultiFrequencyImage`][] gives `image.at(freq)`; an array or any
    other image model is the same at every frequency (a flat spectrum).
    `freq=None` is the image as given (a multi-frequency model's `model()`, the
    image at its reference frequency)."""
    if freq is None or not isinstance(image, MultiFrequencyImage):
        return as_planes(image, grid)
    if grid is not None and not same_grid(image.grid, grid):
        raise ValueError(
            f"`image` is a MultiFrequencyImage on {image.grid!r} but the term is "
            f"built on {grid!r}: build the image model on the term's grid (same "
            "shape and pixel size), or the term on the model's."
        )
    return as_planes(image.at(freq), grid)


def is_stokes(arr: Array, grid: ImageGrid | None = None) -> bool:
    """Whether the array `arr` is a Stokes image `(4, ny, nx)` (on `grid`, when
    given). Shapes are static: decided at trace time."""
    shape = tuple(jnp.shape(arr))
    if len(shape) != 3 or shape[0] != 4:
        return False
    return grid is None or shape[1:] == tuple(grid.shape)


def as_image(
    image: Float[ArrayLike, "ny nx"] | Float[ArrayLike, "4 ny nx"] | AbstractImageModel,
    grid: ImageGrid | None = None,
) -> Float[Array, "ny nx"]:
    """An image array `(ny, nx)` from an image array or an image model; an image
    model must be on `grid` (when given; grids are static, so this is checked at
    trace time). A polarimetric image (a `(4, ny, nx)` array or a polarimetric
    model) gives its Stokes I plane: what a Stokes I term or regularizer uses."""
    arr = as_planes(image, grid)
    return arr[0] if is_stokes(arr, grid) else arr


def as_stokes(
    image: ArrayLike | AbstractImageModel,  # checked here, with the message below
    grid: ImageGrid | None = None,
    who: str = "a polarimetric term",
) -> Float[Array, "4 ny nx"]:
    """The four Stokes planes `(4, ny, nx)` (I, Q, U, V) of a polarimetric image:
    a `(4, ny, nx)` array or a polarimetric image model (on `grid`, when given).
    An `(ny, nx)` image is refused (`who` names what needs the four planes)."""
    arr = as_planes(image, grid)
    if not is_stokes(arr, grid):
        want = "(4, ny, nx)" if grid is None else f"(4, {grid.ny}, {grid.nx})"
        raise ValueError(
            f"{who} needs the four Stokes planes I, Q, U, V, an array of shape "
            f"{want} or a polarimetric image model (e.g. `eqmodels.PolPixelImage`), "
            f"got an image of shape {tuple(jnp.shape(arr))}: stack the planes "
            "(`jnp.stack([i, q, u, v])`), or use a Stokes I term for an I image."
        )
    return arr


def term_grid(term) -> ImageGrid | None:
    """The grid a term is built on: its forward model's (a data term; `None` when it
    is served by an objective's shared transform), or a regularizer's `grid` field
    (`None` for one that holds none)."""
    fwd = getattr(term, "forward", None)
    if isinstance(fwd, AbstractForwardModel):
        return fwd.grid
    grid = getattr(term, "grid", None)
    return grid if isinstance(grid, ImageGrid) else None


def check_real_scalar(value, name: str, term):
    """`value`, checked to be a real scalar: a term's value (χ² or penalty) is one
    real number; a vector would be summed, broadcast against weights or stacked
    without a word. Shapes and dtypes are static: checked at trace time."""
    if jnp.shape(value) != () or not jnp.issubdtype(
        jnp.result_type(value), jnp.floating
    ):
        raise TypeError(
            f"term {name!r} ({type(term).__name__}) returned "
            f"{jnp.result_type(value)}{list(jnp.shape(value))}, not a real scalar: "
            "a term's value (χ² or penalty) must be one real number (sum it)."
        )
    return value


def check_real_residuals(r, name: str | None, term) -> None:
    """Residuals are real floats (a least-squares solver squares them): a complex
    vector (e.g. `V − V̂` returned as is) is refused, naming the term."""
    if not jnp.issubdtype(jnp.result_type(r), jnp.floating):
        who = f"term {name!r} ({type(term).__name__})" if name else type(term).__name__
        raise TypeError(
            f"{who} returned residuals of dtype {jnp.result_type(r)}: residuals must "
            "be real (stack the real and imaginary parts of complex ones)."
        )


def from_shared_vis(term, method: str, vis):
    """`term.chi2_from_vis(vis)` (or `residuals_from_vis`) for a member of a sharing
    objective, which holds `forward=None`: a method that reads `self.forward` gets
    an error naming the class and the fix instead of a bare `'NoneType' object has
    no attribute ...` from inside the user's code."""
    try:
        return getattr(term, method)(vis)
    except AttributeError as e:
        if term.forward is not None or "'NoneType'" not in str(e):
            raise
        raise AttributeError(
            f"{type(term).__name__}.{method} failed with {e!r} inside an "
            "`Objective` that shares a transform, whose terms hold `forward=None`. "
            "If it reads `self.forward`: compute what you need from the points in "
            "`__init__` and keep it in a `row_fields` leaf (see "
            "docs/extending.md), or set `share_forward = False` on the class to "
            "opt out of sharing."
        ) from e


def default_name(term) -> str:
    """The report key of a term: its `report_name` (a class attribute, or a
    property of a wrapper that reports its inner term's), else its class name."""
    return term.report_name or type(term).__name__
