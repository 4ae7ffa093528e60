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
