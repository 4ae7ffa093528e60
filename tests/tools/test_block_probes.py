"""tools/probes/block_probes.py: the block probes separate every pair of each model's candidates, and a recording of them
(written as a GPU with the kernel would write it, the GPU emulated here by a candidate) replays to that candidate."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from mmaemu.kernels._block_model import BLOCK_MODELS, block_candidates
from mmaemu.recording._blockwise import BlockProbe, block_separation, computed_block
from mmaemu.recording._replay import main_replay, replay

TOOLS = Path(__file__).resolve().parents[2] / "tools"
DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "block_probes.json"


def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("block_probes_tool", TOOLS / "probes" / "block_probes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_separation_covers_every_model_and_separates_every_pair() -> None:
    stored = json.loads(DATA.read_text())
    for base in BLOCK_MODELS:
        row = stored[base]
        assert row["names"] == sorted((c.name for c in block_candidates(base)), key=lambda c: (c.count("/"), c))
        assert row["pairs_not_separated"] == 0 and row["min"] > 0, base


@pytest.mark.parametrize("base", ["deepgemm-sm90", "triton-block-sm89-mma-bk128-fpfusion@triton3.3-3.9"])
def test_the_separation_computed_afresh_is_the_committed_one(base: str) -> None:
    stored = json.loads(DATA.read_text())[base]
    counts = block_separation(base)
    names = stored["names"]
    for (x, y), count in counts.items():
        assert stored["counts"][names.index(x)][names.index(y)] == count, (x, y)


def _emulated(tmp_path: Path, base: str, candidate: str, name: str = "rec") -> Path:
    return tool().record(tmp_path / name, lambda p: computed_block(p, candidate), f"emulated {candidate}", base,
                         {"gpu": "emulated", "capability": [9, 0], "sm_count": 132})


def _dequantized(p: BlockProbe) -> torch.Tensor:
    """A kernel that is none of the candidates: the operands dequantized, one float32 matmul, rounded to bf16."""
    sa = p.scale_a.repeat_interleave(128, 1)
    sw = p.scale_w.repeat_interleave(128, 0).repeat_interleave(128, 1)[: p.w.shape[0]]
    return ((p.a.float() * sa) @ (p.w.float() * sw).t()).to(torch.bfloat16)


@pytest.mark.parametrize("candidate", ["deepgemm-sm90", "deepgemm-sm90/combination=chain-first/k-block=64"])
def test_a_recording_replays_to_the_candidate_the_gpu_computes(tmp_path: Path, candidate: str) -> None:
    """The replay passes (a recording of block probes alone needs no table and no live call) and names exactly the
    candidate that produced the outputs."""
    path = _emulated(tmp_path, "deepgemm-sm90", candidate)
    report = replay(path)
    assert report.passed, report.failures
    assert report.probes["block_kernels"] == [candidate] and report.probes["block_base"] == "deepgemm-sm90"
    assert main_replay(str(path), "auto", None, None) == 0


def test_outputs_of_another_kernel_fit_no_candidate(tmp_path: Path) -> None:
    """A GPU whose kernel is none of the base model's candidates fails the replay: no candidate fits."""
    path = tool().record(tmp_path / "rec", _dequantized, "a float32 matmul", "deepgemm-sm90",
                         {"gpu": "emulated", "capability": [9, 0], "sm_count": 132})
    report = replay(path)
    assert not report.passed and report.probes["block_kernels"] == []
    assert any("no candidate fits" in f for f in report.failures)


def test_record_needs_a_base_for_the_autotuned_runners() -> None:
    with pytest.raises(SystemExit):
        tool().main(["record", "/nonexistent-dir", "--runner", "torchao"])
