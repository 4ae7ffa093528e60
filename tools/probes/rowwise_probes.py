"""How well the recorder's row-wise probes separate the row-wise kernel's candidates: per pair, differing outputs.

For each reference profile (``hopper``: the sm_90 kernel; ``ada``: the sm_89 kernel on 24 SMs) every candidate
of its row-wise kernel model (:func:`mmaemu.kernels._model.candidates`) computes every row-wise probe
(:func:`mmaemu.recording._rowwise.rowwise_probes`); for every pair of candidates the tool counts the probe
outputs whose bits differ. A pair with 0 would be a pair a recording cannot tell apart.

Usage::

    python tools/probes/rowwise_probes.py                 # summary
    python tools/probes/rowwise_probes.py --json FILE     # also every pair's count (docs/data/rowwise_probes.json: per
                                                   # profile, the candidates' names and the matrix of counts)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mmaemu.platforms._profiles import get_profile  # noqa: E402
from mmaemu.recording._rowwise import rowwise_probes, separation  # noqa: E402

PROFILES = ("hopper", "ada")


def _field_differences(x: str, y: str) -> list[str]:
    """The choices two candidates' names differ in."""
    def choices(name: str) -> dict[str, str]:
        return dict(part.split("=", 1) for part in name.split("/")[1:])

    cx, cy = choices(x), choices(y)
    return sorted(k for k in set(cx) | set(cy) if cx.get(k) != cy.get(k))


def report() -> dict[str, object]:
    """Every profile's per-pair counts, and a summary per choice (the pairs that differ in that choice only)."""
    probes = rowwise_probes()
    out: dict[str, object] = {"probes": [{"name": p.name, "shape": list(p.shape), "fast": p.fast,
                                          "bias": p.bias is not None} for p in probes],
                              "outputs": sum(p.shape[0] * p.shape[1] for p in probes)}
    for name in PROFILES:
        counts = separation(get_profile(name, warn=False), probes)
        by_choice: dict[str, list[int]] = {}
        for (x, y), count in counts.items():
            differing = _field_differences(x, y)
            if len(differing) == 1:
                by_choice.setdefault(differing[0], []).append(count)
        names = sorted({c for pair in counts for c in pair}, key=lambda c: (c.count("/"), c))
        matrix = [[0 if x == y else counts.get((x, y), counts.get((y, x), 0)) for y in names] for x in names]
        out[name] = {
            "candidates": len(names),
            "pairs": len(counts),
            "min": min(counts.values()),
            "max": max(counts.values()),
            "pairs_not_separated": sum(1 for v in counts.values() if v == 0),
            "one_choice_apart": {k: {"pairs": len(v), "min": min(v), "max": max(v)} for k, v in sorted(by_choice.items())},
            "names": names,
            "counts": matrix,
        }
    return out


def _compact_rows(text: str) -> str:
    """Lists of integers on one line each (the count matrices)."""
    import re

    return re.sub(r"\[\s*((?:\d+,\s*)*\d+)\s*\]", lambda m: "[" + ", ".join(m.group(1).replace(",", " ").split()) + "]", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write every pair's count to this file")
    args = parser.parse_args(argv)
    found = report()
    for name in PROFILES:
        r = found[name]
        assert isinstance(r, dict)
        print(f"{name}: {r['candidates']} candidates, {r['pairs']} pairs, differing outputs per pair "
              f"{r['min']} to {r['max']} of {found['outputs']}; pairs not separated: {r['pairs_not_separated']}")
        for choice, stats in r["one_choice_apart"].items():
            print(f"  {choice:14s} alone: {stats['pairs']} pairs, {stats['min']} to {stats['max']} outputs differ")
    if args.json:
        text = json.dumps(found, indent=1, sort_keys=True)
        for row in ("counts",):  # one line per row of the matrices
            text = _compact_rows(text)
        Path(args.json).write_text(text + "\n")
    return 0 if all(found[name]["pairs_not_separated"] == 0 for name in PROFILES) else 1  # type: ignore[index]


if __name__ == "__main__":
    sys.exit(main())
