"""The evidence behind the pairwise combination rule (``[Note: pairwise combination]``).

``tools/evidence/pairwise_rules.py`` combines the recorded RTX 4060 pairwise splits' part results by each
candidate rule; mmaemu's must reproduce every record, and each rejected candidate must fail on
the records the note names. Runs on every pairwise record (about 15 s with the cpu backend).
"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import RECORDINGS, load_tool, require


@pytest.fixture(scope="module")
def tool_and_records() -> tuple[Any, list[dict[str, Any]]]:
    require(RECORDINGS / "rtx4060-pairwise")
    tool = load_tool("pairwise_rules")
    return tool, tool.load_records(RECORDINGS.parent)


#: candidate -> (how many records reject it, records the note names among them)
REJECTED = {
    "fitted-serial-snake": (4, ["c5.v2_forced_probes/tri_big_0_9.1/out", "c5.j5_cublaslt/59/out",
                                "c5.j5_cublaslt/65/out", "c5.j5_cublaslt/89/out"]),
    "pairs-one-by-one": (3, ["c5.v2_forced_probes/tri_big_0_9.1/out", "c5.j5_cublaslt/59/out", "c5.j5_cublaslt/65/out"]),
    "pairs-descending": (2, ["c5.v2_forced_probes/tri_big_0_9.4/out", "c5.j5_cublaslt/89/out"]),
    "last-pair-summed": (24, ["ws2:r4.unverified_split_combos/r4_038_adv_split/out",
                              "ws2:r4.unverified_split_combos/r4b_109_adv_split/out"]),
    "last-pair-lower-first": (22, ["ws2:r4.unverified_split_combos/r4b_112_adv_split/out"]),
    "last-pair-at-the-end": (19, ["ws2:r4.unverified_split_combos/r4_107_adv_split/out",
                                  "c5.v4_torch_demo/16x96x5760/ws32M.float32.slow"]),
    "odd-part-early": (8, ["ws2:r4.unverified_split_combos/r4_062_adv_split/out",
                           "ws2:r4.unverified_split_combos/r4_237_adv_split/out", "c5.j5_cublaslt/89/out"]),
    "halving-tree": (34, []),
    "power-of-two-tree": (40, []),
    "pairs-in-order": (37, []),
    "two-accumulators": (46, []),
    "serial": (57, []),
}


def test_the_records_are_all_there(tool_and_records: tuple[Any, list[dict[str, Any]]]) -> None:
    _, records = tool_and_records
    assert len(records) == 514
    assert sum(r["expected"].numel() for r in records) == 62_836
    assert sorted({r["S"] for r in records}) == [*range(2, 17), 20, 24, 32]


def test_mmaemu_rule_reproduces_every_pairwise_record(tool_and_records: tuple[Any, list[dict[str, Any]]]) -> None:
    tool, records = tool_and_records
    assert tool.failures(tool.CANDIDATES["mmaemu"][0], records) == []


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_each_rejected_rule_fails_the_named_records(tool_and_records: tuple[Any, list[dict[str, Any]]],
                                                    name: str) -> None:
    tool, records = tool_and_records
    bad = tool.failures(tool.CANDIDATES[name][0], records)
    count, named = REJECTED[name]
    assert len(bad) == count
    assert set(named) <= set(bad)
