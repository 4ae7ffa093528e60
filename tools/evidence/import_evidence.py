"""Copy the hardware evidence of ../shared into the repository's evidence/ folder, or check the copy.

The test suite and the validation report replay recorded tensor-core vectors and RTX 4060 recordings.
They used to live only beside the repository (../shared), so a user's clone skipped every evidence test.
This tool puts them in ``evidence/`` in the project's compact form, value for value:

- ``evidence/hw-vectors/``: the .npz files and manifest.json unchanged (already compact);
- ``evidence/recordings/<name>/records.jsonl.gz``: each records.jsonl gzip-compressed (the text, byte for
  byte); ``arrays.npz`` unchanged;
- ``evidence/recordings/splitk/``: the split-K sources unchanged;
- ``evidence/manifest.json``: every file's sha256, and for each compressed file the sha256 of the
  original it holds, so ``--check`` can compare with ../shared without decompressing twice.

Usage::

    python tools/evidence/import_evidence.py            # (re)write evidence/ from ../shared (or MMAEMU_SHARED)
    python tools/evidence/import_evidence.py --check    # exit 1 unless evidence/ holds exactly ../shared's content
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "evidence"
_CHOSEN = os.environ.get("MMAEMU_SHARED", "").strip()
SOURCE = Path(_CHOSEN) if _CHOSEN and Path(_CHOSEN).resolve() != EVIDENCE.resolve() else ROOT.parent / "shared"
#: What is copied (relative to ../shared), and what is compressed.
PARTS = ("hw-vectors", "recordings/rtx4060", "recordings/rtx4060-pairwise", "recordings/splitk")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sources(source: Path) -> list[Path]:
    files = []
    for part in PARTS:
        files += sorted(p for p in (source / part).rglob("*") if p.is_file() and p.name != "README.md")
    return files


def _target(rel: Path) -> Path:
    return EVIDENCE / (str(rel) + ".gz" if rel.suffix == ".jsonl" else rel)


def write(source: Path) -> dict[str, dict[str, str]]:
    """Copy ``source`` into evidence/; returns the manifest's ``files``."""
    files: dict[str, dict[str, str]] = {}
    for path in _sources(source):
        rel = path.relative_to(source)
        data = path.read_bytes()
        target = _target(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        stored = gzip.compress(data, compresslevel=9, mtime=0) if rel.suffix == ".jsonl" else data
        target.write_bytes(stored)
        files[str(target.relative_to(EVIDENCE))] = {"sha256": _sha(stored), "original": str(rel),
                                                     "original_sha256": _sha(data)}
    licence = source / "recordings" / "LICENSE-Apache-2.0.txt"
    if licence.exists():
        shutil.copy(licence, EVIDENCE / "recordings" / "LICENSE-Apache-2.0.txt")
    return files


def check(source: Path) -> list[str]:
    """Differences between evidence/ and ``source`` (empty: the copy is exact)."""
    manifest = json.loads((EVIDENCE / "manifest.json").read_text())["files"]
    problems = []
    for name, entry in manifest.items():
        stored = (EVIDENCE / name).read_bytes()
        if _sha(stored) != entry["sha256"]:
            problems.append(f"{name}: its sha256 is not the manifest's")
    if source.exists() and source.resolve() != EVIDENCE.resolve():
        originals = {str(p.relative_to(source)): _sha(p.read_bytes()) for p in _sources(source)}
        held = {e["original"]: e["original_sha256"] for e in manifest.values()}
        for rel in sorted(set(originals) | set(held)):
            if originals.get(rel) != held.get(rel):
                problems.append(f"{rel}: differs between {source} and evidence/ (rerun tools/evidence/import_evidence.py)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare evidence/ with ../shared; exit 1 on a difference")
    parser.add_argument("--source", type=Path, default=SOURCE, help="the shared folder (default ../shared)")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.source)
        for p in problems:
            print(p)
        print("evidence/ holds the recorded evidence exactly" if not problems else "evidence/ is not current")
        return 1 if problems else 0
    if not (args.source / "hw-vectors").exists():
        print(f"no hardware evidence at {args.source}", file=sys.stderr)
        return 2
    files = write(args.source)
    (EVIDENCE / "manifest.json").write_text(json.dumps({
        "format": "mmaemu-evidence/1", "source": "the project's shared folder (../shared): hw-vectors/ and recordings/",
        "compressed": "*.jsonl files are stored gzip-compressed as *.jsonl.gz (the same bytes once decompressed)",
        "files": files}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(files)} files to {EVIDENCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
