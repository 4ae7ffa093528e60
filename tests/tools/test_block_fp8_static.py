"""tools/evidence/block_fp8_static.py: the Triton block-FP8 kernel's compiled code holds what the block kernel models assume.

The committed analysis (docs/data/block_fp8_static.json: torchao 0.18's ``blockwise_fp8_gemm_kernel`` compiled
for sm_90 and sm_89 by Triton 3.6.0 and the newest) is checked against every Triton model of
:mod:`mmaemu.kernels._block_model` (its instruction, chain length, scale order and fusion), and the installed
Triton's compile of it is redone and compared with the committed one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from mmaemu.kernels._block_model import BLOCK_MODELS, BlockFamily, Operands
from mmaemu.kernels._model import Fusion, ScaleOrder

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("block_fp8_static", TOOLS / "evidence" / "block_fp8_static.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")[:3])


def test_the_committed_analysis_covers_triton_3_6_and_the_newest_and_contradicts_nothing() -> None:
    tool = _tool()
    stored = json.loads(tool.JSON.read_text())
    assert "3.6.0" in stored["triton"] and len(stored["triton"]) >= 2
    assert stored["triton_version"] == max(stored["triton"], key=_version)
    for version in stored["triton"]:
        assert tool.check(stored["by_triton"][version]) == [], version


def test_every_triton_model_matches_its_compiled_variant() -> None:
    """Each Triton model's instruction, chain length, first scale and fusion are what the compiled code of its
    path, BLOCK_K and fp fusion does, in every analysed Triton version (the model's name is the variant's)."""
    tool = _tool()
    stored = json.loads(tool.JSON.read_text())
    models = [m for m in BLOCK_MODELS.values() if m.family is BlockFamily.TRITON]
    assert len(models) == 12
    for model in models:
        path = model.name.split("-")[3]
        fused = model.fusion is Fusion.FMA
        variant = next(v for v in tool.VARIANTS if v.path == path and v.block_k == model.k_block and v.fp_fusion == fused)
        for version in stored["triton"]:
            row = stored["by_triton"][version]["variants"][variant.name]
            per_step = 16 if model.operands is Operands.FP16 else 32
            assert row["steps_per_chain"] * per_step == model.k_block, (model.name, version)
            assert row["e4m3_to_f16"] == (model.operands is Operands.FP16)
            assert row["instruction"][0].startswith("wgmma" if model.preset.name == "hopper" else "mma.sync")
            assert (model.preset.block_size == 16) == (path != "wgmma")  # k16 HMMA steps, ada's 16-blocks
            first = row["combination"]["steps"][0]
            assert first == ("mul a_s (per row)" if model.order is ScaleOrder.ROW_FIRST else "mul b_s (per column)")
            ops = {k.split(".")[0] for k in row["ptx_fp32"]}
            assert ops == ({"mul", "fma"} if fused else {"mul", "add"}), (model.name, version)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None or importlib.util.find_spec("torchao") is None,
                    reason="triton and torchao are needed to compile torchao's kernel")
def test_the_installed_triton_compiles_what_is_committed(tmp_path: Path) -> None:
    """torchao's kernel compiled afresh by the installed Triton (a process without TRITON_INTERPRET) gives the
    committed analysis of that version, and nothing in it contradicts the models."""
    import triton

    tool = _tool()
    stored = json.loads(tool.JSON.read_text())
    if triton.__version__ not in stored["triton"]:
        pytest.skip(f"triton {triton.__version__} is not among the analysed versions {stored['triton']}")
    out = tmp_path / "fresh.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton 3.9's warning about its future default, silenced; same behaviour
    run = subprocess.run([sys.executable, str(TOOLS / "evidence" / "block_fp8_static.py"), "--json", str(out)], capture_output=True,
                         text=True, env=env, timeout=900, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    fresh = json.loads(out.read_text())["by_triton"][triton.__version__]
    assert fresh == stored["by_triton"][triton.__version__], "stale: run python tools/evidence/block_fp8_static.py --json ..."
