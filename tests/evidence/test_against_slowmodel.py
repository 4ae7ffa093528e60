"""The package against the independent slow model (tests/slowmodel.py), bit for bit.

Every case runs on every backend through the ``backend`` fixture. Cases are hypothesis-generated
and hand-built adversarial ones: truncation boundaries, massive cancellation, subnormal inputs and
products, the largest exponents, all-zero blocks with nonzero c, NaN and Inf codes, K not a
multiple of 16, 32 or 128, M or N = 1, every output dtype, all three format pairs, fast and slow
accumulation, splits S = 1..8 in all three schemes.
"""

from __future__ import annotations

import struct
import threading
import warnings
from typing import Any

import pytest
import slowmodel as sm
import torch
from conftest import FULL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from own_stack import on_own_stack

import mmaemu

FMT = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
PAIRS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3")]
PRESETS = {"hopper": (32, 13), "ada": (16, 13)}
OUTS = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "e4m3": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
}
SPLITS = [(1, "none")] + [(s, scheme) for s in range(2, 9) for scheme in ("contiguous", "serial", "pairwise")]
EXAMPLES = 400 if FULL else 40
_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Triton's interpreter takes seconds a GEMM case: in CI its hypothesis tests draw this many (``--full``: EXAMPLES)
TRITON_EXAMPLES = EXAMPLES if FULL else 10


def _for_backend(backend: str) -> settings:
    """The hypothesis settings of a test run on ``backend`` (fewer examples in Triton's interpreter)."""
    return settings(_SETTINGS, max_examples=TRITON_EXAMPLES if backend == "triton" else EXAMPLES)


def codes_tensor(rows: list[list[int]], fmt: str) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.uint8).view(FMT[fmt])


def f32_bits(x: float) -> int:
    return int(struct.unpack("<I", struct.pack("<f", x))[0])


def out_bits(t: torch.Tensor) -> list[int]:
    width = t.element_size() * 8
    view = {8: torch.uint8, 16: torch.int16, 32: torch.int32}[width]
    mask = (1 << width) - 1
    return [int(v) & mask for v in t.contiguous().view(view).flatten().tolist()]


def scalar(bits: int) -> torch.Tensor:
    return torch.tensor([bits], dtype=torch.int64).to(torch.int32).view(torch.float32).reshape(())


# ---- strategies -----------------------------------------------------------------------------

SPECIAL = {
    "e4m3": [0x00, 0x80, 0x01, 0x81, 0x07, 0x08, 0x7E, 0xFE, 0x7F, 0xFF, 0x38, 0xB8],
    "e5m2": [0x00, 0x80, 0x01, 0x81, 0x03, 0x04, 0x7B, 0xFB, 0x7C, 0xFC, 0x7D, 0xFF, 0x3C, 0xBC],
}


def code_strategy(fmt: str, *, specials: bool) -> st.SearchStrategy[int]:
    finite = st.integers(0, 255).filter(lambda c: c not in (0x7F, 0xFF) if fmt == "e4m3" else (c & 0x7F) < 0x7C)
    choices = [finite, st.sampled_from([c for c in SPECIAL[fmt] if specials or c in (0x00, 0x80, 0x01, 0x81)])]
    # narrow exponent ranges make long carries and exact cancellations likely
    narrow = st.integers(0, 15).map(lambda m: (0x38 if fmt == "e4m3" else 0x3C) + (m & 3) | (m & 8) << 4)
    choices.append(narrow)
    return st.one_of(*choices)


def matrix(fmt: str, rows: int, k: int, specials: bool) -> st.SearchStrategy[list[list[int]]]:
    return st.lists(st.lists(code_strategy(fmt, specials=specials), min_size=k, max_size=k), min_size=rows, max_size=rows)


@st.composite
def gemm_case(draw: Any, *, specials: bool) -> dict[str, Any]:
    fa, fb = draw(st.sampled_from(PAIRS))
    k = draw(st.sampled_from([0, 1, 15, 16, 17, 31, 32, 33, 48, 64, 96, 127, 128, 129, 200, 256, 320, 384, 448]))
    m = draw(st.integers(1, 2))
    n = draw(st.integers(1, 3))
    a = draw(matrix(fa, m, k, specials))
    b = draw(matrix(fb, n, k, specials))
    # cancellation: sometimes make b's first row the negation of a's first row pattern
    if draw(st.booleans()) and k and fa == fb:
        b[0] = [c ^ 0x80 if i % 2 else c for i, c in enumerate(a[0])]
    return {
        "fa": fa, "fb": fb, "a": a, "b": b,
        "preset": draw(st.sampled_from(sorted(PRESETS))),
        "fast": draw(st.booleans()),
        "split": draw(st.sampled_from(SPLITS)),
    }


def run_accumulate(case: dict[str, Any], backend: str) -> list[int]:
    a, b = codes_tensor(case["a"], case["fa"]), codes_tensor(case["b"], case["fb"])
    if not case["a"][0]:
        a = torch.empty((len(case["a"]), 0), dtype=FMT[case["fa"]])
        b = torch.empty((len(case["b"]), 0), dtype=FMT[case["fb"]])
    s, scheme = case["split"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
        try:
            # on a thread of its own: under hypothesis the call would sit on a frame-stack chunk
            # boundary (tests/own_stack.py), three times slower in Triton's interpreter
            acc = on_own_stack(
                mmaemu.accumulate,
                a, b, use_fast_accum=case["fast"], splitk=1 if s == 1 else (s, scheme), profile=case["preset"],
                backend=backend,
            )
        except ValueError as exc:
            if "k-tile" not in str(exc):
                raise
            return REFUSED
    return out_bits(acc)


#: What the tests expect for a split that leaves more than two parts without a k-tile.
REFUSED = ["refused: more than two parts own no k-tile"]


def refused_split(k: int, s: int, scheme: str) -> bool:
    """docs/semantics.md: a split with more than two parts without a k-tile is refused (ValueError).

    Counted on the slow model's own dealing of the k indices.
    """
    if s == 1 or k == 0:
        return False
    parts = sm._contiguous_parts(k, s) if scheme == "contiguous" else sm._round_robin_parts(k, s)
    return sum(not p for p in parts) > 2


def slow_accumulate(case: dict[str, Any]) -> list[int]:
    block, frac = PRESETS[case["preset"]]
    s, scheme = case["split"]
    if refused_split(len(case["a"][0]), s, scheme):
        return REFUSED
    return [
        sm.gemm_output(ra, rb, case["fa"], case["fb"], block, frac, case["fast"], s, scheme,
                       f32_bits(1.0), f32_bits(1.0), "float32")
        for ra in case["a"]
        for rb in case["b"]
    ]


# ---- accumulate -----------------------------------------------------------------------------


def _accumulate_cases(backend: str, *, specials: bool) -> None:
    """Hypothesis GEMM cases (NaN, Inf and special codes with ``specials``) on ``backend`` against the slow model."""
    @_for_backend(backend)
    @given(case=gemm_case(specials=specials))
    def check(case: dict[str, Any]) -> None:
        assert run_accumulate(case, backend) == slow_accumulate(case)

    check()


def test_the_backend_call_on_its_own_thread_returns_its_result_and_raises_its_error() -> None:
    """tests/own_stack.py: the call runs on another thread; its result comes back, its ValueError is raised here."""
    assert on_own_stack(threading.current_thread) is not threading.current_thread()
    case = dict(fa="e4m3", fb="e4m3", a=[[0x38] * 32], b=[[0x38] * 32], preset="hopper", fast=True, split=(8, "contiguous"))
    assert refused_split(32, 8, "contiguous")
    assert run_accumulate(case, "reference") == REFUSED == slow_accumulate(case)
    a = codes_tensor(case["a"], "e4m3")
    with pytest.raises(ValueError, match="k-tile"):
        on_own_stack(mmaemu.accumulate, a, a, use_fast_accum=True, splitk=(8, "contiguous"), backend="reference")


def test_accumulate_random(backend: str) -> None:
    _accumulate_cases(backend, specials=False)


def test_accumulate_with_nan_inf_and_specials(backend: str) -> None:
    _accumulate_cases(backend, specials=True)


def _adversarial() -> list[tuple[str, dict[str, Any]]]:
    cases = []
    big, tiny = 0x7E, 0x01  # e4m3 448 and 2**-9 (subnormal)
    for preset in PRESETS:
        for fast in (True, False):
            # one huge product and many just below the truncation grid of its block
            a = [[big] + [0x20 + (i % 8) for i in range(63)]]
            b = [[big] + [0x20 + ((3 * i) % 8) for i in range(63)]]
            cases.append((f"truncation-{preset}-{fast}", dict(fa="e4m3", fb="e4m3", a=a, b=b, preset=preset, fast=fast, split=(1, "none"))))
            # exact cancellation leaving only sub-grid residue
            a = [[big, big ^ 0x80] + [tiny] * 30]
            b = [[big, big] + [0x38] * 30]
            cases.append((f"cancellation-{preset}-{fast}", dict(fa="e4m3", fb="e4m3", a=a, b=b, preset=preset, fast=fast, split=(1, "none"))))
            # subnormal x subnormal products only (e5m2 x e4m3: products down to 2**-25)
            a = [[0x01, 0x02, 0x03, 0x81] * 8]
            b = [[0x01, 0x05, 0x07, 0x83] * 8]
            cases.append((f"subnormal-{preset}-{fast}", dict(fa="e5m2", fb="e4m3", a=a, b=b, preset=preset, fast=fast, split=(1, "none"))))
            # the largest exponents: e5m2 57344 everywhere, long K
            a = [[0x7B] * 1024]
            b = [[0x7E] * 1024]
            cases.append((f"largest-{preset}-{fast}", dict(fa="e5m2", fb="e4m3", a=a, b=b, preset=preset, fast=fast, split=(1, "none"))))
            # Inf meets zero and opposite Inf under every split scheme
            # (rows 2 and 3: +Inf and -Inf products in one block, and a +Inf c meeting a -Inf product)
            a = [[0x7C] + [0x3C] * 191, [0xFC] + [0x00] * 191, [0x7C, 0xFC] + [0x3C] * 190,
                 [0x7C] + [0x3C] * 39 + [0xFC] + [0x3C] * 151]
            b = [[0x38] * 192, [0x00] + [0x38] * 191]
            for split in [(1, "none"), (3, "contiguous"), (3, "serial"), (5, "pairwise")]:
                cases.append((f"inf-{preset}-{fast}-{split}", dict(fa="e5m2", fb="e4m3", a=a, b=b, preset=preset, fast=fast, split=split)))
    return cases


ADVERSARIAL = _adversarial()


@pytest.mark.parametrize("case", [c for _, c in ADVERSARIAL], ids=[i for i, _ in ADVERSARIAL])
def test_accumulate_adversarial(backend: str, case: dict[str, Any]) -> None:
    assert run_accumulate(case, backend) == slow_accumulate(case)


@pytest.mark.parametrize("split", SPLITS, ids=[f"{s}-{x}" for s, x in SPLITS])
@pytest.mark.parametrize("k", [16, 80, 272, 1040])
def test_every_split_scheme(backend: str, split: tuple[int, str], k: int) -> None:
    gen = torch.Generator().manual_seed(k * 31 + split[0])
    a = [[int(v) for v in torch.randint(0, 0x7F, (k,), generator=gen)]]
    b = [[int(v) for v in torch.randint(0, 0x7F, (k,), generator=gen) ^ (torch.rand(k, generator=gen) < 0.5).int() * 0x80]]
    for preset in PRESETS:
        for fast in (True, False):
            case = dict(fa="e4m3", fb="e4m3", a=a, b=b, preset=preset, fast=fast, split=split)
            assert run_accumulate(case, backend) == slow_accumulate(case), (preset, fast)


def _order_sensitive_parts(s: int, scheme: str) -> dict[str, Any]:
    """Split parts whose fp32 sum depends on the order of the additions.

    Part j (the seeds' dealing: contiguous 128-wide tiles on the H100, round-robin 64-wide tiles on
    the RTX 4060; K = S tiles, one tile a part) holds +B, +t, -B, +3t, ... with B about 2**24 and t
    about 2**-12: (B - B) + t keeps t, (B + t) - B loses it.
    """
    width = 128 if scheme == "contiguous" else 64
    a, b = [], []
    for j in range(s):
        big = j % 2 == 0
        a += [0x7E if big else 0x01 + (j % 4 == 3) * 2] * width
        b += [(0x7E if big else 0x30) | (0x80 if j % 4 == 2 else 0)] * width
    return dict(a=[a], b=[b])


@pytest.mark.parametrize("scheme", ["contiguous", "serial", "pairwise"])
def test_split_combination_order_matters_and_matches(backend: str, scheme: str) -> None:
    for s in range(2, 9):
        for preset in PRESETS:
            for fast in (True, False):
                case = dict(fa="e4m3", fb="e4m3", preset=preset, fast=fast, split=(s, scheme),
                            **_order_sensitive_parts(s, scheme))
                assert run_accumulate(case, backend) == slow_accumulate(case), (s, preset, fast)


def _tri_probe(s: int, scheme: str, eps: int, plus: int, minus: int) -> dict[str, Any]:
    """One tile a part (K = S tiles); part ``eps`` holds 2**-9, parts ``plus``/``minus`` +-448**2.

    ulp(448**2) = 2**-6, so 2**-9 survives only if the two large parts cancel before it meets
    either of them: the result tells which parts the combination adds to each other first (the
    RTX 4060's own probes, ``tri_big``/``tri_var`` in recordings/, are built this way).
    """
    width = 128 if scheme == "contiguous" else 64
    a, b = [0] * (s * width), [0] * (s * width)
    a[eps * width], b[eps * width] = 0x01, 0x38  # 2**-9 * 1
    a[plus * width], b[plus * width] = 0x7E, 0x7E  # 448 * 448
    a[minus * width], b[minus * width] = 0x7E, 0xFE  # 448 * -448
    return dict(a=[a], b=[b])


def _random_parts(s: int, scheme: str, seed: int) -> dict[str, Any]:
    """Every element random (E4M3, mixed signs): generic rounding in every addition of the parts."""
    width = 128 if scheme == "contiguous" else 64
    gen = torch.Generator().manual_seed(seed)
    k = s * width
    a = [int(v) for v in torch.randint(0, 0x7F, (k,), generator=gen)]
    b = [int(v) ^ (0x80 if bool(f) else 0) for v, f in zip(torch.randint(0, 0x7F, (k,), generator=gen),
                                                               torch.rand(k, generator=gen) < 0.5)]
    return dict(a=[a], b=[b])


#: S = 2 .. 32 (every S the RTX 4060 tables hold, and the gaps between them).
_ORDER_S = list(range(2, 33))
#: pairwise (whose order depends on S) at every S; the serial families at a sample unless --full.
_ORDER_CASES = [(scheme, s) for scheme in ("pairwise", "serial", "contiguous") for s in _ORDER_S
                if FULL or scheme == "pairwise" or s in (2, 3, 5, 8, 13, 21, 32)]


@pytest.mark.parametrize("scheme,s", _ORDER_CASES)
def test_combination_order_probes_up_to_32_parts(backend: str, scheme: str, s: int) -> None:
    """Synthetic order-sensitive splits for S up to 32 against the slow model (bits)."""
    gen = torch.Generator().manual_seed(1000 * s + len(scheme))
    triples = [(0, 1, s - 1), (s - 1, 0, s // 2), ((s + 1) // 2, 0, s - 1)]
    n_random = 40 if FULL else 4
    for _ in range(n_random):
        triples.append(tuple(int(v) for v in torch.randperm(s, generator=gen)[:3]) if s >= 3 else (0, 1, 1))
    cases = [_tri_probe(s, scheme, e, p, m) for e, p, m in triples if len({e, p, m}) == 3]
    cases.append(_random_parts(s, scheme, seed=s))
    for parts in cases:
        case = dict(fa="e4m3", fb="e4m3", preset="ada", fast=True, split=(s, scheme), **parts)
        assert run_accumulate(case, backend) == slow_accumulate(case), (s, scheme, parts["a"][0].index(1) if 1 in parts["a"][0] else None)


def test_the_pairwise_order_on_every_backend(backend: str) -> None:
    """One order-sensitive pairwise split (S = 7) on every backend, the Triton interpreter included, against the
    slow model: the one definition of the combination order (accumulation.combination_steps) is what every
    backend computes, so a fault in it fails each of them (tools/evidence/mutants.py, every_backend)."""
    s = 7
    for e, p, m in ((0, 1, 5), (1, 2, 6), (1, 4, 0)):  # placements where pairwise and serial give other bits
        case = dict(fa="e4m3", fb="e4m3", preset="ada", fast=True, split=(s, "pairwise"), **_tri_probe(s, "pairwise", e, p, m))
        want = slow_accumulate(case)
        assert want != slow_accumulate({**case, "split": (s, "serial")})  # the case tells the orders apart
        assert run_accumulate(case, backend) == want, (e, p, m)


@pytest.mark.parametrize("s", _ORDER_S)
def test_every_tri_probe_of_the_combination(s: int) -> None:
    """combine_parts against the slow model's combination for placements of a tri probe.

    Every placement for S <= 10 (and with ``--full``); a sample of 300 above.
    """
    from mmaemu._accumulation import combine_parts
    from mmaemu._split import Scheme

    eps, big = 2.0**-9, 448.0**2
    triples = [(e, p, m) for e in range(s) for p in range(s) for m in range(s) if len({e, p, m}) == 3]
    if not FULL and s > 10:
        gen = torch.Generator().manual_seed(s)
        triples = [triples[int(i)] for i in torch.randperm(len(triples), generator=gen)[:300]]
    if not triples:
        return
    values = torch.zeros(len(triples), s, dtype=torch.float32)
    for row, (e, p, m) in enumerate(triples):
        values[row, e], values[row, p], values[row, m] = eps, big, -big
    for scheme, slow in (("serial", sm.combine_serial), ("pairwise", sm.combine_pairwise)):
        got = combine_parts([values[:, j] for j in range(s)], Scheme(scheme))
        for row, triple in enumerate(triples):
            want = slow([f32_bits(float(v)) for v in values[row]])
            assert f32_bits(float(got[row])) == want, (scheme, triple)


# ---- dot ------------------------------------------------------------------------------------


@st.composite
def dot_case(draw: Any) -> dict[str, Any]:
    fa, fb = draw(st.sampled_from(PAIRS + [("e5m2", "e5m2")]))
    k = draw(st.integers(0, 70))
    c = draw(st.one_of(
        st.integers(0, 2**32 - 1),
        st.sampled_from([0, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000]),
    ))
    return {
        "fa": fa, "fb": fb, "c": c, "preset": draw(st.sampled_from(sorted(PRESETS))),
        "a": draw(st.lists(code_strategy(fa, specials=True), min_size=k, max_size=k)),
        "b": draw(st.lists(code_strategy(fb, specials=True), min_size=k, max_size=k)),
    }


@_SETTINGS
@given(case=dot_case())
def test_dot_against_slow_model(case: dict[str, Any]) -> None:
    a = torch.tensor(case["a"], dtype=torch.uint8).view(FMT[case["fa"]])
    b = torch.tensor(case["b"], dtype=torch.uint8).view(FMT[case["fb"]])
    got = mmaemu.model.dot(a, b, scalar(case["c"]), preset=case["preset"])
    block, frac = PRESETS[case["preset"]]
    want = sm.dot(case["a"], case["b"], case["c"], case["fa"], case["fb"], block, frac)
    if any(sm.fp8_decode(x, case["fa"]) == "nan" for x in case["a"]) or any(
        sm.fp8_decode(x, case["fb"]) == "nan" for x in case["b"]
    ):
        want = 0x7FFFFFFF
    assert out_bits(got) == [want]


def test_all_zero_block_truncates_c() -> None:
    zeros = torch.zeros(32, dtype=torch.uint8).view(torch.float8_e4m3fn)
    for c_bits in (0x3F800001, 0x00000001, 0x007FFFFF, 0x80012345, 0x7F7FFFFF, 0x80000000):
        for preset, (block, frac) in PRESETS.items():
            got = mmaemu.model.dot(zeros, zeros, scalar(c_bits), preset=preset)
            assert out_bits(got) == [sm.dot([0] * 32, [0] * 32, c_bits, "e4m3", "e4m3", block, frac)]


# ---- epilogue and the whole call --------------------------------------------------------------


@st.composite
def epilogue_case(draw: Any) -> dict[str, Any]:
    interesting = [0, 0x80000000, 0x3F800000, 0x00000001, 0x80000001, 0x7F7FFFFF, 0x7F800000, 0xFF800000,
                   0x7FFFFFFF, 0x43E00000, 0x43E80000, 0x477FE000, 0x38000000, 0x33800000]
    bits = st.one_of(st.integers(0, 2**32 - 1), st.sampled_from(interesting))
    scale = st.one_of(st.sampled_from([0x3F800000, 0xBF800000, 0x3C800000, 0x7F000000, 0x00800000, 0, 0x80000000]),
                      st.integers(0, 2**32 - 1))
    return {
        "acc": draw(st.lists(bits, min_size=1, max_size=8)),
        "sa": draw(scale), "sb": draw(scale),
        "sr": draw(st.one_of(st.none(), scale)),
        "out": draw(st.sampled_from(sorted(OUTS))),
    }


@_SETTINGS
@given(case=epilogue_case())
def test_epilogue_against_slow_model(case: dict[str, Any]) -> None:
    acc = torch.tensor(case["acc"], dtype=torch.int64).to(torch.int32).view(torch.float32)
    sr = None if case["sr"] is None else scalar(case["sr"])
    got = mmaemu.epilogue(acc, scalar(case["sa"]), scalar(case["sb"]), out_dtype=OUTS[case["out"]], scale_result=sr)
    want = [sm.epilogue(x, case["sa"], case["sb"], case["out"], case["sr"]) for x in case["acc"]]
    assert out_bits(got) == want


# Double rounding: exact products just above a midpoint of the output format that the first
# rounding (to fp32) moves onto the midpoint, so that round-to-even then goes down, while a single
# rounding would go up. (acc, scale_a, scale_b, scale_result, out)
DOUBLE_ROUNDING = [
    (0x3F87FFFF, 0x3F800000, 0x3F800000, 0x3F800001, "e4m3"),   # (1.0625 - 2**-23) * (1 + 2**-23)
    (0xBF87FFFF, 0x3F800000, 0x3F800000, 0x3F800001, "e4m3"),   # the same, negative
    (0x3F800000, 0x3F87FFFF, 0x3F800000, 0x3F800001, "e4m3"),   # alpha carries the first factor
    (0x3F807FFF, 0x3F800001, 0x3F800000, None, "bfloat16"),     # (1 + 2**-8 - 2**-23) * (1 + 2**-23)
    (0x3F801FFF, 0x3F800001, 0x3F800000, None, "float16"),      # (1 + 2**-11 - 2**-23) * (1 + 2**-23)
]


@pytest.mark.parametrize("acc,sa,sb,sr,out", DOUBLE_ROUNDING)
def test_epilogue_rounds_twice(acc: int, sa: int, sb: int, sr: int | None, out: str) -> None:
    got = mmaemu.epilogue(scalar(acc).reshape(1), scalar(sa), scalar(sb), out_dtype=OUTS[out],
                          scale_result=None if sr is None else scalar(sr))
    assert out_bits(got) == [sm.epilogue(acc, sa, sb, out, sr)]


@pytest.mark.parametrize("out", sorted(OUTS))
@pytest.mark.parametrize("fa,fb", PAIRS)
def test_scaled_mm_every_output_and_pair(backend: str, out: str, fa: str, fb: str) -> None:
    if (fa, fb, out) == ("e4m3", "e4m3", "e5m2"):
        pytest.skip("rejected by the reference cuBLASLt (tested in the call-contract tests)")
    gen = torch.Generator().manual_seed(7)
    m, n, k = 3, 16, 144  # K not a multiple of 32 or 128
    a_codes = torch.randint(0, 256, (m, k), generator=gen, dtype=torch.uint8)
    b_codes = torch.randint(0, 256, (n, k), generator=gen, dtype=torch.uint8)
    for codes, fmt in ((a_codes, fa), (b_codes, fb)):  # keep NaN/Inf rare: one row each
        finite_max = 0x7E if fmt == "e4m3" else 0x7B
        codes.copy_(torch.where((codes & 0x7F) > finite_max, codes & 0xB7, codes))
    a_codes[1, 5] = 0x7F  # a NaN code in row 1 of mat1
    a, b = a_codes.view(FMT[fa]), b_codes.view(FMT[fb])
    sa, sb, sr = scalar(f32_bits(1 / 64)), scalar(f32_bits(1 / 32)), scalar(f32_bits(0.25))
    for fast in (True, False):
        for split in ((1, "none"), (2, "contiguous"), (3, "pairwise")):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
                got = mmaemu.scaled_mm(a, b.t(), sa, sb, scale_result=sr, out_dtype=OUTS[out], use_fast_accum=fast,
                                       splitk=1 if split[0] == 1 else split, backend=backend, profile="ada")
            want = [
                sm.gemm_output(a_codes[i].tolist(), b_codes[j].tolist(), fa, fb, 16, 13, fast, split[0], split[1],
                               f32_bits(1 / 64), f32_bits(1 / 32), out, f32_bits(0.25))
                for i in range(m) for j in range(n)
            ]
            assert out_bits(got) == want, (fast, split)
