"""The tables of docs/performance.md, rendered from the JSON that ``python -m mmaemu bench --json`` wrote.

Every figure of the page's generated sections comes from one bench file: the cpu backend's and the
reference backend's times, torch's comparators, the other configurations, the zoo and the first call,
with the machine (as the bench recorded it) and the command that measured them. So the page cannot
show a figure no run measured, and a new run is one command away from the page.

Usage::

    python tools/docs/performance_tables.py          # rewrite the generated sections of docs/performance.md
    python tools/docs/performance_tables.py --check  # exit 1 if they are stale

A section sits between ``<!-- bench:NAME:start ... -->`` and ``<!-- bench:NAME:end -->``; NAME is one of
:data:`SECTIONS`. To publish a new run: ``python -m mmaemu bench ... --json docs/data/FILE.json``, point
:data:`SOURCE` at it (one current file: delete the old one), and rerun this script.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "performance.md"
#: The one current bench run the page shows (written by ``python -m mmaemu bench --json``).
SOURCE = ROOT / "docs" / "data" / "bench_cpu_avx512.json"
#: The current ``bench --block-scaled`` run: block_scaled_mm against scaled_mm, interleaved in one run.
BLOCK_SOURCE = ROOT / "docs" / "data" / "bench_block_scaled.json"

_SECTION = re.compile(r"(<!-- bench:(?P<name>[a-z-]+):start[^>]*-->\n)(?P<body>.*?)(<!-- bench:(?P=name):end -->)", re.S)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def _gmacs(macs: int, seconds: float) -> str:
    return f"{macs / seconds / 1e9:.1f} GMAC/s"


def _shape(row: dict[str, Any]) -> str:
    return ", ".join(str(d) for d in row["shape"])


def _cite(data: dict[str, Any]) -> str:
    return f"`{SOURCE.relative_to(ROOT).as_posix()}`"


def machine(data: dict[str, Any]) -> list[str]:
    """The machine and software as the bench recorded them, and the command that measured the figures."""
    numba = f", numba {data['numba']}" if "numba" in data else ""
    return [f"Measured with mmaemu {data['version']}, torch {data['torch']}{numba}, {data['threads']} threads, on "
            f"`{data['cpu']}`; FP8 kernel: {data['cpu_fp8_kernel']} [evidence: {_cite(data)}]. The command:", "",
            "<!-- docs-test: skip minutes of timing on a quiet machine (the bench itself: tests/tools/test_bench_cli.py) -->",
            "```", data["command"], "```"]


def cpu(data: dict[str, Any]) -> list[str]:
    """The cpu backend against torch's fp32 matmul and native CPU ``_scaled_mm`` on the same operands."""
    base = data["results"][0]["config"]
    lines = [f"`{base}`, bf16 output, `splitk=1`; each time a median of the run's repeats; the ratios are the "
             "cpu backend's time over the fp32 matmul's, in wall time and in process CPU time (all threads):", "",
             f"| M, N, K ({_cite(data)}) | cpu backend | torch fp32 matmul | native CPU `_scaled_mm` "
             "| cpu / fp32 matmul (wall) | (CPU time) |",
             "|---|---|---|---|---|---|"]
    for row in data["results"]:
        native = (_ms(row["torch_native_scaled_mm_s"]) if row["torch_native_scaled_mm_s"] is not None
                  else row.get("torch_native_scaled_mm_note", "not timed"))
        lines.append(f"| {_shape(row)} | {_ms(row['cpu_s'])} ({_gmacs(row['macs'], row['cpu_s'])}) "
                     f"| {_ms(row['torch_fp32_matmul_s'])} ({_gmacs(row['macs'], row['torch_fp32_matmul_s'])}) "
                     f"| {native} | {row['cpu_over_fp32_matmul']:.2f}x | {row['cpu_over_fp32_matmul_process']:.2f}x |")
    configs = [c["config"] for c in data["results"][0].get("configs", [])]
    if configs:
        lines += ["", "Other configurations on the cpu backend, with the time's ratio to the row above (same run, same "
                  "shape):", "", f"| M, N, K ({_cite(data)}) | " + " | ".join(f"`{c}`" for c in configs) + " |",
                  "|---|" + "---|" * len(configs)]
        for row in data["results"]:
            cells = [f"{_ms(c['cpu_s'])} ({c['over_base']:.2f}x)" for c in row["configs"]]
            lines.append(f"| {_shape(row)} | " + " | ".join(cells) + " |")
    return lines


def zoo(data: dict[str, Any]) -> list[str]:
    """``mmaemu.accumulate`` with fp16, bf16 and tf32 operands on every zoo preset, over E4M3's time."""
    row = next(r for r in data["results"] if "zoo" in r)
    e4m3 = row["zoo"][0]["e4m3_cpu_s"]
    lines = [f"At M, N, K = {_shape(row)}, fast accumulation, `accumulate` on the cpu backend; E4M3 (hopper) took "
             f"{_ms(e4m3)} in the same run:", "",
             f"| preset | format | block B | time | over E4M3 (wall) | (CPU time) ({_cite(data)}) |",
             "|---|---|---|---|---|---|"]
    for z in row["zoo"]:
        lines.append(f"| `{z['preset']}` | {z['format']} | {z['block_size']} | {_ms(z['cpu_s'])} | "
                     f"{z['over_e4m3']:.2f}x | {z['over_e4m3_process']:.2f}x |")
    return lines


def first_call(data: dict[str, Any]) -> list[str]:
    """The first cpu-backend call in a fresh process, with an empty numba cache and with the on-disk one."""
    first = data["first_call"]
    return [f"The first call in a fresh process (`--first-call`; start-up and `import mmaemu` excluded): "
            f"{first['cold_s']:.1f} s when numba compiles the kernels (an empty cache), {first['warm_s']:.2f} s when "
            f"they load from the per-user cache [evidence: {_cite(data)}]."]


def reference(data: dict[str, Any]) -> list[str]:
    """The reference backend (torch, any device) on the same shapes, and its ratio to the cpu backend."""
    lines = [f"`{data['results'][0]['config']}`, bf16 output, on the CPU; at the larger shapes the bench times the "
             "first rows only and scales the time to all M rows (the column says how many):", "",
             f"| M, N, K ({_cite(data)}) | reference backend | rows timed | reference / cpu backend |",
             "|---|---|---|---|"]
    for row in data["results"]:
        m = row["shape"][0]
        timed = row["reference_rows"]
        lines.append(f"| {_shape(row)} | {_ms(row['reference_s'])} ({_gmacs(row['macs'], row['reference_s'])}) | "
                     f"{timed if timed < m else 'all'} | {row['reference_over_cpu']:.1f}x |")
    return lines


def block_scaled(data: dict[str, Any]) -> list[str]:
    """``block_scaled_mm`` against ``scaled_mm`` on the same operands, from :data:`BLOCK_SOURCE` (its own run)."""
    block = json.loads(BLOCK_SOURCE.read_text())
    cite = f"`{BLOCK_SOURCE.relative_to(ROOT).as_posix()}`"
    kernel = block["results"][0]["block_scaled"]["kernel"]
    lines = [f"`{kernel}` against `{block['results'][0]['config']}`, measured with mmaemu {block['version']}, torch "
             f"{block['torch']}, {block['threads']} threads, on `{block['cpu']}`:", "",
             f"| M, N, K ({cite}) | block_scaled_mm | / scaled_mm (wall) | / scaled_mm (process CPU time) |", "|---|---|---|---|"]
    for row in block["results"]:
        b = row["block_scaled"]
        lines.append(f"| {_shape(row)} | {_ms(b['cpu_s'])} | {b['over_scaled_mm']:.2f}x | {b['over_scaled_mm_process']:.2f}x |")
    return lines + ["", "<!-- docs-test: skip a timing run -->", "```", block["command"], "```"]


#: The generated sections, by the name their markers carry.
SECTIONS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "machine": machine, "cpu": cpu, "zoo": zoo, "first-call": first_call, "reference": reference,
    "block-scaled": block_scaled}


def render(text: str, data: dict[str, Any]) -> str:
    """``text`` with every generated section rendered from ``data``; an unknown section name raises ``KeyError``."""
    def section(match: re.Match[str]) -> str:
        return match.group(1) + "\n".join(SECTIONS[match.group("name")](data)) + "\n" + match.group(4)
    return _SECTION.sub(section, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page's generated sections are stale")
    args = parser.parse_args(argv)
    data = json.loads(SOURCE.read_text())
    text = PAGE.read_text()
    names = [m.group("name") for m in _SECTION.finditer(text)]
    if sorted(names) != sorted(SECTIONS):
        print(f"{PAGE.relative_to(ROOT)} has the sections {names}, not one of each of {sorted(SECTIONS)}", file=sys.stderr)
        return 1
    want = render(text, data)
    if args.check:
        if want != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python tools/docs/performance_tables.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(want)
    print(f"rendered {len(names)} sections of {PAGE.relative_to(ROOT)} from {SOURCE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
