"""Which combination orders of pairwise split-K parts the RTX 4060 recordings accept.

For every pairwise ``gemm`` record in ``../shared/recordings/rtx4060`` and ``rtx4060-pairwise``, the
fp32 result of each part is computed with mmaemu (the part's own chains, which every split
record replays with), and each candidate rule combines them; the epilogue then gives the output
that is compared, bit for bit, with the hardware's. The rule mmaemu uses
(:func:`mmaemu._accumulation.pairwise_steps`) must fail no record; every rejected candidate is
listed with the records that reject it. This is the evidence behind the ``[Note: pairwise
combination]``; ``tests/tools/test_pairwise_rules.py`` checks it on the records the note names.

Usage::

    python tools/evidence/pairwise_rules.py            # every pairwise record (about 3 minutes on 2 cores)
    python tools/evidence/pairwise_rules.py --ids ID…  # only these records
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import mmaemu
from mmaemu._accumulation import pairwise_steps, plan_accumulation
from mmaemu._split import Scheme, SplitK

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from evidence import evidence_root, read_records  # noqa: E402

SHARED = evidence_root()
DIRECTORIES = ("rtx4060", "rtx4060-pairwise")

Combine = Callable[[list[torch.Tensor]], torch.Tensor]


def _steps(steps: Sequence[tuple[int, ...]]) -> Combine:
    def combine(p: list[torch.Tensor]) -> torch.Tensor:
        total: torch.Tensor | None = None
        for step in steps:
            value = p[step[0]] if len(step) == 1 else p[step[0]] + p[step[1]]
            total = value if total is None else total + value
        assert total is not None
        return total
    return combine


def _variant(s: int, kind: str) -> Combine:
    """The mmaemu rule with one feature changed."""
    h, pairs = (s + 1) // 2, s // 2
    last = pairs - 1
    steps: list[tuple[int, ...]] = [(0,)] + ([(h,)] if pairs else [])
    middle = [(j, j + h) for j in range(1, last)] if pairs >= 2 else []
    if kind == "pairs-one-by-one":
        middle = [(x,) for j, k in middle for x in (j, k)]
    if kind == "pairs-descending":
        middle = middle[::-1]
    tail = [(last + h,), (last,)] if pairs >= 2 else []
    if kind == "last-pair-summed" and pairs >= 2:
        tail = [(last, last + h)]
    if kind == "last-pair-lower-first" and pairs >= 2:
        tail = [(last,), (last + h,)]
    odd = [(h - 1,)] if s % 2 and s > 1 else []
    if kind == "odd-part-early":
        steps, odd = steps + odd, []
    if kind == "last-pair-at-the-end":
        return _steps(steps + middle + tail + odd)
    return _steps(steps + tail + middle + odd)


def _snake(s: int) -> Combine:
    """The serial order fitted on S <= 8 (used until this change): pairs from the front, then the back."""
    h, pairs = (s + 1) // 2, s // 2
    order: list[int] = []
    front, back, take_front = 0, pairs - 1, True
    while front <= back:
        if take_front:
            order += [front, front + h]
            front += 1
        else:
            order += [back + h, back]
            back -= 1
        take_front = not take_front
    if s % 2:
        order.append(h - 1)
    return _steps([(j,) for j in order])


def _halving_tree(s: int) -> Combine:
    def combine(p: list[torch.Tensor]) -> torch.Tensor:
        level = list(p)
        while len(level) > 1:
            n = len(level)
            half = (n + 1) // 2
            level = [level[j] + level[j + half] if j + half < n else level[j] for j in range(half)]
        return level[0]
    return combine


def _power_of_two_tree(s: int) -> Combine:
    def combine(p: list[torch.Tensor]) -> torch.Tensor:
        level = list(p)
        width = 1 << (s - 1).bit_length()
        offset = width // 2
        while offset >= 1:
            level = [level[j] + level[j + offset] if j + offset < len(level) else level[j] for j in range(offset)]
            offset //= 2
        return level[0]
    return combine


def _pairs_in_order(s: int) -> Combine:
    h = (s + 1) // 2
    return _steps([(j, j + h) for j in range(s - h)] + ([(h - 1,)] if s % 2 and s > 1 else []))


def _two_accumulators(s: int) -> Combine:
    def combine(p: list[torch.Tensor]) -> torch.Tensor:
        even, odd = p[0], p[1] if s > 1 else None
        for j in range(2, s):
            if j % 2:
                odd = p[j] if odd is None else odd + p[j]
            else:
                even = even + p[j]
        return even if odd is None else even + odd
    return combine


#: name -> (rule for S parts, what it is)
CANDIDATES: dict[str, tuple[Callable[[int], Combine], str]] = {
    "mmaemu": (lambda s: _steps(pairwise_steps(s)), "mmaemu._accumulation.pairwise_steps"),
    "fitted-serial-snake": (_snake, "the serial order fitted on S <= 8 (0, h, S-1, P-1, 1, 1+h, ...)"),
    "pairs-one-by-one": (lambda s: _variant(s, "pairs-one-by-one"), "mmaemu's, the pairs joining one part at a time"),
    "pairs-descending": (lambda s: _variant(s, "pairs-descending"), "mmaemu's, the remaining pairs in decreasing j"),
    "last-pair-summed": (lambda s: _variant(s, "last-pair-summed"), "mmaemu's, the last pair summed first"),
    "last-pair-lower-first": (lambda s: _variant(s, "last-pair-lower-first"), "mmaemu's, last pair lower part first"),
    "last-pair-at-the-end": (lambda s: _variant(s, "last-pair-at-the-end"), "mmaemu's, the last pair after the others"),
    "odd-part-early": (lambda s: _variant(s, "odd-part-early"), "mmaemu's, the odd part right after pair 0"),
    "halving-tree": (_halving_tree, "a tree halving with stride ceil(n/2)"),
    "power-of-two-tree": (_power_of_two_tree, "a tree with strides S'/2, S'/4, ..., 1 (S' a power of two)"),
    "pairs-in-order": (_pairs_in_order, "pairs (j, j + h) summed, added in order of j"),
    "two-accumulators": (_two_accumulators, "even and odd parts in two accumulators, then added"),
    "serial": (lambda s: _steps([(j,) for j in range(s)]), "parts in index order"),
}


def _tensor(arrays: Any, name: str, dtype: str) -> torch.Tensor:
    a = np.ascontiguousarray(arrays[name])
    signed = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}[a.itemsize]
    return torch.from_numpy(a.view(signed).copy()).view(getattr(torch, dtype))


def _scalar(bits: int | None) -> torch.Tensor | None:
    if bits is None:
        return None
    return torch.tensor(np.uint32(bits).view(np.int32).item(), dtype=torch.int32).view(torch.float32)


def load_records(shared: Path = SHARED, ids: set[str] | None = None) -> list[dict[str, Any]]:
    """Pairwise gemm records with their part results ``parts`` [M, N, S] and expected bits."""
    out = []
    backend = "auto"  # the cpu backend where numba loads, else the reference one: the same bits
    for directory in DIRECTORIES:
        base = shared / "recordings" / directory
        records = read_records(base)
        arrays = np.load(base / "arrays.npz")
        for r in records:
            split = r.get("splitk")
            if r["kind"] != "gemm" or not isinstance(split, list) or split[1] != "pairwise" or "a" not in r:
                continue
            if ids is not None and r["id"] not in ids:
                continue
            a, b = _tensor(arrays, r["a"], r["fmt_a"]), _tensor(arrays, r["b"], r["fmt_b"])
            s = int(split[0])
            plan = plan_accumulation(a.shape[1], fast=r["use_fast_accum"], split=SplitK(s, Scheme.PAIRWISE))
            parts = []
            for p in range(s):
                sequence = plan.part_sequence(p)
                if not sequence:
                    parts.append(torch.zeros(a.shape[0], b.shape[0]))
                    continue
                idx = torch.cat([torch.arange(start, stop) for start, stop in sequence])
                pa = a.view(torch.uint8)[:, idx].view(a.dtype)
                pb = b.view(torch.uint8)[:, idx].view(b.dtype)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    parts.append(mmaemu.accumulate(pa, pb, use_fast_accum=r["use_fast_accum"], splitk=1,
                                                   profile=r["profile"], backend=backend))
            expect = _tensor(arrays, r["expect"]["bits"], r["expect"]["dtype"]).reshape(r["expect"]["shape"])
            out.append({**r, "directory": directory, "S": s, "parts": parts, "expected": expect})
    return out


def failures(rule: Callable[[int], Combine], records: list[dict[str, Any]]) -> list[str]:
    """The ids of the records whose output the rule does not reproduce."""
    bad = []
    for r in records:
        acc = rule(r["S"])(r["parts"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = mmaemu.epilogue(acc, _scalar(r["scale_a_bits"]), _scalar(r["scale_b_bits"]),
                                  out_dtype=getattr(torch, r["out_dtype"]), scale_result=_scalar(r["scale_result_bits"]))
        if r.get("out_select") == "diagonal":
            got = torch.diagonal(got).contiguous()
        if not torch.equal(got.reshape(-1).view(torch.uint8), r["expected"].reshape(-1).contiguous().view(torch.uint8)):
            bad.append(r["id"])
    return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", nargs="+", help="only these record ids")
    parser.add_argument("--shared", type=Path, default=SHARED, help="the evidence folder (default: evidence/, or ../shared, or MMAEMU_SHARED)")
    args = parser.parse_args(argv)
    records = load_records(args.shared, set(args.ids) if args.ids else None)
    outputs = sum(r["expected"].numel() for r in records)
    print(f"{len(records)} pairwise records, {outputs} outputs, S = {sorted({r['S'] for r in records})}")
    status = 0
    for name, (rule, what) in CANDIDATES.items():
        bad = failures(rule, records)
        print(f"{name:24s} {len(bad):4d} records fail   ({what})")
        for record_id in bad:
            print(f"    {record_id}")
        if name == "mmaemu" and bad:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
