"""mmaemu under torch.distributed: 2 processes (gloo, CPU) run a column- and a row-parallel FP8 MLP.

``examples/distributed_mlp.py`` checks on every rank that each GEMM (under ``emulate()`` and as
``EmulatedFP8Linear``) equals ``mmaemu.scaled_mm`` on that rank's shard, bit for bit, and that the
all-reduced output equals the partials gathered and added by hand. Here it is started with torchrun,
as a user would start it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.distributed as dist

import mmaemu
from mmaemu.quantization import quantize, reciprocal_scale

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "distributed_mlp.py"

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="this torch build has no torch.distributed with gloo")


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("distributed_mlp", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_ranks_each_emulate_their_own_shard(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(SCRIPT),
         "--profile", "hopper", "--tokens", "16"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the ranks write to one pipe: count the reports rather than trusting the line breaks between them
    out = proc.stdout
    assert out.count("equal mmaemu.scaled_mm on this shard") == 2 and "FAILED" not in out, out
    assert out.count("rank 0/2: GEMMs") == 1 and out.count("rank 1/2: GEMMs") == 1, out


def test_the_check_would_see_a_native_gemm() -> None:
    """The ranks' check discriminates: natively (no emulate) this machine's _scaled_mm gives other bits."""
    example = _example()
    w1, w2 = example.weights()
    w1q, w2q = example.shard(w1, w2, 0, 2)
    x = (torch.randn(16, example.IN, generator=torch.Generator().manual_seed(1)) * 4).to(torch.bfloat16)
    h_native, _ = example.mlp_scaled_mm(x, w1q, w2q)
    xq = quantize(x, torch.tensor(example.X_SCALE), torch.float8_e4m3fn)
    inv_x, inv_w = reciprocal_scale(torch.tensor(example.X_SCALE)), reciprocal_scale(torch.tensor(example.W_SCALE))
    emulated = mmaemu.scaled_mm(xq, w1q.t(), inv_x, inv_w, out_dtype=torch.bfloat16, use_fast_accum=True,
                                profile="hopper")
    assert bool((h_native.view(torch.int16) != emulated.view(torch.int16)).any())


def test_without_torchrun_it_says_how_to_run_it(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    assert _example().main([]) == 2
    assert "torchrun --standalone --nproc-per-node 2" in capsys.readouterr().err
