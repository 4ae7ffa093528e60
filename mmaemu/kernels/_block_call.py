"""A block-scaled GEMM run as a named kernel model: its refusals, its plan, its warning, its arithmetic.

:func:`prepare_block` decides everything before the arithmetic: the operands, scales and output checked as
the model's kernel checks them (:func:`refusal`; a refused call modifies nothing), the backend, and the
warning every call emits (:class:`~mmaemu.errors.UnrecordedKernelWarning`: no hardware output of these
kernels is recorded). :func:`run_block` computes (:mod:`mmaemu.kernels._block_arith`).

[Note: what each kernel refuses] Both families take E4M3 x E4M3 with fp32 scales of shapes
``[M, ceil(K/128)]`` (activations, 1 x 128 groups) and ``[ceil(N/128), ceil(K/128)]`` (weights, 128 x 128
blocks, the checkpoints' ``weight_scale_inv``: the dequantisation multiplier, ``W = W_q * weight_scale_inv``;
DeepSeek-V3 README_WEIGHTS.md 83-90 at 9b4e9788). DeepGEMM's host (a6d97a1c deep_gemm/jit_kernels/gemm.py
130-145) asserts ``n % 64 == 0``, ``k % 128 == 0``, ``n > 0``, ``k > 0``, E4M3 operands, a bf16 output,
contiguous ``lhs``, ``rhs`` and ``rhs_scales`` (the activation scales may have any layout: the host makes them
M-major itself); ``m == 0`` returns without work. The Triton kernels' host (vLLM 0.10.0 fp8_utils.py 609-620)
asserts the scale shapes and a contiguous ``A`` and reads ``B`` and both scales through their strides, so
any M, N and K; the output is bf16, fp16 or fp32 (``C.dtype``). Values (NaN, Inf, -0, negative scales) are
computed, never refused: the kernels compute them too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._host import check_cpu_subnormals, refuse_autograd
from ..backends import Backend, require, resolve_backend
from ..backends._cpu_block import available as fused_available
from ..errors import UnrecordedKernelWarning, UnsupportedFeatureError, warn_caller
from ._block_arith import block_accumulators, chain_bounds, round_output
from ._block_model import GROUP, BlockFamily, BlockKernelModel, Operands

__all__ = ["BlockPlan", "prepare_block", "refusal", "run_block"]

_E4M3 = torch.float8_e4m3fn


@dataclass(frozen=True)
class BlockPlan:
    """What a block-scaled call runs: the model and its decisions for the shape.

    Attributes:
        model: the kernel model.
        m, n, k: the GEMM shape (``a [M, K]``, ``w [N, K]``).
        out_dtype: the output dtype.
        backend: the backend that computes the chains.
        fused: the cpu backend's fused kernel runs (:mod:`mmaemu.backends._cpu_block`), else one dispatcher
            call per k-tile.
    """

    model: BlockKernelModel
    m: int
    n: int
    k: int
    out_dtype: torch.dtype
    backend: Backend
    fused: bool

    @property
    def chains(self) -> int:
        """k-tiles (chains) per output."""
        return len(chain_bounds(self.k, self.model.k_block)) - 1

    @property
    def chain(self) -> str:
        """The chain of one k-tile, in words."""
        fp16 = ", the E4M3 codes converted to fp16 first (exact)" if self.model.operands is Operands.FP16 else ""
        return (f"{self.model.preset.name} preset, a fresh chain from +0 per {self.model.k_block} elements of K "
                f"({self.chains} per output; the last zero-padded){fp16}")

    def lines(self) -> tuple[str, ...]:
        """explain's lines for the kernel."""
        out = str(self.out_dtype).replace("torch.", "")
        store = "stored as fp32" if self.out_dtype == torch.float32 else f"rounded to {out} (nearest even)"
        return (f"{self.model.name} ({self.model.arch}; {self.model.toolchain})",
                f"chains: {self.chain}",
                f"combination per k-tile j (sa = a_scales[m, j], sb = w_scale_inv[n // 128, j]): {self.model.formula}; "
                f"then {store}",
                f"maturity: {self.model.maturity}: read from {self.model.kernel}'s source and compiled code; no "
                "hardware output of the kernel is recorded")


def _check_tensor(name: str, t: object, dims: int) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, not {type(t).__name__}")
    if t.dim() != dims:
        raise ValueError(f"{name} must be a {dims}-D tensor, got {t.dim()} dimensions of shape {tuple(t.shape)}")
    return t


def _check_arguments(model: BlockKernelModel, a: object, sa: object, w: object, sb: object,
                     out_dtype: object) -> tuple[int, int, int]:
    """Types, dtypes, devices and shapes; returns ``(M, N, K)``."""
    ta, tw = _check_tensor("a", a, 2), _check_tensor("w", w, 2)
    tsa, tsb = _check_tensor("a_scales", sa, 2), _check_tensor("w_scale_inv", sb, 2)
    if ta.dtype != _E4M3 or tw.dtype != _E4M3:
        raise UnsupportedFeatureError(
            f"a is {ta.dtype} and w is {tw.dtype}: {model.base} is modelled for E4M3 x E4M3 (torch.float8_e4m3fn) "
            "only, the format every block-scaled checkpoint and these kernels use")
    for name, t in (("a_scales", tsa), ("w_scale_inv", tsb)):
        if t.dtype != torch.float32:
            raise ValueError(f"{name} must be float32 (the kernels read fp32 scales), got {t.dtype}")
    devices = {t.device for t in (ta, tw, tsa, tsb)}
    if len(devices) > 1:
        raise ValueError(f"a, a_scales, w and w_scale_inv must be on one device, got {sorted(map(str, devices))}")
    if ta.device.type == "meta":
        raise ValueError("mmaemu computes values; tensors on the 'meta' device have none. Pass CPU or CUDA tensors")
    m, k, n = int(ta.shape[0]), int(ta.shape[1]), int(tw.shape[0])
    if tw.shape[1] != k:
        raise ValueError(f"a [M, K] and w [N, K] must share K, got {tuple(ta.shape)} and {tuple(tw.shape)}")
    groups = -(-k // GROUP)
    if tuple(tsa.shape) != (m, groups):
        raise ValueError(f"a_scales must be [M, ceil(K/128)] = [{m}, {groups}] (one fp32 scale per row and 128 "
                         f"elements of K), got {list(tsa.shape)}")
    if tuple(tsb.shape) != (-(-n // GROUP), groups):
        raise ValueError(f"w_scale_inv must be [ceil(N/128), ceil(K/128)] = [{-(-n // GROUP)}, {groups}] (one fp32 "
                         f"scale per 128 x 128 block of w), got {list(tsb.shape)}")
    if not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype must be a torch.dtype, not {type(out_dtype).__name__}")
    if out_dtype not in model.out_dtypes:
        outs = ", ".join(str(d).replace("torch.", "") for d in model.out_dtypes)
        raise UnsupportedFeatureError(f"out_dtype={out_dtype}: {model.base} writes {outs} only")
    return m, n, k


def refusal(model: BlockKernelModel, a: torch.Tensor, w: torch.Tensor, sb: torch.Tensor, n: int, k: int) -> str | None:
    """Why the model's kernel refuses these shapes and layouts ([Note: what each kernel refuses]), or None."""
    if model.family is BlockFamily.DEEPGEMM:
        if n <= 0 or n % 64 or k <= 0 or k % GROUP:
            return (f"N = {n}, K = {k}: DeepGEMM's host asserts N % 64 == 0 and K % 128 == 0 (both positive; "
                    "deep_gemm/jit_kernels/gemm.py)")
        odd = [name for name, t in (("a", a), ("w", w), ("w_scale_inv", sb)) if not t.is_contiguous()]
        if odd:
            return f"{', '.join(odd)} not contiguous: DeepGEMM's host asserts contiguous lhs, rhs and rhs_scales"
        return None
    if not a.is_contiguous():
        return "a not contiguous: the Triton kernels' host asserts a contiguous A (vLLM's fp8_utils.py)"
    return None


def prepare_block(model: BlockKernelModel, a: object, a_scales: object, w: object, w_scale_inv: object,
                  out_dtype: object, backend: str | Backend) -> BlockPlan:
    """Every decision of a block-scaled call; warns (:class:`~mmaemu.errors.UnrecordedKernelWarning`). Modifies
    nothing.

    Raises:
        TypeError, ValueError: arguments of the wrong type, dtype, device or shape.
        UnsupportedFeatureError: what the model's kernel refuses, non-E4M3 operands, an output the kernel does
            not write, inputs requiring grad.
        BackendUnavailableError: the requested backend cannot run here.
    """
    m, n, k = _check_arguments(model, a, a_scales, w, w_scale_inv, out_dtype)
    assert isinstance(a, torch.Tensor) and isinstance(w, torch.Tensor) and isinstance(w_scale_inv, torch.Tensor)
    assert isinstance(out_dtype, torch.dtype)
    refused = refusal(model, a, w, w_scale_inv, n, k)
    if refused is not None:
        raise UnsupportedFeatureError(f"{model.base}: {refused}")
    refuse_autograd(("a", a), ("a_scales", a_scales), ("w", w), ("w_scale_inv", w_scale_inv))
    chosen = resolve_backend(backend, a.device, model.preset)
    require(chosen, a.device, model.preset)
    if a.device.type == "cpu":
        check_cpu_subnormals()
    fused = chosen is Backend.CPU and model.operands is Operands.FP8 and fused_available(model.preset)
    plan = BlockPlan(model, m, n, k, out_dtype, chosen, fused)
    warn_caller(
        f"block-scaled GEMM computed as {model.name}: experimental, its choices are read from {model.kernel}'s "
        f"source and compiled code ({model.toolchain}), and no hardware output of the kernel is recorded. Chains: "
        f"{plan.chain}; per k-tile: {model.formula}", UnrecordedKernelWarning)
    return plan


def run_block(plan: BlockPlan, a: torch.Tensor, a_scales: torch.Tensor, w: torch.Tensor,
              w_scale_inv: torch.Tensor) -> torch.Tensor:
    """The ``[M, N]`` output of a prepared call."""
    if plan.m == 0 or plan.n == 0:
        return torch.empty((plan.m, plan.n), dtype=plan.out_dtype, device=a.device)
    acc = block_accumulators(plan.model, a.detach(), w.detach(), a_scales.detach(), w_scale_inv.detach(),
                             plan.backend, plan.fused)
    return round_output(acc, plan.out_dtype)
