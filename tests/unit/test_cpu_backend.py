"""The compiled CPU backend's own pieces (its exactness suite is shared with every backend)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mmaemu.formats import EXPONENT_OF_ZERO, Fp8Format, decode_fp8

cpu = pytest.importorskip("mmaemu.backends._cpu")
from mmaemu.backends import _cpu_scratch  # noqa: E402
if not cpu.available()[0]:  # pragma: no cover
    pytest.skip("numba is not installed", allow_module_level=True)


@pytest.mark.parametrize("fmt", list(Fp8Format))
def test_bit_arithmetic_decode_agrees_with_the_format_decoder_on_every_code(fmt: Fp8Format) -> None:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for shape in ((1, 256), (16, 16), (256, 1)):  # rows are decoded in parallel: any row length
        values, exponents, any_inf = cpu._decode(codes.reshape(shape).contiguous().numpy(), fmt, "test")
        want = decode_fp8(codes.view(fmt.dtype))
        assert np.array_equal(values.reshape(-1).view(np.int32), want.value.numpy().view(np.int32))
        want_exp = np.where(want.exponent.numpy() == EXPONENT_OF_ZERO, cpu._ZERO8, want.exponent.numpy())
        assert np.array_equal(exponents.reshape(-1).astype(np.int32), want_exp)
        assert np.array_equal(any_inf, want.is_inf.reshape(shape).any(1).numpy())


def test_exponent_sums_keep_zero_operands_below_every_real_product() -> None:
    """The int8 layout's claim: real sums lie in [-28, 30]; sums with a zero lie in [-128, -49]."""
    exps = [cpu._decode(torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(1, -1).numpy(), f, "test")[1].copy()
            for f in Fp8Format]
    real = np.concatenate([e[e != cpu._ZERO8] for e in exps]).astype(np.int32)
    assert real.min() + real.min() == -28 and real.max() + real.max() == 30
    assert cpu._ZERO8 + real.max() < cpu._NO_PRODUCT_BELOW < real.min() + real.min()
    assert cpu._ZERO8 + cpu._ZERO8 >= -128


@pytest.mark.parametrize(("m", "n", "threads"), [(64, 5760, 2), (2048, 5760, 16), (1, 1, 2), (3, 100000, 64)])
def test_tiles_cover_the_output_and_feed_every_thread_where_they_can(m: int, n: int, threads: int) -> None:
    m_tile, n_tile = _cpu_scratch.tiles(m, n, threads)
    assert 4 <= m_tile <= 32 and 256 <= n_tile <= 1024
    tasks = -(-m // m_tile) * -(-n // n_tile)
    assert tasks >= 4 * threads or (m_tile, n_tile) == (4, 256)


def test_scratch_buffers_are_reused_per_thread_and_released() -> None:
    first = _cpu_scratch.buffer("test.reuse", (3, 5), np.float32)
    again = _cpu_scratch.buffer("test.reuse", (5, 3), np.float32)
    assert np.shares_memory(first, again)  # no new allocation for the same or a smaller size
    bigger = _cpu_scratch.buffer("test.reuse", (100, 5), np.float32)
    assert bigger.shape == (100, 5) and not np.shares_memory(first, bigger)
    huge = _cpu_scratch.SCRATCH_LIMIT_BYTES // 4 + 1
    assert not np.shares_memory(_cpu_scratch.buffer("test.huge", (huge,), np.float32), _cpu_scratch.buffer("test.huge", (huge,), np.float32))
    _cpu_scratch.release_scratch()
    assert not np.shares_memory(bigger, _cpu_scratch.buffer("test.reuse", (100, 5), np.float32))


def test_consecutive_calls_do_not_see_each_others_operands() -> None:
    """Reused buffers hold the previous call's operands: every call must overwrite what it reads."""
    import mmaemu

    gen = torch.Generator().manual_seed(3)
    big = [torch.randn(40, 300, generator=gen).to(torch.float8_e4m3fn) for _ in range(2)]
    small = [torch.randn(7, 100, generator=gen).to(torch.float8_e4m3fn) for _ in range(2)]
    for a, b in (big, small, big):
        got = mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1, backend="cpu")
        want = mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1, backend="reference")
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_concurrent_calls_from_several_threads() -> None:
    """Each thread has its own operand buffers; launches are serialised where numba needs it."""
    import threading

    import mmaemu

    gen = torch.Generator().manual_seed(5)
    cases = [(torch.randn(24 + i, 160, generator=gen).to(torch.float8_e4m3fn),
              torch.randn(300 - 7 * i, 160, generator=gen).to(torch.float8_e4m3fn)) for i in range(4)]
    want = [mmaemu.accumulate(a, b, use_fast_accum=False, splitk=1, backend="reference") for a, b in cases]
    failures: list[str] = []

    def work(i: int) -> None:
        a, b = cases[i]
        for _ in range(10):
            got = mmaemu.accumulate(a, b, use_fast_accum=False, splitk=1, backend="cpu")
            if not torch.equal(got.view(torch.int32), want[i].view(torch.int32)):
                failures.append(f"thread {i}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_launches_are_serialised_under_the_workqueue_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib

    monkeypatch.setattr(cpu.numba, "threading_layer", lambda: "workqueue")
    assert _cpu_scratch.launch_guard() is _cpu_scratch._WORKQUEUE_LOCK
    monkeypatch.setattr(cpu.numba, "threading_layer", lambda: "omp")
    assert isinstance(_cpu_scratch.launch_guard(), contextlib.nullcontext)


@pytest.mark.parametrize("split", [1, (3, "contiguous"), (4, "pairwise")])
@pytest.mark.parametrize("fast", [True, False])
def test_sparse_inf_codes_are_recomputed_exactly(fast: bool, split: int | tuple[int, str]) -> None:
    """A few Inf codes: their rows and columns come from the reference backend's IEEE rules, the
    rest from the kernel; all of it equals the reference backend's whole product."""
    import warnings

    import mmaemu

    gen = torch.Generator().manual_seed(11)
    a = (torch.randn(40, 300, generator=gen) * 8).to(torch.float8_e5m2)
    b = (torch.randn(70, 300, generator=gen) * 8).to(torch.float8_e5m2)
    codes_a, codes_b = a.view(torch.uint8), b.view(torch.uint8)
    codes_a[3, 7] = 0x7C      # +Inf in row 3 of a
    codes_a[9, 250] = 0xFC    # -Inf in row 9 of a
    codes_b[5, 7] = 0xFC      # -Inf times row 3's +Inf at (3, 5): -Inf
    codes_b[60, 100] = 0x7C   # +Inf in row 60 of b
    codes_b[61, 0:300:50] = 0x00  # zeros elsewhere
    codes_a[20, 100] = 0x00   # 0 * Inf at (20, 60): NaN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
        got = mmaemu.accumulate(a, b, use_fast_accum=fast, splitk=split, backend="cpu")
        want = mmaemu.accumulate(a, b, use_fast_accum=fast, splitk=split, backend="reference")
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    assert bool(torch.isinf(got[3, 0])) and float(got[3, 5]) == float("-inf")
    assert bool(torch.isnan(got[20, 60])) and bool(torch.isfinite(got[0, 0]))
