"""Statements and scripts run as users run eqmodels: without the suite's runtime type
checker (the jaxtyping plugin) and with JAX's default configuration (x64 off,
float32 arrays), all in ONE separate interpreter per test session.

A test module declares its cases at module level (so that every case is known
before the first test runs):

```python
NOT_A_NUMBER = unchecked_error("em.Flux(True)", "TypeError")
SCRIPT = unchecked_script("import json, eqmodels as em\\nprint(json.dumps(1))")

def test_flux(unchecked):
    assert "`flux` must be a number" in unchecked[NOT_A_NUMBER]
```

The session fixture `unchecked` (tests/conftest.py) runs the cases of every
selected test module in one interpreter, started at the session's start, and maps
each case to its result:

- `unchecked_error(statement, exc, setup="")`: the message (`str`) of the
  exception `exc` (a name, or a tuple expression, evaluated after `setup`) that
  `statement` raises, or `None` if it raises nothing. `setup` runs first, after
  `import json, numpy as np, eqmodels as em`.
- `unchecked_script(code, *args)`: the JSON value of the last line `code` prints
  (`sys.argv[1:]` is `args`).

Each case runs in its own namespace; the warning filters, `sys.argv` and JAX's x64
switch are restored after it. Anything else a case raises (a failing `setup`, an
exception of another type) fails the test that reads it, with the traceback. A
check about the process itself (which modules it imported) still needs a fresh
interpreter of its own (`tests.helpers.run_without_x64`).

Run as `python -m tests.unchecked CASES.json RESULTS.json` (by the fixture).
"""

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import sys
import traceback
import warnings


@dataclasses.dataclass(frozen=True)
class Case:
    kind: str  # "error" or "script"
    code: str
    exc: str = ""
    setup: str = ""
    args: tuple[str, ...] = ()
    module: str = dataclasses.field(default="", compare=False)

    @property
    def key(self) -> str:
        text = json.dumps([self.kind, self.code, self.exc, self.setup, self.args])
        return hashlib.sha1(text.encode()).hexdigest()

    def __str__(self):  # pytest ids
        return self.code if self.kind == "error" else f"script-{self.key[:8]}"


# Every case declared so far, by key (the test modules fill it on import).
CASES: dict[str, Case] = {}


def _declare(case: Case) -> Case:
    CASES.setdefault(case.key, case)
    return case


def _caller_module() -> str:
    frame = sys._getframe(2)
    return frame.f_globals.get("__name__", "")


def unchecked_error(statement: str, exc: str, setup: str = "") -> Case:
    """Declare a statement whose `exc` message a test reads (see the module)."""
    return _declare(Case("error", statement, exc, setup, module=_caller_module()))


def unchecked_script(code: str, *args: str) -> Case:
    """Declare a script whose last printed JSON line a test reads."""
    return _declare(
        Case("script", code, args=tuple(map(str, args)), module=_caller_module())
    )


def environment() -> dict:
    """The child's environment: CPU, JAX's defaults (no x64)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_ENABLE_X64", None)
    return env


def _run_case(case: dict, jax) -> dict:
    ns = {"__name__": "__main__"}
    out = io.StringIO()
    argv = sys.argv
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(out):
            if case["kind"] == "error":
                exec("import json, numpy as np, eqmodels as em\n" + case["setup"], ns)
                exc = eval(case["exc"], ns)
                try:
                    exec(case["code"], ns)
                except exc as e:
                    return {"value": str(e)}
                return {"value": None}
            sys.argv = ["-c", *case["args"]]
            exec(case["code"], ns)
        lines = out.getvalue().strip().splitlines()
        if not lines:
            return {"error": "the script printed nothing"}
        return {"value": json.loads(lines[-1])}
    except BaseException:
        return {"error": traceback.format_exc() + out.getvalue()[-2000:]}
    finally:
        sys.argv = argv
        if jax.config.jax_enable_x64:
            jax.config.update("jax_enable_x64", False)


def _main(cases_path: str, results_path: str) -> None:
    import jax

    cases = json.loads(open(cases_path).read())
    results = {case["key"]: _run_case(case, jax) for case in cases}
    tmp = results_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f)
    os.replace(tmp, results_path)


if __name__ == "__main__":
    try:
        _main(*sys.argv[1:3])
    except BaseException:
        # A crash outside the cases: every waiting test reads it.
        with open(sys.argv[2] + ".tmp", "w") as f:
            json.dump({"__crash__": traceback.format_exc()}, f)
        os.replace(sys.argv[2] + ".tmp", sys.argv[2])
        raise
