"""Checks for the modules you write: parity with a numpy reference, gradients
against finite differences, and the same numbers under `jit`, `vmap` and sharding.

These are the checks eqmodels' own test-suite runs on every built-in term. Each one
raises an `AssertionError` with a readable report when it fails, so they work as
plain statements in a pytest test:

```python
import eqmodels.testing as emt

def test_my_term():
    term = MyChi2(...)
    emt.check_against_numpy(term, my_chi2_numpy, image)  # value and gradient
    emt.check_grad_fd(term, image)  # autodiff vs central differences
    emt.check_transforms(term, image)  # eager == jit == vmap (== sharded)
```

Tolerances default by dtype: relative `1e-12` in float64 and `1e-5` in float32,
relative to the largest magnitude of the reference (so entries near zero of a
vector do not dominate). Reports give the worst difference in ULPs of that scale
and in relative terms, and where it occurs.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from ._sharding._mesh import sharded_parts
from ._terms._base import AbstractDataTerm
from ._terms._objective import Objective, provides_residuals
from ._terms._sharded import ShardedChi2


__all__ = [
    "assert_close",
    "check_against_numpy",
    "check_grad_fd",
    "check_transforms",
    "default_rtol",
]


def default_rtol(dtype: Any) -> float:
    """The default relative tolerance of a parity check for `dtype`: `1e-12` for
    float64 / complex128, `1e-5` for float32 / complex64, and 8 machine epsilons
    for 16-bit types (float16 `7.8e-3`, bfloat16 `6.3e-2`: `1e-5` is below their
    rounding).

    **Arguments:** `dtype`, a numpy or JAX dtype (or an array's `.dtype`).

    **Returns:** the tolerance, a float.
    """
    if np.dtype(dtype) in (np.float64, np.complex128):
        return 1e-12
    eps = float(jnp.finfo(_real_dtype(dtype)).eps)
    return max(1e-5, 8 * eps)


def _real_dtype(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        return np.finfo(dtype).dtype
    return dtype if np.issubdtype(dtype, np.floating) else np.dtype(np.float64)


def assert_close(
    actual: ArrayLike,
    desired: ArrayLike,
    *,
    rtol: float | None = None,
    atol: float = 0.0,
    name: str = "value",
) -> None:
    """Assert `max |actual − desired| ≤ rtol · max|desired| + atol`.

    The comparison is relative to the **scale** of `desired` (its largest
    magnitude), not elementwise, so a gradient's near-zero entries do not demand
    more digits than the computation has.

    **Arguments:**

    - `actual`: the computed array (its dtype sets the default `rtol` and the ULP
      size of the report).
    - `desired`: the reference array, same shape.
    - `rtol`: relative tolerance (default: [`eqmodels.testing.default_rtol`][] of
      `actual`'s dtype).
    - `atol`: absolute tolerance added to it.
    - `name`: what is compared, for the report (e.g. `"gradient"`).

    **Raises:** `AssertionError` with the worst difference, where it occurs, its
    size in ULPs of the scale and in relative terms, on a shape mismatch or on
    non-finite values in `actual` or `desired`.
    """
    a = np.asarray(actual)
    d = np.asarray(desired)
    dtype = _real_dtype(a.dtype)
    rtol = default_rtol(a.dtype) if rtol is None else float(rtol)
    if a.shape != d.shape:
        raise AssertionError(
            f"{name}: shape {a.shape} differs from the reference's {d.shape}."
        )
    for arr, label, tail in (
        (a, "", lambda w: f" (reference {d[w]!r})."),
        (d, "the reference has ", lambda w: ": fix the reference (a NaN compares "
         "with nothing)."),
    ):  # fmt: skip
        bad = ~np.isfinite(arr)
        if bad.any():
            where = np.unravel_index(int(np.argmax(bad)), arr.shape) if arr.ndim else ()
            raise AssertionError(
                f"{name}: {label}{int(bad.sum())} non-finite value(s), first at index "
                f"{tuple(int(i) for i in where)}: {arr[where]!r}{tail(where)}"
            )
    if a.size == 0:
        return
    diff = np.abs(a.astype(np.complex128) - d.astype(np.complex128))
    k = np.unravel_index(int(np.argmax(diff)), a.shape) if a.ndim else ()
    worst = float(diff[k])
    scale = float(np.max(np.abs(d)))
    bound = rtol * scale + atol
    if worst <= bound:
        return
    ulp = float(np.spacing(dtype.type(max(scale, np.finfo(dtype).tiny))))
    rel = worst / scale if scale > 0 else np.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        elementwise = np.where(diff > 0, diff / np.abs(d), 0.0)
    where = tuple(int(i) for i in k)
    raise AssertionError(
        f"{name} differs from the reference ({dtype.name}, rtol {rtol:.1e}, atol "
        f"{atol:.1e}):\n"
        f"  worst |actual - desired| = {worst:.3e} at index {where}: actual "
        f"{a[k]!r}, desired {d[k]!r}\n"
        + (
            f"  = {worst / ulp:.3g} ULP of the reference scale max|desired| = "
            f"{scale:.6g} ({dtype.name} ULP {ulp:.3e})\n"
            if scale > 0
            else "  the reference is exactly 0: give an `atol`\n"
        )
        + f"  relative to that scale: {rel:.3e} > rtol {rtol:.1e} "
        f"(bound {bound:.3e}); worst elementwise relative difference "
        f"{float(np.max(elementwise)):.3e}"
    )


@eqx.filter_jit
def _jit_value_and_grad(fn, args, argnums):
    return jax.value_and_grad(lambda *a: fn(*a), argnums=argnums)(*args)


def _value_and_grad(fn, args, argnums, jit):
    if jit:
        return _jit_value_and_grad(fn, args, argnums)
    return jax.value_and_grad(lambda *a: fn(*a), argnums=argnums)(*args)


def _check_callable(name, fn):
    if not callable(fn):
        raise TypeError(f"`{name}` must be callable, got {type(fn).__name__}.")


def check_against_numpy(
    fn: Callable[..., Any],
    fn_numpy: Callable[..., tuple[Any, Any]],
    *args: Any,
    argnums: int = 0,
    rtol: float | None = None,
    grad_rtol: float | None = None,
    atol: float = 0.0,
    jit: bool = True,
) -> None:
    """Check a module's value **and** gradient against a plain-numpy reference.

    Evaluates `jax.value_and_grad(fn, argnums)(*args)` (under `eqx.filter_jit`
    unless `jit=False`; `fn` is passed as an argument, so a module is compiled
    once per structure) and `fn_numpy(*numpy_args)`, which returns
    `(value, gradient)` with the gradient derived by hand, and compares both with
    [`eqmodels.testing.assert_close`][].

    **Arguments:**

    - `fn`: the JAX function or module (e.g. a data term, `term(image)`) returning
      a real scalar.
    - `fn_numpy`: the reference, called with the same arguments converted to numpy
      arrays, returning `(value, gradient w.r.t. args[argnums])`.
    - `*args`: the arguments (e.g. an image).
    - `argnums`: which argument the gradient is taken with respect to.
    - `rtol`: relative tolerance of the value (default by the widest of the
      result's and the arguments' dtypes: `1e-12` in float64, `1e-5` in float32,
      so a float64 input computed in float32 fails); `grad_rtol` of the gradient
      (default: `rtol`); `atol` an absolute tolerance for both.
    - `jit`: evaluate under `eqx.filter_jit` (default) or eagerly.

    **Raises:** `AssertionError` with a report naming the value or the gradient,
    the worst difference in ULPs and in relative terms.
    """
    _check_callable("fn", fn)
    _check_callable("fn_numpy", fn_numpy)
    if not args:
        raise TypeError("give the arguments to evaluate `fn` at (e.g. an image).")
    if not 0 <= argnums < len(args):
        raise ValueError(f"`argnums`={argnums} is out of range for {len(args)} args.")
    value, grad = _run(
        "jax.jit" if jit else "jax.value_and_grad",
        _value_and_grad,
        fn,
        tuple(args),
        argnums,
        jit,
        subject="`fn`",
    )
    np_args = [np.asarray(a) if eqx.is_array_like(a) else a for a in args]
    out = fn_numpy(*np_args)
    try:
        ref_value, ref_grad = out
    except (TypeError, ValueError):
        raise TypeError(
            "`fn_numpy` must return a pair `(value, gradient)`, got "
            f"{type(out).__name__}."
        ) from None
    if rtol is None:
        # The strictest of the result's and the inputs' dtypes: a term that
        # silently computes a float64 image in float32 returns float32, and its
        # own dtype's tolerance would pass it (from a review).
        dtypes = [jnp.asarray(value).dtype] + [
            leaf.dtype
            for leaf in jax.tree_util.tree_leaves(args)
            if eqx.is_inexact_array(leaf) or isinstance(leaf, np.ndarray)
        ]
        rtol = min(default_rtol(d) for d in dtypes if np.issubdtype(d, np.inexact))
    assert_close(value, ref_value, rtol=rtol, atol=atol, name="value")
    assert_close(
        grad,
        ref_grad,
        rtol=rtol if grad_rtol is None else grad_rtol,
        atol=atol,
        name=f"gradient w.r.t. argument {argnums}",
    )


@eqx.filter_jit
def _jit_value(fn, x):
    return fn(x)


def check_grad_fd(
    fn: Callable[[Any], Any],
    x: Float[ArrayLike, "*shape"],
    *,
    grad: Float[ArrayLike, "*shape"] | None = None,
    n_directions: int = 4,
    rel_step: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
) -> None:
    """Check a gradient against central finite differences along random
    directions, fourth order: `⟨∇f(x), d⟩ ≈ (8 (f(x + h d) − f(x − h d)) −
    (f(x + 2h d) − f(x − 2h d))) / 12h`.

    Directions are standard normal (seeded), the step `h = rel_step · max|x|`
    (`rel_step` itself at `x = 0`).
    The differences are accurate to `O(h⁴)` plus rounding `ε|f|/h`: the defaults,
    `rel_step = 1e-6` with `rtol = 1e-6` in float64 and `rel_step = 1e-3` with
    `rtol = 1e-2` in float32, suit smooth functions of well-scaled inputs. (The
    closure χ² of M87 data at a Gaussian image, whose curvature along long
    baselines is large, failed second-order differences at `rel_step = 1e-5`.)

    **Arguments:**

    - `fn`: a function or module of one array returning a real scalar (evaluated
      under `eqx.filter_jit`).
    - `x`: the point (e.g. an image).
    - `grad`: the gradient to check, if it was computed elsewhere (default:
      `jax.grad(fn)(x)`).
    - `n_directions`: number of random directions.
    - `rel_step`, `rtol`: step and tolerance (relative to the largest directional
      derivative); defaults by `x`'s dtype, as above.
    - `atol`: an absolute tolerance added to it; default the finite differences'
      rounding error `10 ε max|f(x + k h d)| / h` (`ε` the dtype's machine epsilon).
      At a stationary point (a minimum) both derivatives are rounding noise,
      which no relative tolerance accepts: pass the size of that noise (e.g.
      `atol=1e-12` for a float64 penalty of order 1).

    The step is the same for every entry: a positive `x` spanning many decades
    (an image with faint pixels) may have entries smaller than `2h`, which
    `x − 2h d` takes negative, across a singularity of e.g. an entropy. Check such functions
    in the variables they are optimised in (log pixels), or lower `rel_step`.
    - `seed`: the directions' random seed.

    **Raises:** `AssertionError` with the directional derivatives (autodiff vs
    finite differences) and the worst difference.
    """
    _check_callable("fn", fn)
    if isinstance(n_directions, bool) or not isinstance(n_directions, int):
        raise TypeError(f"`n_directions` must be an integer, got {n_directions!r}.")
    if n_directions < 1:
        raise ValueError(f"`n_directions` must be >= 1, got {n_directions}.")
    xj = jnp.asarray(x)
    if not jnp.issubdtype(xj.dtype, jnp.floating):
        raise TypeError(f"`x` must be a real floating-point array, got {xj.dtype}.")
    f64 = xj.dtype == jnp.float64
    rel_step = (1e-6 if f64 else 1e-3) if rel_step is None else float(rel_step)
    rtol = (1e-6 if f64 else 1e-2) if rtol is None else float(rtol)
    default_atol = atol is None
    if grad is None:
        grad = _run("jax.grad", jax.grad(lambda y: fn(y)), xj, subject="`fn`")
    g = np.asarray(grad)
    if g.shape != xj.shape:
        raise ValueError(f"`grad` has shape {g.shape} but `x` has shape {xj.shape}.")
    rng = np.random.default_rng(seed)
    dirs = [rng.standard_normal(xj.shape) for _ in range(n_directions)]
    scale = float(jnp.max(jnp.abs(xj))) if xj.size else 0.0
    h = rel_step * (scale if scale > 0 else 1.0)  # an absolute step at x = 0
    x_np = np.asarray(xj, np.float64)
    fd, ad, f_max = [], [], 0.0
    for i, d in enumerate(dirs):
        f = {
            k: float(
                _run(
                    "jax.jit",
                    _jit_value,
                    fn,
                    jnp.asarray(x_np + k * h * d, xj.dtype),
                    subject="`fn`",
                )
            )
            for k in (-2, -1, 1, 2)
        }
        bad = [k for k, v in f.items() if not np.isfinite(v)]
        if bad:
            raise AssertionError(
                f"`fn` is not finite at x + k·h·d for k = {bad} (direction {i}, step "
                f"h = {h:.3e}): the finite differences cross a singularity or leave "
                "the function's domain; lower `rel_step`, or check in the variables "
                "the function is optimised in (e.g. log pixels)."
            )
        fd.append((8 * (f[1] - f[-1]) - (f[2] - f[-2])) / (12 * h))
        ad.append(float(np.sum(g.astype(np.float64) * d)))
        f_max = max(f_max, *(abs(v) for v in f.values()))
    if atol is None:
        atol = 10 * float(jnp.finfo(xj.dtype).eps) * f_max / h
    if default_atol and max(map(abs, fd + ad)) <= atol:
        # From a review: at x = 0 of a function flat there (or any stationary
        # point), a wrong gradient passed, both sides being rounding noise.
        raise AssertionError(
            "nothing is checked: every directional derivative (autodiff "
            f"{max(map(abs, ad)):.3e}, finite differences {max(map(abs, fd)):.3e} at "
            f"most) is within the rounding tolerance {atol:.3e} — `x` is a stationary "
            "point (an all-zero image?). Check at a generic point, or pass `atol` "
            "to accept rounding noise there."
        )
    try:
        assert_close(
            np.array(ad),
            np.array(fd),
            rtol=rtol,
            atol=float(atol),
            name="directional derivative",
        )
    except AssertionError as e:
        table = "\n".join(
            f"    direction {i}: autodiff {a:+.10e}, finite differences {b:+.10e}"
            for i, (a, b) in enumerate(zip(ad, fd))
        )
        raise AssertionError(
            f"the gradient disagrees with central finite differences ({xj.dtype} "
            f"`x`, step h = {h:.3e}; compared in float64):\n{table}\n{e}"
        ) from None


@eqx.filter_jit
def _jit_vg(term, x):
    return jax.value_and_grad(lambda y: term(y))(x)


@eqx.filter_jit
def _vmap_vg(term, xs):
    return jax.vmap(jax.value_and_grad(lambda y: term(y)))(xs)


@eqx.filter_jit
def _jit_residual_vg(term, x):
    return jax.value_and_grad(lambda y: jnp.sum(jnp.square(term.residuals(y))))(x)


_TRACE_HINT = (
    "it works eagerly; look for Python control flow on array values, `float()` / "
    "`np.asarray` of an array argument, or a shape that depends on values"
)
_VMAP_HINT = (
    "it works eagerly and under jit; look for a `jax.pure_callback` without "
    "`vmap_method`, or code that assumes unbatched shapes (e.g. `x.shape[0]` of a "
    "batched argument inside a custom rule)"
)
_ROWS_HINT = (
    "ShardedChi2 pads and splits the term's `row_fields` leaves and its forward "
    "model's points: check that every per-row leaf is declared there"
)


def _run(what, f, *args, hint=_TRACE_HINT, subject="the term"):
    try:
        return f(*args)
    except Exception as e:
        raise AssertionError(
            f"{subject} fails under {what}: {type(e).__name__}: {e}\n({hint})"
        ) from e


def check_transforms(
    term: Callable[[Any], Any],
    image: Float[ArrayLike, "ny nx"],
    *,
    batch: Float[ArrayLike, "b ny nx"] | None = None,
    rtol: float | None = None,
    sharded: bool = True,
) -> None:
    """Check that a term (or any module of an image) gives the same value and
    gradient eagerly, under `jit`, under `vmap` over a batch of images and, for a
    data term when more than one device is present, split over the devices by
    [`eqmodels.ShardedChi2`][]; and, for a term with a `residuals(image)` method
    (every data term; a regularizer that is a sum of squares), that `Σ r²` equals
    its value (what Gauss-Newton and Levenberg-Marquardt minimise).

    The sharded check uses `ShardedChi2(term, jax.make_mesh((k,), ("rows",)))` with
    `k = min(device count, term.rows)`: the rows are padded with zero-weight rows to
    a multiple of `k`, so it also checks that the term declares its per-row leaves
    in `row_fields` and that zero-weight rows contribute nothing. It is skipped for
    a forward model that declares no `point_fields` (which `ShardedChi2` needs).

    **Arguments:**

    - `term`: a data term, a regularizer, or any module / function of an
      `(ny, nx)` image returning a real scalar.
    - `image`: the image to evaluate at (eager value and gradient are the
      reference).
    - `batch`: a `(b, ny, nx)` stack for the `vmap` check (default: `image`
      scaled by 1, 0.9 and 1.1).
    - `rtol`: relative tolerance (default by dtype: `1e-12` in float64, `1e-5` in
      float32).
    - `sharded`: run the sharded check (when it applies).

    **Raises:** `AssertionError` naming the transform that fails (with the
    exception it raised) or disagrees (with the worst difference).
    """
    _check_callable("term", term)
    x = jnp.asarray(image)
    if x.ndim != 2:
        raise ValueError(f"`image` must be an (ny, nx) array, got shape {x.shape}.")
    if batch is None:
        # Three different images (an all-zero image scaled would be three copies).
        xs = (
            jnp.stack([x, 0.9 * x, 1.1 * x])
            if bool(jnp.any(x != 0))
            else jnp.stack([x, x + 0.05, x + 0.1])
        )
    else:
        xs = jnp.asarray(batch)
        if xs.ndim != 3 or xs.shape[1:] != x.shape:
            raise ValueError(
                f"`batch` must be a (b, ny, nx) stack of {x.shape} images, got shape "
                f"{xs.shape}."
            )

    def eager(y):
        return jax.value_and_grad(lambda z: term(z))(y)

    val, grad = eager(x)
    jval, jgrad = _run("jax.jit", _jit_vg, term, x)
    assert_close(jval, val, rtol=rtol, name="value under jit")
    assert_close(jgrad, grad, rtol=rtol, name="gradient under jit")

    vvals, vgrads = _run("jax.vmap", _vmap_vg, term, xs, hint=_VMAP_HINT)
    for i in range(xs.shape[0]):
        ref_val, ref_grad = eager(xs[i])
        assert_close(vvals[i], ref_val, rtol=rtol, name=f"value under vmap [{i}]")
        assert_close(vgrads[i], ref_grad, rtol=rtol, name=f"gradient under vmap [{i}]")

    residuals = term.residuals if provides_residuals(term) else None
    if isinstance(term, Objective) and (
        term.chi2_offset or not all(provides_residuals(t) for t in term.terms)
    ):
        residuals = None  # not a sum of squares
    if residuals is not None:
        # Gauss-Newton and Levenberg-Marquardt minimise Σ r²: a regularizer whose
        # `residuals` disagree with its value would be solved as another problem.
        r = _run("`residuals`", residuals, x)
        assert_close(
            jnp.sum(jnp.square(r)), val, rtol=rtol, name="Σ r² of `residuals(image)`"
        )
        # ... under jit, with their derivative: the solvers differentiate the
        # residuals themselves, not the value (from a review: residuals that
        # failed under jit, or whose custom derivative was wrong, passed).
        rval, rgrad = _run("jax.jit (its `residuals`)", _jit_residual_vg, term, x)
        assert_close(rval, val, rtol=rtol, name="Σ r² of `residuals(image)` under jit")
        assert_close(
            rgrad,
            grad,
            rtol=rtol,
            name="gradient of Σ r² through `residuals(image)` (what Gauss-Newton "
            "differentiates)",
        )

    if not (sharded and isinstance(term, AbstractDataTerm)):
        return
    if sharded_parts(term) or term.forward is None:
        return
    if getattr(term.forward, "point_fields", None) is None:
        return  # ShardedChi2 splits only models that declare their point leaves
    k = min(len(jax.devices()), term.rows)
    if k < 2:
        return
    mesh = jax.make_mesh((k,), ("rows",))
    what = f"ShardedChi2 over {k} devices"
    split = _run(what, ShardedChi2, term, mesh, hint=_ROWS_HINT)
    sval, sgrad = _run(what, _jit_vg, split, x, hint=_ROWS_HINT)
    assert_close(sval, val, rtol=rtol, name=f"value under ShardedChi2 ({k} devices)")
    assert_close(
        sgrad, grad, rtol=rtol, name=f"gradient under ShardedChi2 ({k} devices)"
    )
