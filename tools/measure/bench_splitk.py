"""Benchmark of the shipped split-K tables: load time, lookup time, resolve_splitk time.

Usage: ``python tools/measure/bench_splitk.py [--json out.json]``. Reports figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings

import numpy as np

from mmaemu.formats import Fp8Format, OutFormat
from mmaemu.platforms._profiles import PROFILES
from mmaemu.platforms._splitk import Problem, resolve_splitk
from mmaemu.platforms._table import SplitTable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    figures: dict[str, dict[str, float]] = {}
    rng = np.random.default_rng(0)
    for table_id in ("heur_h100pcie_lt12.8.3.14", "heur_rtx4060_lt12.8.3.14"):
        loads = []
        for _ in range(5):
            SplitTable._load_shipped.cache_clear()  # the per-process cache of shipped tables
            start = time.perf_counter()
            table = SplitTable.load(table_id)
            loads.append(time.perf_counter() - start)
        rows = rng.integers(0, len(table.key), 2000)
        settings = np.searchsorted(table.setting_start, rows, side="right") - 1
        keys = table.key[rows]
        m, n, k = keys >> 42, (keys >> 21) & ((1 << 21) - 1), keys & ((1 << 21) - 1)
        times = []
        for s, mm, nn, kk in zip(settings.tolist(), m.tolist(), n.tolist(), k.tolist()):
            start = time.perf_counter()
            table.lookup(s, mm, nn, kk)
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        table.lookup_many(settings, m, n, k)
        many = (time.perf_counter() - start) / len(rows)
        figures[table_id] = {
            "rows": float(len(table.key)),
            "load_s_median": statistics.median(loads),
            "lookup_us_median": statistics.median(times) * 1e6,
            "lookup_many_us_per_row": many * 1e6,
        }
    problem = Problem(64, 5760, 1920, Fp8Format.E4M3, Fp8Format.E4M3, OutFormat.BFLOAT16, True)
    resolve = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2000):
            start = time.perf_counter()
            resolve_splitk(PROFILES["hopper"], problem)
            resolve.append(time.perf_counter() - start)
    figures["resolve_splitk"] = {"us_median": statistics.median(resolve) * 1e6}
    for name, fig in figures.items():
        print(name + ": " + ", ".join(f"{k} {v:,.3f}" for k, v in fig.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
