"""The package's architecture: its import graph (no cycle, no import up a floor) and docs/architecture.md.

The floors are the ``[tool.importlinter]`` contracts of ``pyproject.toml``, checked by import-linter
(``lint-imports``); the cycle check reads the same graph with grimp, import-linter's graph builder,
independently of how the floors are drawn. The page's package map must name every module of the package,
and nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"


def _package_modules() -> set[str]:
    """Every module file of the package, as ``mmaemu/<path>.py``."""
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / "mmaemu").rglob("*.py") if "__pycache__" not in p.parts}


def _named_on_page() -> set[str]:
    """The module files the package map names (``- `mmaemu/<path>.py`: ...``)."""
    return set(re.findall(r"^- `(mmaemu/[\w/]+\.py)`:", PAGE.read_text(), flags=re.M))


def test_every_module_is_on_the_architecture_page() -> None:
    missing = sorted(_package_modules() - _named_on_page())
    assert not missing, f"docs/architecture.md does not name {missing}: add one line per module to the package map"


def test_every_module_on_the_architecture_page_exists() -> None:
    stale = sorted(_named_on_page() - _package_modules())
    assert not stale, f"docs/architecture.md names {stale}, which do not exist"


def test_the_page_names_each_module_once() -> None:
    names = re.findall(r"^- `(mmaemu/[\w/]+\.py)`:", PAGE.read_text(), flags=re.M)
    assert len(names) == len(set(names))


def _graph():  # type: ignore[no-untyped-def]
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (pip install '.[test]')")
    return grimp.build_graph("mmaemu", include_external_packages=False)


def test_the_import_graph_has_no_cycle() -> None:
    graph = _graph()
    modules = sorted(graph.modules)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in modules}
    # Tarjan's strongly connected components: any component of two or more modules is a cycle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    assert not cycles, f"import cycles: {cycles}"
    # and no module imports the package root (``from . import x`` in a submodule runs back up)
    up = sorted(m for m in modules if m != "mmaemu" and "mmaemu" in edges[m])
    assert not up, f"modules importing the package root: {up}"


def test_the_floors_hold() -> None:
    pytest.importorskip("importlinter", reason="pip install '.[test]' installs import-linter")
    from importlinter.cli import lint_imports

    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0, (
        "an import crosses a floor of [tool.importlinter] in pyproject.toml; run lint-imports for the chain"
    )


def test_a_crossing_import_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The contracts can fail: an import of the call from the arithmetic is reported."""
    pytest.importorskip("importlinter")
    import shutil

    from importlinter.cli import lint_imports

    copy = tmp_path / "mmaemu"
    shutil.copytree(ROOT / "mmaemu", copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    model = copy / "model.py"
    model.write_text(model.read_text() + "\nfrom . import call  # noqa: E402 - crosses a floor on purpose\n")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in list(__import__("sys").modules) if m == "mmaemu" or m.startswith("mmaemu.")]:
        monkeypatch.delitem(__import__("sys").modules, name)
    monkeypatch.chdir(tmp_path)
    assert lint_imports(config_filename=str(tmp_path / "pyproject.toml"), no_cache=True) == 1


def test_every_test_file_lives_in_a_tier_folder() -> None:
    """Every test module is in one of tests/conftest.py's tier folders (its marker comes from the folder),
    and every tier folder holds tests."""
    from conftest import TIERS, TESTS

    assert not sorted(p.name for p in TESTS.glob("test_*.py")), "move these into a tier folder"
    folders = {p.parent.name for p in TESTS.glob("*/test_*.py")}
    assert folders == set(TIERS), folders


#: The pages that explain the internals to maintainers; every other page, the README and the examples
#: are what a user reads, and a user reaches only public modules.
MAINTAINER_PAGES = {"docs/architecture.md", "docs/backends.md", "docs/performance.md"}
INTERNAL = re.compile(r"mmaemu(?:\.\w+)*\._[a-z]\w*|from mmaemu[\w.]* import [^\n]*\b_[a-z]\w*")


def test_what_users_read_reaches_no_internal_module() -> None:
    """Underscored modules are internal: the README, the user pages and the examples import none."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*"))]
    found = []
    for page in pages:
        if page.relative_to(ROOT).as_posix() in MAINTAINER_PAGES or not page.is_file():
            continue
        found += [f"{page.relative_to(ROOT)}: {m.group(0)}" for m in INTERNAL.finditer(page.read_text())]
    assert not found, found
    internal = [m for m in _package_modules() if Path(m).name.startswith("_") and Path(m).stem not in {"__init__", "__main__"}]
    assert len(internal) >= 20, internal  # the underscored modules are still there to be kept out


#: The size bars of the house (issue 49): a module a maintainer can read whole, a function one screen of code.
MODULE_LINES = 500
FUNCTION_LINES = 80


def _docstring_lines(node: "ast.FunctionDef | ast.AsyncFunctionDef") -> int:
    import ast

    first = node.body[0] if node.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return (first.end_lineno or first.lineno) - first.lineno + 1
    return 0


def test_no_module_over_500_lines_and_no_function_over_80_lines_of_code() -> None:
    """Every module of the package at most 500 lines; every function at most 80 lines besides its docstring, except
    the compiled kernels (numba's ``njit``/``intrinsic`` and Triton's ``jit``: one loop nest each, split only at a
    cost in speed)."""
    import ast

    long_modules, long_functions = [], []
    for path in sorted((ROOT / "mmaemu").rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > MODULE_LINES:
            long_modules.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            decorators = " ".join(ast.unparse(d) for d in node.decorator_list)
            if re.search(r"\b(njit|jit|intrinsic|overload)\b", decorators):
                continue
            code = (node.end_lineno or node.lineno) - node.lineno + 1 - _docstring_lines(node)
            if code > FUNCTION_LINES:
                long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {code} lines")
    assert long_modules == [] and long_functions == []
