"""Hostile arguments to the public entry points: aliasing ``out=``, refusals that must leave
``out`` untouched, ``explain`` agreeing with ``scaled_mm``, meta tensors, non-bool flags, environment
variables and the FTZ probe under another default device.

Every refused call is checked to modify nothing: ``out`` keeps its shape, strides, storage offset and
bytes, and every input and scale keeps its bytes.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Callable

import numpy as np
import pytest
import torch

import mmaemu
from mmaemu import ops
from mmaemu.backends import _cpu as cpu_backend
from mmaemu.backends._triton import backend as triton_backend
from mmaemu._host import check_cpu_subnormals
from mmaemu.formats import Fp8Format, OutFormat
from mmaemu.platforms._splitk import Problem, SplitSource, resolve_splitk
from mmaemu.platforms._profiles import get_profile
from mmaemu.testing import assert_bitwise_equal

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
RR = mmaemu.ReferenceRejectsError
UF = mmaemu.UnsupportedFeatureError


def mat(m: int, k: int, dtype: torch.dtype = E4, value: float = 1.0) -> torch.Tensor:
    return torch.full((m, k), value).to(dtype)


def one() -> torch.Tensor:
    return torch.tensor(1.0)


def base(**overrides: Any) -> dict[str, Any]:
    """A valid call: M, N, K = 16, 16, 32, E4M3, bf16 output, explicit unsplit; every element 32."""
    kwargs: dict[str, Any] = dict(
        mat1=mat(16, 32), mat2=mat(16, 32).t(), scale_a=one(), scale_b=one(),
        out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1,
    )
    kwargs.update(overrides)
    return kwargs


def storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """A copy of every byte of ``t``'s storage."""
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage().clone())


def snapshot(t: torch.Tensor) -> tuple[Any, ...]:
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.requires_grad, storage_bytes(t))


def same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return a[:-1] == b[:-1] and torch.equal(a[-1], b[-1])


def split(kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    kw = dict(kwargs)
    return [kw.pop("mat1"), kw.pop("mat2"), kw.pop("scale_a"), kw.pop("scale_b")], kw


def outcome(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the test decides what is expected
        return exc


def call_both(kwargs: dict[str, Any], *, grad: bool = True) -> tuple[Any, mmaemu.CallPlan]:
    """``scaled_mm`` (its exception or result) and ``explain`` of the same arguments."""
    args, kw = split(kwargs)
    context = torch.enable_grad() if grad else torch.no_grad()
    with context, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = outcome(lambda: mmaemu.scaled_mm(*args, **kw))
        plan = mmaemu.explain(*args, **kw)
    return result, plan


def triton_usable_on_cpu() -> bool:
    return triton_backend.available(torch.device("cpu"))[0]


def ftz_on() -> Callable[[], None]:
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    return lambda: torch.set_flush_denormal(False)


def env(name: str, value: str) -> Callable[[pytest.MonkeyPatch], None]:
    def setup(monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(name, value)

    return setup


def offset_mat1(offset: int) -> torch.Tensor:
    return mat(16 * 32 + offset, 1).flatten()[offset:].view(16, 32)


# ---------------------------------------------------------------------------------------------------
# 1. A refused call leaves out (and everything else) untouched
# ---------------------------------------------------------------------------------------------------

ROWWISE = {"scale_a": torch.ones(16, 1), "scale_b": torch.ones(1, 16)}

#: (id, call overrides, expected exception class, message pattern, setup)
REFUSALS: list[tuple[str, dict[str, Any], type[BaseException], str, Any]] = [
    ("splitk-unknown", {"splitk": "auto", "profile": "hopper-te"}, mmaemu.SplitKUnknownError, "splitk=1 only if", None),
    ("misaligned-offset", {"mat1": offset_mat1(8)}, RR, "CUBLAS_STATUS_NOT_SUPPORTED", None),
    ("layout", {"mat2": mat(32, 16)}, RR, "row-major and column-major", None),
    ("shapes", {"mat2": mat(16, 48).t()}, RR, "cannot be multiplied", None),
    ("k-not-16", {"mat1": mat(16, 24), "mat2": mat(16, 24).t()}, RR, "divisible by 16", None),
    ("e4m3-to-e5m2", {"out_dtype": E5}, RR, "CUBLAS_STATUS_NOT_SUPPORTED", None),
    ("bias", {"bias": torch.zeros(16, dtype=torch.bfloat16), "out_dtype": torch.float8_e4m3fn}, UF,
     "bias with an FP8 output is not modelled", None),
    # row-wise calls torch refuses after resizing out (mmaemu leaves it as it was: _rowwise_checks [Note: row-wise out resize])
    ("row-wise-f16-output", {**ROWWISE, "out_dtype": torch.float16}, RR, "Only bf16 high precision output", None),
    ("row-wise-bias-1xn", {**ROWWISE, "bias": torch.zeros(1, 16, dtype=torch.bfloat16)}, RR,
     re.escape("Expected bias->dim() == 1 to be true"), None),
    ("row-wise-mat1-column-major", {**ROWWISE, "mat1": mat(32, 16).t()}, RR, re.escape("Expected a.stride(1) == 1"), None),
    ("row-wise-no-model", {**ROWWISE, "profile": "b200-mma-sync-experimental"}, UF, "row-wise scales run", None),
    ("row-wise-splitk", {**ROWWISE, "splitk": (2, "contiguous")}, ValueError, "does not split K here", None),
    ("row-wise-ada-padded", {**ROWWISE, "profile": "ada", "mat1": mat(16, 48)[:, :32]}, UF, "padded leading", None),
    ("requires-grad", {"scale_a": one().requires_grad_()}, UF, "inference-only", None),
    ("bias-requires-grad", {"bias": torch.zeros(16, dtype=torch.bfloat16, requires_grad=True)}, UF, "bias require grad",
     None),
    ("bias-past-storage", {"bias": torch.tensor(1.0, dtype=torch.bfloat16).expand(16)}, UF, "beyond", None),
    ("bias-misaligned", {"bias": torch.zeros(17, dtype=torch.bfloat16)[1:]}, UF, "16-byte", None),
    ("flush-to-zero", {}, mmaemu.MmaemuError, "flushes subnormal", "ftz"),
    ("bad-profile", {"profile": "h100"}, ValueError, "accepted: 'hopper'", None),
    ("profile-wrong-type", {"profile": 3}, TypeError, "profile", None),
    ("unknown-profile", {"profile": "hopper-h100pcie-torch"}, mmaemu.UnknownNameError, "is not a profile", None),
    ("bad-splitk", {"splitk": (2, "tree")}, ValueError, "accepted", None),
    ("bad-backend", {"backend": "gpu"}, ValueError, "accepted: 'auto'", None),
    ("backend-none", {"backend": None}, TypeError, "backend", None),
    ("fast-accum-str", {"use_fast_accum": "False"}, TypeError, "use_fast_accum", None),
    ("fast-accum-none", {"use_fast_accum": None}, TypeError, "use_fast_accum", None),
    ("fast-accum-numpy", {"use_fast_accum": np.bool_(True)}, TypeError, "use_fast_accum", None),
    ("scale-numpy", {"scale_a": np.float32(1.0)}, TypeError, "scale_a", None),
    ("env-profile", {"profile": None}, ValueError, "MMAEMU_PROFILE", env("MMAEMU_PROFILE", "garbage")),
    ("env-strict", {"splitk": "auto"}, ValueError, "MMAEMU_SPLITK_STRICT", env("MMAEMU_SPLITK_STRICT", "maybe")),
    ("cpu-backend-unavailable", {"backend": "cpu"}, mmaemu.BackendUnavailableError, "backend 'cpu'", "no-numba"),
]
if not triton_usable_on_cpu():
    REFUSALS.append(("triton-on-cpu", {"backend": "triton"}, mmaemu.BackendUnavailableError, "backend 'triton'", None))


def apply_setup(setup: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None] | None:
    if setup == "ftz":
        return ftz_on()
    if setup == "no-numba":
        monkeypatch.setattr(cpu_backend, "available", lambda device=None: (False, "numba is not importable: (test)"))
        return None
    if setup is not None:
        setup(monkeypatch)
    return None


OUTS: dict[str, Callable[[], torch.Tensor]] = {
    "right-shape": lambda: torch.full((16, 16), 7.0, dtype=torch.bfloat16),
    "to-resize": lambda: torch.full((4, 17), 7.0, dtype=torch.bfloat16),
    "empty": lambda: torch.empty(0, dtype=torch.bfloat16),
    "transposed": lambda: torch.full((16, 16), 7.0, dtype=torch.bfloat16).t(),
}


@pytest.mark.parametrize("out_kind", sorted(OUTS))
@pytest.mark.parametrize("case", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_refused_call_modifies_nothing(case: tuple[Any, ...], out_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name, overrides, error, pattern, setup = case
    if name.startswith("row-wise") and out_kind == "transposed" and error is not RR:
        # torch's row-wise checks refuse a column-major out before mmaemu's own refusals
        error, pattern = RR, re.escape("Expected out.stride(1) == 1 to be true")
    kwargs = base(**overrides)
    out = OUTS[out_kind]()
    kwargs["out"] = out
    if kwargs.get("out_dtype") not in (None, torch.bfloat16):
        kwargs["out"] = out = out.to(kwargs["out_dtype"])
    tensors = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    before = {k: snapshot(v) for k, v in tensors.items()}
    restore = apply_setup(setup, monkeypatch)
    try:
        result, plan = call_both(kwargs)
    finally:
        if restore:
            restore()
    assert isinstance(result, error), f"expected {error.__name__}, got {result!r}"
    assert re.search(pattern, str(result)), str(result)
    for name, t in tensors.items():
        assert same(snapshot(t), before[name]), f"{name} was modified by a refused call"
    assert plan.validation == (type(result).__name__, str(result))


def test_refused_call_emits_no_resize_warning() -> None:
    """torch's "An output with one or more elements was resized" warning only when out is resized."""
    kwargs = base(splitk="auto", profile="hopper-te", out=torch.zeros(4, 4, dtype=torch.bfloat16))
    args, kw = split(kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(mmaemu.SplitKUnknownError):
            mmaemu.scaled_mm(*args, **kw)
    assert not [w for w in caught if "was resized" in str(w.message)]
    assert tuple(kw["out"].shape) == (4, 4)


def test_accepted_out_is_resized_and_written() -> None:
    out = torch.full((4, 17), 7.0, dtype=torch.bfloat16)
    args, kw = split(base(out=out))
    with pytest.warns(UserWarning, match="was resized"):
        result = mmaemu.scaled_mm(*args, **kw)
    assert result is out and tuple(out.shape) == (16, 16) and out.stride() == (16, 1)
    assert_bitwise_equal(out, torch.full((16, 16), 32.0, dtype=torch.bfloat16))


# ---------------------------------------------------------------------------------------------------
# 1b. out= aliasing an input, a scale, bias or scale_result
# ---------------------------------------------------------------------------------------------------


def shared_buffer() -> torch.Tensor:
    """2048 bytes: bytes [1024, 1536) hold mat1 (16 x 32 E4M3 ones), the rest zeros."""
    buf = torch.zeros(2048, dtype=torch.uint8)
    buf[1024:1536] = mat(16, 32).view(torch.uint8).flatten()
    return buf


def aliasing_cases() -> dict[str, Callable[[], dict[str, Any]]]:
    def out_over_mat1() -> dict[str, Any]:
        buf = shared_buffer()
        mat1 = buf[1024:1536].view(E4).view(16, 32)
        out = buf[768:1280].view(torch.bfloat16).view(16, 16)  # bytes [768, 1280): half of it is mat1
        return base(mat1=mat1, out=out)

    def out_is_mat2() -> dict[str, Any]:
        buf = shared_buffer()
        mat2 = buf[1024:1536].view(E4).view(16, 32).t()
        out = buf[1024:1536].view(torch.bfloat16).view(16, 16)
        return base(mat2=mat2, out=out)

    def resize_grows_into_mat1() -> dict[str, Any]:
        buf = shared_buffer()
        mat1 = buf[1024:1536].view(E4).view(16, 32)
        out = buf.view(torch.bfloat16)[400:400]  # empty now; resized to 16 x 16 it covers bytes [800, 1312)
        return base(mat1=mat1, out=out)

    def out_holds_scale_a() -> dict[str, Any]:
        out = torch.zeros(16, 16)
        return base(scale_a=out[3, 5], out=out, out_dtype=torch.float32)

    def out_holds_scale_b() -> dict[str, Any]:
        out = torch.ones(16, 16)
        return base(scale_b=out.view(-1)[255:], out=out, out_dtype=torch.float32)

    def out_holds_scale_result() -> dict[str, Any]:
        out = torch.ones(16, 16)
        return base(scale_result=out[0, 0], out=out, out_dtype=torch.float32)

    def out_holds_bias() -> dict[str, Any]:
        out = torch.zeros(16, 16, dtype=torch.bfloat16)
        return base(bias=out[0], out=out)

    def k_zero_out_over_mat2() -> dict[str, Any]:
        buf = torch.zeros(64, 16, dtype=torch.float32)
        out = buf[:16]
        return base(mat1=mat(16, 0), mat2=mat(16, 0).t(), scale_a=buf[5, 5], out=out, out_dtype=torch.float32)

    return {f.__name__: f for f in (out_over_mat1, out_is_mat2, resize_grows_into_mat1, out_holds_scale_a,
                                    out_holds_scale_b, out_holds_scale_result, out_holds_bias, k_zero_out_over_mat2)}


ALIASING = aliasing_cases()


@pytest.mark.parametrize("name", sorted(ALIASING))
def test_out_overlapping_an_operand_is_refused(name: str) -> None:
    kwargs = ALIASING[name]()
    tensors = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    before = {k: snapshot(v) for k, v in tensors.items()}
    result, plan = call_both(kwargs)
    assert isinstance(result, RuntimeError) and not isinstance(result, RR), repr(result)
    assert "shares memory" in str(result) and "clone()" in str(result)
    for key, t in tensors.items():
        assert same(snapshot(t), before[key]), f"{key} was modified"
    assert plan.validation == (type(result).__name__, str(result))


def test_out_in_the_same_storage_but_apart_is_written() -> None:
    buf = shared_buffer()
    mat1 = buf[1024:1536].view(E4).view(16, 32)
    out = buf[0:512].view(torch.bfloat16).view(16, 16)
    grown = buf.view(torch.bfloat16)[768:768]  # resized to 16 x 16: bytes [1536, 2048), right after mat1
    args, kw = split(base(mat1=mat1, out=out))
    assert mmaemu.scaled_mm(*args, **kw) is out
    assert_bitwise_equal(out, torch.full((16, 16), 32.0, dtype=torch.bfloat16))
    args, kw = split(base(mat1=mat1, out=grown))
    assert mmaemu.scaled_mm(*args, **kw) is grown
    assert_bitwise_equal(grown, torch.full((16, 16), 32.0, dtype=torch.bfloat16))
    assert_bitwise_equal(mat1, mat(16, 32))


def test_m_zero_writes_nothing_so_overlap_is_harmless() -> None:
    out = torch.zeros(16, 16)
    args, kw = split(base(mat1=mat(0, 32), scale_a=out[0, 0], out=out[:0], out_dtype=torch.float32))
    result = mmaemu.scaled_mm(*args, **kw)
    assert tuple(result.shape) == (0, 16)


# ---------------------------------------------------------------------------------------------------
# 2. explain reports exactly what scaled_mm raises
# ---------------------------------------------------------------------------------------------------


def meta_call() -> dict[str, Any]:
    return base(mat1=mat(16, 32).to("meta"), mat2=mat(16, 32).to("meta").t(), scale_a=one().to("meta"),
                scale_b=one().to("meta"))


BAD_CALLS: dict[str, Callable[[], dict[str, Any]]] = {
    "backend-none": lambda: base(backend=None),
    "backend-int": lambda: base(backend=3),
    "meta": meta_call,
    "meta-backend-cpu": lambda: {**meta_call(), "backend": "cpu"},
    "out-requires-grad-leaf": lambda: base(out=torch.zeros(16, 16, dtype=torch.bfloat16, requires_grad=True)),
    "out-requires-grad-nonleaf": lambda: base(out=torch.zeros(16, 16, requires_grad=True).to(torch.bfloat16)),
    "unknown-profile": lambda: base(profile="hopper-h100pcie-torch"),
    "profile-list": lambda: base(profile=["hopper"]),
    "fast-accum-int": lambda: base(use_fast_accum=1),
    "splitk-str": lambda: base(splitk="1"),
    "splitk-bool": lambda: base(splitk=True),
    "splitk-numpy": lambda: base(splitk=np.int64(1)),
}
if not triton_usable_on_cpu():
    BAD_CALLS["triton-on-cpu"] = lambda: base(backend="triton")


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_explain_reports_what_scaled_mm_raises(name: str) -> None:
    result, plan = call_both(BAD_CALLS[name]())
    assert isinstance(result, Exception), f"{name}: scaled_mm accepted the call"
    assert plan.validation == (type(result).__name__, str(result))
    assert not plan.ok and plan.backend is None


def test_explain_reports_an_unavailable_cpu_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_backend, "available", lambda device=None: (False, "numba is not importable: (test)"))
    result, plan = call_both(base(backend="cpu"))
    assert isinstance(result, mmaemu.BackendUnavailableError) and "backend='auto'" in str(result)
    assert plan.validation == (type(result).__name__, str(result))


def test_out_requiring_grad() -> None:
    leaf = torch.zeros(16, 16, dtype=torch.bfloat16, requires_grad=True)
    result, _ = call_both(base(out=leaf))
    assert isinstance(result, RR) and "functions with out=... arguments" in str(result)
    nonleaf = torch.zeros(16, 16, requires_grad=True).to(torch.bfloat16)
    result, _ = call_both(base(out=nonleaf))
    assert isinstance(result, UF) and "torch.no_grad()" in str(result) and "out" in str(result)
    # without grad mode torch writes it, resizing it if needed
    for out in (torch.zeros(3, 3, dtype=torch.bfloat16, requires_grad=True), leaf):
        result, plan = call_both(base(out=out), grad=False)
        assert result is out and plan.ok
        assert tuple(out.shape) == (16, 16) and out.requires_grad
        assert_bitwise_equal(out.detach(), torch.full((16, 16), 32.0, dtype=torch.bfloat16))


# ---------------------------------------------------------------------------------------------------
# 3. meta tensors
# ---------------------------------------------------------------------------------------------------


def test_meta_tensors_raise_a_clear_error() -> None:
    result, plan = call_both(meta_call())
    assert isinstance(result, ValueError) and "'meta' device" in str(result), repr(result)
    assert "item()" not in str(result)
    assert plan.validation == (type(result).__name__, str(result))
    a = mat(16, 32).to("meta")
    with pytest.raises(ValueError, match="'meta' device"):
        mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1)
    args, kw = split(meta_call())
    # under emulate() a meta call is a trace: refused as such, naming what traces emulated (docs/limitations.md)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="meta tensors.*mmaemu.ops.scaled_mm"), \
            mmaemu.emulate(profile="hopper", splitk=1):
        torch._scaled_mm(*args, out_dtype=torch.bfloat16, use_fast_accum=True)


def test_operator_fake_implementation_still_serves_meta_tensors() -> None:
    args, _ = split(meta_call())
    y = ops.scaled_mm(*args, out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1)
    assert y.device.type == "meta" and tuple(y.shape) == (16, 16) and y.dtype == torch.bfloat16


# ---------------------------------------------------------------------------------------------------
# 4. use_fast_accum must be a bool everywhere
# ---------------------------------------------------------------------------------------------------

NOT_BOOLS = ["False", "True", None, 0, 1, np.bool_(False), torch.tensor(True)]


@pytest.mark.parametrize("value", NOT_BOOLS, ids=repr)
def test_accumulate_refuses_non_bool_fast_accum(value: Any) -> None:
    a = mat(2, 32)
    with pytest.raises(TypeError, match="use_fast_accum.*must be bool"):
        mmaemu.accumulate(a, a, use_fast_accum=value, splitk=1)


@pytest.mark.parametrize("value", NOT_BOOLS, ids=repr)
def test_operator_refuses_non_bool_fast_accum(value: Any) -> None:
    args, _ = split(base())
    with pytest.raises(TypeError, match="use_fast_accum.*must be bool"):
        ops.scaled_mm(*args, out_dtype=torch.bfloat16, use_fast_accum=value, splitk=1)


@pytest.mark.parametrize("value", NOT_BOOLS, ids=repr)
def test_emulate_refuses_non_bool_fast_accum(value: Any) -> None:
    args, _ = split(base())
    with pytest.raises(TypeError, match="use_fast_accum.*must be bool"), mmaemu.emulate(profile="hopper", splitk=1):
        torch._scaled_mm(*args, out_dtype=torch.bfloat16, use_fast_accum=value)


def test_operator_and_emulate_refuse_bad_backend_and_profile_types() -> None:
    args, _ = split(base())
    with pytest.raises(TypeError, match="backend"):
        ops.scaled_mm(*args, out_dtype=torch.bfloat16, splitk=1, backend=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="profile"):
        ops.scaled_mm(*args, out_dtype=torch.bfloat16, splitk=1, profile=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="backend"):
        mmaemu.emulate(backend=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="profile"):
        mmaemu.emulate(profile=["hopper"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="backend"):
        mmaemu.accumulate(mat(2, 32), mat(2, 32), use_fast_accum=True, splitk=1, backend=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["float16", np.float16, None, 16], ids=repr)
def test_accumulate_refuses_an_accumulator_that_is_not_a_dtype(value: Any) -> None:
    a = mat(2, 32)
    before = a.view(torch.uint8).clone()
    with pytest.raises(TypeError, match="accumulator must be a torch.dtype"):
        mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1, preset="ada", accumulator=value)
    assert torch.equal(a.view(torch.uint8), before)


def test_accumulate_with_an_fp16_accumulator_refuses_before_computing() -> None:
    """Each refusal of the fp16 accumulator's own checks, and the shared ones, before anything runs."""
    a = mat(2, 32)
    with pytest.raises(ValueError, match="torch.float32 or torch.float16, got torch.float64"):
        mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1, preset="ada", accumulator=torch.float64)
    with pytest.raises(ValueError, match="meta"):
        mmaemu.accumulate(a.to("meta"), a.to("meta"), use_fast_accum=True, splitk=1, preset="ada", accumulator=torch.float16)
    grad = torch.ones(2, 32, dtype=torch.float16, requires_grad=True)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="grad"):
        mmaemu.accumulate(grad, grad, use_fast_accum=True, splitk=1, preset="volta", accumulator=torch.float16)
    with pytest.raises(TypeError, match="backend"):
        mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1, preset="ada", accumulator=torch.float16, backend=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1, preset="ada", profile="hopper", accumulator=torch.float16)


def test_accumulate_refuses_non_tensors_with_type_error() -> None:
    with pytest.raises(TypeError, match="a must be a 2-D tensor .FP8, float16, bfloat16 or tf32 float32"):
        mmaemu.accumulate(np.ones((2, 32)), mat(2, 32), use_fast_accum=True, splitk=1)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# 5. environment variables
# ---------------------------------------------------------------------------------------------------


def envelope_problem() -> Problem:
    """A shape only the H100 envelope decides (S = 1); strict mode makes it unknown."""
    return Problem(4095, 4097, 3000, Fp8Format.E4M3, Fp8Format.E4M3, OutFormat.BFLOAT16, True)


def decide_quietly() -> mmaemu.SplitDecision:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
        return resolve_splitk(get_profile("hopper"), envelope_problem())


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "True", " yes ", "on", "On\n"])
def test_splitk_strict_on_spellings(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", value)
    with pytest.raises(mmaemu.SplitKUnknownError):
        decide_quietly()


@pytest.mark.parametrize("value", ["0", "false", "FALSE", "no", " off ", "", "  "])
def test_splitk_strict_off_spellings(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", value)
    assert decide_quietly().source is SplitSource.ENVELOPE


@pytest.mark.parametrize("value", ["maybe", "2", "yess", "-1"])
def test_splitk_strict_garbage_raises(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", value)
    with pytest.raises(ValueError, match=r"MMAEMU_SPLITK_STRICT=.*1, true, yes, on.*0, false, no, off"):
        decide_quietly()


def test_profile_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMAEMU_PROFILE", "garbage")
    with pytest.raises(ValueError, match=r"MMAEMU_PROFILE='garbage'.*'hopper'.*'ada'"):
        get_profile(None)
    monkeypatch.setenv("MMAEMU_PROFILE", "")
    assert get_profile(None).name == "hopper"
    monkeypatch.setenv("MMAEMU_PROFILE", " ada ")
    assert get_profile(None).name == "ada"
    monkeypatch.setenv("MMAEMU_PROFILE", "hopper-h100pcie-torch")  # a name of no profile: the one lookup error
    with pytest.raises(mmaemu.UnknownNameError, match="MMAEMU_PROFILE='hopper-h100pcie-torch'"):
        get_profile(None)


def test_profile_of_wrong_type() -> None:
    for value in (3, ["hopper"], b"hopper"):
        with pytest.raises(TypeError, match="profile"):
            get_profile(value)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# 6. the FTZ probe runs on the CPU whatever the default device
# ---------------------------------------------------------------------------------------------------


def test_subnormal_probe_ignores_the_default_device() -> None:
    torch.set_default_device("meta")
    try:
        check_cpu_subnormals()
        if torch.set_flush_denormal(True):
            try:
                with pytest.raises(mmaemu.MmaemuError, match="flushes subnormal"):
                    check_cpu_subnormals()
            finally:
                torch.set_flush_denormal(False)
    finally:
        torch.set_default_device(None)
    assert torch.empty(1).device.type == "cpu"


def test_accumulate_checks_subnormals() -> None:
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    try:
        with pytest.raises(mmaemu.MmaemuError, match="flushes subnormal"):
            mmaemu.accumulate(mat(2, 32), mat(2, 32), use_fast_accum=True, splitk=1)
    finally:
        torch.set_flush_denormal(False)
