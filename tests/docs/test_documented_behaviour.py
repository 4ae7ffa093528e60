"""Every behaviour the docs state in a behaviour table (raises, warns, runs) is what the code does.

A *behaviour table* is a Markdown table of README.md or docs/*.md with a column named ``example``. Each row's
example cell holds one or more calls in backticks (several separated by ``<br>``), each run in the namespace
that the page's Python blocks build (run in order, up to the table), and each must give the row's outcome:

- from a column ``outcome``: ``raises X``, ``warns X`` (several: ``warns X, Y``) or ``runs``;
- else from a column ``exception``: ``raises`` the first class named in backticks there;
- else from a column ``warning``: ``warns`` the first class named in backticks there.

``raises X``: an instance of X (or of a subclass) escapes. ``warns X``: the call completes and emits at least
one warning of category X. ``runs``: the call completes, emitting no ``MmaemuWarning``. X is a class of
``mmaemu``, ``mmaemu.errors`` or Python's builtins.

A row no small call on a CPU can show (a GPU, a file another user owns) says ``covered by `tests/....py```
instead: that test file must exist and name the class. A row without an example fails: a documented
behaviour comes with its check. Between examples the harness restores what an example may change in the
process (torch's flush-denormal mode, mmaemu's once-per-process warning memories).

So a page that says a call raises while it is served (or warns while it runs silently) fails here, and
docs/limitations.md, which lists everything that raises or warns, has an example in every row.
"""

from __future__ import annotations

import builtins
import re
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from test_docs_blocks import PAGES, ROOT, blocks

import mmaemu
import mmaemu.errors

_SEPARATOR = re.compile(r"^\|?\s*:?-{3,}")


@dataclass(frozen=True)
class Row:
    page: str
    line: int  # of the table's first line: the page's Python blocks above it build the namespace
    number: int  # the row's own line
    outcome: str  # "raises X", "warns X, Y" or "runs"
    example: str  # the example cell as written

    @property
    def id(self) -> str:
        return f"{self.page}:{self.number}"


def _cells(line: str) -> list[str]:
    """A table line's cells: split at ``|`` outside code spans (``\\|`` is a literal bar)."""
    cells, cell, in_code, i = [], "", False, 0
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    while i < len(body):
        char = body[i]
        if char == "\\" and body[i + 1:i + 2] == "|":
            cell, i = cell + "|", i + 2
            continue
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += char
        i += 1
    return [*cells, cell.strip()]


def _first_class(cell: str) -> str:
    match = re.search(r"`([A-Za-z_][\w.]*)`", cell)
    assert match, f"no class named in backticks: {cell!r}"
    return match.group(1)


def rows(page: str, text: str | None = None) -> list[Row]:
    """The behaviour tables' rows of ``page`` (or of ``text``, read as that page)."""
    lines = ((ROOT / page).read_text() if text is None else text).splitlines()
    found: list[Row] = []
    i = 0
    while i < len(lines) - 1:
        if not (lines[i].lstrip().startswith("|") and _SEPARATOR.match(lines[i + 1].strip())):
            i += 1
            continue
        header = [c.lower() for c in _cells(lines[i])]
        start = i
        i += 2
        body: list[tuple[int, list[str]]] = []
        while i < len(lines) and lines[i].lstrip().startswith("|"):
            body.append((i + 1, _cells(lines[i])))
            i += 1
        if "example" not in header:
            continue
        column = header.index("example")
        for number, cells in body:
            cells += [""] * (len(header) - len(cells))
            if "outcome" in header:
                outcome = cells[header.index("outcome")].replace("`", "")
            elif "exception" in header:
                outcome = f"raises {_first_class(cells[header.index('exception')])}"
            elif "warning" in header:
                outcome = f"warns {_first_class(cells[header.index('warning')])}"
            else:
                raise AssertionError(f"{page}:{start + 1}: a behaviour table needs an outcome, exception or warning column")
            found.append(Row(page, start + 1, number, outcome.strip(), cells[column]))
    return found


ROWS = [row for page in PAGES for row in rows(page)]


def _class(name: str) -> type[BaseException]:
    for home in (mmaemu, mmaemu.errors, builtins):
        found = getattr(home, name.rsplit(".", 1)[-1] if name.startswith("mmaemu.") else name, None)
        if isinstance(found, type) and issubclass(found, BaseException):
            return found
    raise AssertionError(f"{name} is not an exception or warning class of mmaemu or Python")


def parse_outcome(text: str) -> tuple[str, list[type[BaseException]]]:
    """``("raises" | "warns" | "runs", classes)`` of an outcome cell; trailing words after the classes are a note."""
    match = re.match(r"(raises|warns|runs)\b\s*([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)?", text)
    assert match, f"an outcome is 'raises X', 'warns X' or 'runs', not {text!r}"
    kind, names = match.group(1), match.group(2)
    classes = [_class(n.strip()) for n in names.split(",")] if names and kind != "runs" else []
    assert (kind == "runs") == (not classes), f"{text!r}: raises and warns name a class, runs names none"
    return kind, classes


def examples(cell: str) -> list[str]:
    """The calls of an example cell (code spans separated by ``<br>``)."""
    calls = [part.strip() for part in re.split(r"<br\s*/?>", cell) if part.strip()]
    found = []
    for call in calls:
        match = re.fullmatch(r"`([^`]+)`(\s*\(.*\))?", call)
        assert match, f"an example is one call in backticks (a note in parentheses may follow): {call!r}"
        found.append(match.group(1))
    return found


_NAMESPACES: dict[tuple[str, int], dict[str, Any]] = {}


def namespace(page: str, line: int) -> dict[str, Any]:
    """What the page's unmarked Python blocks above ``line`` define (built once per table)."""
    key = (page, line)
    if key not in _NAMESPACES:
        names: dict[str, Any] = {"__name__": "__docs__"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for block in blocks(page):
                if block.language == "python" and block.mark is None and block.line < line:
                    exec(compile(block.code, f"{page}:{block.line}", "exec"), names)
        _NAMESPACES[key] = names
    return dict(_NAMESPACES[key])


@pytest.fixture
def fresh_process_state(monkeypatch: pytest.MonkeyPatch) -> Any:
    """What an example may change in the process, restored after it: the flush-denormal mode, and mmaemu's
    once-per-process warning memories (module-level sets named ``*_WARNED``), emptied so each example warns."""
    for name, module in list(sys.modules.items()):
        if name == "mmaemu" or name.startswith("mmaemu."):
            for attr, value in list(vars(module).items()):
                if attr.endswith("_WARNED") and isinstance(value, set):
                    monkeypatch.setattr(module, attr, set())
    yield
    torch.set_flush_denormal(False)


def run_example(code: str, names: dict[str, Any]) -> tuple[BaseException | None, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(compile(code, "<example>", "exec"), names)
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            return exc, list(caught)
    return None, list(caught)


def check(row: Row) -> None:
    """Raise AssertionError when ``row``'s examples do not give its outcome."""
    kind, classes = parse_outcome(row.outcome)
    covered = re.fullmatch(r"covered by `(tests/[\w/]+\.py)`.*", row.example)
    if covered:
        path = ROOT / covered.group(1)
        assert path.is_file(), f"{row.id}: {covered.group(1)} does not exist"
        text = path.read_text()
        assert all(c.__name__ in text for c in classes), f"{row.id}: {covered.group(1)} never names {classes}"
        return
    calls = examples(row.example)
    assert calls, f"{row.id}: every row of a behaviour table has an example (a call, or 'covered by `tests/...`')"
    for code in calls:
        raised, caught = run_example(code, namespace(row.page, row.line))
        where = f"{row.id}: `{code}` is documented as '{row.outcome}'"
        if kind == "raises":
            assert raised is not None, f"{where}, but it ran"
            assert isinstance(raised, tuple(classes)), f"{where}, but raised {type(raised).__name__}: {raised}"
            continue
        assert raised is None, f"{where}, but raised {type(raised).__name__}: {raised}"
        categories = [w.category for w in caught]
        if kind == "warns":
            missing = [c.__name__ for c in classes if not any(issubclass(got, c) for got in categories)]
            assert not missing, f"{where}, but emitted {[c.__name__ for c in categories]}"
        else:
            ours = [c.__name__ for c in categories if issubclass(c, mmaemu.MmaemuWarning)]
            assert not ours, f"{where} (silently), but warned {ours}"


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_the_documented_behaviour_is_the_codes(row: Row, fresh_process_state: None) -> None:
    check(row)


def test_limitations_backs_every_error_and_warning_with_an_example() -> None:
    """docs/limitations.md lists everything that raises or warns: each class of mmaemu.errors is the outcome of
    one of its behaviour rows at least, and its two main tables are behaviour tables."""
    page = [r for r in ROWS if r.page == "docs/limitations.md"]
    assert len({r.line for r in page}) >= 2 and len(page) >= 40, len(page)
    shown = {c for r in page for c in parse_outcome(r.outcome)[1]}
    classes = {c for c in vars(mmaemu.errors).values() if isinstance(c, type) and issubclass(c, (mmaemu.MmaemuError,
               mmaemu.MmaemuWarning)) and c.__module__ == "mmaemu.errors"}
    assert sorted(c.__name__ for c in classes - shown) == []


def test_a_wrong_claim_fails(fresh_process_state: None) -> None:
    """The checker itself, on a made-up page: saying that a served bias raises, or that a warned call runs
    silently, fails; saying what it does passes."""
    page = "made-up.md"
    text = ("```python\nx, w = torch.ones(32, 1024).to(e4m3), torch.ones(64, 1024).to(e4m3)\n```\n\n"
            "| example | outcome |\n|---|---|\n"
            "| `scaled_mm(x, w.t(), s, s, bias=bias, out_dtype=bf16)` | raises `UnsupportedFeatureError` |\n"
            "| `scaled_mm(x, w.t(), s, s, bias=bias, out_dtype=bf16)` | runs |\n"
            "| `scaled_mm(x, w.t(), s, s, bias=bias, out_dtype=bf16)` | warns `UnverifiedEpilogueWarning` |\n")
    wrong_raises, wrong_runs, right = rows(page, text)
    assert (right.line, right.number) == (5, 9)
    _NAMESPACES[(page, right.line)] = {
        "x": torch.ones(32, 1024).to(torch.float8_e4m3fn), "w": torch.ones(64, 1024).to(torch.float8_e4m3fn),
        "s": torch.tensor(1.0), "bias": torch.zeros(64, dtype=torch.bfloat16), "bf16": torch.bfloat16,
        "scaled_mm": mmaemu.scaled_mm}
    try:
        with pytest.raises(AssertionError, match="but it ran"):
            check(wrong_raises)
        with pytest.raises(AssertionError, match="silently"):
            check(wrong_runs)
        check(right)
    finally:
        del _NAMESPACES[(page, right.line)]
