"""tools/device_check.py without a GPU: its dry run end to end (Triton's interpreter on the CPU), a step
that raises, the budget, the exit status and the report written after every step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from conftest import FULL, load_tool

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "device_check.py"
STEP_NAMES = ["versions", "selftest", "headline", "scaled_mm_vs_model", "exactness", "timing", "recording"]


def _load() -> ModuleType:
    return load_tool("device_check")


def test_dry_run_exercises_every_step_and_exits_0(tmp_path: Path) -> None:
    """Every step runs (none skipped, none failed) and the run exits 0; what comes back fits $OUT's 8 files."""
    pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path), "--max-cases", "3"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "device_check.json").read_text())
    assert report["dry_run"] is True and report["exit_status"] == 0
    assert [s["name"] for s in report["steps"]] == STEP_NAMES
    assert {s["name"]: s["status"] for s in report["steps"]} == dict.fromkeys(STEP_NAMES, "passed")
    steps = {s["name"]: s["result"] for s in report["steps"]}
    assert {"torch", "triton", "cublaslt", "gpu", "driver"} <= set(steps["versions"])
    assert steps["selftest"]["passed"]
    head = steps["headline"]
    assert head["native_differing"] == 0 and head["rz_differing"] == 0 and head["native_kernel_s"] > 0
    assert head["rz_e2e_tmacs"] > 0
    assert {r["status"] for r in steps["scaled_mm_vs_model"]["rows"]} == {"exact"}
    assert [r["status"] for r in steps["exactness"]["rows"]] == ["exact"] * 10  # 3 cases, then the 7 dry edges
    timing = steps["timing"]
    assert all(r["rz_differing"] == 0 and r.get("native_differing", 0) == 0 for r in timing["shapes"])
    assert all(e["differing"] == 0 and e["tmacs"] > 0 for e in timing["tile_sweep"])
    archive = tmp_path / steps["recording"]["archive"]
    with tarfile.open(archive) as tar:
        assert any(name.endswith("manifest.json") for name in tar.getnames()), tar.getnames()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) <= 8 and {"device_check.json", "device_check.txt", "device_check.log"} <= set(files), files
    assert "[" in done.stdout and "selftest: PASSED" in done.stdout  # progress lines, unbuffered
    assert "exit status 0" in (tmp_path / "device_check.txt").read_text()


def _context(dc: ModuleType, tmp_path: Path, budget: float = 100.0) -> Any:
    args = dc._parse(["--out", str(tmp_path), "--budget-s", str(budget)])
    report: dict[str, Any] = {"dry_run": True, "budget_s": budget, "steps": []}
    return dc.Context(args, torch.device("cpu"), True, dc.time.perf_counter(), tmp_path, report, None)


def test_a_step_that_raises_is_reported_and_the_run_continues(tmp_path: Path) -> None:
    dc = _load()
    ctx = _context(dc, tmp_path)
    seen: list[str] = []

    def boom(ctx: Any) -> None:
        dc._keep(ctx, "boom", {"found": "half"})
        raise ZeroDivisionError("a bug in the step")

    def after(ctx: Any) -> dict[str, Any]:
        # the report on disk already says what happened to the step before
        on_disk = json.loads((tmp_path / "device_check.json").read_text())
        seen.append(on_disk["steps"][0]["status"])
        return {"ok": True}

    dc.run_step(ctx, "boom", 0.0, boom)
    dc.run_step(ctx, "after", 0.0, after)
    first, second = ctx.report["steps"]
    assert first["status"] == "error" and "ZeroDivisionError: a bug in the step" in first["error"]
    assert "ZeroDivisionError" in first["traceback"] and first["result"] == {"found": "half"}
    assert second["status"] == "passed" and seen == ["error"]
    assert dc.exit_status(ctx.report) == 1
    assert "boom" in (tmp_path / "device_check.txt").read_text()


def test_exit_status_is_0_only_when_every_step_passed(tmp_path: Path) -> None:
    dc = _load()
    ctx = _context(dc, tmp_path, budget=10.0)
    dc.run_step(ctx, "fine", 0.0, lambda ctx: {"x": 1})
    assert dc.exit_status(ctx.report) == 0
    dc.run_step(ctx, "too long", 1e9, lambda ctx: {"x": 2})  # skipped: the budget has no room
    assert ctx.report["steps"][-1]["status"] == "skipped" and dc.exit_status(ctx.report) == 1

    def failing(ctx: Any) -> None:
        raise dc.CheckFailed("3 outputs differ")

    def partial(ctx: Any) -> None:
        raise dc.Partial("2 cases skipped by the budget")

    for fn, status in ((failing, "failed"), (partial, "skipped")):
        ctx.report["steps"] = []
        dc.run_step(ctx, "step", 0.0, fn)
        assert ctx.report["steps"][0]["status"] == status and dc.exit_status(ctx.report) == 1
    assert dc.exit_status({"steps": []}) == 1


def test_run_records_every_step_and_exits_1_when_one_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole run with stand-in steps: a failing step does not stop the others, the recording runs last,
    and the exit status is 1."""
    dc = _load()
    ran: list[str] = []

    def step(name: str, fail: bool = False) -> Any:
        def fn(ctx: Any) -> dict[str, str]:
            ran.append(name)
            if fail:
                raise RuntimeError(f"{name} broke")
            return {"name": name}
        return fn

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # what run() sets for a dry run, restored afterwards
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    monkeypatch.setattr(dc, "STEPS", [("a", 0.0, step("a")), ("b", 0.0, step("b", fail=True)), ("c", 0.0, step("c"))])
    monkeypatch.setattr(dc, "step_recording", step("recording"))
    assert dc.run(["--dry-run", "--out", str(tmp_path)]) == 1
    assert ran == ["a", "b", "c", "recording"]
    report = json.loads((tmp_path / "device_check.json").read_text())
    assert [(s["name"], s["status"]) for s in report["steps"]] == [("a", "passed"), ("b", "error"), ("c", "passed"),
                                                                  ("recording", "passed")]
    assert report["exit_status"] == 1
    monkeypatch.setattr(dc, "STEPS", [("a", 0.0, step("a"))])
    assert dc.run(["--dry-run", "--out", str(tmp_path / "again")]) == 0


def test_the_recording_needs_its_minimum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the GPU the recording runs only when --record-min-s of the budget remain; otherwise it is skipped
    (and the exit status says so)."""
    dc = _load()
    ctx = _context(dc, tmp_path, budget=100.0)
    dc.run_step(ctx, "recording", ctx.args.record_min_s, dc.step_recording)
    step = ctx.report["steps"][0]
    assert step["status"] == "skipped" and "needs about 240 s" in step["reason"]


def test_cases_cover_every_scheme_format_pair_and_k_not_a_multiple_of_128() -> None:
    dc = _load()
    for dry in (True, False):
        cases = dc.exactness_cases(dry)
        assert {c["split"].scheme.value for c in cases} == {"none", "contiguous", "serial", "pairwise"}
        assert {c["split"].parts for c in cases} == {1, 2, 3, 4, 6}
        assert {c["preset"] for c in cases} == {"hopper", "ada"}
        assert {c["fmt"] for c in cases} == {(a, b) for a in ("e4m3", "e5m2") for b in ("e4m3", "e5m2")}
        assert {c["fast"] for c in cases} == {True, False}
        assert any(c["k"] % 128 for c in cases)
    assert dc.HEADLINE == (2048, 5760, 1920) and (8192, 8192, 8192) in dc.TIMED_SHAPES
    assert {(m, n, k) for m, n, k in dc.EVO2_SHAPES if (n, k) == (5760, 1920)}  # the Evo 2 1B projection


def test_text_summary_states_the_bar() -> None:
    dc = _load()
    report = {
        "dry_run": False, "elapsed_s": 300.0, "budget_s": 390.0,
        "versions": {"gpu": "NVIDIA H200", "sm": "sm_90", "driver": "570", "torch": "2.11", "cuda_runtime": "13.0",
                     "triton": "3.6", "cublaslt": "13.0", "mmaemu": "0"},
        "steps": [{"name": "headline", "status": "passed", "seconds": 20.0,
                   "result": {"shape": [2048, 5760, 1920], "native_e2e_tmacs": 60.0, "native_kernel_tmacs": 150.0,
                              "native_differing": 0, "rz_e2e_tmacs": 2.0, "rz_differing": 0,
                              "torch_scaled_mm_tmacs": 600.0, "native_bar_met": True}},
                  {"name": "scaled_mm_vs_model", "status": "failed", "seconds": 5.0, "reason": "1 of 2",
                   "result": {"rows": [{"shape": [16, 64, 8192], "out": "bfloat16", "fast": True,
                                        "status": "3 of 1024 outputs differ", "model_split": "3,contiguous",
                                        "matching_contiguous_split": 4}]}}],
    }
    table = dc.text_summary(report)
    assert "end to end 60.000, kernel 150.000" in table and ">= 50.0 TMAC/s end to end, exact): met" in table
    assert "matching S 4" in table and "FAILED" in table and "exit status 1" in table


def test_without_a_gpu_it_refuses_politely(tmp_path: Path) -> None:
    if torch.cuda.is_available():  # pragma: no cover
        pytest.skip("a GPU is present")
    dc = _load()
    assert dc.run(["--out", str(tmp_path)]) == 2


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "gpu"])
def test_every_case_is_a_call_the_package_accepts(dry: bool, tmp_path: Path) -> None:
    """Every problem the check would run, on the GPU and in the dry run, passes the package's own checks, so a
    failure it reports is the device's, not the check's: each exactness and edge case's accumulation plan
    (as the check builds it), and each torch._scaled_mm shape's plan (mmaemu.explain, from the shape alone).
    Planning only, no arithmetic: the dry run's arithmetic is the --full test below.

    Old code: 4 of the dry run's 64 exactness cases (S = 6, contiguous, over K = 272: 3 of its 6 parts own no
    k-tile, at most 2 are accepted) were refused.
    """
    dc = _load()
    from mmaemu import explain
    from mmaemu._shape_only import shape_only_operands

    refused = []
    for case in dc.exactness_cases(dry):
        try:
            dc.exactness_plan(case)
        except ValueError as exc:
            refused.append(f"{case}: {exc}")
    ctx = _context(dc, tmp_path)
    ctx.dry = dry
    for label, _preset, _m, _n, k, _device in dc.edge_cases(ctx):
        try:
            dc.edge_plan(label, k)
        except ValueError as exc:
            refused.append(f"{label}: {exc}")
    one = torch.tensor(1.0)
    for m, n, k in (dc.DRY_EVO2_SHAPES + dc.DRY_SPLIT_SHAPES) if dry else (dc.EVO2_SHAPES + dc.SPLIT_SHAPES):
        x, wt = shape_only_operands(m, n, k, torch.float8_e4m3fn, torch.float8_e4m3fn)
        for out_dtype in (torch.float32, torch.bfloat16):
            for fast in (True, False):
                plan = explain(x, wt, one, one, out_dtype=out_dtype, use_fast_accum=fast)
                if not plan.ok:
                    refused.append(f"scaled_mm {m}x{n}x{k} {out_dtype} fast={fast}: {plan.validation}")
    assert not refused, "\n".join(refused)
    assert len(dc.exactness_cases(dry)) >= 60  # the filter drops only what the package refuses


@pytest.mark.skipif(not FULL, reason="the whole dry run takes minutes (MMAEMU_FULL=1 or pytest --full)")
def test_the_whole_dry_run_passes(tmp_path: Path) -> None:
    """Every case of the dry run, not the first 3: all steps pass and every exactness row is exact."""
    pytest.importorskip("triton", reason="triton is not installed (pip install 'mmaemu[triton]')")
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=3000, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "device_check.json").read_text())
    rows = {s["name"]: s for s in report["steps"]}["exactness"]["result"]["rows"]
    assert {r["status"] for r in rows} == {"exact"} and len(rows) == len(_load().exactness_cases(True)) + 7
