"""The evidence tools: the mutation tier's catalogue and the validation report's rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_tool

ROOT = Path(__file__).resolve().parents[2]


def test_every_mutant_applies_to_the_current_source() -> None:
    mutants = load_tool("mutants")
    ids = [m.id for m in mutants.MUTANTS]
    assert len(ids) == len(set(ids))
    assert sum(m.equivalent is None for m in mutants.MUTANTS) >= 30
    for m in mutants.MUTANTS:
        source = (ROOT / m.path).read_text()
        assert source.count(m.old) == 1, f"{m.id}: the text to mutate is found {source.count(m.old)} times in {m.path}"
        assert m.old != m.new and m.what and m.tests
        assert m.equivalent is None or len(m.equivalent) > 40, f"{m.id}: an equivalent mutant needs its reason"


def test_a_mutant_of_code_this_cpu_never_runs_is_not_run_rather_than_survived(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused block kernels run only with AVX-512: on an AVX2 runner their mutants cannot be killed, and CI (which
    fails on a survivor) must say so instead of failing; on an AVX-512 host they run as every mutant does."""
    mutants = load_tool("mutants")
    fused = [m for m in mutants.MUTANTS if m.needs == "avx512"]
    assert {m.path for m in fused} >= {"mmaemu/backends/_cpu_block.py"} and all(m.path.endswith((
        "_cpu_block.py", "_block_arith.py")) for m in fused)
    monkeypatch.setattr(mutants, "_host_has", lambda feature: False)
    outcome = mutants._run_one(fused[0], tmp_path)  # never touches the tree: nothing to run
    assert (outcome.status, outcome.seconds) == ("not-run", 0.0) and "avx512" in outcome.detail


def test_the_ci_sample_covers_every_area() -> None:
    mutants = load_tool("mutants")
    sample = mutants.sample(mutants.MUTANTS)
    assert {m.path for m in sample} >= {"mmaemu/model.py", "mmaemu/_accumulation.py", "mmaemu/_epilogue.py",
                                        "mmaemu/backends/_cpu.py"}
    assert len(sample) <= len(mutants.MUTANTS) // 3 + 1


def test_figures_need_evidence(tmp_path: Path) -> None:
    report = load_tool("validation_report")
    (tmp_path / "a.md").write_text(
        "# Title\n\nThe cpu backend is 16.1x faster.\n\n"             # a figure without evidence: flagged
        "It took 81.7 ms (`python -m mmaemu bench`).\n\n"               # with a command: fine
        "All 5,000 vectors replay (tests/evidence/test_hw_vectors.py).\n\n"      # with a test path: fine
        "```\n12345 inside code is not a claim\n```\n"
        "Blocks of 32 products.\n"                                      # small numbers are not figures
    )
    problems = report.undocumented_figures(tmp_path)
    assert len(problems) == 1 and "16.1x" in problems[0]


def test_the_profiles_table_lists_the_registry() -> None:
    from mmaemu.platforms._profiles import profiles

    table = load_tool("validation_report").profiles_table()
    for p in profiles():
        assert f"| `{p.name}` |" in table
    assert table.count("\n") == len(profiles()) + 1


def test_the_repositorys_evidence_is_the_recorded_evidence() -> None:
    """evidence/ (what a clone replays) holds exactly the shared folder's files where that folder exists, and every
    file its manifest names has the recorded sha256 (tools/evidence/import_evidence.py --check)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(root / "tools" / "evidence" / "import_evidence.py"), "--check"], capture_output=True,
                          text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_report_from_a_runs_outcomes_fails_on_a_record_not_passed(tmp_path: "Path") -> None:
    """CI replays the evidence once: validation_report.py --check --outcomes reads the test run's outcomes. A record
    the run did not pass, or did not run, must fail the check (here: every record is missing from the file)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    outcomes = tmp_path / "outcomes.json"
    outcomes.write_text(json.dumps({"format": "mmaemu-evidence-outcomes/1", "outcomes": {}}))
    done = subprocess.run([sys.executable, str(root / "tools" / "docs" / "validation_report.py"), "--check", "--outcomes",
                           str(outcomes)], capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 1 and "not run in the test run" in done.stdout, done.stdout[-2000:]
