"""The examples: the FP8 MLP runs (natively and under emulate), and the Evo 2 script's projection
replacement works on a stand-in module with Evo 2's attribute layout (no evo2, no GPU needed)."""

from __future__ import annotations

import importlib.util
import io
import pickle
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import mmaemu
from mmaemu.nn import EmulatedFP8Linear
from mmaemu.testing import assert_bitwise_equal

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
E4M3 = torch.float8_e4m3fn


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


def test_fp8_mlp_example_runs(mlp: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert mlp.main(["--tokens", "32"]) == 0
    text = capsys.readouterr().out
    assert "6 calls emulated, 0 run natively" in text and "whole MLP" in text
    report = mlp.run("hopper", tokens=16)
    assert report.log.served == {(16, 4096, 1024): 4, (16, 1024, 4096): 2}
    assert all(0 < c.differing < c.total for c in report.layers)  # native CPU and H100 bits differ, a little
    assert report.seconds < 60


# ---- Evo 2: a stand-in with the attribute layout of vortex's StripedHyena -----------------

HIDDEN = 1920  # Evo 2 1B: projections [5760, 1920]


class _HyenaBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre_norm = torch.nn.Identity()
        self.projections = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=False).to(torch.bfloat16)
        self.out_filter_dense = torch.nn.Linear(HIDDEN, HIDDEN, bias=True).to(torch.bfloat16)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        z = self.projections(self.pre_norm(u))
        return z[0] if isinstance(z, tuple) else z


class _AttentionBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner_mha_cls = torch.nn.Module()
        self.inner_mha_cls.Wqkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=False).to(torch.bfloat16)


class _StandIn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([_HyenaBlock(), _AttentionBlock(), _HyenaBlock()])


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


@pytest.fixture(scope="module")
def stand_in() -> tuple[_StandIn, dict[str, object]]:
    torch.manual_seed(2)
    model = _StandIn()
    state: dict[str, object] = dict(model.state_dict())
    state["blocks.0.projections._extra_state"] = _te_extra_state(21.0, 1500.0, "bytesio")
    state["blocks.2.projections._extra_state"] = _te_extra_state(13.0, 900.0, "tensor")
    state["blocks.1.inner_mha_cls._extra_state"] = None  # a module without FP8 scales
    return model, state


@pytest.mark.parametrize("form", ["bytesio", "tensor", "pickle"])
def test_reads_te_scales_in_each_serialised_form(evo2: ModuleType, form: str) -> None:
    scales = evo2.read_te_fp8_scales(_te_extra_state(21.0, 1500.0, form))
    assert (scales.input.item(), scales.weight.item()) == (21.0, 1500.0)
    assert evo2.read_te_fp8_scales(None) is None
    assert evo2.read_te_fp8_scales(torch.empty(0, dtype=torch.uint8)) is None


def test_replaces_only_the_fp8_projections(evo2: ModuleType, stand_in: tuple[_StandIn, dict[str, object]]) -> None:
    model, state = stand_in
    weights = {i: model.blocks[i].projections.weight.detach().clone() for i in (0, 2)}
    attention = model.blocks[1].inner_mha_cls.Wqkv
    names = evo2.replace_fp8_projections(model, state, profile="hopper-te")
    assert names == ["blocks.0.projections", "blocks.2.projections"]
    assert model.blocks[1].inner_mha_cls.Wqkv is attention
    assert isinstance(model.blocks[1].inner_mha_cls.Wqkv, torch.nn.Linear)
    assert isinstance(model.blocks[0].out_filter_dense, torch.nn.Linear)  # bf16 projections stay native

    # block 0 on a 13-token sequence: padded to M = 16 (a row of the hopper-te table), sliced back to 13
    u = (torch.randn(1, 13, HIDDEN, generator=torch.Generator().manual_seed(4)) * 2).to(torch.bfloat16)
    with torch.inference_mode():
        got = model.blocks[0](u)
    assert got.shape == (1, 13, 3 * HIDDEN)
    padded = torch.nn.functional.pad(u, (0, 0, 0, 3)).reshape(16, HIDDEN)
    xq = (padded.float() * 21.0).clamp(-448, 448).to(E4M3)
    wq = (weights[0].float() * 1500.0).clamp(-448, 448).to(E4M3)
    inv = torch.tensor(1.0) / torch.tensor([21.0, 1500.0])
    want = mmaemu.scaled_mm(xq, wq.t(), inv[0], inv[1], out_dtype=torch.bfloat16, use_fast_accum=True,
                            profile="hopper-te")
    plan = mmaemu.explain(xq, wq.t(), inv[0], inv[1], out_dtype=torch.bfloat16, use_fast_accum=True,
                          profile="hopper-te")
    assert plan.split is not None and plan.split.source == "table"
    assert_bitwise_equal(got.reshape(13, -1), want[:13])

    layer = model.blocks[2].projections.linear
    assert isinstance(layer, EmulatedFP8Linear) and layer.profile == "hopper-te"
    assert_bitwise_equal(layer.weight, (weights[2].float() * 900.0).clamp(-448, 448).to(E4M3))


def test_projection_with_bias_is_refused(evo2: ModuleType) -> None:
    model = _StandIn()
    model.blocks[0].projections = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=True)
    state = {"blocks.0.projections._extra_state": _te_extra_state(1.0, 1.0, "bytesio")}
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="bias"):
        evo2.replace_fp8_projections(model, state)


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
    assert evo2.check_loss("evo2_1b_base", 0.5022)[0] is True  # mmaemu's hopper-te result (seeds)
    assert evo2.check_loss("evo2_1b_base", 1.248)[0] is False  # an RTX 5070 Ti natively (evo2 issue #157)
    assert evo2.check_loss("evo2_40b", 0.2161)[0] is True
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
