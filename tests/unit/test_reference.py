"""The reference backend (``mmaemu/backends/_reference.py``): its tiles, its Inf pass and its refusals.

Expected values come from the independent slow model (``tests/slowmodel.py``, exact rational
arithmetic), output by output, so a tile boundary that drops or repeats a row, a column or a part
fails here whatever the other backends do.
"""

from __future__ import annotations

import random

import pytest
import slowmodel as sm
import torch

from mmaemu._accumulation import plan_accumulation
from mmaemu.backends import _reference as reference
from mmaemu.errors import UnsupportedFeatureError
from mmaemu.presets import get_preset
from mmaemu._split import SplitK

FMT = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def _codes(rng: random.Random, rows: int, k: int, fmt: str) -> torch.Tensor:
    """Random finite codes (no NaN, no Inf), with some zeros and subnormals."""
    bad = {0x7F, 0xFF} if fmt == "e4m3" else set(range(0x7C, 0x80)) | set(range(0xFC, 0x100))
    pool = [c for c in range(256) if c not in bad]
    return torch.tensor([[rng.choice(pool) for _ in range(k)] for _ in range(rows)], dtype=torch.uint8).view(FMT[fmt])


def _expected(a: torch.Tensor, b: torch.Tensor, fa: str, fb: str, preset: str, fast: bool,
              split: tuple[int, str]) -> list[list[int]]:
    p = get_preset(preset)
    au, bu = a.view(torch.uint8).tolist(), b.view(torch.uint8).tolist()
    return [[sm.accumulate(ra, rb, fa, fb, p.block_size, p.frac_bits, fast, split[0], split[1]) for rb in bu]
            for ra in au]


def _bits(t: torch.Tensor) -> list[list[int]]:
    return [[v & 0xFFFFFFFF for v in row] for row in t.view(torch.int32).tolist()]


@pytest.mark.parametrize("tile_elements", [1, 40, 1 << 20], ids=["one-output-tiles", "small-tiles", "default"])
@pytest.mark.parametrize(("preset", "fast", "split"), [
    ("hopper", True, (1, "none")),
    ("ada", False, (3, "pairwise")),
    ("hopper", False, (2, "contiguous")),
    ("ada", True, (4, "serial")),
])
def test_every_tile_gives_the_slow_models_bits(monkeypatch: pytest.MonkeyPatch, tile_elements: int, preset: str,
                                               fast: bool, split: tuple[int, str]) -> None:
    monkeypatch.setattr(reference, "TILE_ELEMENTS", tile_elements)
    rng = random.Random(f"{tile_elements}-{preset}-{fast}-{split}")
    m, n, k = 5, 7, 300  # K over two slow chains of 128 and a partial one; tiles that do not divide M, N
    a, b = _codes(rng, m, k, "e4m3"), _codes(rng, n, k, "e5m2")
    plan = plan_accumulation(k, fast=fast, split=SplitK.parse(split))
    got = reference.accumulate(a, b, get_preset(preset), plan)
    assert _bits(got) == _expected(a, b, "e4m3", "e5m2", preset, fast, split)


def test_recompute_infinite_overwrites_exactly_the_rows_and_columns_with_an_inf() -> None:
    rng = random.Random(7)
    m, n, k = 4, 5, 40
    a, b = _codes(rng, m, k, "e5m2"), _codes(rng, n, k, "e5m2")
    au, bu = a.view(torch.uint8), b.view(torch.uint8)
    au[1, 3] = 0x7C  # +Inf in row 1 of a
    bu[2, 10] = 0xFC  # -Inf in row 2 of b
    plan = plan_accumulation(k, fast=True, split=SplitK.parse(1))
    sentinel = torch.full((m, n), 12345.0)
    out = reference.recompute_infinite(sentinel.clone(), a, b, get_preset("hopper"), plan)
    expected = _expected(a, b, "e5m2", "e5m2", "hopper", True, (1, "none"))
    got = _bits(out)
    for i in range(m):
        for j in range(n):
            if i == 1 or j == 2:
                assert got[i][j] == expected[i][j], (i, j)
            else:
                assert out[i, j].item() == 12345.0, (i, j)  # left as the caller's backend computed it
    assert not bool(torch.isfinite(out[1]).all())  # the Inf row's outputs are Inf or NaN, as the slow model says


def test_recompute_infinite_is_a_no_op_without_inf_codes() -> None:
    a = torch.ones(3, 16).to(torch.float8_e4m3fn)  # E4M3 has no Inf code
    out = torch.full((3, 3), -2.0)
    plan = plan_accumulation(16, fast=True, split=SplitK.parse(1))
    assert reference.recompute_infinite(out, a, a, get_preset("hopper"), plan) is out
    assert bool((out == -2.0).all())


def test_available_everywhere_but_meta_and_expresses_every_preset() -> None:
    assert reference.available(torch.device("cpu"))[0]
    usable, reason = reference.available(torch.device("meta"))
    assert not usable and "hold no values" in reason
    assert reference.expresses(get_preset("hopper")) and reference.expresses(get_preset("b200"), (torch.bfloat16,))


def test_an_fp32_accumulation_no_recording_decides_is_refused() -> None:
    a = torch.ones(2, 32).to(torch.float8_e4m3fn)
    plan = plan_accumulation(32, fast=True, split=SplitK.parse(1))
    with pytest.raises(UnsupportedFeatureError, match="hopper_mma_sync"):
        reference.accumulate(a, a, get_preset("hopper_mma_sync"), plan)
