"""docs/performance.md shows figures only from the bench file it names (tools/docs/performance_tables.py), and
docs/data/ keeps only the current runs, named by what they are."""

from __future__ import annotations

import json
import re

import pytest
from conftest import ROOT, load_tool

tables = load_tool("performance_tables")
report = load_tool("validation_report")


def test_the_tables_are_rendered_from_the_bench_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert tables.main(["--check"]) == 0, capsys.readouterr().err


def test_a_figure_edited_by_hand_is_stale(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    page = tables.PAGE.read_text()
    edited = page.replace("| 64, 5760, 1920 | ", "| 64, 5760, 1920 | 1", 1)
    assert edited != page
    assert tables.render(edited, json.loads(tables.SOURCE.read_text())) == page


def _outside_generated_sections(text: str) -> str:
    text = re.sub(r"<!-- bench:([a-z-]+):start.*?<!-- bench:\1:end -->", "", text, flags=re.S)
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def test_no_figure_outside_the_generated_sections() -> None:
    """A timing, ratio or rate written by hand would be a figure no bench file backs."""
    prose = _outside_generated_sections(tables.PAGE.read_text())
    figures = [line for line in prose.splitlines()
               if report._FIGURE.search(report._NAMES.sub("", re.sub(r"`[^`]*`", "", line)))]
    assert not figures, figures


def test_the_bench_file_holds_its_command_and_machine() -> None:
    data = json.loads(tables.SOURCE.read_text())
    assert data["command"].startswith("python -m mmaemu bench ")
    assert f"--json {tables.SOURCE.relative_to(ROOT).as_posix()}" in data["command"]
    shapes = re.findall(r"--shape (\d+)x(\d+)x(\d+)", data["command"])
    assert [list(map(int, s)) for s in shapes] == [r["shape"] for r in data["results"]]
    assert {"cpu", "threads", "torch", "version", "cpu_fp8_kernel"} <= set(data)


def test_docs_data_keeps_only_what_the_docs_cite() -> None:
    """Every file of docs/data is cited by a page or by the tool that writes it, and none is named by a commit."""
    cited = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "tools").rglob("*.py")])
    files = sorted(p for p in (ROOT / "docs" / "data").iterdir() if p.is_file())
    assert files
    for path in files:
        assert f"docs/data/{path.name}" in cited or f"data/{path.name}" in cited, f"{path.name} is cited nowhere"
        assert not re.search(r"(?<![0-9a-z])[0-9a-f]{7,40}(?![0-9a-z])", path.stem), f"{path.name} is named by a commit"


def test_the_readmes_speed_figures_are_the_pages() -> None:
    """A time or a ratio the README quotes is one the performance page renders from the bench file."""
    readme = (ROOT / "README.md").read_text()
    page = tables.PAGE.read_text()
    quoted = re.findall(r"\b\d[\d,]*(?:\.\d+)?(?: ms| s|x)\b", readme)
    assert quoted, "the README says what a call costs"
    assert [q for q in quoted if q not in page] == []
