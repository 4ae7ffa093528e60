"""Hostile reference GPU records and registrations: every bad field refused by the record, every bad
registration refused by register_gpu, and nothing registered by a refused call."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from mmaemu.platforms._gpus import GPUS, USER_GPUS, Architecture, ReferenceGpu, reference_gpu
from mmaemu.platforms._profiles import PROFILES, USER_PROFILES, get_profile, register_gpu, unregister_gpu
from mmaemu.platforms._table import USER_TABLES, SplitTable, table_arrays
from mmaemu.presets import ADA
from mmaemu._split import SplitFamily

GOOD: dict[str, Any] = dict(
    key="hostile", name="NVIDIA Hostile", architecture=Architecture.SM89, sm_count=8, cublaslt="12.8.3.14",
    torch_version="2.7.1", split_family=SplitFamily.ROUND_ROBIN, preset=ADA, profile="hostile",
    table_id="heur_hostile", table_sha256=None, source="tests/hostile/test_hostile_gpus.py",
)


def table(table_id: str = "heur_hostile") -> SplitTable:
    arrays = table_arrays(np.array([0]), np.array([16]), np.array([16]), np.array([16]),
                          {"S": np.array([1], np.uint8), "custom": np.array([0], np.uint8)})
    return SplitTable.from_arrays(table_id, {"table_id": table_id, "verified_combos": [], "settings": [],
                                             "envelope": {"kind": "twice_max_split_mn"}}, arrays)


def registries() -> tuple[dict[str, Any], ...]:
    return dict(USER_GPUS), dict(USER_PROFILES), dict(USER_TABLES), dict(GPUS), dict(PROFILES)


@pytest.mark.parametrize(("change", "error"), [
    ({"sm_count": 0}, ValueError),
    ({"sm_count": -114}, ValueError),
    ({"sm_count": True}, ValueError),
    ({"sm_count": 114.0}, ValueError),
    ({"key": ""}, ValueError),
    ({"name": "NVIDIA\x00H100"}, ValueError),
    ({"profile": None}, ValueError),
    ({"architecture": "sm_90"}, TypeError),
    ({"split_family": "round-robin"}, TypeError),
    ({"preset": "ada"}, TypeError),
    ({"maturity": "validated"}, TypeError),
    ({"table_id": "h100"}, ValueError),
    ({"table_id": None, "table_sha256": ("0" * 64, "0" * 64)}, ValueError),
])
def test_a_bad_field_is_refused_by_the_record(change: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        ReferenceGpu(**{**GOOD, **change})


@pytest.mark.parametrize(("gpu", "kwargs", "error", "match"), [
    ("not a record", {}, TypeError, "gpu must be a ReferenceGpu"),
    (GPUS["h100"], {}, ValueError, "'h100' is a shipped GPU's key"),
    (dataclasses.replace(GPUS["h100"], key="h100-copy", table_sha256=None), {}, ValueError,
     "profile names .* are taken"),
    (ReferenceGpu(**{**GOOD, "profile": "ada"}), {"table": table()}, ValueError, "profile names .* are taken"),
    (ReferenceGpu(**{**GOOD, "table_sha256": ("0" * 64, "0" * 64)}), {"table": table()}, ValueError,
     "pins table_sha256"),
    (ReferenceGpu(**GOOD), {}, ValueError, "neither shipped nor registered"),
    (ReferenceGpu(**GOOD), {"table": table("heur_other")}, ValueError, "not the table 'heur_other'"),
    (ReferenceGpu(**{**GOOD, "table_id": "heur_h100pcie_lt12.8.3.14"}), {"table": table("heur_h100pcie_lt12.8.3.14")},
     ValueError, "shipped table's id"),
    (ReferenceGpu(**GOOD), {"table": "heur_hostile"}, TypeError, "table must be a SplitTable"),
])
def test_a_refused_registration_registers_nothing(gpu: Any, kwargs: dict[str, Any], error: type[Exception],
                                                  match: str) -> None:
    before = registries()
    with pytest.raises(error, match=match):
        register_gpu(gpu, **kwargs)
    assert registries() == before


def test_a_second_registration_needs_replace_and_unregister_leaves_shipped_gpus() -> None:
    before = registries()
    gpu = ReferenceGpu(**GOOD)
    register_gpu(gpu, table=table())
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_gpu(gpu, table=table())
        faster = dataclasses.replace(gpu, sm_count=16)
        register_gpu(faster, table=table(), replace=True)
        assert reference_gpu("hostile") is faster and get_profile("hostile", warn=False).sm_count == 16
    finally:
        unregister_gpu("hostile")
    unregister_gpu("h100")  # a shipped GPU is not unregistered
    unregister_gpu("never-registered")
    assert registries() == before and reference_gpu("h100") is GPUS["h100"]
