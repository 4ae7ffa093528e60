"""Backend selection: what ``backend="auto"`` picks, and why it falls back; a made-up backend added as one
module and one registration, and picked up by every list (no backend is special-cased)."""

from __future__ import annotations

import types
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import mmaemu
from mmaemu import backends
from mmaemu.backends import (
    CONCRETE,
    Backend,
    auto_fallback,
    _capabilities as capabilities,
    _cpu as cpu,
    parse_backend,
    register_backend,
    require,
    resolve_backend,
    supports,
    unregister_backend,
)
from mmaemu.errors import UnknownNameError
from mmaemu.testing import assert_bitwise_equal


def _call_args() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    x = torch.ones(16, 32).to(torch.float8_e4m3fn)
    w = torch.ones(16, 32).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    return x, w.t(), one, one  # small M, N: the split is passed explicitly (no table row decides)


@pytest.mark.skipif(not cpu.available()[0], reason="numba is not installed")
def test_auto_takes_the_compiled_cpu_backend_for_cpu_tensors() -> None:
    assert resolve_backend("auto", torch.device("cpu")) is Backend.CPU
    assert auto_fallback(torch.device("cpu")) is None
    plan = mmaemu.explain(*_call_args(), out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1)
    assert (plan.backend, plan.fallback) == ("cpu", None)


def test_auto_falls_back_to_reference_when_numba_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "available", lambda device=None: (False, "numba is not importable: test"))
    monkeypatch.setattr(backends, "_WARNED", set())
    with pytest.warns(mmaemu.BackendFallbackWarning, match="backend 'cpu' is unavailable: numba is not importable") \
            as caught:
        assert resolve_backend("auto", torch.device("cpu")) is Backend.REFERENCE
    assert len(caught) == 1 and "pip install numba" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per device and process
        assert resolve_backend("auto", torch.device("cpu")) is Backend.REFERENCE
    plan = mmaemu.explain(*_call_args(), out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1)
    assert plan.backend == "reference"
    assert plan.fallback == "backend 'cpu': numba is not importable: test"


def test_named_backends_are_taken_as_named() -> None:
    assert resolve_backend("reference", torch.device("cpu")) is Backend.REFERENCE
    assert resolve_backend(Backend.CPU, torch.device("cpu")) is Backend.CPU
    with pytest.raises(ValueError, match="accepted: 'auto', 'reference', 'cpu'"):
        resolve_backend("gpu", torch.device("cpu"))


def test_a_fresh_import_registers_the_operator_and_runs_cpu_tensors_on_the_cpu_backend() -> None:
    """What a new user gets from ``pip install .`` and ``import mmaemu`` (numba is a dependency)."""
    import subprocess
    import sys

    code = (
        "import torch, mmaemu\n"
        "assert hasattr(torch.ops.mmaemu, 'scaled_mm'), 'import mmaemu must register mmaemu::scaled_mm'\n"
        "from mmaemu.backends import Backend, resolve_backend\n"
        "assert resolve_backend('auto', torch.device('cpu')) is Backend.CPU\n"
        "x = torch.ones(16, 32).to(torch.float8_e4m3fn)\n"
        "plan = mmaemu.explain(x, x.t(), torch.tensor(1.0), torch.tensor(1.0), use_fast_accum=True, splitk=1,\n"
        "                      out_dtype=torch.float32)\n"
        "assert plan.backend == 'cpu' and plan.fallback is None, plan\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


# ---- a made-up backend: one module (tests/madeup_backend.py) and one registration


@pytest.fixture
def madeup(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """The made-up backend, registered for the test (and unregistered after it)."""
    import madeup_backend

    monkeypatch.setattr(backends, "_WARNED", set())
    monkeypatch.setattr(madeup_backend, "SELFTEST_FAILURE", None)
    register_backend(madeup_backend.EXECUTOR)
    try:
        yield madeup_backend
    finally:
        unregister_backend("madeup")


def _all_codes(rows: int, k: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Every FP8 code, NaN and Inf codes included."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (rows, k), generator=gen, dtype=torch.int32).to(torch.uint8).view(dtype)


def test_a_registered_backend_is_a_name_backend_accepts(madeup: types.ModuleType) -> None:
    name = madeup.NAME
    assert parse_backend("madeup") is name and Backend("madeup") is name and name in CONCRETE
    assert [b.value for b in Backend] == ["auto", "reference", "cpu", "triton", "madeup"]
    assert capabilities.auto_order("cpu") == (Backend.CPU, name, Backend.REFERENCE)  # after those registered before
    assert capabilities.auto_order("cuda") == (Backend.TRITON, Backend.REFERENCE)
    a, b = _all_codes(9, 300, torch.float8_e5m2, 1), _all_codes(7, 300, torch.float8_e4m3fn, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
        for split in (1, (3, "contiguous"), (5, "pairwise")):
            for fast in (True, False):
                got = mmaemu.accumulate(a, b, use_fast_accum=fast, splitk=split, backend="madeup")
                want = mmaemu.accumulate(a, b, use_fast_accum=fast, splitk=split, backend="reference")
                assert_bitwise_equal(got, want)  # the Inf codes it zeroed recomputed, the NaN rule applied
    plan = mmaemu.explain(*_call_args(), out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1, backend="madeup")
    assert (plan.validation, plan.backend, plan.fallback) == ("ok", "madeup", None)
    x, w, one, _ = _call_args()
    assert_bitwise_equal(mmaemu.scaled_mm(x, w, one, one, out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1,
                                          backend="madeup"),
                         mmaemu.scaled_mm(x, w, one, one, out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1,
                                          backend="reference"))


def test_the_capability_table_and_info_list_a_registered_backend(madeup: types.ModuleType,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from mmaemu._cli import main
    from mmaemu.presets import B200_MMA_SYNC, HOPPER, instruction_preset

    assert supports("madeup", HOPPER, (torch.float8_e5m2,), "cpu").native
    delegated = supports("madeup", B200_MMA_SYNC, (), "cpu")  # rounds to nearest: not expressed
    assert delegated.usable and not delegated.native and "'b200_mma_sync' is delegated" in delegated.reason
    zoo = supports("madeup", instruction_preset("hopper", torch.float16), (torch.float16,), "cpu")
    assert zoo.usable and not zoo.native and "do not decode fp16" in zoo.reason
    assert not supports("madeup", HOPPER, (), "meta") and not supports("madeup", None, (), "cuda")
    assert main(["info"]) == 0
    assert "madeup" in capsys.readouterr().out
    # the zoo formats and a preset it does not express are delegated to the reference backend whole
    h = torch.randn(5, 40).to(torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
        assert_bitwise_equal(mmaemu.accumulate(h, h, use_fast_accum=True, preset="hopper", backend="madeup"),
                             mmaemu.accumulate(h, h, use_fast_accum=True, preset="hopper", backend="reference"))
    a = _all_codes(4, 64, torch.float8_e4m3fn, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
        assert_bitwise_equal(
            mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1, preset="b200_mma_sync", backend="madeup"),
            mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1, preset="b200_mma_sync", backend="reference"))


def test_auto_and_require_ask_a_registered_backend_as_any_other(madeup: types.ModuleType,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """No backend is special-cased: a registered one is auto's next choice and is held to its self-test."""
    cpu_device = torch.device("cpu")
    monkeypatch.setattr(cpu, "available", lambda device=None: (False, "numba is not importable: test"))
    with pytest.warns(mmaemu.BackendFallbackWarning, match="falls back to backend 'madeup' on cpu: backend 'cpu' is "
                                                           "unavailable: numba is not importable: test"):
        assert resolve_backend("auto", cpu_device) is madeup.NAME
    assert auto_fallback(cpu_device) is None
    plan = mmaemu.explain(*_call_args(), out_dtype=torch.bfloat16, use_fast_accum=True, splitk=1)
    assert plan.backend == "madeup"
    monkeypatch.setattr(madeup, "SELFTEST_FAILURE", "self-test failed on cpu: made up")
    assert resolve_backend("auto", cpu_device) is Backend.REFERENCE  # warned once per device already
    assert auto_fallback(cpu_device) == ("backend 'cpu': numba is not importable: test; backend 'madeup': self-test "
                                         "failed on cpu: made up")
    with pytest.raises(mmaemu.BackendUnavailableError, match="backend 'madeup' self-test failed on cpu: made up"):
        require(madeup.NAME, cpu_device, None)


def test_the_differential_suite_runs_a_registered_backend(madeup: types.ModuleType) -> None:
    """The suite's backends are the capability table's (tests/conftest.py): a backend registered before the
    tests are collected is compared with the reference backend on every configuration; here a sample."""
    import importlib.util

    import conftest

    assert "madeup" in conftest._cpu_backends()
    spec = importlib.util.spec_from_file_location("differential", Path(__file__).with_name("test_differential.py"))
    assert spec is not None and spec.loader is not None
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    for config in suite.CONFIGS[::23]:  # every preset, format pair, accumulation, split and data kind
        suite.test_backend_equals_reference_backend("madeup", *config)
    for config in suite.ZOO_CONFIGS[::16]:
        suite.test_zoo_backend_equals_reference_backend("madeup", *config)


def test_unregistering_removes_every_trace(madeup: types.ModuleType) -> None:
    assert unregister_backend("madeup") is madeup.EXECUTOR
    with pytest.raises(UnknownNameError, match="'madeup' is not a backend; accepted: 'auto', 'reference', 'cpu', "
                                               "'triton'$"):
        parse_backend("madeup")
    assert madeup.NAME not in CONCRETE and capabilities.auto_order("cpu") == (Backend.CPU, Backend.REFERENCE)
    with pytest.raises(ValueError, match="is not a valid Backend"):
        Backend("madeup")
    with pytest.raises(UnknownNameError):
        mmaemu.accumulate(_all_codes(2, 32, torch.float8_e4m3fn, 4), _all_codes(2, 32, torch.float8_e4m3fn, 5),
                          use_fast_accum=True, splitk=1, backend="madeup")
    register_backend(madeup.EXECUTOR)  # for the fixture's unregistration
