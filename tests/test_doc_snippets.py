"""Every ```python snippet in README.md and docs/*.md runs as written (issue 41,
item 6), one test per snippet (`page:line`).

How a page's snippets run (docs/index.md says so to the reader):

- in a fresh folder per page (what a snippet writes lands there) holding, by name, the
  EHT release files of `../shared/data` (links, when present: a snippet may name
  a release's file as a user who downloaded it would), in one namespace per
  page, in the page's order, each page starting from the names the first snippet
  of docs/index.md defines (`em`, `path`, `data`, `grid`, `prior`, `model`, ...);
  the README's snippet starts from nothing;
- a snippet preceded by `<!-- snippet: skip (reason) -->` is not run (the reason
  is required, and shown as the skip's reason): fragments that cannot run as
  written (a multi-host start, a process's device count set before JAX starts);
- a snippet that is an excerpt of an example (`--8<-- "examples/x.py:section"`,
  pymdownx.snippets) is not run here: the examples run whole in
  tests/test_examples.py (neural_field.py in tests/test_image_models.py).

The README's first snippet is checked further in tests/test_readme.py."""

import contextlib
import os
import pathlib
import re

import pytest


try:  # the snippets' plots are drawn, never shown
    import matplotlib

    matplotlib.use("Agg")
except ImportError:
    pass

pytestmark = pytest.mark.slow  # real data, solves, the recipe


ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
START = ("docs/index.md", 0)  # the snippet every docs page starts from
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_MARKER = re.compile(r"<!--\s*snippet:\s*(\w+)\s*(?:\((.*?)\))?\s*-->\s*\Z", re.S)


def snippets(page: str) -> list[dict]:
    """The page's python snippets: line, code, and how it is run."""
    text = (ROOT / page).read_text()
    out = []
    for m in _BLOCK.finditer(text):
        before = text[: m.start()]
        marker = _MARKER.search(before.rstrip() + "\n")
        kind, reason = ("run", None)
        if marker:
            kind, reason = marker.group(1), marker.group(2)
            assert kind == "skip", f"{page}: unknown snippet marker {kind!r}"
            assert reason and reason.strip(), f"{page}: a skip needs its reason"
        code = m.group(1)
        if page == "README.md" and not out:
            kind, reason = "skip", "run and checked in tests/test_readme.py"
        if all(s.strip().startswith("--8<--") for s in code.strip().splitlines()):
            kind, reason = "skip", "an excerpt of an example, run whole in its test"
        out.append(
            {"line": before.count("\n") + 1, "code": code, "kind": kind, "why": reason}
        )
    return out


CASES = [(page, i) for page in PAGES for i in range(len(snippets(page)))]
_done: dict = {}  # (page, index) -> namespace after it, or the exception raised


_CACHE_KEYS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_enable_xla_caches",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


@contextlib.contextmanager
def _process_state_kept(where: pathlib.Path):
    """A snippet that turns JAX's persistent compilation cache on
    (`em.enable_compilation_cache()`, docs/performance.md) does so in `where`, not
    in the user's home, and not for the tests that run after it in this process."""
    import jax

    saved = {k: getattr(jax.config, k) for k in _CACHE_KEYS}
    env = os.environ.get("EQMODELS_CACHE_DIR")
    os.environ["EQMODELS_CACHE_DIR"] = str(where / "jax-cache")
    try:
        yield
    finally:
        if env is None:
            del os.environ["EQMODELS_CACHE_DIR"]
        else:
            os.environ["EQMODELS_CACHE_DIR"] = env
        changed = {k: v for k, v in saved.items() if getattr(jax.config, k) != v}
        for key, value in changed.items():
            jax.config.update(key, value)
        if changed:
            from jax._src import compilation_cache

            compilation_cache.reset_cache()


def _run(page, i, folder):
    if (page, i) in _done:
        return _done[(page, i)]
    if (page, i) == START or page == "README.md" and i == 0:
        ns = {"__name__": "snippet"}
    elif i == 0:
        ns = _run(*START, folder)
    else:
        ns = _run(page, i - 1, folder)
    where = folder / page.replace("/", "_").removesuffix(".md")
    if not where.is_dir():
        _link_release_files(where)
    if isinstance(ns, BaseException):
        first = getattr(ns, "snippet", None) or ns
        result = RuntimeError(f"an earlier snippet failed ({first})")
        result.snippet = first
    else:
        ns = dict(ns)
        snippet = snippets(page)[i]
        result = ns
        if snippet["kind"] == "run":
            cwd = os.getcwd()
            os.chdir(where)
            try:
                with _process_state_kept(where):
                    code = compile(snippet["code"], f"{page}:{snippet['line']}", "exec")
                    exec(code, ns)
            except Exception as e:  # noqa: BLE001 - kept for the later snippets
                result = e
                e.snippet = f"{page}:{snippet['line']}: {type(e).__name__}"
            finally:
                os.chdir(cwd)
    _done[(page, i)] = result
    return result


def test_pages_found():
    """The search finds the pages and their snippets (a test must be able to
    fail: an empty list would pass every parametrised case)."""
    assert "docs/recipe.md" in PAGES and "docs/index.md" in PAGES
    assert len(CASES) >= 50
    assert snippets(START[0])[START[1]]["kind"] == "run"


def _link_release_files(where: pathlib.Path) -> None:
    """A page's working folder, with links to the release files by name (not the
    Sgr A* release, which states no license: only its own tests read it)."""
    from .conftest import SHARED_DATA

    where.mkdir(parents=True)
    if SHARED_DATA.is_dir():
        for f in [*SHARED_DATA.rglob("*.uvfits"), *SHARED_DATA.rglob("*.fits")]:
            if "sgra" not in str(f).lower() and not (where / f.name).exists():
                (where / f.name).symlink_to(f)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The snippets' folders, one per page (`_link_release_files`)."""
    return tmp_path_factory.mktemp("snippets")


@pytest.mark.parametrize(
    "page, i",
    CASES,
    ids=[f"{p}:{snippets(p)[i]['line']}" for p, i in CASES],
)
def test_snippet_runs(page, i, folder):
    from .conftest import SHARED_DATA

    snippet = snippets(page)[i]
    if snippet["kind"] == "skip":
        pytest.skip(snippet["why"])
    result = _run(page, i, folder)
    if isinstance(result, BaseException):
        if not SHARED_DATA.is_dir() and "FileNotFoundError" in str(
            getattr(result, "snippet", type(result).__name__)
        ):
            pytest.skip(f"a release file of ../shared/data (absent): {result}")
        raise result
