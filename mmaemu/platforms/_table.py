"""The binary split-K table: its encoding, its writer and its reader (the one home of the encoding).

A split-K table records cuBLASLt's heuristic decision (S, customOption) per call setting and shape.
On disk it is ``<table_id>.npz`` (columns) and ``<table_id>.json`` (``info``). Rows are grouped by a
one-byte *setting* code and sorted within it by a 63-bit *key*:

- setting: ``fmt_a << 7 | fmt_b << 6 | out << 3 | fast << 2 | ws``, with ``fmt`` the index in
  :data:`FP8_FORMATS`, ``out`` the index in :data:`OUT_FORMATS` and ``ws`` the index in
  :data:`WS_BYTES` (:class:`Setting`, :func:`setting_code`);
- key: ``M << 42 | N << 21 | K`` (:func:`pack_key`, 21 bits per dimension);
- columns: ``key`` (int64), ``setting_start`` (int64, 257 entries: rows of setting ``s`` are
  ``setting_start[s]:setting_start[s+1]``), ``S`` and ``custom``, and any further per-row columns.

The shipped tables (``mmaemu/data/splitk``, written by ``tools/evidence/convert_splitk.py``), the recorder's
``heuristics.npz`` and the replay all go through this module.

A shipped table's id (:data:`SHIPPED_TABLES`, pinned by the reference GPUs' records) always names the
shipped data: :meth:`SplitTable.load` reads it from the package and checks its sha256, and no user table can
be registered under it (:func:`register_table`), nor under an id that differs from one only in case,
whitespace or Unicode form.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from ..errors import UnknownNameError
from ..formats import Fp8Format, OutFormat
from .._split import Scheme
from ._gpus import GPUS

__all__ = [
    "TABLE_FORMAT", "FIELD_BITS", "WS_BYTES", "OUT_FORMATS", "FP8_FORMATS", "OUT_NAMES", "FMT_NAMES",
    "KEY_DESCRIPTION", "table_codes", "Setting", "setting_code", "pack_key", "unpack_key", "table_arrays",
    "check_table_columns", "setting_statistics", "serialise_table", "write_table", "SplitTable", "H100_TABLE",
    "RTX4060_TABLE", "SHIPPED_TABLES", "shipped_table_id", "table_known", "check_user_table", "register_table",
    "USER_TABLES"
]

#: The ``format`` of split-K tables (shipped and recorded).
TABLE_FORMAT = "mmaemu-splitk/1"
#: Bits per dimension in a key.
FIELD_BITS = 21
#: cuBLAS workspaces of the recorded settings (bytes), by code.
WS_BYTES: tuple[int, ...] = (0, 1 << 20, 4 << 20, 32 << 20)
#: Output formats, by code.
OUT_FORMATS: tuple[OutFormat, ...] = (OutFormat.FLOAT32, OutFormat.BFLOAT16, OutFormat.FLOAT16, OutFormat.E4M3,
                                      OutFormat.E5M2)
#: FP8 input formats, by code.
FP8_FORMATS: tuple[Fp8Format, ...] = (Fp8Format.E4M3, Fp8Format.E5M2)
#: The names the tables' JSON uses for outputs (torch's dtype names) and FP8 formats, by code.
OUT_NAMES: tuple[str, ...] = tuple(f.dtype_name for f in OUT_FORMATS)
FMT_NAMES: tuple[str, ...] = tuple(f.short_name for f in FP8_FORMATS)
#: The ``key`` entry of a table's info: how its key and setting codes are built.
KEY_DESCRIPTION = "M << 42 | N << 21 | K within a setting; setting = fa << 7 | fb << 6 | out << 3 | fast << 2 | ws"


def table_codes() -> dict[str, list[Any]]:
    """The ``codes`` entry of a table's info: the values behind each field's code."""
    return {"fmt": list(FMT_NAMES), "out": list(OUT_NAMES), "ws_bytes": list(WS_BYTES)}


@dataclass(frozen=True)
class Setting:
    """The call features a table groups rows by: formats, output, fast accumulation, workspace."""

    fmt_a: Fp8Format
    fmt_b: Fp8Format
    out: OutFormat
    fast: bool
    workspace_bytes: int

    def __post_init__(self) -> None:
        if self.workspace_bytes not in WS_BYTES:
            raise ValueError(f"workspace {self.workspace_bytes} bytes is not a recorded setting; one of {list(WS_BYTES)}")

    @property
    def code(self) -> int:
        """The one-byte setting code."""
        return int(setting_code(FP8_FORMATS.index(self.fmt_a), FP8_FORMATS.index(self.fmt_b),
                                OUT_FORMATS.index(self.out), int(self.fast), WS_BYTES.index(self.workspace_bytes)))

    @staticmethod
    def from_code(code: int) -> Setting:
        """The setting of a one-byte code."""
        code = int(code)
        return Setting(FP8_FORMATS[(code >> 7) & 1], FP8_FORMATS[(code >> 6) & 1], OUT_FORMATS[(code >> 3) & 7],
                       bool((code >> 2) & 1), WS_BYTES[code & 3])

    def names(self) -> dict[str, Any]:
        """The setting as the tables' JSON writes it: ``ws`` (bytes), ``out``, ``fast``, ``fmt_a``, ``fmt_b``."""
        return {"ws": self.workspace_bytes, "out": self.out.dtype_name, "fast": self.fast,
                "fmt_a": self.fmt_a.short_name, "fmt_b": self.fmt_b.short_name}

    def combo(self, parts: int, scheme: Scheme) -> tuple[bool, int, str, str, str]:
        """A split combination as a table's ``verified_combos`` lists it: fast, S, scheme, out, format pair."""
        return (self.fast, int(parts), scheme.value, self.out.dtype_name, f"{self.fmt_a.short_name}x{self.fmt_b.short_name}")

    @staticmethod
    def from_names(d: Mapping[str, Any]) -> Setting:
        """The inverse of :meth:`names`."""
        return Setting(FP8_FORMATS[FMT_NAMES.index(d["fmt_a"])], FP8_FORMATS[FMT_NAMES.index(d["fmt_b"])],
                       OUT_FORMATS[OUT_NAMES.index(d["out"])], bool(d["fast"]), int(d["ws"]))


def setting_code(fa: Any, fb: Any, out: Any, fast: Any, ws: Any) -> Any:
    """One byte per setting from the codes of its fields: fa (1 bit), fb (1), out (3), fast (1), ws (2).

    Scalars or numpy arrays (the vectorised form of :attr:`Setting.code`)."""
    return (fa << 7) | (fb << 6) | (out << 3) | (fast << 2) | ws


def pack_key(m: Any, n: Any, k: Any) -> np.ndarray:
    """The table key ``M << 42 | N << 21 | K`` (int64)."""
    return (np.asarray(m, np.int64) << (2 * FIELD_BITS)) | (np.asarray(n, np.int64) << FIELD_BITS) | np.asarray(k, np.int64)


def unpack_key(key: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(M, N, K)`` of table keys."""
    key = np.asarray(key, np.int64)
    mask = (1 << FIELD_BITS) - 1
    return key >> (2 * FIELD_BITS), (key >> FIELD_BITS) & mask, key & mask


def table_arrays(setting: np.ndarray, m: np.ndarray, n: np.ndarray, k: np.ndarray,
                 columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Sort rows by (setting, key) into the table's binary columns.

    Args:
        setting: per row, its :func:`setting_code`.
        m: M per row.
        n: N per row.
        k: K per row.
        columns: further per-row columns (``S``, ``custom``, ...), reordered with the rows, dtypes kept.

    Returns:
        ``key`` (int64), ``setting_start`` (int64 [257]) and the columns, sorted.

    Raises:
        ValueError: a dimension does not fit the key's 21-bit fields, or a (setting, M, N, K) repeats.
    """
    for name, col in (("M", m), ("N", n), ("K", k)):
        if len(col) and (int(np.max(col)) >= 1 << FIELD_BITS or int(np.min(col)) < 0):
            raise ValueError(f"{name} does not fit the table key's {FIELD_BITS}-bit field")
    setting = np.asarray(setting, np.int64)
    key = pack_key(m, n, k)
    order = np.lexsort((key, setting))
    setting, key = setting[order], key[order]
    if len(key) > 1 and bool(((np.diff(setting) == 0) & (np.diff(key) == 0)).any()):
        raise ValueError("duplicate keys")
    out = {"key": key.astype(np.int64), "setting_start": np.searchsorted(setting, np.arange(257), side="left").astype(np.int64)}
    for name, col in columns.items():
        out[name] = np.asarray(col)[order]
    return out


def check_table_columns(arrays: Mapping[str, np.ndarray], parts: Iterable[int] | None = None) -> None:
    """Check columns read from an untrusted file: a split-K table's, sorted, of integers in range.

    Args:
        arrays: the columns.
        parts: the values a ``part`` column may hold (a recording's), if it has one.

    Raises:
        ValueError: naming the column: missing, not integers, not one value per row, unsorted or
            repeated keys, S outside [1, 255], customOption or reduction outside [0, 255].
    """
    absent = [k for k in ("key", "setting_start", "S", "custom") if k not in arrays]
    if absent:
        raise ValueError(f"column{'s' if len(absent) > 1 else ''} {', '.join(absent)} missing")
    key, starts = arrays["key"], arrays["setting_start"]
    for name, col in arrays.items():
        if col.dtype.kind not in "iu":
            raise ValueError(f"column {name} holds {col.dtype}, not integers")
        if col.ndim != 1:
            raise ValueError(f"column {name} has shape {col.shape}, not one value per row")
    rows = len(key)
    if starts.shape != (257,) or int(starts[0]) != 0 or int(starts[-1]) != rows or bool((np.diff(starts) < 0).any()):
        raise ValueError("column setting_start is not 257 non-decreasing offsets from 0 to the row count")
    for name, col in arrays.items():
        if name != "setting_start" and len(col) != rows:
            raise ValueError(f"column {name} has {len(col)} rows, not {rows}")
    key = key.astype(np.int64)
    if rows and int(key.min()) < 0:
        raise ValueError("column key holds a negative key")
    counts: np.ndarray = np.asarray(starts, np.int64)[1:] - np.asarray(starts, np.int64)[:-1]
    unnamed = [code for code in np.nonzero(counts)[0] if (int(code) >> 3) & 7 >= len(OUT_FORMATS)]
    if unnamed:
        raise ValueError(f"column setting_start has rows for setting codes {unnamed[:4]} whose output code names no "
                         "output format")
    setting = np.repeat(np.arange(256, dtype=np.int64), counts)
    if rows > 1 and bool(((np.diff(key) <= 0) & (np.diff(setting) == 0)).any()):
        raise ValueError("column key is not strictly increasing within each setting (unsorted or repeated rows)")
    for name, lo, hi in (("S", 1, 255), ("custom", 0, 255), ("reduction", 0, 255)):
        if name in arrays and rows and (int(arrays[name].min()) < lo or int(arrays[name].max()) > hi):
            raise ValueError(f"column {name} holds values outside [{lo}, {hi}]")
    if parts is not None and "part" in arrays and rows and not set(np.unique(arrays["part"]).tolist()) <= set(parts):
        raise ValueError(f"column part holds values that are not parts {sorted(parts)}")


def setting_statistics(arrays: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """Per setting with rows: its workspace, output, fast, formats, rows, split rows, S values, largest
    split M*N and smallest split K (the ``settings`` of a table's info)."""
    stats = []
    starts = arrays["setting_start"]
    for s in range(256):
        lo, hi = int(starts[s]), int(starts[s + 1])
        if hi == lo:
            continue
        m, n, k = unpack_key(arrays["key"][lo:hi])
        split = np.asarray(arrays["S"][lo:hi]) > 1
        stats.append({
            **Setting.from_code(s).names(), "rows": hi - lo,
            "split_rows": int(split.sum()),
            "S_values": sorted(int(v) for v in np.unique(np.asarray(arrays["S"][lo:hi])[split])),
            "max_split_MN": int((m * n)[split].max()) if split.any() else None,
            "min_split_K": int(k[split].min()) if split.any() else None,
        })
    return stats


def serialise_table(arrays: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """The bytes of ``<table_id>.npz`` (compressed columns) and ``<table_id>.json`` (sorted, indented)."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **dict(arrays))  # type: ignore[arg-type]
    return buf.getvalue(), (json.dumps(info, indent=1, sort_keys=True) + "\n").encode()


def write_table(directory: Path, stem: str, arrays: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> tuple[Path, Path]:
    """Write ``<stem>.npz`` and ``<stem>.json`` into ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    npz_bytes, json_bytes = serialise_table(arrays, info)
    npz_path, json_path = directory / f"{stem}.npz", directory / f"{stem}.json"
    npz_path.write_bytes(npz_bytes)
    json_path.write_bytes(json_bytes)
    return npz_path, json_path


# [Note: the shipped tables' sha256] Each shipped reference GPU's record (:data:`mmaemu.platforms._gpus.GPUS`)
# pins the sha256 of its table's ``<table_id>.npz`` and ``<table_id>.json`` in ``mmaemu/data/splitk`` as
# ``tools/evidence/convert_splitk.py`` writes them from ``recordings/splitk``. :meth:`SplitTable.load` refuses a shipped
# file with another sha256, so an edited or damaged installation cannot speak for the reference GPUs.
#: The shipped split-K tables: id -> (sha256 of its ``.npz``, sha256 of its ``.json``), from the GPU records.
SHIPPED_TABLES: Mapping[str, tuple[str, str]] = MappingProxyType({
    gpu.table_id: gpu.table_sha256 for gpu in GPUS.values() if gpu.table_id is not None and gpu.table_sha256 is not None
})
#: The id of the table recorded on the H100 PCIe (its record's ``table_id``; kept for code that imported it).
H100_TABLE: str = str(GPUS["h100"].table_id)
#: The id of the table recorded on the RTX 4060 (its record's ``table_id``; kept for code that imported it).
RTX4060_TABLE: str = str(GPUS["rtx4060"].table_id)

#: Tables registered at run time (:func:`register_table`), e.g. a recording's. A shipped id in it is never
#: read: :meth:`SplitTable.load` serves shipped ids from the package.
USER_TABLES: dict[str, SplitTable] = {}


def _folded(table_id: str) -> str:
    """An id compared without case, whitespace or Unicode compatibility forms (NFKC)."""
    return "".join(unicodedata.normalize("NFKC", table_id).casefold().split())


def shipped_table_id(table_id: str) -> str | None:
    """The shipped table's id that ``table_id`` is, or differs from only in case, whitespace or Unicode
    compatibility form (``"HEUR_H100PCIE_LT12.8.3.14 "``); None when it names no shipped table."""
    folded = _folded(table_id)
    return next((shipped for shipped in SHIPPED_TABLES if _folded(shipped) == folded), None)


def table_known(table_id: str) -> bool:
    """Whether :meth:`SplitTable.load` finds a table under this id (shipped or registered)."""
    return table_id in SHIPPED_TABLES or table_id in USER_TABLES


def _shipped_dir() -> Any:
    """The package's ``data/splitk`` (an importlib resource: a directory or inside an archive)."""
    return resources.files("mmaemu") / "data" / "splitk"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_shipped_bytes(table_id: str, npz_bytes: bytes, json_bytes: bytes) -> None:
    """Refuse shipped files whose sha256 is not the one pinned in :data:`SHIPPED_TABLES`."""
    for suffix, data, want in zip((".npz", ".json"), (npz_bytes, json_bytes), SHIPPED_TABLES[table_id]):
        got = _sha256(data)
        if got != want:
            raise RuntimeError(
                f"mmaemu's shipped split-K table file {table_id}{suffix} has sha256 {got}, not the {want} mmaemu "
                "ships: the installed package data is damaged or edited, so it cannot speak for the reference GPU; "
                "reinstall mmaemu (pip install --force-reinstall . from its checkout: the distribution mmaemu-bits)")


@dataclass(frozen=True)
class SplitTable:
    """A recorded cuBLASLt split-K table: sorted binary columns, looked up with a binary search.

    Rows of setting ``s`` (one byte: fa, fb, out, fast, ws) are ``setting_start[s]:setting_start[s+1]``,
    sorted by ``key = M << 42 | N << 21 | K``.
    """

    table_id: str
    info: dict[str, Any] = field(repr=False)
    key: np.ndarray = field(repr=False)
    setting_start: np.ndarray = field(repr=False)
    S: np.ndarray = field(repr=False)
    custom: np.ndarray = field(repr=False)
    verified: frozenset[tuple[bool, int, str, str, str]] = field(repr=False)

    @staticmethod
    def load(table_id: str) -> SplitTable:
        """The table ``table_id`` names: a shipped table (:data:`SHIPPED_TABLES`; read once per process,
        its sha256 checked, its columns read-only), else a registered user table (:func:`register_table`).

        Raises:
            UnknownNameError: no table is shipped or registered under this id (a ``ValueError`` and a
                ``KeyError``).
            RuntimeError: a shipped table's file is not the one mmaemu ships (damaged or edited).
        """
        if table_id in SHIPPED_TABLES:
            return SplitTable._load_shipped(table_id)
        user = USER_TABLES.get(table_id)
        if user is None:
            known = ", ".join(repr(t) for t in [*SHIPPED_TABLES, *USER_TABLES])
            raise UnknownNameError(
                f"no split-K table {table_id!r} is shipped or registered (known: {known}); register a recording's "
                "with mmaemu.recording.register_recording(DIR), or a table with mmaemu.platforms._table.register_table")
        return user

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def _load_shipped(table_id: str) -> SplitTable:
        base = _shipped_dir()
        npz_bytes, json_bytes = (base / f"{table_id}.npz").read_bytes(), (base / f"{table_id}.json").read_bytes()
        _check_shipped_bytes(table_id, npz_bytes, json_bytes)
        with np.load(io.BytesIO(npz_bytes), allow_pickle=False) as data:
            table = SplitTable.from_arrays(table_id, json.loads(json_bytes), data)
        for column in (table.key, table.setting_start, table.S, table.custom):
            column.flags.writeable = False
        return table

    @staticmethod
    def from_files(npz_path: str | os.PathLike[str], json_path: str | os.PathLike[str]) -> SplitTable:
        """Load a table written in the shipped format (``<table_id>.npz`` and ``.json``) from any path.

        A file whose ``table_id`` is a shipped table's gives the shipped table only when both files are
        the shipped ones byte for byte (their sha256); a shipped id names the shipped data only.

        Raises:
            ValueError: the columns are not a split-K table's (:func:`check_table_columns`); the info is not
                a JSON object with a string ``table_id`` and ``verified_combos``; the ``table_id`` is a shipped
                table's (or differs from one only in case, whitespace or Unicode form) and the files are not
                that table's; or the ``table_id`` is not one printable word.
        """
        json_bytes, npz_bytes = Path(json_path).read_bytes(), Path(npz_path).read_bytes()
        info = json.loads(json_bytes)
        if (not isinstance(info, dict) or not isinstance(info.get("table_id"), str)
                or not isinstance(info.get("verified_combos"), list)):
            raise ValueError(f"{json_path}: not a split-K table's info (a JSON object with a string table_id and "
                             "verified_combos)")
        table_id = info["table_id"]
        if table_id in SHIPPED_TABLES and (_sha256(npz_bytes), _sha256(json_bytes)) == SHIPPED_TABLES[table_id]:
            return SplitTable.load(table_id)
        try:
            _check_user_id(table_id)
        except ValueError as exc:
            differ = " and these files are not the shipped table's (sha256)" if shipped_table_id(table_id) else ""
            raise ValueError(f"{json_path}: {exc}{differ}") from None
        with np.load(io.BytesIO(npz_bytes), allow_pickle=False) as data:
            columns = {k: np.asarray(data[k]) for k in data.files}
        check_table_columns(columns)
        return SplitTable.from_arrays(table_id, info, columns)

    @staticmethod
    def from_arrays(table_id: str, info: dict[str, Any], data: Any) -> SplitTable:
        """A table from its ``info`` and a mapping holding the ``key``, ``setting_start``, ``S`` and ``custom`` columns."""
        arrays = {k: np.asarray(data[k]) for k in ("key", "setting_start", "S", "custom")}
        verified = frozenset((bool(c[0]), int(c[1]), str(c[2]), str(c[3]), str(c[4])) for c in info["verified_combos"])
        return SplitTable(table_id, info, arrays["key"], arrays["setting_start"], arrays["S"], arrays["custom"], verified)

    def lookup(self, setting: int, m: int, n: int, k: int) -> int | None:
        """The row index of a call, or None when it is not recorded."""
        if max(m, n, k) >= 1 << FIELD_BITS or min(m, n, k) < 0:
            return None
        lo, hi = int(self.setting_start[setting]), int(self.setting_start[setting + 1])
        key = int(pack_key(m, n, k))
        i = lo + int(np.searchsorted(self.key[lo:hi], key))
        return i if i < hi and int(self.key[i]) == key else None

    def lookup_many(self, settings: np.ndarray, m: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`lookup`: row indices, -1 where not recorded."""
        settings = np.asarray(settings, np.int64)
        keys = pack_key(m, n, k)
        idx = np.full(keys.shape, -1, dtype=np.int64)
        for s in np.unique(settings):
            sel = np.nonzero(settings == s)[0]
            lo, hi = int(self.setting_start[s]), int(self.setting_start[s + 1])
            if hi == lo:
                continue
            pos = lo + np.searchsorted(self.key[lo:hi], keys[sel])
            pos_ok = np.minimum(pos, hi - 1)
            found = (pos < hi) & (self.key[pos_ok] == keys[sel])
            idx[sel[found]] = pos_ok[found]
        return idx

    @functools.cached_property
    def largest_k(self) -> int:
        """The largest K of any recorded row (0 for an empty table)."""
        return int(unpack_key(self.key)[2].max()) if len(self.key) else 0

    def setting_stats(self, setting: Setting) -> dict[str, Any] | None:
        """The recorded statistics of one setting (rows, split rows, largest split M*N, ...)."""
        want = setting.names()
        for s in self.info["settings"]:
            if all(s[name] == value for name, value in want.items()):
                return dict(s)
        return None

    def is_verified(self, setting: Setting, parts: int, scheme: Scheme) -> bool:
        """Whether a split of this setting (S, scheme) was reproduced on a recorded hardware call."""
        return setting.combo(parts, scheme) in self.verified


def _check_user_id(table_id: object) -> None:
    """Refuse an id a user table cannot have: a shipped table's (or one differing only in case, whitespace or
    Unicode form: :func:`shipped_table_id`), or one that is not a single printable word."""
    if not isinstance(table_id, str):
        raise TypeError(f"a split-K table id must be a string, not {type(table_id).__name__}")
    shipped = shipped_table_id(table_id)
    if shipped is not None:
        what = ("is a shipped table's id" if shipped == table_id
                else f"differs from the shipped table id {shipped!r} only in case, whitespace or Unicode form")
        raise ValueError(
            f"split-K table id {table_id!r} {what}; a shipped table cannot be replaced or shadowed (the built-in "
            "profiles always use the shipped data): give this table another id")
    if not table_id or not table_id.isprintable() or any(c.isspace() for c in table_id):
        raise ValueError(f"split-K table id {table_id!r} is not one printable word (no whitespace or control "
                         "characters); give the table such an id")


def check_user_table(table: SplitTable, *, replace: bool = False) -> None:
    """Check that :func:`register_table` would accept ``table``, changing nothing.

    Raises:
        TypeError: ``table`` is not a :class:`SplitTable`, or its id not a string.
        ValueError: its id is a shipped table's, or differs from one only in case, whitespace or Unicode
            form, or is not one printable word; or a different table is registered under it and ``replace``
            is false.
    """
    if not isinstance(table, SplitTable):
        raise TypeError(f"table must be a SplitTable, not {type(table).__name__}")
    _check_user_id(table.table_id)
    if not replace and table.table_id in USER_TABLES and USER_TABLES[table.table_id] is not table:
        raise ValueError(f"a different split-K table {table.table_id!r} is already registered (pass replace=True)")


def register_table(table: SplitTable, *, replace: bool = False) -> None:
    """Make a split-K table (e.g. a recording's) loadable by :meth:`SplitTable.load` under its id.

    A shipped table's id is refused whatever ``replace`` says: the built-in profiles always use the
    shipped data. Nothing is registered when it raises.

    Raises:
        TypeError, ValueError: as :func:`check_user_table`.
    """
    check_user_table(table, replace=replace)
    USER_TABLES[table.table_id] = table
