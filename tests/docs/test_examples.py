"""The examples: the FP8 MLP runs (natively and under emulate), and the Evo 2 script's self-check
holds against vortex 1.1.0's own model classes on the CPU (no evo2, no GPU, no checkpoint)."""

from __future__ import annotations

import importlib.util
import io
import os
import pickle
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def mlp() -> ModuleType:
    return _load("fp8_mlp")


@pytest.fixture(scope="module")
def evo2() -> ModuleType:
    return _load("evo2_offload")


def test_fp8_mlp_example_runs(mlp: ModuleType, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    # One run of the MLP: torch's native CPU _scaled_mm, the comparator, takes seconds per call on some
    # CPUs (1.4 to 2.6 s at 16 x 1024 x 4096 on the 2-core Xeon), so the script's own entry point is
    # checked on the report that run gave (its arguments reach run, its output is render's).
    report = mlp.run("hopper", tokens=16)
    assert report.log.served == {(16, 4096, 1024): 4, (16, 1024, 4096): 2}
    assert all(0 < c.differing < c.total for c in report.layers)  # native CPU and H100 bits differ, a little
    monkeypatch.setattr(mlp, "run", lambda profile, tokens, seed: report if (profile, tokens, seed) == ("ada", 16, 3)
                        else pytest.fail(f"main passed {(profile, tokens, seed)}"))
    assert mlp.main(["--profile", "ada", "--tokens", "16", "--seed", "3"]) == 0
    text = capsys.readouterr().out
    assert text == mlp.render(report, 16) + "\n"
    assert "FP8 gated MLP, 16 tokens" in text and "6 calls emulated, 0 run natively" in text and "whole MLP" in text


@pytest.mark.parametrize("tokens", [1, 6, 7, 16])
def test_fp8_mlp_takes_exactly_the_tokens_asked(mlp: ModuleType, tokens: int) -> None:
    """``--tokens 7`` gives 7 rows (one sequence), not 6; an even count is a batch of two."""
    z = mlp.activations(tokens, torch.Generator().manual_seed(0))
    assert z.shape[:-1].numel() == tokens and z.shape[0] == (2 if tokens % 2 == 0 else 1)


def test_fp8_mlp_refuses_no_tokens(mlp: ModuleType) -> None:
    with pytest.raises(SystemExit) as exit_info:
        mlp.main(["--tokens", "0"])
    assert exit_info.value.code == 2


# ---- Evo 2 ---------------------------------------------------------------------------------


def _te_extra_state(scale_input: float, scale_weight: float, form: str) -> object:
    state = {
        "scale_fwd": torch.tensor([scale_input, scale_weight, 1.0]),
        "scale_inv_fwd": torch.tensor([1 / scale_input, 1 / scale_weight, 1.0]),
        "amax_history_fwd": torch.zeros(16, 3),
        "extra_fp8_variables": {"num_gemms": 1},
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    if form == "bytesio":
        return buffer
    if form == "tensor":
        return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    return pickle.dumps(state)


@pytest.mark.parametrize("form", ["bytesio", "tensor", "pickle"])
def test_reads_te_scales_in_each_serialised_form(evo2: ModuleType, form: str) -> None:
    scales = evo2.read_te_fp8_scales(_te_extra_state(21.0, 1500.0, form))
    assert (scales.input.item(), scales.weight.item()) == (21.0, 1500.0)
    assert evo2.read_te_fp8_scales(None) is None
    assert evo2.read_te_fp8_scales(torch.empty(0, dtype=torch.uint8)) is None


def test_a_projection_without_stored_state_takes_te_initial_scale(evo2: ModuleType) -> None:
    state = {"blocks.0.projections._extra_state": _te_extra_state(21.0, 1500.0, "bytesio")}
    stored = evo2.stored_scales(state, "blocks.0.projections")
    assert (stored.input.item(), stored.weight.item()) == (21.0, 1500.0)
    missing = evo2.stored_scales(state, "blocks.1.projections")
    assert (missing.input.item(), missing.weight.item()) == (1.0, 1.0)
    assert missing.input.dtype == torch.float32


def _has_vortex() -> bool:
    return importlib.util.find_spec("vortex") is not None


@pytest.mark.skipif(not _has_vortex() and not os.environ.get("CI"),
                    reason="vortex (pip install vtx==1.1.0, in the test extra) is not installed")
def test_evo2_selfcheck_against_vortex() -> None:
    """vortex 1.1.0's own StripedHyena, built on the CPU: exactly the Hyena projections replaced,
    vortex's forward pass runs, and each replaced projection's bits equal mmaemu.scaled_mm on
    operands cast as TE casts them (the example's exit status says whether every check held)."""
    run = subprocess.run([sys.executable, str(EXAMPLES / "evo2_offload.py"), "selfcheck"], check=False,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    out = run.stdout
    assert "selfcheck: 8 of 8 checks hold" in out and "FAIL" not in out
    assert "['blocks.0.projections', 'blocks.1.projections', 'blocks.2.projections']" in out
    assert out.count("M x N x K = 32 x 5760 x 1920 (21 tokens padded by vortex to 32), bits equal") == 3
    assert "S = 1 (table: row" in out and "grad mode on is refused" in out


def test_offload_moves_a_block_only_while_it_runs(evo2: ModuleType) -> None:
    block = torch.nn.Linear(16, 16)
    block.register_buffer("extra", torch.ones(2))
    seen: list[torch.device] = []
    block.register_forward_hook(lambda m, a, o: seen.append(m.weight.device))
    weight, extra = block.weight, block.extra
    handles = evo2.offload_blocks([block], "meta")
    block(torch.empty(1, 16, device="meta"))
    assert seen == [torch.device("meta")]
    assert block.weight is weight and block.extra is extra and weight.device.type == "cpu"
    for h in handles:
        h.remove()


def test_pass_fail_rule_and_fasta(evo2: ModuleType, tmp_path: Path) -> None:
    # the upstream test's rule, |mean loss - expected| < 1e-3 (expected 0.501953125 for the 1B)
    assert evo2.check_loss("evo2_1b_base", 0.50195 + 0.0009)[0] is True
    assert evo2.check_loss("evo2_1b_base", 0.50195 - 0.0011)[0] is False
    assert evo2.check_loss("evo2_1b_base", 1.248)[0] is False  # the loss evo2 issue #157 reports natively
    assert evo2.check_loss("evo2_40b", 0.2159424 + 0.0009)[0] is True
    assert evo2.check_loss("unknown", 0.3)[0] is None
    fasta = tmp_path / "seqs.fasta"
    fasta.write_text(">a first\nACGT\nTT\n\n>b\nGGA\n")
    assert evo2.read_fasta(fasta) == [("a first", "ACGTTT"), ("b", "GGA")]


def test_script_says_why_it_cannot_run(evo2: ModuleType, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evo2, "missing_runtime", lambda: "no CUDA GPU is visible")
    assert evo2.main(["test", "--model", "evo2_1b_base", "--checkpoint", "missing.pt"]) == 2
    assert "cannot run here: no CUDA GPU" in capsys.readouterr().err
    monkeypatch.undo()
    message = evo2.missing_runtime()
    assert message is not None  # neither evo2 nor a GPU in this environment
    assert "evo2" in message or "GPU" in message


def test_selfcheck_names_a_missing_dependency_of_vortex_rather_than_vortex(
        evo2: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without triton, vortex imports fail on triton: the message must name triton, not call vortex absent."""
    import builtins

    real_import = builtins.__import__

    def no_triton(name: str, *args: object, **kwargs: object) -> object:
        if name == "triton" or name.startswith("triton."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    for module in [m for m in sys.modules if m == "vortex" or m.startswith(("vortex.", "triton"))]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # set by the script: restored after the test
    monkeypatch.setattr(builtins, "__import__", no_triton)
    message = evo2._prepare_cpu_runtime()
    assert message is not None and "'triton'" in message and "not installed" not in message


def test_block_fp8_mlp_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/block_fp8_mlp.py: a DeepSeek-V3-style MLP block in checkpoint format as DeepGEMM on an H800 computes
    it, against the Triton kernel's model and a bf16 reference (small widths: seconds)."""
    module = _load("block_fp8_mlp")
    assert module.main(["--tokens", "4", "--hidden", "256", "--inner", "512"]) == 0
    out = capsys.readouterr().out
    assert "outputs whose bf16 bits differ from DeepGEMM's (sm_90)" in out and "the whole block" in out
    assert out.count("%") == 6 and "experimental" in out
    with pytest.raises(SystemExit):
        module.main(["--hidden", "200"])

