"""Code written for mmaemu 0.1 (the seeds' README, ../shared/seeds/001_*) runs unchanged here.

The quickstart and explain snippets below are the seeds' code as published; the assertions check the names
and values the seeds print or cite: ``split.S``, enum fields printed as their values, ``plan.validated``.
"""

from __future__ import annotations

import subprocess
import sys

import torch

import mmaemu

QUICKSTART = '''
import torch
import mmaemu

torch.manual_seed(0)
x = (torch.randn(64, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)    # input  [M, K], row-major
w = (torch.randn(5760, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)  # weight [N, K]
scale_x = torch.tensor(1 / 64)
scale_w = torch.tensor(1 / 32)

# The arguments of torch._scaled_mm: mat2 is [K, N] column-major, i.e. w.t(). On the CPU this runs the exact
# float64 reference model: seconds to tens of seconds for this shape.
y = mmaemu.scaled_mm(x, w.t(), scale_x, scale_w, out_dtype=torch.bfloat16, use_fast_accum=True,
                     profile="hopper")   # the default: torch._scaled_mm on an H100 PCIe
y_ada = mmaemu.scaled_mm(x, w.t(), scale_x, scale_w, out_dtype=torch.bfloat16, use_fast_accum=True,
                         profile="ada")  # the RTX 4060's bits: about 8% of these outputs differ from y

acc = mmaemu.accumulate(x, w, use_fast_accum=True)   # the fp32 accumulator before scaling, [M, N]
print(mmaemu.explain(x, w.t(), scale_x, scale_w, out_dtype=torch.bfloat16, use_fast_accum=True))
'''


def test_the_quickstart_runs_unchanged() -> None:
    scope: dict[str, object] = {}
    exec(compile(QUICKSTART, "seeds-001-quickstart", "exec"), scope)  # noqa: S102 - the published snippet
    y, y_ada = scope["y"], scope["y_ada"]
    assert isinstance(y, torch.Tensor) and isinstance(y_ada, torch.Tensor)
    differ = float((y.view(torch.int16) != y_ada.view(torch.int16)).float().mean())
    assert 0.05 < differ < 0.11  # "about 8% of these outputs differ"


def test_the_explain_snippet_prints_and_answers_as_the_seeds_say() -> None:
    torch.manual_seed(0)
    x = (torch.randn(64, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn(5760, 1920) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    plan = mmaemu.explain(x, w.t(), torch.tensor(1 / 64), torch.tensor(1 / 32), out_dtype=torch.bfloat16,
                          use_fast_accum=True)
    # "explain shows S=1, source='table'"
    assert plan.split is not None and plan.split.S == 1 and plan.split.source == "table"
    assert "S=1, scheme='none', source='table', verified=True" in repr(plan)
    assert (plan.validation, plan.profile, plan.preset, plan.preset_maturity) == ("ok", "hopper", "hopper", "validated")
    assert str(plan.split.scheme) == "none" and f"{plan.split.source}" == "table"
    assert plan.validated is True and plan.reason is None
    assert "validated:  yes" in str(plan)


def test_validated_is_false_with_the_reason() -> None:
    x = torch.ones(16, 1024).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    undecided = mmaemu.explain(torch.ones(16, 128).to(torch.float8_e4m3fn), torch.ones(256, 128).to(torch.float8_e4m3fn).t(),
                               one, one, use_fast_accum=True, profile="hopper-te")
    assert not undecided.validated and "refused (SplitKUnknownError)" in str(undecided.reason)
    experimental = mmaemu.explain(x, torch.ones(64, 1024).to(torch.float8_e4m3fn).t(), one, one,
                                  profile="hopper-experimental", splitk=1)
    assert not experimental.validated and "experimental" in str(experimental.reason)
    biased = mmaemu.explain(x, torch.ones(64, 1024).to(torch.float8_e4m3fn).t(), one, one,
                            torch.zeros(64, dtype=torch.bfloat16), out_dtype=torch.bfloat16)
    assert not biased.validated and "UnverifiedEpilogueWarning" in str(biased.reason)


def test_selftest_without_a_gpu_says_what_ran_instead() -> None:
    """The seeds: 'python -m mmaemu selftest runs the kernel self-tests on the GPU (exit 0 ...)'. On a machine
    without one, old code printed FAILED and exited 1."""
    done = subprocess.run([sys.executable, "-m", "mmaemu", "selftest"], capture_output=True, text=True, check=False,
                          timeout=600, env={**__import__("os").environ, "TRITON_INTERPRET": "0"})
    if torch.cuda.is_available():  # pragma: no cover - CI has no GPU
        return
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no GPU kernel self-test applies" in done.stdout and "FAILED" not in done.stdout
    assert "the cpu backend agrees bit for bit" in done.stdout
