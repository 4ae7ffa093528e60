"""Hostile biases and inputs that require grad, at every entry point of a ``_scaled_mm`` call.

The bias: torch 2.7.1 checks only that it has N elements and hands cuBLASLt its data pointer, and
cuBLASLt reads N packed elements from there (mmaemu._checks, [Note: bias memory]). The expected result
of a biased call is therefore computed here from the bias's storage bytes, independently of mmaemu's
reading: the call with the N elements at the data pointer as a fresh contiguous bias. A bias whose N
elements leave its storage, or whose data pointer is not 16-byte aligned, is refused before anything is
computed, and ``explain``, ``emulate()`` and ``scaled_mm_v2`` say the same as ``scaled_mm``.

Autograd: any tensor argument that requires grad, with grad mode on, is refused by every entry point
(empty calls included); with grad mode off the same call gives the same bits as without grad.
"""

from __future__ import annotations

import random
import warnings
from typing import Any, Callable

import numpy as np
import pytest
import torch

import mmaemu
from mmaemu import _call as call, ops
from mmaemu.testing import assert_bitwise_equal

E4 = torch.float8_e4m3fn
RR = mmaemu.ReferenceRejectsError
UF = mmaemu.UnsupportedFeatureError
N = 32
_NUMPY = {torch.bfloat16: np.uint16, torch.float16: np.uint16}


def operands(m: int = 16, k: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    a = (torch.randn(m, k, generator=gen) * 8).to(E4)
    b = (torch.randn(N, k, generator=gen) * 8).to(E4)
    return a, b.t()


def dense_read(bias: torch.Tensor) -> torch.Tensor:
    """The N elements at the bias's data pointer, from its storage bytes (numpy, not torch's views)."""
    raw = np.frombuffer(bytes(bias.untyped_storage()), dtype=_NUMPY[bias.dtype])
    start = bias.storage_offset()
    return torch.from_numpy(raw[start:start + N].copy()).view(bias.dtype)


def expected_refusal(bias: torch.Tensor) -> tuple[type[Exception], str] | None:
    """What the contract says of this bias: torch's size check, then mmaemu's two refusals, else None."""
    if bias.numel() != N:
        return RR, f"Bias must be size {N} but got {bias.numel()}"
    if (bias.storage_offset() + N) * bias.element_size() > bias.untyped_storage().nbytes():
        return UF, "beyond"
    if bias.storage_offset() * bias.element_size() % 16:
        return UF, "16-byte"
    return None


def random_bias(rng: random.Random, dtype: torch.dtype) -> torch.Tensor:
    """A bias of N elements (mostly) in a hostile layout: shapes, steps, offsets, expansions, transposes."""
    kind = rng.choice(["flat", "2d", "step", "offset", "expand", "transpose", "wrong-size", "narrow-storage"])
    size = N * rng.randint(1, 4) + rng.randint(0, 40)
    values = torch.randn(size, generator=torch.Generator().manual_seed(rng.randint(0, 10**6))) * 100
    base = values.to(dtype)
    offset = rng.choice([0, 1, 3, 8, 16, 24])
    if kind == "flat":
        pool = base[offset:]
        return pool[:N] if pool.numel() >= N else base[:0]
    if kind == "2d":
        rows = rng.choice([1, 2, 4, 8, N])
        return base[offset:offset + N].reshape(rows, N // rows) if base.numel() >= offset + N else base[:N].reshape(1, N)
    if kind == "step":
        step = rng.randint(2, 4)
        pool = base[offset::step]
        return pool[:N]
    if kind == "offset":
        return base[offset:offset + N]
    if kind == "expand":
        width = rng.choice([1, 2, 4, 8])
        return base[offset:offset + width].expand(N // width, width)
    if kind == "transpose":
        rows = rng.choice([2, 4, 8])
        return base[offset:offset + N].reshape(rows, N // rows).t() if base.numel() >= offset + N else base[:N]
    if kind == "wrong-size":
        return base[:N + rng.choice([-1, 1, N])]
    # narrow-storage: the bias's storage holds fewer than N elements past its offset
    small = torch.randn(rng.randint(1, N - 1)).to(dtype)
    return small.expand(N // small.numel() + 1, small.numel()).flatten()[:N] if rng.random() < 0.2 else \
        small[:1].expand(N)


def _entry_points(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> dict[str, Callable[..., Any]]:
    one = torch.tensor(1.0)
    kw: dict[str, Any] = dict(out_dtype=out_dtype, use_fast_accum=True, splitk=1)

    def emulated(bias: torch.Tensor | None) -> Any:
        with mmaemu.emulate(profile="hopper", splitk=1):
            return torch._scaled_mm(a, b, one, one, bias=bias, out_dtype=out_dtype, use_fast_accum=True)

    return {
        "scaled_mm": lambda bias: mmaemu.scaled_mm(a, b, one, one, bias, **kw),
        "emulate": emulated,
        "scaled_mm_v2": lambda bias: mmaemu.scaled_mm_v2(a, b, one, 0, one, 0, bias=bias, output_dtype=out_dtype,
                                                         use_fast_accum=True, splitk=1),
        "operator": lambda bias: ops.scaled_mm(a, b, one, one, bias, out_dtype=out_dtype, use_fast_accum=True,
                                               splitk=1),
    }


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the test decides
        return exc


CASES = 60


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_random_bias_layouts_are_read_as_cublaslt_reads_them(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(f"bias-{dtype}")
    a, b = operands()
    entries = _entry_points(a, b, dtype)
    one = torch.tensor(1.0)
    counts = {"accepted": 0, "refused": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedEpilogueWarning)
        for case in range(CASES):
            bias = random_bias(rng, dtype)
            refusal = expected_refusal(bias)
            plan = mmaemu.explain(a, b, one, one, bias, out_dtype=dtype, use_fast_accum=True, splitk=1)
            if refusal is None:
                want = mmaemu.scaled_mm(a, b, one, one, dense_read(bias), out_dtype=dtype, use_fast_accum=True,
                                        splitk=1)
                assert plan.validation == "ok", (case, tuple(bias.shape), bias.stride(), plan.validation)
                for name, entry in entries.items():
                    assert_bitwise_equal(entry(bias), want)
                counts["accepted"] += 1
                continue
            error, pattern = refusal
            # refused before anything is computed
            monkeypatch.setattr(call, "_run", lambda *args: pytest.fail("computed before the refusal"))
            for name, entry in entries.items():
                got = _outcome(lambda: entry(bias))
                assert isinstance(got, error) and pattern in str(got), (case, name, tuple(bias.shape), bias.stride(),
                                                                        bias.storage_offset(), got)
                if name == "scaled_mm":
                    assert plan.validation == (type(got).__name__, str(got))
            monkeypatch.undo()
            counts["refused"] += 1
    assert counts["accepted"] >= 10 and counts["refused"] >= 10, counts


def _one_storage(m: int) -> torch.Tensor:
    """bf16 storage for a bias and an out: 0, 1, 2, ... in its first N elements, room for an [m, N] out after."""
    storage = torch.zeros(2 * N + m * N + 64, dtype=torch.bfloat16)
    storage[:N] = torch.arange(N, dtype=torch.bfloat16)
    return storage


def test_an_out_over_the_memory_cublaslt_reads_as_bias_is_refused() -> None:
    """The bias cuBLASLt reads is the N elements at its data pointer, not its logical elements: an out written
    over that memory is refused even where it misses the bias's own elements (an expanded scalar bias reads
    storage[0:N]; out starts at storage[8]); an out that misses the memory read is served, even where it
    overlaps elements of a strided bias the GPU does not read (bias storage[0:2N:2] reads storage[0:N])."""
    a, b = operands()
    one = torch.tensor(1.0)
    storage = _one_storage(16)
    out = storage[8:8 + 16 * N].view(16, N)
    before = out.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedEpilogueWarning)
        with pytest.raises(RuntimeError, match="out shares memory with bias"):
            mmaemu.scaled_mm(a, b, one, one, storage[:1].expand(N), out_dtype=torch.bfloat16, splitk=1, out=out)
        assert_bitwise_equal(out, before)
        storage = _one_storage(16)
        bias = storage[:2 * N - 1:2]
        out = storage[N + 8:N + 8 + 16 * N].view(16, N)
        want = mmaemu.scaled_mm(a, b, one, one, storage[:N].clone(), out_dtype=torch.bfloat16, splitk=1)
        got = mmaemu.scaled_mm(a, b, one, one, bias, out_dtype=torch.bfloat16, splitk=1, out=out)
    assert got is out
    assert_bitwise_equal(out, want)


def test_emulate_with_native_fallback_serves_a_1xn_bias() -> None:
    """torch 2.7.1 takes a [1, N] bias (N elements): emulate() serves it instead of falling back."""
    a, b = operands()
    one = torch.tensor(1.0)
    bias = (torch.arange(N, dtype=torch.float32) * 0.25).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedEpilogueWarning)
        want = mmaemu.scaled_mm(a, b, one, one, bias, out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1)
        with mmaemu.emulate(profile="hopper", splitk=1, fallback="native") as log:
            got = torch._scaled_mm(a, b, one, one, bias=bias[None], out_dtype=torch.bfloat16, use_fast_accum=True)
    assert_bitwise_equal(got, want)
    assert sum(log.served.values()) == 1 and not log.native


# ---- inputs that require grad ---------------------------------------------------------------------

INPUTS = ("mat1", "mat2", "scale_a", "scale_b", "bias", "scale_result")


def _call_args(m: int, k: int) -> dict[str, torch.Tensor]:
    a, b = operands(m, k)
    return {"mat1": a, "mat2": b, "scale_a": torch.tensor(0.5), "scale_b": torch.tensor(2.0),
            "bias": torch.ones(N, dtype=torch.bfloat16), "scale_result": torch.tensor(1.0)}


def _run_entry(entry: str, args: dict[str, torch.Tensor]) -> Any:
    a, b, sa, sb, bias, sr = (args[name] for name in INPUTS)
    kw: dict[str, Any] = dict(out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1)
    if entry == "scaled_mm":
        return mmaemu.scaled_mm(a, b, sa, sb, bias, sr, **kw)
    if entry == "explain":
        plan = mmaemu.explain(a, b, sa, sb, bias, sr, **kw)
        if plan.validation != "ok":
            raise UF(plan.validation[1]) if plan.validation[0] == "UnsupportedFeatureError" else RuntimeError(plan)
        return None
    if entry == "operator":
        return ops.scaled_mm(a, b, sa, sb, bias, sr, **kw)
    if entry == "emulate":
        with mmaemu.emulate(profile="hopper", splitk=1):
            return torch._scaled_mm(a, b, sa, sb, bias=bias, scale_result=sr, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)
    if entry == "scaled_mm_v2":  # no scale_result in that API
        return mmaemu.scaled_mm_v2(a, b, sa, 0, sb, 0, bias=bias, output_dtype=torch.bfloat16, use_fast_accum=True,
                                   splitk=1)
    acc = mmaemu.accumulate(a.detach(), b.detach().t(), use_fast_accum=True)  # entry == "epilogue"
    return mmaemu.epilogue(acc, sa, sb, out_dtype=torch.bfloat16, scale_result=sr, bias=bias)


ENTRIES = ("scaled_mm", "explain", "operator", "emulate", "scaled_mm_v2", "epilogue")


@pytest.mark.parametrize("shape", [(16, 64), (0, 64), (16, 0)], ids=["call", "m-zero", "k-zero"])
@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("name", INPUTS)
def test_every_input_requiring_grad_is_refused_in_grad_mode(name: str, entry: str, shape: tuple[int, int]) -> None:
    if entry == "scaled_mm_v2" and name == "scale_result":
        pytest.skip("scaled_mm_v2 takes no scale_result")
    if entry == "epilogue" and name in ("mat1", "mat2"):
        pytest.skip("the epilogue takes the accumulator, not the operands")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedEpilogueWarning)
        with torch.no_grad():
            plain = _run_entry(entry, _call_args(*shape))
        args = _call_args(*shape)
        args[name] = args[name].clone().requires_grad_()
        with torch.enable_grad():
            refused = _outcome(lambda: _run_entry(entry, args))
        assert isinstance(refused, UF) and f"{name} require grad" in str(refused), (entry, name, refused)
        with torch.no_grad():
            served = _run_entry(entry, args)
    if plain is not None:
        assert_bitwise_equal(served, plain)
