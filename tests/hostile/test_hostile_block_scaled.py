"""Hostile arguments to mmaemu.block_scaled_mm and emulate(kernel=...): every one refused with a clear error before
anything is computed (explain_block_scaled reports the same refusal), never an approximation."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

import mmaemu

E4 = torch.float8_e4m3fn
DG = "deepgemm-sm90"
TR = "triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9"


def _args(m: int = 4, n: int = 128, k: int = 256) -> dict[str, Any]:
    return {"a": torch.ones(m, k).to(E4), "a_scales": torch.ones(m, -(-k // 128)), "w": torch.ones(n, k).to(E4),
            "w_scale_inv": torch.ones(-(-n // 128), -(-k // 128))}


def _refused(exc: type[BaseException], match: str, kernel: Any = DG, **changes: Any) -> None:
    args = {**_args(), **changes}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a refused call warns nothing either
        with pytest.raises(exc, match=match):
            mmaemu.block_scaled_mm(**args, kernel=kernel)
        plan = mmaemu.explain_block_scaled(**args, kernel=kernel)
    assert not plan.ok and plan.validation[0] == exc.__name__ and plan.warnings == ()


CASES = [
    ("no kernel", TypeError, "needs kernel=", {"kernel": None}),
    ("kernel of another type", TypeError, "is a string", {"kernel": 3}),
    ("unknown kernel", mmaemu.UnknownNameError, "not a block-scaled kernel model", {"kernel": "deepgemm"}),
    ("a row-wise kernel's name", mmaemu.UnknownNameError, "the models are", {"kernel": "cutlass-rowwise-sm90"}),
    ("candidate with a bogus choice", mmaemu.UnknownNameError, "candidate", {"kernel": DG + "/order=column-first"}),
    ("a not a tensor", TypeError, "a must be a tensor", {"a": [[1.0]]}),
    ("3-D a", ValueError, "a must be a 2-D tensor", {"a": torch.ones(1, 4, 256).to(E4)}),
    ("E5M2 operands", mmaemu.UnsupportedFeatureError, "E4M3 x E4M3", {"w": torch.ones(128, 256).to(torch.float8_e5m2)}),
    ("bf16 operands", mmaemu.UnsupportedFeatureError, "E4M3 x E4M3", {"a": torch.ones(4, 256, dtype=torch.bfloat16)}),
    ("bf16 scales", ValueError, "a_scales must be float32", {"a_scales": torch.ones(4, 2, dtype=torch.bfloat16)}),
    ("a_scales per row only", ValueError, r"a_scales must be \[M, ceil\(K/128\)\] = \[4, 2\]", {"a_scales": torch.ones(4, 1)}),
    ("w_scale_inv transposed", ValueError, r"w_scale_inv must be \[ceil\(N/128\), ceil\(K/128\)\] = \[1, 2\]",
     {"w_scale_inv": torch.ones(2, 1)}),
    ("K differs", ValueError, "must share K", {"w": torch.ones(128, 384).to(E4)}),
    ("meta tensors", ValueError, "meta", {k: v.to("meta") for k, v in _args().items()}),
    ("FP8 output", mmaemu.UnsupportedFeatureError, "writes bfloat16 only", {"out_dtype": E4}),
    ("fp32 from DeepGEMM", mmaemu.UnsupportedFeatureError, "writes bfloat16 only", {"out_dtype": torch.float32}),
    ("out_dtype not a dtype", TypeError, "out_dtype must be a torch.dtype", {"out_dtype": "bf16"}),
    ("N % 64", mmaemu.UnsupportedFeatureError, "N % 64 == 0 and K % 128 == 0",
     {"w": torch.ones(96, 256).to(E4)}),
    ("K % 128", mmaemu.UnsupportedFeatureError, "K % 128", {"a": torch.ones(4, 192).to(E4), "w": torch.ones(128, 192).to(E4),
                                                            "a_scales": torch.ones(4, 2)}),
    ("strided weight", mmaemu.UnsupportedFeatureError, "w not contiguous", {"w": torch.ones(256, 128).to(E4).t()}),
    ("requires grad", mmaemu.UnsupportedFeatureError, "grad", {"a_scales": torch.ones(4, 2, requires_grad=True)}),
    ("unknown backend", mmaemu.UnknownNameError, "backend=", {"backend": "gpu"}),
]


@pytest.mark.parametrize("name, exc, match, changes", CASES, ids=[c[0] for c in CASES])
def test_refused_before_anything_runs(name: str, exc: type[BaseException], match: str, changes: dict[str, Any]) -> None:
    kernel = changes.pop("kernel", DG)
    _refused(exc, match, kernel, **changes)


def test_the_triton_models_take_what_deepgemm_refuses() -> None:
    """N = 96, K = 200 and a strided weight run under the Triton models (their host reads strides and masks tails);
    a strided activation is refused there (vLLM asserts a contiguous A)."""
    args = _args(4, 96, 200)
    args["w"] = torch.ones(200, 96).to(E4).t()
    with pytest.warns(mmaemu.UnrecordedKernelWarning):
        y = mmaemu.block_scaled_mm(**args, kernel=TR, out_dtype=torch.float32)
    assert y.shape == (4, 96) and bool((y == 200.0).all())
    args["a"] = torch.ones(200, 4).to(E4).t()
    _refused(mmaemu.UnsupportedFeatureError, "a not contiguous", TR, **args)


def test_every_call_warns() -> None:
    """No recording decides these kernels: every call warns (the default filter shows it once per place)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            mmaemu.block_scaled_mm(**_args(), kernel=DG)
    assert [w.category for w in caught] == [mmaemu.UnrecordedKernelWarning] * 3
    assert "no hardware output of the kernel is recorded" in str(caught[0].message)


def test_emulate_refuses_a_bad_kernel_at_construction() -> None:
    with pytest.raises(mmaemu.UnknownNameError, match="not a block-scaled kernel model"):
        mmaemu.emulate(kernel="deep-gemm")
    with pytest.raises(TypeError, match="is a string"):
        mmaemu.emulate(kernel=128)  # type: ignore[arg-type]


def test_non_finite_scales_are_computed_as_the_kernel_computes_them() -> None:
    """NaN and Inf scales and an Inf times a zero chain are values, not refusals: the output's canonical NaN or Inf."""
    args = _args()
    args["a"] = args["a"].clone()
    args["a"][1, :128] = 0.0
    args["a_scales"] = torch.tensor([[float("nan"), 1.0], [float("inf"), 1.0], [2.0**100, 2.0**100], [1.0, 1.0]])
    args["w_scale_inv"] = torch.tensor([[1.0, 2.0**100]])
    with pytest.warns(mmaemu.UnrecordedKernelWarning):
        y = mmaemu.block_scaled_mm(**args, kernel=DG)
    bits = y.view(torch.int16)
    assert bool((bits[0] == 0x7FFF).all()) and bool((bits[1] == 0x7FFF).all())  # NaN; Inf * 0
    assert bool(torch.isinf(y[2]).all()) and bool((y[3] == 128 + 128 * 2.0**100).all())
