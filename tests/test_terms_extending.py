"""The "write your own term" code of docs/extending.md runs, and its numpy parity
tests pass."""

import pathlib
import re


DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def _namespace():
    text = DOC.read_text()
    text = text[text.index("## Write your own term") :]
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 4
    ns: dict = {"__name__": "extending_doc"}
    exec(compile("\n".join(blocks), str(DOC), "exec"), ns)
    return ns


def test_extending_examples_run():
    ns = _namespace()
    tests = [name for name in ns if name.startswith("test_")]
    assert set(tests) >= {
        "test_power_chi2_matches_numpy",
        "test_prior_l2_matches_numpy",
        "test_custom_terms_compose",
    }
    for name in tests:
        ns[name]()
