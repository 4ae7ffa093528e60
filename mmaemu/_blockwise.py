"""Block-scaled FP8 GEMMs (DeepSeek-V3-style checkpoints) computed as a named GPU kernel would: :func:`block_scaled_mm`.

Most published FP8 checkpoints (DeepSeek-V3/R1, Qwen3-FP8 and their derivatives) scale weights per 128 x 128
block (``weight_scale_inv``) and activations per 1 x 128 group. Those GEMMs do not run in cuBLAS but in
DeepGEMM (sm_90) or in the Triton block-FP8 kernels that vLLM, SGLang, DeepSeek's reference code and torchao
ship. :func:`block_scaled_mm` returns, bit for bit, what the kernel a *kernel model* names returns
(:mod:`mmaemu.kernels._block_model`: ``"deepgemm-sm90"``, ``"triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9"``,
...), on any backend; :func:`mmaemu.explain_block_scaled` shows the model and its plan without computing.

Experimental: the models are read from the kernels' source and compiled code, and no hardware output of
these kernels is recorded anywhere; every call warns (:class:`~mmaemu.errors.UnrecordedKernelWarning`).
"""

from __future__ import annotations

from typing import Any

import torch

from .backends import Backend
from .errors import ReferenceRejectsError, UnsupportedFeatureError
from .kernels._block_call import prepare_block, run_block
from .kernels._block_model import BLOCK_MODELS, GROUP, BlockFamily, BlockKernelModel, block_model

__all__ = ["BLOCK_KERNELS", "SERVED_OPERATORS", "block_scaled_mm", "resolve_kernel", "serve_foreign"]

#: The names of the block-scaled kernel models (their candidates, ``<model>/<choice>=<value>``, resolve too).
BLOCK_KERNELS: tuple[str, ...] = tuple(BLOCK_MODELS)


def resolve_kernel(kernel: object, where: str = "block_scaled_mm") -> BlockKernelModel:
    """The model ``kernel`` names (a model passes through).

    Raises:
        TypeError: ``kernel`` is None (the message lists the models) or not a name.
        UnknownNameError: an unknown name (the message lists the models).
    """
    if isinstance(kernel, BlockKernelModel):
        return kernel
    if kernel is None:
        raise TypeError(f"{where} needs kernel=, the GPU kernel whose bits to compute: one of {list(BLOCK_KERNELS)} "
                        "(mmaemu.kernels._block_model; docs/models.md says which kernel a library runs)")
    return block_model(kernel)  # type: ignore[arg-type]


def block_scaled_mm(
    a: torch.Tensor,
    a_scales: torch.Tensor,
    w: torch.Tensor,
    w_scale_inv: torch.Tensor,
    *,
    kernel: str | BlockKernelModel | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    backend: str | Backend = "auto",
) -> torch.Tensor:
    """``y = (a * a_scales) @ (w * w_scale_inv).T`` as the named GPU kernel computes it, bit for bit (experimental).

    Args:
        a: activations ``[M, K]``, ``float8_e4m3fn``.
        a_scales: fp32 ``[M, ceil(K/128)]``: the dequantisation multiplier of each row's 128-element group of K.
        w: weights ``[N, K]``, ``float8_e4m3fn`` (``nn.Linear``'s layout, as checkpoints store them).
        w_scale_inv: fp32 ``[ceil(N/128), ceil(K/128)]``: each 128 x 128 block's dequantisation multiplier, the
            checkpoints' ``weight_scale_inv`` (``W = W_q * weight_scale_inv``, not its reciprocal).
        kernel: the kernel model's name (:data:`BLOCK_KERNELS`) or the model itself; required.
        out_dtype: bf16 (default; DeepGEMM's only output), fp16 or fp32 (the Triton kernels).
        backend: ``"auto"``, ``"reference"``, ``"cpu"`` or ``"triton"``: every backend returns the same bits.

    Returns:
        ``[M, N]`` of ``out_dtype`` on ``a``'s device. Per k-tile a fresh tensor-core chain, its result combined
        with the tile's two scales as the model says (``explain_block_scaled`` prints the formula), from +0; a NaN
        code in row m of ``a`` or row n of ``w``, a NaN scale, Inf - Inf or Inf * 0 give the output's canonical
        NaN; overflow gives infinity; subnormals are kept; K = 0 (Triton models) gives +0.

    Raises:
        TypeError: no ``kernel``, or an argument of the wrong type.
        UnknownNameError: an unknown kernel name (a ``ValueError``; the message lists the models).
        ValueError: shapes, dtypes or devices that do not fit together (scales of the wrong shape, a K that
            differs), ``meta`` tensors.
        UnsupportedFeatureError: what the kernel refuses (DeepGEMM: N % 64, K % 128, non-contiguous operands or
            weight scales; Triton: a non-contiguous ``a``), operands other than E4M3, an output the kernel does not
            write, inputs requiring grad.
        BackendUnavailableError: the requested backend cannot run on the tensors' device.
        MmaemuError: the CPU flushes subnormals.

    Example:
        >>> import torch, warnings, mmaemu
        >>> a = torch.full((2, 256), 2.0).to(torch.float8_e4m3fn)
        >>> w = torch.full((64, 256), 0.5).to(torch.float8_e4m3fn)
        >>> sa, sb = torch.full((2, 2), 0.25), torch.full((1, 2), 4.0)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", mmaemu.UnrecordedKernelWarning)
        ...     y = mmaemu.block_scaled_mm(a, sa, w, sb, kernel="deepgemm-sm90")
        >>> y.dtype, y[0, 0].item()
        (torch.bfloat16, 256.0)
    """
    model = resolve_kernel(kernel)
    plan = prepare_block(model, a, a_scales, w, w_scale_inv, out_dtype, backend)
    return run_block(plan, a, a_scales, w, w_scale_inv)


#: The third-party block-scaled operators ``emulate(kernel=...)`` serves, with the kernel family and ``BLOCK_K``
#: their kernel runs (the model passed must be one of them).
SERVED_OPERATORS: dict[str, tuple[BlockFamily, int]] = {"ao::blockwise_fp8_gemm": (BlockFamily.TRITON, GROUP)}


def _models_for(family: BlockFamily, k_block: int) -> list[str]:
    return [name for name, m in BLOCK_MODELS.items() if m.family is family and m.k_block == k_block]


def serve_foreign(name: str, bound: dict[str, Any], *, kernel: BlockKernelModel | None,
                  backend: str | Backend) -> torch.Tensor:
    """A call of a served third-party operator (:data:`SERVED_OPERATORS`, its arguments bound by its schema),
    computed as ``kernel``.

    [Note: torchao's blockwise_fp8_gemm] torchao 0.18 (``torchao/kernel/blockwise_quantization.py``, the
    ``ao::blockwise_fp8_gemm`` custom op and ``blockwise_fp8_gemm_kernel``) asserts ``a``, ``a_s``, ``b`` and
    ``b_s`` contiguous, takes ``M = a.numel() // K``, and its kernel reads ``a_s`` at ``m * k + j`` and ``b_s`` at
    ``(n // BLOCK_SIZE_K) * k + j`` (``k = cdiv(K, BLOCK_SIZE_K)``, ``BLOCK_SIZE_K = block_size``): the flat
    ``[M, k]`` and ``[cdiv(N, block_size), k]`` scales, whatever their shapes (torchao's ``Float8Tensor`` passes
    ``[M * k, 1]`` activation scales). The output is bf16 ``a.shape[:-1] + (N,)``. Its tile is autotuned on the
    device (BLOCK_M 16 to 128, BLOCK_K = block_size), hence the model's name says which path ran.

    Raises:
        UnsupportedFeatureError: no ``kernel`` (the message names what to pass), a model of another kernel, a
            ``block_size`` other than 128, scales whose size is not what the kernel reads, and what
            :func:`block_scaled_mm` refuses.
        ReferenceRejectsError: what the operator itself asserts (contiguous tensors).
    """
    family, k_block = SERVED_OPERATORS[name]
    op = f"torch.ops.{name.replace('::', '.')}"
    if kernel is None:
        raise UnsupportedFeatureError(
            f"{op} runs a block-scaled Triton kernel whose tile torchao autotunes on the GPU: mmaemu computes it as a "
            f"named kernel model. Pass mmaemu.emulate(kernel=...) with one of {_models_for(family, k_block)} (sm_90: "
            "'wgmma' where the autotuner chose BLOCK_M >= 64, 'hmma' below; sm_89: 'mma'), or fallback='native'")
    if kernel.family is not family or kernel.k_block != k_block:
        raise UnsupportedFeatureError(f"{op} runs the Triton block kernel with BLOCK_K = {k_block}, not {kernel.base}: "
                                      f"pass one of {_models_for(family, k_block)}")
    a, a_s, b, b_s, block_size = (bound.get(x) for x in ("a", "a_s", "b", "b_s", "block_size"))
    if not all(isinstance(t, torch.Tensor) for t in (a, a_s, b, b_s)):
        raise TypeError(f"{op}: a, a_s, b and b_s must be tensors")
    assert isinstance(a, torch.Tensor) and isinstance(a_s, torch.Tensor)
    assert isinstance(b, torch.Tensor) and isinstance(b_s, torch.Tensor)
    if block_size != GROUP:
        raise UnsupportedFeatureError(f"{op} with block_size={block_size!r}: the kernel models take 128 x 128 blocks")
    odd = [n for n, t in (("a", a), ("a_s", a_s), ("b", b), ("b_s", b_s)) if not t.is_contiguous()]
    if odd:
        raise ReferenceRejectsError(f"{op}: torchao asserts {', '.join(odd)}.is_contiguous() (AssertionError)")
    if a.dim() < 1 or b.dim() != 2 or a.shape[-1] != b.shape[1]:
        raise ValueError(f"{op}: a [..., K] and b [N, K] must share K, got {tuple(a.shape)} and {tuple(b.shape)}")
    k, n = int(a.shape[-1]), int(b.shape[0])
    m = a.numel() // k if k else 0
    groups = -(-k // GROUP)
    if a_s.numel() != m * groups or b_s.numel() != -(-n // GROUP) * groups:
        raise UnsupportedFeatureError(
            f"{op}: a_s has {a_s.numel()} and b_s {b_s.numel()} elements; the kernel reads {m * groups} and "
            f"{-(-n // GROUP) * groups} (M x ceil(K/128) and ceil(N/128) x ceil(K/128)): other sizes read memory "
            "outside them, whose result is not determined")
    y = block_scaled_mm(a.reshape(m, k), a_s.reshape(m, groups), b, b_s.reshape(-(-n // GROUP), groups), kernel=kernel,
                        out_dtype=torch.bfloat16, backend=backend)
    return y.reshape(*a.shape[:-1], n)
