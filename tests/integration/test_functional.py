"""mmaemu.scaled_mm_v2 (torch.nn.functional.scaled_mm's API): torch 2.13's checks, tensor-wise bits, refusals.

The checks are compared with torch's own definition of them: ``_check_scaled_mm_sizes_v2`` in
``torch/_meta_registrations.py``, run on its CUDA branch (the reference platform's), against the same
arguments; the bits with :func:`mmaemu.scaled_mm` of the equivalent ``_scaled_mm`` call.
"""

from __future__ import annotations

import pytest
import torch

import mmaemu
from mmaemu.testing import assert_bitwise_equal

pytest.importorskip("torch._meta_registrations")
F = torch.nn.functional
if not hasattr(F, "scaled_mm"):  # pragma: no cover - torch < 2.10
    pytest.skip("torch without torch.nn.functional.scaled_mm", allow_module_level=True)
TW = F.ScalingType.TensorWise
E4 = torch.float8_e4m3fn


def _operands(m: int = 16, n: int = 48, k: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(m * 1000 + n + k)
    a = (torch.randn(m, k, generator=g) * 30).to(E4)
    b = (torch.randn(n, k, generator=g) * 30).to(E4)
    return a, b.t()


def _torch_check(monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, object]) -> BaseException | None:
    """What torch 2.13's own check of these arguments raises on its CUDA path (None: accepted)."""
    import torch._meta_registrations as meta

    monkeypatch.setattr(meta, "device_hint", lambda tensor: "cuda")
    as_list = {k: (v if isinstance(v, list) else [v]) for k, v in kwargs.items() if k in ("scale_a", "scale_b")}
    try:
        meta._check_scaled_mm_sizes_v2(kwargs["mat_a"], kwargs["mat_b"], as_list["scale_a"], [int(TW.value)],
                                       as_list["scale_b"], [int(TW.value)])
    except (RuntimeError, ValueError) as exc:
        return exc
    finally:
        monkeypatch.undo()
    return None


def _cases() -> dict[str, dict[str, object]]:
    a, b = _operands()
    return {
        "3-D mat_a": {"mat_a": a.unsqueeze(0), "mat_b": b},
        "bf16 mat_b": {"mat_a": a, "mat_b": b.to(torch.bfloat16)},
        "row-major mat_b": {"mat_a": a, "mat_b": b.contiguous()},
        "column-major mat_a": {"mat_a": a.t().contiguous().t(), "mat_b": b},
        "K = 40": {"mat_a": _operands(k=48)[0][:, :40].contiguous(), "mat_b": _operands(k=48)[1][:40, :]},
        "N = 40": {"mat_a": a, "mat_b": _operands(n=40)[1]},
        "two-element scale": {"mat_a": a, "mat_b": b, "scale_a": torch.ones(2)},
        "fp16 scale": {"mat_a": a, "mat_b": b, "scale_b": torch.tensor(1.0, dtype=torch.float16)},
    }


@pytest.mark.parametrize("name", sorted(_cases()))
def test_rejections_are_torch_2_13s(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: every F.scaled_mm call raised UnsupportedFeatureError, whatever its arguments."""
    kwargs = {"scale_a": torch.tensor(1.0), "scale_b": torch.tensor(1.0), **_cases()[name]}
    theirs = _torch_check(monkeypatch, kwargs)
    assert theirs is not None, name  # each case is a rejection of torch's
    with pytest.raises(type(theirs)) as ours:
        mmaemu.scaled_mm_v2(kwargs["mat_a"], kwargs["mat_b"], kwargs["scale_a"], TW, kwargs["scale_b"], TW)
    assert str(ours.value) == str(theirs)
    assert isinstance(ours.value, mmaemu.ReferenceRejectsError)


def test_two_scales_for_one_tensor_wise_recipe_are_refused() -> None:
    """torch's meta check looks at the first scale only; its eager kernel refuses (a ValueError), and so does mmaemu."""
    a, b = _operands()
    one = torch.tensor(1.0)
    with pytest.raises(ValueError):
        torch._scaled_mm_v2(a, b, [one, one], [0], [], [one], [0], [], None, torch.float32, [], False)
    with pytest.raises(mmaemu.ReferenceRejectsValueError, match="scale_a must have 1 Float element"):
        mmaemu.scaled_mm_v2(a, b, [one, one], TW, one, TW)


@pytest.mark.parametrize("recipe", ["BlockWise1x16", "BlockWise1x32", "BlockWise1x128", "BlockWise128x128"])
def test_other_recipes_raise_naming_them(recipe: str) -> None:
    a, b = _operands()
    one = torch.tensor(1.0)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match=recipe):
        mmaemu.scaled_mm_v2(a, b, one, getattr(F.ScalingType, recipe), one, getattr(F.ScalingType, recipe))
    with pytest.raises(mmaemu.UnsupportedFeatureError, match=f"{recipe} \\(mat_b\\)"):
        mmaemu.scaled_mm_v2(a, b, one, TW, one, getattr(F.ScalingType, recipe))


RW = F.ScalingType.RowWise


def test_row_wise_on_both_operands_is_the_row_wise_scaled_mm() -> None:
    """Old code: F.scaled_mm with RowWise recipes raised UnsupportedFeatureError. Now it is torch._scaled_mm's
    row-wise call (torch 2.7.1's CUTLASS kernel), warned; a RowWise recipe on one operand only still raises."""
    a, b = _operands()
    g = torch.Generator().manual_seed(9)
    sa, sb = torch.rand(16, 1, generator=g) + 0.5, torch.rand(1, 48, generator=g) + 0.5
    with pytest.warns(mmaemu.UnrecordedKernelWarning):
        want = mmaemu.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
    for scale_b in (sb, sb.reshape(48, 1)):  # torch's check takes any scale_b of N elements with stride(1) == 1
        with pytest.warns(mmaemu.UnrecordedKernelWarning):
            got = mmaemu.scaled_mm_v2(a, b, sa, RW, scale_b, RW, use_fast_accum=True)
        assert_bitwise_equal(got, want)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="RowWise \\(mat_a\\) and TensorWise \\(mat_b\\)"):
        mmaemu.scaled_mm_v2(a, b, sa, RW, torch.tensor(1.0), TW)


def _rowwise_cases() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    ones = torch.ones
    return {
        "scale_a 16 x 2": (ones(16, 2), ones(1, 48)),
        "scale_a 8 x 1": (ones(8, 1), ones(1, 48)),
        "scale_a fp16": (ones(16, 1, dtype=torch.float16), ones(1, 48)),
        "scale_b 1 x 32": (ones(16, 1), ones(1, 32)),
        "scale_b fp64": (ones(16, 1), ones(1, 48, dtype=torch.float64)),
        "scale_a stride(1) 2": (ones(32).as_strided((16, 1), (1, 2)), ones(1, 48)),
        "scale_b stride(1) 2": (ones(16, 1), ones(1, 96)[:, ::2]),
    }


@pytest.mark.parametrize("name", sorted(_rowwise_cases()))
def test_row_wise_rejections_are_torch_2_13s(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.13's RowWise checks (``_check_scaled_mm_sizes_v2`` on its CUDA branch), message and type."""
    import torch._meta_registrations as meta

    a, b = _operands()
    sa, sb = _rowwise_cases()[name]
    monkeypatch.setattr(meta, "device_hint", lambda tensor: "cuda")
    with pytest.raises(ValueError) as theirs:
        meta._check_scaled_mm_sizes_v2(a, b, [sa], [int(RW.value)], [sb], [int(RW.value)])
    monkeypatch.undo()
    with pytest.raises(mmaemu.ReferenceRejectsValueError) as ours:
        mmaemu.scaled_mm_v2(a, b, sa, RW, sb, RW)
    assert str(ours.value) == str(theirs.value)


def test_swizzles_and_contraction_dims_raise_naming_them() -> None:
    a, b = _operands()
    one = torch.tensor(1.0)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="swizzle_b=SWIZZLE_32_4_4"):
        mmaemu.scaled_mm_v2(a, b, one, TW, one, TW, swizzle_b=F.SwizzleType.SWIZZLE_32_4_4)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="contraction_dim"):
        mmaemu.scaled_mm_v2(a, b, one, TW, one, TW, contraction_dim=[0, 1])
    with pytest.raises(TypeError, match="scale_recipe_a"):
        mmaemu.scaled_mm_v2(a, b, one, "tensorwise", one, TW)


@pytest.mark.parametrize("out", [torch.bfloat16, torch.float16, torch.float32, None])
@pytest.mark.parametrize("fast", [True, False])
def test_tensor_wise_bits_are_scaled_mm_s(out: torch.dtype | None, fast: bool) -> None:
    a, b = _operands(32, 64, 1024)
    sa, sb = torch.tensor(0.5), torch.tensor(0.125)
    got = mmaemu.scaled_mm_v2(a, b, sa, TW, sb, TW, swizzle_a=F.SwizzleType.NO_SWIZZLE, output_dtype=out,
                              use_fast_accum=fast, contraction_dim=(1, 0))
    assert_bitwise_equal(got, mmaemu.scaled_mm(a, b, sa, sb, out_dtype=out, use_fast_accum=fast))
    native = F.scaled_mm(a, b, sa, TW, sb, TW, output_dtype=out, use_fast_accum=fast)
    assert got.dtype == native.dtype and got.shape == native.shape  # torch's own result on this CPU: same type
