"""The package's structure, checked from its sources: subpackages import each
other without cycles and at module top, no dispatch on module or class names,
Equinox's abstract/final pattern (`Abstract*` classes are abstract, concrete
classes are never subclassed inside the package), and no `strict=True` (a no-op in
Equinox 0.13, see docs/extending.md)."""

import ast
import inspect
import pathlib
import re

import equinox as eqx

import eqmodels as em


PKG = pathlib.Path(em.__file__).resolve().parent
SOURCES = sorted(PKG.rglob("*.py"))

# Lazy on purpose, each for a documented reason: the CLI keeps `eqmodels --help`
# fast (no JAX before it is needed) and imports matplotlib only to plot.
LAZY_IMPORT_FILES = {"_cli.py"}
# Imports inside functions still to be moved: none.
PENDING_LAZY_IMPORT_FILES: set[str] = set()

# Named Abstract* but still without abstract members: none.
PENDING_ABSTRACT: set[str] = set()

# The survey's cache fingerprint names functions and classes by module and
# qualified name: an identity for the cache key, not a dispatch.
FINGERPRINT_FILES = {"_solvers/_checkpoint.py"}


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_modules(path: pathlib.Path, node: ast.ImportFrom | ast.Import):
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    return [target]


def _subpackage(module: str) -> str:
    """`eqmodels._terms._base` -> `eqmodels._terms`; a top-level module is its own
    node (`eqmodels._grid`)."""
    return ".".join(module.split(".")[:2])


def _import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in SOURCES:
        here = _subpackage(_module_name(path))
        if here == "eqmodels":  # the package's re-exports sit above everything
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in _imported_modules(path, node):
                if target.startswith("eqmodels.") and _subpackage(target) != here:
                    graph.setdefault(here, set()).add(_subpackage(target))
    return graph


def _find_cycle(graph):
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_subpackages_import_each_other_without_cycles():
    graph = _import_graph()
    assert graph["eqmodels._terms"]  # the graph is really built
    cycle = _find_cycle(graph)
    assert cycle is None, f"import cycle between subpackages: {' -> '.join(cycle)}"


def test_the_cycle_check_finds_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}}) is None


def _function_level_imports(path):
    tree = ast.parse(path.read_text())
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _imported_modules(path, node):
                    if target == "eqmodels" or target.startswith("eqmodels."):
                        found.append((node.lineno, target))
    return found


def test_eqmodels_modules_are_imported_at_module_top():
    """Only optional third-party imports (jax-finufft, scipy, matplotlib,
    astropy) may be lazy; eqmodels' own modules are imported at the top."""
    offenders = []
    for path in SOURCES:
        rel = path.relative_to(PKG).as_posix()
        if rel in LAZY_IMPORT_FILES | PENDING_LAZY_IMPORT_FILES:
            continue
        offenders += [f"{rel}:{line} {t}" for line, t in _function_level_imports(path)]
    assert not offenders, f"imports inside functions: {offenders}"


_NAME_DISPATCH = [
    (r"__module__", "a module-name check"),
    (r"__qualname__", "a qualified-name check"),
    (r"__name__\s*(==|!=|in\b|not in\b)", "a class-name comparison"),
    (r"\.startswith\(\s*[\"']eqmodels", "a module-prefix check"),
    (r"__func__", "a method-identity check"),
    (r"\bis\s+(not\s+)?(getattr\()?Abstract\w+[.,]", "a method-identity check"),
]


def _name_dispatch(text: str) -> list[str]:
    return [
        what
        for pattern, what in _NAME_DISPATCH
        for line in text.splitlines()
        if re.search(pattern, line) and not line.lstrip().startswith("#")
    ]


def test_no_dispatch_on_module_or_class_names():
    """Contracts are declared by the classes (`hermitian_points`, `even`,
    `share_forward`, `has_residuals`, `AbstractSharded`, ...): a check of where
    a class is defined or what it is called, or of whether a method is the
    base's, must not come back. (`if __name__ == "__main__"` is not a check.)"""
    offenders = []
    for path in SOURCES:
        rel = path.relative_to(PKG).as_posix()
        if rel in FINGERPRINT_FILES:
            continue
        text = path.read_text().replace('if __name__ == "__main__"', "")
        offenders += [f"{rel}: {what}" for what in _name_dispatch(text)]
    assert not offenders, offenders


def test_the_name_dispatch_scan_finds_the_old_checks():
    old = [
        'if not type(forward).__module__.startswith("eqmodels."):',
        "getattr(cls, name) is not getattr(AbstractDataTerm, name)",
        'if type(data).__name__ == "Obsdata"',
    ]
    for line in old:
        assert _name_dispatch(line), line
    assert not _name_dispatch("return type(pulse).even")


def test_no_strict_true_in_the_package():
    offenders = [
        p.relative_to(PKG).as_posix()
        for p in SOURCES
        if re.search(r"\bstrict\s*=\s*True", p.read_text())
    ]
    assert not offenders, offenders


def _package_classes() -> set[type]:
    """Every class exported by `eqmodels` (and `eqmodels.testing`), with their
    bases defined in the package."""
    out = set()
    for name in em.__all__:
        obj = getattr(em, name)
        if isinstance(obj, type):
            out.update(
                c for c in obj.__mro__ if c.__module__.split(".")[0] == "eqmodels"
            )
    return out


def _is_abstract(cls: type) -> bool:
    if inspect.isabstract(cls):
        return True
    # Equinox: an `AbstractVar` not yet given a value.
    abstract_vars = getattr(cls, "__abstractvars__", None)
    if abstract_vars:
        return True
    return bool(getattr(cls, "__abstractmethods__", ()))


def test_abstract_final_pattern():
    """Equinox's pattern, which `strict=True` no longer enforces: a class named
    `Abstract*` is abstract (abstract methods or abstract variables); a concrete
    class is never subclassed by another class of the package (a concrete class
    is final; extension goes through the abstract bases)."""
    classes = _package_classes()
    assert em.AbstractTermWrapper in classes and em.GainCorrected in classes
    not_abstract = sorted(
        c.__qualname__
        for c in classes
        if c.__name__.startswith("Abstract")
        and issubclass(c, eqx.Module)
        and not _is_abstract(c)
        and c.__name__ not in PENDING_ABSTRACT
    )
    assert not not_abstract, f"named Abstract* but not abstract: {not_abstract}"
    subclassed = sorted(
        f"{base.__qualname__} <- {c.__qualname__}"
        for c in classes
        for base in c.__mro__[1:]
        if base in classes
        and issubclass(base, eqx.Module)
        and not base.__name__.startswith("Abstract")
        and not _is_abstract(base)
    )
    assert not subclassed, f"concrete classes subclassed in the package: {subclassed}"
