"""mmaemu.emulate() and third-party FP8 GEMM operators (mslk, FBGEMM, vLLM, sgl-kernel): refused, or native and counted.

These libraries are not installed here: each operator is defined by tests/foreign_stand_ins.py under its library's
qualified name and schema. emulate() matches the name when the call reaches it, so an operator registered after
``import mmaemu`` is matched. torchao's own operators, with torchao's real call sites, are in test_torchao.py.
"""

from __future__ import annotations

import pytest
import torch
from foreign_stand_ins import define

import mmaemu
from mmaemu._foreign_ops import Layout
from mmaemu.intercept import FOREIGN_GEMMS
from mmaemu.testing import assert_bitwise_equal

E4M3 = torch.float8_e4m3fn
M, N, K = 32, 64, 256


def _operands() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return ((torch.randn(M, K, generator=g) * 8).to(E4M3), (torch.randn(N, K, generator=g) * 8).to(E4M3))


def _calls() -> dict[str, tuple[str, object]]:
    """name -> (library, a call of the operator with real arguments)."""
    a, w = _operands()
    rows, cols = torch.ones(M, 1), torch.ones(1, N)
    return {
        "mslk::f8f8bf16_rowwise": ("mslk", lambda: define("mslk::f8f8bf16_rowwise")(a, w, rows, cols.t())),
        "mslk::f8f8bf16_blockwise": ("mslk", lambda: define("mslk::f8f8bf16_blockwise")(
            a, w, torch.ones(M // 128 + 1, K // 128), torch.ones(N // 128 + 1, K // 128))),
        "fbgemm::f8f8bf16_tensorwise": ("FBGEMM GenAI", lambda: define("fbgemm::f8f8bf16_tensorwise")(a, w, 0.5)),
        "fbgemm::f8f8bf16_cublas": ("FBGEMM GenAI", lambda: define("fbgemm::f8f8bf16_cublas")(a, w)),
        "sgl_kernel::fp8_scaled_mm": ("sgl-kernel", lambda: define("sgl_kernel::fp8_scaled_mm")(
            a, w.t(), rows, cols, torch.bfloat16, None)),
        "vllm::w8a8_triton_block_scaled_mm_func": ("vLLM", lambda: define("vllm::w8a8_triton_block_scaled_mm_func")(
            a, w, torch.ones(M, K // 128), torch.ones(1, K // 128), [128, 128], torch.bfloat16)),
    }


@pytest.mark.parametrize("name", sorted(_calls()))
def test_a_known_foreign_fp8_gemm_is_refused_naming_it(name: str) -> None:
    """Old code: these ran natively under emulate(), log 0 served, 0 native, even with fallback="raise"."""
    library, call = _calls()[name]
    with mmaemu.emulate() as log:
        with pytest.raises(mmaemu.UnsupportedFeatureError) as refused:
            call()  # type: ignore[operator]
    message = str(refused.value)
    assert f"torch.ops.{name.replace('::', '.')} ({library}: " in message and "fallback='native'" in message
    assert log.native_calls == 0 and log.served_calls == 0


@pytest.mark.parametrize("name", sorted(_calls()))
def test_with_native_fallback_it_runs_natively_and_is_counted(name: str) -> None:
    _, call = _calls()[name]
    want = call()  # type: ignore[operator]
    with mmaemu.emulate(fallback="native") as log:
        got = call()  # type: ignore[operator]
    assert_bitwise_equal(got, want)
    assert log.native == {(M, N, K): 1} and log.served_calls == 0
    assert name.split("::")[1] in next(iter(log.reasons))


def test_vllm_cutlass_scaled_mm_out_argument_and_int8() -> None:
    """vLLM's cutlass_scaled_mm writes into ``out`` and also runs INT8 GEMMs: those are not FP8 and run unchanged."""
    op = define("_C::cutlass_scaled_mm")
    a, w = _operands()
    out = torch.zeros(M, N, dtype=torch.bfloat16)
    with mmaemu.emulate() as log:
        with pytest.raises(mmaemu.UnsupportedFeatureError, match=r"torch\.ops\._C\.cutlass_scaled_mm \(vLLM"):
            op(out, a, w.t(), torch.ones(M, 1), torch.ones(1, N), None)
        assert not out.any()  # refused: nothing written
        ints = torch.ones(M, K, dtype=torch.int8)
        int_out = torch.zeros(M, N, dtype=torch.int32)
        op(int_out, ints, torch.ones(N, K, dtype=torch.int8).t(), torch.ones(M, 1), torch.ones(1, N), None)
    assert bool((int_out == K).all()) and log.native_calls == 0 and log.served_calls == 0
    with mmaemu.emulate(fallback="native") as log:
        op(out, a, w.t(), torch.ones(M, 1), torch.ones(1, N), None)
    assert log.native == {(M, N, K): 1}
    assert_bitwise_equal(out, (a.float() @ w.float().t()).to(torch.bfloat16))


def test_every_operator_of_the_table_is_intercepted_by_name() -> None:
    """Each row, defined with a generic schema where the tests have no real one: refused, or native and counted.

    torchao's rows are left to test_torchao.py: torchao registers them itself on import (a stand-in here would
    make that import fail in the same process)."""
    a, w = _operands()
    for name, row in FOREIGN_GEMMS.items():
        if row.library == "torchao":
            continue
        op = define(name, (row.a or "a", row.b or "b"))
        if len(op._schema.arguments) != 2:
            continue  # defined with its real schema above
        b = w.t() if row.layout is Layout.KN else w
        with mmaemu.emulate() as log:
            with pytest.raises(mmaemu.UnsupportedFeatureError, match=row.library):
                op(a, b)
        with mmaemu.emulate(fallback="native") as log:
            op(a, b)
        assert log.native_calls == 1 and not row.served, name
        assert next(iter(log.native)) == ((M, N, K) if row.a else (-1, -1, -1)), name


def test_a_name_outside_the_table_runs_unchanged() -> None:
    op = define("mslk::f8f8bf16_rowwise_not_in_the_table")
    a, w = _operands()
    with mmaemu.emulate() as log:
        got = op(a, w)
    assert_bitwise_equal(got, op(a, w))
    assert log.native_calls == 0 and log.served_calls == 0


def test_the_docs_list_every_operator_of_the_table() -> None:
    """docs/models.md's table names each operator emulate() knows, and says which is served (torchao's block-wise
    operator, with a kernel model) and that no other is."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    section = page[page.index("#### Third-party FP8 GEMM operators"):page.index("### torchao's FP8 models")]
    assert [name for name in FOREIGN_GEMMS if f"`{name}`" not in section] == []
    assert [name for name, row in FOREIGN_GEMMS.items() if row.served] == ["ao::blockwise_fp8_gemm"]
    assert "**no other is served**" in section
    assert "| `ao::blockwise_fp8_gemm` | torchao | FP8 GEMM with block-wise scales (1x128 activations x 128x128 weights), " \
           "Triton kernel | with `emulate(kernel=...)` |" in section


def test_torchs_grouped_fp8_gemm_is_refused_eager_and_compiled() -> None:
    """aten._scaled_grouped_mm (mixture-of-experts FP8 GEMMs) ran natively in silence under emulate() on a GPU;
    it is refused by name, and in code compiled inside a block the compile pass puts a mirror in its place
    that is refused the same way (torch has no CPU kernel for it: the refusal comes before torch's)."""
    a = torch.ones(32, 16).to(torch.float8_e4m3fn)
    b = torch.ones(2, 16, 32).to(torch.float8_e4m3fn)
    args = (a, b, torch.ones(32), torch.ones(2, 32))
    kwargs = {"offs": torch.tensor([16, 32], dtype=torch.int32), "out_dtype": torch.bfloat16}
    from mmaemu import _compile

    mirror = _compile.MIRRORS[torch.ops.aten._scaled_grouped_mm.default]
    for op in (torch.ops.aten._scaled_grouped_mm.default, mirror):
        with mmaemu.emulate() as log, pytest.raises(mmaemu.UnsupportedFeatureError, match="grouped FP8 GEMM"):
            op(*args, **kwargs)
        assert log.served_calls == 0 and log.native_calls == 0
    graph = torch.fx.Graph()
    nodes = [graph.placeholder(f"x{i}") for i in range(4)]
    graph.output(graph.call_function(torch.ops.aten._scaled_grouped_mm.default, tuple(nodes)))
    _compile.rewrite(graph)
    assert [n.target for n in graph.nodes if n.op == "call_function"] == [mirror]
