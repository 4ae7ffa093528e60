"""The reference GPUs: one record per GPU, read by the profiles, the split-K decisions and their messages, the
inference rules, the shipped tables' pins and the row-wise kernels; and a made-up GPU added as one record plus
its table (the maintainer's task "add a GPU", docs/architecture.md)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from importlib import resources

import numpy as np
import pytest
import torch

import mmaemu
from mmaemu.errors import SplitKUnknownError, UnknownNameError
from mmaemu.formats import Fp8Format, OutFormat
from mmaemu.platforms import _inference as inference
from mmaemu.platforms._gpus import GPUS, USER_GPUS, Architecture, ReferenceGpu, reference_gpu
from mmaemu.platforms._profiles import (PROFILES, USER_PROFILES, Caller, get_profile, profiles_of, register_gpu,
                                       unregister_gpu)
from mmaemu.platforms._splitk import Problem, SplitSource, resolve_splitk, trace_splitk
from mmaemu.platforms._table import (SHIPPED_TABLES, USER_TABLES, Setting, SplitTable, setting_statistics,
                                    table_arrays)
from mmaemu.presets import ADA, Maturity
from mmaemu._split import Scheme, SplitFamily, SplitK

E4 = Fp8Format.E4M3
BF16 = OutFormat.BFLOAT16
MIB = 1 << 20


def test_an_unknown_gpu_is_an_error() -> None:
    """The old profile builder gave any key but "h100" the RTX 4060's name, SM count, split family and table."""
    with pytest.raises(UnknownNameError, match="'a100' is not a reference GPU; the registered GPUs are 'h100', "
                                               "'rtx4060'"):
        reference_gpu("a100")
    with pytest.raises(TypeError):
        reference_gpu(None)  # type: ignore[arg-type]


def test_every_shipped_profile_reads_its_gpus_record() -> None:
    for gpu in GPUS.values():
        for profile in profiles_of(gpu):
            assert PROFILES[profile.name] == profile
            assert (profile.gpu, profile.sm_count, profile.cublaslt, profile.torch_version, profile.split_family,
                    profile.preset, profile.table_id, profile.source) == (
                gpu.name, gpu.sm_count, gpu.cublaslt, gpu.torch_version, gpu.split_family, gpu.preset, gpu.table_id,
                gpu.source)
    assert PROFILES["hopper-experimental"].gpu == GPUS["h100"].name and PROFILES["hopper-experimental"].table_id is None


def test_the_records_agree_with_their_shipped_tables() -> None:
    """Each record's name, SM count, capability and cuBLASLt are those its table's info recorded on the GPU
    (tools/evidence/convert_splitk.py copies them from the recording), and its sha256 pins are the shipped pins."""
    base = resources.files("mmaemu") / "data" / "splitk"
    for gpu in GPUS.values():
        info = json.loads((base / f"{gpu.table_id}.json").read_bytes())
        assert (info["gpu"], info["sm_count"], tuple(info["capability"]), info["cublaslt"]) == (
            gpu.name, gpu.sm_count, gpu.architecture.capability, gpu.cublaslt)
        assert str(info["torch"]).startswith(gpu.torch_version)
        assert SHIPPED_TABLES[str(gpu.table_id)] == gpu.table_sha256
    assert set(SHIPPED_TABLES) == {g.table_id for g in GPUS.values()}


def test_the_te_workspace_follows_the_architecture() -> None:
    """Transformer Engine 2.3: 32 MiB from compute capability 9.0, else 4 MiB (seeds 000)."""
    assert (PROFILES["hopper-te"].workspace_bytes, PROFILES["ada-te"].workspace_bytes) == (32 * MIB, 4 * MIB)
    assert Architecture.SM90.capability == (9, 0) and Architecture.SM89.capability == (8, 9)


# -- a made-up GPU: one record plus its table ----------------------------------------------------------------------

MADE_UP = ReferenceGpu(
    key="made-up", name="NVIDIA Made-Up 9000", architecture=Architecture.SM89, sm_count=7, cublaslt="12.8.3.14",
    torch_version="2.7.1", split_family=SplitFamily.ROUND_ROBIN, preset=ADA, profile="made-up",
    table_id="heur_madeup_lt12.8.3.14", table_sha256=None, source="a made-up GPU (tests/unit/test_gpus.py)",
    maturity=Maturity.EXPERIMENTAL,
)
SPLIT_ROW = (16, 128, 8192, 4, 1)  # M, N, K, S, customOption: customOption 1 is pairwise in the round-robin family
UNSPLIT_ROW = (32, 128, 8192, 1, 0)


def made_up_table() -> SplitTable:
    """The made-up GPU's split-K table: two rows at 1 MiB (e4m3 x e4m3 -> bf16, fast), the split replayed."""
    setting = Setting(E4, E4, BF16, True, MIB)
    rows = np.array([SPLIT_ROW, UNSPLIT_ROW])
    arrays = table_arrays(np.full(2, setting.code), rows[:, 0], rows[:, 1], rows[:, 2],
                          {"S": rows[:, 3].astype(np.uint8), "custom": rows[:, 4].astype(np.uint8)})
    info = {"table_id": MADE_UP.table_id, "gpu": MADE_UP.name, "sm_count": MADE_UP.sm_count,
            "verified_combos": [list(setting.combo(SPLIT_ROW[3], Scheme.PAIRWISE))],
            "settings": setting_statistics(arrays), "envelope": {"kind": "twice_max_split_mn"}}
    return SplitTable.from_arrays(str(MADE_UP.table_id), info, arrays)


@pytest.fixture
def made_up() -> Iterator[ReferenceGpu]:
    register_gpu(MADE_UP, table=made_up_table())
    try:
        yield MADE_UP
    finally:
        unregister_gpu(MADE_UP.key)


def quiet_decision(profile: str, m: int, n: int, k: int) -> mmaemu.SplitDecision:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
        return resolve_splitk(get_profile(profile, warn=False), Problem(m, n, k, E4, E4, BF16, True))


def test_a_made_up_gpu_gets_its_profiles_from_its_record(made_up: ReferenceGpu) -> None:
    assert reference_gpu("made-up") is made_up
    torch_profile, te, ws0 = (get_profile(name, warn=False) for name in ("made-up", "made-up-te", "made-up-ws0"))
    assert (torch_profile.gpu, torch_profile.sm_count, torch_profile.split_family) == ("NVIDIA Made-Up 9000", 7,
                                                                                       SplitFamily.ROUND_ROBIN)
    assert (te.caller, te.workspace_bytes, ws0.workspace_bytes) == (Caller.TRANSFORMER_ENGINE, 4 * MIB, 0)
    assert torch_profile.table_id == "heur_madeup_lt12.8.3.14" and torch_profile.maturity is Maturity.EXPERIMENTAL
    with pytest.warns(mmaemu.ExperimentalPresetWarning):
        get_profile("made-up")


def test_a_made_up_gpu_decides_from_its_table_and_its_family(made_up: ReferenceGpu) -> None:
    m, n, k, s, custom = SPLIT_ROW
    d = quiet_decision("made-up", m, n, k)
    assert (d.parts, d.scheme, d.source, d.verified) == (s, Scheme.PAIRWISE, SplitSource.TABLE, True)
    assert d.note == f"row {0} of heur_madeup_lt12.8.3.14 (customOption {custom})"
    assert quiet_decision("made-up-ws0", m, n, k).source is SplitSource.WORKSPACE0
    # the envelope names the made-up GPU (the old message named the RTX 4060 for every GPU)
    d = quiet_decision("made-up", 4096, 4096, k)
    assert d.source is SplitSource.ENVELOPE and d.note.endswith("largest split M*N of this setting on the Made-Up 9000")


def test_a_made_up_gpus_call_runs_its_split(made_up: ReferenceGpu) -> None:
    m, n, k, s, _ = SPLIT_ROW
    gen = torch.Generator().manual_seed(49)
    a = (torch.randn(m, k, generator=gen) * 8).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, generator=gen) * 8).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
        auto = mmaemu.scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True, profile="made-up")
        explicit = mmaemu.scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True, profile="ada",
                                    splitk=(s, "pairwise"))
        plan = mmaemu.explain(a, b.t(), one, one, out_dtype=torch.bfloat16, use_fast_accum=True, profile="made-up")
    assert torch.equal(auto.view(torch.int16), explicit.view(torch.int16))
    assert plan.split is not None and plan.split.split == SplitK(s, Scheme.PAIRWISE)


def test_a_made_up_gpus_rowwise_kernel_reads_its_sm_count(made_up: ReferenceGpu) -> None:
    a = torch.ones(64, 1920).to(torch.float8_e4m3fn)
    b = torch.ones(5760, 1920).to(torch.float8_e4m3fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
        plan = mmaemu.explain(a, b.t(), torch.ones(64, 1), torch.ones(1, 5760), out_dtype=torch.bfloat16,
                              profile="made-up")
    assert plan.kernel is not None and plan.kernel.sm_count == 7
    assert plan.kernel.streamk is not None and plan.kernel.streamk.sms == 7


def test_an_undecided_call_on_a_made_up_gpu_names_it(made_up: ReferenceGpu) -> None:
    problem = Problem(16, 128, 4096, E4, E4, BF16, True)
    with pytest.raises(SplitKUnknownError, match="whether the NVIDIA Made-Up 9000 splits K"):
        resolve_splitk(get_profile("made-up", warn=False), problem)
    inferred = [step for step in trace_splitk(get_profile("made-up", warn=False), problem)
                if step.source is SplitSource.INFERENCE]
    assert inferred[0].why == "no inference rule is checked against table heur_madeup_lt12.8.3.14"
    assert all(spec.table_id != MADE_UP.table_id for spec in inference.CANDIDATES)


def test_unregistering_a_made_up_gpu_removes_its_profiles_and_table() -> None:
    before = (dict(USER_GPUS), dict(USER_PROFILES), dict(USER_TABLES))
    register_gpu(MADE_UP, table=made_up_table())
    unregister_gpu(MADE_UP.key)
    assert (dict(USER_GPUS), dict(USER_PROFILES), dict(USER_TABLES)) == before
    with pytest.raises(UnknownNameError):
        reference_gpu("made-up")
    with pytest.raises(UnknownNameError):
        get_profile("made-up")
