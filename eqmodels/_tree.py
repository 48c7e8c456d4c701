"""Where two pytrees (modules, configurations, data sets) first differ: the text
of the errors that refuse to stack them."""

import dataclasses

import equinox as eqx
import jax
import numpy as np


def structure_difference(
    a, b, names=None, path: str = "", *, dtypes: bool = False
) -> str | None:
    """Where two pytrees of different structure first differ, as text
    (`` `model.scale` (a static field): 1.0 vs 2.0 ``), or `None` where the walk
    finds nothing (a container it does not know). Walks Equinox modules field by
    field (static fields compared by value), sequences and dicts; array leaves
    differ by shape (and, with `dtypes`, by dtype). Used by `survey` and
    `pad_and_stack` to say why configurations or data sets cannot be stacked."""
    if type(a) is not type(b):
        leaf = (jax.Array, np.ndarray, np.generic, int, float, complex)
        if isinstance(a, leaf) and isinstance(b, leaf):
            return None  # leaves of one structure (a jax vs a numpy array, ...)
        return f"`{path or '(root)'}`: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, eqx.Module):
        for f in dataclasses.fields(a):
            if not hasattr(a, f.name) or not hasattr(b, f.name):
                continue
            x, y = getattr(a, f.name), getattr(b, f.name)
            sub = f"{path}.{f.name}" if path else f.name
            if f.metadata.get("static", False):
                try:
                    same = bool(x is y or x == y)
                except Exception:  # noqa: BLE001 - objects without a boolean `==`
                    same = False
                if not same:
                    hint = getattr(type(a), "survey_hint", "")
                    return (
                        f"`{sub}` (a static field): {short_repr(x)} vs {short_repr(y)}"
                        + (f" ({hint})" if hint else "")
                    )
            else:
                found = structure_difference(x, y, None, sub, dtypes=dtypes)
                if found is not None:
                    return found
        return None
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return f"`{path or '(root)'}`: {len(a)} vs {len(b)} items"
        for k, (x, y) in enumerate(zip(a, b)):
            sub = names[k] if names is not None and k < len(names) else f"{path}[{k}]"
            found = structure_difference(x, y, None, sub, dtypes=dtypes)
            if found is not None:
                return found
        return None
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return f"`{path or '(root)'}`: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            found = structure_difference(
                a[k], b[k], None, f"{path}[{k!r}]", dtypes=dtypes
            )
            if found is not None:
                return found
        return None
    if eqx.is_array(a) and np.shape(a) != np.shape(b):
        return f"`{path}`: shape {np.shape(a)} vs {np.shape(b)}"
    if dtypes and eqx.is_array(a) and eqx.is_array(b) and a.dtype != b.dtype:
        return f"`{path}`: dtype {a.dtype} vs {b.dtype}"
    return None


def short_repr(x, limit: int = 120) -> str:
    """`repr(x)`, cut to `limit` characters (a static table can be long)."""
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 5] + " ...)"
