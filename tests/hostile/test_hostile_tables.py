"""Hostile routes to the split-K tables behind the built-in profiles: none may replace or shadow them.

A shipped table's id names the shipped data only (issue 46, item 3). Every route that puts a table
under an id is tried with a shipped id and its variants: ``register_table`` (with and without
``replace``), ``register_profile(..., table=)``, ``SplitTable.from_files`` of files whose info claims a
shipped id, a direct write into ``USER_TABLES``, in-place writes into a shipped table's columns, and an
edited shipped file. Each refusal must leave the registries as they were, and ``hopper`` must keep
deciding from the shipped rows: 64 x 5760 x 1920 (E4M3 x E4M3 -> bf16, fast) is the recorded row S = 1
(seeds 000, the quickstart shape), 16 x 128 x 8192 on ``ada`` the recorded S = 8 pairwise.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mmaemu
from mmaemu.formats import Fp8Format, OutFormat
from mmaemu.platforms import _profiles as profiles_module
from mmaemu.platforms import _table as table_module
from mmaemu.platforms._profiles import PROFILES, USER_PROFILES, get_profile, register_profile, unregister_profile
from mmaemu.platforms._splitk import Problem, SplitSource, resolve_splitk
from mmaemu.platforms._table import (
    H100_TABLE,
    RTX4060_TABLE,
    SHIPPED_TABLES,
    USER_TABLES,
    Setting,
    SplitTable,
    register_table,
    table_arrays,
    write_table,
)
from mmaemu._split import Scheme

E4 = Fp8Format.E4M3
BF16 = OutFormat.BFLOAT16
QUICKSTART = Problem(64, 5760, 1920, E4, E4, BF16, True)
ADA_SPLIT = Problem(16, 128, 8192, E4, E4, BF16, True)


def decide(profile: str, problem: Problem) -> tuple[int, Scheme, SplitSource, bool, str | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.MmaemuWarning)
        d = resolve_splitk(get_profile(profile), problem)
    return d.parts, d.scheme, d.source, d.verified, d.table_id


#: What the shipped tables record (seeds 000: the quickstart row; the RTX 4060 table: S = 8, customOption 1).
HOPPER_QUICKSTART = (1, Scheme.NONE, SplitSource.TABLE, True, H100_TABLE)
ADA_16_128_8192 = (8, Scheme.PAIRWISE, SplitSource.TABLE, True, RTX4060_TABLE)


@pytest.fixture(autouse=True)
def registries() -> Iterator[None]:
    """Every test leaves the registries and the shipped-table cache as it found them."""
    tables, profs = dict(USER_TABLES), dict(USER_PROFILES)
    yield
    USER_TABLES.clear()
    USER_TABLES.update(tables)
    USER_PROFILES.clear()
    USER_PROFILES.update(profs)


def forged(table_id: str, problem: Problem = QUICKSTART, parts: int = 3) -> SplitTable:
    """A one-row table claiming ``table_id`` that splits ``problem`` (workspace 1 MiB) into ``parts``, the
    split listed as replayed, so that its decision would read ``source="table"``, ``verified=True``."""
    setting = problem.setting(1 << 20)
    arrays = table_arrays(np.array([setting.code]), np.array([problem.m]), np.array([problem.n]), np.array([problem.k]),
                          {"S": np.array([parts], np.uint8), "custom": np.array([0], np.uint8)})
    info: dict[str, Any] = {"table_id": table_id, "verified_combos": [list(setting.combo(parts, Scheme.CONTIGUOUS))],
                            "settings": [], "envelope": {"kind": "twice_max_split_mn"}}
    return SplitTable.from_arrays(table_id, info, arrays)


def snapshot() -> tuple[dict[str, SplitTable], dict[str, Any]]:
    return dict(USER_TABLES), dict(USER_PROFILES)


#: A shipped id and the spellings that differ from it only in case, whitespace or Unicode form.
VARIANTS = [
    H100_TABLE,
    H100_TABLE.upper(),
    " " + H100_TABLE,
    H100_TABLE + " ",
    H100_TABLE + "\n",
    H100_TABLE.replace("_", "_\t", 1),
    "ｈｅｕｒ" + H100_TABLE[4:],  # fullwidth letters (NFKC folds them)
    RTX4060_TABLE.title(),
]


@pytest.mark.parametrize("table_id", VARIANTS, ids=repr)
@pytest.mark.parametrize("replace", [False, True])
def test_register_table_refuses_a_shipped_id(table_id: str, replace: bool) -> None:
    """Old code: registered, and hopper then decided the quickstart shape S = 3 from the forged row."""
    before = snapshot()
    with pytest.raises(ValueError, match="shipped table|another id"):
        register_table(forged(table_id), replace=replace)
    assert snapshot() == before
    assert decide("hopper", QUICKSTART) == HOPPER_QUICKSTART
    assert decide("ada", ADA_SPLIT) == ADA_16_128_8192


def test_a_shipped_id_is_refused_even_after_its_table_was_loaded() -> None:
    """Re-registration of the shipped object itself (already loaded) is refused too: shipped is not user."""
    shipped = SplitTable.load(H100_TABLE)
    with pytest.raises(ValueError, match="is a shipped table's id"):
        register_table(shipped)
    assert H100_TABLE not in USER_TABLES


def test_register_profile_with_a_forged_shipped_table_changes_nothing() -> None:
    """Old code: the profile and the forged table were registered, and hopper decided from the forged row."""
    mine = dataclasses.replace(PROFILES["hopper"], name="forger")
    before = snapshot()
    for replace in (False, True):
        with pytest.raises(ValueError, match="is a shipped table's id"):
            register_profile(mine, table=forged(H100_TABLE), replace=replace)
        assert snapshot() == before
    assert decide("hopper", QUICKSTART) == HOPPER_QUICKSTART


def test_register_profile_refuses_a_table_the_profile_does_not_name() -> None:
    """Old code: registered both; the profile kept deciding from its own table_id, the table was orphaned."""
    mine = dataclasses.replace(PROFILES["hopper"], name="mismatch")
    before = snapshot()
    with pytest.raises(ValueError, match="not the table"):
        register_profile(mine, table=forged("heur_mine"))
    assert snapshot() == before


@pytest.mark.parametrize("table_id", ["heur_" + H100_TABLE[5:].upper(), H100_TABLE + " ", "heur_never_registered"])
def test_register_profile_refuses_a_table_id_that_names_nothing(table_id: str) -> None:
    """Old code: registered; its first call then failed to open a package file (or, on a case-insensitive
    file system, read the shipped data under another id)."""
    mine = dataclasses.replace(PROFILES["hopper"], name="dangling", table_id=table_id)
    before = snapshot()
    with pytest.raises(ValueError, match="neither shipped nor registered"):
        register_profile(mine)
    assert snapshot() == before
    with pytest.raises(mmaemu.UnknownNameError, match="is shipped or registered"):
        SplitTable.load(table_id)


def test_a_user_profile_on_a_shipped_table_uses_the_shipped_data_and_unregisters_cleanly() -> None:
    mine = dataclasses.replace(PROFILES["hopper"], name="my-hopper")
    register_profile(mine)
    assert decide("my-hopper", QUICKSTART) == HOPPER_QUICKSTART
    unregister_profile("my-hopper")
    unregister_profile("hopper")  # a shipped profile: no-op
    assert "my-hopper" not in USER_PROFILES and "hopper" in PROFILES
    assert decide("hopper", QUICKSTART) == HOPPER_QUICKSTART


def test_a_direct_write_into_user_tables_cannot_shadow_a_shipped_id() -> None:
    """Old code: SplitTable.load read USER_TABLES first, so hopper decided S = 3 from the forged row."""
    USER_TABLES[H100_TABLE] = forged(H100_TABLE)
    assert SplitTable.load(H100_TABLE) is SplitTable.load(H100_TABLE) is not USER_TABLES[H100_TABLE]
    assert decide("hopper", QUICKSTART) == HOPPER_QUICKSTART


def test_shipped_columns_are_read_only() -> None:
    """Old code: ``SplitTable.load(H100_TABLE).S[row] = 3`` changed hopper's decisions for the process."""
    table = SplitTable.load(H100_TABLE)
    row = table.lookup(QUICKSTART.setting(1 << 20).code, QUICKSTART.m, QUICKSTART.n, QUICKSTART.k)
    assert row is not None
    for column in (table.key, table.setting_start, table.S, table.custom):
        with pytest.raises(ValueError, match="read-only"):
            column[row if len(column) > row else 0] = 3
    assert decide("hopper", QUICKSTART) == HOPPER_QUICKSTART


def _write(directory: Path, table: SplitTable, stem: str, info: dict[str, Any] | None = None) -> tuple[Path, Path]:
    arrays = {"key": table.key, "setting_start": table.setting_start, "S": table.S, "custom": table.custom}
    return write_table(directory, stem, arrays, info if info is not None else table.info)


@pytest.mark.parametrize("table_id", VARIANTS[:5], ids=repr)
def test_from_files_refuses_a_file_claiming_a_shipped_id(tmp_path: Path, table_id: str) -> None:
    """Old code: loaded as that id; registered, it replaced the table behind hopper."""
    npz, js = _write(tmp_path, forged(table_id), "mine")
    before = snapshot()
    with pytest.raises(ValueError, match="mine.json: split-K table id .*another id"):
        SplitTable.from_files(npz, js)
    assert snapshot() == before
    assert decide("hopper", QUICKSTART) == HOPPER_QUICKSTART


def test_from_files_of_the_shipped_files_is_the_shipped_table(tmp_path: Path) -> None:
    """A byte-for-byte copy of the shipped files is the shipped table itself; one byte more is refused."""
    base = Path(table_module.__file__).parent.parent / "data" / "splitk"
    for suffix in (".npz", ".json"):
        shutil.copy(base / f"{H100_TABLE}{suffix}", tmp_path / f"{H100_TABLE}{suffix}")
    npz, js = tmp_path / f"{H100_TABLE}.npz", tmp_path / f"{H100_TABLE}.json"
    assert SplitTable.from_files(npz, js) is SplitTable.load(H100_TABLE)
    js.write_bytes(js.read_bytes() + b"\n")
    with pytest.raises(ValueError, match="not the shipped table's"):
        SplitTable.from_files(npz, js)


@pytest.mark.parametrize("table_id", [123, None, ["heur_x"]], ids=repr)
def test_from_files_refuses_an_id_that_is_not_a_string(tmp_path: Path, table_id: object) -> None:
    """Old code: ``str(table_id)`` made an id of any JSON value."""
    npz, js = _write(tmp_path, forged("heur_x"), "mine")
    info = json.loads(js.read_text())
    info["table_id"] = table_id
    js.write_text(json.dumps(info))
    with pytest.raises(ValueError, match="string table_id"):
        SplitTable.from_files(npz, js)


@pytest.mark.parametrize("table_id", ["", "heur_a b", "heur_a\x00", "heur_a\u200b", "heur_a\n"], ids=repr)
def test_register_table_refuses_an_id_that_is_not_one_printable_word(table_id: str) -> None:
    before = snapshot()
    with pytest.raises(ValueError, match="printable word"):
        register_table(forged(table_id))
    assert snapshot() == before


@pytest.mark.parametrize("bad", [object(), "heur_x", None])
def test_register_table_refuses_what_is_not_a_table(bad: object) -> None:
    before = snapshot()
    with pytest.raises(TypeError, match="SplitTable"):
        register_table(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="string"):
        register_table(dataclasses.replace(forged("heur_x"), table_id=7))  # type: ignore[arg-type]
    assert snapshot() == before


def test_a_user_table_registers_replaces_and_unregisters_with_its_profile() -> None:
    """The legitimate route still works: a table under its own id, replaced on request, removed with its profile."""
    mine = dataclasses.replace(PROFILES["hopper"], name="mine", table_id="heur_mine")
    register_profile(mine, table=forged("heur_mine"))
    assert decide("mine", QUICKSTART)[:3] == (3, Scheme.CONTIGUOUS, SplitSource.TABLE)
    with pytest.raises(ValueError, match="already registered"):
        register_table(forged("heur_mine"))
    register_profile(mine, table=forged("heur_mine", parts=2), replace=True)
    assert decide("mine", QUICKSTART)[0] == 2
    unregister_profile("mine")
    assert "heur_mine" not in USER_TABLES
    assert decide("hopper", QUICKSTART) == HOPPER_QUICKSTART


def test_an_edited_shipped_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installation whose shipped table was edited cannot speak for the H100. Old code: loaded it."""
    data = tmp_path / "splitk"
    data.mkdir()
    base = Path(table_module.__file__).parent.parent / "data" / "splitk"
    for suffix in (".npz", ".json"):
        shutil.copy(base / f"{H100_TABLE}{suffix}", data / f"{H100_TABLE}{suffix}")
    info = json.loads((data / f"{H100_TABLE}.json").read_text())
    info["envelope"]["validation"]["33554432"]["status"] = "validated"  # hopper-te's failed held-out test, "passed"
    (data / f"{H100_TABLE}.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    monkeypatch.setattr(table_module, "_shipped_dir", lambda: data)
    SplitTable._load_shipped.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=f"{H100_TABLE}.json has sha256 .* reinstall mmaemu"):
            SplitTable.load(H100_TABLE)
        with pytest.raises(RuntimeError, match="damaged or edited"):
            decide("hopper-te", QUICKSTART)
    finally:
        monkeypatch.undo()
        SplitTable._load_shipped.cache_clear()
    assert decide("hopper", QUICKSTART) == HOPPER_QUICKSTART


def test_the_pins_are_the_shipped_files() -> None:
    """Every shipped table loads (its files have the pinned sha256), and its id is a profile's."""
    for table_id in SHIPPED_TABLES:
        assert SplitTable.load(table_id).table_id == table_id
    assert {p.table_id for p in profiles_module.PROFILES.values() if p.table_id} == set(SHIPPED_TABLES)
