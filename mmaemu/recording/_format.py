"""The on-disk format of a reference-platform recording and its one strict reader (the writer: :mod:`mmaemu.recording._writer`).

A recording (written by ``python -m mmaemu record``, :mod:`mmaemu.recording._record`) is a directory:

- ``manifest.json``: ``format`` / ``format_version``, the ``environment`` (GPU, SM count, capability,
  driver, CUDA, cuBLASLt version and library sha256, torch, Transformer Engine), the ``grid`` and
  ``budget`` it ran under, ``sections`` (environment, heuristics, probes, calls: complete, partial,
  skipped) and ``files`` (sha256 of every data file, so that a replay notices a changed file);
- ``heuristics.npz`` + ``heuristics.json``: cuBLASLt's decisions in the binary split-K table format of
  :mod:`mmaemu.platforms._table` (the same writer as ``tools/evidence/convert_splitk.py``), with extra
  columns ``reduction``, ``workspace`` (bytes the algorithm needs) and ``part`` (:class:`Part`);
- ``calls.jsonl`` + ``calls.npz``: live ``torch._scaled_mm`` calls, one JSON object per line
  (:class:`CallRecord`: shape, formats, scales, the seed its inputs are generated from, the heuristic's
  decision, the sha256 of the output of each of its two runs), and the full output bits of a sample
  (``out<id>``);
- ``probes.json`` + ``probes.npz``: the numerics probes (:mod:`mmaemu.recording._probes`): inputs and GPU outputs.

A recording is untrusted input (docs/recording.md, "Threat model"). :meth:`Recording.open` and
:func:`inspect` are its one reader, shared by the replay and
:func:`~mmaemu.recording.profile_from_recording`: every file is read once, through
:class:`~mmaemu.recording._directory.RecordingDirectory` (no links, regular files only, bounded sizes),
hashed, compared with the manifest and parsed from those same bytes; every field is checked for its
type and range; a live call's declared shape must fit a memory budget (:data:`MAX_CALL_BYTES`) and
the recording's own bound on live calls, and a stored output must have that shape. The
recording's :attr:`Recording.digest` is computed from the files' actual content, so whatever is
validated is bound to that content.

Inputs of live calls are not stored: :func:`mmaemu.recording._inputs.call_inputs` regenerates them from the seed (FP8 codes from
numpy's PCG64 raw stream, which is stable across numpy versions) and the record keeps their sha256.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RecordingDamagedError
from ..platforms._table import WS_BYTES, check_table_columns
from ._directory import RecordingDirectory
from ._records import (
    FORMAT,
    FORMAT_VERSION,
    CallRecord,
    Part,
    Section,
    SectionStatus,
    sha256_bytes,
)

__all__ = [
    "DATA_FILES",
    "MAX_ARRAY_BYTES",
    "MANIFEST",
    "MAX_CALL_BYTES",
    "SECTION_FILES",
    "Inspection",
    "Recording",
    "call_bytes",
    "inspect",
    "read_manifest",
    "recording_digest",
]

#: The data files of each section (what a complete section must have sealed in the manifest).
SECTION_FILES: dict[Section, tuple[str, ...]] = {
    Section.ENVIRONMENT: (),
    Section.HEURISTICS: ("heuristics.npz", "heuristics.json"),
    Section.PROBES: ("probes.json", "probes.npz"),
    Section.CALLS: ("calls.jsonl", "calls.npz"),
}
DATA_FILES: tuple[str, ...] = tuple(name for names in SECTION_FILES.values() for name in names)
MANIFEST = "manifest.json"
#: The largest manifest (it holds digests and a few descriptions: kilobytes).
_MAX_MANIFEST_BYTES = 16 << 20
#: The most the arrays of one ``.npz`` file may hold once decompressed.
MAX_ARRAY_BYTES = 4 << 30
#: The most memory one live call's replay may need (:func:`call_bytes`): a call declaring more is damage.
MAX_CALL_BYTES = 4 << 30
#: What a file that does not parse raises while it is parsed (zip, zlib, numpy's format, JSON, text).
_PARSE_ERRORS = (EOFError, ValueError, KeyError, TypeError, IndexError, zipfile.BadZipFile, zlib.error,
                 UnicodeDecodeError, OverflowError, RecursionError)


def call_bytes(call: CallRecord) -> int:
    """The memory a live call's replay needs, about: its FP8 inputs, and fp32 accumulators for every part."""
    return (call.m + call.n) * call.k + 4 * call.m * call.n * (max(call.S, 1) + 3)


def _load_npz(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file's bytes, every declared size checked before anything is allocated.

    Raises:
        ValueError: not an npz of plain numeric arrays, or one that would decompress past :data:`MAX_ARRAY_BYTES`.
    """
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        infos = z.infolist()
        if len(infos) > 1 << 16:
            raise ValueError(f"{len(infos)} members: more than an npz of a recording holds")
        total = sum(info.file_size for info in infos)
        if total > MAX_ARRAY_BYTES:
            raise ValueError(f"its arrays would take {total:,} bytes, more than {MAX_ARRAY_BYTES:,}")
        for info in infos:
            if not info.filename.endswith(".npy") or "/" in info.filename:
                raise ValueError(f"member {info.filename!r} is not an array")
            member = z.read(info)  # CRC-checked
            fh = io.BytesIO(member)
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version in ((2, 0), (3, 0)):
                shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                raise ValueError(f"member {info.filename!r}: npy version {version}")
            if dtype.hasobject or dtype.kind not in "biuf":
                raise ValueError(f"member {info.filename!r} holds {dtype}, not numbers")
            if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize > len(member):
                raise ValueError(f"member {info.filename!r} declares {shape} but holds fewer bytes")
            fh.seek(0)
            arrays[info.filename[: -len(".npy")]] = np.load(fh, allow_pickle=False)
    return arrays


def _json_object(data: bytes) -> dict[str, Any]:
    doc = json.loads(data.decode("utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc


def _check_manifest(where: Path, manifest: dict[str, Any]) -> None:
    """Raise RecordingDamagedError when the manifest is not one this reader reads."""
    version = manifest.get("format_version")
    if manifest.get("format") != FORMAT or type(version) is not int or version != FORMAT_VERSION:
        raise RecordingDamagedError(f"{where}: format {manifest.get('format')!r} version "
                                    f"{manifest.get('format_version')!r} is not {FORMAT!r} version {FORMAT_VERSION}")
    files = manifest.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise RecordingDamagedError(f"{where}: field 'files' is not a map of file names to sha256 digests")
    unknown = sorted(set(files) - set(DATA_FILES))
    if unknown:
        raise RecordingDamagedError(f"{where}: field 'files' lists files a recording does not have: {unknown}")
    sections = manifest.get("sections", {})
    statuses = {s.value for s in SectionStatus}
    if (not isinstance(sections, dict) or not set(sections) <= {s.value for s in Section}
            or not all(isinstance(v, str) and v in statuses for v in sections.values())):
        raise RecordingDamagedError(f"{where}: field 'sections' is not a map of sections to {sorted(statuses)}")
    environment = manifest.get("environment", {})
    if not isinstance(environment, dict):
        raise RecordingDamagedError(f"{where}: field 'environment' is not a JSON object")
    for key in ("sm_count", "torch_workspace_bytes"):
        value = environment.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 40):
            raise RecordingDamagedError(f"{where}: field environment.{key}={value!r} is not a non-negative integer")
    if environment.get("torch_workspace_bytes", WS_BYTES[1]) not in WS_BYTES:
        raise RecordingDamagedError(f"{where}: field environment.torch_workspace_bytes is not one of {list(WS_BYTES)}")
    for key in ("gpu", "cublaslt", "torch", "driver", "cuda", "cublaslt_path", "cublaslt_sha256", "transformer_engine"):
        value = environment.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > 4096):
            raise RecordingDamagedError(f"{where}: field environment.{key}={value!r} is not a string or null")
    capability = environment.get("capability")
    if capability is not None and not (isinstance(capability, list) and len(capability) == 2 and all(
            type(c) is int and 0 <= c < 1000 for c in capability)):
        raise RecordingDamagedError(f"{where}: field environment.capability={capability!r} is not [major, minor]")
    for key in ("grid", "budget"):
        if not isinstance(manifest.get(key, {}), dict):
            raise RecordingDamagedError(f"{where}: field {key!r} is not a JSON object")
    live_cost = manifest.get("grid", {}).get("live_cost")
    if live_cost is not None and (type(live_cost) is not int or live_cost < 1):
        raise RecordingDamagedError(f"{where}: field grid.live_cost={live_cost!r} is not a positive integer")


def read_manifest(d: RecordingDirectory) -> dict[str, Any]:
    where = d.root / MANIFEST
    text = d.read(MANIFEST, limit=_MAX_MANIFEST_BYTES)
    if text is None:
        raise RecordingDamagedError(f"{d.root} is not a recording: no manifest.json")
    try:
        manifest = _json_object(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RecordingDamagedError(f"{where} is not a JSON object ({exc}): the recording is damaged; copy it again "
                                    "from the machine that recorded it") from None
    _check_manifest(where, manifest)
    return manifest


@dataclass
class Recording:
    """A recording, read strictly and held in memory (:meth:`open`; :func:`inspect` for a damaged one).

    Attributes:
        path: the directory.
        manifest: ``manifest.json``.
        calls: the live calls.
        digest: one sha256 over the data files' actual sha256 (what a replay report is tied to).
        files: the data files' actual sha256, by name.
    """

    path: Path
    manifest: dict[str, Any]
    calls: list[CallRecord]
    digest: str
    files: dict[str, str]
    _table: dict[str, np.ndarray] | None = field(default=None, repr=False)
    _table_info: dict[str, Any] | None = field(default=None, repr=False)
    _outputs: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _probes: dict[str, Any] | None = field(default=None, repr=False)
    _probe_arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @staticmethod
    def open(path: str | os.PathLike[str]) -> Recording:
        """Read a recording, trusting nothing (see the module docstring).

        Raises:
            RecordingDamagedError: anything damaged, naming the file and the field: not a recording
                directory, a link or special file in it, a manifest of another format, a file changed
                since it was sealed, missing, unsealed, oversized or malformed.
        """
        found = inspect(path)
        if found.recording is None:
            raise RecordingDamagedError(f"{Path(path)}: the recording is damaged: " + "; ".join(
                f"{name}: {why}" for name, why in found.damaged.items()))
        return found.recording

    @property
    def environment(self) -> dict[str, Any]:
        """The recorded environment."""
        return dict(self.manifest.get("environment", {}))

    def section(self, section: Section) -> SectionStatus:
        """How far a section got."""
        return SectionStatus(self.manifest.get("sections", {}).get(section.value, SectionStatus.PENDING.value))

    def has_table(self) -> bool:
        """Whether the heuristic table was written."""
        return self._table is not None and self._table_info is not None

    def table_columns(self) -> dict[str, np.ndarray]:
        """The heuristic table's columns (``key``, ``setting_start``, ``S``, ``custom``, ``part``, ...).

        Raises:
            ValueError: the recording has no table.
        """
        if self._table is None:
            raise ValueError(f"{self.path}: the recording has no heuristic table (its heuristics section did not run)")
        return dict(self._table)

    def table_info(self) -> dict[str, Any]:
        """The heuristic table's ``info`` (as recorded: describe, never trust, what it says)."""
        return dict(self._table_info or {})

    def stored_output(self, call: CallRecord) -> np.ndarray | None:
        """The full output bits of a stored call, or None."""
        return self._outputs.get(f"out{call.id}") if call.stored else None

    def probes(self) -> dict[str, Any] | None:
        """``probes.json``, or None."""
        return self._probes

    def probe_arrays(self) -> dict[str, np.ndarray]:
        """``probes.npz`` (inputs and outputs of the probes)."""
        return dict(self._probe_arrays)


@dataclass
class Inspection:
    """What :func:`inspect` found: the manifest, the files that changed, what is damaged, and the recording.

    Attributes:
        path: the directory.
        manifest: ``manifest.json`` (checked).
        changed: data files missing or with another sha256 than the manifest's.
        damaged: file -> what is wrong with it (changed, unsealed, malformed, oversized).
        digest: one sha256 over the data files' actual sha256.
        recording: the recording, when nothing is damaged; else None.
    """

    path: Path
    manifest: dict[str, Any]
    changed: list[str]
    damaged: dict[str, str]
    digest: str
    recording: Recording | None


def inspect(path: str | os.PathLike[str]) -> Inspection:
    """Read and check a recording; damaged data files are reported, not raised.

    Raises:
        RecordingDamagedError: the directory cannot be a recording at all: missing, not a directory,
            holding a link or a special file, or a missing or malformed manifest.
    """
    with RecordingDirectory(path) as d:
        d.check_entries()
        manifest = read_manifest(d)
        files: dict[str, str] = manifest.get("files", {})
        changed: list[str] = []
        damaged: dict[str, str] = {}
        content: dict[str, bytes] = {}
        actual: dict[str, str] = {}
        for name, digest in files.items():
            try:
                data = d.read(name)
            except RecordingDamagedError as exc:
                damaged[name] = str(exc)
                continue
            if data is None:
                changed.append(name)
                damaged[name] = "missing (the manifest lists it)"
                continue
            actual[name] = sha256_bytes(data)
            content[name] = data
            if actual[name] != digest:
                changed.append(name)
                damaged[name] = "its sha256 is not the manifest's: changed since recording (truncated, damaged or edited)"
        for name in DATA_FILES:
            if name not in files and d.exists(name):
                damaged[name] = "not sealed in the manifest (its sha256 was never recorded)"
    root = Path(path)
    digest = recording_digest(manifest, actual)
    recording = None if damaged else _parse(root, manifest, content, actual, digest, damaged)
    return Inspection(root, manifest, changed, damaged, digest, recording)


def recording_digest(manifest: Mapping[str, Any], actual: Mapping[str, str]) -> str:
    """One sha256 over everything a recording claims: the data files' actual sha256 and the manifest's other
    fields (environment, grid, sections, ...), so that editing either changes it."""
    claims = {key: value for key, value in manifest.items() if key != "files"}
    return sha256_bytes(json.dumps({"files": sorted(actual.items()), "manifest": claims}, sort_keys=True).encode())


def _parse(root: Path, manifest: dict[str, Any], content: dict[str, bytes], actual: dict[str, str], digest: str,
           damaged: dict[str, str]) -> Recording | None:
    """The recording parsed from its files' bytes, or None with ``damaged`` filled in."""
    parsed: dict[str, Any] = {}
    for name, data in content.items():
        try:
            if name.endswith(".npz"):
                parsed[name] = _load_npz(data)
                if name == "heuristics.npz":
                    check_table_columns(parsed[name], parts=[int(p) for p in Part])
            elif name == "calls.jsonl":
                parsed[name] = _parse_calls(data, manifest)
            else:
                parsed[name] = _json_object(data)
        except _PARSE_ERRORS as exc:
            damaged[name] = f"does not parse ({type(exc).__name__}: {exc})"
    if damaged:
        return None
    calls: list[CallRecord] = parsed.get("calls.jsonl", [])
    outputs: dict[str, np.ndarray] = parsed.get("calls.npz", {})
    for call in calls:
        stored = outputs.get(f"out{call.id}")
        if not call.stored or stored is None:
            continue
        width = call.out.dtype.itemsize
        if stored.shape != (call.m, call.n) or stored.dtype.itemsize != width or stored.dtype.kind not in "iu":
            damaged["calls.npz"] = (f"array out{call.id} is {stored.dtype} {stored.shape}, not the {width}-byte integer "
                                    f"bits of call {call.id}'s [{call.m}, {call.n}] output")
            return None
        little = np.ascontiguousarray(stored).astype(stored.dtype.newbyteorder("<"), copy=False)
        if not call.outputs or sha256_bytes(little.tobytes()) != call.outputs[0]:
            damaged["calls.npz"] = (f"array out{call.id} is not the output whose sha256 call {call.id} records: the "
                                    "stored bits contradict the record")
            return None
    has_table = "heuristics.npz" in parsed and "heuristics.json" in parsed
    return Recording(root, manifest, calls, digest, dict(actual),
                     _table=parsed["heuristics.npz"] if has_table else None,
                     _table_info=parsed["heuristics.json"] if has_table else None, _outputs=outputs,
                     _probes=parsed.get("probes.json"), _probe_arrays=parsed.get("probes.npz", {}))


def _parse_calls(data: bytes, manifest: Mapping[str, Any]) -> list[CallRecord]:
    """The call records of ``calls.jsonl``, each line checked, each declared size bounded."""
    live_cost = manifest.get("grid", {}).get("live_cost")
    calls = []
    lines = data.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if lines and live_cost is None:
        raise ValueError("live calls without the grid's live_cost (the bound on (m + n) * k) in the manifest")
    for i, line in enumerate(lines):
        try:
            call = CallRecord.from_json(json.loads(line))
            if call.id != i:
                raise ValueError(f"id {call.id} is not its line's index {i}")
            if call_bytes(call) > MAX_CALL_BYTES:
                raise ValueError(f"m, n, k = {call.m}, {call.n}, {call.k} (S = {call.S}) would need "
                                 f"{call_bytes(call):,} bytes to replay, more than {MAX_CALL_BYTES:,}")
            if (call.m + call.n) * call.k > live_cost:
                raise ValueError(f"m, n, k = {call.m}, {call.n}, {call.k} exceed the grid's live_cost {live_cost} "
                                 "((m + n) * k of the largest live call)")
        except _PARSE_ERRORS as exc:
            raise ValueError(f"line {i + 1}: {type(exc).__name__}: {exc}") from None
        calls.append(call)
    return calls
