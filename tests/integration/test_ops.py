"""The mmaemu::scaled_mm operator: same bits as mmaemu.scaled_mm, a fake implementation, torch.compile
(fullgraph) and torch.export giving the bits of eager mode, idempotent registration."""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import mmaemu
from mmaemu import ops
from mmaemu.nn import EmulatedFP8Linear
from mmaemu.testing import assert_bitwise_equal

E4M3 = torch.float8_e4m3fn


def _operands(m: int, n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) * 30).clamp(-448, 448).to(E4M3)
    b = (torch.randn(n, k, generator=g) * 30).clamp(-448, 448).to(E4M3)
    return a, b, torch.tensor(1 / 64), torch.tensor(3 / 1024)


def test_operator_is_registered() -> None:
    schema = torch.ops.mmaemu.scaled_mm.default._schema
    assert schema.name == ops.OP_NAME
    assert [a.name for a in schema.arguments][:8] == [
        "mat1", "mat2", "scale_a", "scale_b", "bias", "scale_result", "out_dtype", "use_fast_accum",
    ]


@pytest.mark.parametrize(
    ("shape", "profile", "splitk"),
    [((16, 64, 1024), "hopper-te", "auto"), ((16, 64, 5760), "hopper", "auto"),
     ((16, 64, 5760), "hopper", (2, "contiguous")), ((16, 48, 256), "ada", 1)],
)
def test_operator_equals_scaled_mm(shape: tuple[int, int, int], profile: str, splitk: object) -> None:
    a, b, sa, sb = _operands(*shape)
    got = ops.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True, profile=profile,
                        splitk=splitk)  # type: ignore[arg-type]
    want = mmaemu.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True, profile=profile,
                            splitk=splitk)  # type: ignore[arg-type]
    assert_bitwise_equal(got, want)
    # slow accumulation, fp32 output, torch's defaults otherwise
    got = ops.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.float32, profile=profile, splitk=splitk)  # type: ignore[arg-type]
    want = mmaemu.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.float32, profile=profile, splitk=splitk)  # type: ignore[arg-type]
    assert_bitwise_equal(got, want)


@pytest.mark.parametrize("profile", ["hopper", "ada"])
def test_operator_serves_row_wise_scales_as_scaled_mm(profile: str) -> None:
    """Old code: the operator raised UnsupportedFeatureError for row-wise scales; now it serves what
    mmaemu.scaled_mm serves (torch 2.7.1's CUTLASS kernel), warned, in eager mode."""
    a, b, _, _ = _operands(32, 256, 512, seed=4)
    g = torch.Generator().manual_seed(5)
    sa, sb = torch.rand(32, 1, generator=g) + 0.5, torch.rand(1, 256, generator=g) + 0.5
    bias = torch.randn(256, generator=g).to(torch.bfloat16)
    with pytest.warns(mmaemu.UnrecordedKernelWarning):
        got = ops.scaled_mm(a, b.t(), sa, sb, bias, out_dtype=torch.bfloat16, profile=profile)
    with pytest.warns(mmaemu.UnrecordedKernelWarning):
        assert_bitwise_equal(got, mmaemu.scaled_mm(a, b.t(), sa, sb, bias, out_dtype=torch.bfloat16, profile=profile))


def test_operator_resolves_the_default_profile_when_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, sa, sb = _operands(16, 48, 256)
    monkeypatch.setenv("MMAEMU_PROFILE", "ada")
    got = ops.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
    want = mmaemu.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True, profile="ada")
    assert_bitwise_equal(got, want)


def test_operator_raises_what_scaled_mm_raises() -> None:
    a, b, sa, sb = _operands(16, 48, 256)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="bias with an FP8 output"):
        ops.scaled_mm(a, b.t(), sa, sb, torch.zeros(48, dtype=torch.bfloat16), out_dtype=torch.float8_e4m3fn, splitk=1)
    with pytest.raises(mmaemu.ReferenceRejectsError, match="column-major"):
        ops.scaled_mm(a, b.t().contiguous(), sa, sb, out_dtype=torch.bfloat16, splitk=1)
    with pytest.raises(mmaemu.SplitKUnknownError):
        ops.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, profile="hopper-te")
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="inference-only"):
        ops.scaled_mm(a, b.t(), sa.clone().requires_grad_(), sb, out_dtype=torch.bfloat16, splitk=1)
    with pytest.raises(ValueError):
        ops.scaled_mm(a, b.t(), sa, sb, splitk="never")
    with pytest.raises(ValueError):
        ops.scaled_mm(a, b.t(), sa, sb, profile="h100", splitk=1)


def test_fake_implementation_gives_shape_and_dtype() -> None:
    with FakeTensorMode():
        a = torch.empty(40, 256, dtype=E4M3)
        b = torch.empty(96, 256, dtype=E4M3)
        one = torch.empty(())
        y = torch.ops.mmaemu.scaled_mm(a, b.t(), one, one, None, None, torch.float16, True, "", "auto", "auto")
        z = torch.ops.mmaemu.scaled_mm(a, b.t(), one, one, None, None, None, False, "", "auto", "auto")
    assert (tuple(y.shape), y.dtype) == ((40, 96), torch.float16)
    assert (tuple(z.shape), z.dtype) == ((40, 96), E4M3)


def test_registration_is_idempotent() -> None:
    importlib.reload(ops)
    path = Path(ops.__file__)
    spec = importlib.util.spec_from_file_location("mmaemu_ops_copy", path)
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    copy.__package__ = "mmaemu"
    spec.loader.exec_module(copy)
    a, b, sa, sb = _operands(16, 48, 256)
    assert_bitwise_equal(copy.scaled_mm(a, b.t(), sa, sb, splitk=1), ops.scaled_mm(a, b.t(), sa, sb, splitk=1))


class _Model(torch.nn.Module):
    """Two emulated layers (delayed and current scaling) with an exact native op between them.

    ReLU, not GELU: inductor compiles the native ops too, and may change their bits (it fuses
    bf16 elementwise ops without the intermediate roundings of eager mode, and uses other
    vectorised math); only the emulated GEMMs are guaranteed the same bits compiled and eager.
    """

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.up = EmulatedFP8Linear((torch.randn(128, 1024, generator=g) * 0.03).to(torch.bfloat16),
                                    weight_scale=4096.0, input_scale=37.0)
        self.down = EmulatedFP8Linear((torch.randn(64, 128, generator=g) * 0.09).to(torch.bfloat16),
                                      weight_scale=1000.0, input_scale=None, splitk=1, profile="ada-te")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _input() -> torch.Tensor:
    return (torch.randn(2, 16, 1024, generator=torch.Generator().manual_seed(9)) * 2).to(torch.bfloat16)


def _has_compiler() -> bool:
    return any(shutil.which(c) for c in ("c++", "g++", "gcc", "clang++"))


@pytest.mark.skipif(not _has_compiler(), reason="torch.compile's inductor backend needs a C++ compiler on the CPU")
def test_compile_fullgraph_gives_the_bits_of_eager() -> None:
    torch._dynamo.reset()
    model, x = _Model(), _input()
    with torch.inference_mode():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)(x)  # fullgraph: a graph break would raise
    assert_bitwise_equal(compiled, eager)
    # and eager is mmaemu.scaled_mm on the quantised operands
    up = model.up
    with torch.inference_mode():
        xq, x_inv = up.quantize_input(x)
        h = mmaemu.scaled_mm(xq.reshape(-1, 1024), up.weight.t(), x_inv, up.weight_scale_inv,
                             out_dtype=torch.bfloat16, use_fast_accum=True, profile="hopper-te")
        assert_bitwise_equal(up(x).reshape(-1, 128), h)


def test_export_holds_the_operator_and_gives_the_bits_of_eager() -> None:
    model, x = _Model(), _input()
    with torch.no_grad():  # the layers' stored input scales (delayed scaling) run with grad mode off
        exported = torch.export.export(model, (x,))
    targets = [node.target for node in exported.graph.nodes if node.op == "call_function"]
    assert targets.count(torch.ops.mmaemu.scaled_mm.default) == 2
    with torch.inference_mode():
        assert_bitwise_equal(exported.module()(x), model(x))


def test_operator_and_module_take_the_same_profiles() -> None:
    """One rule (platforms._profiles.registered_name) for the profile the operator and the module carry: a
    user-registered Profile object is accepted by both (the operator took built-in ones only), a copy
    under a registered name by neither."""
    import dataclasses

    from mmaemu.platforms import register_profile, unregister_profile
    from mmaemu.platforms._profiles import PROFILES

    mine = dataclasses.replace(PROFILES["hopper"], name="ops-test-hopper")
    register_profile(mine)
    try:
        a, b, sa, sb = _operands(16, 32, 64)
        y = ops.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True, profile=mine, splitk=1)
        assert_bitwise_equal(y, mmaemu.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True,
                                                 profile="hopper", splitk=1))
        assert EmulatedFP8Linear(b.float(), weight_scale=1.0, input_scale=None, profile=mine).profile == mine.name
        copy = dataclasses.replace(mine)
        with pytest.raises(ValueError, match="not the profile registered under that name"):
            ops.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True, profile=copy, splitk=1)
        with pytest.raises(ValueError, match="not the profile registered under that name"):
            EmulatedFP8Linear(b.float(), weight_scale=1.0, input_scale=None, profile=copy)
    finally:
        unregister_profile(mine.name)
