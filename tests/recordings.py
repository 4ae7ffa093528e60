"""Loader for the RTX 4060 recordings (../shared/recordings/rtx4060; see its README)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from conftest import RECORDINGS
from evidence import read_records

RTX4060 = RECORDINGS / "rtx4060"
#: Four RTX 4060 outputs that decide the pairwise combination order at S = 10, 11, 15 and 20.
RTX4060_PAIRWISE = RECORDINGS / "rtx4060-pairwise"

_TORCH_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "float8_e4m3fnuz": getattr(torch, "float8_e4m3fnuz", None),
    "float8_e5m2fnuz": getattr(torch, "float8_e5m2fnuz", None),
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int32": torch.int32,
    "float64": torch.float64,
}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype named in a record."""
    dtype = _TORCH_DTYPES.get(name)
    if dtype is None:
        raise KeyError(name)
    return dtype


@dataclass(frozen=True)
class Recordings:
    records: list[dict[str, Any]]
    arrays: Any

    def array(self, name: str) -> np.ndarray:
        return np.asarray(self.arrays[name])

    def tensor(self, name: str, dtype: str | torch.dtype) -> torch.Tensor:
        """An array reinterpreted, bit for bit, as a torch dtype of the same width."""
        a = np.ascontiguousarray(self.array(name))
        signed = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}[a.itemsize]
        raw = torch.from_numpy(a.view(signed).copy())
        target = torch_dtype(dtype) if isinstance(dtype, str) else dtype
        return raw.view(target)

    def by_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == kind]


@functools.lru_cache(maxsize=2)
def load(directory: Path = RTX4060) -> Recordings:
    """The records and arrays of one recording directory (each record remembers it as ``_dir``)."""
    records = read_records(directory)
    for record in records:
        record["_dir"] = directory
    arrays = dict(np.load(directory / "arrays.npz"))
    return Recordings(records, arrays)


def fp32_scalar(bits: int) -> torch.Tensor:
    """A 0-dim float32 tensor with the given bit pattern."""
    return torch.tensor(np.uint32(bits).view(np.int32).item(), dtype=torch.int32).view(torch.float32)


def splitk_of(record: dict[str, Any]) -> int | tuple[int, str]:
    value = record["splitk"]
    return value if isinstance(value, int) else (int(value[0]), str(value[1]))
