"""Writing a recording directory: the recorder's writer, and resealing a manifest after an edit.

Every file goes through :class:`~mmaemu.recording._directory.RecordingDirectory` (new files, renamed into
place, never written through a link); :mod:`mmaemu.recording._format` defines what is written.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..platforms._table import serialise_table
from ._directory import RecordingDirectory
from ._format import DATA_FILES, MANIFEST, read_manifest
from ._records import FORMAT, FORMAT_VERSION, CallRecord, Section, SectionStatus, sha256_bytes

__all__ = ["RecordingWriter", "reseal"]

_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


class RecordingWriter:
    """Writes a recording directory incrementally (each section's files as soon as it ends).

    The manifest is rewritten after every section, so a recording stopped at any point reads back
    with the sections it completed. Every file goes through
    :class:`~mmaemu.recording._directory.RecordingDirectory` (new files, renamed into place).
    """

    def __init__(self, path: str | os.PathLike[str], *, environment: Mapping[str, Any], grid: Mapping[str, Any],
                 budget: Mapping[str, Any]) -> None:
        """Create the directory (it must be empty or absent) and write the initial manifest."""
        self.path = Path(path)
        if self.path.exists() and any(self.path.iterdir()):
            raise FileExistsError(f"{self.path} is not empty: a recording needs a fresh directory")
        self._dir = RecordingDirectory(self.path, create=True)
        from .._version import __version__

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
        self._calls = self._dir.create("calls.jsonl")
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
        npz, info_json = serialise_table(arrays, info)
        self._dir.write("heuristics.npz", npz)
        self._dir.write("heuristics.json", info_json)
        self.flush()

    def add_call(self, record: CallRecord, output: torch.Tensor | None) -> None:
        """Append a call record; keep its output bits when ``record.stored``."""
        self._calls.write(json.dumps(record.to_json(), sort_keys=True) + "\n")
        self._calls.flush()
        if record.stored and output is not None:
            c = output.detach().contiguous().cpu()
            self._outputs[f"out{record.id}"] = c.view(_INT_OF_WIDTH[c.element_size()]).numpy().copy()

    def _write_npz(self, name: str, arrays: Mapping[str, np.ndarray]) -> None:
        buf = io.BytesIO()
        np.savez_compressed(buf, **dict(arrays))  # type: ignore[arg-type]
        self._dir.write(name, buf.getvalue())

    def write_calls(self) -> None:
        """Write ``calls.npz`` (the stored outputs)."""
        self._write_npz("calls.npz", self._outputs)
        self.flush()

    def write_probes(self, doc: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Write ``probes.json`` and ``probes.npz``."""
        self._dir.write("probes.json", (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
        self._write_npz("probes.npz", arrays)
        self.flush()

    def flush(self) -> None:
        """Recompute the data files' sha256 and rewrite ``manifest.json``."""
        if not self._calls.closed:
            self._calls.flush()
        files = {}
        for name in DATA_FILES:
            data = self._dir.read(name)
            if data is not None:
                files[name] = sha256_bytes(data)
        self.manifest["files"] = files
        self._dir.write(MANIFEST, (json.dumps(self.manifest, indent=1, sort_keys=True) + "\n").encode())

    def close(self) -> None:
        """Close ``calls.jsonl`` and write the final manifest."""
        if not self._calls.closed:
            self._calls.close()
        self.flush()
        self._dir.close()


def reseal(path: str | os.PathLike[str]) -> None:
    """Recompute a recording's file digests in its manifest (after editing a file on purpose).

    Raises:
        RecordingDamagedError: the directory holds a link or a special file, or its manifest is damaged.
    """
    with RecordingDirectory(path) as d:
        d.check_entries()
        manifest = read_manifest(d)
        files = {}
        for name in manifest.get("files", {}):
            data = d.read(name)
            if data is not None:
                files[name] = sha256_bytes(data)
        manifest["files"] = files
        d.write(MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
