"""The on-disk format of a reference-platform recording, its split-K table, and the envelope fit.

A recording (written by ``python -m mmaemu record``, :mod:`mmaemu.record`) is a directory:

- ``manifest.json``: ``format`` / ``format_version``, the ``environment`` (GPU, SM count, capability,
  driver, CUDA, cuBLASLt version and library sha256, torch, Transformer Engine), the ``grid`` and
  ``budget`` it ran under, ``sections`` (environment, heuristics, probes, calls: complete, partial,
  skipped) and ``files`` (sha256 of every data file, so that a replay notices a changed file);
- ``heuristics.npz`` + ``heuristics.json``: cuBLASLt's decisions in the binary split-K table format of
  :class:`mmaemu.platform.SplitTable` (the same writer as ``tools/convert_splitk.py``), with extra
  columns ``reduction``, ``workspace`` (bytes the algorithm needs) and ``part`` (:class:`Part`);
- ``calls.jsonl`` + ``calls.npz``: live ``torch._scaled_mm`` calls, one JSON object per line
  (:class:`CallRecord`: shape, formats, scales, the seed its inputs are generated from, the heuristic's
  decision, the sha256 of the output of each of its two runs), and the full output bits of a sample
  (``out<id>``);
- ``probes.json`` + ``probes.npz``: the numerics probes (:mod:`mmaemu.probes`): inputs and GPU outputs.

Inputs of live calls are not stored: :func:`call_inputs` regenerates them from the seed (FP8 codes from
numpy's PCG64 raw stream, which is stable across numpy versions) and the record keeps their sha256.

The envelope (:func:`fit_envelope`, :func:`validate_envelope`) follows the seeds' sweep: fitted on the
training rows only, tested once on held-out rows (:func:`heldout_mask`) that the fit never receives.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import io
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .formats import Fp8Format, OutFormat

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "OUT_NAMES",
    "TABLE_FORMAT",
    "WS_BYTES",
    "CallClass",
    "CallRecord",
    "DataKind",
    "EnvelopeStatus",
    "Part",
    "Recording",
    "RecordingWriter",
    "Section",
    "SectionStatus",
    "TableRows",
    "call_inputs",
    "fit_envelope",
    "heldout_mask",
    "inputs_sha256",
    "output_bytes",
    "output_sha256",
    "pack_key",
    "profile_from_recording",
    "register_recording",
    "serialise_table",
    "setting_code",
    "setting_statistics",
    "sha256_bytes",
    "sha256_file",
    "table_arrays",
    "unpack_key",
    "validate_envelope",
    "write_table",
]

FORMAT = "mmaemu-recording"
FORMAT_VERSION = 1
#: The ``format`` of split-K tables (shipped and recorded).
TABLE_FORMAT = "mmaemu-splitk/1"
WS_BYTES = [0, 1 << 20, 4 << 20, 32 << 20]
OUT_NAMES = ["float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]
FMT_NAMES = ["e4m3", "e5m2"]
FIELD_BITS = 21
#: The bound of a K grid point that no training row decides (nothing is claimed there).
NO_CLAIM = 1 << 62

_OUTS = [OutFormat.FLOAT32, OutFormat.BFLOAT16, OutFormat.FLOAT16, OutFormat.E4M3, OutFormat.E5M2]
_FMTS = [Fp8Format.E4M3, Fp8Format.E5M2]


class Section(enum.Enum):
    """The sections of a recording, in the order the recorder runs them."""

    ENVIRONMENT = "environment"
    HEURISTICS = "heuristics"
    PROBES = "probes"
    CALLS = "calls"


class SectionStatus(enum.Enum):
    """How far a section got."""

    PENDING = "pending"
    COMPLETE = "complete"
    PARTIAL = "partial"  # stopped by the time budget; what it has is written
    SKIPPED = "skipped"


class Part(enum.IntEnum):
    """Which part of the heuristic grid a table row comes from (column ``part``)."""

    GRID = 0  # the dense envelope grid (M x M*N levels x K); 1 in 5 shapes is held out (heldout_mask)
    HELDOUT = 1  # random shapes, never used by the fit
    MODEL = 2  # common model projection shapes
    LIVE = 3  # the shapes of live calls and probes


class DataKind(enum.Enum):
    """How the inputs of a live call are generated from its seed."""

    RANDOM = "random"
    ADVERSARIAL = "adversarial"


class CallClass(enum.Enum):
    """The classes a replay reports live calls by."""

    UNSPLIT_RANDOM = "unsplit/random"
    UNSPLIT_ADVERSARIAL = "unsplit/adversarial"
    SPLIT_RANDOM = "split/random"
    SPLIT_ADVERSARIAL = "split/adversarial"

    @staticmethod
    def of(split: bool, data: DataKind) -> CallClass:
        """The class of a call."""
        if split:
            return CallClass.SPLIT_RANDOM if data is DataKind.RANDOM else CallClass.SPLIT_ADVERSARIAL
        return CallClass.UNSPLIT_RANDOM if data is DataKind.RANDOM else CallClass.UNSPLIT_ADVERSARIAL


class EnvelopeStatus(enum.Enum):
    """The result of an envelope's held-out test (the strings :mod:`mmaemu.platform` reads)."""

    VALIDATED = "validated"  # rows above the bound were tested and none split
    UNVALIDATED = "unvalidated"  # a held-out row above the bound split
    UNTESTED = "untested"  # no held-out row lies above the bound


# --------------------------------------------------------------------------------------------------
# The split-K table writer (shared with tools/convert_splitk.py)
# --------------------------------------------------------------------------------------------------


def setting_code(fa: Any, fb: Any, out: Any, fast: Any, ws: Any) -> Any:
    """One byte per setting: fa (1 bit), fb (1), out (3), fast (1), ws (2); scalars or arrays."""
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
            "ws": WS_BYTES[s & 3], "out": OUT_NAMES[(s >> 3) & 7], "fast": bool((s >> 2) & 1),
            "fmt_a": FMT_NAMES[(s >> 7) & 1], "fmt_b": FMT_NAMES[(s >> 6) & 1], "rows": hi - lo,
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


# --------------------------------------------------------------------------------------------------
# Hashes, outputs and inputs
# --------------------------------------------------------------------------------------------------


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of bytes."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def output_bytes(t: torch.Tensor) -> bytes:
    """The raw little-endian bits of a tensor, row-major (what a recording hashes and stores)."""
    arr = t.detach().contiguous().cpu().view(_INT_OF_WIDTH[t.element_size()]).numpy()
    return arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()


def output_sha256(t: torch.Tensor) -> str:
    """sha256 of :func:`output_bytes`."""
    return sha256_bytes(output_bytes(t))


def _raw_bytes(seed: int, count: int) -> np.ndarray:
    """``count`` bytes of PCG64's raw stream for ``seed`` (stable across numpy versions)."""
    words = np.random.Generator(np.random.PCG64(seed)).bit_generator.random_raw((count + 7) // 8)
    return np.asarray(words, dtype="<u8").view(np.uint8)[:count]


def _banded_codes(raw: np.ndarray, fmt: Fp8Format) -> np.ndarray:
    """Finite FP8 codes from raw bytes: random sign and mantissa, exponent in a band of 8 binades."""
    raw = raw.astype(np.uint8)
    sign = raw & 0x80
    if fmt is Fp8Format.E4M3:  # exponent field 4..11: magnitudes 2**-3 .. 2**4 * 1.875
        return (sign | ((4 + ((raw >> 3) & 7)) << 3) | (raw & 7)).astype(np.uint8)
    return (sign | ((11 + ((raw >> 2) & 7)) << 2) | (raw & 3)).astype(np.uint8)  # 2**-4 .. 2**3 * 1.75


def _adversarial_codes(raw: np.ndarray, rows: int, k: int, fmt: Fp8Format) -> np.ndarray:
    """Cancellation and alignment: per row, a large +x/-x pair, many tiny values and one mid value.

    Tiny terms survive or vanish depending on which block, chain (128), split part and addition order
    meets them, so these rows discriminate the accumulation structure; a random permutation per row
    moves the pattern through K.
    """
    codes = np.zeros((rows, k), np.uint8)
    if fmt is Fp8Format.E4M3:
        big, tiny_lo, mid = 0x70, 0x08, 0x38  # 128, 2**-6 (times 1 to 1.375), 1.0
    else:
        big, tiny_lo, mid = 0x5C, 0x14, 0x3C  # 256, 2**-10, 1.0
    perm_raw = raw.reshape(rows, k).astype(np.int64)
    for r in range(rows):
        order = np.argsort(perm_raw[r] * 1024 + np.arange(k), kind="stable")
        row = np.full(k, 0, np.uint8)
        tiny = (tiny_lo + (raw[r * k:(r + 1) * k] & 3)).astype(np.uint8)
        row[:] = tiny | (raw[r * k:(r + 1) * k] & 0x80)
        row[order[0]] = big
        row[order[1 % k]] = big | 0x80
        row[order[2 % k]] = mid
        codes[r] = row
    return codes


def call_inputs(data: DataKind, seed: int, m: int, n: int, k: int, fmt_a: Fp8Format,
                fmt_b: Fp8Format) -> tuple[torch.Tensor, torch.Tensor]:
    """The inputs of a live call: ``a [M, K]`` and ``b [N, K]`` FP8 tensors, from ``seed`` only.

    ``torch._scaled_mm(a, b.t(), ...)`` is the call (``b.t()`` is column-major, as torch requires).
    """
    raw_a = _raw_bytes(seed, m * k)
    raw_b = _raw_bytes(seed + (1 << 40), n * k)
    if data is DataKind.RANDOM:
        a_codes = _banded_codes(raw_a, fmt_a).reshape(m, k)
        b_codes = _banded_codes(raw_b, fmt_b).reshape(n, k)
    else:
        a_codes = _adversarial_codes(raw_a, m, k, fmt_a)
        b_codes = _banded_codes(raw_b, fmt_b).reshape(n, k)
    a = torch.from_numpy(a_codes.copy()).view(fmt_a.dtype)
    b = torch.from_numpy(b_codes.copy()).view(fmt_b.dtype)
    return a, b


def inputs_sha256(a: torch.Tensor, b: torch.Tensor) -> str:
    """sha256 of ``a``'s then ``b``'s codes."""
    return sha256_bytes(output_bytes(a) + output_bytes(b))


# --------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallRecord:
    """One live ``torch._scaled_mm(a, b.t(), scale_a, scale_b, ...)`` call of a recording.

    Attributes:
        id: index in ``calls.jsonl``.
        m: M.
        n: N.
        k: K.
        fmt_a: mat1's format.
        fmt_b: mat2's format.
        out: the output format.
        fast: ``use_fast_accum``.
        data: how the inputs were generated.
        seed: their seed (:func:`call_inputs`).
        input_sha256: sha256 of the generated inputs, checked before replaying.
        scale_a_bits: fp32 bits of scale_a.
        scale_b_bits: fp32 bits of scale_b.
        scale_result_bits: fp32 bits of scale_result, or None when not passed.
        workspace_bytes: the workspace the heuristic was queried with (torch's).
        S: the heuristic's split (1: unsplit).
        custom: its customOption.
        reduction: its reduction scheme.
        outputs: sha256 of the output of each run (two when the call ran twice).
        stored: whether ``calls.npz`` holds the full output (``out<id>``).
        error: the exception torch raised (``"Class: message"``), else None.
    """

    id: int
    m: int
    n: int
    k: int
    fmt_a: Fp8Format
    fmt_b: Fp8Format
    out: OutFormat
    fast: bool
    data: DataKind
    seed: int
    input_sha256: str
    scale_a_bits: int
    scale_b_bits: int
    scale_result_bits: int | None
    workspace_bytes: int
    S: int
    custom: int
    reduction: int
    outputs: tuple[str, ...]
    stored: bool
    error: str | None = None

    @property
    def call_class(self) -> CallClass:
        """Split or not, random or adversarial."""
        return CallClass.of(self.S > 1, self.data)

    @property
    def deterministic(self) -> bool:
        """Whether every run gave the same bits."""
        return len(set(self.outputs)) <= 1

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``calls.jsonl``."""
        d = dataclasses.asdict(self)
        d.update(fmt_a=self.fmt_a.short_name, fmt_b=self.fmt_b.short_name, out=OUT_NAMES[_OUTS.index(self.out)],
                 data=self.data.value, outputs=list(self.outputs), call_class=self.call_class.value)
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> CallRecord:
        """Parse a line of ``calls.jsonl``."""
        fields = {f.name for f in dataclasses.fields(CallRecord)}
        values = {k: v for k, v in d.items() if k in fields}
        values.update(fmt_a=_FMTS[FMT_NAMES.index(d["fmt_a"])], fmt_b=_FMTS[FMT_NAMES.index(d["fmt_b"])],
                      out=_OUTS[OUT_NAMES.index(d["out"])], data=DataKind(d["data"]), outputs=tuple(d["outputs"]))
        return CallRecord(**values)


def fp32_scalar(bits: int) -> torch.Tensor:
    """A 0-dim float32 tensor of the given bits."""
    return torch.tensor(np.uint32(bits).view(np.int32).item(), dtype=torch.int32).view(torch.float32)


def fp32_bits(x: float) -> int:
    """The bits of ``x`` rounded to fp32."""
    return int(np.float32(x).view(np.uint32))


@dataclass
class Recording:
    """A recording directory, read.

    Attributes:
        path: the directory.
        manifest: ``manifest.json``.
        calls: the live calls.
    """

    path: Path
    manifest: dict[str, Any]
    calls: list[CallRecord]

    @staticmethod
    def open(path: str | os.PathLike[str]) -> Recording:
        """Read a recording's manifest and call records (arrays are read on demand).

        Raises:
            ValueError: not a recording, or a format version this mmaemu does not read.
        """
        root = Path(path)
        manifest_path = root / "manifest.json"
        if not manifest_path.is_file():
            raise ValueError(f"{root} is not a recording: no manifest.json")
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{root}: format {manifest.get('format')!r} version {manifest.get('format_version')!r} "
                             f"is not {FORMAT!r} version {FORMAT_VERSION}")
        calls_path = root / "calls.jsonl"
        calls = []
        if calls_path.is_file():
            for line in calls_path.read_text().splitlines():
                if line.strip():
                    try:
                        calls.append(CallRecord.from_json(json.loads(line)))
                    except (ValueError, KeyError, TypeError):
                        break  # a torn last line of a recording that was killed
        return Recording(root, manifest, calls)

    @property
    def environment(self) -> dict[str, Any]:
        """The recorded environment."""
        return dict(self.manifest.get("environment", {}))

    def section(self, section: Section) -> SectionStatus:
        """How far a section got."""
        return SectionStatus(self.manifest.get("sections", {}).get(section.value, SectionStatus.PENDING.value))

    def has_table(self) -> bool:
        """Whether the heuristic table was written."""
        return (self.path / "heuristics.npz").is_file() and (self.path / "heuristics.json").is_file()

    def table_columns(self) -> dict[str, np.ndarray]:
        """The heuristic table's columns (``key``, ``setting_start``, ``S``, ``custom``, ``part``, ...)."""
        with np.load(self.path / "heuristics.npz") as data:
            return {k: np.asarray(data[k]) for k in data.files}

    def table_info(self) -> dict[str, Any]:
        """The heuristic table's ``info``."""
        info: dict[str, Any] = json.loads((self.path / "heuristics.json").read_text())
        return info

    def stored_output(self, call: CallRecord) -> np.ndarray | None:
        """The full output bits of a stored call, or None."""
        path = self.path / "calls.npz"
        if not call.stored or not path.is_file():
            return None
        with np.load(path) as data:
            name = f"out{call.id}"
            return np.asarray(data[name]) if name in data.files else None

    def probes(self) -> dict[str, Any] | None:
        """``probes.json``, or None."""
        path = self.path / "probes.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def probe_arrays(self) -> dict[str, np.ndarray]:
        """``probes.npz`` (inputs and outputs of the probes)."""
        path = self.path / "probes.npz"
        if not path.is_file():
            return {}
        with np.load(path) as data:
            return {k: np.asarray(data[k]) for k in data.files}

    def changed_files(self) -> list[str]:
        """Data files whose sha256 differs from the manifest's (or that are missing)."""
        changed = []
        for name, digest in self.manifest.get("files", {}).items():
            path = self.path / name
            if not path.is_file() or sha256_file(path) != digest:
                changed.append(name)
        return changed

    @property
    def digest(self) -> str:
        """One sha256 over the manifest's file digests: what a replay report is tied to."""
        files = self.manifest.get("files", {})
        return sha256_bytes(json.dumps(sorted(files.items())).encode())


class RecordingWriter:
    """Writes a recording directory incrementally (each section's files as soon as it ends).

    The manifest is rewritten after every section, so a recording stopped at any point reads back
    with the sections it completed.
    """

    def __init__(self, path: str | os.PathLike[str], *, environment: Mapping[str, Any], grid: Mapping[str, Any],
                 budget: Mapping[str, Any]) -> None:
        """Create the directory (it must be empty or absent) and write the initial manifest."""
        self.path = Path(path)
        if self.path.exists() and any(self.path.iterdir()):
            raise FileExistsError(f"{self.path} is not empty: a recording needs a fresh directory")
        self.path.mkdir(parents=True, exist_ok=True)
        from . import __version__

        self.manifest: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "mmaemu": __version__,
            "environment": dict(environment),
            "grid": dict(grid),
            "budget": dict(budget),
            "sections": {s.value: SectionStatus.PENDING.value for s in Section},
            "files": {},
        }
        self._calls = open(self.path / "calls.jsonl", "w")  # noqa: SIM115 - closed by close()
        self._outputs: dict[str, np.ndarray] = {}
        self.flush()

    def set_section(self, section: Section, status: SectionStatus, **details: Any) -> None:
        """Record a section's status (and details such as row counts) and rewrite the manifest."""
        self.manifest["sections"][section.value] = status.value
        if details:
            self.manifest.setdefault("section_details", {})[section.value] = details
        self.flush()

    def update(self, key: str, value: Any) -> None:
        """Set a top-level manifest entry (e.g. the budget's final state)."""
        self.manifest[key] = value
        self.flush()

    def write_table(self, arrays: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        """Write ``heuristics.npz`` / ``heuristics.json``."""
        write_table(self.path, "heuristics", arrays, info)
        self.flush()

    def add_call(self, record: CallRecord, output: torch.Tensor | None) -> None:
        """Append a call record; keep its output bits when ``record.stored``."""
        self._calls.write(json.dumps(record.to_json(), sort_keys=True) + "\n")
        self._calls.flush()
        if record.stored and output is not None:
            c = output.detach().contiguous().cpu()
            self._outputs[f"out{record.id}"] = c.view(_INT_OF_WIDTH[c.element_size()]).numpy().copy()

    def write_calls(self) -> None:
        """Write ``calls.npz`` (the stored outputs)."""
        np.savez_compressed(self.path / "calls.npz", **self._outputs)  # type: ignore[arg-type]
        self.flush()

    def write_probes(self, doc: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Write ``probes.json`` and ``probes.npz``."""
        (self.path / "probes.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        np.savez_compressed(self.path / "probes.npz", **dict(arrays))  # type: ignore[arg-type]
        self.flush()

    def flush(self) -> None:
        """Recompute the data files' sha256 and rewrite ``manifest.json``."""
        files = {}
        for name in ("heuristics.npz", "heuristics.json", "calls.jsonl", "calls.npz", "probes.json", "probes.npz"):
            path = self.path / name
            if path.is_file():
                if name == "calls.jsonl" and hasattr(self, "_calls") and not self._calls.closed:
                    self._calls.flush()
                files[name] = sha256_file(path)
        self.manifest["files"] = files
        tmp = self.path / "manifest.json.tmp"
        tmp.write_text(json.dumps(self.manifest, indent=1, sort_keys=True) + "\n")
        tmp.replace(self.path / "manifest.json")

    def close(self) -> None:
        """Close ``calls.jsonl`` and write the final manifest."""
        if not self._calls.closed:
            self._calls.close()
        self.flush()


def reseal(path: str | os.PathLike[str]) -> None:
    """Recompute a recording's file digests in its manifest (after editing a file on purpose)."""
    root = Path(path)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"] = {name: sha256_file(root / name) for name in manifest.get("files", {}) if (root / name).is_file()}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


# --------------------------------------------------------------------------------------------------
# The envelope: fitted on training rows, tested on held-out rows
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableRows:
    """Rows of a heuristic table as flat columns (one entry per row)."""

    setting: np.ndarray
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    S: np.ndarray
    part: np.ndarray

    @staticmethod
    def of(columns: Mapping[str, np.ndarray]) -> TableRows:
        """Flatten a table's columns (``key``, ``setting_start``, ``S``, ``part``)."""
        starts = np.asarray(columns["setting_start"], np.int64)
        setting = np.repeat(np.arange(256, dtype=np.int64), np.diff(starts))
        m, n, k = unpack_key(columns["key"])
        part = np.asarray(columns["part"]) if "part" in columns else np.zeros(len(m), np.uint8)
        return TableRows(setting, m, n, k, np.asarray(columns["S"]), part)

    def select(self, mask: np.ndarray) -> TableRows:
        """The rows where ``mask`` holds."""
        return TableRows(self.setting[mask], self.m[mask], self.n[mask], self.k[mask], self.S[mask], self.part[mask])

    def __len__(self) -> int:
        return len(self.m)


def heldout_mask(rows: TableRows) -> np.ndarray:
    """Which rows the envelope's fit never sees: every :attr:`Part.HELDOUT` row and the grid shapes whose
    hash of (M, N, K) is 0 mod 5 (a fixed fifth of the grid, the same shapes in every setting)."""
    x = (rows.m.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (rows.n.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)) \
        ^ (rows.k.astype(np.uint64) * np.uint64(0x94D049BB133111EB))
    x ^= x >> np.uint64(31)
    x *= np.uint64(0xD6E8FEB86659FD93)
    x ^= x >> np.uint64(32)
    grid_heldout = (rows.part == Part.GRID) & ((x % np.uint64(5)) == 0)
    return np.asarray((rows.part == Part.HELDOUT) | grid_heldout)


def _setting_fields(s: int) -> dict[str, Any]:
    return {"ws": WS_BYTES[s & 3], "out": OUT_NAMES[(s >> 3) & 7], "fast": bool((s >> 2) & 1),
            "fmt_a": FMT_NAMES[(s >> 7) & 1], "fmt_b": FMT_NAMES[(s >> 6) & 1]}


def fit_envelope(train: TableRows, *, margin: int = 2) -> dict[str, Any]:
    """Fit an envelope ``B(setting, K)`` on training rows: above it, no split was seen.

    The K grid is the set of K of the training :attr:`Part.GRID` rows. Per setting and grid K: ``lo`` is
    the largest split M*N among grid rows at that K and other training rows whose K maps to it (the
    smallest grid K at or above theirs); the basis is the smallest grid M*N at that K above ``lo`` (an
    unsplit level; without one nothing is claimed from that K on). ``B(K)`` is ``margin`` times the
    largest basis at grid K's up to K, at least ``margin`` times the smallest grid M*N.

    Args:
        train: rows the fit may use (never the held-out ones).
        margin: the factor between the last unsplit level seen and the bound.

    Returns:
        The ``envelope`` of a table's info (``kind`` ``"k_grid"``, as :mod:`mmaemu.platform` reads it),
        with ``validation`` empty (:func:`validate_envelope` fills it).
    """
    grid_rows = train.select(train.part == Part.GRID)
    k_grid = np.unique(grid_rows.k)
    envelope: dict[str, Any] = {
        "kind": "k_grid",
        "claim": "S = 1 when M * N > B(setting, K) and K_min <= K <= K_max; K takes the B of the smallest grid K >= K",
        "K_grid": [int(k) for k in k_grid], "K_min": int(k_grid[0]) if len(k_grid) else 0,
        "K_max": int(k_grid[-1]) if len(k_grid) else -1, "margin": margin, "bounds": [], "validation": {},
        "fit_rows": len(train),
    }
    if not len(k_grid):
        return envelope
    for s in np.unique(grid_rows.setting):
        g = grid_rows.select(grid_rows.setting == s)
        t = train.select((train.setting == s) & (train.k <= k_grid[-1]))
        gi = np.searchsorted(k_grid, t.k, side="left")
        mn_t = t.m * t.n
        mn_g = g.m * g.n
        floor = margin * int(mn_g.min())
        bounds: list[int] = []
        running = 0
        claimed = True
        for i, kg in enumerate(k_grid):
            split_here = (gi == i) & (t.S > 1)
            lo = int(mn_t[split_here].max()) if split_here.any() else 0
            above = mn_g[(g.k == kg) & (mn_g > lo)]
            if not claimed or not len(above):
                claimed = False
                bounds.append(NO_CLAIM)
                continue
            running = max(running, int(above.min()))
            bounds.append(max(margin * running, floor))
        envelope["bounds"].append({**_setting_fields(int(s)), "B": bounds})
    return envelope


def validate_envelope(envelope: Mapping[str, Any], heldout: TableRows) -> dict[str, dict[str, Any]]:
    """Test an envelope once on held-out rows: per workspace, the rows above the bound and how many split.

    Returns:
        ``{str(workspace bytes): {"status", "rows", "tested", "split_above_bound", "closest_split_ratio"}}``:
        ``validated`` when rows above the bound were tested and none split, ``unvalidated`` when one did,
        ``untested`` when no held-out row lies above a bound.
    """
    k_grid = np.asarray(envelope["K_grid"], np.int64)
    result: dict[str, dict[str, Any]] = {}
    bounds = {setting_code(FMT_NAMES.index(b["fmt_a"]), FMT_NAMES.index(b["fmt_b"]), OUT_NAMES.index(b["out"]),
                           int(b["fast"]), WS_BYTES.index(b["ws"])): np.asarray(b["B"], np.int64) for b in envelope["bounds"]}
    per_ws: dict[int, list[int]] = {}
    for s in np.unique(heldout.setting):
        ws = WS_BYTES[int(s) & 3]
        stats = per_ws.setdefault(ws, [0, 0, 0])
        h = heldout.select(heldout.setting == s)
        stats[0] += len(h)
        b = bounds.get(int(s))
        if b is None or not len(k_grid):
            continue
        inside = (h.k >= envelope["K_min"]) & (h.k <= envelope["K_max"])
        idx = np.searchsorted(k_grid, h.k[inside], side="left")
        bound = b[idx]
        mn = (h.m * h.n)[inside]
        above = mn > bound
        stats[1] += int(above.sum())
        stats[2] += int((above & (h.S[inside] > 1)).sum())
        split = h.S[inside] > 1
        if split.any():
            ratio = float((mn[split] / bound[split]).max())
            result.setdefault(str(ws), {})["closest_split_ratio"] = max(ratio, result.get(str(ws), {}).get("closest_split_ratio", 0.0))
    for ws, (rows, tested, bad) in per_ws.items():
        status = EnvelopeStatus.UNVALIDATED if bad else (EnvelopeStatus.VALIDATED if tested else EnvelopeStatus.UNTESTED)
        entry = result.setdefault(str(ws), {})
        entry.update(status=status.value, rows=rows, tested=tested, split_above_bound=bad)
    return result


# --------------------------------------------------------------------------------------------------
# A profile from a recording
# --------------------------------------------------------------------------------------------------


def _slug(text: str) -> str:
    return "".join(c for c in text.lower().replace("nvidia", "") if c.isalnum())


def profile_from_recording(directory: str | os.PathLike[str], *, name: str | None = None,
                           workspace_bytes: int | None = None, preset: Any = None, split_family: Any = None,
                           report: Mapping[str, Any] | None = None, register: bool = False,
                           verdict: Any = None) -> Any:
    """A :class:`~mmaemu.platform.Profile` whose split-K table is a recording's.

    The table holds every recorded heuristic row. Its envelope is fitted on the training rows and
    tested once on the held-out ones (:func:`heldout_mask`). The preset and split family are the probes'
    verdict (or ``preset=`` / ``split_family=``). The profile is ``validated`` only when a replay report
    of this very recording (``replay.json`` in the directory, or ``report=``) passed, the probes fit a
    preset and at least one live call was replayed; otherwise ``experimental``. ``profile.evidence`` and
    ``profile.source`` say what was proven.

    Args:
        directory: the recording.
        name: registry name (default ``"rec-<gpu>-<digest[:8]>"``).
        workspace_bytes: the caller's workspace (default: the recording's torch workspace).
        preset: a :class:`~mmaemu.model.Preset` to use instead of the probes' verdict.
        split_family: a :class:`~mmaemu.platform.SplitFamily` to use instead of the probes' verdict.
        report: a replay report (default: ``replay.json`` in the directory, if present).
        register: also :func:`~mmaemu.platform.register_profile` it (with its table).
        verdict: the probes' verdict, when already computed (:func:`mmaemu.probes.verdict_from_recording`).

    Raises:
        ValueError: no heuristic table, or the probes fit no preset (or no split family while the table
            has splits) and none was passed.
    """
    from .model import Maturity
    from .platform import (
        Caller,
        Profile,
        SplitFamily,
        SplitTable,
        register_profile,
        register_table,
    )
    from .probes import verdict_from_recording

    rec = Recording.open(directory)
    if not rec.has_table():
        raise ValueError(f"{rec.path}: the recording has no heuristic table (its heuristics section did not run)")
    env = rec.environment
    columns = rec.table_columns()
    info = rec.table_info()
    rows = TableRows.of(columns)
    held = heldout_mask(rows)
    envelope = fit_envelope(rows.select(~held))
    envelope["validation"] = validate_envelope(envelope, rows.select(held))
    if report is None and (rec.path / "replay.json").is_file():
        report = json.loads((rec.path / "replay.json").read_text())
    report_valid = report is not None and report.get("recording_digest") == rec.digest
    if verdict is None:
        verdict = verdict_from_recording(rec)
    chosen_preset = preset if preset is not None else verdict.preset
    if chosen_preset is None:
        raise ValueError(f"{rec.path}: the probes fit no preset ({verdict.summary}); pass preset= to build a profile anyway")
    family = split_family if split_family is not None else verdict.split_family
    has_splits = bool((rows.S > 1).any())
    if family is None:
        if has_splits:
            raise ValueError(f"{rec.path}: the probes decide no split family ({verdict.summary}); pass split_family=")
        family = SplitFamily.CONTIGUOUS
    ws = int(workspace_bytes if workspace_bytes is not None else env.get("torch_workspace_bytes", 1 << 20))
    if ws == 0 and bool((rows.S[(rows.setting & 3) == 0] > 1).any()):
        raise ValueError(f"{rec.path}: this GPU split K without a workspace; a workspace-0 profile would be wrong off the table")
    # a replay proves this profile only if it ran with this profile's preset and split family
    same_model = report is not None and (report.get("preset"), report.get("split_family")) == (
        getattr(chosen_preset, "name", None), family.name.lower())
    verified = (sorted({tuple(c) for c in (report or {}).get("verified_combos", [])}) if report_valid and same_model
                else [])
    table_id = f"heur_{_slug(str(env.get('gpu', 'gpu')))}_lt{env.get('cublaslt', 'unknown')}_{rec.digest[:8]}"
    info = {**info, "table_id": table_id, "envelope": envelope, "verified_combos": [list(c) for c in verified]}
    info_hash = sha256_bytes(json.dumps(info, sort_keys=True, default=str).encode())[:6]
    table_id = info["table_id"] = f"{table_id}{info_hash}"
    table = SplitTable.from_arrays(table_id, info, columns)
    replay_passed = bool(report_valid and report is not None and report.get("passed") and same_model)
    live_equal = int((report or {}).get("calls", {}).get("equal", 0)) if report_valid else 0
    validated = replay_passed and live_equal > 0 and preset is None and verdict.preset is not None
    env_status = {ws_: v["status"] for ws_, v in envelope["validation"].items()}
    evidence = {
        "recording": str(rec.path), "recording_digest": rec.digest,
        "sections": dict(rec.manifest.get("sections", {})),
        "replay": ("not run" if report is None else "for another recording" if not report_valid
                   else "under another preset or split family" if not same_model
                   else "passed" if replay_passed else "failed"),
        "live_calls_equal": live_equal,
        "live_calls": int((report or {}).get("calls", {}).get("total", 0)) if report_valid else 0,
        "verified_split_combos": len(verified),
        "probes": verdict.summary, "preset_from": "probes" if preset is None else "argument",
        "split_family_from": "probes" if split_family is None and verdict.split_family is not None else
                             ("argument" if split_family is not None else "no splits recorded"),
        "envelope": env_status, "heuristic_rows": len(rows), "heldout_rows": int(held.sum()),
    }
    source = (f"recording {rec.path.name} ({env.get('gpu')}, cuBLASLt {env.get('cublaslt')}, digest {rec.digest[:12]}): "
              f"replay {evidence['replay']}, {live_equal} of {evidence['live_calls']} live calls equal; "
              f"{len(rows):,} heuristic rows; envelope {env_status or 'none'}; probes: {verdict.summary}")
    profile = Profile(
        name=name or f"rec-{_slug(str(env.get('gpu', 'gpu')))}-{rec.digest[:8]}",
        preset=chosen_preset,
        split_family=family,
        gpu=str(env.get("gpu", "unknown")),
        sm_count=int(env.get("sm_count", 1)),
        cublaslt=str(env.get("cublaslt", "unknown")),
        torch_version=str(env.get("torch", "unknown")),
        caller=Caller.TORCH,
        workspace_bytes=ws,
        maturity=Maturity.VALIDATED if validated else Maturity.EXPERIMENTAL,
        table_id=table_id,
        source=source,
        evidence=evidence,
    )
    if register:
        register_profile(profile, table=table, replace=True)
    else:
        register_table(table, replace=True)
    return profile


def register_recording(directory: str | os.PathLike[str], **options: Any) -> Any:
    """Build a profile from a recording and register it; returns the profile."""
    return profile_from_recording(directory, register=True, **options)
