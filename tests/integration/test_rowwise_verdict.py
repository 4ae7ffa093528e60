"""The row-wise probes' analysis recognises each kind of GPU: for every candidate that flips one choice of a
kernel model (and the model itself), outputs computed as that candidate fit exactly that candidate.

The outputs stand for a GPU's (plumbing, as tests/emulated_device.py: they are mmaemu's own); what is
tested is that the probes and ``fitting_kernels`` decide every choice. Every pair of candidates is separated
in tests/tools/test_rowwise_probes.py; recordings made end to end by an emulated GPU of two other kinds are
recognised in tests/integration/test_record_replay.py."""

from __future__ import annotations

import pytest

from mmaemu.kernels._model import candidates
from mmaemu.platforms._profiles import get_profile
from mmaemu.recording._rowwise import RowwiseResult, computed, fitting_kernels, rowwise_probes


def _one_flip(profile: str) -> list[str]:
    name = "cutlass-rowwise-sm90" if profile == "hopper" else "cutlass-rowwise-sm89"
    promoted = f"{name}/accumulation=promoted/promotion=128"  # one choice: promoted takes cuBLAS's interval
    return [c.name for c in candidates(name) if c.name.count("=") <= 1 or c.name == promoted]


CASES = [(p, name) for p in ("hopper", "ada") for name in _one_flip(p)]


@pytest.mark.parametrize("profile,kernel", CASES, ids=[f"{p}:{k.split('/', 1)[-1]}" for p, k in CASES])
def test_an_emulated_gpu_of_each_kind_is_recognised(profile: str, kernel: str) -> None:
    prof = get_profile(profile)
    model = next(c for c in candidates(kernel.split("/")[0]) if c.name == kernel)
    results = [RowwiseResult(p, computed(p, prof, model)) for p in rowwise_probes()]
    assert [c.name for c in fitting_kernels(results, prof)] == [kernel]
