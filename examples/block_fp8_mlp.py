"""A DeepSeek-V3-style MLP block in checkpoint format, computed on the CPU as DeepGEMM computes it on an H800.

The block is DeepSeek-V3's dense MLP, ``y = w2(silu(w1(x)) * w3(x))``, at a reduced width, with synthetic
weights stored as its checkpoints store them: E4M3 codes with a fp32 ``weight_scale_inv`` per 128 x 128 block
(``mmaemu.quantization.quantize_fp8_blocks``, transformers' FineGrainedFP8 quantizer). Each linear quantizes
its input per 1 x 128 group as vLLM's CUDA kernel does (``quantize_fp8_groups``) and runs the block-scaled GEMM
with ``mmaemu.block_scaled_mm`` as a named kernel model:

1. ``deepgemm-sm90``: DeepGEMM on an H800 (sm_90), what vLLM and SGLang run with DeepGEMM installed;
2. ``triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9``: vLLM's Triton kernel on the same GPU, its default
   tile (BLOCK_M 64, BLOCK_K 128; Triton 3.3 to 3.9 with fp fusion on);
3. a bf16 reference: DeepSeek's default ``gemm_impl = "bf16"`` path, the weights dequantized to bf16
   (``dequantize_fp8_blocks``, DeepSeek's ``weight_dequant``) and every product summed in float64, rounded to
   bf16 once (no activation quantization, no tensor-core truncation).

It prints, per GEMM fed the same input, and for the whole block, the fraction of bf16 outputs in which DeepGEMM
differs from the Triton kernel and from the reference. SiLU and the product run in torch on this CPU in all three
(the GPU's ``expf`` may round a bf16 differently, rarely: only the GEMMs are the GPU's bits here). Nothing is
downloaded; it runs in seconds once numba's kernels are compiled::

    python examples/block_fp8_mlp.py [--tokens 16] [--hidden 1024] [--inner 2048] [--seed 0]

Experimental: no hardware output of these kernels is recorded; each GEMM warns (UnrecordedKernelWarning: silenced
here, and said once in the output).
"""

from __future__ import annotations

import argparse
import sys
import warnings

import torch

import mmaemu
from mmaemu.quantization import dequantize_fp8_blocks, quantize_fp8_blocks, quantize_fp8_groups

DEEPGEMM = "deepgemm-sm90"
TRITON = "triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9"


def checkpoint(hidden: int, inner: int, seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """w1, w3 ``[inner, hidden]`` and w2 ``[hidden, inner]`` as (E4M3 codes, weight_scale_inv)."""
    gen = torch.Generator().manual_seed(seed)
    shapes = {"w1": (inner, hidden), "w3": (inner, hidden), "w2": (hidden, inner)}
    return {name: quantize_fp8_blocks((torch.randn(*shape, generator=gen) * shape[1] ** -0.5).to(torch.bfloat16))
            for name, shape in shapes.items()}


def linear(x: torch.Tensor, weight: tuple[torch.Tensor, torch.Tensor], kernel: str | None) -> torch.Tensor:
    """One FP8 linear of the checkpoint: x quantized per 1 x 128 group, then the block-scaled GEMM as ``kernel``;
    ``None``: the bf16 reference (dequantized weight, exact sum, one rounding)."""
    codes, scale_inv = weight
    if kernel is None:
        w = dequantize_fp8_blocks(codes, scale_inv)
        return (x.double() @ w.double().t()).to(torch.bfloat16)
    xq, xs = quantize_fp8_groups(x)
    return mmaemu.block_scaled_mm(xq, xs, codes, scale_inv, kernel=kernel)


def mlp(x: torch.Tensor, ckpt: dict[str, tuple[torch.Tensor, torch.Tensor]], kernel: str | None) -> torch.Tensor:
    h = torch.nn.functional.silu(linear(x, ckpt["w1"], kernel)) * linear(x, ckpt["w3"], kernel)
    return linear(h, ckpt["w2"], kernel)


def differ(a: torch.Tensor, b: torch.Tensor) -> float:
    """The fraction of outputs whose bits differ."""
    return float((a.view(torch.int16) != b.view(torch.int16)).float().mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=1024, help="a multiple of 128 (DeepSeek-V3: 7168)")
    parser.add_argument("--inner", type=int, default=2048, help="a multiple of 128 (DeepSeek-V3: 18432)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.tokens < 1 or args.hidden % 128 or args.inner % 128 or args.hidden < 128 or args.inner < 128:
        parser.error("--tokens >= 1; --hidden and --inner positive multiples of 128 (the checkpoints' blocks)")
    ckpt = checkpoint(args.hidden, args.inner, args.seed)
    x = torch.randn(args.tokens, args.hidden, generator=torch.Generator().manual_seed(args.seed + 1)).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnrecordedKernelWarning)
        print(f"DeepSeek-V3-style MLP, {args.tokens} tokens, hidden {args.hidden}, inner {args.inner}; outputs whose bf16 "
              "bits differ from DeepGEMM's (sm_90):")
        print(f"  {'':22s} {'vs Triton (vLLM default)':>26s} {'vs bf16 reference':>20s}")
        for name in ("w1", "w3"):
            got = {k: linear(x, ckpt[name], k) for k in (DEEPGEMM, TRITON, None)}
            print(f"  {name} alone ({args.tokens} x {args.inner}) {differ(got[DEEPGEMM], got[TRITON]):>24.2%} "
                  f"{differ(got[DEEPGEMM], got[None]):>20.2%}")
        y = {k: mlp(x, ckpt, k) for k in (DEEPGEMM, TRITON, None)}
    rel = float(((y[DEEPGEMM].double() - y[None].double()).abs().max() / y[None].double().abs().max()))
    print(f"  {'the whole block':22s} {differ(y[DEEPGEMM], y[TRITON]):>26.2%} {differ(y[DEEPGEMM], y[None]):>20.2%}")
    print(f"  largest difference from the bf16 reference: {rel:.2e} of its largest output")
    print("(experimental: the kernel models are read from source and compiled code; no GPU output of them is recorded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
