"""mmaemu.quantization's block quantizers: vLLM's CUDA per-token-group quantizer, transformers' weight quantizer,
DeepSeek's dequantization, and the refusal of the Triton quantizers that are not reproducible.

Expected values come from the quantizers' source as [Note: block quantizers] quotes it, computed here one element
at a time with numpy's IEEE fp32 arithmetic and the slow model's round-to-nearest-even E4M3 encoding
(tests/slowmodel.py), not from the package.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from slowmodel import encode_rne, f32_value

import mmaemu
from mmaemu.quantization import BlockQuantizer, dequantize_fp8_blocks, quantize_fp8_blocks, quantize_fp8_groups

F32 = np.float32


def _e4m3(q: float) -> int:
    """c10's Float8_e4m3fn(q) of a value already within +-448: round to nearest even (the slow model's encoder)."""
    bits = int(np.array(q, dtype=F32).view(np.uint32))
    return encode_rne(f32_value(bits), "e4m3", overflow="saturate")


def _vllm_group(values: list[float], eps: float = 1e-10) -> tuple[list[int], float]:
    """per_token_group_quant_8bit_kernel on one group: local_absmax = eps; fmaxf(local_absmax, fabsf(x));
    y_s = local_absmax / 448 (fp32 division); q = fminf(fmaxf(x / y_s, -448), 448); c10 conversion."""
    absmax = F32(eps)
    for v in values:
        a = abs(F32(v))
        absmax = absmax if math.isnan(a) else max(absmax, a)  # fmaxf returns the non-NaN operand
    with np.errstate(all="ignore"):
        y_s = F32(absmax) / F32(448.0)
        codes = []
        for v in values:
            q = F32(v) / y_s
            q = F32(-448.0) if math.isnan(q) else q  # fmaxf(NaN, -448) = -448
            codes.append(_e4m3(float(min(max(q, F32(-448.0)), F32(448.0)))))
    return codes, float(y_s)


def _groups(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 256, generator=g) * torch.exp2(torch.randint(-20, 20, (6, 1), generator=g).float())
    x[0, 3] = float("nan")
    x[1, 7] = float("inf")
    x[2, :128] = 0.0
    x[3, 0] = -0.0
    x[4, 5] = -float("inf")
    x[5, 128:] = 2.0**-140  # subnormal values: absmax / 448 is subnormal too
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_activation_groups_are_vllms_cuda_quantizer(dtype: torch.dtype) -> None:
    """Every code and scale, random and special values (NaN ignored by the absmax and coded -448, Inf, an all-zero
    group, -0, subnormals)."""
    x = _groups(1).to(dtype)
    codes, scales = quantize_fp8_groups(x)
    assert codes.dtype == torch.float8_e4m3fn and scales.dtype == torch.float32 and tuple(scales.shape) == (6, 2)
    got_codes = codes.view(torch.uint8).tolist()
    for m in range(6):
        for j in range(2):
            want_codes, want_scale = _vllm_group([float(v) for v in x[m, 128 * j:128 * (j + 1)].float()])
            assert got_codes[m][128 * j:128 * (j + 1)] == want_codes, (m, j)
            got = scales[m, j].item()
            assert (math.isnan(got) and math.isnan(want_scale)) or got == want_scale, (m, j)


def test_the_weight_quantizer_is_transformers_torch_operations() -> None:
    """transformers 5.23's _quantize_one: ``448 / max_abs`` is torch's ``__rdiv__``, ``reciprocal() * 448`` (two
    roundings; the IEEE quotient differs for some blocks), weight_scale_inv = 1 / scales, codes of
    clamp(w * scales); an all-zero block gets scale 1."""
    assert "self.reciprocal() * other" in __import__("inspect").getsource(torch.Tensor.__rdiv__)
    g = torch.Generator().manual_seed(2)
    w = torch.randn(256, 384, generator=g) * 3
    w[:128, 128:256] = 0.0
    w[128:, :128] = w[128:, :128].clamp(-1, 1)
    w[200, 3] = 1.01171875  # max|w| of that block: rn(rn(1 / m) * 448) != rn(448 / m)
    codes, inv = quantize_fp8_blocks(w)
    rounded_twice = 0
    for bn in range(2):
        for bk in range(3):
            block = w[128 * bn:128 * (bn + 1), 128 * bk:128 * (bk + 1)].numpy().astype(F32)
            m = F32(np.abs(block).max())
            scale = F32(1.0) if m == 0 else F32(F32(1.0) / m) * F32(448.0)
            rounded_twice += int(m != 0 and scale != F32(448.0) / m)
            assert inv[bn, bk].item() == float(F32(1.0) / scale)
            want = [_e4m3(float(min(max(F32(v) * scale, F32(-448.0)), F32(448.0)))) for v in block.flatten()]
            assert codes[128 * bn:128 * (bn + 1), 128 * bk:128 * (bk + 1)].contiguous().view(torch.uint8).flatten().tolist() == want
    assert inv[0, 1].item() == 1.0 and rounded_twice >= 1


def test_dequantization_rounds_the_product_once() -> None:
    """DeepSeek's weight_dequant: fp32(code) * s rounded once to fp32, then to bf16; partial edge blocks."""
    codes = (torch.randn(200, 130) * 50).clamp(-448, 448).to(torch.float8_e4m3fn)
    codes.view(torch.uint8)[5, 5] = 0x7F
    s = torch.rand(2, 2) * 2.0**-3 + 2.0**-7
    y = dequantize_fp8_blocks(codes, s)
    c = codes.float().numpy()
    want = (c.astype(F32) * np.repeat(np.repeat(s.numpy(), 128, 0), 128, 1)[:200, :130].astype(F32)).astype(F32)
    ref = torch.from_numpy(want).to(torch.bfloat16)
    ref.view(torch.int16)[5, 5] = 0x7FFF
    assert torch.equal(y.view(torch.int16), ref.view(torch.int16))


@pytest.mark.parametrize("quantizer", ["deepseek-triton", "torchao-triton"])
def test_the_triton_quantizers_are_refused_as_not_reproducible(quantizer: str) -> None:
    x = torch.ones(2, 128)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="not reproducible bit for bit: its Triton kernel divides"):
        quantize_fp8_groups(x, quantizer=quantizer)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="div.full.f32"):
        quantize_fp8_blocks(torch.ones(128, 128), quantizer=BlockQuantizer(quantizer))


def test_quantizer_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="quantizer='transformers' does not quantize these"):
        quantize_fp8_groups(torch.ones(2, 128), quantizer="transformers")
    with pytest.raises(ValueError, match="one of"):
        quantize_fp8_groups(torch.ones(2, 128), quantizer="nope")
    with pytest.raises(ValueError, match="multiple of group_size=128"):
        quantize_fp8_groups(torch.ones(2, 100))
    with pytest.raises(ValueError, match="multiples of block_size=128"):
        quantize_fp8_blocks(torch.ones(128, 100))
    with pytest.raises(TypeError, match="bf16, fp16 or fp32"):
        quantize_fp8_groups(torch.ones(2, 128).to(torch.float8_e4m3fn))
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="grad"):
        quantize_fp8_groups(torch.ones(2, 128, requires_grad=True))
