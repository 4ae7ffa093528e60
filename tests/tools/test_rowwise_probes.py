"""tools/probes/rowwise_probes.py: the recorder's row-wise probes separate every pair of row-wise kernel candidates, and
docs/data/rowwise_probes.json holds the counts the tool computes now."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("rowwise_probes_tool", ROOT / "tools" / "probes" / "rowwise_probes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_pair_of_candidates_is_separated_and_the_data_file_agrees() -> None:
    """A probe change that leaves two candidates with the same outputs fails here (a recording could not decide
    between them); so does a data file the tool would no longer write."""
    found = _tool().report()
    for name in ("hopper", "ada"):
        r = found[name]
        assert r["candidates"] == 48 and r["pairs"] == 48 * 47 // 2
        assert r["pairs_not_separated"] == 0 and r["min"] >= 16
        assert set(r["one_choice_apart"]) >= {"fusion", "order", "zero-bias"}
    assert set(found["hopper"]["one_choice_apart"]) >= {"promotion"}
    assert set(found["ada"]["one_choice_apart"]) >= {"accumulation", "schedule"}
    stored = json.loads((ROOT / "docs" / "data" / "rowwise_probes.json").read_text())
    assert stored == json.loads(json.dumps(found))
