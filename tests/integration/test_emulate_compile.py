"""Compiled and exported models under mmaemu.emulate(): served with the block's bits, or refused; never native.

torch.compile (Inductor, the default backend; fullgraph=True too) inside a block: every FP8 GEMM of the compiled
graph is served at run time with the profile of the block that runs it, checked against mmaemu.scaled_mm on the
operands the compiled code passed (captured at run time: Inductor computes torchao's activation scales with its
own kernels). On a torch that cannot compile inside a dispatch mode (2.7.1) the model runs eagerly, served, and
a warning says so. An ExportedProgram is served; an AOTInductor package is refused.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import mmaemu
from mmaemu import _compile
from mmaemu.testing import assert_bitwise_equal, bitwise_diff

E4M3 = torch.float8_e4m3fn
M, N, K = 32, 64, 1024  # a row of every H100 and RTX 4060 table (S = 1)
COMPILES = _compile.COMPILES_UNDER_MODE
#: torch 2.7.1 has no CPU kernel for torch._scaled_mm: the native runs are checked where torch has one.
NATIVE_CPU = hasattr(torch.ops.aten, "_scaled_mm_v2")


class _Fp8(torch.nn.Module):
    def __init__(self, bias: bool = False, out_dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.register_buffer("w", (torch.randn(N, K, generator=g) * 40).clamp(-448, 448).to(E4M3))
        self.register_buffer("scale_a", torch.tensor(1 / 64))
        self.register_buffer("scale_b", torch.tensor(3 / 1024))
        self.bias = torch.randn(N, generator=g).to(torch.bfloat16) if bias else None
        self.out_dtype = out_dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch._scaled_mm(x, self.w.t(), self.scale_a, self.scale_b, self.bias, out_dtype=self.out_dtype)
        return y.relu() if y.dtype == torch.bfloat16 else y


def _x8() -> torch.Tensor:
    return (torch.randn(M, K, generator=torch.Generator().manual_seed(4)) * 40).clamp(-448, 448).to(E4M3)


def _want(model: _Fp8, x: torch.Tensor, profile: str) -> torch.Tensor:
    return mmaemu.scaled_mm(x, model.w.t(), model.scale_a, model.scale_b, out_dtype=torch.bfloat16,
                            profile=profile).relu()


def _graphs() -> int:
    """Graphs dynamo has compiled in this process so far."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_fullgraph_model_is_compiled_in_the_block_and_served_with_each_blocks_profile(fresh_dynamo: None) -> None:
    """Old code: torch.compile(fullgraph=True) raised torch's 'found no compiled frames' RuntimeError inside
    emulate() (torch 2.13); on torch 2.7.1 it ran eagerly and nothing said so."""
    model = _Fp8()
    compiled = torch.compile(model, fullgraph=True)
    x = _x8()
    native = compiled(x) if NATIVE_CPU else None  # compiled outside any block first: torch's kernel
    before = _graphs()
    results = {}
    for profile in ("hopper", "ada"):
        with warnings.catch_warnings(record=True) as caught, mmaemu.emulate(profile=profile) as log:
            warnings.simplefilter("always")
            results[profile] = compiled(x)
            compiled(x)
        assert log.served == {(M, N, K): 2} and log.native_calls == 0
        said = [w for w in caught if issubclass(w.category, mmaemu.MmaemuWarning)]
        assert len(said) == (0 if COMPILES else 1)
        if not COMPILES:
            assert "runs it eagerly, fullgraph=True included" in str(said[0].message)
        assert_bitwise_equal(results[profile], _want(model, x, profile))
    assert not bitwise_diff(results["hopper"], results["ada"]).equal  # the profiles differ here: both honoured
    if COMPILES:
        assert _graphs() == before + 1  # compiled once inside (the guard), reused by the second block
    if native is not None:
        assert not bitwise_diff(results["hopper"], native).equal  # torch's CPU kernel differs: none missed
        assert_bitwise_equal(compiled(x), native)  # outside again: the code compiled outside, torch's kernel
        assert _graphs() == before + 1


@pytest.mark.skipif(not (COMPILES and NATIVE_CPU), reason="compiles inside a block and runs torch's CPU kernel")
def test_inductors_cpp_wrapper_calls_are_served(fresh_dynamo: None) -> None:
    """Inductor's C++ wrapper calls aten._scaled_mm through its C shim (aoti_torch_cpu__scaled_mm_out), which no
    dispatch mode sees: without the rewrite to the mirror the block logged 0 calls and returned torch's bits."""
    model, x = _Fp8(), _x8()
    compiled = torch.compile(model, fullgraph=True, options={"cpp_wrapper": True})
    with mmaemu.emulate(profile="ada") as log:
        got = compiled(x)
    assert log.served == {(M, N, K): 1}
    assert_bitwise_equal(got, _want(model, x, "ada"))


def test_a_refused_call_in_compiled_code_raises_or_runs_natively_counted(fresh_dynamo: None) -> None:
    """A bias with an FP8 output is not modelled: refused from inside the compiled graph as in eager mode."""
    model = _Fp8(bias=True, out_dtype=E4M3)
    compiled = torch.compile(model, fullgraph=True)
    x = _x8()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="bias with an FP8 output"):
            with mmaemu.emulate(profile="hopper"):
                compiled(x)
        if not NATIVE_CPU:
            return
        with mmaemu.emulate(profile="hopper", fallback="native") as log:
            got = compiled(x)
    assert log.native == {(M, N, K): 1} and log.served_calls == 0
    assert_bitwise_equal(got, model(x))


class _Capture(TorchDispatchMode):
    """Records each FP8 GEMM call's plain-tensor arguments and result, eager (aten) or compiled (the mirror)."""

    GEMMS = (torch.ops.aten._scaled_mm.default, torch.ops.mmaemu.compiled_scaled_mm.default)

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any], torch.Tensor]] = []

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True  # lets dynamo compile, and sees the compiled code's calls as the block does

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if any(t is not torch.Tensor for t in types):
            return NotImplemented
        result = func(*args, **kwargs)
        if func in self.GEMMS:
            self.calls.append((tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args), dict(kwargs),
                               result.clone()))
        return result


@pytest.mark.parametrize(("granularity", "fullgraph"), [("PerTensor", False), ("PerTensor", True), ("PerRow", True)])
def test_torchao_compiled_is_served_with_the_bits_of_its_operands(
        granularity: str, fullgraph: bool, fresh_dynamo: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchao's PerTensor and PerRow Float8Tensor models, compiled: each GEMM the compiled code runs returns
    mmaemu.scaled_mm's bits on the operands it passed (tensor-wise or row-wise scales alike), for each block's
    profile. Old code: fullgraph=True raised inside the block; the default compile ran eagerly."""
    torchao = pytest.importorskip("torchao")
    import torchao.quantization as quantization
    import torchao.quantization.quant_api as quant_api
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, quantize_

    monkeypatch.setattr(quant_api, "_check_hardware_support", lambda granularity: None)  # as on an sm_89+ GPU
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(K, K, bias=False), torch.nn.ReLU(),
                                torch.nn.Linear(K, N, bias=False)).to(torch.bfloat16)
    quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=getattr(quantization, granularity)()))
    assert torchao is not None and type(model[0].weight).__name__ == "Float8Tensor"
    compiled = torch.compile(model, fullgraph=fullgraph)
    x = (torch.randn(M, K, generator=torch.Generator().manual_seed(5)) * 3).to(torch.bfloat16)
    before = _graphs()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)  # row-wise kernels; torch 2.7.1: run eagerly
        for profile in ("hopper", "ada"):
            with mmaemu.emulate(profile=profile) as log, _Capture() as capture:
                y = compiled(x)
            assert log.served == {(M, K, K): 1, (M, N, K): 1} and log.native_calls == 0
            assert len(capture.calls) == 2
            for args, kwargs, result in capture.calls:
                assert args[0].dtype == E4M3 and args[1].dtype == E4M3
                assert args[2].numel() == (1 if granularity == "PerTensor" else M)  # the scales torchao passed
                assert_bitwise_equal(result, mmaemu.scaled_mm(*args, **kwargs, profile=profile))
            assert_bitwise_equal(y, capture.calls[-1][2])  # the model returns the last GEMM's output
    assert _graphs() == (before + 1 if COMPILES else before)  # compiled once, inside the first block


def test_an_exported_program_saved_and_loaded_is_served() -> None:
    """torch.export outside the block, saved and loaded as a .pt2 archive: its module runs through the dispatcher."""
    model, x = _Fp8(), _x8()
    saved = io.BytesIO()
    torch.export.save(torch.export.export(model, (x,)), saved)
    saved.seek(0)
    program = torch.export.load(saved)
    assert "_scaled_mm" in str(program.graph)
    with mmaemu.emulate(profile="ada") as log:
        got = program.module()(x)
    assert log.served == {(M, N, K): 1}
    assert_bitwise_equal(got, _want(model, x, "ada"))


def _aoti_entry_points() -> list[tuple[type, str]]:
    """AOTInductor's runners as torch defines them (torch._C._aoti), with their Python entry points."""
    aoti = torch._C._aoti
    classes = [getattr(aoti, n) for n in dir(aoti)
               if n == "AOTIModelPackageLoader" or n.startswith("AOTIModelContainerRunner")]
    return [(c, m) for c in classes for m in ("run", "boxed_run") if m in c.__dict__]


def test_aoti_runners_are_refused_in_a_block_before_torchs_code_runs() -> None:
    """Old code: an AOTInductor model ran its FP8 GEMMs natively in C++ inside emulate(), 0 calls logged (a real
    package: test_a_real_aoti_package_is_refused, --full). Here torch's own entry points are called with a
    runner that is not one: the block refuses before torch's C++ method reads it; under fallback='native' and
    outside a block torch's method runs and rejects it (TypeError), as without mmaemu."""
    points = _aoti_entry_points()
    assert {(c.__name__, m) for c, m in points} >= {("AOTIModelPackageLoader", "boxed_run"),
                                                    ("AOTIModelPackageLoader", "run"),
                                                    ("AOTIModelContainerRunnerCpu", "run")}
    for cls, name in points:
        method = getattr(cls, name)
        with pytest.raises(mmaemu.UnsupportedFeatureError, match="AOTInductor-compiled model"):
            with mmaemu.emulate():
                method(object(), [])
        with pytest.raises(TypeError), mmaemu.emulate(fallback="native") as log:
            method(object(), [])
        assert log.native_calls == 0  # counted only when it ran
        with pytest.raises(TypeError):
            method(object(), [])


@pytest.mark.skipif(not NATIVE_CPU, reason="torch 2.7.1 has no CPU kernel for torch._scaled_mm")
def test_a_real_aoti_package_is_refused(tmp_path: Any) -> None:
    """A real .pt2 package (AOTInductor, CPU): its _scaled_mm runs through AOTInductor's C shim, unseen. Before:
    it ran natively inside the block, 0 calls logged."""
    from conftest import FULL

    if not FULL:
        pytest.skip("compiles an AOTInductor package (a minute on two cores): --full")
    model, x = _Fp8(), _x8()
    path = torch._inductor.aoti_compile_and_package(torch.export.export(model, (x,)),
                                                    package_path=str(tmp_path / "fp8.pt2"))
    loaded = torch._inductor.aoti_load_package(path)
    native = loaded(x)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="AOTInductor-compiled model"):
        with mmaemu.emulate():
            loaded(x)
    with mmaemu.emulate(fallback="native") as log:
        assert_bitwise_equal(loaded(x), native)
    assert log.native == {(-1, -1, -1): 1}
