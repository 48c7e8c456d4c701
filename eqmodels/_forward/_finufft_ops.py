"""The jax-finufft transform pair used by `NUFFT`, with our own derivative and
batching rules.

- `centred_type2(f, py, px)`: `c_j = Σ_k f[..., k] exp(-i (k_y py_j + k_x px_j))`,
  centred modes, `f` of shape `(..., ny, nx)` → `(..., N)`.
- Reverse mode: the transpose of type 2 is type 1 **with the same `iflag=-1`**
  applied to the cotangent (no conjugation), `(..., N)` → `(..., ny, nx)`.
- Batching: jax-finufft 1.3.1's own batching rule breaks with jax 0.10.2
  (`batching.not_mapped` was removed), so both raw transforms are wrapped in
  `jax.custom_batching.custom_vmap`: a batch of images with shared points becomes one
  multi-transform call (the fast path FINUFFT offers); batched points fall back to a
  `lax.map`. This works on jax versions with or without that bug.

- Forward mode: not supported. A `custom_vmap` function re-enters its own batching
  rule under a batched JVP (`jax.hessian`, `jacfwd` of a gradient), which broadcast
  the image once more at every level until XLA tried to allocate tens of GiB; the
  raw transforms therefore carry a `custom_jvp` that refuses forward mode with a
  message saying what works instead.

The operations are cached per `(eps, ny, nx, opts)` so that `jit` sees the same function
objects on every call (no recompilation).
"""

import functools

import jax
import jax.numpy as jnp


_IFLAG = -1

FORWARD_MODE_MESSAGE = (
    "NUFFT supports reverse-mode derivatives of first order (`jax.grad`, "
    "`jax.vjp`, `jax.jacrev`, under `jit` and `vmap`), not forward mode (`jax.jvp`, "
    "`jax.jacfwd`, `jax.hessian`, a gradient of a gradient). Use `SeparableFT` or "
    "`DirectFT` (the same numbers, every transform) for those."
)


def _reverse_mode_only(op):
    """`op` with a JVP rule that refuses forward mode (see the module docstring)."""
    op = jax.custom_jvp(op)

    @op.defjvp
    def _jvp(primals, tangents):
        raise NotImplementedError(FORWARD_MODE_MESSAGE)

    return op


def _broadcast_batch(axis_size, batched, args):
    return [
        a if b else jnp.broadcast_to(a, (axis_size, *a.shape))
        for a, b in zip(args, batched)
    ]


@functools.cache
def centred_ops(eps: float, ny: int, nx: int, opts=None):
    """`(type2, type1, type2_with_vjp)` for this tolerance, grid shape and FINUFFT
    options (`jax_finufft.options.Opts`, hashable, or None)."""
    import jax_finufft  # imported when first needed: 0.25 s of start-up

    @jax.custom_batching.custom_vmap
    def type2(f, py, px):
        # jax-finufft takes at most one leading (multi-transform) axis: flatten.
        lead = f.shape[:-2]
        if len(lead) > 1:
            f = f.reshape(-1, ny, nx)
        c = jax_finufft.nufft2(f, py, px, iflag=_IFLAG, eps=eps, opts=opts)
        return c.reshape(*lead, c.shape[-1])

    @type2.def_vmap
    def _type2_vmap(axis_size, in_batched, f, py, px):
        fb, pyb, pxb = in_batched
        if not (pyb or pxb):
            if not fb:
                f = jnp.broadcast_to(f, (axis_size, *f.shape))
            return type2(f, py, px), True
        f, py, px = _broadcast_batch(axis_size, in_batched, (f, py, px))
        return jax.lax.map(lambda a: type2(*a), (f, py, px)), True

    @jax.custom_batching.custom_vmap
    def type1(c, py, px):
        lead = c.shape[:-1]
        if len(lead) > 1:
            c = c.reshape(-1, c.shape[-1])
        f = jax_finufft.nufft1((ny, nx), c, py, px, iflag=_IFLAG, eps=eps, opts=opts)
        return f.reshape(*lead, ny, nx)

    @type1.def_vmap
    def _type1_vmap(axis_size, in_batched, c, py, px):
        cb, pyb, pxb = in_batched
        if not (pyb or pxb):
            if not cb:
                c = jnp.broadcast_to(c, (axis_size, *c.shape))
            return type1(c, py, px), True
        c, py, px = _broadcast_batch(axis_size, in_batched, (c, py, px))
        return jax.lax.map(lambda a: type1(*a), (c, py, px)), True

    type2 = _reverse_mode_only(type2)
    type1 = _reverse_mode_only(type1)

    @jax.custom_vjp
    def transform(f, py, px):
        return type2(f, py, px)

    def _fwd(f, py, px):
        return type2(f, py, px), (py, px)

    def _bwd(res, g):
        py, px = res
        # Points are data, not parameters: they get zero cotangents.
        return type1(g, py, px), jnp.zeros_like(py), jnp.zeros_like(px)

    transform.defvjp(_fwd, _bwd)
    return type2, type1, transform
