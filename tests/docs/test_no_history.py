"""The docs and the package say what is true now, not how this version was developed (issue 49's bars).

- the README's set-up section ("Two commands") is at most 30 lines;
- no dates in the README, the user docs or the package's source (history goes to CHANGELOG.md);
- no commit hashes in the README or the docs (docs/data/ names its files by what they are);
- no development anecdotes in the README or the docs (sessions, lent machines, development machines).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
SOURCE = sorted((ROOT / "mmaemu").rglob("*.py"))

_DATE = re.compile(r"\b20\d\d-(0[1-9]|1[0-2])(-\d\d)?\b|\b(January|February|March|April|May|June|July|August|September"
                   r"|October|November|December) (\d{1,2}, )?20\d\d\b")
#: 7 to 40 hexadecimal digits with a digit and a letter among them, outside code spans (operator names such as
#: ``f8f8bf16`` are written as code) and not a 0x literal
_HASH = re.compile(r"(?<![\w`])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w`])")
_ANECDOTE = re.compile(r"\bsessions?\b|\blent\b|development machine|\bad hoc\b|\bthis round\b|\bthe first hour\b", re.I)


def _prose(text: str) -> str:
    """``text`` without fenced blocks and code spans."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _hits(pattern: re.Pattern[str], paths: list[Path], prose: bool) -> list[str]:
    found = []
    for path in paths:
        text = path.read_text()
        for number, line in enumerate((_prose(text) if prose else text).splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    return found


def test_the_readme_set_up_section_is_at_most_30_lines() -> None:
    text = README.read_text()
    section = text[text.index("## Two commands"):text.index("\n## ", text.index("## Two commands") + 1)]
    lines = section.rstrip("\n").splitlines()
    assert len(lines) <= 30, f"the README's set-up section has {len(lines)} lines"
    # and it comes right after the first screen: what mmaemu is, proves and costs
    head = text[:text.index("## Two commands")]
    assert all(word in head for word in ("What it is", "What it proves", "What it costs"))
    assert text.index("## Two commands") < text.index("## Quickstart")


@pytest.mark.parametrize("where", ["docs", "source"])
def test_no_dates(where: str) -> None:
    paths = DOCS if where == "docs" else SOURCE
    assert _hits(_DATE, paths, prose=False) == []


def test_no_commit_hashes_in_the_docs() -> None:
    assert _hits(_HASH, DOCS, prose=True) == []


def test_no_development_anecdotes_in_the_docs() -> None:
    assert _hits(_ANECDOTE, DOCS, prose=True) == []


def test_the_patterns_find_what_they_are_for() -> None:
    """The checks themselves: each finds the history it bans, and passes what is not history."""
    assert _DATE.search("measured on 2026-12-05") and _DATE.search("in December 2026")
    assert not _DATE.search("seed 20261016") and not _DATE.search("shape 2048x4096")
    assert _HASH.search("the run of 5f5fb67") and _HASH.search("at 3beb0cc;")
    assert not _HASH.search(_prose("`mslk::f8f8bf16` and 0x7FFFFFFF, 1,767,416 rows, e4m3"))
    assert _ANECDOTE.search("no GPU was lent to the sessions") and not _ANECDOTE.search("a lentil")
