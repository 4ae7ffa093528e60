"""Hostile use of mmaemu.emulate(): nesting orders, exceptions in nested blocks, threads, fake modes, every
third-party operator of the table, and scaled_mm_v2's recipe pairs against torch 2.13's own kernel.

What must hold: the innermost block decides each call and counts it once; a native run reaches torch's kernel
past every outer block and leaves no state behind (also when it raises, also in other threads); nothing runs
natively in silence; torch's rejections come before "not modelled".
"""

from __future__ import annotations

import itertools
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from foreign_stand_ins import define
from torch._subclasses.fake_tensor import FakeTensorMode

import mmaemu
from mmaemu import intercept
from mmaemu._foreign_ops import Layout
from mmaemu.testing import assert_bitwise_equal

E4 = torch.float8_e4m3fn
M, N, K = 32, 64, 1024  # rows of every table (S = 1)
ONE = torch.tensor(1.0)


def _operands() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    return (torch.randn(M, K, generator=g) * 16).to(E4), (torch.randn(N, K, generator=g) * 16).to(E4)


def _served(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch._scaled_mm(a, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True)


def _unservable(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A call mmaemu refuses: a bias with an FP8 output (row-wise scales, refused here before, are served now)."""
    return torch._scaled_mm(a, w.t(), ONE, ONE, torch.zeros(N, dtype=torch.bfloat16), out_dtype=E4)


def _foreign(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return define("mslk::f8f8bf16_rowwise")(a, w, torch.ones(M, 1), torch.ones(N, 1))


CALLS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "served": _served, "unservable": _unservable, "foreign": _foreign}


@pytest.mark.parametrize("fallbacks", list(itertools.product(["raise", "native"], repeat=3)))
@pytest.mark.parametrize("call", sorted(CALLS))
def test_three_nested_blocks_every_fallback_order(call: str, fallbacks: tuple[str, str, str]) -> None:
    """Only the innermost block counts the call: served by its profile, or its fallback decides."""
    a, w = _operands()
    profiles = ("ada", "hopper-te", "hopper")
    logs = []
    with mmaemu.emulate(profiles[0], fallback=fallbacks[0]) as outer, \
            mmaemu.emulate(profiles[1], fallback=fallbacks[1]) as middle, \
            mmaemu.emulate(profiles[2], fallback=fallbacks[2]) as inner:
        logs = [outer, middle, inner]
        if call != "served" and fallbacks[2] == "raise":
            with pytest.raises(mmaemu.UnsupportedFeatureError):
                CALLS[call](a, w)
            got = None
        else:
            got = CALLS[call](a, w)
    assert intercept._NATIVE_RUNS.depth == 0
    assert all(log.served_calls == log.native_calls == 0 for log in logs[:2]), logs
    if call == "served":
        assert got is not None and logs[2].served == {(M, N, K): 1}
        assert_bitwise_equal(got, mmaemu.scaled_mm(a, w.t(), ONE, ONE, out_dtype=torch.bfloat16,
                                                   use_fast_accum=True, profile="hopper"))
    elif fallbacks[2] == "native":
        assert got is not None and logs[2].native == {(M, N, K): 1} and logs[2].served_calls == 0
        assert_bitwise_equal(got, CALLS[call](a, w))
    else:
        assert logs[2].native_calls == 0 and logs[2].served_calls == 0


def test_a_native_run_that_raises_leaves_no_state() -> None:
    """torch's own kernel raising inside a native run (here: a shape the CPU kernel refuses) restores the count."""
    a, w = _operands()
    with mmaemu.emulate("ada", fallback="raise") as outer:
        with mmaemu.emulate(fallback="native") as inner:
            with pytest.raises(RuntimeError):
                _foreign(a, w[:, :512])  # K mismatch: the stand-in's matmul raises
        assert intercept._NATIVE_RUNS.depth == 0
        with pytest.raises(mmaemu.UnsupportedFeatureError):
            _unservable(a, w)  # the outer block decides again
        got = _served(a, w)
    assert inner.native_calls == 0 and outer.served == {(M, N, K): 1}
    assert_bitwise_equal(got, mmaemu.scaled_mm(a, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True,
                                               profile="ada"))


def test_a_native_run_in_one_thread_does_not_open_the_door_in_another() -> None:
    """The count of native runs is per thread: while thread A is inside a native run, thread B's block still
    serves and refuses."""
    a, w = _operands()
    inside, release = threading.Event(), threading.Event()
    op = define("vllm::padded_cutlass", ("qx", "weight"))  # generic stand-in; its kernel is replaced below
    library = torch.library.Library("vllm", "IMPL")  # noqa: TOR901 - destroyed below: the stand-in's kernel is back

    def blocking(qx: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        inside.set()
        assert release.wait(60)
        return (qx.float().sum() + weight.float().sum()).reshape(1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "Overriding a previously registered kernel"
        library.impl("padded_cutlass", blocking, "CPU", allow_override=True)
    results: dict[str, Any] = {}

    def thread_a() -> None:
        with mmaemu.emulate(fallback="native") as log:
            op(a, w)
        results["a"] = log

    worker = threading.Thread(target=thread_a)
    worker.start()
    try:
        assert inside.wait(60)
        with mmaemu.emulate() as log_b:
            results["served"] = _served(a, w)
            with pytest.raises(mmaemu.UnsupportedFeatureError):
                _unservable(a, w)
    finally:
        release.set()
        worker.join(60)
        library._destroy()
    assert results["a"].native == {(M, N, K): 1} and log_b.served == {(M, N, K): 1}
    assert_bitwise_equal(results["served"], mmaemu.scaled_mm(a, w.t(), ONE, ONE, out_dtype=torch.bfloat16,
                                                             use_fast_accum=True))


def test_four_threads_with_nested_blocks() -> None:
    a, w = _operands()
    want = mmaemu.scaled_mm(a, w.t(), ONE, ONE, out_dtype=torch.bfloat16, use_fast_accum=True, profile="ada")
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(3):
                with mmaemu.emulate(fallback="raise") as outer, mmaemu.emulate("ada", fallback="native") as inner:
                    assert_bitwise_equal(_served(a, w), want)
                    _unservable(a, w)
                    _foreign(a, w)
                assert outer.served_calls == outer.native_calls == 0
                assert inner.served_calls == 1 and inner.native_calls == 2
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors, errors


@pytest.mark.parametrize("order", ["emulate outside", "emulate inside"])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_fake_modes_in_both_orders(call: str, order: str) -> None:
    """On fake tensors every FP8 GEMM (served, unservable or foreign) is refused as a trace, or traced natively."""
    a, w = _operands()
    for fallback in ("raise", "native"):
        fake = FakeTensorMode(allow_non_fake_inputs=True)  # the calls' one-element scales stay real
        block = mmaemu.emulate(fallback=fallback)
        first, second = (block, fake) if order == "emulate outside" else (fake, block)
        with first as one, second as two:
            log = one if isinstance(one, intercept.EmulationLog) else two
            fa, fw = fake.from_tensor(a), fake.from_tensor(w)
            (fa + 0).float().relu()  # other operators run on fake tensors
            if fallback == "raise":
                with pytest.raises(mmaemu.UnsupportedFeatureError, match="fake, functional or meta"):
                    CALLS[call](fa, fw)
            else:
                got = CALLS[call](fa, fw)
                assert isinstance(got, torch.Tensor) and log.native == {(M, N, K): 1}
        assert log.served_calls == 0


def test_every_operator_of_the_table_on_fake_and_meta_tensors() -> None:
    a, w = _operands()
    checked = 0
    for name, row in intercept.FOREIGN_GEMMS.items():
        if row.library == "torchao":
            continue  # torchao registers these itself (test_torchao.py)
        op = define(name, (row.a or "a", row.b or "b"))
        if len(op._schema.arguments) != 2:
            continue  # a stand-in with its library's schema: test_foreign_ops.py
        b = w.t() if row.layout is Layout.KN else w
        with mmaemu.emulate() as log:
            with pytest.raises(mmaemu.UnsupportedFeatureError, match="fake, functional or meta"):
                op(a.to("meta"), b.to("meta"))
            with FakeTensorMode() as fake, pytest.raises(mmaemu.UnsupportedFeatureError):
                op(fake.from_tensor(a), fake.from_tensor(b))
        with mmaemu.emulate(fallback="native") as native:
            assert op(a.to("meta"), b.to("meta")).is_meta
        assert log.native_calls == 0 and native.native_calls == 1, name
        checked += 1
    assert checked >= 40, checked


# ---------------------------------------------------------------------------------------------------
# scaled_mm_v2: every small recipe pair and scale against torch 2.13's CPU kernel
# ---------------------------------------------------------------------------------------------------

F = torch.nn.functional
_M2, _N2, _K2 = 16, 48, 64
_RECIPES = [[], [0], [1], [2], [3], [4], [5], [0, 0], [2, 0]]
_CUDA_ONLY = {((4,), (5,)), ((5,), (4,)), ((4,), (4,)), ((3,), (3,)), ((2,), (2,)), ((2, 0), (2, 0))}


def _scales() -> dict[str, torch.Tensor]:
    return {"scalar": torch.tensor(0.5), "fp16 scalar": torch.tensor(0.5, dtype=torch.float16),
            "rows": torch.full((_M2, 1), 0.5), "cols": torch.full((1, _N2), 0.5), "1x1": torch.ones(1, 1),
            "two": torch.ones(2), "bf16 rows": torch.ones(_M2, 1, dtype=torch.bfloat16),
            "e8m0": torch.ones(4).to(torch.float8_e8m0fnu)}


def test_scaled_mm_v2_recipe_pairs_against_torchs_kernel() -> None:
    """For each pair of (recipes, scale) per operand: where torch 2.13's CPU kernel raises and its CUDA kernel
    table takes no such pair, mmaemu raises torch's exception; where the CPU kernel computes, mmaemu serves the
    tensor-wise and row-wise pairs. Pairs only CUDA's table takes (block-wise, MX,
    NVFP4) are not modelled: mmaemu must say so, not ReferenceRejects."""
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(_M2, _K2, generator=g) * 8).to(E4)
    b = (torch.randn(_N2, _K2, generator=g) * 8).to(E4).t()
    scales = _scales()
    counts = {"torch rejects": 0, "served": 0, "not modelled": 0}
    for ra, rb in itertools.product(_RECIPES, repeat=2):
        for (na, sa), (nb, sb) in itertools.product(scales.items(), repeat=2):
            list_a = [sa] if len(ra) < 2 else [sa, torch.tensor(1.0)]
            list_b = [sb] if len(rb) < 2 else [sb, torch.tensor(1.0)]
            theirs: BaseException | None = None
            try:
                torch._scaled_mm_v2(a, b, list_a, ra, [], list_b, rb, [], None, torch.bfloat16, [], False)
            except (ValueError, IndexError, RuntimeError) as exc:
                theirs = exc
            label = f"{ra} {na} x {rb} {nb}"
            try:
                mmaemu.scaled_mm_v2(a, b, list_a, ra, list_b, rb, splitk=1)
                ours: BaseException | None = None
            except (ValueError, IndexError, RuntimeError, mmaemu.MmaemuError) as exc:
                ours = exc
            if (tuple(ra), tuple(rb)) in _CUDA_ONLY and not isinstance(ours, mmaemu.ReferenceRejectsError):
                assert isinstance(ours, (mmaemu.UnsupportedFeatureError, mmaemu.ReferenceRejectsError)), label
                counts["not modelled"] += 1
                continue
            if theirs is None:
                assert ours is None or isinstance(ours, mmaemu.UnsupportedFeatureError), (label, ours)
                counts["served" if ours is None else "not modelled"] += 1
                continue
            if (tuple(ra), tuple(rb)) in _CUDA_ONLY:
                counts["torch rejects"] += 1  # CUDA takes the recipes, then rejects these scales' dtypes
                continue
            assert ours is not None and isinstance(ours, type(theirs)), (label, theirs, ours)
            if not str(theirs).startswith("Invalid scaling configuration."):
                assert str(ours) == str(theirs), label
            counts["torch rejects"] += 1
    assert counts["served"] >= 4 and counts["not modelled"] >= 4 and counts["torch rejects"] >= 4000, counts


def test_export_with_a_dynamic_batch_counts_an_unread_shape() -> None:
    """Symbolic sizes are not read for the log (reading them would specialise the trace): (-1, -1, -1)."""
    class Gemm(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return torch._scaled_mm(x, w.t(), torch.ones(()), torch.ones(()), out_dtype=torch.bfloat16)

    a, w = _operands()
    batch = torch.export.Dim("batch", min=16, max=4096)
    with mmaemu.emulate(fallback="native") as log:
        exported = torch.export.export(Gemm(), (a, w), dynamic_shapes={"x": {0: batch}, "w": None})
    assert log.native == {(-1, -1, -1): 1}
    assert "_scaled_mm" in str(exported.graph)
    assert exported.module()(a[:16], w).shape == (16, N)  # the batch stayed dynamic: nothing was specialised


def test_an_experimental_warning_turned_error_is_not_a_native_run() -> None:
    """With warnings as errors, an experimental profile's warning raises out of the call; it is not mistaken
    for a call mmaemu cannot serve (no native run, nothing counted), in the inner block or the outer one."""
    a, w = _operands()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
        inner_block = mmaemu.emulate("b200-mma-sync-experimental", splitk=1, fallback="native")
    with mmaemu.emulate(fallback="native") as outer, inner_block as inner:
        with warnings.catch_warnings():
            warnings.simplefilter("error", mmaemu.ExperimentalPresetWarning)
            with pytest.raises(mmaemu.ExperimentalPresetWarning):
                _served(a, w)
    assert inner.native_calls == inner.served_calls == 0 and outer.native_calls == outer.served_calls == 0


def test_fp8_tensors_inside_lists_are_seen() -> None:
    """Grouped operators take Tensor[]: an FP8 tensor in a list makes the call an FP8 GEMM."""
    from mmaemu._foreign_ops import has_fp8

    a, _ = _operands()
    assert has_fp8(([torch.ones(2), [a]],), {}) and has_fp8((), {"XQ": [a]})
    assert not has_fp8(([torch.ones(2, dtype=torch.int8)],), {"scale": torch.ones(1)})
