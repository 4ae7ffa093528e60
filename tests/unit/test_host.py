"""mmaemu._host: the boolean variables' one parser, the per-user directory, and the inference-only rule at
every entry point."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import mmaemu
from mmaemu.errors import ExperimentalPresetWarning, UnsupportedFeatureError
from mmaemu._host import env_flag, refuse_autograd, user_cache_dir
from mmaemu.model import block_fma
from mmaemu._operands import BlockOperands
from mmaemu.presets import HOPPER
from mmaemu.quantization import quantize, reciprocal_scale, round_to_tf32, scale_from_amax


@pytest.mark.parametrize("raw,expected", [("1", True), (" TRUE ", True), ("on", True), ("0", False), ("Off", False),
                                          ("", None), ("  ", None)])
def test_env_flag(monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool | None) -> None:
    monkeypatch.setenv("MMAEMU_TEST_FLAG", raw)
    for default in (False, True):
        assert env_flag("MMAEMU_TEST_FLAG", default=default) is (default if expected is None else expected)


def test_env_flag_refuses_other_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMAEMU_TEST_FLAG", "2")
    with pytest.raises(ValueError, match="MMAEMU_TEST_FLAG='2' is not a boolean"):
        env_flag("MMAEMU_TEST_FLAG")


def test_user_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MMAEMU_CACHE_DIR", str(tmp_path / "c"))
    assert user_cache_dir() == tmp_path / "c"
    monkeypatch.setenv("MMAEMU_CACHE_DIR", "")
    assert "mmaemu" in user_cache_dir().parts and "site-packages" not in user_cache_dir().parts


def _fp8(rows: int, k: int) -> torch.Tensor:
    return torch.ones(rows, k).to(torch.float8_e4m3fn)


def _grad(dtype: torch.dtype, *shape: int) -> torch.Tensor:
    return torch.ones(shape, dtype=dtype).requires_grad_()


#: Every computing entry point, called with one argument that requires grad (the name it must report).
_ENTRY_POINTS: dict[str, tuple[str, Callable[[], object]]] = {
    "accumulate fp16": ("a", lambda: mmaemu.accumulate(_grad(torch.float16, 2, 8), torch.ones(2, 8, dtype=torch.float16),
                                                      use_fast_accum=True, preset="hopper")),
    "accumulate bf16 b": ("b", lambda: mmaemu.accumulate(torch.ones(2, 8, dtype=torch.bfloat16),
                                                        _grad(torch.bfloat16, 2, 8), use_fast_accum=True, preset="ada")),
    "dot c": ("c", lambda: mmaemu.model.dot(_fp8(1, 32)[0], _fp8(1, 32)[0], _grad(torch.float32), preset="hopper")),
    "dot fp16 a": ("a", lambda: mmaemu.model.dot(_grad(torch.float16, 8), torch.ones(8, dtype=torch.float16),
                                                 preset="hopper")),
    "block_fma c": ("c", lambda: block_fma(_grad(torch.float32, 1), BlockOperands.of(_fp8(1, 32)),
                                           BlockOperands.of(_fp8(1, 32)), HOPPER)),
    "epilogue acc": ("acc", lambda: mmaemu.epilogue(_grad(torch.float32, 2, 2), torch.tensor(1.0), torch.tensor(1.0),
                                                    out_dtype=torch.bfloat16)),
    "epilogue scale": ("scale_b", lambda: mmaemu.epilogue(torch.ones(2, 2), torch.tensor(1.0), _grad(torch.float32),
                                                          out_dtype=torch.float32)),
    "quantize": ("x", lambda: quantize(_grad(torch.bfloat16, 4), 1.0)),
    "round_to_tf32": ("x", lambda: round_to_tf32(_grad(torch.float32, 4))),
    "reciprocal_scale": ("scale", lambda: reciprocal_scale(_grad(torch.float32))),
    "scale_from_amax": ("amax", lambda: scale_from_amax(_grad(torch.float32), torch.float8_e4m3fn)),
    "scaled_mm": ("scale_a", lambda: mmaemu.scaled_mm(_fp8(16, 32), _fp8(16, 32).t(), _grad(torch.float32),
                                                      torch.tensor(1.0), splitk=1)),
}


@pytest.mark.parametrize("entry", sorted(_ENTRY_POINTS))
def test_every_entry_point_refuses_autograd(entry: str) -> None:
    """Old code: accumulate() returned a result without grad_fn; dot() with a c requiring grad gave a result whose
    backward was 0; epilogue and quantize recorded a partial graph; round_to_tf32 dropped it."""
    name, call = _ENTRY_POINTS[entry]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalPresetWarning)
        with pytest.raises(UnsupportedFeatureError, match=rf"^{name} require grad with grad mode on: mmaemu is inference-only"):
            call()
        with torch.no_grad():
            call()  # accepted: nothing is recorded
        with torch.inference_mode():
            call()


def test_refuse_autograd_ignores_non_tensors_and_grad_mode_off() -> None:
    refuse_autograd(("x", 1.0), ("y", None), ("z", torch.ones(1)))
    with torch.no_grad():
        refuse_autograd(("x", torch.ones(1, requires_grad=True)))
