"""torchao's real FP8 models under mmaemu.emulate(): tensor-wise and row-wise (PerRow, the rowwise training recipes) served.

torchao's ``quantize_`` asserts an sm_89+ GPU. Here it stands for the machine that quantized a model: only
its hardware check (``_check_hardware_support``) is switched off, every quantization step is torchao's
own. The CPU user's path (docs/models.md) is then taken for real: the state dict saved, loaded with
``weights_only=True`` into a fresh model with ``assign=True``, and run under ``emulate()``.
"""

from __future__ import annotations

import io
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import mmaemu
from mmaemu.testing import assert_bitwise_equal, bitwise_diff

torchao = pytest.importorskip("torchao", reason="torchao is not installed (pip install '.[test]')")
from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, PerTensor, quantize_  # noqa: E402

K, N, M = 1024, 64, 32  # a row of every H100 table (S = 1)


@pytest.fixture
def gpu_machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """torchao's quantize_ as it runs on an sm_89+ GPU: its hardware assertion off, nothing else changed."""
    import torchao.quantization.quant_api as quant_api

    monkeypatch.setattr(quant_api, "_check_hardware_support", lambda granularity: None)
    yield


def _model(bias: bool, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(K, K, bias=bias), torch.nn.ReLU(),
                               torch.nn.Linear(K, N, bias=bias)).to(torch.bfloat16)


def _x() -> torch.Tensor:
    return (torch.randn(M, K, generator=torch.Generator().manual_seed(5)) * 3).to(torch.bfloat16)


class _Capture(TorchDispatchMode):
    """Records the plain-tensor arguments of every aten._scaled_mm call (a native run)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if any(t is not torch.Tensor for t in types):
            return NotImplemented
        if func is torch.ops.aten._scaled_mm.default:
            self.calls.append((tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args), dict(kwargs)))
        return func(*args, **kwargs)


def load_checkpoint(data: bytes) -> dict[str, Any]:
    """docs/models.md's load: weights only; where the saving Python pickled torchao's enums through ``getattr``
    (Python 3.11.2 does, 3.11.7 does not), with ``getattr`` allowed for this trusted file only."""
    try:
        return torch.load(io.BytesIO(data), weights_only=True)  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001 - pickle.UnpicklingError, re-raised unless it is the getattr case
        if "GLOBAL getattr" not in str(exc):
            raise
    with torch.serialization.safe_globals([getattr]):
        return torch.load(io.BytesIO(data), weights_only=True)  # type: ignore[no-any-return]


def _quantized(granularity: Any, bias: bool = False) -> torch.nn.Module:
    model = _model(bias)
    quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=granularity))
    return model


def test_per_tensor_is_served_with_the_bits_of_the_operands_torchao_passes(gpu_machine: None) -> None:
    """Old code: the model ran natively under emulate() and the log said 0 served, 0 native."""
    model = _quantized(PerTensor())
    assert type(model[0].weight).__name__ == "Float8Tensor"
    x = _x()
    with torch.no_grad():
        with _Capture() as capture:
            native = model(x)
        with mmaemu.emulate(profile="hopper") as log:
            y = model(x)
    assert log.served == {(M, K, K): 1, (M, N, K): 1} and log.native_calls == 0
    assert len(capture.calls) == 2
    # the first GEMM's operands are the same whatever computes it: check that layer's bits directly
    args, kwargs = capture.calls[0]
    want = mmaemu.scaled_mm(*args, **kwargs, profile="hopper")
    with torch.no_grad(), mmaemu.emulate(profile="hopper"):
        first = model[0](x)
    assert_bitwise_equal(first, want)
    assert not bitwise_diff(y, native).equal  # the native CPU GEMM gives other bits: the calls were not missed


class _Served(TorchDispatchMode):
    """Inside ``emulate()``: records every aten._scaled_mm call's plain-tensor arguments and the result mmaemu served."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any], torch.Tensor]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if any(t is not torch.Tensor for t in types):
            return NotImplemented
        result = func(*args, **kwargs)  # the next mode down: emulate()
        if func is torch.ops.aten._scaled_mm.default:
            self.calls.append((tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args), dict(kwargs),
                               result.clone()))
        return result


def _assert_served_with_scaled_mm_bits(model: torch.nn.Module, x: torch.Tensor, shapes: dict[Any, int]) -> None:
    """Every _scaled_mm call of the model under emulate() is served, row-wise warned, and its result is
    mmaemu.scaled_mm's on the exact operands torchao passed; nothing runs natively."""
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mmaemu.emulate(profile="hopper", fallback="native") as log:
            with _Served() as served:
                model(x)
    assert log.served == shapes and log.native_calls == 0
    kernel_warnings = [w for w in caught if issubclass(w.category, mmaemu.UnrecordedKernelWarning)]
    assert len(kernel_warnings) == len(served.calls) == sum(shapes.values())
    for args, kwargs, got in served.calls:
        assert tuple(args[2].shape) == (args[0].shape[0], 1) and tuple(args[3].shape) == (1, args[1].shape[1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mmaemu.UnrecordedKernelWarning)
            assert_bitwise_equal(got, mmaemu.scaled_mm(*args, **kwargs, profile="hopper"))


@pytest.mark.parametrize("bias", [False, True])
def test_per_row_is_served_warned_with_the_bits_of_the_operands_torchao_passes(gpu_machine: None, bias: bool) -> None:
    """Old code: PerRow raised UnsupportedFeatureError (row-wise scales not modelled), or ran natively under
    fallback="native". Now each call runs torch 2.7.1's CUTLASS kernel model, warned, bias included."""
    model = _quantized(PerRow(), bias=bias)
    x = _x()
    _assert_served_with_scaled_mm_bits(model, x, {(M, K, K): 1, (M, N, K): 1})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnrecordedKernelWarning)
        with mmaemu.emulate(profile="hopper"):
            y = model(x)
        assert not bitwise_diff(y, model(x)).equal  # torch's native CPU result differs: the calls were served


@pytest.mark.parametrize("recipe", ["rowwise", "rowwise_with_gw_hp"])
def test_the_rowwise_training_recipes_forward_is_served(recipe: str) -> None:
    """torchao.float8's rowwise training recipes: the forward GEMM is row-wise (``Float8TrainingTensor``'s
    ``__torch_dispatch__`` calls torch._scaled_mm with [M, 1] and [1, N] scales); under emulate() it is served
    with mmaemu.scaled_mm's bits, warned (run with grad mode off: mmaemu is inference-only)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    model = _model(bias=False)
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe))
    assert type(model[0]).__name__ == "Float8Linear"
    _assert_served_with_scaled_mm_bits(model, _x(), {(M, K, K): 1, (M, N, K): 1})


def test_a_biased_torchao_model_runs_warned(gpu_machine: None) -> None:
    model = _quantized(PerTensor(), bias=True)
    with torch.no_grad(), mmaemu.emulate() as log:
        with pytest.warns(mmaemu.UnverifiedEpilogueWarning):
            model(_x())
    assert log.served_calls == 2


def test_the_cpu_users_path_a_model_quantized_elsewhere(gpu_machine: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/models.md: a state dict saved on the GPU machine, loaded here with weights_only=True and assign=True."""
    saved = io.BytesIO()
    torch.save(_quantized(PerTensor(), bias=True).state_dict(), saved)
    monkeypatch.undo()  # here: torchao's hardware check is back (it would refuse to quantize)
    here = _model(bias=True, seed=1)  # other float weights: loading must replace them
    state = load_checkpoint(saved.getvalue())
    here.load_state_dict(state, assign=True)
    assert type(here[0].weight).__name__ == "Float8Tensor"
    x = _x()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedEpilogueWarning)
        with mmaemu.emulate(profile="hopper") as log:
            y = here(x)
        with mmaemu.emulate(profile="hopper"):
            again = here(x)
    assert log.served_calls == 2 and log.native_calls == 0
    assert_bitwise_equal(y, again)



def _no_sm89_gpu() -> bool:
    from torchao.utils import is_sm_at_least_89

    return not is_sm_at_least_89()


@pytest.mark.skipif(not _no_sm89_gpu(), reason="an sm_89+ GPU is present: torchao quantizes here itself")
def test_torchao_refuses_to_quantize_here() -> None:
    """The premise of torchao_quantize_: on this machine torchao's own quantize_ refuses (its hardware check)."""
    model = _model(bias=False)
    with pytest.raises(AssertionError, match="compute capability"):
        quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor()))


def _weights(model: torch.nn.Module) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Each Linear's Float8Tensor weight: its FP8 codes and its scales."""
    return [(name, module.weight.qdata, module.weight.scale) for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear)]


@pytest.mark.parametrize("granularity", [PerTensor(), PerRow()], ids=["PerTensor", "PerRow"])
def test_torchao_quantize_on_the_cpu_is_torchaos_own_quantization(granularity: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/models.md's CPU path: mmaemu.quantization.torchao_quantize_ builds, on a machine torchao refuses, the
    model torchao's quantize_ builds on an sm_89+ GPU machine (stood for by switching its hardware check off):
    the same Float8Tensor weights, bit for bit (FP8 codes and fp32 scales), the same configuration, and under
    emulate() the same outputs; torchao's check is back afterwards."""
    from mmaemu.quantization import torchao_quantize_

    import torchao.quantization.quant_api as quant_api

    check = quant_api._check_hardware_support
    here = _model(bias=False)
    torchao_quantize_(here, Float8DynamicActivationFloat8WeightConfig(granularity=granularity))
    assert quant_api._check_hardware_support is check
    monkeypatch.setattr(quant_api, "_check_hardware_support", lambda granularity: None)
    gpu = _quantized(granularity)
    monkeypatch.undo()
    assert [type(m.weight).__name__ for m in (here[0], here[2])] == ["Float8Tensor"] * 2
    for (_, qdata, scale), (_, want_qdata, want_scale) in zip(_weights(here), _weights(gpu), strict=True):
        assert_bitwise_equal(qdata, want_qdata)
        assert_bitwise_equal(scale, want_scale)
    assert repr(here[0].weight.act_quant_kwargs) == repr(gpu[0].weight.act_quant_kwargs)
    x = _x()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnrecordedKernelWarning)
        with mmaemu.emulate(profile="hopper") as log:
            y = here(x)
        with mmaemu.emulate(profile="hopper"):
            want = gpu(x)
    assert log.served_calls == 2 and log.native_calls == 0
    assert_bitwise_equal(y, want)

def test_loading_needs_torchao_imported_first(tmp_path: Any, gpu_machine: None) -> None:
    """The note in docs/models.md: without ``import torchao``, a weights-only load of the checkpoint is refused."""
    path = tmp_path / "model-fp8.pt"
    torch.save(_quantized(PerTensor()).state_dict(), path)
    script = (f"import torch\ntry:\n    torch.load({str(path)!r}, weights_only=True)\nexcept Exception as e:\n"
              f"    print('refused', type(e).__name__)\nimport torchao\nimport sys\nsys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
              f"from test_torchao import load_checkpoint\nsd = load_checkpoint(open({str(path)!r}, 'rb').read())\n"
              "print('loaded', type(sd['0.weight']).__name__)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=300)
    assert "refused" in done.stdout and "loaded Float8Tensor" in done.stdout, done.stdout + done.stderr


def _blockwise_fp8_gemm_runs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchao registers ``ao::blockwise_fp8_gemm`` (a Triton kernel) only where Triton has a GPU. Here it stands
    in for the GPU: the operator, with torchao's name and schema, gets a CPU kernel (dequantize, multiply in
    float32) for the native run, and torchao's kernel table points at it. emulate() decides by the name."""
    from torch.utils._triton import has_triton
    from torchao.kernel import blockwise_quantization as bq

    if has_triton():  # pragma: no cover - a GPU machine: torchao's own operator runs
        return
    if not hasattr(torch.ops.ao, "blockwise_fp8_gemm"):
        @torch.library.custom_op("ao::blockwise_fp8_gemm", mutates_args=())
        def stand_in(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor,
                     block_size: int = 128) -> torch.Tensor:
            # a_s holds one scale per row and 128-block of K, flattened as the Triton kernel reads it
            scale_a = a_s.reshape(*a.shape[:-1], -1).repeat_interleave(block_size, dim=-1)[..., : a.shape[-1]]
            scale_b = b_s.repeat_interleave(block_size, 0).repeat_interleave(block_size, 1)[: b.shape[0], : b.shape[1]]
            return ((a.float() * scale_a) @ (b.float() * scale_b).t()).to(torch.bfloat16)

        stand_in.register_fake(lambda a, a_s, b, b_s, block_size=128: a.new_empty(
            *a.shape[:-1], b.shape[0], dtype=torch.bfloat16))
    monkeypatch.setattr(bq, "_triton_impls", bq._BlockwiseFp8Impls(True, torch.ops.ao.blockwise_fp8_gemm,
                                                                    None, None, None))


class _BlockCalls(TorchDispatchMode):
    """Records the plain-tensor arguments of every ao::blockwise_fp8_gemm call that reaches it (a native run)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[torch.Tensor, ...]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if any(t is not torch.Tensor for t in types):
            return NotImplemented
        if func is torch.ops.ao.blockwise_fp8_gemm.default:
            bound = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            self.calls.append((*bound, *([kwargs.get("block_size", 128)] if len(bound) == 4 else [])))
        return func(*args, **kwargs)


def _block_model(n: int = 128) -> torch.nn.Module:
    from torchao.quantization import PerBlock

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(K, n, bias=False)).to(torch.bfloat16)  # N: whole 128-blocks
    quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=[PerBlock([1, 128]), PerBlock([128, 128])]))
    return model


BLOCK_KERNEL = "triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9"


def test_block_wise_without_a_kernel_is_refused_naming_what_to_pass(gpu_machine: None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: PerBlock([1, 128]) x PerBlock([128, 128]) called ao::blockwise_fp8_gemm natively: 0 served,
    0 native, no error, even with fallback="raise". Now it is refused without a kernel model, the message naming
    emulate(kernel=...) and the models that fit torchao's kernel; fallback="native" still runs it, counted."""
    _blockwise_fp8_gemm_runs_here(monkeypatch)
    model = _block_model()
    x = _x()
    with torch.no_grad():
        with pytest.raises(mmaemu.UnsupportedFeatureError, match=r"torch\.ops\.ao\.blockwise_fp8_gemm runs a block-scaled "
                           r"Triton kernel.*emulate\(kernel=\.\.\.\).*triton-block-sm90-wgmma-bk128-fpfusion"):
            with mmaemu.emulate():
                model(x)
        with mmaemu.emulate(fallback="native") as log:
            got = model(x)
        assert_bitwise_equal(got, model(x))
    assert log.native == {(M, 128, K): 1} and log.served_calls == 0


@pytest.mark.parametrize("kernel", [BLOCK_KERNEL, "triton-block-sm89-mma-bk128-fpfusion@triton3.3-3.9"])
def test_block_wise_is_served_as_the_named_kernel(kernel: str, gpu_machine: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """torchao's own quantization and dispatch call ao::blockwise_fp8_gemm with its flattened [M * K/128, 1] activation
    scales and transposed weight scales; under emulate(kernel=...) the call returns block_scaled_mm's bits of those
    operands read as torchao's kernel reads them (a_s at m * K/128 + j, b_s at (n // 128) * K/128 + j), warned."""
    _blockwise_fp8_gemm_runs_here(monkeypatch)
    model = _block_model(256)
    x = _x()
    with torch.no_grad():
        with _BlockCalls() as capture:
            native = model(x)
        with pytest.warns(mmaemu.UnrecordedKernelWarning, match=kernel.replace(".", r"\.")):
            with mmaemu.emulate(kernel=kernel) as log:
                got = model(x)
    assert log.served == {(M, 256, K): 1} and log.native_calls == 0
    (a, a_s, b, b_s, block), = capture.calls
    assert block == 128 and tuple(a_s.shape) == (M * K // 128, 1)  # torchao's own layout, read flat
    with pytest.warns(mmaemu.UnrecordedKernelWarning):
        want = mmaemu.block_scaled_mm(a.reshape(M, K), a_s.reshape(M, K // 128), b, b_s.reshape(2, K // 128),
                                      kernel=kernel)
    assert_bitwise_equal(got, want)
    assert not bitwise_diff(got, native).equal  # the stand-in's float32 GEMM gives other bits: the call was served


def test_block_wise_with_another_kernels_model_is_refused(gpu_machine: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepGEMM's model (or a BLOCK_K = 64 one) is not the kernel torchao runs: refused, naming the ones that are."""
    _blockwise_fp8_gemm_runs_here(monkeypatch)
    model = _block_model()
    with torch.no_grad():
        for wrong in ("deepgemm-sm90", "triton-block-sm90-wgmma-bk64-fpfusion@triton3.3-3.9"):
            with pytest.raises(mmaemu.UnsupportedFeatureError, match=r"BLOCK_K = 128, not .*pass one of"):
                with mmaemu.emulate(kernel=wrong):
                    model(_x())


def test_per_row_through_mslk_is_refused_naming_mslks_operator(gpu_machine: None,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: torchao's PerRow on sm_90 with mslk installed called torch.ops.mslk.f8f8bf16_rowwise natively,
    unseen. mslk is not installed here: its operator is defined with mslk's name and schema
    (tests/foreign_stand_ins.py) and torchao's two checks (mslk importable, sm_90) are switched on; torchao's
    own dispatch then calls it. The activations keep torchao's torch quantizer (mslk's is a Triton kernel)."""
    import dataclasses
    import importlib

    from foreign_stand_ins import define

    float8_tensor = importlib.import_module("torchao.quantization.quantize_.workflows.float8.float8_tensor")
    define("mslk::f8f8bf16_rowwise")
    model = _quantized(PerRow())
    for layer in (model[0], model[2]):
        kwargs = layer.weight.act_quant_kwargs
        layer.weight.act_quant_kwargs = dataclasses.replace(kwargs,
                                                            kernel_preference=float8_tensor.KernelPreference.TORCH)
    monkeypatch.setattr(float8_tensor, "_is_mslk_available", lambda: True)
    monkeypatch.setattr(float8_tensor, "is_sm_at_least_90", lambda: True)
    x = _x()
    with torch.no_grad():
        with pytest.raises(mmaemu.UnsupportedFeatureError, match=r"torch\.ops\.mslk\.f8f8bf16_rowwise \(mslk: "):
            with mmaemu.emulate():
                model(x)
        with mmaemu.emulate(fallback="native") as log:
            got = model(x)
        assert_bitwise_equal(got, model(x))
    assert log.native == {(M, K, K): 1, (M, N, K): 1} and log.served_calls == 0
    assert all("mslk" in reason for reason in log.reasons)
