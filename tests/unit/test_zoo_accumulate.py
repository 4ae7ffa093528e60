"""accumulate() for the zoo formats (fp16, bf16, tf32): one chain of the instruction over K.

The GEMM-level result is model.dot's chain for every output (the recorded instruction, chained in
order from +0); the call warns once per preset (no GEMM-level recording exists); what is not
modelled raises and says what to pass.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

import mmaemu
from mmaemu.errors import ExperimentalPresetWarning, UnsupportedFeatureError
from mmaemu.quantization import round_to_tf32
from mmaemu.testing import assert_bitwise_equal

CASES = [("volta", torch.float16), ("ampere", torch.bfloat16), ("ada", torch.float32), ("hopper", torch.float16),
         ("b200", torch.bfloat16)]


def _operands(dtype: torch.dtype, m: int = 9, n: int = 7, k: int = 45) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(m, k, generator=gen) * 5, torch.randn(n, k, generator=gen)
    if dtype == torch.float32:
        return round_to_tf32(a), round_to_tf32(b)
    return a.to(dtype), b.to(dtype)


#: The cpu backend's two zoo paths: the vector kernel (the default) and the loop kernels
#: (``MMAEMU_CPU_PORTABLE=1``).
BACKENDS = [("reference", "0"), ("cpu", "0"), ("cpu", "1")]


@pytest.mark.parametrize("preset,dtype", CASES)
@pytest.mark.parametrize("backend,portable", BACKENDS)
def test_accumulate_is_the_chain_of_model_dot(preset: str, dtype: torch.dtype, backend: str, portable: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMAEMU_CPU_PORTABLE", portable)
    a, b = _operands(dtype)
    a[2, 3] = float("nan")
    b[4, 0] = float("-inf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalPresetWarning)
        got = mmaemu.accumulate(a, b, use_fast_accum=True, preset=preset, backend=backend)
    want = mmaemu.model.dot(a[:, None, :], b[None, :, :], preset=preset)
    assert got.dtype == torch.float32 and got.shape == (9, 7)
    assert_bitwise_equal(got, want)
    assert torch.isnan(got[2]).all() and torch.isnan(got[:, 4]).sum() >= 1


def test_the_default_preset_is_the_profiles_architecture() -> None:
    a, b = _operands(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalPresetWarning)
        assert_bitwise_equal(mmaemu.accumulate(a, b, use_fast_accum=True),
                             mmaemu.accumulate(a, b, use_fast_accum=True, preset="hopper"))
        assert_bitwise_equal(mmaemu.accumulate(a, b, use_fast_accum=True, profile="ada"),
                             mmaemu.accumulate(a, b, use_fast_accum=True, preset="ada"))


def test_it_warns_once_per_preset() -> None:
    code = (
        "import warnings, torch, mmaemu\n"
        "a = torch.ones(2, 8, dtype=torch.float16)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    for _ in range(3): mmaemu.accumulate(a, a, use_fast_accum=True, preset='ampere')\n"
        "    mmaemu.accumulate(a, a, use_fast_accum=True, preset='hopper')\n"
        "print(sum(issubclass(x.category, mmaemu.ExperimentalPresetWarning) for x in w))\n"
        "print(w[0].message)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "2"
    assert "not a recorded GEMM" in out[1] and "ampere-fp16" in out[1]


@pytest.mark.parametrize(
    "kwargs,exc,message",
    [
        (dict(use_fast_accum=False, preset="hopper"), UnsupportedFeatureError, "pass use_fast_accum=True"),
        (dict(use_fast_accum=True, preset="hopper", splitk=(2, "serial")), UnsupportedFeatureError, "pass splitk=1"),
        (dict(use_fast_accum=True, preset="volta"), UnsupportedFeatureError, "take fp16 inputs, not bf16"),
        (dict(use_fast_accum=True, preset="b200_mma_sync"), UnsupportedFeatureError, "FP8 inputs only"),
        (dict(use_fast_accum=True, preset="hopper", profile="ada"), ValueError, "not both"),
        (dict(use_fast_accum=True, preset="pascal"), KeyError, "volta, ampere, ada, hopper, b200"),
    ],
)
def test_what_is_not_modelled_raises(kwargs: dict, exc: type[Exception], message: str) -> None:
    a, b = _operands(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalPresetWarning)
        with pytest.raises(exc, match=message):
            mmaemu.accumulate(a, b, **kwargs)


def test_operands_of_two_formats_or_not_tf32_are_refused() -> None:
    a16, _ = _operands(torch.float16)
    _, b_bf = _operands(torch.bfloat16)
    with pytest.raises(ValueError, match="two of one of fp16, bf16, tf32"):
        mmaemu.accumulate(a16, b_bf, use_fast_accum=True)
    with pytest.raises(ValueError, match="two FP8 matrices"):
        mmaemu.accumulate(a16, torch.ones(7, 45).to(torch.float8_e4m3fn), use_fast_accum=True)
    with pytest.raises(ValueError, match="not tf32 values"):
        mmaemu.accumulate(torch.randn(3, 8), torch.randn(3, 8), use_fast_accum=True)
    with pytest.raises(ValueError, match="float16, bfloat16 or float32 holding tf32"):
        mmaemu.accumulate(torch.ones(3, 8, dtype=torch.float64), torch.ones(3, 8, dtype=torch.float64),
                          use_fast_accum=True)


def test_fp8_accumulate_takes_a_preset_too() -> None:
    a = torch.randn(4, 40).to(torch.float8_e4m3fn)
    assert_bitwise_equal(mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1, preset="ada"),
                         mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1, profile="ada"))
    with pytest.raises(UnsupportedFeatureError, match="no FP8 tensor cores"):
        mmaemu.accumulate(a, a, use_fast_accum=True, splitk=1, preset="ampere")


@pytest.mark.parametrize("portable", ["0", "1"])
def test_cpu_backend_recomputes_rows_beyond_its_fp32_range(portable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 rows with tiny, subnormal or huge values take the float64 kernel (after the vector kernel, or
    the fp32 loop kernel with ``MMAEMU_CPU_PORTABLE=1``); the bits stay the reference's."""
    monkeypatch.setenv("MMAEMU_CPU_PORTABLE", portable)
    a, b = _operands(torch.bfloat16, m=12, n=10, k=40)
    a[1] = a[1] * 2.0**-120  # subnormal and tiny
    a[2, 5] = 2.0**100
    b[3] = b[3] * 2.0**90  # products beyond fp32's range
    b[4, :] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalPresetWarning)
        assert_bitwise_equal(mmaemu.accumulate(a, b, use_fast_accum=True, preset="hopper", backend="cpu"),
                             mmaemu.accumulate(a, b, use_fast_accum=True, preset="hopper", backend="reference"))


def test_info_lists_the_zoo_presets_and_formats() -> None:
    out = subprocess.run([sys.executable, "-m", "mmaemu", "info"], capture_output=True, text=True, check=True).stdout
    out = " ".join(out.split())  # info wraps long items to 100 columns
    for word in ("volta", "ampere", "b200", "bf16 (B = 16, F = 25)", "tf32 (B = 4, F = 24)", "float32 holding tf32"):
        assert word in out


def test_a_preset_of_the_wrong_type_is_refused_and_nothing_is_modified() -> None:
    a, b = _operands(torch.float16)
    before = (a.clone(), b.clone())
    for bad in (3, ["hopper"], None.__class__):
        with pytest.raises(TypeError, match="preset must be a name or a Preset"):
            mmaemu.accumulate(a, b, use_fast_accum=True, preset=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="preset must be a name or a Preset"):
        mmaemu.model.dot(a[0], b[0], preset=3.0)  # type: ignore[arg-type]
    assert torch.equal(a.view(torch.int16), before[0].view(torch.int16))
    assert torch.equal(b.view(torch.int16), before[1].view(torch.int16))


def test_round_to_tf32_rounds_to_nearest_even_on_the_tf32_grid() -> None:
    """Against exact rational rounding of random fp32 patterns (normals, subnormals, the largest values)."""
    from fractions import Fraction

    gen = torch.Generator().manual_seed(5)
    bits = torch.randint(0, 2**31, (4000,), generator=gen, dtype=torch.int64)
    bits = torch.cat([bits, torch.tensor([0x7F7FFFFF, 0x7F7FF000, 0x00001000, 0x00000FFF, 0x00001FFF, 0x3F801000,
                                          0x3F803000, 0x7F800000, 0x7FC00001])])
    signs = torch.randint(0, 2, bits.shape, generator=gen, dtype=torch.int64) << 31
    x = torch.where((bits | signs) >= 2**31, (bits | signs) - 2**32, bits | signs).to(torch.int32).view(torch.float32)
    got = round_to_tf32(x)
    assert got.dtype == torch.float32
    for value, out in zip(x.tolist(), got.tolist()):
        if value != value:
            assert out != out
            continue
        if abs(value) == float("inf"):
            assert out == value
            continue
        exact = Fraction(value)
        mag = abs(exact)
        e = max(mag.numerator.bit_length() - mag.denominator.bit_length(), -126) if mag else -126
        if mag and Fraction(2) ** e > mag:
            e -= 1
        e = max(e, -126)
        q = Fraction(2) ** (e - 10)
        n, rem = divmod(mag, q)
        if rem > q / 2 or (rem == q / 2 and n % 2 == 1):
            n += 1
        want = n * q
        want_f = float("inf") if want >= 2**128 else float(want)
        assert out == (-want_f if value < 0 else want_f) and (str(out)[0] == "-") == (str(value)[0] == "-"), value
    with pytest.raises(TypeError, match="float32 tensor"):
        round_to_tf32(torch.ones(3, dtype=torch.float64))
    with pytest.raises(TypeError, match="float32 tensor"):
        round_to_tf32([1.0])  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_sm120_accumulates_as_b200_and_warns(dtype: torch.dtype, backend: str) -> None:
    """The experimental sm_120 aliases run the B200's instruction (every backend that runs b200 runs them)."""
    a, b = _operands(dtype)
    with pytest.warns(ExperimentalPresetWarning, match="sm120"):
        got = mmaemu.accumulate(a, b, use_fast_accum=True, preset="sm120", backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalPresetWarning)
        want = mmaemu.accumulate(a, b, use_fast_accum=True, preset="b200", backend=backend)
    assert_bitwise_equal(got, want)
