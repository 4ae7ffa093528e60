"""Block-scaled GEMMs against the independent slow model: DeepGEMM's and the Triton kernels' arithmetic, exactly.

The expected values come from ``tests/slowmodel.py``'s :func:`block_scaled_output` (exact rationals, no mmaemu
code), with each kernel's parameters written *here* from the research (research/blockfp8.md, section 6: the
kernels' source and compiled code), never read from the package's model records. So a flipped choice in
``mmaemu/kernels/_block_model.py`` or in the arithmetic (the chain length, the combination, the order of the
scales, the fusion, the start, the chain's instruction) fails these tests; the per-choice tests below also show
that the flipped choice gives other bits on the probe that separates it. The inputs are the recorder's block
probes (built to separate every candidate, :mod:`mmaemu.recording._blockwise`), random operands and special
values, on the cpu backend (its fused kernel, and its per-k-tile path with ``MMAEMU_CPU_PORTABLE=1``) and the
reference backend.
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from conftest import FULL
from slowmodel import block_scaled_output

import mmaemu
from mmaemu.kernels._block_model import BLOCK_MODELS
from mmaemu.recording._blockwise import BlockProbe, block_probes

FP8 = {"wgmma": ("fp8", 32, 13), "mma": ("fp8", 16, 13), "hmma": ("fp16", 16, 25)}  # chain, block size, F


def _triton(path: str, k_block: int, fused: bool) -> dict[str, object]:
    chain, block, frac = FP8[path]
    return dict(chain=chain, block_size=block, frac_bits=frac, k_block=k_block, combination="chain-first",
                order="row-first", fused=fused, start="plus-zero")


#: The research's recipe of every model (section 6: deepgemm_sm90, triton_block), by name.
RESEARCH: dict[str, dict[str, object]] = {
    "deepgemm-sm90": dict(chain="fp8", block_size=32, frac_bits=13, k_block=128, combination="scales-first",
                          order="row-first", fused=True, start="plus-zero"),
    **{f"triton-block-{arch}-{path}-bk{k}-{'fpfusion' if fused else 'nofpfusion'}@triton3.3-3.9": _triton(path, k, fused)
       for arch, path in (("sm90", "wgmma"), ("sm90", "hmma"), ("sm89", "mma")) for k in (128, 64)
       for fused in (True, False)},
}
#: Columns of each probe compared with the slow model (its columns repeat a few patterns).
COLUMNS = (0, 1, 2, 63)


def test_every_model_has_a_recipe() -> None:
    assert set(RESEARCH) == set(BLOCK_MODELS)


def _bits(t: torch.Tensor) -> list[int]:
    width = {2: torch.int16, 4: torch.int32}[t.element_size()]
    mask = (1 << (8 * t.element_size())) - 1
    return [int(x) & mask for x in t.contiguous().view(width).flatten().tolist()]


@functools.lru_cache(maxsize=None)
def _slow(a: tuple[int, ...], b: tuple[int, ...], sa: tuple[int, ...], sb: tuple[int, ...], params: tuple[tuple[str, object], ...],
          out: str) -> int:
    return block_scaled_output(a, b, sa, sb, **dict(params), out_dtype=out)


def expected(a: torch.Tensor, sa: torch.Tensor, w: torch.Tensor, sw: torch.Tensor, params: dict[str, object],
             rows: range, cols: tuple[int, ...], out: str = "bfloat16") -> list[int]:
    """The slow model's bits at ``rows`` x ``cols``."""
    codes_a, codes_w = a.view(torch.uint8).tolist(), w.view(torch.uint8).tolist()
    bits_a = [_bits(r) for r in sa]
    bits_w = [_bits(r) for r in sw]
    key = tuple(sorted(params.items()))
    return [_slow(tuple(codes_a[m]), tuple(codes_w[n]), tuple(bits_a[m]), tuple(bits_w[n // 128]), key, out)
            for m in rows for n in cols]


def computed(a: torch.Tensor, sa: torch.Tensor, w: torch.Tensor, sw: torch.Tensor, kernel: str, backend: str,
             rows: range, cols: tuple[int, ...], out_dtype: torch.dtype = torch.bfloat16) -> list[int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnrecordedKernelWarning)
        y = mmaemu.block_scaled_mm(a, sa, w, sw, kernel=kernel, backend=backend, out_dtype=out_dtype)
    return _bits(y[list(rows)][:, list(cols)])


def _on_probe(p: BlockProbe, kernel: str, backend: str, params: dict[str, object],
              out: torch.dtype = torch.bfloat16) -> tuple[list[int], list[int]]:
    rows = range(p.shape[0])
    cols = tuple(c for c in COLUMNS if c < p.shape[1])
    name = str(out).replace("torch.", "")
    return (computed(p.a, p.scale_a, p.w, p.scale_w, kernel, backend, rows, cols, out),
            expected(p.a, p.scale_a, p.w, p.scale_w, params, rows, cols, name))


@pytest.fixture(params=["cpu", "cpu-portable", "reference"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "cpu-portable":
        monkeypatch.setenv("MMAEMU_CPU_PORTABLE", "1")  # the per-k-tile path through the dispatcher
        return "cpu"
    return str(request.param)


@pytest.mark.parametrize("kernel", sorted(RESEARCH))
def test_probes_match_the_slow_model(kernel: str, backend: str) -> None:
    """Every model on every probe, as the research's recipe computes it."""
    if backend == "reference" and "hmma" in kernel and "bk128-fpfusion" not in kernel:
        pytest.skip("the fp16 chains' reference backend is slow; one hmma model covers it")
    for p in block_probes():
        got, want = _on_probe(p, kernel, backend, RESEARCH[kernel])
        assert got == want, (kernel, p.name)


#: Per choice: a model, the probe that separates the choice, and the choice's flipped value.
FLIPS = [
    ("chain length", "deepgemm-sm90", "chains", {"k_block": 64}),
    ("chain length", "triton-block-sm89-mma-bk64-fpfusion@triton3.3-3.9", "chains", {"k_block": 128}),
    ("chain instruction", "triton-block-sm90-hmma-bk128-fpfusion@triton3.3-3.9", "random",
     {"chain": "fp8", "block_size": 32, "frac_bits": 13}),
    ("chain instruction", "triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9", "random",
     {"chain": "fp8", "block_size": 16}),
    ("combination", "deepgemm-sm90", "combination", {"combination": "chain-first"}),
    ("combination", "triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9", "combination",
     {"combination": "scales-first"}),
    ("scale order", "triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9", "fusion", {"order": "column-first"}),
    ("scale order", "triton-block-sm89-mma-bk128-nofpfusion@triton3.3-3.9", "rounding", {"order": "column-first"}),
    ("fusion", "deepgemm-sm90", "fusion", {"fused": False}),
    ("fusion", "triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9", "fusion", {"fused": False}),
    ("fusion", "triton-block-sm90-wgmma-bk128-nofpfusion@triton3.3-3.9", "fusion", {"fused": True}),
    ("start", "deepgemm-sm90", "zero", {"start": "first-step"}),
    ("start", "triton-block-sm89-mma-bk128-fpfusion@triton3.3-3.9", "zero", {"start": "first-step"}),
]


@pytest.mark.parametrize("what, kernel, probe, flipped", FLIPS, ids=[f"{f[0]}-{f[1][:24]}" for f in FLIPS])
def test_each_choice_fails_when_flipped(what: str, kernel: str, probe: str, flipped: dict[str, object]) -> None:
    """The model's output on the separating probe is the research's recipe's, and the recipe with that one choice
    flipped gives other bits there: so this test fails when the choice is flipped in the package."""
    out = torch.bfloat16
    if probe == "random":  # fp32 outputs: an instruction's last bits
        p, out = BlockProbe("random", *_random(4, 64, 256, 11, False)), torch.float32
    else:
        p = next(x for x in block_probes() if x.name == probe)
    got, want = _on_probe(p, kernel, "cpu", RESEARCH[kernel], out)
    assert got == want
    rows = range(p.shape[0])
    cols = tuple(c for c in COLUMNS if c < p.shape[1])
    other = expected(p.a, p.scale_a, p.w, p.scale_w, {**RESEARCH[kernel], **flipped}, rows, cols,
                     str(out).replace("torch.", ""))
    assert other != want, f"{what}: the probe {probe!r} does not separate {flipped}"


@pytest.mark.parametrize("candidate, flipped", [
    ("deepgemm-sm90/combination=chain-first/fusion=separate", {"combination": "chain-first", "fused": False}),
    ("deepgemm-sm90/start=first-step/k-block=64", {"start": "first-step", "k_block": 64}),
    ("triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9/order=column-first/fusion=separate",
     {"order": "column-first", "fused": False}),
    ("triton-block-sm89-mma-bk128-fpfusion@triton3.3-3.9/combination=scales-first", {"combination": "scales-first"}),
])
def test_candidates_compute_their_flipped_recipe(candidate: str, flipped: dict[str, object]) -> None:
    """A candidate (what a recording may decide instead) computes the recipe with its choices flipped."""
    base = candidate.split("/")[0]
    for p in block_probes():
        got, want = _on_probe(p, candidate, "cpu", {**RESEARCH[base], **flipped})
        assert got == want, (candidate, p.name)


def _random(m: int, n: int, k: int, seed: int, special: bool) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=gen) * 30).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, generator=gen) * 30).clamp(-448, 448).to(torch.float8_e4m3fn)
    groups = -(-k // 128)
    sa = torch.exp2(torch.randint(-12, 4, (m, groups), generator=gen).float()) * (1 + torch.rand(m, groups, generator=gen))
    sw = torch.exp2(torch.randint(-12, 4, (-(-n // 128), groups), generator=gen).float()) * torch.rand(-(-n // 128),
                                                                                                        groups, generator=gen)
    if special:
        sa[0, 0] = -sa[0, 0]
        sa[1, -1] = 2.0**120  # overflow: the product of a chain result and scales passes fp32's range
        sw[0, 0] = 2.0**-140  # subnormal scales
        a.view(torch.uint8)[2, 5] = 0x7F  # a NaN code: row 2 is NaN
        sa[3, 0] = float("inf")  # Inf times a chain result; Inf * 0 where the chain is zero
        a[3, :128] = 0.0
        sa[4, 1] = float("nan")
    return a, sa, w, sw


@pytest.mark.parametrize("kernel", ["deepgemm-sm90", "triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9",
                                    "triton-block-sm89-mma-bk64-nofpfusion@triton3.3-3.9",
                                    "triton-block-sm90-hmma-bk128-fpfusion@triton3.3-3.9"])
@pytest.mark.parametrize("special", [False, True])
def test_random_and_special_values_match_the_slow_model(kernel: str, special: bool, backend: str) -> None:
    """Random operands and scales (negative, subnormal, overflowing, Inf, NaN, NaN codes), every output dtype the
    kernel writes."""
    if backend == "reference" and "hmma" in kernel:
        pytest.skip("the fp16 chains' reference backend is slow; the probes cover it")
    m, n, k = 6, 192 if kernel.startswith("deepgemm") else 200, 384 if kernel.startswith("deepgemm") else 330
    a, sa, w, sw = _random(m, n, k, 7 + special, special)
    cols = (0, 5, 127, 128, n - 1)
    outs = [torch.bfloat16] if kernel.startswith("deepgemm") else [torch.bfloat16, torch.float16, torch.float32]
    for out in outs:
        name = str(out).replace("torch.", "")
        got = computed(a, sa, w, sw, kernel, backend, range(m), cols, out)
        assert got == expected(a, sa, w, sw, RESEARCH[kernel], range(m), cols, name), (kernel, name)


def test_k_zero_is_plus_zero_for_the_triton_models() -> None:
    """No k-tile: the accumulator's +0 is stored (the Triton loop runs no iteration)."""
    a = torch.zeros(3, 0).to(torch.float8_e4m3fn)
    w = torch.zeros(5, 0).to(torch.float8_e4m3fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnrecordedKernelWarning)
        y = mmaemu.block_scaled_mm(a, torch.zeros(3, 0), w, torch.zeros(1, 0), kernel=sorted(RESEARCH)[1],
                                   out_dtype=torch.float32)
    assert _bits(y) == [0] * 15


def _once_or_twice() -> tuple[torch.Tensor, ...]:
    """k-tile 0 leaves 1 + 2**-23; k-tile 1 adds 4147 x s with s = 16570889 * 2**-60, i.e. 2**-24 (1 - 53 * 2**-36):
    the exact sum lies 53 * 2**-60 below the fp32 midpoint 1 + 2**-23 + 2**-24, so one rounding gives 1 + 2**-23, a
    rounding to float64 first lands on the midpoint and then on 1 + 2**-22; k-tile 2 subtracts 1 (bf16 shows it)."""
    a, w = torch.zeros(2, 384), torch.zeros(64, 384)
    a[:, 0] = w[:, 0] = 1.0
    a[:, 128:133] = torch.tensor([256.0, 2.0, 1.0, 0.125, 0.0625])  # 4147 = (4096 + 32 + 16 + 2 + 1) with w = 16
    w[:, 128:133] = 16.0
    a[:, 256] = w[:, 256] = 1.0
    sa = torch.tensor([[1 + 2.0**-23, 1.0, -1.0]] * 2)
    sw = torch.tensor([[1.0, 16570889 * 2.0**-60, 1.0]])
    return a.to(torch.float8_e4m3fn), sa, w.to(torch.float8_e4m3fn), sw


@pytest.mark.parametrize("kernel", ["deepgemm-sm90", "triton-block-sm90-wgmma-bk128-fpfusion@triton3.3-3.9",
                                    "triton-block-sm90-wgmma-bk128-nofpfusion@triton3.3-3.9"])
def test_the_fused_step_rounds_once(kernel: str, backend: str) -> None:
    """The FFMA's sum is rounded once to fp32 (2**-23 left), not through float64 (2**-22); FMUL + FADD give 2**-22."""
    a, sa, w, sw = _once_or_twice()
    got = computed(a, sa, w, sw, kernel, backend, range(2), (0, 63))
    assert got == expected(a, sa, w, sw, RESEARCH[kernel], range(2), (0, 63))
    want = 2.0**-22 if "nofpfusion" in kernel else 2.0**-23
    assert got == [int(torch.tensor(want, dtype=torch.bfloat16).view(torch.int16))] * 4


def test_the_triton_backend_gives_the_same_bits() -> None:
    """The per-k-tile path on the triton backend (in Triton's interpreter here): the dispatcher's chains, the same
    step, the same bits as the slow model (two probes that separate the combination and the chain length)."""
    from mmaemu.backends import Backend, supports

    if not supports(Backend.TRITON, None, (), torch.device("cpu")):
        pytest.skip("the triton backend does not run here (no Triton, or not in its interpreter)")
    for p in block_probes():
        if p.name == "chains" or (p.name == "combination" and FULL):  # CI: one probe in the interpreter
            got, want = _on_probe(p, "deepgemm-sm90", "triton", RESEARCH["deepgemm-sm90"])
            assert got == want, p.name
