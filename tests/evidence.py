"""Where the hardware evidence is, and how to read its record files (one home for both).

``MMAEMU_SHARED`` when set; else the shared folder beside the repository (``../shared``) when it exists;
else the repository's own copy, ``evidence/`` (``tools/evidence/import_evidence.py`` made it; a test checks that
it equals ``../shared`` wherever both exist). A record file is ``records.jsonl`` or, in ``evidence/``,
``records.jsonl.gz``.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The repository's copy of the evidence.
REPOSITORY_EVIDENCE = ROOT / "evidence"
#: The shared folder beside the repository.
BESIDE = ROOT.parent / "shared"


def evidence_root() -> Path:
    """The folder holding ``hw-vectors/`` and ``recordings/`` (see the module docstring)."""
    chosen = os.environ.get("MMAEMU_SHARED", "").strip()
    if chosen:
        return Path(chosen)
    return BESIDE if (BESIDE / "hw-vectors").exists() else REPOSITORY_EVIDENCE


def read_records(directory: Path) -> list[dict[str, Any]]:
    """The JSON objects of ``directory/records.jsonl`` (or its ``.gz``), one per line."""
    plain = directory / "records.jsonl"
    if plain.exists():
        text = plain.read_text()
    else:
        text = gzip.decompress((directory / "records.jsonl.gz").read_bytes()).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line]


def has_records(directory: Path) -> bool:
    """Whether ``directory`` holds a record file."""
    return (directory / "records.jsonl").exists() or (directory / "records.jsonl.gz").exists()
