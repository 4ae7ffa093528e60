"""Accumulation plans: which k indices each chain covers and the combination orders."""

from __future__ import annotations

import warnings

import pytest
import torch

import mmaemu
from mmaemu._accumulation import (
    combine_parts,
    empty_part_count,
    flat_combination,
    flatten_plan,
    k_tiles,
    pairwise_steps,
    plan_accumulation,
)
from mmaemu._split import Combination, Dealing, Scheme, SplitFamily, SplitK


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


@pytest.mark.parametrize("s,steps", [
    (1, [(0,)]),
    (2, [(0,), (1,)]),
    (3, [(0,), (2,), (1,)]),  # the seeds' (p2 + p0) + p1
    (4, [(0,), (2,), (3,), (1,)]),
    (5, [(0,), (3,), (4,), (1,), (2,)]),
    (8, [(0,), (4,), (7,), (3,), (1, 5), (2, 6)]),
    (11, [(0,), (6,), (10,), (4,), (1, 7), (2, 8), (3, 9), (5,)]),
    (20, [(0,), (10,), (19,), (9,)] + [(j, j + 10) for j in range(1, 9)]),
])
def test_pairwise_steps(s: int, steps: list[tuple[int, ...]]) -> None:
    assert list(pairwise_steps(s)) == steps


@pytest.mark.parametrize("s", range(1, 65))
def test_every_part_is_combined_once(s: int) -> None:
    for scheme in (Scheme.SERIAL, Scheme.PAIRWISE, Scheme.CONTIGUOUS):
        order, role = flat_combination(s, scheme)
        assert sorted(order) == list(range(s))
        assert role[0] == 0 and all(r in (0, 1, 2) for r in role)
        assert all((role[q] == 2) == (q > 0 and role[q - 1] == 1) for q in range(s))


def test_combine_parts_adds_pairs_before_they_join() -> None:
    # S = 20 (recordings/rtx4060-pairwise, tri_big_0_9.1): parts 1 and 11 cancel before 2^-12 meets them
    parts = [torch.zeros(1) for _ in range(20)]
    parts[0], parts[1], parts[11] = torch.tensor([2.0**-12]), torch.tensor([65536.0]), torch.tensor([-65536.0])
    assert combine_parts(parts, Scheme.PAIRWISE).item() == 2.0**-12
    assert combine_parts(parts, Scheme.SERIAL).item() == 0.0


def test_flatten_plan_matches_the_plan() -> None:
    plan = plan_accumulation(64 * 7 + 16, fast=False, split=SplitK(3, Scheme.PAIRWISE))
    flat = flatten_plan(plan)
    assert flat.k_order.tolist() == [k for p in range(3) for k in flat_k(plan, p)]
    assert flat.part_chains[-1] == len(flat.chain_part) == len(flat.chain_starts) - 1
    assert not flat.identity and flatten_plan(plan_accumulation(100, fast=True, split=SplitK(1, Scheme.NONE))).identity


def flat_k(plan: object, part: int) -> list[int]:
    return flat(plan, part)


@pytest.mark.parametrize("scheme,width", [("contiguous", 128), ("serial", 64), ("pairwise", 64)])
def test_too_many_parts_for_k_are_refused(scheme: str, width: int) -> None:
    a = torch.ones(1, 64).to(torch.float8_e4m3fn)
    before = a.clone()
    with pytest.raises(ValueError, match="k-tile"):
        mmaemu.accumulate(a, a, use_fast_accum=True, splitk=(1_000_000, scheme))
    assert torch.equal(a.view(torch.uint8), before.view(torch.uint8))
    # up to two parts without a k-tile are accepted (recorded on the RTX 4060: S = 3 on one tile)
    tiles = -(-64 // width)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
        assert mmaemu.accumulate(a, a, use_fast_accum=True, splitk=(tiles + 2, scheme)).tolist() == [[64.0]]
    with pytest.raises(ValueError, match="k-tile"):
        plan_accumulation(64, fast=True, split=SplitK(tiles + 3, Scheme(scheme)))


def test_contiguous_empty_parts_are_counted_not_only_beyond_the_tile_count() -> None:
    # K = 9 tiles of 128, S = 8: two tiles a part, parts 5, 6, 7 own nothing (S <= tiles, still refused)
    with pytest.raises(ValueError, match="3 of the 8 parts"):
        plan_accumulation(9 * 128, fast=True, split=SplitK(8, Scheme.CONTIGUOUS))
    assert plan_accumulation(9 * 128, fast=True, split=SplitK(7, Scheme.CONTIGUOUS)).empty_parts == (5, 6)


@pytest.mark.parametrize("bad", [0, 2, (0, "serial"), (2, "none"), (2, "tree"), "fast", (2.0, "serial"), (True, "serial")])
def test_invalid_splitk_values(bad: object) -> None:
    with pytest.raises(ValueError, match="accepted"):
        SplitK.parse(bad)  # type: ignore[arg-type]


def test_empty_parts_contribute_zero_and_warn_only_without_evidence() -> None:
    a = torch.ones(1, 128).to(torch.float8_e4m3fn)
    # round-robin: S = 3 over two 64-wide tiles; recorded RTX 4060 calls have such parts: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mmaemu.accumulate(a, a, use_fast_accum=True, splitk=(3, "serial")).tolist() == [[128.0]]
        mmaemu.accumulate(a, a, use_fast_accum=True, splitk=(2, "serial"))
    # contiguous: S = 3 over two 128-wide tiles; no H100 evidence: warns
    b = torch.ones(1, 256).to(torch.float8_e4m3fn)
    with pytest.warns(mmaemu.UnverifiedSplitWarning, match="own no k-tile"):
        acc = mmaemu.accumulate(b, b, use_fast_accum=True, splitk=(3, "contiguous"))
    assert acc.tolist() == [[256.0]]


# Each scheme is one split family and one combination order, as the seeds state them (seeds 002):
# the H100 PCIe's contiguous runs of 128-wide k-tiles added serially; the RTX 4060's 64-wide k-tiles dealt
# round-robin, added serially or pairwise.
@pytest.mark.parametrize(("scheme", "dealing", "tile", "combination"), [
    (Scheme.CONTIGUOUS, Dealing.CONTIGUOUS, 128, Combination.SERIAL),
    (Scheme.SERIAL, Dealing.ROUND_ROBIN, 64, Combination.SERIAL),
    (Scheme.PAIRWISE, Dealing.ROUND_ROBIN, 64, Combination.PAIRWISE),
])
def test_a_scheme_is_one_family_and_one_combination(scheme: Scheme, dealing: Dealing, tile: int,
                                                     combination: Combination) -> None:
    family = scheme.family
    assert family is not None and (family.dealing, family.tile, scheme.combination) == (dealing, tile, combination)
    assert scheme in family.schemes and Scheme.NONE.family is None
    assert SplitFamily(family.value) is family  # the command line's spelling (replay --split-family)


def test_the_customoption_rule_of_each_family() -> None:
    """The H100 PCIe combines every customOption contiguously and serially; the RTX 4060 serially for
    customOption 0 and 2, pairwise for 1 (seeds 002). Split calls were replayed with customOption
    0 to 3 on the H100 (none with 4 to 7: seeds 004) and with all three on the RTX 4060 (seeds 002)."""
    for custom in range(8):
        assert SplitFamily.CONTIGUOUS.scheme_for(4, custom) is Scheme.CONTIGUOUS
        assert SplitFamily.ROUND_ROBIN.scheme_for(1, custom) is Scheme.NONE
    assert [SplitFamily.ROUND_ROBIN.scheme_for(3, c) for c in range(3)] == [Scheme.SERIAL, Scheme.PAIRWISE, Scheme.SERIAL]
    assert SplitFamily.CONTIGUOUS.replayed_custom == {0, 1, 2, 3}
    assert SplitFamily.ROUND_ROBIN.replayed_custom == {0, 1, 2}


def test_the_plan_reads_the_one_family_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tile width and the dealing have one home: a family changed there changes the plan, the tile count
    and the empty-part count, with no second copy to update (the old code kept the width in constants read
    by three ternaries)."""
    monkeypatch.setattr(SplitFamily.ROUND_ROBIN, "tile", 32)
    plan = plan_accumulation(128, fast=True, split=SplitK(2, Scheme.SERIAL))
    assert [flat(plan, j)[::32] for j in range(2)] == [[0, 64], [32, 96]]
    assert k_tiles(128, Scheme.PAIRWISE) == 4 and empty_part_count(32, SplitK(3, Scheme.SERIAL)) == 2
    monkeypatch.setattr(SplitFamily.CONTIGUOUS, "dealing", Dealing.ROUND_ROBIN)
    plan = plan_accumulation(512, fast=True, split=SplitK(2, Scheme.CONTIGUOUS))
    assert [flat(plan, j)[::128] for j in range(2)] == [[0, 256], [128, 384]]
