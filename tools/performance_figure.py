"""Draw docs/img/bench.png from docs/data/bench.json (written by ``python -m mmaemu bench --json``).

Usage: ``python tools/performance_figure.py [bench.json]``; needs matplotlib (``pip install '.[docs]'``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERIES = (("reference_tmacs", "reference backend"), ("cpu_tmacs", "cpu backend"),
          ("torch_native_scaled_mm_tmacs", "torch native _scaled_mm (CPU)"),
          ("torch_fp32_matmul_tmacs", "torch fp32 matmul"))


def main(argv: list[str]) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    source = Path(argv[0]) if argv else ROOT / "docs" / "data" / "bench.json"
    data = json.loads(source.read_text())
    rows = data["results"]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    width = 0.8 / len(SERIES)
    for i, (key, label) in enumerate(SERIES):
        values = [row.get(key) or 0.0 for row in rows]
        ax.bar([x + i * width for x in range(len(rows))], [v * 1000 for v in values], width, label=label)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))])
    ax.set_xticklabels([f"M, N, K = {', '.join(map(str, r['shape']))}" for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel("GMAC/s (log scale)")
    ax.set_title(f"{data['threads']} CPU threads, torch {data['torch']}: exact backends against native kernels",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = ROOT / "docs" / "img" / "bench.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
