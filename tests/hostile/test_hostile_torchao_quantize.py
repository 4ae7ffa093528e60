"""Hostile use of mmaemu.quantization.torchao_quantize_ (torchao's FP8 quantization on a machine without an sm_89+
GPU): what it refuses changes nothing, and torchao's hardware check is always restored, also when torchao raises
and when threads quantize at once."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
import torch

from mmaemu.errors import UnsupportedFeatureError
from mmaemu.quantization import torchao_quantize_
from mmaemu.testing import assert_bitwise_equal

pytest.importorskip("torchao", reason="torchao is not installed (pip install '.[test]')")
import torchao.quantization.quant_api as quant_api  # noqa: E402
from torchao.quantization import (  # noqa: E402
    Float8DynamicActivationFloat8WeightConfig,
    Float8WeightOnlyConfig,
    PerBlock,
    PerRow,
    PerTensor,
)

CHECK = quant_api._check_hardware_support


def _model(dtype: torch.dtype = torch.bfloat16) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)).to(dtype)


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _unchanged(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> None:
    after = model.state_dict()
    assert after.keys() == before.keys()
    for key, value in before.items():
        assert type(after[key]) is torch.Tensor or isinstance(after[key], torch.nn.Parameter), key
        assert_bitwise_equal(after[key].detach(), value)
    assert quant_api._check_hardware_support is CHECK


@pytest.mark.parametrize("config", [Float8WeightOnlyConfig(), {"granularity": "PerTensor"}, None, "fp8"],
                         ids=["another-torchao-config", "dict", "None", "str"])
def test_another_config_is_a_type_error_and_changes_nothing(config: Any) -> None:
    model = _model()
    before = _snapshot(model)
    with pytest.raises(TypeError, match="Float8DynamicActivationFloat8WeightConfig"):
        torchao_quantize_(model, config)
    _unchanged(model, before)


@pytest.mark.parametrize("model", [None, torch.ones(4), [torch.nn.Linear(16, 16)]], ids=["None", "tensor", "list"])
def test_a_model_that_is_not_a_module_is_a_type_error(model: Any) -> None:
    with pytest.raises(TypeError, match="nn.Module"):
        torchao_quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor()))
    assert quant_api._check_hardware_support is CHECK


def test_block_wise_granularity_is_refused_and_changes_nothing() -> None:
    model = _model()
    before = _snapshot(model)
    config = Float8DynamicActivationFloat8WeightConfig(granularity=[PerBlock([1, 128]), PerBlock([128, 128])])
    with pytest.raises(UnsupportedFeatureError, match="block-wise"):
        torchao_quantize_(model, config)
    _unchanged(model, before)


def test_without_torchao_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchao.quantization", None)  # import torchao.quantization fails
    with pytest.raises(ImportError, match="pip install torchao"):
        torchao_quantize_(_model(), object())


def test_a_torchao_without_the_check_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    before = _snapshot(model)
    monkeypatch.delattr(quant_api, "_check_hardware_support")
    with pytest.raises(UnsupportedFeatureError, match="_check_hardware_support"):
        torchao_quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor()))
    monkeypatch.undo()
    _unchanged(model, before)


def test_an_old_cuda_gpu_is_refused_before_anything_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchao's quantization step asserts sm_89 whenever CUDA is available (an sm_80 here, emulated)."""
    import torchao.utils

    model = _model()
    before = _snapshot(model)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    for name in ("is_sm_at_least_89", "is_MI300", "is_MI350"):
        monkeypatch.setattr(torchao.utils, name, lambda: False)
    with pytest.raises(UnsupportedFeatureError, match=r"CUDA_VISIBLE_DEVICES="):
        torchao_quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor()))
    monkeypatch.undo()
    _unchanged(model, before)


def test_torchaos_check_is_restored_when_torchao_raises() -> None:
    """PerRow needs bf16 weights (torchao's assertion, raised inside quantize_): the error is torchao's, and its
    hardware check is back."""
    with pytest.raises(AssertionError, match="bfloat16"):
        torchao_quantize_(_model(torch.float32), Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()))
    assert quant_api._check_hardware_support is CHECK


def test_filter_fn_is_torchaos() -> None:
    model = _model()
    torchao_quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor()),
                      filter_fn=lambda module, name: isinstance(module, torch.nn.Linear) and name == "2")
    assert type(model[0].weight).__name__ == "Parameter" and type(model[2].weight).__name__ == "Float8Tensor"


def test_threads_quantizing_at_once_all_quantize_and_leave_the_check_restored() -> None:
    models = [_model() for _ in range(6)]
    errors: list[BaseException] = []

    def work(model: torch.nn.Module) -> None:
        try:
            torchao_quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor()))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(m,)) for m in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all(type(m[0].weight).__name__ == "Float8Tensor" for m in models)
    assert quant_api._check_hardware_support is CHECK
    for model in models[1:]:  # the same weights, quantized the same way
        assert_bitwise_equal(model[0].weight.qdata, models[0][0].weight.qdata)
