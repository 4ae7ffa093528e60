"""Stand-ins for third-party FP8 GEMM operators that are not installed here (mslk, FBGEMM, vLLM, sgl-kernel).

Each is defined with ``torch.library`` under the library's own qualified name and, where the tests call it
with real arguments, the library's own schema (cited in ``mmaemu/_foreign_ops.py``), with a CPU kernel that
dequantizes and multiplies in float32. It is a test double for the *native* run only: what ``emulate()``
does with a call depends on the operator's name, never on this kernel. Definitions are made once per process.
"""

from __future__ import annotations

from typing import Any

import torch

#: the libraries must stay alive as long as their operators are used
_LIBRARIES: dict[str, torch.library.Library] = {}

#: schemas of the operators the tests call with real arguments, as their libraries define them
SCHEMAS = {
    "mslk::f8f8bf16_rowwise": "(Tensor XQ, Tensor WQ, Tensor x_scale, Tensor w_scale, Tensor? bias=None, "
                              "bool use_fast_accum=True) -> Tensor",
    "mslk::f8f8bf16_blockwise": "(Tensor XQ, Tensor WQ, Tensor x_scale, Tensor w_scale, int block_m=128, "
                                "int block_n=128, int block_k=128) -> Tensor",
    "fbgemm::f8f8bf16_tensorwise": "(Tensor XQ, Tensor WQ, float scale, bool use_fast_accum=True) -> Tensor",
    "fbgemm::f8f8bf16_cublas": "(Tensor A, Tensor B, Tensor? Ainvs=None, Tensor? Binvs=None, "
                               "bool use_fast_accum=True, Tensor(a!)? output=None) -> Tensor",
    "_C::cutlass_scaled_mm": "(Tensor! out, Tensor a, Tensor b, Tensor a_scales, Tensor b_scales, Tensor? bias) -> ()",
    "sgl_kernel::fp8_scaled_mm": "(Tensor mat_a, Tensor mat_b, Tensor scales_a, Tensor scales_b, "
                                 "ScalarType out_dtype, Tensor? bias) -> Tensor",
    "vllm::w8a8_triton_block_scaled_mm_func": "(Tensor qx, Tensor weight, Tensor x_scale, Tensor weight_scale, "
                                              "int[] block_size, ScalarType output_dtype) -> Tensor",
}
#: a schema for every other operator of the table: two operands (named as the library names them), no others
GENERIC_SCHEMA = "(Tensor {}, Tensor {}) -> Tensor"


def _matmul(a: torch.Tensor, b: torch.Tensor, nk: bool) -> torch.Tensor:
    return (a.float() @ (b.float().t() if nk else b.float())).to(torch.bfloat16)


def _kernel(name: str) -> Any:
    if name == "_C::cutlass_scaled_mm":
        def cutlass(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *rest: Any) -> None:
            out.copy_(_matmul(a, b, nk=False) if a.dtype != torch.int8 else (a.long() @ b.long()).to(out.dtype))
        return cutlass
    if name == "sgl_kernel::fp8_scaled_mm":
        return lambda a, b, *rest: _matmul(a, b, nk=False)
    if name in SCHEMAS:
        return lambda a, b, *rest, **kw: _matmul(a, b, nk=True)
    return lambda a, b: (a.float().sum() + b.float().sum()).reshape(1)  # generic: whatever the layout


def _fake(name: str) -> Any:
    if name == "_C::cutlass_scaled_mm":
        return lambda out, *rest: None
    if name == "sgl_kernel::fp8_scaled_mm":
        return lambda a, b, *rest: a.new_empty(a.shape[0], b.shape[1], dtype=torch.bfloat16)
    if name in SCHEMAS:
        return lambda a, b, *rest, **kw: a.new_empty(a.shape[0], b.shape[0], dtype=torch.bfloat16)
    return lambda a, b: a.new_empty(1, dtype=torch.float32)


def define(name: str, operands: tuple[str, str] = ("a", "b")) -> Any:
    """``torch.ops.<namespace>.<name>.default``, defined here (CPU and fake kernels) unless it exists.

    Operators without a schema in :data:`SCHEMAS` take two tensors, named ``operands``.
    """
    namespace, op = name.split("::")
    try:
        return getattr(getattr(torch.ops, namespace), op).default
    except (AttributeError, RuntimeError):
        pass
    library = _LIBRARIES.get(namespace)
    if library is None:
        library = _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")  # noqa: TOR901
    library.define(op + SCHEMAS.get(name, GENERIC_SCHEMA.format(*operands)))
    library.impl(op, _kernel(name), "CPU")
    library._register_fake(op, _fake(name))
    return getattr(getattr(torch.ops, namespace), op).default
