"""Accumulation plans: which k indices each chain covers and the combination orders."""

from __future__ import annotations

import warnings

import pytest
import torch

import mmaemu
from mmaemu.accumulation import Scheme, SplitK, pairwise_order, plan_accumulation


def flat(plan: object, part: int) -> list[int]:
    return [k for start, stop in plan.part_sequence(part) for k in range(start, stop)]  # type: ignore[attr-defined]


def test_fast_and_slow_unsplit() -> None:
    assert plan_accumulation(300, fast=True, split=SplitK(1, Scheme.NONE)).parts == ((((0, 300),),),)
    slow = plan_accumulation(300, fast=False, split=SplitK(1, Scheme.NONE))
    assert slow.parts == ((((0, 128),), ((128, 256),), ((256, 300),)),)
    assert plan_accumulation(0, fast=True, split=SplitK(1, Scheme.NONE)).parts == ((),)


def test_contiguous_dealing_with_remainder_and_empty_parts() -> None:
    # K = 640: 5 tiles of 128, S = 4 -> C = 256: parts own 256, 256, 128, nothing
    plan = plan_accumulation(640, fast=True, split=SplitK(4, Scheme.CONTIGUOUS))
    assert [flat(plan, j)[:1] + flat(plan, j)[-1:] for j in range(4)] == [[0, 255], [256, 511], [512, 639], []]
    assert plan.empty_parts == (3,)
    # K not a multiple of 128: the last part is short
    plan = plan_accumulation(300, fast=True, split=SplitK(2, Scheme.CONTIGUOUS))
    assert (flat(plan, 0)[-1], flat(plan, 1)[0], flat(plan, 1)[-1]) == (255, 256, 299)


def test_round_robin_dealing_and_slow_chunks_per_part() -> None:
    plan = plan_accumulation(64 * 7, fast=False, split=SplitK(3, Scheme.PAIRWISE))
    assert [flat(plan, j)[::64] for j in range(3)] == [[0, 192, 384], [64, 256], [128, 320]]
    # slow: a new chain every 128 elements of the part's own sequence
    assert plan.parts[0] == (((0, 64), (192, 256)), ((384, 448),))
    assert plan.empty_parts == ()
    assert plan_accumulation(128, fast=True, split=SplitK(3, Scheme.SERIAL)).empty_parts == (2,)


@pytest.mark.parametrize("s,order", [(2, [0, 1]), (3, [0, 2, 1]), (4, [0, 2, 3, 1]), (5, [0, 3, 4, 1, 2]), (8, [0, 4, 7, 3, 1, 5, 6, 2])])
def test_pairwise_order(s: int, order: list[int]) -> None:
    assert pairwise_order(s) == order
    assert sorted(pairwise_order(s)) == list(range(s))


@pytest.mark.parametrize("bad", [0, 2, (0, "serial"), (2, "none"), (2, "tree"), "fast", (2.0, "serial"), (True, "serial")])
def test_invalid_splitk_values(bad: object) -> None:
    with pytest.raises(ValueError, match="accepted"):
        SplitK.parse(bad)  # type: ignore[arg-type]


def test_empty_part_warns_and_contributes_zero() -> None:
    a = torch.ones(1, 128).to(torch.float8_e4m3fn)
    with pytest.warns(mmaemu.UnverifiedSplitWarning, match="own no k-tile"):
        acc = mmaemu.accumulate(a, a, use_fast_accum=True, splitk=(3, "serial"))
    assert acc.tolist() == [[128.0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mmaemu.accumulate(a, a, use_fast_accum=True, splitk=(2, "serial"))
