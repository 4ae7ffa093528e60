"""The probe analysis names the model that produced the probe outputs (outputs computed by the emulator here:
these tests check the analysis and the probes' power to discriminate, not any GPU)."""

from __future__ import annotations

import functools

import pytest
import torch

from mmaemu.backends import _reference as reference
from mmaemu.platforms._profiles import SplitFamily, get_profile
from mmaemu.platforms._splitk import scheme_for
from mmaemu.presets import ADA, B200_MMA_SYNC, HOPPER, SM120, CMode, Preset
from mmaemu.recording._probes import (
    CANDIDATES,
    Candidate,
    ProbeResult,
    ProbeStage,
    analyse,
    candidate_plan,
    split_probe,
    unsplit_probes,
)
from mmaemu.recording._verdict import probe_document, results_from_document, sm120_note
from mmaemu._split import Scheme, SplitK

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def emulate(probe, preset: Preset, split: SplitK = SplitK(1, Scheme.NONE), interval: int = 128,  # type: ignore[no-untyped-def]
            corner: tuple[int, int] | None = None) -> torch.Tensor:
    a, b = probe.a, probe.b
    if corner is not None:
        a, b = a[: corner[0]], b[: corner[1]]
    return reference.accumulate(a, b, preset, candidate_plan(probe.shape[2], probe.fast, split, interval))


@functools.cache
def _split_probes() -> tuple:  # type: ignore[type-arg]
    return (split_probe("split-0", 16, 16, 2112, True, 1), split_probe("split-1", 16, 16, 1600, False, 2),
            split_probe("split-2", 16, 16, 2048, True, 3))


def results_for(preset: Preset, splits: list[tuple[int, int, Scheme]], interval: int = 128) -> list[ProbeResult]:
    """Probe outputs as a GPU with this preset, slow interval and (S, customOption, scheme) per split probe
    would return them."""
    out = [ProbeResult(p, emulate(p, preset, interval=interval)) for p in unsplit_probes()]
    for probe, (s, custom, scheme) in zip(_split_probes(), splits):
        out.append(ProbeResult(probe, emulate(probe, preset, SplitK(s, scheme), interval, (16, 16)), s, custom))
    return out


def test_hopper_outputs_name_hopper_and_the_contiguous_family() -> None:
    v = analyse(results_for(HOPPER, [(2, 0, Scheme.CONTIGUOUS), (3, 2, Scheme.CONTIGUOUS), (4, 1, Scheme.CONTIGUOUS)]))
    assert v.fits and v.preset is HOPPER and v.shipped == ("hopper",)
    assert [c.name for c in v.fitting] == ["B32-F13-aligned-truncate"]
    assert v.slow_intervals == (128,) and v.split_family is SplitFamily.CONTIGUOUS
    assert v.candidates_tested == len(CANDIDATES) == 160


def test_ada_outputs_name_ada_and_the_round_robin_family() -> None:
    v = analyse(results_for(ADA, [(3, 1, Scheme.PAIRWISE), (3, 0, Scheme.SERIAL), (4, 2, Scheme.SERIAL)]))
    assert v.fits and v.preset is ADA and v.split_family is SplitFamily.ROUND_ROBIN
    assert v.split_schemes == {"split-0": ("pairwise",), "split-1": ("serial",), "split-2": ("serial",)}
    assert v.custom_schemes == {0: ("serial",), 1: ("pairwise",), 2: ("serial",)}


def test_a_customoption_mapping_no_family_has_fits_none() -> None:
    """Pairwise combination under customOption 0: round-robin dealing, but not mmaemu's mapping."""
    v = analyse(results_for(ADA, [(3, 0, Scheme.PAIRWISE)]), candidates=[Candidate.of(ADA)])
    assert v.split_family is None and not v.fits and "none fits" in v.summary


def test_the_probes_and_the_split_decisions_read_one_customoption_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The customOption rule has one home (:class:`SplitFamily`): changed there, the probes' analysis and the
    split-K decisions follow it together (the old code wrote it twice, in the probes and in splitk)."""
    outputs = results_for(ADA, [(3, 0, Scheme.PAIRWISE)])
    monkeypatch.setattr(SplitFamily.ROUND_ROBIN, "custom_schemes", {0: Scheme.PAIRWISE})
    v = analyse(outputs, candidates=[Candidate.of(ADA)])
    assert v.fits and v.split_family is SplitFamily.ROUND_ROBIN
    assert scheme_for(get_profile("ada"), 3, 0) is Scheme.PAIRWISE


def test_twelve_fraction_bits_fit_no_shipped_preset() -> None:
    twelve = Preset("twelve", block_size=32, frac_bits=12)
    v = analyse(results_for(twelve, [(2, 0, Scheme.CONTIGUOUS)]))
    assert v.shipped == () and [c.name for c in v.fitting] == ["B32-F12-aligned-truncate"]
    assert "no shipped preset fits" in v.summary


def test_a_model_outside_the_candidates_fits_none() -> None:
    odd = Preset("odd", block_size=32, frac_bits=19)
    v = analyse(results_for(odd, []))
    assert v.preset is None and v.fitting == () and not v.fits
    assert v.summary.startswith("none fits: no candidate fits")


def test_c_added_after_the_block_is_told_apart() -> None:
    rounded = Preset("c-last", block_size=32, frac_bits=13, c_mode=CMode.ROUNDED_ADD)
    v = analyse(results_for(rounded, []), candidates=[Candidate.of(HOPPER), Candidate.of(rounded)])
    assert [c.c_mode for c in v.fitting] == [CMode.ROUNDED_ADD]


def test_another_slow_interval_is_found_and_does_not_fit_the_emulator() -> None:
    v = analyse(results_for(HOPPER, [], interval=64), candidates=[Candidate.of(HOPPER), Candidate.of(ADA)])
    assert v.preset is HOPPER and v.slow_intervals == (64,) and not v.fits


def test_block_size_rows_discriminate_every_candidate_block() -> None:
    """Each pair of candidate block sizes gives different bits on the arithmetic probes (F = 13)."""
    probe = unsplit_probes()[0]
    outs = {b: emulate(probe, Preset(f"b{b}", block_size=b, frac_bits=13)) for b in (8, 16, 32, 64)}
    for b1 in outs:
        for b2 in outs:
            if b1 < b2:
                assert not torch.equal(outs[b1].view(torch.int32), outs[b2].view(torch.int32))


def test_probe_document_round_trip() -> None:
    results = results_for(HOPPER, [(2, 0, Scheme.CONTIGUOUS)])
    doc, arrays = probe_document(results, {"x": "RuntimeError: refused"})
    back = results_from_document(doc, arrays)
    assert [r.probe.name for r in back] == [r.probe.name for r in results]
    for r, s in zip(results, back):
        assert s.probe.stage is r.probe.stage and (s.S, s.custom) == (r.S, r.custom)
        assert torch.equal(s.output.view(torch.int32), r.output.view(torch.int32))
    assert back[-1].probe.stage is ProbeStage.SPLIT and back[-1].probe.a.shape == (16, 2112)


@pytest.mark.parametrize("scheme", [Scheme.CONTIGUOUS, Scheme.SERIAL, Scheme.PAIRWISE])
def test_split_probe_separates_the_schemes(scheme: Scheme) -> None:
    probe = _split_probes()[1]
    ref = emulate(probe, HOPPER, SplitK(3, scheme), corner=(16, 16))
    for other in (Scheme.CONTIGUOUS, Scheme.SERIAL, Scheme.PAIRWISE):
        same = torch.equal(ref.view(torch.int32), emulate(probe, HOPPER, SplitK(3, other), corner=(16, 16)).view(torch.int32))
        assert same == (other is scheme)


@functools.cache
def _blackwell_verdicts() -> dict[str, object]:
    """The verdicts of GPUs that compute as sm120 and as b200_mma_sync (arithmetic and slow probes)."""
    return {p.name: analyse(results_for(p, [])) for p in (SM120, B200_MMA_SYNC)}


def test_the_probes_tell_the_two_blackwell_candidates_apart() -> None:
    """An sm_120 GPU that computes as the paper's B200 model is named sm120, one that computes as the B200's
    mma.sync is named b200_mma_sync: each fits alone among the 160 candidates."""
    v = _blackwell_verdicts()
    sm120, b200 = v["sm120"], v["b200_mma_sync"]
    assert sm120.preset is SM120 and sm120.shipped == ("sm120",)  # type: ignore[attr-defined]
    assert [c.name for c in sm120.fitting] == ["B32-F25-aligned-truncate"]  # type: ignore[attr-defined]
    assert b200.preset is B200_MMA_SYNC and b200.shipped == ("b200_mma_sync",)  # type: ignore[attr-defined]
    assert [c.name for c in b200.fitting] == ["B32-F25-rounded-add-nearest-even"]  # type: ignore[attr-defined]


def test_sm120_note_confirms_or_contradicts_on_an_sm120_gpu() -> None:
    v = _blackwell_verdicts()
    sm120, b200 = v["sm120"], v["b200_mma_sync"]
    assert "confirm preset 'sm120'" in str(sm120_note(sm120, (12, 0)))  # type: ignore[arg-type]
    note = str(sm120_note(b200, (12, 0)))  # type: ignore[arg-type]
    assert "contradict preset 'sm120'" in note and "b200_mma_sync" in note
    assert sm120_note(b200, (10, 0)) is None  # type: ignore[arg-type]
    assert "not an sm_120 one" in str(sm120_note(sm120, (9, 0)))  # type: ignore[arg-type]
    assert "not an sm_120 one" in str(sm120_note(sm120, None))  # type: ignore[arg-type]
    assert "not confirmed" in str(sm120_note(analyse([]), (12, 0)))
