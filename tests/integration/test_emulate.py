"""mmaemu.emulate(): torch._scaled_mm calls inside the block return mmaemu.scaled_mm's bits; outside, torch's."""

from __future__ import annotations

import warnings

import threading

import pytest
import torch

import mmaemu
from mmaemu.testing import assert_bitwise_equal, bitwise_diff

E4M3 = torch.float8_e4m3fn
# (M, N, K) = (32, 64, 1024): rows of both H100 tables and of the RTX 4060's (S = 1).
M, N, K = 32, 64, 1024


@pytest.fixture(scope="module")
def operands() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    a = (torch.randn(M, K, generator=g) * 40).clamp(-448, 448).to(E4M3)
    b = (torch.randn(N, K, generator=g) * 40).clamp(-448, 448).to(E4M3)
    return a, b, torch.tensor(1 / 64), torch.tensor(1 / 32)


def _expected(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, profile: str = "hopper",
              **kw: object) -> torch.Tensor:
    return mmaemu.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True, profile=profile, **kw)  # type: ignore[arg-type]


def _native(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    return torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)


class _Layer(torch.nn.Module):
    def __init__(self, b: torch.Tensor, sb: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("w", b)
        self.register_buffer("sw", sb)

    def forward(self, a: torch.Tensor, sa: torch.Tensor) -> torch.Tensor:
        return torch._scaled_mm(a, self.w.t(), sa, self.sw, out_dtype=torch.bfloat16, use_fast_accum=True)


def test_intercepts_a_plain_function_and_a_module(operands: tuple[torch.Tensor, ...], backend: str) -> None:
    a, b, sa, sb = operands
    layer = _Layer(b, sb)
    with mmaemu.emulate(profile="ada", backend=backend) as log:
        from_function = _native(a, b, sa, sb)
        from_module = layer(a, sa)
    want = _expected(a, b, sa, sb, profile="ada")
    assert_bitwise_equal(from_function, want)
    assert_bitwise_equal(from_module, want)
    assert log.served == {(M, N, K): 2} and log.served_calls == 2 and log.native_calls == 0
    assert not bitwise_diff(want, _native(a, b, sa, sb)).equal  # the test would not notice a missed call otherwise


def test_all_spellings_and_torch_argument_semantics(operands: tuple[torch.Tensor, ...]) -> None:
    a, b, sa, sb = operands
    want = _expected(a, b, sa, sb)
    out = torch.empty(0, dtype=torch.bfloat16)
    with mmaemu.emulate() as log:
        results = [
            torch._scaled_mm(input=a, mat2=b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=True),
            torch.ops.aten._scaled_mm(a, b.t(), sa, sb, None, None, torch.bfloat16, True),
            torch.ops.aten._scaled_mm.default(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True),
            torch._scaled_mm(a, b.t(), sa, sb, None, None, torch.bfloat16, True, out=out),
        ]
        slow_default = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.float32)  # use_fast_accum=False
    for got in results:
        assert_bitwise_equal(got, want)
    assert results[-1] is out
    assert_bitwise_equal(slow_default, mmaemu.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.float32))
    assert log.served_calls == 5


def test_restores_torch_on_exit_and_on_exceptions(operands: tuple[torch.Tensor, ...]) -> None:
    a, b, sa, sb = operands
    native = _native(a, b, sa, sb)
    block = mmaemu.emulate()
    with pytest.raises(KeyError):
        with block as log:
            _native(a, b, sa, sb)
            raise KeyError("boom")
    assert not block.active and log.served_calls == 1
    assert_bitwise_equal(_native(a, b, sa, sb), native)
    with block as log2:  # the object can be entered again, with a fresh log
        pass
    assert log2.served_calls == 0 and log.served_calls == 1
    assert_bitwise_equal(_native(a, b, sa, sb), native)
    with mmaemu.emulate():
        with pytest.raises(mmaemu.ReferenceRejectsError):
            torch._scaled_mm(a, b, sa, sb)  # mat2 row-major: rejected as on the reference GPU
    assert_bitwise_equal(_native(a, b, sa, sb), native)


def test_entering_an_active_block_twice_raises() -> None:
    block = mmaemu.emulate()
    with block:
        with pytest.raises(RuntimeError, match="already active"):
            block.__enter__()


def test_unservable_calls_raise_or_run_natively(operands: tuple[torch.Tensor, ...]) -> None:
    a, b, sa, sb = operands
    bias = torch.ones(N, dtype=torch.bfloat16)
    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    with mmaemu.emulate():
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="bias with an FP8 output"):
            torch._scaled_mm(a, b.t(), sa, sb, bias, out_dtype=torch.float8_e4m3fn)
        if e8m0 is not None:
            with pytest.raises(mmaemu.UnsupportedFeatureError, match="MX recipes"):
                torch._scaled_mm(a, b.t(), sa.to(e8m0), sb.to(e8m0), out_dtype=torch.bfloat16)
    with mmaemu.emulate(fallback="native") as log:
        fp8_bias = torch._scaled_mm(a, b.t(), sa, sb, bias, out_dtype=torch.float8_e4m3fn)
        served = _native(a, b, sa, sb)
    assert_bitwise_equal(fp8_bias, torch._scaled_mm(a, b.t(), sa, sb, bias, out_dtype=torch.float8_e4m3fn))
    assert_bitwise_equal(served, _expected(a, b, sa, sb))
    assert log.native == {(M, N, K): 1} and log.served == {(M, N, K): 1}
    assert sum(log.reasons.values()) == 1 and "native" in str(log)


def test_row_wise_calls_are_served_and_warned(operands: tuple[torch.Tensor, ...]) -> None:
    """Old code: row-wise scales raised UnsupportedFeatureError (or ran natively under fallback="native").
    Now every row-wise call, torch._scaled_mm or F.scaled_mm, gets mmaemu.scaled_mm's bits (torch 2.7.1's
    CUTLASS kernel), with an UnrecordedKernelWarning each time, and nothing runs natively."""
    a, b, _, _ = operands
    row_a, row_b = torch.full((M, 1), 1 / 64), torch.full((1, N), 1 / 32)
    with pytest.warns(mmaemu.UnrecordedKernelWarning):
        want = mmaemu.scaled_mm(a, b.t(), row_a, row_b, out_dtype=torch.bfloat16)
    with mmaemu.emulate(fallback="native") as log:
        for _ in range(2):
            with pytest.warns(mmaemu.UnrecordedKernelWarning, match="CUTLASS kernel cutlass-rowwise-sm90"):
                got = torch._scaled_mm(a, b.t(), row_a, row_b, out_dtype=torch.bfloat16)
            assert_bitwise_equal(got, want)
    assert log.served == {(M, N, K): 2} and log.native_calls == 0
    assert not bitwise_diff(want, torch._scaled_mm(a, b.t(), row_a, row_b, out_dtype=torch.bfloat16)).equal


def test_a_bias_is_served_and_warned(operands: tuple[torch.Tensor, ...]) -> None:
    """old code raised for every bias; now a bf16 or fp16 bias is the experimental epilogue, warned on
    every call (UnverifiedEpilogueWarning), with mmaemu.scaled_mm's bits."""
    a, b, sa, sb = operands
    bias = (torch.randn(N, generator=torch.Generator().manual_seed(3)) * 100).to(torch.bfloat16)
    with pytest.warns(mmaemu.UnverifiedEpilogueWarning):
        want = mmaemu.scaled_mm(a, b.t(), sa, sb, bias, out_dtype=torch.bfloat16, use_fast_accum=True)
    with mmaemu.emulate() as log:
        for _ in range(2):
            with pytest.warns(mmaemu.UnverifiedEpilogueWarning, match="bias= is experimental"):
                got = torch._scaled_mm(a, b.t(), sa, sb, bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True)
            assert_bitwise_equal(got, want)
    assert log.served_calls == 2
    assert not bitwise_diff(want, _expected(a, b, sa, sb)).equal  # the bias took part


def test_undecided_splits_raise_even_with_native_fallback() -> None:
    a = torch.ones(16, 256).to(E4M3)
    b = torch.ones(48, 256).to(E4M3)
    one = torch.tensor(1.0)
    with mmaemu.emulate(fallback="native", profile="hopper-te"):  # 16 x 48 x 256: no evidence at 32 MiB
        with pytest.raises(mmaemu.SplitKUnknownError):
            torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16)
    with mmaemu.emulate(splitk=1) as log:
        got = torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16)
    assert_bitwise_equal(got, mmaemu.scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16, splitk=1))
    assert log.served == {(16, 48, 256): 1}


@pytest.mark.skipif(not hasattr(torch, "_scaled_mm_v2"), reason="torch without _scaled_mm_v2")
def test_the_public_scaled_mm_is_served_with_tensor_wise_scales(operands: tuple[torch.Tensor, ...]) -> None:
    """old code refused torch.nn.functional.scaled_mm (torch._scaled_mm_v2) outright."""
    a, b, sa, sb = operands
    F = torch.nn.functional
    tensorwise = F.ScalingType.TensorWise
    with mmaemu.emulate() as log:
        got = F.scaled_mm(a, b.t(), sa, tensorwise, sb, tensorwise, output_dtype=torch.bfloat16, use_fast_accum=True)
        as_lists = torch._scaled_mm_v2(a, b.t(), [sa], [0], [], [sb], [0], [], None, torch.bfloat16, [], True)
        with pytest.warns(mmaemu.UnrecordedKernelWarning):
            row_wise = F.scaled_mm(a, b.t(), torch.full((M, 1), 1 / 64), F.ScalingType.RowWise,
                                   torch.full((1, N), 1 / 32), F.ScalingType.RowWise)
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="BlockWise1x128"):
            F.scaled_mm(a, b.t(), torch.ones(M, K // 128), F.ScalingType.BlockWise1x128, torch.ones(N, K // 128),
                        F.ScalingType.BlockWise1x128)
    assert_bitwise_equal(got, _expected(a, b, sa, sb))
    assert_bitwise_equal(as_lists, got)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnrecordedKernelWarning)
        assert_bitwise_equal(row_wise, mmaemu.scaled_mm(a, b.t(), torch.full((M, 1), 1 / 64), torch.full((1, N), 1 / 32),
                                                        out_dtype=torch.bfloat16))
    assert log.served == {(M, N, K): 3} and log.native_calls == 0
    assert not bitwise_diff(got, F.scaled_mm(a, b.t(), sa, tensorwise, sb, tensorwise, output_dtype=torch.bfloat16,
                                            use_fast_accum=True)).equal  # the native CPU result differs


def test_other_threads_are_not_affected(operands: tuple[torch.Tensor, ...]) -> None:
    """torch keeps dispatch modes per thread: only the entering thread is emulated (documented)."""
    a, b, sa, sb = operands
    results: dict[str, torch.Tensor] = {}

    def worker() -> None:
        results["thread"] = _native(a, b, sa, sb)

    with mmaemu.emulate() as log:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        results["main"] = _native(a, b, sa, sb)
    assert_bitwise_equal(results["thread"], _native(a, b, sa, sb))
    assert_bitwise_equal(results["main"], _expected(a, b, sa, sb))
    assert log.served_calls == 1


def test_nested_blocks_use_the_innermost_profile(operands: tuple[torch.Tensor, ...]) -> None:
    a, b, sa, sb = operands
    with mmaemu.emulate(profile="hopper") as outer:
        with mmaemu.emulate(profile="ada") as inner:
            got_inner = _native(a, b, sa, sb)
        got_outer = _native(a, b, sa, sb)
    assert_bitwise_equal(got_inner, _expected(a, b, sa, sb, profile="ada"))
    assert_bitwise_equal(got_outer, _expected(a, b, sa, sb, profile="hopper"))
    assert inner.served_calls == 1 and outer.served_calls == 1


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        mmaemu.emulate(profile="h100")
    with pytest.raises(ValueError):
        mmaemu.emulate(backend="gpu")
    with pytest.raises(ValueError):
        mmaemu.emulate(splitk="never")
    with pytest.raises(ValueError):
        mmaemu.emulate(fallback="ignore")
    assert "hopper-te" in repr(mmaemu.emulate(profile="hopper-te"))


def _unservable(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A call mmaemu refuses (a bias with an FP8 output): raised, or run natively under fallback="native"."""
    one = torch.tensor(1.0)
    return torch._scaled_mm(a, b.t(), one, one, torch.zeros(N, dtype=torch.bfloat16), out_dtype=torch.float8_e4m3fn)


@pytest.mark.parametrize("outer_fallback", ["raise", "native"])
def test_nested_native_fallback_bypasses_the_outer_block(operands: tuple[torch.Tensor, ...],
                                                         outer_fallback: str) -> None:
    """Old code: the inner block's native run went through the outer mode: an outer fallback="raise" raised,
    an outer fallback="native" counted the same call a second time."""
    a, b, _, _ = operands
    with mmaemu.emulate(fallback=outer_fallback) as outer:
        with mmaemu.emulate(fallback="native") as inner:
            got = _unservable(a, b)
    assert_bitwise_equal(got, _unservable(a, b))
    assert inner.native == {(M, N, K): 1} and inner.served_calls == 0
    assert outer.native_calls == 0 and outer.served_calls == 0 and not outer.reasons


def test_an_inner_experimental_block_runs_natively_what_it_cannot_serve(operands: tuple[torch.Tensor, ...]) -> None:
    """Old code: the inner (experimental) block counted the call as native while the outer block emulated it
    (the result carried the outer profile's bits); the innermost block decides alone."""
    a, b, sa, sb = operands
    slow = {"out_dtype": torch.bfloat16, "use_fast_accum": False}  # not characterised for b200_mma_sync
    native = torch._scaled_mm(a, b.t(), sa, sb, **slow)  # type: ignore[arg-type]
    with mmaemu.emulate(profile="hopper") as outer:
        with pytest.warns(mmaemu.ExperimentalPresetWarning):
            inner_block = mmaemu.emulate(profile="b200-mma-sync-experimental", splitk=1, fallback="native")
        with inner_block as inner:
            with pytest.warns(mmaemu.ExperimentalPresetWarning):  # the profile warns, then refuses: native
                got = torch._scaled_mm(a, b.t(), sa, sb, **slow)  # type: ignore[arg-type]
            with pytest.warns(mmaemu.ExperimentalPresetWarning):
                fast = _native(a, b, sa, sb)  # served by the inner block, warned, not native
    assert_bitwise_equal(got, native)
    assert not bitwise_diff(native, mmaemu.scaled_mm(a, b.t(), sa, sb, **slow)).equal  # type: ignore[arg-type]
    assert inner.native == {(M, N, K): 1} and inner.served == {(M, N, K): 1}
    assert outer.served_calls == 0 and outer.native_calls == 0
    with pytest.warns(mmaemu.ExperimentalPresetWarning):
        assert_bitwise_equal(fast, _expected(a, b, sa, sb, profile="b200-mma-sync-experimental", splitk=1))


def test_an_exception_in_a_nested_block_restores_the_outer_one(operands: tuple[torch.Tensor, ...]) -> None:
    a, b, sa, sb = operands
    with mmaemu.emulate(profile="ada") as outer:
        with pytest.raises(mmaemu.UnsupportedFeatureError):
            with mmaemu.emulate(profile="hopper"):
                _unservable(a, b)
        got = _native(a, b, sa, sb)
        with pytest.raises(KeyError):
            with mmaemu.emulate(fallback="native") as inner:
                _unservable(a, b)
                raise KeyError("boom")
        assert inner.native_calls == 1
        with pytest.raises(mmaemu.UnsupportedFeatureError):
            _unservable(a, b)  # the outer block decides again: it raises
    assert_bitwise_equal(got, _expected(a, b, sa, sb, profile="ada"))
    assert outer.served == {(M, N, K): 1} and outer.native_calls == 0
