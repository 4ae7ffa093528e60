"""The Python examples of the README and of the docs' home page run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_python_blocks_run(page: str) -> None:
    path = ROOT / page
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    assert blocks, f"{page} must have a runnable quickstart"
    for block in blocks:
        exec(compile(block, str(path), "exec"), {})
