"""The on-disk format of a reference-platform recording: reading, writing, sealing.

A recording (written by ``python -m mmaemu record``, :mod:`mmaemu.recording.record`) is a directory:

- ``manifest.json``: ``format`` / ``format_version``, the ``environment`` (GPU, SM count, capability,
  driver, CUDA, cuBLASLt version and library sha256, torch, Transformer Engine), the ``grid`` and
  ``budget`` it ran under, ``sections`` (environment, heuristics, probes, calls: complete, partial,
  skipped) and ``files`` (sha256 of every data file, so that a replay notices a changed file);
- ``heuristics.npz`` + ``heuristics.json``: cuBLASLt's decisions in the binary split-K table format of
  :mod:`mmaemu.platforms.table` (the same writer as ``tools/convert_splitk.py``), with extra
  columns ``reduction``, ``workspace`` (bytes the algorithm needs) and ``part`` (:class:`Part`);
- ``calls.jsonl`` + ``calls.npz``: live ``torch._scaled_mm`` calls, one JSON object per line
  (:class:`CallRecord`: shape, formats, scales, the seed its inputs are generated from, the heuristic's
  decision, the sha256 of the output of each of its two runs), and the full output bits of a sample
  (``out<id>``);
- ``probes.json`` + ``probes.npz``: the numerics probes (:mod:`mmaemu.recording.probes`): inputs and GPU outputs.

Inputs of live calls are not stored: :func:`mmaemu.recording.inputs.call_inputs` regenerates them from the seed (FP8 codes from
numpy's PCG64 raw stream, which is stable across numpy versions) and the record keeps their sha256.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..formats import Fp8Format, OutFormat
from ..platforms.table import FMT_NAMES, FP8_FORMATS, OUT_FORMATS, OUT_NAMES, write_table

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "CallClass",
    "CallRecord",
    "DataKind",
    "Part",
    "Recording",
    "RecordingWriter",
    "Section",
    "SectionStatus",
    "fp32_bits",
    "fp32_scalar",
    "output_bytes",
    "output_sha256",
    "reseal",
    "sha256_bytes",
    "sha256_file",
]

FORMAT = "mmaemu-recording"
FORMAT_VERSION = 1


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
        d.update(fmt_a=self.fmt_a.short_name, fmt_b=self.fmt_b.short_name, out=self.out.dtype_name,
                 data=self.data.value, outputs=list(self.outputs), call_class=self.call_class.value)
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> CallRecord:
        """Parse a line of ``calls.jsonl``."""
        fields = {f.name for f in dataclasses.fields(CallRecord)}
        values = {k: v for k, v in d.items() if k in fields}
        values.update(fmt_a=FP8_FORMATS[FMT_NAMES.index(d["fmt_a"])], fmt_b=FP8_FORMATS[FMT_NAMES.index(d["fmt_b"])],
                      out=OUT_FORMATS[OUT_NAMES.index(d["out"])], data=DataKind(d["data"]), outputs=tuple(d["outputs"]))
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
        from ..version import __version__

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
