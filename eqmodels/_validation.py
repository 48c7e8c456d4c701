"""Input checks shared by the constructors.

Every public constructor turns bad input into a `ValueError`/`TypeError` that names
the argument and the fix, *at construction*. Checks run only on concrete values: a
module rebuilt inside `jit`/`vmap` holds tracers, which are passed through unchecked.
"""

import math
import numbers
import os
import pathlib
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._grid import ImageGrid, MAX_PSIZE
from ._numerics import asarray


def is_concrete(x) -> bool:
    """True when `x` holds concrete values (not a tracer)."""
    return not isinstance(x, jax.core.Tracer)


#: Julian dates of 1800-01-01 and 2200-01-01: a "modified Julian date" in this
#: range is a Julian date (MJD = JD − 2400000.5).
_JD_RANGE = (2378496.5, 2524593.5)
#: Modified Julian dates of 1800-01-01 and 2200-01-01 (what a date in seconds
#: since MJD 0, divided by 86400, should fall in).
_MJD_RANGE = (-21504.0, 124593.0)


def refuse_julian_date(name: str, mjd) -> None:
    """Refuse a modified Julian date that is a Julian date (2457854.5, not
    57854.0) or a time in seconds since MJD 0 (57854 × 86400), stating the
    conversion; any other value passes (the caller checks its own range)."""
    if not is_concrete(mjd):
        return
    value = float(np.asarray(mjd))
    if _JD_RANGE[0] <= value <= _JD_RANGE[1]:
        raise ValueError(
            f"`{name}`={mjd!r} looks like a Julian date, not a modified Julian "
            f"date: MJD = JD − 2400000.5 = {value - 2400000.5:.10g}."
        )
    if value > _JD_RANGE[1] and _MJD_RANGE[0] <= value / 86400.0 <= _MJD_RANGE[1]:
        raise ValueError(
            f"`{name}`={mjd!r} looks like seconds since MJD 0, not days: "
            f"MJD = seconds / 86400 = {value / 86400.0:.10g}."
        )


def refuse_nonfinite_image(name: str, image, who: str) -> None:
    """Refuse a concrete image with NaN or infinite pixels (`who` names what was
    given it): every visibility, and so the whole objective, would be NaN. A traced
    image is not looked at (no check inside `jit`: turn on JAX's
    `jax_debug_nans` / `jax_debug_infs` to find the first NaN there, see
    docs/errors.md)."""
    if not is_concrete(image):
        return
    arr = np.asarray(image)
    if not np.issubdtype(arr.dtype, np.inexact):
        return
    bad = ~np.isfinite(arr)
    if bad.any():
        n_nan = int(np.isnan(arr).sum())
        n_inf = int(bad.sum()) - n_nan
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"`{name}` given to {who} has {n_nan} NaN and {n_inf} infinite "
            f"pixel(s) (the first at index {first}): every visibility would be NaN. "
            "Replace them (`np.nan_to_num(image)`) or find where they come from."
        )


def resolve_float_dtype(dtype, *arrays) -> np.dtype:
    """The floating dtype a model computes in.

    `dtype=None` takes float32 if every floating input fits in it (float32,
    complex64, or half precision: float16 and bfloat16, held exactly), else
    float64. float64 without `jax_enable_x64` is an error rather than a silent
    downcast.
    """
    if dtype is None:
        dtypes = [input_dtype(a) for a in arrays]
        kinds = [d for d in dtypes if d is not None and jnp.issubdtype(d, jnp.inexact)]
        single = kinds and all(_fits_float32(k) for k in kinds)
        dtype = np.float32 if single else np.float64
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(
            f"`dtype` must be float32 or float64 (e.g. `jnp.float64`), got {dtype!r}."
        )
    if dtype not in (np.float32, np.float64):
        hint = (
            " An integer or boolean input is fine: leave `dtype` out (or pass "
            "`jnp.float64`) and it is converted; `dtype` is the floating type the "
            "model computes in, not the input's."
            if not np.issubdtype(dtype, np.inexact)
            else ""
        )
        raise TypeError(
            f"`dtype` must be float32 or float64 (jax-finufft pairs them with "
            f"complex64 / complex128), got {dtype}.{hint}"
        )
    if dtype == np.float64 and not jax.config.read("jax_enable_x64"):
        raise ValueError(
            "float64 was requested (or inferred from float64 inputs) but JAX runs in "
            "32-bit mode. Call `jax.config.update('jax_enable_x64', True)` before "
            "building models, or pass `dtype=jnp.float32` explicitly."
        )
    return dtype


def _fits_float32(dtype) -> bool:
    """Whether an inexact dtype's values are held exactly by float32 (complex64)."""
    per_part = 2 if jnp.issubdtype(dtype, jnp.complexfloating) else 1
    return np.dtype(dtype).itemsize <= 4 * per_part


def input_dtype(x) -> np.dtype | None:
    """The dtype of an array-like input: arrays and tracers carry one; Python
    scalars, lists and tuples get numpy's (`None` when `x` is not numeric)."""
    dt = getattr(x, "dtype", None)
    if dt is not None:
        try:
            return np.dtype(dt)
        except TypeError:
            return None
    try:
        return np.asarray(x).dtype
    except (TypeError, ValueError):  # ragged lists and other non-arrays
        return None


def as_real(name: str, x, dtype=None) -> np.ndarray | jax.Array:
    """Check that `x` is real and finite; return it as an array (of `dtype` if given)."""
    if not is_concrete(x):
        return x if dtype is None else asarray(x, dtype)
    arr = as_numpy(name, x)
    if np.iscomplexobj(arr):
        raise TypeError(f"`{name}` must be real, got a complex array.")
    numeric = np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_
    if not (numeric or jnp.issubdtype(arr.dtype, jnp.floating)):  # bfloat16
        raise TypeError(f"`{name}` must be a numeric array, got dtype {arr.dtype}.")
    return _check_finite(
        name, arr.astype(np.float64 if dtype is None else dtype), "model"
    )


def as_complex(name: str, x, dtype=None):
    """Check that `x` is finite (complex or real); return it as a complex array."""
    if not is_concrete(x):
        return x
    arr = as_numpy(name, x)
    if not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"`{name}` must be a numeric array, got dtype {arr.dtype}.")
    return _check_finite(
        name, arr.astype(np.complex128 if dtype is None else dtype), "term"
    )


def as_numpy(name: str, x) -> np.ndarray:
    """`np.asarray(x)` (lists, tuples, numpy and JAX arrays), with a clear error for
    ragged nested sequences and other non-arrays."""
    try:
        with np.errstate(all="ignore"):
            arr = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"`{name}` must be an array (a numpy/JAX array, list or tuple of numbers "
            f"of one shape), got {type(x).__name__} ({e})."
        ) from None
    if arr.dtype == object:
        raise TypeError(
            f"`{name}` must be an array of numbers, got {type(x).__name__} holding "
            "non-numbers or rows of different lengths."
        )
    return arr


# Inputs that are images or model parameters, not rows of data.
_IMAGE_LIKE = frozenset({"params", "image", "prior", "init"})


def _check_finite(name: str, arr: np.ndarray, built: str) -> np.ndarray:
    bad = ~np.isfinite(arr)
    if bad.any() and arr.ndim == 0:
        raise ValueError(
            f"`{name}` is non-finite ({arr.item()!r}): pass a finite number."
        )
    if bad.any():
        raise ValueError(
            f"`{name}` has {int(bad.sum())} non-finite value(s) (NaN or inf), first at "
            f"index {_first(bad)}: "
            + (
                "images and parameters must be finite (start from a prior image)."
                if name in _IMAGE_LIKE
                else f"drop or flag those rows before building the {built}."
            )
        )
    return arr


def scalar_leaf(
    name: str, x, dtype=None, *, positive: bool = False
) -> Float[Array, ""]:
    """Check that `x` is a real, finite scalar (and `> 0` if `positive`); return it
    as an array leaf of `dtype` (default: JAX's default float)."""
    if is_concrete(x) and np.asarray(x).dtype == np.bool_:
        raise TypeError(f"`{name}` must be a number, got a boolean ({x!r}).")
    x = as_real(name, x)
    if is_concrete(x):
        if np.ndim(x) != 0:
            raise ValueError(f"`{name}` must be a scalar, got shape {np.shape(x)}.")
        if positive and not float(x) > 0:
            raise ValueError(f"`{name}` must be > 0, got {float(x)}.")
    return asarray(x, jnp.result_type(float) if dtype is None else dtype)


def check_grid(grid) -> ImageGrid:
    """Check that `grid` is an `ImageGrid`; return it."""
    if not isinstance(grid, ImageGrid):
        raise TypeError(f"`grid` must be an `ImageGrid`, got {type(grid).__name__}.")
    return grid


def _first(bad) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))


def check_nonempty(name: str, x) -> None:
    if is_concrete(x) and np.size(x) == 0:
        raise ValueError(f"`{name}` is empty: a data set needs at least one row.")


def check_same_shape(names: tuple[str, ...], *arrays) -> None:
    shapes = [np.shape(a) for a in arrays]
    if any(s != shapes[0] for s in shapes):
        listed = ", ".join(f"`{n}` {s}" for n, s in zip(names, shapes))
        raise ValueError(f"shape mismatch: {listed}; these must have the same shape.")


def check_positive(name: str, x, *, allow_zero: bool = False) -> None:
    if not is_concrete(x):
        return
    arr = np.asarray(x)
    bad = arr < 0 if allow_zero else arr <= 0
    if bad.any():
        what = "negative" if allow_zero else "zero or negative"
        raise ValueError(
            f"`{name}` has {int(bad.sum())} {what} value(s), first at index "
            f"{_first(bad)}; "
            + (
                "weights must be >= 0."
                if allow_zero
                else "sigmas must be > 0 (flag or drop those rows; to pad with rows "
                "that contribute nothing use weight 0, never sigma 0)."
            )
        )


def check_radians(name: str, angle) -> None:
    """Refuse a (concrete) angular size above `MAX_PSIZE` radians (3.4 arcmin): a
    value in µas passed as radians (`40.0` for `uas_to_rad(40.0)`) would otherwise
    give a flat image or a penalty that swamps every other term."""
    if is_concrete(angle) and float(angle) > MAX_PSIZE:
        raise ValueError(
            f"`{name}` = {float(angle):g} rad is larger than {MAX_PSIZE:g} rad (3.4 "
            "arcmin): angles are in radians; convert µas with "
            f"`eqmodels.uas_to_rad` (e.g. `uas_to_rad({float(angle):g})`)."
        )


def host_real(x):
    """`x` as a Python float when it is a real number: a Python or numpy scalar, or
    a concrete 0-d numpy / JAX array of a real (non-bool) type; else `None`.
    (Argument checks read numbers through this, so that `jnp.array(0.6)` is the
    number it holds, not a "must be a number" refusal.)"""
    if isinstance(x, bool | np.bool_):
        return None
    if isinstance(x, numbers.Real):
        return float(x)
    dtype = getattr(x, "dtype", None)
    if (
        getattr(x, "shape", None) == ()
        and dtype is not None
        and np.issubdtype(dtype, np.number)
        and not np.issubdtype(dtype, np.complexfloating)
        and is_concrete(x)
    ):
        return float(x)
    return None


def positive_number(name: str, x, *, allow_zero: bool = False) -> float:
    """`x` as a finite float `> 0` (`>= 0` with `allow_zero`): a `TypeError` for
    anything but a number (see `host_real`), a `ValueError` naming `name` for a
    value out of range."""
    value = host_real(x)
    if value is None:
        raise TypeError(f"`{name}` must be a number, got {x!r}.")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(
            f"`{name}` must be finite and {'>=' if allow_zero else '>'} 0, got {x!r}."
        )
    return value


def file_path(path) -> str:
    """`path` (a str or os.PathLike) as a str, or a `TypeError` naming `path`."""
    try:
        return os.fspath(path)
    except TypeError:
        raise TypeError(
            f"`path` must be a file path (a str or os.PathLike), got "
            f"{type(path).__name__}."
        ) from None


def check_flag(name: str, value) -> bool:
    """A `bool` (or numpy bool) switch, refusing anything else (`"no"` would
    otherwise count as true)."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"`{name}` must be True or False, got {value!r}.")
    return bool(value)


_PACKAGE = str(pathlib.Path(__file__).resolve().parent)
# Wrappers a call into eqmodels may pass through (runtime type checkers, Equinox's
# module machinery, JAX's transformations): not the user's line either.
_WRAPPERS = ("jaxtyping", "beartype", "equinox", "jax")


def _internal(filename: str) -> bool:
    if filename.startswith(_PACKAGE):
        return True
    for name in _WRAPPERS:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None)
        if where and filename.startswith(str(pathlib.Path(where).parent)):
            return True
    return False


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn` attributed to the first caller outside eqmodels (the user's
    line), however deep inside the package the warning is raised, and through
    whichever wrappers (a runtime type checker's): a fixed `stacklevel` is right
    for one call path only."""
    level, frame = 2, sys._getframe(1)  # 1 would be this function
    while frame is not None and _internal(frame.f_code.co_filename):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, category, stacklevel=level)
