"""Replay of the RTX 4060 ``call`` records and the ``gemm`` records that expect an error.

The ``call`` records are exact ``torch._scaled_mm`` calls of the API grids recorded on the RTX 4060
(torch 2.7.1, cuBLASLt 12.8.3.14): every dtype pair (non-FP8 and fnuz dtypes included), layouts,
strides and storage offsets, scale shapes and dtypes, bias, ``out=``, grad modes, empty
dimensions. Each must raise the recorded exception class, or return the recorded bits.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator

import pytest
import torch

import mmaemu
from conftest import require
from mmaemu.testing import assert_bitwise_equal
from recordings import RTX4060, fp32_scalar, load, splitk_of, torch_dtype

EXCEPTIONS: dict[str, type[BaseException]] = {
    "ReferenceRejectsError": mmaemu.ReferenceRejectsError,
    "UnsupportedFeatureError": mmaemu.UnsupportedFeatureError,
    "TypeError": TypeError,
}


def _records() -> list[dict[str, Any]]:
    if not RTX4060.exists():
        return []
    data = load()
    calls = data.by_kind("call")
    errors = [r for r in data.by_kind("gemm") if "error" in r["expect"]]
    return calls + errors


RECORDS = _records()


@pytest.fixture(autouse=True)
def _need_recordings() -> None:
    require(RTX4060)


def _strided(spec: dict[str, Any]) -> torch.Tensor:
    buffer = load().tensor(spec["buffer"], spec["dtype"]).flatten()
    return buffer.as_strided(spec["size"], spec["stride"], spec["offset"])


def _value(spec: dict[str, Any]) -> torch.Tensor:
    t = load().tensor(spec["bits"], spec["dtype"])
    return t.reshape(spec["shape"]) if "shape" in spec else t


@contextlib.contextmanager
def _grad_mode(mode: str | None) -> Iterator[None]:
    if mode == "no_grad":
        with torch.no_grad():
            yield
    else:
        with torch.enable_grad():
            yield


def _call_args(rec: dict[str, Any]) -> tuple[list[Any], dict[str, Any], torch.Tensor | None, str | None]:
    args = rec["args"]
    mat1, mat2 = _strided(args["mat1"]), _strided(args["mat2"])
    scale_a, scale_b = _value(args["scale_a"]), _value(args["scale_b"])
    names = {"mat1": mat1, "scale_a": scale_a, "scale_b": scale_b, "mat2": mat2}
    for name in args.get("requires_grad", []):
        names[name].requires_grad_(True)
    positional: list[Any] = [mat1, mat2, scale_a, scale_b]
    kwargs: dict[str, Any] = {"use_fast_accum": args["use_fast_accum"], "profile": rec["profile"], "splitk": splitk_of(rec)}
    if "out_dtype" in args:
        kwargs["out_dtype"] = torch_dtype(args["out_dtype"])
    if "scale_result" in args:
        kwargs["scale_result"] = _value(args["scale_result"])
    if "bias" in args:
        bias = load().tensor(args["bias"]["bits"], args["bias"]["dtype"])
        if args["bias"].get("positional"):
            positional.append(bias)
        else:
            kwargs["bias"] = bias
    out = None
    if "out" in args:
        spec = args["out"]
        shape = spec["shape"]
        dtype = torch_dtype(spec["dtype"])
        base = torch.empty(shape if spec["contiguous"] else list(reversed(shape)), dtype=dtype)
        base.view(torch.uint8).fill_(spec["fill_byte"])
        out = base if spec["contiguous"] else base.t()
        kwargs["out"] = out
    return positional, kwargs, out, args.get("grad_mode")


def _expect_raises_or_biased(expected: type[BaseException], has_bias: bool, call: Any, rowwise: bool = False) -> None:
    """The recorded exception; or, for a call the hardware ran whose output was not recorded (UnsupportedFeatureError
    recorded): a biased call is served with an UnverifiedEpilogueWarning (the experimental bias epilogue), a row-wise
    one with an UnrecordedKernelWarning (torch's CUTLASS kernel, mmaemu.kernels), unless another unmodelled feature
    (grad, an FP8 output) still raises."""
    if rowwise and expected is mmaemu.UnsupportedFeatureError:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        assert any(issubclass(w.category, mmaemu.UnrecordedKernelWarning) for w in caught)
        return
    if has_bias and expected is mmaemu.UnsupportedFeatureError:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                call()
            except mmaemu.UnsupportedFeatureError as exc:
                assert "bias" not in str(exc) or "FP8 output" in str(exc) or "K = 0" in str(exc), str(exc)
                return
        assert any(issubclass(w.category, mmaemu.UnverifiedEpilogueWarning) for w in caught)
        return
    with pytest.raises(expected) as info:
        call()
    assert type(info.value) is expected or expected is not TypeError


def _gemm_error_call(rec: dict[str, Any]) -> None:
    """A ``gemm`` record that expects an error: all-zero (or recorded) operands."""
    if "zero_operands_shape" in rec:
        m, n, k = rec["zero_operands_shape"]
        a = torch.zeros(m, k).to(torch_dtype(rec["fmt_a"]))
        b = torch.zeros(n, k).to(torch_dtype(rec["fmt_b"]))
    else:
        a, b = load().tensor(rec["a"], rec["fmt_a"]), load().tensor(rec["b"], rec["fmt_b"])
    sa, sb = fp32_scalar(rec["scale_a_bits"]), fp32_scalar(rec["scale_b_bits"])
    call = rec.get("call", {})
    positional: list[Any] = [a, b.t(), sa, sb]
    kwargs: dict[str, Any] = {"profile": rec["profile"], "splitk": splitk_of(rec)}
    if rec["scale_result_bits"] is not None:
        kwargs["scale_result"] = fp32_scalar(rec["scale_result_bits"])
    if call.get("out_dtype", True) is not False:
        kwargs["out_dtype"] = torch_dtype(rec["out_dtype"])
    if call.get("use_fast_accum", True) is not False:
        kwargs["use_fast_accum"] = rec["use_fast_accum"]
    if rec.get("rowwise_scales"):
        positional[2] = torch.ones(a.shape[0], 1)
        positional[3] = torch.ones(1, b.shape[0])
    if "bias" in call:
        bias = torch.zeros(b.shape[0], dtype=torch_dtype(rec.get("bias_dtype", "bfloat16")))
        if call["bias"] == "positional":
            positional.append(bias)
        else:
            kwargs["bias"] = bias
    grads = call.get("requires_grad", [])
    named = {"input": positional[0], "mat2": positional[1], "scale_a": positional[2], "scale_b": positional[3]}
    for name in grads:
        named[name].requires_grad_(True)
    with torch.enable_grad():
        mmaemu.scaled_mm(*positional, **kwargs)


@pytest.mark.parametrize("rec", RECORDS, ids=[r["id"] for r in RECORDS])
def test_call_record(rec: dict[str, Any], backend: str) -> None:
    expect = rec["expect"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
        if rec["kind"] == "gemm":
            _expect_raises_or_biased(EXCEPTIONS[expect["error"]], "bias" in rec.get("call", {}),
                                     lambda: _gemm_error_call(rec), bool(rec.get("rowwise_scales")))
            return
        positional, kwargs, out, grad_mode = _call_args(rec)
        with _grad_mode(grad_mode):
            if "error" in expect:
                _expect_raises_or_biased(EXCEPTIONS[expect["error"]], "bias" in rec["args"],
                                         lambda: mmaemu.scaled_mm(*positional, **kwargs))
                return
            result = mmaemu.scaled_mm(*positional, **kwargs, backend=backend)
    expected = load().tensor(expect["bits"], expect["dtype"]).reshape(expect["shape"])
    if out is not None:
        assert result is out, "scaled_mm(out=...) must return out"
    assert_bitwise_equal(result.contiguous(), expected)
