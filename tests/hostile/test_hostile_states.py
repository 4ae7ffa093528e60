"""Hostile process states around every public entry point (the cross-cutting tier).

Each entry point is first called in a clean state on small deterministic FP8 inputs (negative
zeros, NaN codes, subnormals; K a multiple of 16; every split decided explicitly). Then, under each
hostile state (flush-to-zero, another default device or dtype, thread counts, deterministic
algorithms, environment variables, autocast, warnings as errors, grad modes, input layouts,
concurrent threads), the same call must give the same bits, or raise an exception the state
documents, and in both cases leave every input and ``out`` exactly as it was.

The per-argument hostile tests live in ``test_hostile_call.py``, ``test_hostile_numerics.py`` and
``test_hostile_cli.py``; this file varies the state around valid calls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import mmaemu
import mmaemu.ops  # noqa: F401 - registers torch.ops.mmaemu.scaled_mm
from mmaemu import _cli as cli, model
from mmaemu.nn import EmulatedFP8Linear
from mmaemu.testing import assert_bitwise_equal, bitwise_diff

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
M, N, K = 16, 32, 256


# ---------------------------------------------------------------------------------------------------
# inputs: deterministic FP8 codes with -0, NaN codes and subnormals
# ---------------------------------------------------------------------------------------------------


def _codes(rows: int, cols: int, seed: int) -> torch.Tensor:
    """uint8 E4M3 codes: finite values of every kind, one row of -0, one of subnormals, one NaN code."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    c = torch.randint(0, 0x7F, (rows, cols), generator=g, dtype=torch.int64, device="cpu")
    sign = torch.randint(0, 2, (rows, cols), generator=g, dtype=torch.int64, device="cpu") * 0x80
    c = (c | sign).to(torch.uint8)
    c[0] = 0x80  # a row of -0
    c[1] = torch.tensor([0x01, 0x82, 0x03, 0x84, 0x05, 0x86, 0x07, 0x80] * (cols // 8), dtype=torch.uint8,
                        device="cpu")  # subnormals and -0
    c[2, 5] = 0x7F  # a NaN code: its row of the output is the canonical NaN
    return c


def fp8(rows: int, cols: int, seed: int, dtype: torch.dtype = E4) -> torch.Tensor:
    return _codes(rows, cols, seed).view(dtype)


def f32(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float32, device="cpu")


def acc_values() -> torch.Tensor:
    """An fp32 accumulator with -0, subnormals, NaN, Inf and ordinary values."""
    g = torch.Generator(device="cpu").manual_seed(7)
    acc = torch.randn((M, N), generator=g, dtype=torch.float32, device="cpu") * 1000
    acc[0, :4] = torch.tensor([-0.0, 2.0**-149, -(2.0**-140), float("nan")], dtype=torch.float32, device="cpu")
    acc[1, :2] = torch.tensor([float("inf"), -float("inf")], dtype=torch.float32, device="cpu")
    return acc


def activation() -> torch.Tensor:
    """A bf16 activation [2, 8, K] with -0, bf16 subnormals and a NaN."""
    g = torch.Generator(device="cpu").manual_seed(11)
    x = (torch.randn((2, 8, K), generator=g, dtype=torch.float32, device="cpu") * 3).to(torch.bfloat16)
    x[0, 0, :3] = torch.tensor([-0.0, 2.0**-130, -(2.0**-133)], dtype=torch.bfloat16, device="cpu")
    x[1, 3, 7] = float("nan")
    return x


# ---------------------------------------------------------------------------------------------------
# entry points: each makes fresh inputs (in the clean state) and calls one public function
# ---------------------------------------------------------------------------------------------------

#: scales whose product puts the subnormal rows' results among fp32 subnormals (FTZ would change them)
SCALE_A, SCALE_B = 2.0**-60, 2.0**-61


def gemm_inputs(**extra: Any) -> dict[str, Any]:
    return dict(mat1=fp8(M, K, 1), mat2=fp8(N, K, 2).t(), scale_a=f32(SCALE_A), scale_b=f32(SCALE_B), **extra)


def run_scaled_mm(i: dict[str, Any]) -> Any:
    return mmaemu.scaled_mm(i["mat1"], i["mat2"], i["scale_a"], i["scale_b"], out_dtype=torch.bfloat16,
                            profile="ada", splitk=1)


def run_scaled_mm_out(i: dict[str, Any]) -> Any:
    """FP8 output with scale_result, fast accumulation, an explicit split, the reference backend, out=."""
    return mmaemu.scaled_mm(i["mat1"], i["mat2"], i["scale_a"], i["scale_b"], scale_result=i["scale_result"],
                            out_dtype=E4, use_fast_accum=True, profile="hopper", splitk=1,
                            backend="reference", out=i["out"])


def run_accumulate(i: dict[str, Any]) -> Any:
    return mmaemu.accumulate(i["a"], i["b"], use_fast_accum=False, splitk=(2, "contiguous"), profile="hopper")


def run_epilogue(i: dict[str, Any]) -> Any:
    return mmaemu.epilogue(i["acc"], i["scale_a"], i["scale_b"], out_dtype=torch.bfloat16)


def run_epilogue_fp8(i: dict[str, Any]) -> Any:
    return mmaemu.epilogue(i["acc"], i["scale_a"], i["scale_b"], out_dtype=E5, scale_result=i["scale_result"])


def run_explain(i: dict[str, Any]) -> Any:
    return mmaemu.explain(i["mat1"], i["mat2"], i["scale_a"], i["scale_b"], out_dtype=torch.bfloat16,
                          profile="ada", splitk=1)


def run_dot(i: dict[str, Any]) -> Any:
    return model.dot(i["a"], i["b"], i["c"], preset="ada")


def run_bitwise(i: dict[str, Any]) -> Any:
    """The report of assert_bitwise_equal on an equal pair (None) and on a pair differing in every class."""
    assert_bitwise_equal(i["x"], i["x_copy"])
    try:
        assert_bitwise_equal(i["x"], i["y"])
    except AssertionError as exc:
        return str(exc), str(bitwise_diff(i["x16"], i["y16"]))
    raise AssertionError("assert_bitwise_equal accepted tensors that differ")


def run_emulate(i: dict[str, Any]) -> Any:
    with mmaemu.emulate(profile="ada", splitk=1) as log:
        y = torch._scaled_mm(i["mat1"], i["mat2"], i["scale_a"], i["scale_b"], out_dtype=torch.float32)
    assert log.served_calls == 1
    return y


def run_linear(i: dict[str, Any]) -> Any:
    layer = EmulatedFP8Linear(i["weight"], weight_scale_inv=i["weight_scale_inv"], input_scale=i["input_scale"],
                              profile="ada", splitk=1)
    with torch.no_grad():  # a stored input scale (delayed scaling) runs with grad mode off
        return layer(i["x"])


def run_linear_current(i: dict[str, Any]) -> Any:
    """Current scaling (the input scale computed from amax at the call) with a bf16 weight quantised here."""
    layer = EmulatedFP8Linear(i["weight_bf16"], weight_scale=i["weight_scale"], input_scale=None,
                              profile="hopper-te", splitk=1, out_dtype=torch.float32)
    return layer(i["x"])


def run_op(i: dict[str, Any]) -> Any:
    return torch.ops.mmaemu.scaled_mm(i["mat1"], i["mat2"], i["scale_a"], i["scale_b"], None, None,
                                      torch.bfloat16, False, "ada", "1", "auto")


def run_cli(i: dict[str, Any]) -> Any:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        rc = cli.main(["explain", str(M), str(N), str(K), "--profile", "ada", "--splitk", "1", "--out", "fp32"])
    return rc, buffer.getvalue()


def bitwise_inputs() -> dict[str, Any]:
    x = acc_values()
    y = x.clone()
    y[0, 0] = 0.0  # -0 against +0: zero sign
    y[0, 1] = 0.0  # a subnormal against +0: a value difference of one ulp
    y[0, 3] = torch.tensor(0x7FC00001, dtype=torch.int32).view(torch.float32)  # NaN payload
    y[2, 2] = y[2, 2] * 2
    x16 = x.to(torch.float16)
    y16 = x16.clone()
    y16[3, :2] = torch.tensor([2.0**-24, -(2.0**-20)], dtype=torch.float16)  # fp16 subnormals
    return dict(x=x, x_copy=x.clone(), y=y, x16=x16, y16=y16)


@dataclasses.dataclass(frozen=True)
class Entry:
    make: Callable[[], dict[str, Any]]
    call: Callable[[dict[str, Any]], Any]
    #: input names holding floating-point tensors that may require grad (for the grad states)
    grad_inputs: tuple[str, ...] = ()
    #: whether the result is a report (CallPlan or CLI text) rather than tensor bits
    report: bool = False
    #: the input a successful call writes and returns (its bytes may change, nothing else of it)
    writes: str | None = None


ENTRIES: dict[str, Entry] = {
    "scaled_mm": Entry(gemm_inputs, run_scaled_mm, ("scale_a", "scale_b")),
    "scaled_mm-out": Entry(
        lambda: gemm_inputs(scale_result=f32(2.0**70), out=torch.full((M, N), 3.0).to(E4)),
        run_scaled_mm_out, ("scale_a", "scale_b", "scale_result"), writes="out",
    ),
    "accumulate": Entry(lambda: dict(a=fp8(M, K, 3), b=fp8(N, K, 4)), run_accumulate),
    "epilogue": Entry(lambda: dict(acc=acc_values(), scale_a=f32(2.0**-60), scale_b=f32(0.75)), run_epilogue,
                      ("acc", "scale_a", "scale_b")),
    "epilogue-fp8": Entry(
        lambda: dict(acc=acc_values(), scale_a=f32(2.0**-3), scale_b=f32(0.75), scale_result=f32(3.0)),
        run_epilogue_fp8, ("acc", "scale_a", "scale_b", "scale_result"),
    ),
    "explain": Entry(gemm_inputs, run_explain, ("scale_a", "scale_b"), report=True),
    "model.dot": Entry(
        lambda: dict(a=fp8(M, K, 5), b=fp8(M, K, 6), c=(acc_values()[:, 0] * 2.0**-130).contiguous()),
        run_dot, ("c",),
    ),
    "assert_bitwise_equal": Entry(bitwise_inputs, run_bitwise),
    "emulate": Entry(gemm_inputs, run_emulate, ("scale_a", "scale_b")),
    "EmulatedFP8Linear": Entry(
        lambda: dict(weight=fp8(N, K, 8), weight_scale_inv=f32(2.0**-70), input_scale=f32(4.0), x=activation()),
        run_linear, ("x",),
    ),
    "EmulatedFP8Linear-current": Entry(
        lambda: dict(weight_bf16=fp8(N, K, 9).to(torch.bfloat16), weight_scale=f32(0.5), x=activation()),
        run_linear_current, ("x",),
    ),
    "torch.ops.mmaemu.scaled_mm": Entry(gemm_inputs, run_op, ("scale_a", "scale_b")),
    "cli-explain": Entry(dict, run_cli, report=True),
}


# ---------------------------------------------------------------------------------------------------
# comparing results and snapshots
# ---------------------------------------------------------------------------------------------------


def storage_bytes(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device="cpu").set_(t.untyped_storage().clone())


def snapshot(inputs: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {
        name: (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad, storage_bytes(t))
        for name, t in inputs.items() if isinstance(t, torch.Tensor)
    }


def assert_unchanged(before: dict[str, tuple[Any, ...]], inputs: dict[str, Any], written: str | None = None) -> None:
    """Every input keeps its metadata and bytes (``written``, the ``out`` of a call that ran, its metadata)."""
    after = snapshot(inputs)
    for name, old in before.items():
        new = after[name]
        assert old[:-1] == new[:-1], f"{name}'s metadata changed: {old[:-1]} -> {new[:-1]}"
        if name != written:
            assert torch.equal(old[-1], new[-1]), f"{name}'s bytes changed"


def assert_same(got: Any, want: Any) -> None:
    """Equal bits for tensors, equal values for reports (recursively)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"expected a tensor, got {got!r}"
        assert got.device == want.device, f"result on {got.device}, clean result on {want.device}"
        assert_bitwise_equal(got.detach(), want)
    elif isinstance(want, tuple) and not dataclasses.is_dataclass(want):
        assert isinstance(got, tuple) and len(got) == len(want), f"{got!r} != {want!r}"
        for g, w in zip(got, want):
            assert_same(g, w)
    else:
        assert got == want, f"\n{got!r}\n!=\n{want!r}"


_CLEAN: dict[str, Any] = {}
_CLEAN_LOCK = threading.Lock()


def clean_result(name: str) -> Any:
    """The entry point's result in the clean state (computed once, without warnings)."""
    with _CLEAN_LOCK:
        if name not in _CLEAN:
            entry = ENTRIES[name]
            inputs = entry.make()
            before = snapshot(inputs)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # the clean calls warn nothing
                result = entry.call(inputs)
            assert_unchanged(before, inputs, entry.writes)
            _CLEAN[name] = result.clone() if isinstance(result, torch.Tensor) else result
        return _CLEAN[name]


def refusal_class(result: Any) -> str | None:
    """The exception class a report says the call would raise (explain's plan, the CLI's text)."""
    if isinstance(result, mmaemu.CallPlan):
        return None if result.ok else result.validation[0]
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], int) and result[0] != 0:
        text = result[1]
        marker = "runs:       no, "  # the CLI prints the plan's readable form (str(CallPlan))
        if marker in text:
            return text.split(marker, 1)[1].split(":", 1)[0].strip()
    return None


# ---------------------------------------------------------------------------------------------------
# the hostile states: each a context manager restoring what it changed, and what it may raise
# ---------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def flush_denormal() -> Iterator[None]:
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals (torch.set_flush_denormal returned False)")
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


@contextlib.contextmanager
def default_device(device: str) -> Iterator[None]:
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@contextlib.contextmanager
def num_threads(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    old, old_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old, warn_only=old_warn)


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    old = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def warnings_as_errors() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@contextlib.contextmanager
def autocast_bf16() -> Iterator[None]:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yield


@contextlib.contextmanager
def inference_mode() -> Iterator[None]:
    with torch.inference_mode():
        yield


@dataclasses.dataclass(frozen=True)
class State:
    enter: Callable[[], contextlib.AbstractContextManager[None]]
    #: exception classes the state documents (a call may raise one of them instead of computing)
    may_raise: tuple[type[BaseException], ...] = ()


STATES: dict[str, State] = {
    # CPU FTZ changes fp32 rounding: every computing entry point refuses it (MmaemuError)
    "flush-denormal": State(flush_denormal, (mmaemu.MmaemuError,)),
    "default-device-meta": State(lambda: default_device("meta")),
    "default-dtype-float64": State(lambda: default_dtype(torch.float64)),
    "default-dtype-float16": State(lambda: default_dtype(torch.float16)),
    "threads-1": State(lambda: num_threads(1)),
    "threads-2": State(lambda: num_threads(2)),
    "deterministic": State(deterministic),
    # profile= is explicit in every call: the variable must not win (nor a variable naming an
    # experimental profile warn)
    "env-profile-hopper": State(lambda: environ(MMAEMU_PROFILE="hopper")),
    "env-profile-experimental": State(lambda: environ(MMAEMU_PROFILE="b200-mma-sync-experimental")),
    "env-splitk-strict-on": State(lambda: environ(MMAEMU_SPLITK_STRICT="1")),
    "env-splitk-strict-off": State(lambda: environ(MMAEMU_SPLITK_STRICT="off")),
    "env-workspace": State(lambda: environ(CUBLASLT_WORKSPACE_SIZE="0")),
    "env-cublaslt-path": State(lambda: environ(MMAEMU_CUBLASLT="/nonexistent/libcublasLt.so")),
    "autocast-bf16": State(autocast_bf16),
    "warnings-error": State(warnings_as_errors, (Warning,)),
    "inference-mode": State(inference_mode),
    "no-grad": State(torch.no_grad),
}


def call_under(name: str, state: State, inputs: dict[str, Any]) -> Any:
    """The entry point's result under ``state``, or the exception it raised (which the test judges)."""
    entry = ENTRIES[name]
    with state.enter():
        try:
            return entry.call(inputs)
        except Exception as exc:  # noqa: BLE001 - judged by the caller
            return exc


def judge(name: str, state_name: str, state: State, result: Any, inputs: dict[str, Any],
          before: dict[str, tuple[Any, ...]]) -> None:
    entry = ENTRIES[name]
    refused = isinstance(result, BaseException)
    assert_unchanged(before, inputs, None if refused else entry.writes)
    if refused:
        if isinstance(result, AssertionError):
            raise result
        assert isinstance(result, state.may_raise), (
            f"{name} under {state_name} raised {type(result).__module__}.{type(result).__name__}: {result}"
        )
        return
    want = clean_result(name)
    if entry.writes is not None:
        assert result is inputs[entry.writes], f"{name} did not return its out= tensor"
    if entry.report:
        refused = refusal_class(result)
        if refused is not None and refusal_class(want) is None:
            # a report of a refusal the state documents (what scaled_mm raises under it)
            assert refused in {c.__name__ for c in state.may_raise} or any(
                issubclass(getattr(mmaemu, refused, object), c) for c in state.may_raise
            ), f"{name} under {state_name} reports an undocumented refusal: {result!r}"
            return
    assert_same(result, want)


@pytest.mark.parametrize("state_name", sorted(STATES))
@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_entry_point_under_hostile_state(name: str, state_name: str) -> None:
    state = STATES[state_name]
    clean_result(name)
    inputs = ENTRIES[name].make()
    before = snapshot(inputs)
    result = call_under(name, state, inputs)
    judge(name, state_name, state, result, inputs, before)
    # the state is gone: the next call in the clean state gives the clean bits again
    again = ENTRIES[name].make()
    assert_same(ENTRIES[name].call(again), clean_result(name))


# ---------------------------------------------------------------------------------------------------
# the package leaves no state behind: mode stack, grad mode, defaults, warning filters
# ---------------------------------------------------------------------------------------------------


def global_state() -> tuple[Any, ...]:
    return (
        torch._C._len_torch_function_stack(), torch.is_grad_enabled(), torch.is_inference_mode_enabled(),
        torch.get_default_dtype(), torch.get_default_device(), torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(), torch.is_autocast_enabled("cpu"),
        list(warnings.filters), warnings.showwarning, os.environ.get("MMAEMU_PROFILE"),
    )


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_entry_point_leaves_no_global_state(name: str) -> None:
    before = global_state()
    for state in ("warnings-error", "flush-denormal", "default-device-meta"):
        call_under(name, STATES[state], ENTRIES[name].make())
    ENTRIES[name].call(ENTRIES[name].make())
    assert global_state() == before


# ---------------------------------------------------------------------------------------------------
# inputs in other layouts and grad states: the same bits, or the documented refusal
# ---------------------------------------------------------------------------------------------------


def strided_view(t: torch.Tensor) -> torch.Tensor:
    """The same values as a view into a larger buffer: a storage offset and a padded leading stride
    (16-byte aligned for FP8 matrices, as cuBLASLt needs); a transposed matrix stays transposed."""
    if t.dim() == 2 and t.stride(0) == 1 and t.stride(1) != 1:  # column-major (mat2 = w.t())
        return strided_view(t.t()).t()
    if t.dim() == 0:
        big = torch.zeros(2, dtype=t.dtype)
        big[1] = t
        return big[1]
    pad, last = 16, t.shape[-1]
    big = torch.zeros(*t.shape[:-1], last + 2 * pad, dtype=t.dtype)
    big[..., pad:pad + last] = t
    return big[..., pad:pad + last]


def transposed_layout(t: torch.Tensor) -> torch.Tensor:
    """The same values with the last two dimensions' strides swapped (column-major for row-major)."""
    if t.dim() != 2:
        return t
    return t.t().contiguous().t()


def scale_shape(t: torch.Tensor) -> torch.Tensor:
    """One-element scales as [1, 1] tensors (torch takes any shape of one element)."""
    return t.reshape(1, 1) if t.dim() == 0 and t.dtype == torch.float32 else t


#: name -> (input transformation, names it applies to (None: all tensors), exceptions it may raise)
LAYOUTS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], tuple[type[BaseException], ...]]] = {
    "strided-view": (strided_view, ()),
    # column-major mat1 (or row-major mat2) is refused by torch's layout rule; others take any layout
    "transposed-layout": (transposed_layout, (mmaemu.ReferenceRejectsError,)),
    "scale-1x1": (scale_shape, ()),
}


def _transform(inputs: dict[str, Any], fn: Callable[[torch.Tensor], torch.Tensor], skip: str | None) -> dict[str, Any]:
    return {k: fn(v) if isinstance(v, torch.Tensor) and k != skip else v for k, v in inputs.items()}


TENSOR_ENTRIES = sorted(n for n in ENTRIES if n != "cli-explain")


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", TENSOR_ENTRIES)
def test_entry_point_with_inputs_in_another_layout(name: str, layout: str) -> None:
    fn, may_raise = LAYOUTS[layout]
    entry = ENTRIES[name]
    want = clean_result(name)
    inputs = _transform(entry.make(), fn, entry.writes)
    before = snapshot(inputs)
    result = call_under(name, State(contextlib.nullcontext, may_raise), inputs)
    if isinstance(result, mmaemu.CallPlan) and not result.ok and may_raise:
        assert result.validation[0] in {c.__name__ for c in may_raise}, result.validation
        assert_unchanged(before, inputs)
        return
    judge(name, layout, State(contextlib.nullcontext, may_raise), result, inputs, before)
    if not isinstance(result, BaseException) and entry.writes is None:
        assert_same(result, want)


def _requiring_grad(name: str) -> dict[str, Any]:
    entry = ENTRIES[name]
    inputs = entry.make()
    for key in entry.grad_inputs:
        inputs[key] = inputs[key].clone().requires_grad_(True)
    return inputs


GRAD_ENTRIES = sorted(n for n in ENTRIES if ENTRIES[n].grad_inputs)


@pytest.mark.parametrize("mode", ["no-grad", "inference-mode"])
@pytest.mark.parametrize("name", GRAD_ENTRIES)
def test_inputs_requiring_grad_outside_grad_mode(name: str, mode: str) -> None:
    """Inputs that require grad, called under no_grad or inference_mode: the clean bits."""
    inputs = _requiring_grad(name)
    before = snapshot(inputs)
    result = call_under(name, STATES[mode], inputs)
    judge(name, mode, STATES[mode], result, inputs, before)


@pytest.mark.parametrize("name", GRAD_ENTRIES)
def test_inputs_requiring_grad_in_grad_mode(name: str) -> None:
    """With grad mode on: the clean bits (epilogue and dot are differentiable torch code) or mmaemu's
    inference-only refusal, never a torch autograd error or a modified input."""
    inputs = _requiring_grad(name)
    before = snapshot(inputs)
    with torch.enable_grad():
        result = call_under(name, State(contextlib.nullcontext, (mmaemu.UnsupportedFeatureError,)), inputs)
    judge(name, "grad-mode", State(contextlib.nullcontext, (mmaemu.UnsupportedFeatureError,)), result, inputs, before)
    if isinstance(result, mmaemu.UnsupportedFeatureError):
        assert "inference-only" in str(result) or "require grad" in str(result), str(result)


@pytest.mark.parametrize("name", TENSOR_ENTRIES)
def test_inference_tensors_used_outside_inference_mode(name: str) -> None:
    """Inputs made under inference_mode (inference tensors) and used after it."""
    want = clean_result(name)
    with torch.inference_mode():
        inputs = ENTRIES[name].make()
    before = snapshot(inputs)
    state = State(contextlib.nullcontext, (mmaemu.ReferenceRejectsError,) if ENTRIES[name].writes else ())
    result = call_under(name, state, inputs)
    judge(name, "inference-tensors", state, result, inputs, before)
    if isinstance(result, BaseException):  # an inference tensor as out=: torch refuses the write
        assert "inference tensor outside InferenceMode" in str(result), str(result)
    elif ENTRIES[name].writes is None:
        assert_same(result, want)


# ---------------------------------------------------------------------------------------------------
# concurrent calls from four threads
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TENSOR_ENTRIES)
def test_concurrent_calls_from_four_threads(name: str) -> None:
    """Four threads calling at once (each with its own inputs, and its own emulate block) get the
    clean bits, and leave their inputs and the process's warning filters as they were."""
    want = clean_result(name)
    filters = list(warnings.filters)
    barrier = threading.Barrier(4)
    results: list[Any] = [None] * 4
    errors: list[BaseException] = []

    def work(slot: int) -> None:
        try:
            runs = []
            for _ in range(3):
                inputs = ENTRIES[name].make()
                before = snapshot(inputs)
                barrier.wait(timeout=60)
                result = ENTRIES[name].call(inputs)
                assert_unchanged(before, inputs, ENTRIES[name].writes)
                runs.append(result)
            results[slot] = runs
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[0]
    for runs in results:
        for result in runs:
            assert_same(result, want)
    assert list(warnings.filters) == filters


def test_concurrent_explains_report_their_own_warnings() -> None:
    """explain records warnings with process-wide machinery: concurrent explains each report exactly
    their warning, none is shown, and the warning filters are restored (they were not)."""
    inputs = gemm_inputs()

    def plan() -> mmaemu.CallPlan:
        return mmaemu.explain(inputs["mat1"], inputs["mat2"], inputs["scale_a"], inputs["scale_b"],
                              out_dtype=torch.bfloat16, profile="hopper", splitk=(2, "serial"))

    want = plan()
    assert [w[0] for w in want.warnings] == ["UnverifiedSplitWarning"]
    filters = list(warnings.filters)
    plans: list[mmaemu.CallPlan] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(25):
            p = plan()
            with lock:
                plans.append(p)

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert len(plans) == 100
    assert all(p == want for p in plans), {p.warnings for p in plans}
    assert not shown, [str(w.message) for w in shown]
    assert list(warnings.filters) == filters


def test_warnings_of_other_threads_are_not_taken_by_explain() -> None:
    """A scaled_mm warning in another thread during an explain reaches that thread's handler."""
    inputs = gemm_inputs()
    stop = threading.Event()

    def explaining() -> None:
        while not stop.is_set():
            mmaemu.explain(inputs["mat1"], inputs["mat2"], inputs["scale_a"], inputs["scale_b"],
                           out_dtype=torch.bfloat16, profile="ada", splitk=1)

    thread = threading.Thread(target=explaining)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thread.start()
        try:
            for _ in range(20):
                mmaemu.scaled_mm(inputs["mat1"], inputs["mat2"], inputs["scale_a"], inputs["scale_b"],
                                 out_dtype=torch.bfloat16, profile="hopper", splitk=(2, "serial"),
                                 backend="reference")
        finally:
            stop.set()
            thread.join(timeout=60)
    assert sum(issubclass(w.category, mmaemu.UnverifiedSplitWarning) for w in caught) == 20


# ---------------------------------------------------------------------------------------------------
# MMAEMU_PROFILE changes the default profile only
# ---------------------------------------------------------------------------------------------------


def _default_profile_calls() -> dict[str, Callable[[dict[str, Any], str | None], Any]]:
    def sm(i: dict[str, Any], p: str | None) -> Any:
        return mmaemu.scaled_mm(i["mat1"], i["mat2"], i["scale_a"], i["scale_b"], out_dtype=torch.float32,
                                profile=p, splitk=1)

    def acc(i: dict[str, Any], p: str | None) -> Any:
        return mmaemu.accumulate(i["mat1"], i["mat2"].t(), use_fast_accum=False, splitk=1, profile=p)

    def op(i: dict[str, Any], p: str | None) -> Any:
        return mmaemu.ops.scaled_mm(i["mat1"], i["mat2"], i["scale_a"], i["scale_b"], out_dtype=torch.float32,
                                    profile=p, splitk=1)

    def emu(i: dict[str, Any], p: str | None) -> Any:
        with mmaemu.emulate(profile=p, splitk=1):
            return torch._scaled_mm(i["mat1"], i["mat2"], i["scale_a"], i["scale_b"], out_dtype=torch.float32)

    def plan(i: dict[str, Any], p: str | None) -> Any:
        return mmaemu.explain(i["mat1"], i["mat2"], i["scale_a"], i["scale_b"], out_dtype=torch.float32,
                              profile=p, splitk=1).profile

    def cmd(i: dict[str, Any], p: str | None) -> Any:
        buffer = io.StringIO()
        argv = ["explain", str(M), str(N), str(K), "--splitk", "1", *(["--profile", p] if p else [])]
        with contextlib.redirect_stdout(buffer):
            cli.main(argv)
        return buffer.getvalue()

    return {"scaled_mm": sm, "accumulate": acc, "ops.scaled_mm": op, "emulate": emu, "explain": plan, "cli": cmd}


DEFAULT_PROFILE_CALLS = _default_profile_calls()


@pytest.mark.parametrize("name", sorted(DEFAULT_PROFILE_CALLS))
def test_profile_variable_sets_the_default_and_the_argument_wins(name: str) -> None:
    call = DEFAULT_PROFILE_CALLS[name]
    inputs = gemm_inputs()
    hopper, ada = call(inputs, "hopper"), call(inputs, "ada")
    if isinstance(hopper, torch.Tensor):
        assert bitwise_diff(hopper, ada).differing > 0, "the inputs do not tell hopper from ada"
    for variable, explicit in (("ada", "hopper"), ("hopper", "ada")):
        with environ(MMAEMU_PROFILE=variable):
            assert_same(call(inputs, None), ada if variable == "ada" else hopper)
            assert_same(call(inputs, explicit), hopper if explicit == "hopper" else ada)


def test_layer_profile_ignores_the_variable() -> None:
    """EmulatedFP8Linear's default profile is "hopper-te", whatever MMAEMU_PROFILE says."""
    i = ENTRIES["EmulatedFP8Linear"].make()

    def run() -> torch.Tensor:
        layer = EmulatedFP8Linear(i["weight"], weight_scale_inv=i["weight_scale_inv"], input_scale=i["input_scale"],
                                  splitk=1)
        with torch.no_grad():
            return layer(i["x"])

    want = run()
    with environ(MMAEMU_PROFILE="ada"):
        assert_same(run(), want)


# ---------------------------------------------------------------------------------------------------
# a call that only warns, with warnings as errors: it raises before touching out
# ---------------------------------------------------------------------------------------------------


def test_warning_as_error_leaves_out_untouched() -> None:
    inputs = gemm_inputs(out=torch.full((4, 4), 3.0, dtype=torch.bfloat16))
    before = snapshot(inputs)
    for splitk, category in (((2, "serial"), mmaemu.UnverifiedSplitWarning), ((4, "contiguous"), Warning)):
        with warnings_as_errors(), pytest.raises(category):
            mmaemu.scaled_mm(inputs["mat1"], inputs["mat2"], inputs["scale_a"], inputs["scale_b"],
                             out_dtype=torch.bfloat16, profile="hopper", splitk=splitk, out=inputs["out"])
        assert_unchanged(before, inputs)
    with warnings_as_errors(), pytest.raises(Warning):  # an experimental preset
        EmulatedFP8Linear(fp8(N, K, 8), weight_scale_inv=f32(1.0), input_scale=1.0,
                          profile="b200-mma-sync-experimental", splitk=1)
