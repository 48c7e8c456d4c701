"""The README's first snippet runs as written (from the repository root), and its
solve lowers the objective."""

import os
import pathlib
import re

import numpy as np
import pytest


pytestmark = pytest.mark.slow  # the README's snippet (a real solve)


ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_first_look_snippet_runs(capsys):
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## A first look") :]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    ns: dict = {"__name__": "readme"}
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        exec(compile(code, "README.md", "exec"), ns)
    finally:
        os.chdir(cwd)
    start = float(ns["objective"](ns["prior"]))
    assert float(ns["solution"].value) < start
    assert np.isfinite(float(ns["loss"]))
    assert "cphase" in capsys.readouterr().out
