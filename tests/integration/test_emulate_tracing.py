"""mmaemu.emulate() around fake tensors and tracing: non-FP8 work runs; an FP8 GEMM is never traced in silence.

torch.export, make_fx(tracing_mode="fake") and FakeTensorMode carry no values. Inside emulate() every other
operator must work on them as outside; an intercepted FP8 GEMM raises UnsupportedFeatureError (its graph would
run torch's native kernel later), or with fallback="native" is traced as torch's operator and counted.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import mmaemu
from mmaemu.testing import assert_bitwise_equal

E4M3 = torch.float8_e4m3fn
M, N, K = 32, 64, 1024


class _Plain(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)).sum(dim=-1)


class _Fp8(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w", torch.ones(N, K).to(E4M3))
        self.register_buffer("one", torch.tensor(1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch._scaled_mm(x, self.w.t(), self.one, self.one, out_dtype=torch.bfloat16)


def _x8() -> torch.Tensor:
    return torch.ones(M, K).to(E4M3)


def _gemm(x: torch.Tensor, w: torch.Tensor, one: torch.Tensor) -> torch.Tensor:
    return torch._scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16)


def test_fake_tensor_mode_without_fp8_runs() -> None:
    """Old code: every operator on fake tensors failed inside emulate() (the mode returned NotImplemented)."""
    with mmaemu.emulate() as log:
        with FakeTensorMode():
            x = torch.randn(4, 16)
            y = (x @ torch.randn(16, 8)).relu()
    assert y.shape == (4, 8) and log.served_calls == 0 and log.native_calls == 0
    with FakeTensorMode() as fake, mmaemu.emulate():  # the other nesting order
        z = fake.from_tensor(torch.randn(3, 3)).sin()
    assert z.shape == (3, 3)


def test_make_fx_and_export_without_fp8_run() -> None:
    """Old code: make_fx(tracing_mode="fake") and torch.export failed inside emulate() for any model."""
    model, x = _Plain(), torch.randn(2, 16)
    with mmaemu.emulate() as log:
        graph = make_fx(lambda t: torch.relu(t) + 1, tracing_mode="fake")(torch.randn(3))
        exported = torch.export.export(model, (x,))
    assert "relu" in str(graph.graph)
    assert_bitwise_equal(exported.module()(x), model(x))
    assert log.served_calls == 0 and log.native_calls == 0


def test_an_fp8_gemm_on_fake_tensors_is_refused() -> None:
    w, one = torch.ones(N, K).to(E4M3), torch.tensor(1.0)
    with mmaemu.emulate() as log:
        with FakeTensorMode() as fake:
            fx, fw, fone = fake.from_tensor(_x8()), fake.from_tensor(w), fake.from_tensor(one)
            with pytest.raises(mmaemu.UnsupportedFeatureError, match="not served.*torch.ops.mmaemu.scaled_mm"):
                _gemm(fx, fw, fone)
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="fake, functional or meta tensors"):
            make_fx(_gemm, tracing_mode="fake")(_x8(), w, one)
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="fake, functional or meta tensors"):
            torch.export.export(_Fp8(), (_x8(),))
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="fake, functional or meta tensors"):
            _gemm(_x8().to("meta"), w.to("meta"), one.to("meta"))
    assert log.served_calls == 0 and log.native_calls == 0


def test_with_native_fallback_a_trace_gets_torchs_operator_counted() -> None:
    w, one = torch.ones(N, K).to(E4M3), torch.tensor(1.0)
    with mmaemu.emulate(fallback="native") as log:
        graph = make_fx(_gemm, tracing_mode="fake")(_x8(), w, one)
        exported = torch.export.export(_Fp8(), (_x8(),))
        meta = _gemm(_x8().to("meta"), w.to("meta"), one.to("meta"))
    assert "_scaled_mm" in str(graph.graph) and "_scaled_mm" in str(exported.graph)
    assert meta.shape == (M, N) and meta.dtype == torch.bfloat16 and meta.is_meta
    assert log.served_calls == 0 and log.native == {(M, N, K): 3}
    assert all("not served" in reason for reason in log.reasons)


def test_real_tensors_are_still_served_after_a_trace() -> None:
    w, one = torch.ones(N, K).to(E4M3), torch.tensor(1.0)
    with mmaemu.emulate(fallback="native") as log:
        make_fx(_gemm, tracing_mode="fake")(_x8(), w, one)
        got = _gemm(_x8(), w, one)
    assert log.served == {(M, N, K): 1}
    assert_bitwise_equal(got, mmaemu.scaled_mm(_x8(), w.t(), one, one, out_dtype=torch.bfloat16))


def test_make_fx_with_real_tensors_is_a_trace_too() -> None:
    """make_fx(tracing_mode="real") hands the block real tensors while its tracer records (torch runs tracing
    modes after the user's): serving would trace mmaemu's own arithmetic. Before: torch's "trying to get value
    out of a tracing tensor" RuntimeError from inside mmaemu; now the trace refusal, or the native operator."""
    w, one = torch.ones(N, K).to(E4M3), torch.tensor(1.0)
    with mmaemu.emulate() as log:
        graph = make_fx(lambda t: torch.relu(t) * 2, tracing_mode="real")(torch.randn(3))
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="under a tracer"):
            make_fx(_gemm, tracing_mode="real")(_x8(), w, one)
    assert "relu" in str(graph.graph) and log.native_calls == 0
    with mmaemu.emulate(fallback="native") as log:
        traced = make_fx(_gemm, tracing_mode="real")(_x8(), w, one)
    assert "_scaled_mm" in str(traced.graph) and log.native == {(M, N, K): 1}
