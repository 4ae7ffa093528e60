"""mmaemu.scaled_mm_v2 (torch.nn.functional.scaled_mm's API): torch 2.13's checks, tensor-wise bits, refusals.

The operand checks are compared with torch's own definition of them: ``_check_scaled_mm_sizes_v2`` in
``torch/_meta_registrations.py``, run on its CUDA branch (the reference platform's), against the same
arguments. The recipe pair and its scales are compared with torch 2.13's eager kernel on this CPU, which
checks them as the CUDA kernel does for the tensor-wise and row-wise recipes (the meta function differs
there: it calls a float16 tensor-wise scale "must have 1 Float element", both kernels "Invalid scaling
configuration"). The bits are compared with :func:`mmaemu.scaled_mm` of the equivalent ``_scaled_mm`` call.
"""

from __future__ import annotations

from typing import Any

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


RW = F.ScalingType.RowWise
M_, N_ = 16, 48  # _operands()


def _invalid_pairs() -> dict[str, tuple[list[torch.Tensor], list[int], list[torch.Tensor], list[int]]]:
    """Recipe pairs and scales torch 2.13 rejects on the CPU and, by its source, on CUDA (scale_a, recipe_a, ...)."""
    one, rows, cols = torch.tensor(1.0), torch.ones(M_, 1), torch.ones(1, N_)
    tw, rw = int(TW.value), int(RW.value)
    return {
        "TensorWise x RowWise": ([one], [tw], [cols], [rw]),
        "RowWise x TensorWise": ([rows], [rw], [one], [tw]),
        "RowWise with one-element scales": ([one], [rw], [one], [rw]),
        "RowWise with 1x1 scales": ([torch.ones(1, 1)], [rw], [torch.ones(1, 1)], [rw]),
        "RowWise with a short scale_b": ([rows], [rw], [torch.ones(1, 8)], [rw]),
        "RowWise with a bf16 scale_a": ([rows.bfloat16()], [rw], [cols], [rw]),
        "RowWise with a strided scale_b": ([rows], [rw], [torch.ones(N_, 2)[:, :1].t()], [rw]),
        "TensorWise with an fp16 scale": ([one.half()], [tw], [one], [tw]),
        "TensorWise with two scales": ([one, one], [tw], [one], [tw]),
        "TensorWise with two recipes": ([one, one], [tw, tw], [one], [tw]),
        "no recipe": ([one], [], [one], [tw]),
        "BlockWise1x128 x BlockWise128x128 with fp16 scales": ([one.half()], [4], [one.half()], [5]),
        "BlockWise128x128 x BlockWise128x128": ([one], [5], [one], [5]),
        "BlockWise1x32 with float32 scales": ([one], [3], [one], [3]),
        "BlockWise1x16 on float8 operands": ([one], [2], [one], [2]),
    }


def _torch_eager(name: str) -> BaseException:
    a, b = _operands()
    sa, ra, sb, rb = _invalid_pairs()[name]
    with pytest.raises((ValueError, IndexError)) as theirs:
        torch._scaled_mm_v2(a, b, sa, ra, [], sb, rb, [], None, torch.bfloat16, [], False)
    return theirs.value


def _assert_torchs(ours: BaseException, theirs: BaseException) -> None:
    """Same type and message; torch's CUDA kernel lists every recipe where the CPU kernel lists two and names
    the scales ``scale_a[0]`` where the CPU kernel says ``scale_a``: those lines are compared as that source says."""
    assert isinstance(ours, type(theirs)), (type(ours), type(theirs))
    if isinstance(theirs, ValueError):
        assert isinstance(ours, mmaemu.ReferenceRejectsValueError)
    if not str(theirs).startswith("Invalid scaling configuration."):
        assert str(ours) == str(theirs)
        return
    our_lines, their_lines = str(ours).split("\n"), str(theirs).split("\n")
    assert our_lines[:3] == their_lines[:3]  # the heading, TensorWise, RowWise
    assert [line.split(" scaling")[0] for line in our_lines[3:7]] == [
        "- For BlockWise 1x128", "- For BlockWise 128x128", "- For Blockwise 1x32", "- For Blockwise 1x16"]
    assert our_lines[-1].replace("[0].", ".") == their_lines[-1] and len(our_lines) == 8


@pytest.mark.parametrize("name", sorted(_invalid_pairs()))
def test_invalid_recipe_pairs_raise_torchs_error_before_not_modelled(name: str) -> None:
    """Old code: every pair other than TensorWise x TensorWise raised UnsupportedFeatureError ("not modelled"),
    and emulate(fallback="native") forwarded such calls as if valid."""
    a, b = _operands()
    sa, ra, sb, rb = _invalid_pairs()[name]
    theirs = _torch_eager(name)
    with pytest.raises(Exception) as ours:
        mmaemu.scaled_mm_v2(a, b, sa, ra, sb, rb)
    _assert_torchs(ours.value, theirs)
    with mmaemu.emulate(fallback="native") as log:
        with pytest.raises(Exception) as intercepted:
            torch._scaled_mm_v2(a, b, sa, ra, [], sb, rb, [], None, torch.bfloat16, [], False)
    _assert_torchs(intercepted.value, theirs)
    assert isinstance(intercepted.value, (mmaemu.ReferenceRejectsError, IndexError)) and log.native_calls == 0


def _valid_pairs() -> dict[str, tuple[Any, Any, Any, Any]]:
    """Recipe pairs torch 2.13's CUDA kernel table takes, with scales its acceptance functions take."""
    rows, cols = torch.ones(M_, 1), torch.ones(1, N_)
    e8m0 = torch.ones(4).to(torch.float8_e8m0fnu)
    return {"BlockWise1x128": (torch.ones(M_, 1), F.ScalingType.BlockWise1x128, torch.ones(1, N_),
                               F.ScalingType.BlockWise1x128),
            "BlockWise128x128 (mat_a) and BlockWise1x128": (torch.ones(1, 1), F.ScalingType.BlockWise128x128,
                                                            torch.ones(1, N_), F.ScalingType.BlockWise1x128),
            "BlockWise1x32": (e8m0, F.ScalingType.BlockWise1x32, e8m0, F.ScalingType.BlockWise1x32)}


@pytest.mark.parametrize("recipe", sorted(_valid_pairs()))
def test_valid_pairs_of_other_recipes_raise_not_modelled_naming_them(recipe: str) -> None:
    a, b = _operands()
    sa, ra, sb, rb = _valid_pairs()[recipe]
    with pytest.raises(mmaemu.UnsupportedFeatureError, match=recipe.replace("(", "\\(").replace(")", "\\)")):
        mmaemu.scaled_mm_v2(a, b, sa, ra, sb, rb)


def test_nvfp4_pairs_are_not_modelled() -> None:
    fp4 = getattr(torch, "float4_e2m1fn_x2", None)
    if fp4 is None:  # pragma: no cover - torch without fp4
        pytest.skip("torch without float4_e2m1fn_x2")
    a = torch.zeros(16, 16, dtype=torch.uint8).view(fp4)
    b = torch.zeros(48, 16, dtype=torch.uint8).view(fp4).t()
    e4, one = torch.ones(4).to(E4), torch.tensor(1.0)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="BlockWise1x16 \\+ TensorWise \\(mat_a\\)"):
        mmaemu.scaled_mm_v2(a, b, [e4, one], [2, 0], [e4, one], [2, 0])
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="BlockWise1x16 \\(mat_a\\)"):
        mmaemu.scaled_mm_v2(a, b, e4, 2, e4, 2)
    with pytest.raises(mmaemu.ReferenceRejectsValueError, match="Got mat_a.dtype\\(\\)=Float4_e2m1fn_x2"):
        mmaemu.scaled_mm_v2(a, b, one, TW, one, TW)  # tensor-wise needs float8 operands


def test_row_wise_on_both_operands_is_the_row_wise_scaled_mm() -> None:
    """Old code: F.scaled_mm with RowWise recipes raised UnsupportedFeatureError. Now it is torch._scaled_mm's
    row-wise call (torch 2.7.1's CUTLASS kernel), warned; a RowWise recipe on one operand only is torch's rejection."""
    a, b = _operands()
    g = torch.Generator().manual_seed(9)
    sa, sb = torch.rand(16, 1, generator=g) + 0.5, torch.rand(1, 48, generator=g) + 0.5
    with pytest.warns(mmaemu.UnrecordedKernelWarning):
        want = mmaemu.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
    for scale_b in (sb, sb.reshape(48, 1)):  # torch's check takes any scale_b of N elements with stride(1) == 1
        with pytest.warns(mmaemu.UnrecordedKernelWarning):
            got = mmaemu.scaled_mm_v2(a, b, sa, RW, scale_b, RW, use_fast_accum=True)
        assert_bitwise_equal(got, want)
    with pytest.raises(mmaemu.ReferenceRejectsValueError, match="^Invalid scaling configuration"):
        mmaemu.scaled_mm_v2(a, b, sa, RW, torch.tensor(1.0), TW)  # torch rejects the pair


def test_swizzles_and_contraction_dims_raise_naming_them() -> None:
    a, b = _operands()
    one = torch.tensor(1.0)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="swizzle_b=SWIZZLE_32_4_4"):
        mmaemu.scaled_mm_v2(a, b, one, TW, one, TW, swizzle_b=F.SwizzleType.SWIZZLE_32_4_4)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="contraction_dim"):
        mmaemu.scaled_mm_v2(a, b, one, TW, one, TW, contraction_dim=[0, 1])
    with pytest.raises(TypeError, match="scale_recipe_a"):
        mmaemu.scaled_mm_v2(a, b, one, "tensorwise", one, TW)
    with pytest.raises(ValueError, match="scale_a is an empty list"):  # torch: a ValueError too
        mmaemu.scaled_mm_v2(a, b, [], [], one, TW)


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


# --- BlockWise1x128 x BlockWise128x128: computed as a named block kernel model (mmaemu._blockwise) ------------------

B1, B128 = F.ScalingType.BlockWise1x128, F.ScalingType.BlockWise128x128
KERNEL = "deepgemm-sm90"


def _block(m: int = 16, n: int = 256, k: int = 384) -> tuple[torch.Tensor, ...]:
    """Operands and scales in torch 2.13's layouts for this recipe: scale_a [M, K/128] M-major, scale_b
    [round_up(K/128, 4), N/128] with strides (1, L4) (its padding rows NaN: never read), and the checkpoint's
    weight_scale_inv [N/128, K/128] they hold."""
    a, b = _operands(m, n, k)
    g = torch.Generator().manual_seed(3)
    kb, nb = k // 128, n // 128
    l4 = -(-kb // 4) * 4
    sa = (torch.rand(kb, m, generator=g) + 0.5).t()
    sw = torch.rand(nb, kb, generator=g) + 0.5
    stored = torch.full((nb, l4), float("nan"))
    stored[:, :kb] = sw
    return a, b, sa, stored.t(), sw


def _meta_accepts(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
                  monkeypatch: pytest.MonkeyPatch) -> bool:
    import torch._meta_registrations as meta

    monkeypatch.setattr(meta, "device_hint", lambda tensor: "cuda")
    try:
        meta._check_scaled_mm_sizes_v2(a, b, [sa], [int(B1.value)], [sb], [int(B128.value)])
    except (RuntimeError, ValueError):
        return False
    finally:
        monkeypatch.undo()
    return True


def test_block_recipe_without_a_kernel_raises_naming_what_to_pass() -> None:
    """Old code: "not modelled" without a way to compute it. torch runs it in cuBLASLt (closed source)."""
    a, b, sa, sb, _ = _block()
    with pytest.raises(mmaemu.UnsupportedFeatureError, match=r"cuBLASLt.*pass kernel=\.\.\."):
        mmaemu.scaled_mm_v2(a, b, sa, B1, sb, B128)


@pytest.mark.parametrize("k", [384, 512])
def test_block_recipe_is_the_named_kernels_bits(k: int) -> None:
    """The checkpoint's weight_scale_inv is scale_b[:K/128].t(); L4's padding rows are not read (K = 384: one, NaN)."""
    a, b, sa, sb, sw = _block(k=k)
    with pytest.warns(mmaemu.UnrecordedKernelWarning, match="runs in cuBLASLt on the GPU, which is not modelled"):
        got = mmaemu.scaled_mm_v2(a, b, sa, B1, sb, B128, kernel=KERNEL)
    with pytest.warns(mmaemu.UnrecordedKernelWarning):
        want = mmaemu.block_scaled_mm(a, sa.contiguous(), b.t(), sw, kernel=KERNEL)
    assert_bitwise_equal(got, want)


def test_block_recipe_scale_layouts_are_checked_as_torch_checks_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each layout torch 2.13's check (its meta registration on the CUDA path) refuses raises torch's RuntimeError
    here too, before "not modelled"; the layouts it takes run."""
    a, b, sa, sb, _ = _block(k=512)
    cases = {"torch's layouts": (sa, sb), "row-major scale_a": (sa.contiguous(), sb),
             "row-major scale_b": (sa, sb.contiguous()), "scale_b of K/128 + 1 rows": (sa, torch.ones(2, 5).t()),
             "scale_a of one column too many": (torch.ones(5, 16).t(), sb)}
    for name, (x, y) in cases.items():
        if _meta_accepts(a, b, x, y, monkeypatch):
            with pytest.warns(mmaemu.UnrecordedKernelWarning):
                mmaemu.scaled_mm_v2(a, b, x, B1, y, B128, kernel=KERNEL)
        else:
            with pytest.raises(mmaemu.ReferenceRejectsError, match="For 1x128 x 128x128 blockwise scaling"):
                mmaemu.scaled_mm_v2(a, b, x, B1, y, B128, kernel=KERNEL)
            with pytest.raises(mmaemu.ReferenceRejectsError):
                mmaemu.scaled_mm_v2(a, b, x, B1, y, B128)  # torch's check first, then "not modelled"
    assert _meta_accepts(a, b, sa, sb, monkeypatch) and not _meta_accepts(a, b, sa.contiguous(), sb, monkeypatch)


def test_block_recipe_refusals_name_what_the_models_lack() -> None:
    a, b, sa, sb, _ = _block()
    bias = torch.zeros(256, dtype=torch.bfloat16)
    for kwargs, what in (({"bias": bias}, "a bias"), ({"use_fast_accum": True}, "use_fast_accum=True"),
                         ({"out": torch.empty(16, 256, dtype=torch.bfloat16)}, "out=")):
        with pytest.raises(mmaemu.UnsupportedFeatureError, match=f"with {what}: the block kernel models take none"):
            mmaemu.scaled_mm_v2(a, b, sa, B1, sb, B128, kernel=KERNEL, **kwargs)
    a2, b2 = _operands(16, 64, 384)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="partial 128-blocks are not modelled"):
        mmaemu.scaled_mm_v2(a2, b2, sa, B1, torch.ones(4, 1), B128, kernel=KERNEL)


def test_emulate_serves_the_block_recipe_with_its_kernel() -> None:
    """torch._scaled_mm_v2 with the recipe under emulate(kernel=...): the named kernel's bits; without: refused."""
    a, b, sa, sb, sw = _block()
    args = (a, b, [sa], [int(B1.value)], [], [sb], [int(B128.value)], [], None, torch.bfloat16, [], False)
    with pytest.warns(mmaemu.UnrecordedKernelWarning):
        with mmaemu.emulate(kernel=KERNEL) as log:
            got = torch._scaled_mm_v2(*args)
        want = mmaemu.block_scaled_mm(a, sa.contiguous(), b.t(), sw, kernel=KERNEL)
    assert_bitwise_equal(got, want)
    assert log.served == {(16, 256, 384): 1}
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="pass kernel="):
        with mmaemu.emulate():
            torch._scaled_mm_v2(*args)
