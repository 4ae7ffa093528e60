"""One row per rejection rule and accepted edge case of the call contract (torch 2.7.1 + the reference cuBLASLt).

Each row asserts the exception type and message, or the accepted result's bits, and that
``explain`` agrees with ``scaled_mm`` (the same exception and message, or a plan the result matches).

Where torch's own CPU ``_scaled_mm`` (torch 2.13 here) behaves like torch 2.7.1 on CUDA for a check,
the row is cross-checked against it (``torch_cpu="same"``). Torch 2.13's CPU kernel differs on most
checks ("differs": it accepts K, N not divisible by 16, E5M2 x E5M2, any layout, bias in fp32, and
raises ValueError with newer wording for scale and dtype errors), so those rows rely on torch 2.7.1's
source and the RTX 4060 recordings (tests/evidence/test_call_records.py) instead.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import torch

import mmaemu

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
FNUZ = getattr(torch, "float8_e4m3fnuz", None)


def mat(m: int, k: int, dtype: torch.dtype = E4, value: float = 1.0) -> torch.Tensor:
    return torch.full((m, k), value).to(dtype)


def one(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(1.0, dtype=dtype)


def base(**overrides: Any) -> dict[str, Any]:
    """A valid call: M, N, K = 16, 16, 32, E4M3, bf16 output, explicit unsplit."""
    kwargs: dict[str, Any] = dict(
        mat1=mat(16, 32), mat2=mat(16, 32).t(), scale_a=one(), scale_b=one(),
        out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1,
    )
    kwargs.update(overrides)
    return kwargs


@dataclass
class Row:
    id: str
    call: Callable[[], dict[str, Any]]
    error: type[BaseException] | None = None
    message: str | None = None  # a regular expression, searched in the message
    check: Callable[[torch.Tensor, dict[str, Any]], None] | None = None
    torch_cpu: str = "differs"  # "same": torch's CPU _scaled_mm agrees (type and message)
    warns: type[Warning] | None = None
    setup: Callable[[], Callable[[], None]] | None = field(default=None)


def padded_mat1() -> torch.Tensor:
    return mat(16, 48)[:, :32]  # row-major, leading dimension 48


def offset_mat1(offset: int) -> torch.Tensor:
    return mat(16 * 32 + offset, 1).flatten()[offset:].view(16, 32)


def equals(value: float, dtype: torch.dtype = torch.bfloat16) -> Callable[[torch.Tensor, dict[str, Any]], None]:
    def check(result: torch.Tensor, kwargs: dict[str, Any]) -> None:
        expected = torch.full(tuple(result.shape), value).to(dtype)
        mmaemu.testing.assert_bitwise_equal(result.contiguous(), expected)

    return check


def shape_is(*shape: int) -> Callable[[torch.Tensor, dict[str, Any]], None]:
    def check(result: torch.Tensor, kwargs: dict[str, Any]) -> None:
        assert tuple(result.shape) == shape

    return check


def positive_zeros(result: torch.Tensor, kwargs: dict[str, Any]) -> None:
    assert result.numel() > 0
    assert bool((mmaemu.formats.bits_of(result) == 0).all())


def returns_out(value: float) -> Callable[[torch.Tensor, dict[str, Any]], None]:
    def check(result: torch.Tensor, kwargs: dict[str, Any]) -> None:
        assert result is kwargs["out"]
        equals(value, result.dtype)(result, kwargs)

    return check


def rw(m: int = 16, **overrides: Any) -> dict[str, Any]:
    """A valid row-wise call (scale_a [M, 1], scale_b [1, N], bf16 output), with overrides."""
    return base(**{"mat1": mat(m, 32), "scale_a": torch.ones(m, 1), "scale_b": torch.ones(1, 16), **overrides})


def rowwise_check(condition: str) -> str:
    """torch 2.7.1's message of a bare TORCH_CHECK in RowwiseScaledMM.cu's check_inputs."""
    return "^" + re.escape(f"Expected {condition} to be true, but got false.  (Could this error message be improved?  "
                           "If so, please report an enhancement request to PyTorch.)") + "$"


def plus_columns(values: list[float]) -> Callable[[torch.Tensor, dict[str, Any]], None]:
    """Every row is 32 + ``values`` (one per column): a bias of these values added to the all-32 GEMM."""
    def check(result: torch.Tensor, kwargs: dict[str, Any]) -> None:
        expected = (32.0 + torch.tensor(values)).expand(tuple(result.shape)).to(result.dtype)
        mmaemu.testing.assert_bitwise_equal(result.contiguous(), expected.contiguous())

    return check


def bf16(*shape: int, start: float = 0.0) -> torch.Tensor:
    """0, 1, 2, ... (from ``start``) in bf16, of ``shape``: exact, so each element says where it was read."""
    count = 1
    for size in shape:
        count *= size
    return (torch.arange(count, dtype=torch.float32) + start).to(torch.bfloat16).reshape(shape)


def ftz_on() -> Callable[[], None]:
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    return lambda: torch.set_flush_denormal(False)


INVALID_CFG = re.escape(
    "Invalid scaling configuration. For TensorWise scaling, both scales should be scalar. For RowWise scaling, "
    "scale_a should be (16, 1) and scale_b should be (1, 16). Got scale_a.size()=(16, 1) and scale_b.size()=(16, 1)"
)
LAYOUT = "^Only multiplication of row-major and column-major matrices is supported by cuBLASLt$"
NOT_SUPPORTED = "CUBLAS_STATUS_NOT_SUPPORTED"
RR = mmaemu.ReferenceRejectsError
UF = mmaemu.UnsupportedFeatureError

#: torch 2.7.1's row-wise rules (aten/src/ATen/native/cuda/RowwiseScaledMM.cu check_inputs), in its order.
ROWWISE_ROWS = [
    Row("rowwise-fnuz-mat1", lambda: rw(mat1=mat(16, 32, FNUZ)) if FNUZ else rw(mat1=None), RR,
        rowwise_check("a.dtype() == at::kFloat8_e4m3fn || a.dtype() == at::kFloat8_e5m2")),
    Row("rowwise-mat1-column-major", lambda: rw(mat1=mat(32, 16).t()), RR, rowwise_check("a.stride(1) == 1")),
    Row("rowwise-mat1-overlapping", lambda: rw(mat1=mat(64, 1).flatten().as_strided((16, 32), (2, 1))), RR,
        rowwise_check("a.stride(0) >= a.size(1)")),
    Row("rowwise-mat2-row-major", lambda: rw(mat2=mat(32, 16)), RR, rowwise_check("b.stride(0) == 1")),
    Row("rowwise-mat2-overlapping", lambda: rw(mat2=mat(64, 1).flatten().as_strided((32, 16), (1, 2))), RR,
        rowwise_check("b.stride(1) >= b.size(0)")),
    Row("rowwise-scale-a-stride", lambda: rw(m=1, scale_a=torch.ones(2, 2)[:1, :1]), RR,
        rowwise_check("scale_a.stride(0) == 1")),
    Row("rowwise-bias-1xn", lambda: rw(bias=torch.zeros(1, 16, dtype=torch.bfloat16)), RR, rowwise_check("bias->dim() == 1")),
    Row("rowwise-bias-strided", lambda: rw(bias=torch.zeros(32, dtype=torch.bfloat16)[::2]), RR,
        rowwise_check("bias->stride(0) == 1")),
    Row("rowwise-out-column-major", lambda: rw(out=torch.empty(16, 16, dtype=torch.bfloat16).t()), RR,
        rowwise_check("out.stride(1) == 1")),
    Row("rowwise-f16-output-before-bias-dim", lambda: rw(out_dtype=torch.float16, bias=torch.zeros(1, 16, dtype=torch.float16)),
        RR, "^Only bf16 high precision output types are supported for row-wise scaling.$"),
    Row("rowwise-e5m2-x-e4m3", lambda: rw(mat1=mat(16, 32, E5)), check=equals(32.0), warns=mmaemu.UnrecordedKernelWarning),
    Row("rowwise-bias", lambda: rw(bias=torch.full((16,), 0.5, dtype=torch.bfloat16)), check=equals(32.5),
        warns=mmaemu.UnrecordedKernelWarning),
    Row("rowwise-out-padded", lambda: rw(out=torch.empty(16, 32, dtype=torch.bfloat16)[:, :16]), check=returns_out(32.0)),
    Row("rowwise-out-resized", lambda: rw(out=torch.empty(4, 4, dtype=torch.bfloat16).t()), check=returns_out(32.0),
        warns=UserWarning),
    Row("rowwise-padded-mat1-hopper", lambda: rw(mat1=padded_mat1()), check=equals(32.0)),
    Row("rowwise-padded-mat1-ada", lambda: rw(mat1=padded_mat1(), profile="ada"), UF,
        "mat1 with a padded leading dimension: torch 2.7.1's sm_89 launcher passes K"),
    Row("rowwise-mat1-offset-8", lambda: rw(mat1=offset_mat1(8)), UF, "mat1 not 16-byte aligned"),
    # torch's resize of a wrong-shaped out keeps its storage offset: the kernel still writes from a misaligned pointer
    Row("rowwise-out-resized-offset-2", lambda: rw(out=torch.empty(9, dtype=torch.bfloat16)[1:]), UF,
        "out not 16-byte aligned"),
    Row("rowwise-out-resized-offset-16", lambda: rw(out=torch.empty(12, dtype=torch.bfloat16)[8:]),
        check=returns_out(32.0), warns=UserWarning),
    Row("rowwise-splitk-2", lambda: rw(splitk=(2, "contiguous")), ValueError, "does not split K here; splitk= describes"),
    Row("rowwise-no-kernel-model", lambda: rw(profile="b200-mma-sync-experimental"), UF,
        "models it for the NVIDIA H100 PCIe \\(sm_90\\) and the NVIDIA GeForce RTX 4060 \\(sm_89\\) only, not for "
        "preset 'b200_mma_sync'; use profile='hopper' or 'ada'"),
    Row("rowwise-m-zero", lambda: rw(mat1=mat(0, 32), scale_a=torch.ones(0, 1), out_dtype=torch.float32),
        check=shape_is(0, 16)),
]


ROWS = [
    # --- torch 2.7.1's checks, in its order --------------------------------------------------------
    Row("mat1-not-matrix", lambda: base(mat1=mat(16, 32)[0]), RR, "^mat1 must be a matrix$", torch_cpu="same"),
    Row("mat2-not-matrix", lambda: base(mat2=mat(16, 32)[0]), RR, "^mat2 must be a matrix$", torch_cpu="same"),
    Row("shapes", lambda: base(mat2=mat(16, 48).t()), RR, re.escape("mat1 and mat2 shapes cannot be multiplied (16x32 and 48x16)")),
    Row("scale-f64", lambda: base(scale_a=one(torch.float64)), RR, re.escape("Both scale_a and scale_b must be float (fp32) tensors.")),
    Row("scale-bf16", lambda: base(scale_b=one(torch.bfloat16)), RR, "must be float \\(fp32\\) tensors"),
    Row("scale-1d-two", lambda: base(scale_a=torch.ones(2)), RR,
        re.escape("For non-TensorWise scaling, scale tensors must be 2-dimensional, but got scale_a.dim()=1 and scale_b.dim()=0")),
    Row("scale-invalid-2d", lambda: base(scale_a=torch.ones(16, 1), scale_b=torch.ones(16, 1)), RR, INVALID_CFG),
    Row("rowwise-noncontiguous", lambda: base(scale_a=torch.ones(1, 16).t(), scale_b=torch.ones(16, 2)[:, :1].t()), RR,
        "must be contiguous for RowWise scaling"),
    Row("scale-result-two", lambda: base(scale_result=torch.ones(2)), RR, "^scale_result must be a float scalar$", torch_cpu="same"),
    Row("scale-result-f64", lambda: base(scale_result=one(torch.float64)), RR, "^scale_result must be a float scalar$", torch_cpu="same"),
    Row("bias-size", lambda: base(bias=torch.zeros(3, dtype=torch.bfloat16)), RR, "^Bias must be size 16 but got 3$", torch_cpu="same"),
    Row("k-not-16", lambda: base(mat1=mat(16, 24), mat2=mat(16, 24).t()), RR,
        re.escape("Expected trailing dimension of mat1 to be divisible by 16 but got mat1 shape: (16x24).")),
    Row("n-not-16", lambda: base(mat2=mat(24, 32).t()), RR, re.escape("mat2 shape (32x24) must be divisible by 16")),
    Row("out-dtype-vs-out", lambda: base(out_dtype=torch.float32, out=torch.empty(16, 16, dtype=torch.bfloat16)), RR,
        "^out_dtype must match output matrix type$"),
    Row("mat1-bf16", lambda: base(mat1=torch.ones(16, 32, dtype=torch.bfloat16)), RR, "^Expected mat1 to be Float8 matrix got BFloat16$"),
    Row("mat2-f32", lambda: base(mat2=torch.ones(16, 32).t()), RR, "^Expected mat2 to be Float8 matrix got Float$"),
    Row("e5m2-x-e5m2", lambda: base(mat1=mat(16, 32, E5), mat2=mat(16, 32, E5).t()), RR,
        "^Multiplication of two Float8_e5m2 matrices is not supported$"),
    Row("bias-f32-output", lambda: base(out_dtype=torch.float32, bias=torch.zeros(16, dtype=torch.bfloat16)), RR,
        "^Bias is not supported when out_dtype is set to Float32$"),
    Row("bias-f32-dtype", lambda: base(bias=torch.zeros(16)), RR, "^Bias must be either Half or BFloat16, but got Float$"),
    Row("bias-f16-for-bf16", lambda: base(bias=torch.zeros(16, dtype=torch.float16)), RR,
        "^Bias must be BFloat16 to compute BFloat16 output, but got Half$"),
    Row("bias-bf16-for-f16", lambda: base(out_dtype=torch.float16, bias=torch.zeros(16, dtype=torch.bfloat16)), RR,
        "^Bias must be Float16 to compute Half output, but got BFloat16$"),
    Row("rowwise-f32-output", lambda: base(scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16), out_dtype=torch.float32), RR,
        "^Only bf16 high precision output types are supported for row-wise scaling.$"),
    Row("rowwise-mat2-e5m2", lambda: base(mat2=mat(16, 32, E5).t(), scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16)), RR,
        "b.dtype\\(\\) == at::kFloat8_e4m3fn"),
    Row("mat1-column-major", lambda: base(mat1=mat(32, 16).t()), RR, LAYOUT),
    Row("mat2-row-major", lambda: base(mat2=mat(32, 16)), RR, LAYOUT),
    Row("mat1-padded-column-major", lambda: base(mat1=mat(48, 16)[:32].t()), RR, LAYOUT),
    Row("e4m3-e4m3-to-e5m2", lambda: base(out_dtype=E5), RR, NOT_SUPPORTED),
    Row("output-f64", lambda: base(out_dtype=torch.float64), RR, NOT_SUPPORTED),
    Row("mat1-offset-8", lambda: base(mat1=offset_mat1(8)), RR, "cublasLtMatmul .*mat2_ld 32"),
    Row("mat2-leading-dim-33", lambda: base(mat2=mat(16, 33)[:, :32].t()), RR, "cublasLtMatmul .*mat1_ld 33"),
    # --- refusals of what mmaemu does not model ----------------------------------------------------
    Row("bias-valid-keyword", lambda: base(bias=torch.zeros(16, dtype=torch.bfloat16)), check=equals(32.0),
        warns=mmaemu.UnverifiedEpilogueWarning),
    Row("bias-fp8-output", lambda: base(bias=torch.zeros(16, dtype=torch.bfloat16), out_dtype=E4), UF,
        "bias with an FP8 output is not modelled"),
    # the bias as cuBLASLt reads it: N dense elements from its data pointer (checks.py, [Note: bias memory])
    Row("bias-1xN", lambda: base(bias=bf16(1, 16)), check=plus_columns(list(range(16))),
        warns=mmaemu.UnverifiedEpilogueWarning),
    Row("bias-Nx1", lambda: base(bias=bf16(16, 1)), check=plus_columns(list(range(16)))),
    Row("bias-2x8-transposed", lambda: base(bias=bf16(8, 2).t()), check=plus_columns(list(range(16)))),
    Row("bias-step-2-reads-dense", lambda: base(bias=bf16(32)[::2]), check=plus_columns(list(range(16)))),
    Row("bias-offset-16-bytes", lambda: base(bias=bf16(24)[8:]), check=plus_columns(list(range(8, 24)))),
    Row("bias-expanded-within-storage", lambda: base(bias=bf16(16)[:1].expand(16)), check=plus_columns(list(range(16)))),
    Row("bias-expanded-scalar", lambda: base(bias=torch.tensor(1.0, dtype=torch.bfloat16).expand(16)), UF,
        "reads 16 elements from the bias's data pointer.*beyond"),
    Row("bias-past-storage", lambda: base(bias=bf16(16)[8:].expand(2, 8)), UF, "beyond"),
    Row("bias-offset-2-bytes", lambda: base(bias=bf16(17)[1:]), UF, "16-byte"),
    Row("bias-requires-grad", lambda: base(bias=torch.zeros(16, dtype=torch.bfloat16, requires_grad=True)), UF,
        "bias require grad"),
    Row("bias-requires-grad-no-grad-mode", lambda: base(bias=torch.zeros(16, dtype=torch.bfloat16, requires_grad=True),
                                                        grad=False), check=equals(32.0)),
    Row("scale-result-requires-grad", lambda: base(scale_result=one().requires_grad_()), UF, "scale_result require grad"),
    Row("k-zero-requires-grad", lambda: base(mat1=mat(16, 0), mat2=mat(16, 0).t(), scale_b=one().requires_grad_()), UF,
        "scale_b require grad"),
    Row("m-zero-bias-requires-grad", lambda: base(mat1=mat(0, 32), bias=torch.zeros(16, dtype=torch.bfloat16,
                                                                                  requires_grad=True)), UF,
        "bias require grad"),
    Row("rowwise-bf16", lambda: rw(), check=equals(32.0), warns=mmaemu.UnrecordedKernelWarning),
    *ROWWISE_ROWS,
    Row("requires-grad", lambda: base(scale_a=one().requires_grad_()), UF, "scale_a require grad"),
    Row("flush-to-zero", lambda: base(), mmaemu.MmaemuError, "flushes subnormal", setup=ftz_on),
    Row("splitk-unknown", lambda: base(splitk="auto", profile="hopper-te"), mmaemu.SplitKUnknownError, "splitk=1 only if"),
    Row("out-odd-layout", lambda: base(out=torch.empty(16, 32, dtype=torch.bfloat16)[:, ::2]), UF, "leave out unchanged"),
    # --- our own arguments and Python types ---------------------------------------------------------
    Row("bad-splitk", lambda: base(splitk=(2, "tree")), ValueError, "accepted: 1, \\(S, 'contiguous'\\)"),
    Row("bad-profile", lambda: base(profile="h100"), ValueError, "accepted: 'hopper', 'hopper-te'"),
    Row("bad-backend", lambda: base(backend="cuda:h4"), ValueError, "accepted: 'auto', 'reference'"),
    Row("bias-not-tensor", lambda: base(bias="x"), TypeError, "argument 'bias' .*must be Tensor, not str", torch_cpu="type"),
    Row("fast-accum-not-bool", lambda: base(use_fast_accum=1), TypeError, "'use_fast_accum' .*must be bool"),
    Row("devices-differ", lambda: base(scale_b=torch.tensor(1.0, device="meta")), RR, "Expected all tensors to be on the same device"),
    Row("fnuz-mat2", lambda: base(mat2=mat(16, 32, FNUZ).t()) if FNUZ else base(mat2=None), RR,
        "Cannot convert ScalarType Float8_e4m3fnuz to cudaDataType"),
    # --- accepted edge cases -------------------------------------------------------------------------
    Row("valid-bf16", lambda: base(), check=equals(32.0)),
    Row("m-not-16", lambda: base(mat1=mat(17, 32)), check=equals(32.0)),
    Row("scale-shapes-1-and-1x1", lambda: base(scale_a=torch.ones(1), scale_b=torch.ones(1, 1) * 0.5), check=equals(16.0)),
    Row("default-out-dtype", lambda: {**base(mat1=mat(16, 32, E5), mat2=mat(16, 32).t()), "out_dtype": None}, check=equals(32.0, E5)),
    Row("mixed-to-e5m2", lambda: base(mat2=mat(16, 32, E5).t(), out_dtype=E5), check=equals(32.0, E5)),
    Row("m-zero", lambda: base(mat1=mat(0, 32)), check=shape_is(0, 16)),
    Row("n-zero", lambda: base(mat2=mat(0, 32).t()), check=shape_is(16, 0)),
    # Not cross-checked with torch's CPU kernel: torch 2.13's returns uninitialised memory at K = 0
    # (whatever the allocator hands back: zeros on a fresh page, an earlier result's values otherwise; seen
    # on this project's Xeon machine, 2026-12-03). The zeros are torch 2.7.1's CUDA early return (checks.py).
    Row("k-zero-zeros", lambda: base(mat1=mat(16, 0), mat2=mat(16, 0).t(), scale_a=-one(), out_dtype=torch.float32),
        check=positive_zeros),
    Row("k-zero-ignores-bias", lambda: base(mat1=mat(16, 0), mat2=mat(16, 0).t(), bias=torch.ones(16, dtype=torch.bfloat16)),
        check=positive_zeros),
    Row("padded-mat1", lambda: base(mat1=padded_mat1()), check=equals(32.0)),
    Row("mat1-offset-16", lambda: base(mat1=offset_mat1(16)), check=equals(32.0)),
    Row("mat1-step-view-cloned", lambda: base(mat1=mat(16, 64)[:, ::2]), check=equals(32.0)),
    Row("out-resized-with-warning", lambda: base(out=torch.empty(16, 17, dtype=torch.bfloat16)), check=returns_out(32.0),
        warns=UserWarning),
    Row("out-empty-resized", lambda: base(out=torch.empty(0, dtype=torch.bfloat16)), check=returns_out(32.0)),
    Row("out-transposed", lambda: base(out=torch.empty(16, 16, dtype=torch.bfloat16).t()), check=returns_out(32.0)),
    Row("out-prior-nan", lambda: base(out=torch.full((16, 16), float("nan"), dtype=torch.bfloat16)), check=returns_out(32.0)),
    Row("no-grad-mode", lambda: base(scale_a=one().requires_grad_(), grad=False), check=equals(32.0)),
]


def run(row: Row) -> tuple[Any, dict[str, Any], list[warnings.WarningMessage]]:
    kwargs = row.call()
    grad = kwargs.pop("grad", True)
    mat1, mat2 = kwargs.pop("mat1"), kwargs.pop("mat2")
    scale_a, scale_b = kwargs.pop("scale_a"), kwargs.pop("scale_b")
    context = torch.enable_grad() if grad else torch.no_grad()
    with context, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: Any = mmaemu.scaled_mm(mat1, mat2, scale_a, scale_b, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the row decides what is expected
            result = exc
        plan = mmaemu.explain(mat1, mat2, scale_a, scale_b, **{k: v for k, v in kwargs.items() if k != "out"},
                              out=kwargs.get("out"))
    kwargs.update(mat1=mat1, mat2=mat2, scale_a=scale_a, scale_b=scale_b, plan=plan)
    return result, kwargs, caught


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_contract_row(row: Row) -> None:
    restore = row.setup() if row.setup else None
    try:
        result, kwargs, caught = run(row)
    finally:
        if restore:
            restore()
    plan = kwargs["plan"]
    if row.error is not None:
        assert isinstance(result, row.error), f"expected {row.error.__name__}, got {result!r}"
        assert row.message is not None and re.search(row.message, str(result)), str(result)
        if row.error is mmaemu.ReferenceRejectsError:
            assert isinstance(result, RuntimeError)
        # explain reports exactly what scaled_mm raises
        assert plan.validation == (type(result).__name__, str(result))
    else:
        assert isinstance(result, torch.Tensor), f"unexpected {result!r}"
        assert row.check is not None
        row.check(result, kwargs)
        assert plan.validation == "ok"
        assert plan.out_dtype == str(result.dtype).replace("torch.", "")
        assert plan.shape == (kwargs["mat1"].shape[0], kwargs["mat2"].shape[1], kwargs["mat1"].shape[1])
    if row.warns is not None:
        assert any(issubclass(w.category, row.warns) for w in caught)
    if row.torch_cpu != "differs":
        cross_check_torch_cpu(row, result, kwargs)


def cross_check_torch_cpu(row: Row, result: Any, kwargs: dict[str, Any]) -> None:
    """torch's own CPU _scaled_mm, where it behaves like torch 2.7.1 on CUDA."""
    args = {k: v for k, v in kwargs.items() if k in ("bias", "scale_result", "out_dtype", "use_fast_accum", "out")}
    try:
        native: Any = torch._scaled_mm(kwargs["mat1"], kwargs["mat2"], kwargs["scale_a"], kwargs["scale_b"], **args)
    except Exception as exc:  # noqa: BLE001
        native = exc
    if isinstance(result, BaseException):
        expected_type = TypeError if isinstance(result, TypeError) else RuntimeError
        assert isinstance(native, expected_type), f"torch CPU: {native!r}"
        if row.torch_cpu == "same":
            assert str(native) == str(result)
    else:
        assert isinstance(native, torch.Tensor)
        mmaemu.testing.assert_bitwise_equal(native, result)


def test_at_least_forty_rows() -> None:
    assert len(ROWS) >= 40
    assert len({r.id for r in ROWS}) == len(ROWS)


def test_deterministic_and_device_independent() -> None:
    """The same call twice gives the same bits; every intermediate is exact, so no device can differ."""
    gen = torch.Generator().manual_seed(3)
    a = (torch.randn(17, 256, generator=gen) * 50).to(E4)
    b = (torch.randn(48, 256, generator=gen) * 50).to(E5)
    sa, sb = torch.tensor(0.37), torch.tensor(1.9)
    first = mmaemu.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.float16, splitk=(3, "pairwise"), profile="ada")
    again = mmaemu.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.float16, splitk=(3, "pairwise"), profile="ada")
    mmaemu.testing.assert_bitwise_equal(first, again)
    # a different memory layout of the same values (padded mat1) gives the same bits
    padded = torch.zeros(17, 272, dtype=torch.uint8).view(E4)
    padded[:, :256] = a
    third = mmaemu.scaled_mm(padded[:, :256], b.t(), sa, sb, out_dtype=torch.float16, splitk=(3, "pairwise"), profile="ada")
    mmaemu.testing.assert_bitwise_equal(first, third)
