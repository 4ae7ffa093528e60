"""The Triton backend's self-test, its cache, and how ``backend=`` reacts to it.

The self-test itself runs in Triton's CPU interpreter (CI has no GPU); routing for CUDA devices is
tested by substituting self-test reports (no CUDA tensor is ever created).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before mmaemu imports the kernels

import pytest
import torch

import mmaemu
from mmaemu import backends
from mmaemu.backends import Backend, auto_fallback, resolve_backend
from mmaemu.backends._triton import backend as triton_backend
from mmaemu.backends._triton import _native as triton_native
from mmaemu.backends._triton import _selftest as triton_selftest
from mmaemu.backends._triton._selftest import KernelResult, SelfTestReport
from mmaemu._cli import main
from mmaemu.errors import BackendFallbackWarning, BackendUnavailableError
from mmaemu.presets import Preset

REPO = Path(__file__).resolve().parents[2]
HAVE_TRITON = triton_backend.available()[0]
needs_triton = pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed (pip install triton)")
CUDA0 = torch.device("cuda", 0)


def _failed_report(key: str) -> SelfTestReport:
    return SelfTestReport(key, (
        KernelResult("chain_gemm[B=32,F=13] tile 64x64/8w", True, "6 problems bit-exact"),
        KernelResult("chain_gemm[B=16,F=13] tile 64x64/8w", False, "case 'x': 3 of 144 outputs differ from the reference backend"),
    ))


@pytest.fixture
def clean_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Isolate the self-test cache and the once-per-device warning set."""
    monkeypatch.setattr(triton_selftest, "_REPORTS", dict(triton_selftest._REPORTS))
    monkeypatch.setattr(triton_selftest, "_VARIANTS", dict(triton_selftest._VARIANTS))
    monkeypatch.setattr(backends, "_WARNED", set())


@pytest.fixture
def few_cases(monkeypatch: pytest.MonkeyPatch, clean_state: None) -> None:
    """Two of the self-test's problems (one chain; three parts, so a parallel-chains launch too), for the
    tests of what the self-test does with a result: it runs every case with every launch, so each refresh
    of the full self-test costs about half a minute per kernel in the interpreter, and these tests are
    about the mechanism, not the problems (the full set runs in the tests above and below that do not use
    this fixture, in every xdist worker's first Triton call, and in the device check's dry run)."""
    one_chain = next(c for c in triton_selftest.CASES if c.split.parts == 1 and not c.compiled_only)
    parts = next(c for c in triton_selftest.CASES if c.split.parts > 1 and not c.compiled_only)
    monkeypatch.setattr(triton_selftest, "CASES", (one_chain, parts))


@needs_triton
def test_selftest_passes_in_the_interpreter_and_is_cached() -> None:
    if not triton_backend.interpreting():  # pragma: no cover
        pytest.skip("kernels compiled for a GPU")
    report = triton_selftest.selftest("cpu")
    assert report.passed, report.summary()
    assert [k.kernel for k in report.kernels] == ["chain_gemm_rz[B=32,F=13] tile 64x64/1w",
                                                  "chain_gemm_rz[B=16,F=13] tile 64x64/1w"]
    assert report.summary() == "all 2 kernels passed"
    assert triton_selftest.selftest(torch.device("cpu")) is report  # once per device and process
    assert triton_selftest.cached_report(torch.device("cpu")) is report


@needs_triton
def test_a_broken_kernel_fails_the_selftest(monkeypatch: pytest.MonkeyPatch, few_cases: None) -> None:
    real = triton_backend.accumulate

    def off_by_one_ulp(a, b, preset, plan, config=None, launch=None):  # type: ignore[no-untyped-def]
        out = real(a, b, preset, plan, config, launch=launch)
        if preset.block_size == 16:  # break only the ada specialisation
            out = out._replace(values=(out.values.view(torch.int32) ^ 1).view(torch.float32))
        return out

    monkeypatch.setattr(triton_backend, "accumulate", off_by_one_ulp)
    report = triton_selftest.selftest("cpu", refresh=True)
    assert not report.passed
    (bad,) = report.failed()
    assert bad.kernel == "chain_gemm_rz[B=16,F=13] tile 64x64/1w"
    assert "outputs differ from the reference backend" in bad.reason and "expected 0x" in bad.reason
    assert "chain_gemm_rz[B=16,F=13]" in report.summary()


@needs_triton
def test_a_fault_only_in_the_parallel_chains_launch_fails_the_selftest(monkeypatch: pytest.MonkeyPatch,
                                                                        few_cases: None) -> None:
    """The self-test runs every case with every launch a call may use, the parallel-chains one included."""
    real = triton_backend.accumulate

    def broken_when_parallel(a, b, preset, plan, config=None, launch=None):  # type: ignore[no-untyped-def]
        out = real(a, b, preset, plan, config, launch=launch)
        if launch is not None and launch.parallel_chains and len(plan.parts) > 1:
            out = out._replace(values=(out.values.view(torch.int32) ^ 1).view(torch.float32))
        return out

    monkeypatch.setattr(triton_backend, "accumulate", broken_when_parallel)
    report = triton_selftest.selftest("cpu", refresh=True)
    assert not report.passed and "parallel chains True" in report.summary(), report.summary()


@needs_triton
def test_a_failing_sm90_formulation_is_switched_off_and_the_exact_one_runs(monkeypatch: pytest.MonkeyPatch,
                                                                          few_cases: None) -> None:
    """Where the GPU's own instruction disagrees with the reference in the self-test, it is never used on
    that device: the exactly-defined formulation is self-tested and runs instead. (Here the interpreter
    plays the sm_90 GPU: its tl.dot is a float matmul, which the adversarial cases catch.)"""
    if not triton_backend.interpreting():  # pragma: no cover
        pytest.skip("kernels compiled for a GPU")
    off: set[str] = set()

    def applies(preset: Preset, device: torch.device) -> bool:
        return preset.block_size == 32 and str(device) not in off

    for module in (triton_backend, triton_native):
        monkeypatch.setattr(module, "native_applies", applies)
    monkeypatch.setattr(triton_native, "_NATIVE_OFF", off)
    result = triton_selftest.selftest_kernel("cpu", mmaemu.presets.HOPPER, refresh=True)
    assert off == {"cpu"}
    assert result.passed and result.kernel.startswith("chain_gemm_rz[B=32,F=13]"), result
    assert "the sm_90 formulation is off on cpu" in result.reason and "differ from the reference" in result.reason


@needs_triton
def test_a_registered_presets_kernel_is_selftested_on_first_use(monkeypatch: pytest.MonkeyPatch,
                                                                 few_cases: None) -> None:
    """A preset with another (B, F) runs a kernel variant the device-level self-test never ran: it is
    self-tested on its first call there, once; a failure makes backend='triton' raise and names it."""
    if not triton_backend.interpreting():  # pragma: no cover
        pytest.skip("kernels compiled for a GPU")
    custom = Preset("custom-b8-f9", block_size=8, frac_bits=9)
    runs: list[str] = []
    real = triton_selftest._check_kernel

    def counting(preset: Preset, device: torch.device) -> KernelResult:
        runs.append(preset.name)
        return real(preset, device)

    monkeypatch.setattr(triton_selftest, "_check_kernel", counting)
    triton_selftest.selftest("cpu")
    runs.clear()
    result = triton_selftest.selftest_kernel("cpu", custom)
    assert result.passed and result.kernel == "chain_gemm_rz[B=8,F=9] tile 64x64/1w", result
    assert triton_selftest.selftest_kernel("cpu", custom) is result and runs == ["custom-b8-f9"]  # cached
    assert triton_selftest.selftest_kernel("cpu", mmaemu.presets.HOPPER).passed and runs == ["custom-b8-f9"]

    broken = Preset("custom-b8-f10", block_size=8, frac_bits=10)
    monkeypatch.setattr(triton_selftest, "_check_kernel",
                        lambda preset, device: KernelResult(triton_selftest.variant_name(preset, device), False, "x"))
    assert backends.EXECUTORS[Backend.TRITON].selftest_failure(torch.device("cpu"), broken) is not None
    with pytest.raises(BackendUnavailableError, match=r"chain_gemm_rz\[B=8,F=10\] tile 64x64/1w failed: x"):
        backends.require(Backend.TRITON, torch.device("cpu"), broken)
    assert backends.EXECUTORS[Backend.TRITON].selftest_failure(torch.device("cpu"), custom) is None


def test_auto_routes_cuda_tensors_to_triton_when_the_selftest_passed(
    monkeypatch: pytest.MonkeyPatch, clean_state: None
) -> None:
    monkeypatch.setattr(triton_backend, "available", lambda device=None: (True, "triton test"))
    ok = SelfTestReport("cuda:0", (KernelResult("chain_gemm[B=32,F=13] tile 64x64/8w", True, "fine"),))
    triton_selftest._REPORTS["cuda:0"] = ok
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_backend("auto", CUDA0) is Backend.TRITON
    assert auto_fallback(CUDA0) is None


def test_auto_falls_back_once_per_device_when_a_kernel_failed(
    monkeypatch: pytest.MonkeyPatch, clean_state: None
) -> None:
    monkeypatch.setattr(triton_backend, "available", lambda device=None: (True, "triton test"))
    triton_selftest._REPORTS["cuda:0"] = _failed_report("cuda:0")
    with pytest.warns(BackendFallbackWarning) as caught:
        assert resolve_backend("auto", CUDA0) is Backend.REFERENCE
    (w,) = caught
    assert "chain_gemm[B=16,F=13]" in str(w.message) and "3 of 144 outputs differ" in str(w.message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call on the same device is silent
        assert resolve_backend("auto", CUDA0) is Backend.REFERENCE
    assert "chain_gemm[B=16,F=13]" in (auto_fallback(CUDA0) or "")
    # CPU routing is untouched by the CUDA self-test
    assert resolve_backend("auto", torch.device("cpu")) in (Backend.CPU, Backend.REFERENCE)


def test_auto_without_triton_stays_silent_on_cuda(monkeypatch: pytest.MonkeyPatch, clean_state: None) -> None:
    monkeypatch.setattr(triton_backend, "available", lambda device=None: (False, "triton is not installed"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_backend("auto", CUDA0) is Backend.REFERENCE
    assert auto_fallback(CUDA0) == "backend 'triton': triton is not installed"


@needs_triton
def test_explicit_triton_raises_when_the_selftest_failed(clean_state: None) -> None:
    if not triton_backend.interpreting():  # pragma: no cover
        pytest.skip("kernels compiled for a GPU")
    triton_selftest._REPORTS["cpu"] = _failed_report("cpu")
    a = torch.ones(2, 32).to(torch.float8_e4m3fn)
    with pytest.raises(BackendUnavailableError, match=r"chain_gemm\[B=16,F=13\] tile 64x64/8w failed: case 'x'"):
        mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1, backend="triton")


@needs_triton
def test_cli_selftest_exit_status(clean_state: None, capsys: pytest.CaptureFixture[str]) -> None:
    if not triton_backend.interpreting():  # pragma: no cover
        pytest.skip("kernels compiled for a GPU")
    assert main(["selftest", "--device", "cpu"]) == 0
    assert "all kernels passed" in capsys.readouterr().out
    triton_selftest._REPORTS["cpu"] = _failed_report("cpu")
    assert main(["selftest", "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "chain_gemm[B=16,F=13]" in out


def test_package_works_without_triton() -> None:
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, mmaemu\n"
        "from mmaemu.backends import resolve_backend, Backend\nfrom mmaemu.backends._triton import backend as triton_backend\n"
        "from mmaemu.errors import BackendUnavailableError\n"
        "ok, why = triton_backend.available()\n"
        "assert not ok and 'not installed' in why, why\n"
        "assert resolve_backend('auto', torch.device('cuda', 0)) is Backend.REFERENCE\n"
        "a = torch.ones(2, 32).to(torch.float8_e4m3fn)\n"
        "assert mmaemu.accumulate(a, a, use_fast_accum=True, backend='reference')[0, 0].item() == 32.0\n"
        "try:\n"
        "    mmaemu.accumulate(a, a, use_fast_accum=True, backend='triton')\n"
        "except BackendUnavailableError as exc:\n"
        "    assert 'triton is not installed' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
        "from mmaemu._cli import main\n"
        "assert main(['selftest', '--device', 'cpu']) == 1\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=False,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_cases_cover_what_a_wrong_sm90_kernel_could_hide() -> None:
    """Program ids above 0 in both dimensions of the sm_90 kernel's 128 x 128 tile, the pairwise combination's
    held pair (S >= 6), every FP8 format pair (E5M2 x E5M2 included), K over 2**16, K not a multiple of 16,
    fast and slow accumulation, every split scheme."""
    from mmaemu._accumulation import combination_steps
    from mmaemu._split import Scheme

    cases = triton_selftest.CASES
    tile = triton_backend.NATIVE_GPU_CONFIG
    assert any(c.m > tile.block_m and c.n > tile.block_n for c in cases)
    held = [c for c in cases if c.split.scheme is Scheme.PAIRWISE
            and any(len(step) == 2 for step in combination_steps(c.split.parts, c.split.scheme))]
    assert any(c.split.parts >= 6 for c in held)
    # the sm_90 kernel is compiled per format pair and accumulation mode: each of the eight runs
    assert {(c.fmt_a, c.fmt_b, c.fast) for c in cases} == {(a, b, fast) for a in ("e4m3", "e5m2")
                                                           for b in ("e4m3", "e5m2") for fast in (True, False)}
    assert any(c.k > 2**16 for c in cases) and any(c.k % 16 for c in cases)
    assert {c.fast for c in cases} == {True, False}
    assert {c.split.scheme for c in cases} == set(Scheme)


@needs_triton
def test_the_interpreter_skips_only_the_compiled_only_cases(clean_state: None) -> None:
    """The interpreter runs every case but those marked compiled-only (K over 2**16 takes minutes there),
    and the report says how many it skipped."""
    if not triton_backend.interpreting():  # pragma: no cover
        pytest.skip("kernels compiled for a GPU")
    skipped = sum(c.compiled_only for c in triton_selftest.CASES)
    assert 0 < skipped < len(triton_selftest.CASES)
    report = triton_selftest.selftest("cpu")
    for kernel in report.kernels:
        assert f"{len(triton_selftest.CASES) - skipped} problems bit-exact" in kernel.reason
        assert f"{skipped} compiled-only problems skipped in the interpreter" in kernel.reason
