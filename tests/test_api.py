"""The public API is discoverable: `__all__` lists every public name (and nothing
else), `help(eqmodels)` shows each, no stray module names leak, and every public
name has an entry in the API reference of the docs."""

import inspect
import os
import pathlib
import pydoc
import re
import subprocess
import sys

import pytest

import eqmodels as em


ROOT = pathlib.Path(__file__).resolve().parents[1]


def _public():
    return {
        n
        for n in dir(em)
        if not n.startswith("_") and not inspect.ismodule(getattr(em, n))
    }


def test_all_lists_every_public_name():
    assert len(em.__all__) == len(set(em.__all__))
    assert set(em.__all__) == _public()


def test_no_stray_modules():
    stray = [
        n for n in dir(em) if not n.startswith("_") and inspect.ismodule(getattr(em, n))
    ]
    # `jaxtyping` is injected by the test-suite's runtime type-checking import hook
    # (`--jaxtyping-packages=eqmodels`), not by the package.
    assert set(stray) <= {"testing", "jaxtyping"}, stray


def test_help_lists_every_name():
    text = pydoc.render_doc(em, renderer=pydoc.plaintext)
    missing = [n for n in em.__all__ if n not in text]
    assert not missing, missing


def test_every_public_name_is_in_the_api_reference():
    docs = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    documented = set(re.findall(r"^::: eqmodels\.(\w+)", docs, flags=re.M))
    missing = sorted(set(em.__all__) - documented)
    assert not missing, f"add `::: eqmodels.NAME` entries to docs/ for {missing}"


@pytest.mark.slow
def test_import_starts_no_backend():
    """`import eqmodels` leaves JAX's configuration open: a user can still ask for
    one CPU device per core (or another platform) afterwards."""
    code = (
        "import jax, eqmodels as em\n"
        "jax.config.update('jax_num_cpu_devices', 3)\n"
        "assert len(jax.devices('cpu')) == 3, jax.devices('cpu')\n"
        "assert em.EHT2017.xyz.shape == (8, 3)\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
