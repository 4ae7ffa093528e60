"""Hostile registrations: ``register_backend``, ``unregister_backend``, ``Backend.named`` and ``Executor``.

Every refusal raises a clear error where the backend is defined or registered (not when it is first
called), and leaves the registry as it was: the names ``backend=`` accepts, the concrete backends and
``auto``'s order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch

from mmaemu._accumulation import AccumulationPlan
from mmaemu.backends import (
    CONCRETE,
    EXECUTORS,
    Accumulated,
    Backend,
    Executor,
    _capabilities as capabilities,
    _cpu as cpu,
    parse_backend,
    _reference as reference,
    register_backend,
    unregister_backend,
)
from mmaemu.errors import UnknownNameError
from mmaemu.formats import FP8_DTYPES
from mmaemu.presets import Preset


def _registry() -> tuple[object, ...]:
    return tuple(Backend), tuple(CONCRETE), dict(EXECUTORS), capabilities.auto_order("cpu"), \
        capabilities.auto_order("cuda")


class _Whole(Executor):
    """A backend that keeps the contract (never registered for long here)."""

    def available(self, device: torch.device) -> tuple[bool, str]:
        return True, "whole"

    def expresses(self, preset: Preset, dtypes: tuple[torch.dtype, ...] = ()) -> bool:
        return True

    def accumulate(self, a: torch.Tensor, b: torch.Tensor, preset: Preset, plan: AccumulationPlan,
                   **options: Any) -> Accumulated:
        return Accumulated(reference.accumulate(a, b, preset, plan), False)

    def selftest_failure(self, device: torch.device, preset: Preset | None = None) -> str | None:
        return None


FP8 = frozenset(FP8_DTYPES)


@pytest.mark.parametrize("left_out", ["available", "expresses", "accumulate", "selftest_failure"])
def test_a_backend_that_leaves_out_part_of_the_contract_fails_where_it_is_defined(left_out: str) -> None:
    partial = type("Partial", (Executor,), {k: v for k, v in vars(_Whole).items() if k != left_out})
    with pytest.raises(TypeError, match=f"abstract.*{left_out}"):
        partial(Backend.named("hostile"), ("cpu",), FP8)
    with pytest.raises(TypeError):
        _Whole(Backend.named("hostile"), ("cpu",))  # type: ignore[call-arg]  # no formats


BAD_FIELDS: list[tuple[str, Callable[[], Executor], str]] = [
    ("auto as a name", lambda: _Whole(Backend.AUTO, ("cpu",), FP8), "a backend's name"),
    ("a string name", lambda: _Whole("hostile", ("cpu",), FP8), "a backend's name"),  # type: ignore[arg-type]
    ("None as a name", lambda: _Whole(None, ("cpu",), FP8), "a backend's name"),  # type: ignore[arg-type]
    ("devices as a list", lambda: _Whole(Backend.named("hostile"), ["cpu"], FP8),  # type: ignore[arg-type]
     "tuple of device types"),
    ("a device string", lambda: _Whole(Backend.named("hostile"), "cpu", FP8),  # type: ignore[arg-type]
     "tuple of device types"),
    ("a device with an index", lambda: _Whole(Backend.named("hostile"), ("cuda:0",), FP8), "tuple of device types"),
    ("a torch.device", lambda: _Whole(Backend.named("hostile"), (torch.device("cpu"),), FP8),  # type: ignore[arg-type]
     "tuple of device types"),
    ("no formats", lambda: _Whole(Backend.named("hostile"), ("cpu",), frozenset()), "non-empty frozenset"),
    ("float64", lambda: _Whole(Backend.named("hostile"), ("cpu",), frozenset({torch.float64})), "non-empty frozenset"),
    ("formats as a set", lambda: _Whole(Backend.named("hostile"), ("cpu",), set(FP8_DTYPES)),  # type: ignore[arg-type]
     "non-empty frozenset"),
    ("formats as names", lambda: _Whole(Backend.named("hostile"), ("cpu",), frozenset({"e4m3"})),  # type: ignore[arg-type]
     "non-empty frozenset"),
    ("a hint that is not text", lambda: _Whole(Backend.named("hostile"), ("cpu",), FP8, 3),  # type: ignore[arg-type]
     "install_hint must be a string or None"),
]


@pytest.mark.parametrize(("case", "make", "message"), BAD_FIELDS, ids=[c[0] for c in BAD_FIELDS])
def test_an_executor_with_a_bad_field_is_refused_when_built(case: str, make: Callable[[], Executor],
                                                            message: str) -> None:
    with pytest.raises(TypeError, match=message):
        make()


@pytest.mark.parametrize("value", ["", "CPU", "madeup-2", "2cpu", "cpu ", "cpu\n", "cpu:0", "c\u00e9pu", "cpu\x00"])
def test_a_backend_name_is_one_lower_case_word(value: str) -> None:
    before = _registry()
    with pytest.raises(ValueError, match="one lower-case word"):
        Backend.named(value)
    assert _registry() == before


@pytest.mark.parametrize("value", [None, 3, b"cpu", Backend])
def test_a_backend_name_is_a_string(value: object) -> None:
    with pytest.raises(TypeError, match="a backend name must be a string"):
        Backend.named(value)  # type: ignore[arg-type]


def test_names_are_one_object_each_and_immutable() -> None:
    assert Backend.named("cpu") is Backend.CPU and Backend(Backend.CPU) is Backend.CPU
    with pytest.raises(AttributeError, match="immutable"):
        Backend.CPU.value = "triton"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        Backend.CPU.other = 1  # type: ignore[attr-defined]
    assert Backend.CPU.value == "cpu"
    with pytest.raises(ValueError, match="is not a valid Backend"):
        Backend(3)  # type: ignore[arg-type]


def test_an_unregistered_name_is_not_a_backend() -> None:
    with pytest.raises(UnknownNameError, match="'stranger' is not a backend"):
        parse_backend(Backend.named("stranger"))  # a name, but no backend of that name is registered
    with pytest.raises(ValueError, match="is not a valid Backend"):
        Backend("stranger")


@pytest.mark.parametrize("thing", [None, "cpu", cpu, Backend.CPU, object(), _Whole])
def test_register_backend_takes_an_executor_only(thing: object) -> None:
    before = _registry()
    with pytest.raises(TypeError, match="register_backend takes an Executor"):
        register_backend(thing)  # type: ignore[arg-type]
    assert _registry() == before


def test_a_name_is_registered_once() -> None:
    before = _registry()
    for taken in (reference.EXECUTOR, cpu.EXECUTOR, _Whole(Backend.CPU, ("cpu",), FP8)):
        with pytest.raises(ValueError, match="registered already"):
            register_backend(taken)
    assert _registry() == before and EXECUTORS[Backend.CPU] is cpu.EXECUTOR
    register_backend(_Whole(Backend.named("hostile"), ("cpu",), FP8))
    try:
        with pytest.raises(ValueError, match="a backend named 'hostile' is registered already"):
            register_backend(_Whole(Backend.named("hostile"), ("cuda",), FP8))
        assert capabilities.auto_order("cuda") == (Backend.TRITON, Backend.REFERENCE)
    finally:
        unregister_backend("hostile")
    assert _registry() == before


@pytest.mark.parametrize(("name", "error", "message"), [
    ("reference", ValueError, "ships with mmaemu"),
    ("cpu", ValueError, "ships with mmaemu"),
    (Backend.TRITON, ValueError, "ships with mmaemu"),
    ("auto", ValueError, "ships with mmaemu"),
    ("nothing", UnknownNameError, "'nothing' is not a backend"),
    ("CPU", UnknownNameError, "'CPU' is not a backend"),
    (3, TypeError, "backend must be a string"),
    (None, TypeError, "backend must be a string"),
])
def test_unregister_backend_refuses_the_shipped_and_the_unknown(name: object, error: type[Exception],
                                                                message: str) -> None:
    before = _registry()
    with pytest.raises(error, match=message):
        unregister_backend(name)  # type: ignore[arg-type]
    assert _registry() == before


def test_an_executor_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        cpu.EXECUTOR.auto_devices = ("cuda",)  # type: ignore[misc]
    assert capabilities.auto_order("cpu") == (Backend.CPU, Backend.REFERENCE)
