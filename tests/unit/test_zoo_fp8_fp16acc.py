"""FP8 operands with an fp16 accumulator against the independent slow model, bit for bit.

tests/slowmodel.py's ``fp8_dot_fp16acc_blocks`` (sm_89) and ``fp8_dot_fp16acc_rewrite`` (sm_90 and sm_100)
are written from docs/zoo.md's wording ("FP8 operands with an fp16 accumulator") with Python Fractions;
here they meet :func:`mmaemu.model.dot` under ``ada``, ``hopper_mma_sync`` and ``b200_mma_sync`` on
hypothesis-generated operands (every FP8 pair, NaN and Inf codes, subnormals, K not a multiple of 32 and
K > 32) and hand-built adversarial ones (ties on fp16's grid, cancellation, overflow, -0), and the slow
model replays a sample of the three recorded files (the full files replay in tests/evidence/test_hw_vectors.py).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mmaemu
import mmaemu._one_chain as call_module
import slowmodel as sm
from mmaemu.presets import instruction_preset
from conftest import FULL, HW_VECTORS

#: preset -> (slow-model rule, its arguments)
RULES = {
    "ada": (sm.fp8_dot_fp16acc_blocks, {"block_size": 16, "frac_bits": 13}),
    "hopper_mma_sync": (sm.fp8_dot_fp16acc_rewrite, {"frac_bits": 25}),
    "b200_mma_sync": (sm.fp8_dot_fp16acc_rewrite, {"frac_bits": 25}),
}
FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
PAIRS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")]
EXAMPLES = 200 if FULL else 25
_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def dot_bits(a_codes: list[list[int]], b_codes: list[list[int]], c16: list[int], fa: str, fb: str,
             preset: str) -> list[int]:
    a = torch.tensor(a_codes, dtype=torch.uint8).view(FORMATS[fa])
    b = torch.tensor(b_codes, dtype=torch.uint8).view(FORMATS[fb])
    c = torch.tensor(c16, dtype=torch.int32).to(torch.int16).view(torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
        out = mmaemu.model.dot(a, b, c, preset=preset)
    assert out.dtype == torch.float16
    return [int(v) & 0xFFFF for v in out.view(torch.int16).tolist()]


def slow_bits(a_codes: list[list[int]], b_codes: list[list[int]], c16: list[int], fa: str, fb: str,
              preset: str) -> list[int]:
    rule, kwargs = RULES[preset]
    return [rule(a, b, c, fa, fb, **kwargs) for a, b, c in zip(a_codes, b_codes, c16)]


def fp8_codes(fmt: str) -> st.SearchStrategy[int]:
    """FP8 codes weighted toward zeros, subnormals, the top binade, NaN and Inf, and values near 1."""
    ebits, mbits = (4, 3) if fmt == "e4m3" else (5, 2)
    top = (1 << ebits) - 1
    shaped = st.tuples(st.integers(0, 1), st.sampled_from([0, 1, 2, top - 1, top]), st.integers(0, (1 << mbits) - 1)).map(
        lambda t: (t[0] << 7) | (t[1] << mbits) | t[2])
    bias = (1 << (ebits - 1)) - 1
    near_one = st.tuples(st.integers(0, 1), st.integers(bias - 3, bias + 3), st.integers(0, (1 << mbits) - 1)).map(
        lambda t: (t[0] << 7) | (t[1] << mbits) | t[2])
    return st.one_of(st.integers(0, 255), shaped, near_one, near_one, st.just(0), st.just(0x80))


def fp16_c() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(0, 0xFFFF), st.tuples(st.integers(0, 1), st.integers(1, 30), st.integers(0, 1023)).map(
        lambda t: (t[0] << 15) | (t[1] << 10) | t[2]), st.just(0), st.just(0x8000), st.just(0x7C00), st.just(0xFC00))


@st.composite
def problems(draw: st.DrawFn) -> tuple[list[list[int]], list[list[int]], list[int], str, str]:
    fa, fb = draw(st.sampled_from(PAIRS))
    k = draw(st.sampled_from([1, 2, 3, 5, 16, 31, 32, 33, 64, 70]))
    rows = draw(st.integers(1, 4))
    a = [[draw(fp8_codes(fa)) for _ in range(k)] for _ in range(rows)]
    b = [[draw(fp8_codes(fb)) for _ in range(k)] for _ in range(rows)]
    c = [draw(fp16_c()) for _ in range(rows)]
    return a, b, c, fa, fb


@pytest.mark.parametrize("preset", sorted(RULES))
@_SETTINGS
@given(problem=problems())
def test_fp16_accumulator_matches_the_slow_model(preset: str, problem: tuple) -> None:  # type: ignore[type-arg]
    a, b, c, fa, fb = problem
    assert dot_bits(a, b, c, fa, fb, preset) == slow_bits(a, b, c, fa, fb, preset)


def _codes(values: list[float], fmt: str = "e4m3", k: int = 32) -> list[int]:
    t = torch.zeros(k)
    t[: len(values)] = torch.tensor(values)
    q = t.to(FORMATS[fmt])
    assert torch.equal(q.float(), t), values
    return [int(v) for v in q.view(torch.uint8).tolist()]


def _adversarial() -> list[tuple[list[int], list[int], int]]:
    """Ties on fp16's grid, bits below the FP8 unit's 13 fraction bits, cancellation, overflow, -0, a large c."""
    eight = [8.0] + [1.0] * 31
    cases = []
    for a_values, b_values, c in (
        ([256.0, 1.0, 1.0], eight, 0x0000),            # 2048 + 1 (step 1, a tie) + 1 (step 2, a tie)
        ([256.0, 1.0, 1.0], eight, 0x3C00),            # ... then c = 1, a tie again
        ([256.0, 0.0, 1.0, 1.0], eight, 0x3C00),       # both 1s in step 2
        ([256.0, 1.125], [8.0, 0.9375], 0x0000),       # 2048 + 1.0546875: above the tie only with F > 13
        ([256.0, -256.0, 2.0**-9], eight, 0x0000),     # cancellation in step 1 leaves a subnormal FP8 product
        ([448.0] * 32, [1.0] * 32, 0x0000),            # 32 * 448 = 14336, then 448 * 448 = 200704 overflows
        ([448.0] * 32, [448.0] * 32, 0x0000),          # overflow in step 1
        ([1.0, 2.0**-9, 2.0**-9], [1.0] * 32, 0x6800), # c = 2048 absorbs both steps' small results
        ([0.0], [1.0] * 32, 0x8000),                   # -0 c, zero products: +0
        ([-1.0, 1.0], [1.0] * 32, 0x8000),             # an exact zero in step 1, then -0: +0
    ):
        cases.append((_codes(a_values), _codes(b_values), c))
    return cases


@pytest.mark.parametrize("preset", sorted(RULES))
def test_adversarial_cases_match_the_slow_model(preset: str) -> None:
    cases = _adversarial()
    a = [x[0] for x in cases]
    b = [x[1] for x in cases]
    c = [x[2] for x in cases]
    assert dot_bits(a, b, c, "e4m3", "e4m3", preset) == slow_bits(a, b, c, "e4m3", "e4m3", preset)


def test_the_two_rules_differ_on_a_tie() -> None:
    """Products 2048, 1 and 1 (k = 0, 1, 2): one rounding gives 2050; the rewrite rounds 2049 (a tie) to 2048
    in its first step and again in its second. Products 2048 and 1.0546875: 25 fraction bits keep 2049.05..., which
    rounds to 2050; 13 keep 2049, a tie, to 2048."""
    cases = _adversarial()
    a, b, c = cases[0]
    assert sm.fp8_dot_fp16acc_blocks(a, b, c, "e4m3", "e4m3") == 0x6801  # 2050
    assert sm.fp8_dot_fp16acc_rewrite(a, b, c, "e4m3", "e4m3") == 0x6800  # 2048
    a, b, c = cases[3]
    assert sm.fp8_dot_fp16acc_rewrite(a, b, c, "e4m3", "e4m3") == 0x6801
    assert sm.fp8_dot_fp16acc_rewrite(a, b, c, "e4m3", "e4m3", frac_bits=13) == 0x6800
    assert sm.fp8_dot_fp16acc_blocks(a, b, c, "e4m3", "e4m3") == 0x6800


@pytest.mark.parametrize("name,preset", [("ada_e4m3.npz", "ada"), ("h100_e4m3.npz", "hopper_mma_sync"),
                                         ("b200_e4m3.npz", "b200_mma_sync")])
def test_slow_model_replays_the_recorded_fp16_accumulator(name: str, preset: str) -> None:
    path = HW_VECTORS / name
    if not path.exists():
        pytest.skip(f"hardware evidence not found at {path}")
    data = np.load(path)
    rows = 5000 if FULL else 250
    c16 = data["c_bits"].view(np.float32).astype(np.float16).view(np.uint16)
    want = data["d_fp16acc_bits"].view(np.float32).astype(np.float16).view(np.uint16)
    a = [[int(x) for x in r] for r in data["a_codes"][:rows]]
    b = [[int(x) for x in r] for r in data["b_codes"][:rows]]
    got = slow_bits(a, b, [int(x) for x in c16[:rows]], "e4m3", "e4m3", preset)
    assert got == [int(x) for x in want[:rows]]


# ---- the GEMM: accumulate(..., accumulator=torch.float16) -----------------------------------------


def _random_codes(rng: np.random.Generator, rows: int, k: int, fmt: str, nan_row: int | None = None) -> list[list[int]]:
    """Finite codes (no NaN or Inf), a NaN code in ``nan_row`` if given."""
    bad = {0x7F, 0xFF} if fmt == "e4m3" else set(range(0x7C, 0x80)) | set(range(0xFC, 0x100))
    pool = np.array([c for c in range(256) if c not in bad])
    codes = rng.choice(pool, size=(rows, k)).tolist()
    if nan_row is not None:
        codes[nan_row][k // 2] = 0x7F
    return codes


@pytest.mark.parametrize("preset", sorted(RULES))
@pytest.mark.parametrize(("fa", "fb"), [("e4m3", "e4m3"), ("e5m2", "e4m3")])
def test_accumulate_with_an_fp16_accumulator_is_the_slow_models_chain_per_output(
        preset: str, fa: str, fb: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every output of the GEMM is the slow model's chain over K from +0 (K = 70: not a multiple of 16 or
    32), a NaN code in a row of ``a`` gives fp16's canonical NaN in that row, and every usable backend
    returns the same bits."""
    rng = np.random.default_rng(abs(hash((preset, fa, fb))) % 2**32)
    m, n, k = 4, 5, 70
    a_codes = _random_codes(rng, m, k, fa, nan_row=1 if fa == "e4m3" else None)
    b_codes = _random_codes(rng, n, k, fb)
    a = torch.tensor(a_codes, dtype=torch.uint8).view(FORMATS[fa])
    b = torch.tensor(b_codes, dtype=torch.uint8).view(FORMATS[fb])
    rule, kwargs = RULES[preset]
    want = [[0x7FFF if fa == "e4m3" and i == 1 else rule(a_codes[i], b_codes[j], 0, fa, fb, **kwargs)
             for j in range(n)] for i in range(m)]
    monkeypatch.setattr(call_module, "_HALF_WARNED", set())  # it warns once per preset and process
    monkeypatch.setattr(call_module, "_HALF_ELEMENTS", 2 * n * k)  # two rows of a per dot call: chunks that do not divide M
    with pytest.warns(mmaemu.ExperimentalPresetWarning, match="with an fp16 accumulator on preset"):
        got = mmaemu.accumulate(a, b, use_fast_accum=True, preset=preset, accumulator=torch.float16)
    assert got.dtype == torch.float16 and got.shape == (m, n)
    assert [[int(v) & 0xFFFF for v in row] for row in got.view(torch.int16).tolist()] == want
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
        for backend in ("reference", "cpu"):
            again = mmaemu.accumulate(a, b, use_fast_accum=True, preset=preset, accumulator=torch.float16, backend=backend)
            assert torch.equal(again.view(torch.int16), got.view(torch.int16)), backend



def test_accumulate_with_an_fp16_accumulator_on_fp16_operands_and_at_k_zero() -> None:
    rng = np.random.default_rng(3)
    h = torch.from_numpy(rng.standard_normal((3, 20)).astype(np.float16))
    bits = h.view(torch.int16).tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.ExperimentalPresetWarning)
        got = mmaemu.accumulate(h, h, use_fast_accum=True, preset="volta", accumulator=torch.float16)
        empty = mmaemu.accumulate(h[:, :0], h[:2, :0], use_fast_accum=True, preset="ada", accumulator=torch.float16)
    volta = instruction_preset("volta", torch.float16, warn=False)
    want = [[sm.zoo_dot([x & 0xFFFF for x in bits[i]], [x & 0xFFFF for x in bits[j]], 0, "fp16", volta.block_size,
                        volta.frac_bits, "fp16")
             for j in range(3)] for i in range(3)]
    assert [[int(v) & 0xFFFF for v in row] for row in got.view(torch.int16).tolist()] == want
    assert empty.dtype == torch.float16 and empty.shape == (3, 2)
    assert [int(v) & 0xFFFF for v in empty.view(torch.int16).flatten().tolist()] == [0] * 6  # +0, not -0


def test_accumulate_refuses_what_an_fp16_accumulator_does_not_model() -> None:
    a = torch.ones(2, 32).to(torch.float8_e4m3fn)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="does not model the fp16 accumulator"):
        mmaemu.accumulate(a, a, use_fast_accum=True, accumulator=torch.float16)  # hopper: wgmma, fp32 only
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="use_fast_accum=True and splitk=1"):
        mmaemu.accumulate(a, a, use_fast_accum=False, preset="ada", accumulator=torch.float16)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="use_fast_accum=True and splitk=1"):
        mmaemu.accumulate(a, a, use_fast_accum=True, splitk=(2, "contiguous"), preset="ada", accumulator=torch.float16)
    with pytest.raises(ValueError, match="FP8 or float16 operands, not torch.bfloat16"):
        mmaemu.accumulate(a.bfloat16(), a.bfloat16(), use_fast_accum=True, preset="ampere", accumulator=torch.float16)
    with pytest.raises(ValueError, match="torch.float32 or torch.float16, got torch.bfloat16"):
        mmaemu.accumulate(a, a, use_fast_accum=True, preset="ada", accumulator=torch.bfloat16)
