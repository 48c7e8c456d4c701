"""The NUFFT's transform pair as two JAX primitives of our own, linear in the image.

- `type2(f, py, px)`: `c_j = Σ_k f[..., k] exp(-i (k_y py_j + k_x px_j))`, centred
  modes, `f` of shape `(..., ny, nx)` → `(..., N)`.
- `type1(c, py, px)`: its transpose, `f_k = Σ_j c[..., j] exp(-i (k_y py_j + k_x
  px_j))` **with the same sign** (a transpose, not an adjoint: no conjugation),
  `(..., N)` → `(..., ny, nx)`.

Each is a primitive whose derivative rules say what the transforms are: linear in
their first argument, so the JVP applies the same transform to the tangent and the
transpose is the other transform. JAX builds every derivative from those two rules —
`grad`, `vjp`, `jacrev`, and forward mode (`jvp`, `jacfwd`, `linearize`, `hessian`,
a gradient of a gradient, `linear_transpose`), at any order, under `vmap`. The
points are data: their tangents are ignored and they get no cotangent.

The batching rule turns a batch of images (or cotangents) with shared points into
one multi-transform call (the fast path FINUFFT offers); batched points fall back
to a `lax.map`. (jax-finufft 1.3.1's own batching rule breaks with jax 0.10.2:
`batching.not_mapped` was removed. A `custom_vmap` wrapper, used before, re-entered
its own rule under a batched JVP until XLA tried to allocate tens of GiB.)

The computation itself — what the primitives lower to — is the transform library's:
jax-finufft (`backend="finufft"`, FINUFFT through XLA custom calls; CPU wheels) or
nufftax (`backend="nufftax"`, pure JAX, runs on GPUs; its point axes are swapped
relative to jax-finufft's). Under `shard_map` the result varies along the mesh axes
of the transformed array; `NUFFT` marks the image device-varying wherever its points
vary before the call (see `_nufft.py`), and the transpose does the same for a
cotangent.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir


_IFLAG = -1


def varying_axes(x) -> frozenset:
    """Mesh axes along which `x` varies inside `shard_map` (empty outside it).

    jax 0.10.2 spells it `aval.manual_axis_type.varying`; earlier releases `aval.vma`.
    """
    aval = jax.typeof(x)
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None:
        return frozenset(getattr(mat, "varying", ()))
    return frozenset(getattr(aval, "vma", ()))


def mark_varying_like(x, *points):
    """Inside `shard_map`, mark `x` device-varying wherever the points vary. Without
    it the gradient w.r.t. a replicated image is silently wrong (the transforms'
    results vary with the points); `pcast`'s transpose is the `psum` that the
    gradient needs. A no-op outside `shard_map`."""
    missing = frozenset().union(*(varying_axes(p) for p in points))
    missing = missing - varying_axes(x)
    if not missing:
        return x
    return jax.lax.pcast(x, tuple(sorted(missing)), to="varying")


# ---------------------------------------------------------------------------
# What the primitives compute: the transform libraries
# ---------------------------------------------------------------------------


def nufftax_module():
    """The nufftax package (optional: the `gpu` extra), or None."""
    try:
        import nufftax
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    return nufftax


def _type2_impl(f, py, px, *, backend, eps, ny, nx, opts):
    lead = f.shape[:-2]
    if math.prod(lead) == 0:  # an empty batch (nufftax's spreader divides by it)
        return jnp.zeros((*lead, py.shape[-1]), f.dtype)
    if backend == "finufft":
        import jax_finufft  # imported when first needed: it slows start-up

        # jax-finufft takes at most one leading (multi-transform) axis: flatten.
        g = f.reshape(-1, ny, nx) if len(lead) > 1 else f
        c = jax_finufft.nufft2(g, py, px, iflag=_IFLAG, eps=eps, opts=opts)
    else:
        nufftax = nufftax_module()

        def one(h):
            return nufftax.nufft2d2(px, py, h, eps=eps, isign=_IFLAG)

        c = jax.vmap(one)(f.reshape(-1, ny, nx)) if lead else one(f)
    return c.reshape(*lead, py.shape[-1])


def _type1_impl(c, py, px, *, backend, eps, ny, nx, opts):
    lead = c.shape[:-1]
    if math.prod(lead) == 0:
        return jnp.zeros((*lead, ny, nx), c.dtype)
    if backend == "finufft":
        import jax_finufft

        g = c.reshape(-1, c.shape[-1]) if len(lead) > 1 else c
        f = jax_finufft.nufft1((ny, nx), g, py, px, iflag=_IFLAG, eps=eps, opts=opts)
    else:
        nufftax = nufftax_module()

        def one(h):
            return nufftax.nufft2d1(px, py, h, (nx, ny), eps=eps, isign=_IFLAG)

        f = jax.vmap(one)(c.reshape(-1, c.shape[-1])) if lead else one(c)
    return f.reshape(*lead, ny, nx)


# ---------------------------------------------------------------------------
# The primitives and their rules
# ---------------------------------------------------------------------------


TYPE2 = Primitive("eqmodels_nufft_type2")
TYPE1 = Primitive("eqmodels_nufft_type1")
_IMPLS = {TYPE2: _type2_impl, TYPE1: _type1_impl}
_TRANSPOSES = {TYPE2: TYPE1, TYPE1: TYPE2}


def type2(f, py, px, *, backend: str, eps: float, ny: int, nx: int, opts=None):
    """The type-2 transform (see the module docstring); `opts` are FINUFFT options
    (hashable, or None)."""
    return TYPE2.bind(f, py, px, backend=backend, eps=eps, ny=ny, nx=nx, opts=opts)


def type1(c, py, px, *, backend: str, eps: float, ny: int, nx: int, opts=None):
    """The type-1 transform, the transpose of `type2` (see the module docstring)."""
    return TYPE1.bind(c, py, px, backend=backend, eps=eps, ny=ny, nx=nx, opts=opts)


def _type2_abstract_eval(f, py, px, *, ny, nx, **_):
    if f.shape[-2:] != (ny, nx) or py.ndim != 1 or py.shape != px.shape:
        raise ValueError(
            f"type2: image {f.shape} on a {ny}×{nx} grid, points {py.shape} and "
            f"{px.shape}."
        )
    return f.update(shape=(*f.shape[:-2], py.shape[0]), dtype=f.dtype)


def _type1_abstract_eval(c, py, px, *, ny, nx, **_):
    if c.shape[-1:] != py.shape or py.ndim != 1 or py.shape != px.shape:
        raise ValueError(f"type1: values {c.shape}, points {py.shape}, {px.shape}.")
    return c.update(shape=(*c.shape[:-1], ny, nx), dtype=c.dtype)


def _jvp(prim, primals, tangents, **params):
    x, py, px = primals
    out = prim.bind(x, py, px, **params)
    tx = tangents[0]  # the points' tangents are ignored: points are data
    if type(tx) is ad.Zero:
        return out, ad.Zero(jax.typeof(out).to_tangent_aval())
    return out, prim.bind(tx, py, px, **params)


def _transpose(prim, ct, x, py, px, **params):
    if ad.is_undefined_primal(py) or ad.is_undefined_primal(px):
        raise NotImplementedError("The NUFFT is not linear in its points.")
    if type(ct) is ad.Zero:
        return ad.Zero(x.aval), None, None
    ct = mark_varying_like(ct, py, px)
    return _TRANSPOSES[prim].bind(ct, py, px, **params), None, None


def _batch(prim, args, dims, **params):
    x, py, px = args
    dx, dpy, dpx = dims
    if dpy is None and dpx is None:
        # Shared points: the batch is one multi-transform call.
        return prim.bind(jnp.moveaxis(x, dx, 0), py, px, **params), 0
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    args = [
        jnp.broadcast_to(a, (size, *a.shape)) if d is None else jnp.moveaxis(a, d, 0)
        for a, d in zip(args, dims)
    ]
    return jax.lax.map(lambda a: prim.bind(*a, **params), tuple(args)), 0


_STATIC = ("backend", "eps", "ny", "nx", "opts")
for _prim, _abstract in ((TYPE2, _type2_abstract_eval), (TYPE1, _type1_abstract_eval)):
    # Outside `jit` a call runs the implementation compiled (and cached per shape
    # and parameters), not op by op, which is an order of magnitude slower (see
    # docs/benchmarks.md).
    _prim.def_impl(jax.jit(_IMPLS[_prim], static_argnames=_STATIC))
    _prim.def_abstract_eval(_abstract)
    mlir.register_lowering(_prim, mlir.lower_fun(_IMPLS[_prim], multiple_results=False))
    ad.primitive_jvps[_prim] = functools.partial(_jvp, _prim)
    ad.primitive_transposes[_prim] = functools.partial(_transpose, _prim)
    batching.primitive_batchers[_prim] = functools.partial(_batch, _prim)
