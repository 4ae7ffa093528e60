"""``python -m mmaemu info`` reports versions, the device, profiles and backends."""

from __future__ import annotations

import pytest

from mmaemu.cli import main


def test_info(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "hopper-te" in out and "b200-mma-sync-experimental" in out
    assert "reference  available" in out
