"""Hostile inputs to the arithmetic entry points: flush-to-zero, malformed arguments, every dtype.

Each entry point either computes the exact bits or raises an error that says what to do; none
returns wrong bits silently.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch

import mmaemu
from mmaemu import model, presets
from mmaemu.presets import HOPPER
from mmaemu.errors import UnsupportedFeatureError
from mmaemu._operands import BlockOperands
from mmaemu.nn import EmulatedFP8Linear
from mmaemu.quantization import current_scale, quantize, reciprocal_scale, scale_from_amax
from mmaemu.testing import assert_bitwise_equal, bitwise_diff

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
ONE = torch.tensor(1.0)
TINY = 2.0**-140  # an fp32 subnormal
SMALL_C = 2.0**-130  # an fp32 subnormal on hopper's 2**-139 grid for c alone


def f32(*bits: int) -> torch.Tensor:
    return torch.tensor(list(bits), dtype=torch.int64).to(torch.int32).view(torch.float32)


@contextmanager
def flush_to_zero() -> Iterator[None]:
    """``torch.set_flush_denormal(True)`` for the block; skips where the CPU cannot flush."""
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU does not support flushing subnormals (torch.set_flush_denormal returned False)")
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


# ---- 1. flush-to-zero ---------------------------------------------------------------------------


def _layer() -> EmulatedFP8Linear:
    return EmulatedFP8Linear(torch.full((16, 16), 0.5), weight_scale=1.0, input_scale=1.0, splitk=1)


FTZ_ENTRY_POINTS: dict[str, Callable[[], Any]] = {
    "epilogue": lambda: mmaemu.epilogue(torch.tensor([TINY]), torch.tensor(0.5), ONE, out_dtype=torch.float32),
    "model.dot": lambda: model.dot(torch.zeros(32).to(E4M3), torch.zeros(32).to(E4M3), torch.tensor(SMALL_C),
                                   preset="hopper"),
    "model.block_fma": lambda: model.block_fma(torch.tensor(SMALL_C), BlockOperands.of(torch.zeros(32).to(E4M3)),
                                               BlockOperands.of(torch.zeros(32).to(E4M3)), HOPPER),
    "quantize": lambda: quantize(torch.tensor([TINY]), 2.0**140),
    "reciprocal_scale": lambda: reciprocal_scale(torch.tensor(2.0**-130)),
    "scale_from_amax": lambda: scale_from_amax(torch.tensor(2.0**-130)),
    "current_scale": lambda: current_scale(torch.tensor([2.0**-130])),
    "EmulatedFP8Linear": lambda: _layer()(torch.full((16, 16), 1.0)),
    "scaled_mm": lambda: mmaemu.scaled_mm(torch.ones(16, 16).to(E4M3), torch.ones(16, 16).to(E4M3).t(), ONE, ONE,
                                          out_dtype=torch.float32, splitk=1),
}


@pytest.mark.parametrize("name", sorted(FTZ_ENTRY_POINTS))
def test_every_entry_point_refuses_flush_to_zero(name: str) -> None:
    call = FTZ_ENTRY_POINTS[name]
    with torch.inference_mode():
        call()  # runs without flush-to-zero
        with flush_to_zero(), pytest.raises(mmaemu.MmaemuError, match="flushes subnormal"):
            call()


def test_flush_to_zero_would_give_wrong_bits() -> None:
    """What the refusal prevents: the exact epilogue result is a subnormal that FTZ turns into +0."""
    got = mmaemu.epilogue(torch.tensor([TINY]), torch.tensor(0.5), ONE, out_dtype=torch.float32)
    assert_bitwise_equal(got, torch.tensor([2.0**-141]))
    assert got.item() != 0.0
    got = model.dot(torch.zeros(32).to(E4M3), torch.zeros(32).to(E4M3), torch.tensor(SMALL_C), preset="hopper")
    assert_bitwise_equal(got, torch.tensor(SMALL_C))  # a zero block truncates c to 2**-139: exact here


# ---- 2. model.dot's arguments -------------------------------------------------------------------

A32 = torch.ones(32).to(E4M3)
BAD_DOT_CALLS: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("mismatched K", lambda: model.dot(A32, torch.ones(16).to(E4M3), preset="hopper"), ValueError,
     r"same length K.*\(32,\).*\(16,\)"),
    ("K broadcast", lambda: model.dot(A32, torch.ones(1).to(E4M3), preset="hopper"), ValueError, "same length K"),
    ("python float c", lambda: model.dot(A32, A32, 1.0, preset="hopper"), TypeError,  # type: ignore[arg-type]
     r"c must be a float32 tensor or None.*got float"),
    ("0-d a", lambda: model.dot(torch.tensor(1.0).to(E4M3), A32, preset="hopper"), ValueError, "0-dimensional"),
    ("0-d both", lambda: model.dot(torch.tensor(1.0).to(E4M3), torch.tensor(1.0).to(E4M3), preset="hopper"),
     ValueError, "0-dimensional"),
    ("fp32 a", lambda: model.dot(torch.ones(32), A32, preset="hopper"), ValueError,
     "a is torch.float32 and b is torch.float8_e4m3fn: a tensor-core instruction takes two FP8 operands"),
    ("fp64 a", lambda: model.dot(torch.ones(32, dtype=torch.float64), A32, preset="hopper"), ValueError,
     "a must be float8_e4m3fn, float8_e5m2, float16, bfloat16 or float32 .tf32 values., got torch.float64"),
    ("fp32 not tf32", lambda: model.dot(torch.full((4,), 1 + 2.0**-20), torch.ones(4), preset="hopper"), ValueError,
     "1 of its values are not tf32|4 of its values are not tf32"),
    ("fp16 x bf16", lambda: model.dot(torch.ones(4, dtype=torch.float16), torch.ones(4, dtype=torch.bfloat16),
                                      preset="hopper"), ValueError, "two fp16, two bf16 or two tf32"),
    ("fp16 c of bf16", lambda: model.dot(torch.ones(4, dtype=torch.bfloat16), torch.ones(4, dtype=torch.bfloat16),
                                         torch.tensor(1.0, dtype=torch.float16), preset="hopper"), ValueError,
     "fp16 operands only"),
    ("bf16 on volta", lambda: model.dot(torch.ones(4, dtype=torch.bfloat16), torch.ones(4, dtype=torch.bfloat16),
                                        preset="volta"), UnsupportedFeatureError, "take fp16 inputs, not bf16"),
    ("fnuz b", lambda: model.dot(A32, torch.ones(32).to(torch.float8_e4m3fnuz), preset="hopper"), ValueError,
     "b must be float8_e4m3fn, float8_e5m2, float16"),
    ("list a", lambda: model.dot([1.0] * 32, A32, preset="hopper"), TypeError,  # type: ignore[arg-type]
     "a must be a torch.Tensor"),
    ("fp64 c", lambda: model.dot(A32, A32, torch.tensor(1.0 + 2.0**-40, dtype=torch.float64), preset="hopper"),
     ValueError, "c must be float32"),
    ("bf16 c", lambda: model.dot(A32, A32, torch.tensor(1.0, dtype=torch.bfloat16), preset="hopper"),
     ValueError, "c must be float32"),
    ("c wider than batch", lambda: model.dot(A32, A32, torch.ones(4), preset="hopper"), ValueError,
     r"c of shape \(4,\) does not broadcast to the batch shape \(\)"),
    ("c not broadcastable", lambda: model.dot(A32.expand(3, 32), A32, torch.ones(2), preset="hopper"), ValueError,
     "does not broadcast"),
    ("batches not broadcastable", lambda: model.dot(A32.expand(3, 32), A32.expand(2, 32), preset="hopper"),
     ValueError, "do not broadcast"),
]


@pytest.mark.parametrize("case", BAD_DOT_CALLS, ids=[c[0] for c in BAD_DOT_CALLS])
def test_dot_refuses_malformed_arguments(case: tuple[str, Callable[[], Any], type[Exception], str]) -> None:
    _, call, exc, message = case
    with pytest.raises(exc, match=message):
        call()


def test_dot_still_accepts_its_documented_forms() -> None:
    c = torch.tensor([1.0, 2.0, 3.0])
    got = model.dot(A32.expand(3, 32), A32, c, preset="hopper")  # batch from a, c of the batch shape
    assert_bitwise_equal(got, torch.tensor([33.0, 34.0, 35.0]))
    got = model.dot(A32.expand(2, 3, 32), A32.expand(3, 32), torch.tensor(1.0), preset="ada")  # 0-d c broadcasts
    assert_bitwise_equal(got, torch.full((2, 3), 33.0))
    got = model.dot(A32, torch.ones(32).to(E5M2), torch.tensor(-0.0), preset="hopper")  # mixed formats
    assert_bitwise_equal(got, torch.tensor(32.0))


# ---- 3. assert_bitwise_equal on every dtype -----------------------------------------------------


def _all_dtypes() -> list[torch.dtype]:
    found = {getattr(torch, n) for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)}
    return sorted(found, key=str)


def _bytes(values: list[int], dtype: torch.dtype) -> torch.Tensor:
    """A tensor of ``dtype`` built from raw little-endian bytes."""
    return torch.tensor(values, dtype=torch.uint8).view(dtype)


@pytest.mark.parametrize("dtype", [d for d in _all_dtypes() if not str(d).startswith(("torch.q", "torch.quint"))],
                         ids=str)
def test_every_dtype_is_compared_by_its_bytes(dtype: torch.dtype) -> None:
    values = [i & 1 if dtype == torch.bool else i for i in range(1, 1 + 4 * dtype.itemsize)]
    a = _bytes(values, dtype)
    assert_bitwise_equal(a, _bytes(values, dtype))  # (placeholder dtypes such as int4 cannot even be cloned)
    changed = list(values)
    changed[-1] ^= 0x01  # one bit of the last element
    d = bitwise_diff(a, _bytes(changed, dtype))
    assert (d.total, d.differing) == (4, 1)
    assert d.first[0][0] == (3,)
    with pytest.raises(AssertionError, match=f"1 of 4 {dtype} elements differ"):
        assert_bitwise_equal(a, _bytes(changed, dtype))


def test_float64_classes_and_extreme_distances() -> None:
    a = torch.tensor([1.0, 0.0, math.nan, -math.inf, 1.0, 5.0], dtype=torch.float64)
    b = torch.tensor([1.0, -0.0, -math.nan, math.inf, 2.0, 5.0], dtype=torch.float64)
    d = bitwise_diff(a, b)
    assert (d.differing, d.zero_sign, d.nan_payload, d.value) == (4, 1, 1, 2)
    assert d.max_ulps == 2 * 0x7FF0000000000000  # -Inf to +Inf: more than int64 holds
    assert d.first[0] == ((1,), "0x0000000000000000", "0x8000000000000000")
    i64 = bitwise_diff(torch.tensor([-(2**63), 7]), torch.tensor([2**63 - 1, 7]))
    assert (i64.value, i64.max_ulps) == (1, 2**64 - 1)
    u64 = bitwise_diff(torch.tensor([0], dtype=torch.uint64), torch.tensor([-1], dtype=torch.int64).view(torch.uint64))
    assert (u64.max_ulps, u64.first[0][2]) == (2**64 - 1, "0xffffffffffffffff")


def test_complex_compares_both_components() -> None:
    a = torch.tensor([1 + 1j, complex(0.0, 0.0), complex(math.nan, 1.0), 2 + 2j], dtype=torch.complex128)
    b = a.clone()
    parts = torch.view_as_real(b)
    parts[0, 1] = 3.0  # a value
    parts[1, 1] = -0.0  # a zero sign
    parts[2, 0] = -math.nan  # a NaN payload (sign)
    d = bitwise_diff(a, b)
    assert (d.differing, d.value, d.zero_sign, d.nan_payload) == (3, 1, 1, 1)
    assert d.first[0] == ((0,), "(0x3ff0000000000000, 0x3ff0000000000000)", "(0x3ff0000000000000, 0x4008000000000000)")
    c64 = torch.tensor([1 + 2j], dtype=torch.complex64)
    assert bitwise_diff(c64.conj(), c64).differing == 1  # a conjugate view compares by its values
    assert_bitwise_equal(c64.conj(), torch.tensor([1 - 2j], dtype=torch.complex64))


def test_small_float_formats_and_quantized_tensors() -> None:
    fnuz = torch.tensor([0x00, 0x80], dtype=torch.uint8).view(torch.float8_e4m3fnuz)  # 0 and the only NaN
    d = bitwise_diff(fnuz, torch.zeros(2, dtype=torch.uint8).view(torch.float8_e4m3fnuz))
    assert (d.value, d.zero_sign, d.max_ulps) == (1, 0, None)  # a NaN against a number has no distance
    e8m0 = torch.tensor([127, 0xFF], dtype=torch.uint8).view(torch.float8_e8m0fnu)
    d = bitwise_diff(e8m0, torch.tensor([130, 0xFF], dtype=torch.uint8).view(torch.float8_e8m0fnu))
    assert (d.value, d.max_ulps) == (1, 3)  # unsigned exponents: 2**0 to 2**3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors are deprecated in recent torch
        q = torch.quantize_per_tensor(torch.tensor([1.0, -2.0]), 0.5, 3, torch.qint8)
        q2 = torch.quantize_per_tensor(torch.tensor([1.0, -1.0]), 0.5, 3, torch.qint8)
        q3 = torch.quantize_per_tensor(torch.tensor([1.0, -2.0]), 0.25, 3, torch.qint8)
    assert (bitwise_diff(q, q2).value, bitwise_diff(q, q2).max_ulps) == (1, 2)
    with pytest.raises(ValueError, match="quantization parameters differ"):
        bitwise_diff(q, q3)


def test_non_tensors_get_a_type_error_saying_what_to_pass() -> None:
    t = torch.zeros(3)
    with pytest.raises(TypeError, match=r"torch.from_numpy"):
        assert_bitwise_equal(np.zeros(3, dtype=np.float32), t)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"expected must be a torch.Tensor.*torch.from_numpy"):
        assert_bitwise_equal(t, np.zeros(3, dtype=np.float32))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"got list.*torch.tensor\(values, dtype=...\)"):
        assert_bitwise_equal([0.0, 0.0, 0.0], t)  # type: ignore[arg-type]
    assert_bitwise_equal(torch.from_numpy(np.zeros(3, dtype=np.float32)), t)  # the conversion it suggests


# ---- 4. EmulatedFP8Linear's arguments -----------------------------------------------------------

W = torch.full((16, 16), 0.5)
BAD_LAYERS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("use_fast_accum int", dict(use_fast_accum=1), TypeError, "use_fast_accum must be a bool"),
    ("use_fast_accum str", dict(use_fast_accum="no"), TypeError, "use_fast_accum must be a bool"),
    ("backend unknown", dict(backend="gpu"), ValueError, r"backend='gpu' is not a backend; accepted"),
    ("backend type", dict(backend=3), TypeError, "backend must be"),
    ("profile unknown", dict(profile="h100"), ValueError, "is not a profile"),
    ("splitk", dict(splitk=(2, "sideways")), ValueError, "unknown scheme"),
    ("splitk str", dict(splitk="1"), ValueError, "accepted values"),
    ("out_dtype fp64", dict(out_dtype=torch.float64), ValueError, r"out_dtype=torch.float64: accepted"),
    ("out_dtype str", dict(out_dtype="bfloat16"), ValueError, "out_dtype='bfloat16': accepted"),
    ("out_dtype e5m2 from e4m3", dict(out_dtype=E5M2), ValueError, "CUBLAS_STATUS_NOT_SUPPORTED"),
    ("input_dtype fp16", dict(input_dtype=torch.float16), ValueError, "input_dtype=torch.float16"),
    ("zero scale", dict(weight_scale=0.0), ValueError, "positive and finite"),
    ("NaN scale", dict(input_scale=torch.tensor(math.nan)), ValueError, "positive and finite"),
    ("negative scale", dict(weight_scale=-2.0), ValueError, "positive and finite"),
    ("scale without reciprocal", dict(weight_scale=2.0**-140), ValueError, "reciprocal"),
    ("string scale", dict(input_scale="2"), TypeError, "input_scale must be a one-element tensor or a real number"),
]


@pytest.mark.parametrize("case", BAD_LAYERS, ids=[c[0] for c in BAD_LAYERS])
def test_layer_refuses_bad_arguments_at_construction(case: tuple[str, dict[str, Any], type[Exception], str]) -> None:
    _, kwargs, exc, message = case
    args: dict[str, Any] = dict(weight_scale=1.0, input_scale=1.0)
    args.update(kwargs)
    with pytest.raises(exc, match=message):
        EmulatedFP8Linear(W, **args)


def test_layer_refuses_bad_weights_and_modules() -> None:
    with pytest.raises(ValueError, match="float8_e4m3fn, float8_e5m2"):
        EmulatedFP8Linear(W.double(), weight_scale=1.0, input_scale=1.0)
    with pytest.raises(ValueError, match="float8_e4m3fn, float8_e5m2"):
        EmulatedFP8Linear(W.to(torch.float8_e4m3fnuz), weight_scale=1.0, input_scale=1.0)
    with pytest.raises(ValueError, match="both float8_e5m2"):
        EmulatedFP8Linear(W.to(E5M2), weight_scale=1.0, input_scale=1.0, input_dtype=E5M2)
    with pytest.raises(TypeError, match="weight must be a 2-D"):
        EmulatedFP8Linear([[1.0]], weight_scale=1.0, input_scale=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"shape \(4, 4, 3, 3\).*2-D"):
        EmulatedFP8Linear.from_linear(torch.nn.Conv2d(4, 4, 3, bias=False), weight_scale=1.0,  # type: ignore[arg-type]
                                      input_scale=1.0)
    with pytest.raises(TypeError, match="no tensor weight"):
        EmulatedFP8Linear.from_linear(torch.nn.ReLU(), weight_scale=1.0, input_scale=1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="from_linear takes a torch.nn.Linear"):
        EmulatedFP8Linear.from_linear(W, weight_scale=1.0, input_scale=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="uninitialised"):
        EmulatedFP8Linear.from_linear(torch.nn.LazyLinear(16, bias=False), weight_scale=1.0, input_scale=1.0)


def test_unregistered_profile_object_is_refused() -> None:
    from dataclasses import replace

    from mmaemu.platforms._profiles import get_profile

    twin = replace(get_profile("hopper-te"), name="hopper")  # hopper's name, hopper-te's tables
    with pytest.raises(ValueError, match="not the profile registered under that name"):
        EmulatedFP8Linear(W, weight_scale=1.0, input_scale=1.0, profile=twin)
    layer = EmulatedFP8Linear(W, weight_scale=1.0, input_scale=1.0, profile=get_profile("hopper-te"))
    assert layer.profile == "hopper-te"


def test_layer_refuses_fp64_and_integer_activations() -> None:
    layer = _layer()
    with torch.inference_mode():
        for x in (torch.ones(16, 16, dtype=torch.float64), torch.ones(16, 16, dtype=torch.int32)):
            with pytest.raises(TypeError, match="takes bf16, fp16 or fp32 activations"):
                layer(x)
        with pytest.raises(ValueError, match="0-d"):
            layer(torch.tensor(1.0))
        y = layer(torch.ones(16, 16))
    assert_bitwise_equal(y, torch.full((16, 16), 8.0))


# ---- 5. the epilogue's and quantisation's other arguments ---------------------------------------

BAD_EPILOGUES: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("python float scale",
     lambda: mmaemu.epilogue(torch.ones(2), 0.1, ONE, out_dtype=torch.float32),  # type: ignore[arg-type]
     TypeError, r"scale_a must be a float32 torch.Tensor.*torch.tensor\(value, dtype=torch.float32\)"),
    ("fp64 scale", lambda: mmaemu.epilogue(torch.ones(2), torch.tensor(0.1, dtype=torch.float64), ONE,
                                           out_dtype=torch.float32), TypeError, "scale_a must be a float32 tensor"),
    ("fp64 acc", lambda: mmaemu.epilogue(torch.ones(2, dtype=torch.float64), ONE, ONE, out_dtype=torch.float32),
     TypeError, "acc must be float32"),
    ("out fp64", lambda: mmaemu.epilogue(torch.ones(2), ONE, ONE, out_dtype=torch.float64), ValueError,
     r"not an output dtype of an FP8 GEMM; accepted: torch.float32"),
    ("scale_result of 2 elements, bf16 out",
     lambda: mmaemu.epilogue(torch.ones(2), ONE, ONE, out_dtype=torch.bfloat16, scale_result=torch.ones(2)),
     ValueError, "scale_result must have exactly one element"),
    ("scale_result fp64, fp32 out",
     lambda: mmaemu.epilogue(torch.ones(2), ONE, ONE, out_dtype=torch.float32,
                             scale_result=torch.tensor(2.0, dtype=torch.float64)),
     TypeError, "scale_result must be a float32 tensor"),
]


@pytest.mark.parametrize("case", BAD_EPILOGUES, ids=[c[0] for c in BAD_EPILOGUES])
def test_epilogue_refuses_malformed_arguments(case: tuple[str, Callable[[], Any], type[Exception], str]) -> None:
    _, call, exc, message = case
    with pytest.raises(exc, match=message):
        call()


def test_epilogue_scale_result_odd_values() -> None:
    acc = torch.tensor([1.0, -1.0, 0.0, -0.0])
    nan = mmaemu.epilogue(acc, ONE, ONE, out_dtype=E4M3, scale_result=torch.tensor(math.nan))
    assert nan.view(torch.uint8).tolist() == [0x7F] * 4  # canonical NaN everywhere
    inf = mmaemu.epilogue(acc, ONE, ONE, out_dtype=E4M3, scale_result=torch.tensor(math.inf))
    assert inf.view(torch.uint8).tolist() == [0x7E, 0xFE, 0x7F, 0x7F]  # +-448 saturated; 0 * Inf is NaN
    neg = mmaemu.epilogue(acc, ONE, ONE, out_dtype=E4M3, scale_result=torch.tensor(-0.0))
    assert neg.view(torch.uint8).tolist() == [0x80, 0x00, 0x80, 0x80]  # signs of the exact products
    ignored = mmaemu.epilogue(acc, ONE, ONE, out_dtype=torch.bfloat16, scale_result=torch.tensor(math.nan))
    assert_bitwise_equal(ignored, torch.tensor([1.0, -1.0, 0.0, 0.0], dtype=torch.bfloat16))


def test_quantization_arguments() -> None:
    with pytest.raises(ValueError, match="amax must have one element"):
        scale_from_amax(torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="margin must be an int"):
        scale_from_amax(7.0, margin=0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"margin=200"):
        scale_from_amax(7.0, margin=200)
    with pytest.raises(TypeError, match="scale must be a one-element tensor or a real number"):
        quantize(torch.ones(2), "2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="floating-point"):
        current_scale(torch.tensor([1 + 1j]))
    with pytest.raises(TypeError, match="torch.Tensor"):
        quantize([1.0], 1.0)  # type: ignore[arg-type]
    # NaN and Inf amax: delayed scaling keeps the previous scale, current scaling uses 1 (TE's rules)
    assert scale_from_amax(math.nan, previous=3.0).item() == 3.0
    assert scale_from_amax(-math.inf, previous=3.0).item() == 3.0
    assert current_scale(torch.tensor([math.nan, math.nan])).item() == 1.0
    assert current_scale(torch.tensor([-math.inf, 2.0])).item() == 1.0


def test_state_dict_of_other_dtypes_is_refused_and_nothing_is_loaded() -> None:
    layer = _layer()
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    for name, value in (("weight", torch.full((16, 16), 3.1, dtype=torch.bfloat16)),
                        ("input_scale", torch.tensor(2.0, dtype=torch.float64))):
        state = dict(before)
        state[name] = value  # copy_ would round it into the FP8 / fp32 buffer without a word
        with pytest.raises(RuntimeError, match=f"loads its FP8 weight and fp32 scales bit for bit.*{name}"):
            layer.load_state_dict(state)
        for key, old in before.items():
            assert_bitwise_equal(layer.state_dict()[key], old)
    layer.load_state_dict(before)  # the same dtypes still load


def test_quantize_input_checks_the_activation_as_forward_does() -> None:
    with pytest.raises(TypeError, match="takes bf16, fp16 or fp32 activations"):
        _layer().quantize_input(torch.ones(16, 16, dtype=torch.float64))


@pytest.mark.parametrize("kwargs", [dict(block_size=True, frac_bits=13), dict(block_size=32, frac_bits=True)])
def test_preset_refuses_bools(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be an int"):
        presets.Preset("bool", **kwargs)


# ---- opposite infinities that meet in an fp32 addition -------------------------------------------
#
# Inside a block the model writes the canonical NaN; the fp32 additions after it (slow
# accumulation's chain results, split parts in every combination order) are the host's arithmetic
# when emulated, and an x86 CPU's Inf - Inf is 0xFFC00000. An NVIDIA GPU writes 0x7FFFFFFF for every
# single-precision NaN (CUDA C++ Programming Guide, "Floating-Point Standard"); the slow model's
# fp32 addition does too.

#: (name, K, fast, split, k of the +Inf code, k of the -Inf code): the two meet only in an fp32 addition.
OPPOSITE_INFS = [
    ("slow-chains", 256, False, 1, 0, 128),
    ("slow-chains-far", 384, False, 1, 5, 300),
    ("slow-chains-in-a-part", 512, False, (2, "serial"), 0, 256),
    ("contiguous", 256, True, (2, "contiguous"), 0, 128),
    ("contiguous-slow", 640, False, (3, "contiguous"), 130, 300),
    ("serial", 128, True, (2, "serial"), 0, 64),
    ("pairwise-2", 128, True, (2, "pairwise"), 3, 100),
    ("pairwise-joined-part", 384, True, (5, "pairwise"), 0, 192),  # parts 0 and 3: (p0 + p3) ...
    ("pairwise-pair", 384, True, (6, "pairwise"), 64, 256),  # parts 1 and 4: summed as a pair first
]


def _opposite_infs(k: int, pos: int, neg: int) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.full((2, k), 0x3C, dtype=torch.uint8)  # e5m2 1.0
    a[0, pos], a[0, neg] = 0x7C, 0xFC  # row 0: +Inf and -Inf; row 1 finite
    b = torch.full((16, k), 0x38, dtype=torch.uint8)  # e4m3 1.0 (N = 16: scaled_mm takes it)
    b[1, ::3] = 0x00  # column 1: zeros under some products (Inf * 0 where they meet)
    return a.view(E5M2), b.view(E4M3)


@pytest.mark.filterwarnings("ignore::mmaemu.UnverifiedSplitWarning")  # explicit splits not replayed on hardware
@pytest.mark.parametrize("case", OPPOSITE_INFS, ids=[c[0] for c in OPPOSITE_INFS])
def test_opposite_infinities_meeting_in_fp32_additions_give_the_canonical_nan(backend: str, case: tuple[Any, ...]) -> None:
    import slowmodel as sm

    _, k, fast, split, pos, neg = case
    a, b = _opposite_infs(k, pos, neg)
    s, scheme = (1, "none") if split == 1 else split
    acc = mmaemu.accumulate(a, b, use_fast_accum=fast, splitk=split, backend=backend)
    got = (acc.view(torch.int32).to(torch.int64) & 0xFFFFFFFF).tolist()
    codes_a, codes_b = a.view(torch.uint8).tolist(), b.view(torch.uint8).tolist()
    want = [[sm.accumulate(ra, rb, "e5m2", "e4m3", 32, 13, fast, s, scheme) for rb in codes_b] for ra in codes_a]
    assert want[0][0] == want[0][1] == 0x7FFFFFFF  # the case does make a NaN, in an addition
    assert got == want
    # scaled_mm's epilogue writes each output format's canonical NaN from it
    for out_dtype, nan in ((torch.float32, 0x7FFFFFFF), (torch.bfloat16, 0x7FFF), (torch.float16, 0x7FFF)):
        y = mmaemu.scaled_mm(a, b.t(), ONE, ONE, out_dtype=out_dtype, use_fast_accum=fast, splitk=split,
                             backend=backend)
        assert int(y.view(torch.int32 if out_dtype == torch.float32 else torch.int16)[0, 0]) & 0xFFFFFFFF == nan
