"""The Triton backend's own edges in Triton's CPU interpreter, bit for bit against the reference backend.

The Triton backend also runs the shared exactness suites through the ``backend`` and
``compiled_backend`` fixtures (tests/conftest.py, from the capability table); this file adds what is
particular to its launcher and kernel.

CI has no GPU: ``TRITON_INTERPRET=1`` (set by tests/conftest.py, before the kernels are first imported)
runs the same kernels on CPU tensors with numpy, exactly for integer and IEEE fp32 work. Every branch of
the kernel and of its launcher is covered: both presets, all three format pairs, fast and slow
accumulation, S = 1..4 in every split scheme, K not a multiple of 16/32/128, K = 0, M or N = 0,
output tiles cut by the matrix edge, adversarial data, Inf codes (recomputed), NaN codes (the NaN
rule of the caller), a preset the kernel does not express (delegated), every output dtype.
Expected bits come from the reference backend (or the slow model), never from the code under test.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before mmaemu imports the kernels

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from conftest import FULL  # noqa: E402

import mmaemu  # noqa: E402
from mmaemu._accumulation import flatten_plan, plan_accumulation  # noqa: E402
from mmaemu.backends import EXECUTORS, Backend, accumulators, _dispatch, _reference as reference  # noqa: E402
from mmaemu.backends._triton import backend as triton_backend  # noqa: E402
from mmaemu.backends._triton import _convert as triton_convert  # noqa: E402
from mmaemu.backends._triton import _launch as triton_launch  # noqa: E402
from mmaemu.backends._triton import _native as triton_native  # noqa: E402
from mmaemu.backends._triton import _rz as triton_rz  # noqa: E402
from mmaemu.backends._triton.backend import Formulation, TileConfig  # noqa: E402
from mmaemu.backends._triton._selftest import adversarial_codes  # noqa: E402
from mmaemu.presets import ADA, B200_MMA_SYNC, HOPPER  # noqa: E402
from mmaemu._split import Scheme, SplitK
from mmaemu.testing import assert_bitwise_equal  # noqa: E402

if not triton_backend.interpreting():  # pragma: no cover - the kernels were imported before this file
    pytest.skip("the Triton kernels were compiled for a GPU, not the interpreter", allow_module_level=True)

PRESETS = {"hopper": HOPPER, "ada": ADA}

#: Test functions that also run the first formulation (fp32 -> int32 truncation) in CI; --full runs
#: every test with both.
CONVERT_IN_CI = frozenset({
    "test_presets_formats_and_accumulation", "test_every_split_scheme", "test_short_and_padded_blocks",
    "test_edge_tiles", "test_truncation_boundaries_and_cancellation", "test_against_the_slow_model",
    "test_outputs_meeting_inf_codes_are_recomputed_by_the_reference", "test_random_wide_range",
    "test_fraction_bits_with_all_zero_blocks", "test_zero_sizes",
})


@pytest.fixture(autouse=True, params=[Formulation.RZ, Formulation.CONVERT], ids=["rz", "convert"])
def formulation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Formulation:
    """Every test runs the second formulation (the default: round-toward-zero fmas, here their exact
    twin); the first (fp32 -> int32 truncation) runs on CONVERT_IN_CI, and on everything with --full."""
    name = getattr(request.node, "originalname", request.node.name)
    if request.param is Formulation.CONVERT and not FULL and name not in CONVERT_IN_CI:
        pytest.skip("the convert formulation runs this test with --full")
    monkeypatch.setitem(_FORMULATION, "chosen", request.param)
    return request.param


#: The formulation the running test asked for (the fixture's): the convert one is passed explicitly, the
#: RZ one is the backend's own choice for the interpreter.
_FORMULATION: dict[str, Formulation] = {"chosen": Formulation.RZ}


def accumulate(a: torch.Tensor, b: torch.Tensor, preset: object, plan: object, config: TileConfig | None = None,
               launch: object = None) -> torch.Tensor:
    """The backend's accumulators through the dispatcher (delegation and the Inf rule), with the fixture's
    formulation."""
    chosen = _FORMULATION["chosen"]
    return accumulators(Backend.TRITON, a, b, preset, plan, config=config, launch=launch,  # type: ignore[arg-type]
                        formulation=chosen if chosen is Formulation.CONVERT else None)
PAIRS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3")]
FMT = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
NONE = SplitK(1, Scheme.NONE)


def check(a: torch.Tensor, b: torch.Tensor, preset: object, fast: bool, split: SplitK,
          config: TileConfig | None = None) -> torch.Tensor:
    plan = plan_accumulation(a.shape[1], fast=fast, split=split)
    want = reference.accumulate(a, b, preset, plan)  # type: ignore[arg-type]
    got = accumulate(a, b, preset, plan, config)  # type: ignore[arg-type]
    assert_bitwise_equal(got, want)
    return got


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "slow"])
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}x{p[1]}")
@pytest.mark.parametrize("preset", list(PRESETS))
def test_presets_formats_and_accumulation(preset: str, pair: tuple[str, str], fast: bool) -> None:
    seed = hash((preset, pair, fast)) % 1000
    a = adversarial_codes(21, 272, pair[0], seed)  # K = 272: not a multiple of 32 or 128
    b = adversarial_codes(34, 272, pair[1], seed + 1)
    check(a, b, PRESETS[preset], fast, NONE)


SPLITS = [NONE] + [SplitK(s, scheme) for s in (2, 3, 4) for scheme in (Scheme.CONTIGUOUS, Scheme.SERIAL, Scheme.PAIRWISE)]


#: every (preset, split, mode) with --full; in CI each split once, presets and modes alternating
SPLIT_CASES = [(preset, split, fast) for i, split in enumerate(SPLITS) for preset in PRESETS for fast in (True, False)
               if FULL or (preset, fast) == (list(PRESETS)[i % 2], i % 4 < 2)]


@pytest.mark.parametrize(("preset", "split", "fast"), SPLIT_CASES, ids=repr)
def test_every_split_scheme(preset: str, split: SplitK, fast: bool) -> None:
    k = 400  # 4 contiguous tiles (the last short), 7 round-robin tiles: uneven parts
    a = adversarial_codes(7, k, "e4m3", 100 + split.parts)
    b = adversarial_codes(9, k, "e5m2" if split.parts % 2 else "e4m3", 200 + split.parts)
    check(a, b, PRESETS[preset], fast, split)


def test_empty_parts_contribute_plus_zero() -> None:
    # contiguous S = 3 over 2 tiles and round-robin S = 4 over 2 tiles: some parts own nothing
    a, b = adversarial_codes(5, 160, "e4m3", 7), adversarial_codes(6, 160, "e4m3", 8)
    check(a, b, HOPPER, True, SplitK(3, Scheme.CONTIGUOUS))
    a, b = adversarial_codes(5, 96, "e4m3", 9), adversarial_codes(6, 96, "e4m3", 10)
    check(a, b, ADA, False, SplitK(4, Scheme.PAIRWISE))


@pytest.mark.parametrize("k", [1, 5, 16, 17, 31, 33, 48, 127, 129])
def test_short_and_padded_blocks(k: int) -> None:
    a, b = adversarial_codes(6, k, "e4m3", k), adversarial_codes(5, k, "e5m2", k + 1)
    for preset in (HOPPER, ADA):
        check(a, b, preset, k % 2 == 0, NONE)


def test_zero_sizes() -> None:
    plan0 = plan_accumulation(0, fast=True, split=NONE)
    empty = torch.zeros(3, 0).to(torch.float8_e4m3fn)
    out = accumulate(empty, torch.zeros(4, 0).to(torch.float8_e4m3fn), HOPPER, plan0)
    assert out.shape == (3, 4) and torch.equal(out.view(torch.int32), torch.zeros(3, 4, dtype=torch.int32))
    plan = plan_accumulation(32, fast=True, split=NONE)
    a = adversarial_codes(0, 32, "e4m3", 1)
    b = adversarial_codes(4, 32, "e4m3", 2)
    assert accumulate(a, b, HOPPER, plan).shape == (0, 4)
    assert accumulate(b, a, HOPPER, plan).shape == (4, 0)


@pytest.mark.parametrize("config", [TileConfig(16, 16, 1), TileConfig(8, 32, 1), TileConfig(32, 8, 1)],
                         ids=lambda c: f"{c.block_m}x{c.block_n}")
def test_edge_tiles(config: TileConfig) -> None:
    # M and N not multiples of the tile: programs whose tiles the matrix edge cuts
    a, b = adversarial_codes(37, 96, "e4m3", 31), adversarial_codes(41, 96, "e4m3", 32)
    check(a, b, HOPPER, False, SplitK(2, Scheme.SERIAL), config)
    check(a[:1], b[:1], ADA, True, NONE, config)  # M = N = 1


#: (split, fast): slow accumulation (a chain per 4 blocks), every split scheme, and one part of one chain
PARALLEL_CASES = [(NONE, False), (SplitK(3, Scheme.CONTIGUOUS), True), (SplitK(3, Scheme.PAIRWISE), False),
                  (SplitK(2, Scheme.SERIAL), True), (SplitK(4, Scheme.PAIRWISE), True), (NONE, True)]


@pytest.mark.parametrize(("split", "fast"), PARALLEL_CASES, ids=repr)
def test_parallel_chains_give_the_same_bits(split: SplitK, fast: bool, formulation: Formulation) -> None:
    """Few outputs: one program per (chain, tile), the chain results added per part in K order and the
    parts combined in the plan's order afterwards: bit for bit the reference (both presets, M = N = 1,
    tiles cut by the matrix edge, parts that own no chain)."""
    if formulation is not Formulation.RZ:
        pytest.skip("the parallel launch belongs to the second formulation")
    k = 272 + 32 * split.parts  # 3 to 4 parts of up to 3 tiles, some of them empty
    a, b = adversarial_codes(9, k, "e4m3", 300 + split.parts), adversarial_codes(13, k, "e5m2", 400 + split.parts)
    # one tile, or (once) 2 x 2 tiles that the matrix edge cuts
    tile = TileConfig(8, 8, 1) if split == SplitK(3, Scheme.PAIRWISE) else TileConfig(16, 16, 1)
    for preset in (HOPPER, ADA):
        plan = plan_accumulation(k, fast=fast, split=split)
        want = reference.accumulate(a, b, preset, plan)
        assert_bitwise_equal(accumulate(a, b, preset, plan, launch=triton_backend.Launch(tile, True)), want)
    assert_bitwise_equal(accumulate(a[:1], b[:1], ADA, plan, launch=triton_backend.Launch(TileConfig(16, 16, 1), True)),
                         want[:1, :1])


def test_parallel_chains_are_added_in_k_order(formulation: Formulation) -> None:
    """Chain results of very different sizes, where fp32 addition order shows: chain 0 gives 2**23
    (128 products 256 x 256), chains 1 and 2 give 0.5 each. In K order (2**23 + 0.5) + 0.5 rounds to
    2**23 twice (ties to even); any other order gives 2**23 + 1."""
    if formulation is not Formulation.RZ:
        pytest.skip("the parallel launch belongs to the second formulation")
    k = 384  # slow accumulation: three chains of 128
    a = torch.zeros(2, k)
    b = torch.zeros(3, k)
    a[:, :128], b[:, :128] = 256.0, 256.0
    a[:, 128], b[:, 128] = 1.0, 0.5
    a[:, 256], b[:, 256] = 1.0, 0.5
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    plan = plan_accumulation(k, fast=False, split=NONE)
    want = reference.accumulate(a8, b8, HOPPER, plan)
    assert torch.equal(want, torch.full((2, 3), 2.0**23))
    got = accumulate(a8, b8, HOPPER, plan, launch=triton_backend.Launch(TileConfig(16, 16, 1), True))
    assert_bitwise_equal(got, want)
    # the sm_90 formulation's launcher combines its chains the same way (every sum here is exact in the
    # interpreter's float matmul too)
    assert_bitwise_equal(triton_native.accumulate_native(a8, b8, HOPPER, plan, flatten_plan(plan)).values, want)


def test_parallel_chains_recompute_outputs_meeting_inf(formulation: Formulation) -> None:
    if formulation is not Formulation.RZ:
        pytest.skip("the parallel launch belongs to the second formulation")
    a = adversarial_codes(4, 160, "e4m3", 71)
    b = adversarial_codes(5, 160, "e5m2", 72).view(torch.uint8).clone()
    b[2, 40] = 0x7C  # +Inf in E5M2
    b = b.view(torch.float8_e5m2)
    plan = plan_accumulation(160, fast=False, split=SplitK(2, Scheme.SERIAL))
    got = accumulate(a, b, HOPPER, plan, launch=triton_backend.Launch(TileConfig(8, 8, 1), True))
    assert_bitwise_equal(got, reference.accumulate(a, b, HOPPER, plan))


def test_choose_launch_cuts_the_work_finer_only_when_the_grid_leaves_sms_idle() -> None:
    choose = triton_backend.choose_launch
    big = choose(2048, 5760, 1, 132)  # the Evo 2 shape: 1,440 default tiles
    assert big == triton_backend.Launch(triton_backend.RZ_GPU_CONFIG, False)
    assert choose(2048, 5760, 15, 132) == triton_backend.Launch(triton_backend.RZ_GENERAL_GPU_CONFIG, False)
    few = choose(64, 5760, 15, 132)  # 90 general tiles on 132 SMs: every chain a program
    assert few.parallel_chains and few.tile in triton_backend.SMALL_GRID_TILES
    one = choose(64, 5760, 1, 132)  # one chain is sequential: no chain programs
    assert not one.parallel_chains and one.tile in triton_backend.SMALL_GRID_TILES
    # the model: 90 tiles of 4 warps and 180 of 2 warps do the same work with the same warps per SM
    assert one.tile == triton_backend.RZ_GPU_CONFIG
    spread = choose(64, 5760, 15, 132)
    assert spread.tile.num_warps * -(-64 // spread.tile.block_m) * -(-5760 // spread.tile.block_n) * 15 >= 4 * 132
    assert choose(1, 1, 15, 24).parallel_chains
    # every chain's result for every output must fit the workspace, else one program per tile
    huge = triton_backend.PARALLEL_WORKSPACE_BYTES // (4 * 64 * 64) + 1
    assert choose(64, 64, huge, 132) == triton_backend.Launch(triton_backend.RZ_GENERAL_GPU_CONFIG, False)
    with pytest.raises(ValueError, match="sms"):
        choose(64, 64, 1, 0)
    a, b = adversarial_codes(2, 32, "e4m3", 1), adversarial_codes(2, 32, "e4m3", 2)
    with pytest.raises(TypeError, match="launch must be a Launch"):
        accumulate(a, b, HOPPER, plan_accumulation(32, fast=True, split=NONE), launch=TileConfig(16, 16, 1))  # type: ignore[arg-type]


def _small_integers(rows: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-3, 4, (rows, k), generator=g).float().to(torch.float8_e4m3fn)


@pytest.mark.parametrize(("split", "fast"), [(NONE, True), (NONE, False), (SplitK(3, Scheme.PAIRWISE), True),
                                             (SplitK(2, Scheme.SERIAL), False), (SplitK(3, Scheme.CONTIGUOUS), False),
                                             (SplitK(2, Scheme.CONTIGUOUS), True)], ids=repr)
def test_the_sm90_formulations_layout_in_the_interpreter(split: SplitK, fast: bool, formulation: Formulation) -> None:
    """The interpreter cannot run the GPU's FP8 instruction (its tl.dot is a float matmul), so this checks
    what it can: the layout (direct or gathered), the chains and the combination, the tile edges (rows past
    128, read clamped) and the outputs a NaN code does not reach, on data where every sum is exact (small
    integers: the model truncates nothing)."""
    if formulation is not Formulation.RZ:
        pytest.skip("one run suffices")
    k = 272 + 16 * split.parts
    a, b = _small_integers(130, k, 1), _small_integers(5, k, 2)
    codes = a.view(torch.uint8).clone()
    codes[3, 7] = 0x7F  # NaN: row 3's outputs are unspecified here (the caller writes NaN over them)
    nan_a = codes.view(torch.float8_e4m3fn)
    plan = plan_accumulation(k, fast=fast, split=split)
    got = triton_native.accumulate_native(nan_a, b, HOPPER, plan, flatten_plan(plan)).values
    want = reference.accumulate(nan_a, b, HOPPER, plan)
    rows = [r for r in range(130) if r != 3]
    assert_bitwise_equal(got[rows], want[rows])
def test_the_sm90_formulation_feeds_hoppers_plans_to_the_kernel_as_they_are() -> None:
    """The hot path: hopper's plans (unsplit or contiguous parts, fast or slow, K % 16 == 0) reach the kernel
    with no gather and no copy; round-robin splits and K not a multiple of 16 are gathered, every chain
    padded to 128; slow accumulation is the kernel's SLOW mode (a chain per step of 128)."""
    def layout(k: int, fast: bool, split: SplitK) -> triton_native.NativeLayout:
        return triton_native.native_layout(flatten_plan(plan_accumulation(k, fast=fast, split=split)), k)

    direct = layout(1920, True, NONE)
    assert direct.direct and direct.bounds == (0, 1920) and not direct.slow
    slow = layout(1936, False, NONE)
    assert slow.direct and slow.bounds == (0, 1936) and slow.slow
    parts = layout(8192, True, SplitK(3, Scheme.CONTIGUOUS))
    assert parts.direct and len(parts.bounds) == 6 and all(b % 128 == 0 for b in parts.bounds)
    empty = layout(256, True, SplitK(4, Scheme.CONTIGUOUS))  # two k-tiles of 128 over four parts
    assert empty.direct and sorted(empty.bounds[i:i + 2] for i in range(0, 8, 2)) == [(0, 0), (0, 0), (0, 128),
                                                                                        (128, 256)]
    for k, split in ((200, NONE), (512, SplitK(2, Scheme.SERIAL)), (640, SplitK(3, Scheme.PAIRWISE))):
        gathered = layout(k, False, split)
        assert not gathered.direct and gathered.k_index is not None and all(b % 128 == 0 for b in gathered.bounds)
    a, b = _small_integers(3, 256, 5), _small_integers(4, 256, 6)
    call = triton_native.prepare_native(a, b, plan_accumulation(256, fast=True, split=NONE),
                                        flatten_plan(plan_accumulation(256, fast=True, split=NONE)))
    assert call.a.data_ptr() == a.data_ptr() and call.b.data_ptr() == b.data_ptr()  # no copy
    assert_bitwise_equal(call.run(), reference.accumulate(a, b, HOPPER, plan_accumulation(256, fast=True, split=NONE)))


def test_the_sm90_formulation_scans_only_e5m2_operands_for_inf(monkeypatch: pytest.MonkeyPatch) -> None:
    """E4M3 has no Inf code: its operands are never scanned (a scan is a host synchronisation); an E5M2
    operand's Inf outputs are recomputed by the reference."""
    a = _small_integers(4, 128, 7)
    assert not triton_native._has_inf(a)
    b = _small_integers(5, 128, 8).float().to(torch.float8_e5m2)
    codes = b.view(torch.uint8).clone()
    codes[2, 9] = 0x7C  # +Inf
    b_inf = codes.view(torch.float8_e5m2)
    assert triton_native._has_inf(b_inf)
    plan = plan_accumulation(128, fast=True, split=NONE)
    got = triton_native.accumulate_native(a, b_inf, HOPPER, plan, flatten_plan(plan))
    assert got.inf_zeroed  # the kernel counted the Inf as zero: the dispatcher recomputes its outputs
    assert_bitwise_equal(_dispatch.accumulators(EXECUTORS[Backend.TRITON], a, b_inf, HOPPER, plan),
                         reference.accumulate(a, b_inf, HOPPER, plan))


def test_the_sm90_formulation_applies_only_there_and_to_the_hopper_arithmetic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_native, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    capability = [(9, 0)]
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability[0])
    gpu = torch.device("cuda", 0)
    assert triton_backend.native_applies(HOPPER, gpu)
    assert triton_backend.native_applies(mmaemu.presets.Preset("same-arithmetic", block_size=32, frac_bits=13), gpu)
    assert not triton_backend.native_applies(ADA, gpu)
    assert not triton_backend.native_applies(mmaemu.presets.Preset("f12", block_size=32, frac_bits=12), gpu)
    assert not triton_backend.native_applies(HOPPER, torch.device("cpu"))
    for other in ((8, 9), (10, 0), (12, 0), (9, 1)):
        capability[0] = other
        assert not triton_backend.native_applies(HOPPER, gpu), other
    capability[0] = (9, 0)
    monkeypatch.setenv(triton_backend.NATIVE_ENV, "0")
    assert not triton_backend.native_applies(HOPPER, gpu)
    monkeypatch.delenv(triton_backend.NATIVE_ENV)
    monkeypatch.setattr(triton_native, "_NATIVE_OFF", {"cuda:0"})
    assert not triton_backend.native_applies(HOPPER, gpu)


@pytest.mark.parametrize("value,on", [("off", False), ("false", False), ("no", False), (" 0", False), ("OFF", False),
                                      ("1", True), ("yes", True), ("", True)])
def test_the_native_switch_is_a_boolean_variable(monkeypatch: pytest.MonkeyPatch, value: str, on: bool) -> None:
    """Old code: only the exact string "0" turned the sm_90 formulation off."""
    monkeypatch.setattr(triton_native, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setenv(triton_backend.NATIVE_ENV, value)
    assert triton_backend.native_applies(HOPPER, torch.device("cuda", 0)) is on


def test_an_unknown_native_switch_value_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(triton_backend.NATIVE_ENV, "maybe")
    with pytest.raises(ValueError, match="MMAEMU_TRITON_NATIVE='maybe' is not a boolean"):
        triton_backend.native_applies(HOPPER, torch.device("cuda", 0))


def test_tile_configs_cuda_would_refuse_are_refused_at_construction() -> None:
    for bad in ((48, 64, 4), (64, 64, 3), (64, 64, 64), (0, 64, 4), (2048, 64, 4)):
        with pytest.raises(ValueError, match="power of two"):
            TileConfig(*bad)
    with pytest.raises(TypeError):
        TileConfig(64, 64, 4.0)  # type: ignore[arg-type]
    assert TileConfig(1, 1024, 32).num_warps == 32


def test_every_tile_is_launched_on_one_grid_axis_on_the_operands_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """One grid axis (CUDA caps the others at 65,535 programs: N > 4,194,240 failed with 64-wide tiles),
    each program mapping to its (row, column) tile; the launch runs under the operands' device."""
    entered: list[torch.device] = []
    real = triton_launch.on_device

    def recording(device: torch.device):  # type: ignore[no-untyped-def]
        entered.append(device)
        return real(device)

    monkeypatch.setattr(triton_convert, "on_device", recording)
    monkeypatch.setattr(triton_rz, "on_device", recording)
    a, b = adversarial_codes(5, 64, "e4m3", 41), adversarial_codes(70, 64, "e5m2", 42)
    check(a, b, HOPPER, True, NONE, TileConfig(2, 8, 1))  # 3 x 9 tiles, the last row and column cut
    assert entered == [torch.device("cpu")]
    monkeypatch.setattr(triton_convert, "MAX_PROGRAMS", 26)
    monkeypatch.setattr(triton_rz, "MAX_PROGRAMS", 26)
    with pytest.raises(ValueError, match="27 tiles of 2 x 8"):
        accumulate(a, b, HOPPER, plan_accumulation(64, fast=True, split=NONE), TileConfig(2, 8, 1))


def _codes(rows: list[list[int]], fmt: str) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.uint8).view(FMT[fmt])


def test_truncation_boundaries_and_cancellation() -> None:
    k = 64
    one, big = 0x38, 0x7E  # 1.0 and 448 (e4m3)
    rows = [
        [big] + [0x01] * (k - 1),  # one large product, 63 subnormal ones: all truncated away
        [big, big | 0x80] + [one] * (k - 2),  # exact cancellation of the largest terms
        [0x30 + (i % 8) for i in range(k)],  # a run of values just below 1: carries
        [one | (0x80 if i % 2 else 0) for i in range(k)],  # alternating signs
        [0x00, 0x80] * (k // 2),  # zeros of both signs: +0
        [0x7E, 0x08] * (k // 2),  # largest and smallest normal
    ]
    a = _codes(rows, "e4m3")
    b = _codes([[one] * k, [0x01] * k, [0x7B] * k], "e5m2")  # 1.0, smallest subnormal, 57344
    for preset in (HOPPER, ADA):
        for fast in (True, False):
            got = check(a, b, preset, fast, NONE)
            assert (got.view(torch.int32)[4] == 0).all()  # +0, never -0


def test_against_the_slow_model() -> None:
    import slowmodel as sm

    a = adversarial_codes(3, 200, "e4m3", 77)
    b = adversarial_codes(4, 200, "e5m2", 78)
    for fast, (parts, scheme) in ((True, (1, "none")), (False, (3, "pairwise"))):
        split = NONE if parts == 1 else SplitK(parts, Scheme(scheme))
        got = accumulate(a, b, HOPPER, plan_accumulation(200, fast=fast, split=split))
        for i, row_a in enumerate(a.view(torch.uint8).tolist()):
            for j, row_b in enumerate(b.view(torch.uint8).tolist()):
                want = sm.accumulate(row_a, row_b, "e4m3", "e5m2", 32, 13, fast, parts, scheme)
                assert int(got.view(torch.int32)[i, j]) & 0xFFFFFFFF == want


def test_outputs_meeting_inf_codes_are_recomputed_by_the_reference() -> None:
    a = adversarial_codes(5, 64, "e5m2", 3)
    b = adversarial_codes(6, 64, "e4m3", 4)
    a_codes = a.view(torch.uint8).clone()
    a_codes[1, 3] = 0x7C  # +Inf
    a_codes[2, 40] = 0xFC  # -Inf
    got = check(a_codes.view(torch.float8_e5m2), b, HOPPER, True, NONE)
    assert not torch.isfinite(got[1:3]).all()
    # Inf codes in b (rows of b are output columns), and in both
    b5 = adversarial_codes(6, 64, "e5m2", 8).view(torch.uint8).clone()
    b5[4, 20] = 0x7C
    got = check(a, b5.view(torch.float8_e5m2), HOPPER, False, NONE)
    assert not torch.isfinite(got[:, 4]).all()
    check(a_codes.view(torch.float8_e5m2), b5.view(torch.float8_e5m2), HOPPER, True, NONE)


def test_nan_codes_follow_the_callers_rule() -> None:
    a = adversarial_codes(4, 64, "e4m3", 5)
    b = adversarial_codes(5, 64, "e4m3", 6)
    a_codes = a.view(torch.uint8).clone()
    a_codes[2, 10] = 0x7F
    a = a_codes.view(torch.float8_e4m3fn)
    got = mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1, backend="triton")
    want = mmaemu.accumulate(a, b, use_fast_accum=True, splitk=1, backend="reference")
    assert_bitwise_equal(got, want)
    assert (got[2].view(torch.int32) == 0x7FFFFFFF).all()


def test_presets_the_kernel_does_not_express_are_delegated() -> None:
    assert not triton_backend.expresses(B200_MMA_SYNC)
    a, b = adversarial_codes(3, 64, "e4m3", 11), adversarial_codes(4, 64, "e4m3", 12)
    check(a, b, B200_MMA_SYNC, True, NONE)


def test_random_wide_range() -> None:
    gen = torch.Generator().manual_seed(3)
    a = (torch.randn(19, 208, generator=gen) * torch.exp2(torch.randint(-10, 10, (19, 208), generator=gen).float()))
    b = (torch.randn(23, 208, generator=gen) * 30)
    check(a.clamp(-448, 448).to(torch.float8_e4m3fn), b.clamp(-448, 448).to(torch.float8_e4m3fn), HOPPER, True,
          NONE)


OUTS = [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2]


@pytest.mark.parametrize("out_dtype", OUTS, ids=lambda d: str(d).replace("torch.", ""))
def test_scaled_mm_every_output_dtype(out_dtype: torch.dtype) -> None:
    # E4M3 x E4M3 -> E5M2 is rejected by the reference cuBLASLt: use E5M2 x E4M3 there
    fmt_a = "e5m2" if out_dtype == torch.float8_e5m2 else "e4m3"
    x = adversarial_codes(24, 160, fmt_a, 40)
    w = adversarial_codes(32, 160, "e4m3", 41)
    sa, sb = torch.tensor(0.375), torch.tensor(1 / 1024)
    kwargs = dict(out_dtype=out_dtype, use_fast_accum=out_dtype != torch.float32, splitk=1)
    extra = {"scale_result": torch.tensor(0.5)} if out_dtype.itemsize == 1 else {}
    got = mmaemu.scaled_mm(x, w.t(), sa, sb, backend="triton", **extra, **kwargs)  # type: ignore[arg-type]
    want = mmaemu.scaled_mm(x, w.t(), sa, sb, backend="reference", **extra, **kwargs)  # type: ignore[arg-type]
    assert_bitwise_equal(got, want)


def test_scaled_mm_with_an_explicit_split() -> None:
    x = adversarial_codes(8, 384, "e4m3", 50)
    w = adversarial_codes(16, 384, "e4m3", 51)
    one = torch.tensor(1.0)
    for profile, split in (("hopper", (3, "contiguous")), ("ada", (4, "pairwise"))):
        got = mmaemu.scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, profile=profile, splitk=split,
                               backend="triton")
        want = mmaemu.scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16, profile=profile, splitk=split,
                                backend="reference")
        assert_bitwise_equal(got, want)


_COMPILE = r"""
import re, sys
sys.path.insert(0, "tools/evidence")
import gpu_static as gs
for kernel in ("chain_gemm", "chain_gemm_rz"):
    for block in (32, 16):
        v = gs.Variant("t", block, 13, 64, 64, 8, kernel, one_chain=False)
        ptx = gs.compile_variant(v, 90).asm["ptx"]  # with the JIT's specialisation, as the backend launches it
        body = "\n".join(l for l in ptx.splitlines() if not l.strip().startswith("//"))
        print(kernel, block, len(re.findall(r"\bfma\.rn", body)), len(re.findall(r"\bfma\.rz", body)),
              len(re.findall(r"\b(mma|wgmma)\b", body)), len(re.findall(r"cvt\.rzi\.s32\.f32", body)),
              len(re.findall(r"\bshfl\.", body)))
"""


def test_the_gpu_compilation_is_exact_by_construction() -> None:
    """Compile both formulations for sm_90 on the CPU (Triton ships ptxas): no contracted (round-to-
    nearest) FMA and no tensor-core MMA in either; the first truncates with the fp32 -> int32
    conversion, the second with round-toward-zero fmas and no conversion."""
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _COMPILE], cwd=Path(__file__).resolve().parents[2], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.split("\n") if line.strip()]
    assert [(r[0], r[1]) for r in rows] == [("chain_gemm", "32"), ("chain_gemm", "16"), ("chain_gemm_rz", "32"),
                                            ("chain_gemm_rz", "16")]
    for kernel, _, fma_rn, fma_rz, mma, cvt, shfl in rows:
        assert (int(fma_rn), int(mma), int(shfl)) == (0, 0, 0), kernel
        if kernel == "chain_gemm":
            assert int(cvt) > 0 and int(fma_rz) == 0
        else:
            assert int(cvt) == 0 and int(fma_rz) >= 4  # c's entry and the three per product


@pytest.mark.parametrize("s,fast", [(5, False), (11, True), (20, True)] + ([(32, False)] if FULL else []))
def test_pairwise_combination_at_large_s(s: int, fast: bool) -> None:
    """The pairwise steps (pairs summed before they join the total) at S up to 32."""
    k = 64 * s
    a = adversarial_codes(3, k, "e4m3", 300 + s)
    b = adversarial_codes(5, k, "e4m3", 400 + s)
    # a tri probe in row 0 / column 0: 2**-9 in part 1, +-448**2 in parts s - 1 and s // 2
    a[0] = torch.zeros(k, dtype=torch.uint8).view(torch.float8_e4m3fn)
    b[0] = torch.zeros(k, dtype=torch.uint8).view(torch.float8_e4m3fn)
    av, bv = a.view(torch.uint8), b.view(torch.uint8)
    av[0, 64], bv[0, 64] = 0x01, 0x38
    av[0, 64 * (s - 1)], bv[0, 64 * (s - 1)] = 0x7E, 0x7E
    av[0, 64 * (s // 2)], bv[0, 64 * (s // 2)] = 0x7E, 0xFE
    check(a, b, ADA, fast, SplitK(s, Scheme.PAIRWISE))


@pytest.mark.parametrize("frac", range(10, 21))
def test_fraction_bits_with_all_zero_blocks(frac: int) -> None:
    """F = 10..20 with blocks that are all zero while c = +0 (the clamped exponent's scale must stay finite)."""
    from mmaemu.presets import Preset  # noqa: PLC0415

    block = max(b for b in (1, 2, 4, 8, 16) if frac + 2 + (b + 1).bit_length() <= 24)  # the kernel's exact range
    preset = Preset(f"f{frac}", block_size=block, frac_bits=frac)
    assert triton_backend.expresses(preset)
    a = adversarial_codes(4, 96, "e4m3", frac)
    b = adversarial_codes(6, 96, "e5m2", frac + 50)
    a.view(torch.uint8)[:, :32] = 0  # the first blocks of every chain: all zero in a and b, c = +0
    b.view(torch.uint8)[:, :32] = 0
    a.view(torch.uint8)[1] = 0  # a row with every block zero
    b.view(torch.uint8)[2] = 0
    check(a, b, preset, frac % 2 == 0, NONE if frac % 3 else SplitK(2, Scheme.SERIAL))
