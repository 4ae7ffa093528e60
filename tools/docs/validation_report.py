"""Generate docs/validation.md: the evidence tier, replayed, with counts.

Runs, through the same functions the test suite uses:

- each hardware-vector file (../shared/hw-vectors) through ``mmaemu.model.dot``;
- the RTX 4060 recordings (../shared/recordings/rtx4060 and rtx4060-pairwise): ``dot`` and ``gemm`` records (outputs,
  on every backend available here) and the ``call`` records (the API contract);
- every row of both split-K tables, resolved by the shipped tables;
- the differential test (cpu backend against reference backend, CI size);
- the mutation tier's last full run (docs/data/mutants.json, written by ``tools/evidence/mutants.py --all
  --json docs/data/mutants.json``), checked against the current catalogue;
- the device report, if one exists (docs/data/device_report.json).

Usage::

    python tools/docs/validation_report.py           # rewrite docs/validation.md
    python tools/docs/validation_report.py --check   # exit 1 if the page is stale, or a figure in docs/
                                                # lacks an evidence reference
    python tools/docs/validation_report.py --check --outcomes F  # the same, with the record replays' outcomes
                                                # of a test run (MMAEMU_EVIDENCE_LOG=F pytest) instead of
                                                # replaying them again: what CI runs

The page holds counts only (no timings), so it is reproducible: ``--check`` regenerates it and
compares. The figure rule: a line of docs/*.md outside code blocks that states a figure (a number
of four or more digits, a percentage, a ratio like ``16.1x``, a time, or TMAC/s) must have an
evidence reference in its paragraph or table (a path under tests/, tools/, hw-vectors/,
recordings/ or docs/data/, a seed, a ``bench`` or ``device_check`` command, a link to
validation.md or performance.md, an upstream test, or ``[evidence: ...]``), or say ``unverified``.
GPU names (RTX 4060, H100), versions (12.8.3.14) and dtype names are not figures.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "evidence"), str(ROOT / "tests" / "unit")]  # the replays' modules
sys.path.insert(0, str(ROOT / "tools" / "evidence"))  # mutants.py

import mmaemu  # noqa: E402
from mmaemu.testing import bitwise_diff  # noqa: E402

PAGE = ROOT / "docs" / "validation.md"
MUTANTS_JSON = ROOT / "docs" / "data" / "mutants.json"
DEVICE_JSON = ROOT / "docs" / "data" / "device_report.json"
COMMAND = "python tools/docs/validation_report.py"


def _value_class(t: torch.Tensor) -> list[str]:
    x = t.float()
    return ["nan" if torch.isnan(v) else "inf" if torch.isinf(v) else "zero" if v == 0 else
            "subnormal" if v.abs() < 2.0**-126 and t.dtype == torch.float32 else "normal" for v in x.flatten()]


def hardware_vectors() -> list[str]:
    import test_hw_vectors as hw

    lines = ["## Hardware vectors", "",
             "Each file: 5,000 K = 32 dot products recorded on a GPU (Khattak and Mikaitis; the MATLAB",
             "tensor-core toolbox), replayed through `mmaemu.model.dot` (`tests/evidence/test_hw_vectors.py`).", "",
             "| file | GPU, instruction | preset | records | outputs equal | mismatches by output class |",
             "|---|---|---|---|---|---|"]
    manifest = json.loads((hw.HW_VECTORS / "manifest.json").read_text())["files"]
    for name, preset, _ in hw.FILES:
        got, expected = hw.replay_tensors(name, preset)
        diff = bitwise_diff(got, expected)
        classes = Counter(_value_class(expected))
        wrong = Counter(c for c, bad in zip(_value_class(expected), (got.view(torch.int32) != expected.view(torch.int32)).tolist()) if bad)
        by_class = ", ".join(f"{c} {wrong[c]} of {classes[c]:,}" for c in sorted(classes))
        info = manifest[name]
        lines.append(f"| `{name}` | {info['gpu']}, {info['instruction']} | `{preset}` | {diff.total:,} | "
                     f"{diff.total - diff.differing:,} | {by_class} |")
    lines += ["", "The same files' fp16-accumulator outputs (`d_fp16acc_bits`: `mma.sync.m16n8k32` with an fp16",
              "accumulator on each GPU, c rounded to fp16), replayed through `mmaemu.model.dot` with an fp16 `c`",
              "(`tests/evidence/test_hw_vectors.py`; the alternatives each rule was told apart from: `python tools/evidence/zoo_fit.py`).", "",
              "| file | preset | records | outputs equal (fp16 bit patterns) |", "|---|---|---|---|"]
    for name, preset in hw.FP16_FILES:
        differing, total = hw.replay_fp16(name, preset)
        lines.append(f"| `{name}` | `{preset}` | {total:,} | {total - differing:,} |")
    return lines + [""]


def zoo_vectors() -> list[str]:
    import test_zoo_vectors as zoo

    lines = ["## Hardware vectors: the zoo (fp16, bf16, tf32)", "",
             "Each file: 5,000 dot products (K = 4, 8 or 16) recorded with WMMA on a GPU, replayed through",
             "`mmaemu.model.dot` on the preset of its architecture (`tests/evidence/test_zoo_vectors.py`; the neighbouring",
             "models each fail hundreds, `python tools/evidence/zoo_fit.py`, docs/data/zoo_fit.json).", "",
             "| file | preset | instruction (B, F) | records | outputs equal (fp32 accumulator) | fp16 accumulator |",
             "|---|---|---|---|---|---|"]
    for name in zoo.FILES:
        v = zoo.load(name)
        preset = zoo.ARCH[name.split("_")[0]]
        shipped = mmaemu.presets.instruction_preset(preset, v["a"].dtype)
        got = mmaemu.model.dot(v["a"], v["b"], v["c"], preset=preset)
        total = int(v["d"].numel())
        equal = total - zoo.differing(got, v["d"])
        fp16 = "not recorded"
        if "d16" in v:
            got16 = mmaemu.model.dot(v["a"], v["b"], v["c"].to(torch.float16), preset=preset)
            fp16 = f"{total - zoo.differing(got16, v['d16']):,} of {total:,}"
        lines.append(f"| `zoo/{name}` | `{preset}` | {shipped.block_size}, {shipped.frac_bits} | {total:,} | "
                     f"{equal:,} | {fp16} |")
    return lines + [""]


#: Outcomes of the test run's evidence replays (``--outcomes``): ``{"<test>/<backend>": {case id: outcome}}``.
#: When set, the sections below read each record's outcome from it instead of replaying the record again;
#: a record the run did not pass (failed, skipped or absent) counts as a mismatch.
OUTCOMES: dict[str, dict[str, str]] | None = None


def _replay(records: list[dict[str, Any]], run: Callable[[dict[str, Any]], None],
            test: str | None = None, backend: str = "-") -> tuple[int, list[str]]:
    if OUTCOMES is not None and test is not None:
        cases = OUTCOMES.get(f"{test}/{backend}", {})
        return len(records), [f"{rec['id']}: {cases.get(rec['id'], 'not run')} in the test run" for rec in records
                              if cases.get(rec["id"]) != "passed"]
    failures = []
    for rec in records:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run(rec)
        except AssertionError as exc:
            failures.append(f"{rec['id']}: {str(exc).splitlines()[0][:120]}")
    return len(records), failures


def rtx4060() -> list[str]:
    import test_call_records as calls
    import test_rtx4060_recordings as rec
    from mmaemu.backends import _cpu as cpu

    backends = ["reference"] + (["cpu"] if cpu.available()[0] else [])
    lines = ["## RTX 4060 recordings", "",
             "Recorded with torch 2.7.1 and cuBLASLt 12.8.3.14 (`tests/evidence/test_rtx4060_recordings.py`,",
             "`tests/evidence/test_call_records.py`). Outputs are compared as bits; error records must raise the",
             "recorded exception class.", "",
             "| records | backend | count | outputs | mismatching records |", "|---|---|---|---|---|"]
    n, bad = _replay(rec.DOTS, rec.test_dot_record, "test_dot_record")
    lines.append(f"| `dot` (through `model.dot`) | - | {n:,} | {sum(rec._expected(r).numel() for r in rec.DOTS):,} | {len(bad)} |")
    outputs = sum(rec._expected(r).numel() for r in rec.GEMMS)
    failures: list[str] = bad
    for backend in backends:
        n, bad = _replay(rec.GEMMS, lambda r, b=backend: rec.test_gemm_record(r, b), "test_gemm_record", backend)
        failures += bad
        lines.append(f"| `gemm` with outputs | `{backend}` | {n:,} | {outputs:,} | {len(bad)} |")
    pairwise_outputs = sum(rec._expected(r).numel() for r in rec.PAIRWISE)
    for backend in backends:
        n, bad = _replay(rec.PAIRWISE, lambda r, b=backend: rec.test_pairwise_record(r, b), "test_pairwise_record",
                         backend)
        failures += bad
        lines.append(f"| `gemm` of `rtx4060-pairwise` (S = 10, 11, 15, 20) | `{backend}` | {n:,} | {pairwise_outputs:,} "
                     f"| {len(bad)} |")
    for backend in backends:
        n, bad = _replay(calls.RECORDS, lambda r, b=backend: calls.test_call_record(r, b), "test_call_record", backend)
        failures += bad
        lines.append(f"| `call` and error `gemm` (API contract) | `{backend}` | {n:,} | - | {len(bad)} |")
    lines += ["", "The pairwise combination rule and the candidate rules these records reject: "
              "`python tools/evidence/pairwise_rules.py` (`tests/tools/test_pairwise_rules.py`).", ""]
    schemes = Counter("none" if isinstance(rec.splitk_of(r), int) else rec.splitk_of(r)[1] for r in rec.GEMMS)  # type: ignore[index]
    outs = Counter(r["out_dtype"] for r in rec.GEMMS)
    lines += ["`gemm` records by split scheme: " + ", ".join(f"{k} {v:,}" for k, v in sorted(schemes.items())) + ";",
              "by output dtype: " + ", ".join(f"{k} {v:,}" for k, v in sorted(outs.items())) + ".", ""]
    if failures:
        lines += ["Mismatches:", ""] + [f"- {f}" for f in failures] + [""]
    return lines


def split_tables() -> list[str]:
    import test_platform as tp

    lines = ["## Split-K tables", "",
             "Every recorded row of each table (cuBLASLt's heuristic with torch 2.7.1's descriptor) looked up",
             "in the shipped table: its S and customOption must come back (`tests/evidence/test_platform.py`).", "",
             "| table | rows | rows with S > 1 | rows resolved to the recorded split |", "|---|---|---|---|"]
    for table_id in sorted(tp.RAW):
        raw = np.load(tp.RECORDINGS / "splitk" / f"{table_id}.npz")
        ok = "all"
        if OUTCOMES is not None:
            runs = [OUTCOMES.get(f"{t}/-", {}).get(table_id) for t in (
                "test_every_recorded_row_resolves_to_the_recorded_split", "test_every_workspace_and_customoption_resolves")]
            if any(r != "passed" for r in runs):
                ok = f"FAILED: not passed in the test run ({runs})"
        else:
            try:
                tp.test_every_recorded_row_resolves_to_the_recorded_split(table_id)
                tp.test_every_workspace_and_customoption_resolves(table_id)
            except AssertionError as exc:
                ok = f"FAILED: {str(exc).splitlines()[0][:80]}"
        lines.append(f"| `{table_id}` | {len(raw['splitK']):,} | {int((raw['splitK'] > 1).sum()):,} | {ok} |")
    return lines + [""]


def differential() -> list[str]:
    import test_differential as td

    failures = []
    for config in td.CONFIGS:
        try:
            td.test_backend_equals_reference_backend("cpu", *config)
        except AssertionError:
            failures.append(config)
    total = len(td.CONFIGS) * td.M * td.N
    return ["## Differential test", "",
            "The compiled cpu backend against the reference backend on random and adversarial operands",
            "(`tests/unit/test_differential.py`: presets, format pairs, fast and slow accumulation, four split",
            "settings, five data kinds). The same suite runs the Triton kernels in Triton's interpreter: eight",
            "configurations in CI, all 240 with `pytest --full` (too slow for this page's regeneration).", "",
            f"- configurations: {len(td.CONFIGS)}; outputs compared at CI size: {total:,}; configurations with a",
            f"  mismatch: {len(failures)}. `pytest --full` runs 1,105,920 outputs.",
            "- The independent slow model (`tests/slowmodel.py`, exact rational arithmetic) is compared with",
            "  every backend in `tests/evidence/test_against_slowmodel.py` (hypothesis and hand-built adversarial cases).", ""]


def mutation_tier() -> list[str]:
    import mutants

    lines = ["## Mutation tier", "",
             "Deliberate breakages of the arithmetic (`tools/evidence/mutants.py`); each must make its tests fail.",
             "Results of the last full run (`python tools/evidence/mutants.py --all --json docs/data/mutants.json`); CI",
             "reruns a sample (every third mutant) on each change.", ""]
    if not MUTANTS_JSON.exists():
        return lines + ["No full run recorded yet.", ""]
    data = json.loads(MUTANTS_JSON.read_text())
    recorded = {m["id"]: m for m in data["mutants"]}
    current = {m.id: m for m in mutants.MUTANTS}
    defaults = {"every_backend": [], "env": [], "needs": None}  # fields added to the catalogue after a run, at their default

    def fields(m: dict[str, Any]) -> dict[str, Any]:
        return json.loads(json.dumps({**defaults, **{k: v for k, v in m.items() if k != "tests"}}))

    stale = sorted(i for i in set(recorded) | set(current)
                   if i not in recorded or i not in current or fields(recorded[i]) != fields(vars(current[i])))
    outcomes = {o["id"]: o for o in data["outcomes"]}
    counts = Counter(o["status"] for o in outcomes.values())
    lines += [f"{len(outcomes)} mutants: " + ", ".join(f"{counts[s]} {s}" for s in ("killed", "survived", "malformed",
                                                                                     "equivalent", "not-run")
                                                                      if s != "not-run" or counts[s]) + ".", ""]
    if stale:
        lines += [f"STALE: the catalogue changed since the run for: {', '.join(stale)}.", ""]
    lines += ["| mutant | file | breakage | outcome |", "|---|---|---|---|"]
    for m in mutants.MUTANTS:
        o = outcomes.get(m.id, {"status": "not run", "detail": ""})
        status = o["status"] if o["status"] != "equivalent" else f"equivalent: {m.equivalent}"
        lines.append(f"| `{m.id}` | `{m.path}` | {m.what} | {status} |")
    return lines + [""]


FIGURES = ROOT / "docs" / "img"


def _ordered(bits: torch.Tensor) -> torch.Tensor:
    """bf16 bit patterns as integers whose difference counts ulps (sign-magnitude to two's complement)."""
    b = bits.to(torch.int64) & 0xFFFF
    return torch.where(b >= 0x8000, 0x8000 - b, b)


def quickstart_differences(figures: bool) -> list[str]:
    """Where the H100's bf16 bits differ from the RTX 4060's and from the exactly rounded result."""
    import mmaemu._cli as cli

    x, w, sx, sw = cli._quickstart_operands()
    kwargs: dict[str, Any] = {"out_dtype": torch.bfloat16, "use_fast_accum": True}
    h100 = mmaemu.scaled_mm(x, w.t(), sx, sw, profile="hopper", **kwargs)
    ada = mmaemu.scaled_mm(x, w.t(), sx, sw, profile="ada", **kwargs)
    # the exact dot products (float64 holds these sums exactly: 8-bit products over a 2**35 range,
    # K = 1920), times the scales, rounded once to fp32 and then to bf16
    exact = (x.double() @ w.double().t()) * (float(sx) * float(sw))
    rounded = exact.float().to(torch.bfloat16)
    ulps = {}
    for name, other in (("RTX 4060 (`ada`)", ada), ("exactly rounded", rounded)):
        ulps[name] = (_ordered(h100.view(torch.int16)) - _ordered(other.view(torch.int16))).abs()
    lines = ["## The quickstart: where the bits differ", "",
             "The quickstart GEMM (M, N, K = 64, 5760, 1920, E4M3, bf16 output, fast accumulation;",
             "`python -m mmaemu demo`): the H100 PCIe's bf16 outputs (`hopper`) against the RTX 4060's and against",
             "the exact result rounded once to fp32 and then to bf16, in bf16 ulps (`tests/docs/test_quickstart.py`).", "",
             "| H100 against | outputs | equal | 1 ulp | 2 ulps | 3 or more |", "|---|---|---|---|---|---|"]
    for name, d in ulps.items():
        lines.append(f"| {name} | {d.numel():,} | {int((d == 0).sum()):,} | {int((d == 1).sum()):,} | "
                     f"{int((d == 2).sum()):,} | {int((d >= 3).sum()):,} |")
    lines.append("")
    if figures:
        _quickstart_figure(ulps)
    if (FIGURES / "quickstart_ulps.png").exists():
        lines += ["![ulp differences of the quickstart's outputs](img/quickstart_ulps.png)", ""]
    return lines


def _quickstart_figure(ulps: dict[str, torch.Tensor]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install '.[docs]'): no figure", file=sys.stderr)
        return
    FIGURES.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (name, d) in zip(axes, ulps.items()):
        image = ax.imshow((d.clamp(max=3)).numpy()[:, :256], aspect="auto", interpolation="nearest", cmap="viridis",
                          vmin=0, vmax=3)
        ax.set_title(f"H100 vs {name.split(' (')[0]}", fontsize=10)
        ax.set_xlabel("n")
        ax.set_ylabel("m")
    fig.suptitle("quickstart GEMM, bf16 ulps between outputs (rows 0-63, columns 0-255)", fontsize=10)
    fig.colorbar(image, ax=axes, ticks=[0, 1, 2, 3], label="ulps (3 = 3 or more)")
    fig.savefig(FIGURES / "quickstart_ulps.png", dpi=110)
    plt.close(fig)


def device() -> list[str]:
    lines = ["## Device runs", ""]
    if not DEVICE_JSON.exists():
        return lines + ["No GPU run is recorded for this version: `tools/device_check.py` is the script to run on one",
                        "(its report, copied to `docs/data/device_report.json`, appears here).", ""]
    data = json.loads(DEVICE_JSON.read_text())
    return lines + ["```", json.dumps(data.get("summary", data), indent=1)[:4000], "```", ""]


PROFILES_PAGE = ROOT / "docs" / "profiles.md"
_MARK_START = "<!-- profiles-table:start (generated from the registry by tools/docs/validation_report.py) -->"
_MARK_END = "<!-- profiles-table:end -->"


def profiles_table() -> str:
    """The registry as a Markdown table (written between markers in docs/profiles.md)."""
    from mmaemu.platforms._profiles import profiles

    rows = ["| profile | GPU (SMs) | cuBLASLt, torch | caller, workspace | preset (block, fraction bits) | split family "
            "| split-K table | maturity |", "|---|---|---|---|---|---|---|---|"]
    for p in profiles():
        ws = f"{p.workspace_bytes // 2**20} MiB" if p.workspace_bytes else "no workspace"
        rows.append(f"| `{p.name}` | {p.gpu} ({p.sm_count}) | {p.cublaslt}, {p.torch_version} | {p.caller.value}, {ws} "
                    f"| `{p.preset.name}` ({p.preset.block_size}, {p.preset.frac_bits}) | {p.split_family.description} "
                    f"| {'`' + p.table_id + '`' if p.table_id else 'none'} | {p.maturity.value} |")
    return "\n".join(rows)


def profiles_page() -> str:
    """docs/profiles.md with its generated table brought up to date."""
    text = PROFILES_PAGE.read_text()
    start = text.index(_MARK_START) + len(_MARK_START)
    end = text.index(_MARK_END)
    return text[:start] + "\n" + profiles_table() + "\n" + text[end:]


def generate(figures: bool = False) -> str:
    torch.manual_seed(0)
    lines = ["# Validation report", "",
             f"Generated by `{COMMAND}` (mmaemu {mmaemu.__version__}); `{COMMAND} --check` fails CI when",
             "this page no longer matches the evidence. Counts only: rerun the command to reproduce them.", ""]
    for section in (hardware_vectors, zoo_vectors, rtx4060, split_tables, differential, mutation_tier, device):
        lines += section()
        if section is differential:
            lines += quickstart_differences(figures)
    return "\n".join(lines).rstrip() + "\n"


_FIGURE = re.compile(r"(\d{1,3}(,\d{3})+|\b\d{4,}\b|\d+(\.\d+)?\s?%|\b\d+(\.\d+)?x\b|\b\d+(\.\d+)?\s?(ms|TMAC/s)\b)")
_EVIDENCE = re.compile(r"(tests/|tools/|hw-vectors|recordings|docs/data|seeds?\b|seed 0\d\d|specified|mmaemu bench|device_check"
                       r"|validation\.md|performance\.md|\[evidence:|unverified|hardware vectors|upstream test)",
                       re.IGNORECASE)
#: names that contain digits but state no figure: GPUs, architectures, versions, dtypes, file modes
_NAMES = re.compile(r"(RTX( PRO)? \d{4}( Ada)?|[HB]\d{3}|sm_\d+|\d+\.\d+\.\d+(\.\d+)?|float\d+|e\dm\d|fp\d+|bf16"
                    r"|\b0[0-7]{3}\b)",  # file modes (0700) are names too
                    re.IGNORECASE)


def undocumented_figures(docs: Path) -> list[str]:
    """``file:line: text`` of every figure-bearing line without an evidence reference in its paragraph."""
    problems = []
    for path in sorted(docs.resolve().glob("*.md")):
        if path.name == PAGE.name:
            continue
        lines = path.read_text().splitlines()
        in_code = False
        paragraphs: list[list[tuple[int, str]]] = [[]]
        for number, line in enumerate(lines, 1):
            if line.strip().startswith("```"):
                in_code = not in_code
                continue
            if in_code:
                continue
            if not line.strip() or line.startswith("#"):
                paragraphs.append([])
            else:
                paragraphs[-1].append((number, line))
        for para in paragraphs:
            text = " ".join(line for _, line in para)
            if _EVIDENCE.search(text):
                continue
            for number, line in para:
                if _FIGURE.search(_NAMES.sub("", re.sub(r"`[^`]*`", "", line))):
                    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                    problems.append(f"{where}:{number}: {line.strip()[:100]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate docs/validation.md from the evidence tier.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale or a figure lacks evidence")
    parser.add_argument("--outcomes", type=Path, default=None,
                        help="the record replays' outcomes of a test run (MMAEMU_EVIDENCE_LOG), instead of replaying")
    args = parser.parse_args(argv)
    global OUTCOMES
    if args.outcomes is not None:
        OUTCOMES = json.loads(args.outcomes.read_text())["outcomes"]
    text = generate(figures=not args.check)
    profiles_text = profiles_page()
    if not args.check:
        PAGE.write_text(text)
        PROFILES_PAGE.write_text(profiles_text)
        print(f"wrote {PAGE.relative_to(ROOT)} and the table of {PROFILES_PAGE.relative_to(ROOT)}")
        return 0
    status = 0
    if PROFILES_PAGE.read_text() != profiles_text:
        print("the profiles table in docs/profiles.md is stale; rerun `python tools/docs/validation_report.py`")
        status = 1
    committed = PAGE.read_text() if PAGE.exists() else ""
    if committed != text:
        print("docs/validation.md is stale; rerun `python tools/docs/validation_report.py`:")
        sys.stdout.writelines(difflib.unified_diff(committed.splitlines(True), text.splitlines(True),
                                                   "committed", "regenerated"))
        status = 1
    if "STALE" in text or "FAILED" in text or "\nMismatches:" in text:
        print("the evidence tier reports a failure or a stale mutation run (see the page)")
        status = 1
    problems = undocumented_figures(ROOT / "docs")
    if problems:
        print("figures in docs/ without an evidence reference in their paragraph:")
        print("\n".join(problems))
        status = 1
    if status == 0:
        print("docs/validation.md is current; every figure in docs/ has an evidence reference")
    return status


if __name__ == "__main__":
    sys.exit(main())
