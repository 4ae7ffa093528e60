"""Backend selection: what ``backend="auto"`` picks, and why it falls back."""

from __future__ import annotations

import warnings

import pytest
import torch

import mmaemu
from mmaemu import backends
from mmaemu.backends import Backend, auto_fallback, cpu, resolve_backend


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


def test_the_capability_table() -> None:
    """What ``supports`` answers, and what it refuses (the table behind auto, info and the test fixture)."""
    from mmaemu.backends import supports
    from mmaemu.presets import B200_MMA_SYNC, HOPPER

    ref = supports("reference", HOPPER, (torch.float8_e4m3fn, torch.float8_e5m2), "cpu")
    assert ref.usable and ref.native and bool(ref)
    assert not supports("reference", HOPPER, (), "meta")
    assert not supports(Backend.CPU, HOPPER, (), "cuda")  # CPU tensors only
    bad = supports("cpu", HOPPER, (torch.float64,), "cpu")
    assert not bad and "FP8" in bad.reason and "tf32" in bad.reason
    from mmaemu.presets import instruction_preset

    zoo = instruction_preset("hopper", torch.bfloat16)
    assert supports("reference", zoo, (torch.bfloat16,), "cpu").native
    if cpu.available()[0]:
        assert supports("cpu", zoo, (torch.bfloat16,), "cpu").native
    triton_zoo = supports("triton", zoo, (torch.bfloat16,), "cpu")
    assert not triton_zoo.native and "zoo formats (fp16, bf16, tf32) are delegated" in triton_zoo.reason
    if cpu.available()[0]:
        assert supports("cpu", HOPPER, (), "cpu").native
        delegated = supports("cpu", B200_MMA_SYNC, (), "cpu")  # rounds to nearest: the reference backend runs it
        assert delegated.usable and not delegated.native and "delegated to the reference backend" in delegated.reason
    with pytest.raises(ValueError, match="is not a backend"):
        supports("gpu", HOPPER, (), "cpu")
    with pytest.raises(TypeError, match="backend must be a string"):
        supports(3, HOPPER, (), "cpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is not a torch device"):
        supports("cpu", HOPPER, (), "nonsense")
