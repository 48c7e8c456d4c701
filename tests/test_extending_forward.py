"""The forward-model subclass of docs/extending.md runs and its parity test passes."""

import pathlib
import re


DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def test_forward_model_subclass_example():
    text = DOC.read_text()
    text = text[text.index("## A forward model") : text.index("## An image model")]
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 2
    ns: dict = {"__name__": "extending_forward_doc"}
    exec(compile("\n".join(blocks), str(DOC), "exec"), ns)
    ns["test_shift_by_one_pixel_is_a_roll"]()
