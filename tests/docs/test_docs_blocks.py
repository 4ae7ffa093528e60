"""Every code block of the README and the docs either runs here, on a CPU, or says why not.

A fenced block is run when nothing marks it: Python blocks in order, one namespace per page; shell
blocks line by line, for the lines that run mmaemu (``python -m mmaemu ...``, ``python examples/...``).
A block that cannot run here is preceded by an HTML comment, invisible on the rendered page:

- ``<!-- docs-test: covered-by tests/test_x.py -->``: another test runs it (the file must exist and
  hold the block's distinctive command or name);
- ``<!-- docs-test: skip REASON -->``: it cannot run on a CPU in a test (a GPU, a download, hours),
  with the reason.

The README's and the home page's Python blocks are run, with their bits pinned, by tests/docs/test_readme.py.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
PINNED_ELSEWHERE = {"README.md", "docs/index.md"}  # Python blocks run by tests/docs/test_readme.py

_BLOCK = re.compile(r"^```([a-z]*)\n(.*?)^```", re.S | re.M)
_MARK = re.compile(r"<!-- docs-test: (covered-by|skip) (.+?) -->\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    code: str
    mark: tuple[str, str] | None

    @property
    def shell(self) -> bool:
        return self.language in ("bash", "sh", "console", "") and not self.language == "python"


def blocks(page: str) -> list[Block]:
    text = (ROOT / page).read_text()
    found = []
    for match in _BLOCK.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        found.append(Block(page, text[: match.start()].count("\n") + 1, match.group(1), match.group(2),
                           (mark.group(1), mark.group(2)) if mark else None))
    return found


ALL = [b for page in PAGES for b in blocks(page)]


def _id(block: Block) -> str:
    return f"{block.page}:{block.line}"


def _mmaemu_commands(code: str) -> list[str]:
    lines = [line.split("  #", 1)[0].strip() for line in code.splitlines()]
    return [line for line in lines if line.startswith(("python -m mmaemu", "python examples/"))]


def test_every_block_is_run_or_marked() -> None:
    unmarked_shell = [b for b in ALL if b.mark is None and b.shell and b.code.strip()
                      and not _mmaemu_commands(b.code)]
    assert not unmarked_shell, [(_id(b), b.code[:60]) for b in unmarked_shell]
    for block in ALL:
        if block.mark and block.mark[0] == "covered-by":
            target = ROOT / block.mark[1].split()[0]
            assert target.is_file(), (_id(block), block.mark)
    assert len(ALL) >= 20


@pytest.mark.parametrize("page", [p for p in PAGES if p not in PINNED_ELSEWHERE
                                  and any(b.language == "python" and b.mark is None for b in blocks(p))])
def test_python_blocks_run(page: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the zoo's experimental presets warn, as documented
        for block in blocks(page):
            if block.language == "python" and block.mark is None:
                exec(compile(block.code, f"{page}:{block.line}", "exec"), namespace)


SHELL = [b for b in ALL if b.mark is None and b.shell and _mmaemu_commands(b.code)]


@pytest.mark.parametrize("block", SHELL, ids=[_id(b) for b in SHELL])
def test_shell_blocks_run(block: Block, tmp_path: Path) -> None:
    env = dict(os.environ, MMAEMU_CACHE_DIR=os.environ.get("MMAEMU_CACHE_DIR", str(tmp_path / "cache")))
    for command in _mmaemu_commands(block.code):
        argv = shlex.split(command)
        argv[0] = sys.executable
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])


def test_every_environment_variable_is_in_the_table() -> None:
    """Each MMAEMU_* variable the package, the tools, CI or the tests read is documented in docs/api.md."""
    used: set[str] = set()
    for folder in ("mmaemu", "tools", "tests", ".ci", "examples"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", "") and "venv" not in path.parts:
                used |= set(re.findall(r"MMAEMU_[A-Z0-9_]+", path.read_text(errors="replace")))
    used -= {"MMAEMU_TEST_FLAG"}  # a name the tests make up to test env_flag
    table = (ROOT / "docs" / "api.md").read_text().split("## Environment variables", 1)[1]
    documented = set(re.findall(r"^\| `(MMAEMU_[A-Z0-9_]+)` \|", table, flags=re.M))
    assert used and used <= documented, sorted(used - documented)
