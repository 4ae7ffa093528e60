"""The shape-grid report (tools/evidence/shape_grid.py): docs/data/shape_grid.json and its table in docs/profiles.md are
current, count every shape of each grid once, and list no shipped rule a recorded row contradicts."""

from __future__ import annotations

import json

import pytest
from conftest import load_tool

shape_grid = load_tool("shape_grid")


def test_the_report_in_the_docs_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert shape_grid.main(["--check"]) == 0, capsys.readouterr().err


def test_every_shape_is_counted_once_and_no_shipped_rule_is_contradicted() -> None:
    data = json.loads(shape_grid.JSON_PATH.read_text())
    assert data["grids"]["small-180"]["shapes"] == 180
    assert {g: d["shapes"] for g, d in data["grids"].items()} == {"small-180": 180, "cubes": 6, "mlp-256-512-128": 26,
                                                                   "evo2": 39, "llama-2-7b": 39, "mistral-7b": 52}
    for profile, grids in data["counts"].items():
        for grid, modes in grids.items():
            for mode, counts in modes.items():
                total = sum(v for k, v in counts.items() if k != "inference_by_rule")
                assert total == data["grids"][grid]["shapes"], (profile, grid, mode)
                assert sum(counts["inference_by_rule"].values()) == counts["inference"]
    shipped = [r for r in data["rules"] if r["shipped"]]
    assert len(shipped) == 4
    assert all(r["contradictions"] == 0 and r["mechanism_contradictions"] == 0 and r["rows_checked"] > 0
               for r in shipped)
    # single-token decode and the small grid: decided by inference under the default profile
    assert data["counts"]["hopper"]["llama-2-7b"]["slow"]["inference_by_rule"] == {"h100-k-floor": 1}
    # the toy grids: every shape under the default profile is decided (h100-small-k, K < 1,024), none at 32 MiB
    for mode in ("slow", "fast", "e5m2-slow"):
        for grid in ("cubes", "mlp-256-512-128"):
            counts = data["counts"]["hopper"][grid][mode]
            assert counts["refused"] == 0 and counts["inference_by_rule"] == {"h100-small-k": data["grids"][grid]["shapes"]}
            assert data["counts"]["hopper-te"][grid][mode]["refused"] == data["grids"][grid]["shapes"]
        assert data["counts"]["hopper"]["small-180"][mode]["inference_by_rule"]["h100-small-k"] == 60  # K = 256, 512
