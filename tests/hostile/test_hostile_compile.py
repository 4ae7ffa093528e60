"""Hostile uses of torch.compile around mmaemu.emulate(): every FP8 GEMM operator in one compiled graph, nested
blocks, other backends, graph breaks, another thread compiling while a block is active, a user's own Inductor
pass, an exception inside the block, and a graph node the block could not see."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import mmaemu
from mmaemu import _compile
from mmaemu.testing import assert_bitwise_equal

E4M3 = torch.float8_e4m3fn
M, N, K = 32, 64, 1024
needs_compile = pytest.mark.skipif(not _compile.COMPILES_UNDER_MODE,
                                   reason="this torch runs compiled code eagerly inside a block")
NATIVE_CPU = hasattr(torch.ops.aten, "_scaled_mm_v2")  # torch 2.7.1 has no CPU kernel for _scaled_mm


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _operands(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(M, K, generator=g) * 40).clamp(-448, 448).to(E4M3)
    b = (torch.randn(N, K, generator=g) * 40).clamp(-448, 448).to(E4M3)
    return a, b, torch.tensor(1 / 64), torch.tensor(3 / 1024)


def _gemm(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    return torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)


def _three_gemms(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
                 rows: torch.Tensor, cols: torch.Tensor) -> tuple[torch.Tensor, ...]:
    tensor_wise = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.float32)
    row_wise = torch._scaled_mm(a, b.t(), rows, cols, out_dtype=torch.bfloat16)
    v2 = F.scaled_mm(a, b.t(), sa, F.ScalingType.TensorWise, sb, F.ScalingType.TensorWise,
                     output_dtype=torch.bfloat16)
    return tensor_wise, row_wise, v2


@needs_compile
@pytest.mark.skipif(not hasattr(F, "scaled_mm"), reason="torch.nn.functional.scaled_mm arrived after torch 2.7")
def test_every_fp8_gemm_operator_in_one_compiled_graph_equals_eager_emulation() -> None:
    """aten._scaled_mm (tensor-wise and row-wise) and aten._scaled_mm_v2 (F.scaled_mm) in one fullgraph:
    each node is rewritten (Inductor has lowerings for both) and served as in eager mode."""
    a, b, sa, sb = _operands(1)
    g = torch.Generator().manual_seed(2)
    rows, cols = torch.rand(M, 1, generator=g) + 0.5, torch.rand(1, N, generator=g) + 0.5
    compiled = torch.compile(_three_gemms, fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)  # row-wise kernels are unrecorded
        with mmaemu.emulate(profile="hopper") as log:
            got = compiled(a, b, sa, sb, rows, cols)
        with mmaemu.emulate(profile="hopper") as eager_log:
            want = _three_gemms(a, b, sa, sb, rows, cols)
    assert log.served == eager_log.served == {(M, N, K): 3}
    for x, y in zip(got, want):
        assert_bitwise_equal(x, y)


@needs_compile
def test_nested_blocks_the_innermost_serves_compiled_code() -> None:
    a, b, sa, sb = _operands()
    compiled = torch.compile(_gemm, fullgraph=True)
    with mmaemu.emulate(profile="hopper") as outer:
        with mmaemu.emulate(profile="ada") as inner:
            got = compiled(a, b, sa, sb)
        again = compiled(a, b, sa, sb)
    assert inner.served == {(M, N, K): 1} and outer.served == {(M, N, K): 1}
    assert_bitwise_equal(got, mmaemu.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True,
                                               profile="ada"))
    assert_bitwise_equal(again, mmaemu.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True,
                                                 profile="hopper"))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_backends_that_run_the_graph_through_the_dispatcher_are_served(backend: str) -> None:
    a, b, sa, sb = _operands()
    compiled = torch.compile(_gemm, backend=backend, fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)  # torch 2.7.1: runs eagerly
        with mmaemu.emulate(profile="ada") as log:
            got = compiled(a, b, sa, sb)
    assert log.served == {(M, N, K): 1}
    assert_bitwise_equal(got, mmaemu.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True,
                                               profile="ada"))


def _broken(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    first = _gemm(a, b, sa, sb)
    torch._dynamo.graph_break()
    return first + _gemm(a, b, sa * 2, sb)


def test_a_graph_break_between_two_gemms_serves_both() -> None:
    a, b, sa, sb = _operands()
    compiled = torch.compile(_broken)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
        with mmaemu.emulate(profile="hopper") as log:
            got = compiled(a, b, sa, sb)
        with mmaemu.emulate(profile="hopper"):
            want = _broken(a, b, sa, sb)
    assert log.served == {(M, N, K): 2}
    assert_bitwise_equal(got, want)


@needs_compile
@pytest.mark.skipif(not NATIVE_CPU, reason="torch 2.7.1 has no CPU kernel for torch._scaled_mm")
def test_another_thread_compiling_while_a_block_is_active_gets_torchs_kernel() -> None:
    """The rewrite is installed process-wide while a block is active: a thread outside any block compiles the
    mirror, and its kernel outside a block is torch's."""
    a, b, sa, sb = _operands()
    native = _gemm(a, b, sa, sb)
    entered, done = threading.Event(), threading.Event()
    results: list[Any] = []

    def block() -> None:
        with mmaemu.emulate():
            entered.set()
            done.wait(timeout=300)

    def other() -> None:
        entered.wait(timeout=300)
        try:
            results.append(torch.compile(_gemm, fullgraph=True)(a, b, sa, sb))
        except BaseException as exc:  # noqa: BLE001 - reported below
            results.append(exc)
        done.set()

    threads = [threading.Thread(target=block), threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(results) == 1 and isinstance(results[0], torch.Tensor), results
    assert_bitwise_equal(results[0], native)
    assert torch._inductor.config.post_grad_custom_pre_pass is None  # removed when the last block left


@needs_compile
@pytest.mark.skipif(not NATIVE_CPU, reason="torch 2.7.1 has no CPU kernel for torch._scaled_mm")
def test_code_compiled_inside_a_block_is_not_reused_outside() -> None:
    """Compiled first inside a block (the mirror in the graph, Inductor's caches keyed by the pass), then called
    outside: dynamo recompiles without the pass, and the result is torch's kernel, not an emulated one."""
    a, b, sa, sb = _operands()
    compiled = torch.compile(_gemm, fullgraph=True)
    with mmaemu.emulate(profile="hopper") as log:
        inside = compiled(a, b, sa, sb)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    outside = compiled(a, b, sa, sb)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs + 1
    assert log.served_calls == 1
    assert_bitwise_equal(outside, _gemm(a, b, sa, sb))
    assert_bitwise_equal(inside, mmaemu.scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True,
                                                  profile="hopper"))


class _UserPass:
    """A user's own post-grad pass: records the FP8 GEMM targets it sees."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.seen += [n.target for n in graph.nodes if "scaled_mm" in str(n.target)]

    def uuid(self) -> str:
        return "a user's pass"


@needs_compile
def test_a_users_pass_is_kept_runs_after_the_rewrite_and_is_restored() -> None:
    from torch._inductor import config

    user = _UserPass()
    a, b, sa, sb = _operands()
    with config.patch(post_grad_custom_pre_pass=user):
        with pytest.raises(ZeroDivisionError), mmaemu.emulate() as log:
            torch.compile(_gemm, fullgraph=True)(a, b, sa, sb)
            1 / 0  # noqa: B018 - an exception leaves the block
        assert config.post_grad_custom_pre_pass is user
    assert config.post_grad_custom_pre_pass is None
    assert user.seen == [torch.ops.mmaemu.compiled_scaled_mm.default] and log.served_calls == 1
    assert torch.overrides._get_current_function_mode_stack() == []  # the guard mode left with the block
    assert not _compile._BLOCKS.stack


def test_the_rewrite_refuses_an_fp8_gemm_it_cannot_mirror() -> None:
    """aten._scaled_mm.out has no mirror (functionalization removes it before the pass): a compile error,
    never a compiled call the block cannot see."""
    graph = torch.fx.Graph()
    a, b, sa, sb, out = (graph.placeholder(n) for n in ("a", "b", "sa", "sb", "out"))
    graph.call_function(torch.ops.aten._scaled_mm.default, (a, b, sa, sb))
    graph.call_function(torch.ops.aten._scaled_mm.out, (a, b, sa, sb), {"out": out})
    with pytest.raises(mmaemu.UnsupportedFeatureError, match=r"_scaled_mm\.out .*no dispatcher-visible form"):
        _compile.rewrite(graph)
    targets = [n.target for n in graph.nodes if n.op == "call_function"]
    assert targets[0] is torch.ops.mmaemu.compiled_scaled_mm.default  # the .default node before it: rewritten


@pytest.mark.skipif(not NATIVE_CPU, reason="torch 2.7.1 has no CPU kernel for torch._scaled_mm")
def test_the_mirror_outside_a_block_is_torchs_kernel_and_its_fake_is_torchs_meta() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    a, b, sa, sb = _operands()
    mirror = torch.ops.mmaemu.compiled_scaled_mm.default
    assert_bitwise_equal(mirror(a, b.t(), sa, sb, out_dtype=torch.bfloat16),
                         torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16))
    with FakeTensorMode() as fake:
        y = mirror(fake.from_tensor(a), fake.from_tensor(b).t(), fake.from_tensor(sa), fake.from_tensor(sb), None,
                   None, torch.float16)
    assert y.shape == (M, N) and y.dtype == torch.float16


def test_eager_and_disabled_calls_in_a_block_say_nothing_about_compilation() -> None:
    """The skipped-compile warning (torch < 2.9) is for compiled functions only: dynamo's callback is unset in
    eager code and inside torch.compiler.disable."""
    a, b, sa, sb = _operands()
    with warnings.catch_warnings():
        warnings.simplefilter("error", mmaemu.MmaemuWarning)
        with mmaemu.emulate(profile="ada") as log:
            _gemm(a, b, sa, sb)
            torch.compiler.disable(_gemm)(a, b, sa, sb)
    assert log.served == {(M, N, K): 2}
