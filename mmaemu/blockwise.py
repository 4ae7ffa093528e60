"""Block-scaled FP8 GEMMs (DeepSeek-V3-style checkpoints) computed as a named GPU kernel would: :func:`block_scaled_mm`.

Most published FP8 checkpoints (DeepSeek-V3/R1, Qwen3-FP8 and their derivatives) scale weights per 128 x 128
block (``weight_scale_inv``) and activations per 1 x 128 group. Those GEMMs do not run in cuBLAS but in
DeepGEMM (sm_90) or in the Triton block-FP8 kernels that vLLM, SGLang, DeepSeek's reference code and torchao
ship. :func:`block_scaled_mm` returns, bit for bit, what the kernel a *kernel model* names returns
(:mod:`mmaemu.kernels.block_model`: ``"deepgemm-sm90"``, ``"triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9"``,
...), on any backend; :func:`mmaemu.plan.explain_block_scaled` shows the model and its plan without computing.

Experimental: the models are read from the kernels' source and compiled code, and no hardware output of
these kernels is recorded anywhere; every call warns (:class:`~mmaemu.errors.UnrecordedKernelWarning`).
"""

from __future__ import annotations

import torch

from .backends import Backend
from .kernels.block_call import prepare_block, run_block
from .kernels.block_model import BLOCK_MODELS, BlockKernelModel, block_model

__all__ = ["BLOCK_KERNELS", "block_scaled_mm", "resolve_kernel"]

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
                        "(mmaemu.kernels.block_model; docs/models.md says which kernel a library runs)")
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
