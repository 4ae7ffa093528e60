"""The records of a recording: its sections, its call records, and the bits and digests it stores.

:mod:`mmaemu.recording._format` reads and writes these in a recording directory; everything else in
:mod:`mmaemu.recording` speaks in them.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..formats import Fp8Format, OutFormat
from ..platforms._table import FMT_NAMES, FP8_FORMATS, OUT_FORMATS, OUT_NAMES, WS_BYTES

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "CallClass",
    "CallRecord",
    "DataKind",
    "Part",
    "Section",
    "SectionStatus",
    "fp32_bits",
    "fp32_scalar",
    "output_bytes",
    "output_sha256",
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
        """Parse one line of ``calls.jsonl`` strictly (a recording is untrusted input).

        Raises:
            ValueError: naming the field: a missing or unknown field, a value of the wrong type or out of
                its range (dimensions must fit the split-K table's 21-bit key fields, bits 32 bits,
                S, customOption and reduction one byte), an unknown format name.
        """
        if not isinstance(d, Mapping):
            raise ValueError("a call record must be a JSON object")
        names = [f.name for f in dataclasses.fields(CallRecord)]
        unknown = sorted(set(d) - set(names) - {"call_class"})
        if unknown:
            raise ValueError(f"unknown fields {unknown}")
        missing = [name for name in names if name not in d and name != "error"]
        if missing:
            raise ValueError(f"missing fields {missing}")
        for name, (low, bound) in _CALL_INT_BOUNDS.items():
            _check_int(d[name], name, bound, low)
        if d["scale_result_bits"] is not None:
            _check_int(d["scale_result_bits"], "scale_result_bits", 1 << 32)
        if d["workspace_bytes"] not in WS_BYTES:
            raise ValueError(f"workspace_bytes={d['workspace_bytes']!r} is not one of {list(WS_BYTES)}")
        for name in ("fast", "stored"):
            if not isinstance(d[name], bool):
                raise ValueError(f"{name}={d[name]!r} is not true or false")
        fmt_a, fmt_b = (_named(d[name], FMT_NAMES, FP8_FORMATS, name) for name in ("fmt_a", "fmt_b"))
        out = _named(d["out"], OUT_NAMES, OUT_FORMATS, "out")
        data = _named(d["data"], [k.value for k in DataKind], list(DataKind), "data")
        _check_sha256(d["input_sha256"], "input_sha256")
        outputs = d["outputs"]
        error = d.get("error")
        if error is not None and not isinstance(error, str):
            raise ValueError(f"error={error!r} is not a string or null")
        if not isinstance(outputs, list) or len(outputs) > 16 or (not outputs and error is None):
            raise ValueError("outputs is not a list of one to 16 sha256 digests (none only when the GPU raised)")
        for digest in outputs:
            _check_sha256(digest, "outputs")
        call = CallRecord(
            id=d["id"], m=d["m"], n=d["n"], k=d["k"], fmt_a=fmt_a, fmt_b=fmt_b, out=out, fast=d["fast"], data=data,
            seed=d["seed"], input_sha256=d["input_sha256"], scale_a_bits=d["scale_a_bits"],
            scale_b_bits=d["scale_b_bits"], scale_result_bits=d["scale_result_bits"],
            workspace_bytes=d["workspace_bytes"], S=d["S"], custom=d["custom"], reduction=d["reduction"],
            outputs=tuple(outputs), stored=d["stored"], error=error,
        )
        if "call_class" in d and d["call_class"] != call.call_class.value:
            raise ValueError(f"call_class={d['call_class']!r} is not the class of its S and data "
                             f"({call.call_class.value!r})")
        return call


#: The integer fields of a call record and their ranges [low, bound) (a live call is never empty).
_CALL_INT_BOUNDS = {"id": (0, 1 << 31), "m": (1, 1 << 21), "n": (1, 1 << 21), "k": (1, 1 << 21), "seed": (0, 1 << 62),
                    "scale_a_bits": (0, 1 << 32), "scale_b_bits": (0, 1 << 32), "workspace_bytes": (0, 1 << 40),
                    "S": (0, 256), "custom": (0, 256), "reduction": (0, 256)}


def _check_int(value: object, name: str, bound: int, low: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < bound:
        raise ValueError(f"{name}={value!r} is not an integer in [{low}, {bound})")


def _check_sha256(value: object, name: str) -> None:
    if not (isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
        raise ValueError(f"{name}: {value!r} is not a sha256 digest (64 lowercase hex digits)")


def _named(value: object, names: Any, items: Any, field: str) -> Any:
    if not isinstance(value, str) or value not in names:
        raise ValueError(f"{field}={value!r} is not one of {list(names)}")
    return items[list(names).index(value)]


def fp32_scalar(bits: int) -> torch.Tensor:
    """A 0-dim float32 tensor of the given bits."""
    return torch.tensor(np.uint32(bits).view(np.int32).item(), dtype=torch.int32).view(torch.float32)


def fp32_bits(x: float) -> int:
    """The bits of ``x`` rounded to fp32."""
    return int(np.float32(x).view(np.uint32))

