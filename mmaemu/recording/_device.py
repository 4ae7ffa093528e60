"""The GPU a recording is made on: what the recorder needs from it, and the CUDA implementation.

:class:`Device` is what :class:`~mmaemu.recording._record.Recorder` calls: the environment, cuBLASLt's
heuristic and ``torch._scaled_mm``. :class:`CudaDevice` is the real one and refuses to start without
CUDA and cuBLASLt (:class:`RecordUnavailableError`, a readable message); the tests drive the recorder
with a device that asks the emulator instead (plumbing, not evidence).
"""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path
from typing import Any, Protocol

import torch

from ..errors import BackendUnavailableError, RecordUnavailableError
from ..platforms._cublaslt import HeuristicQuery, HeuristicResult
from ._records import sha256_file

__all__ = ["CudaDevice", "Device", "default_torch_workspace"]


class Device(Protocol):
    """What the recorder needs from a GPU."""

    def environment(self) -> dict[str, Any]:
        """The recording environment (GPU, versions, ...)."""
        ...

    def query(self, q: HeuristicQuery) -> HeuristicResult:
        """cuBLASLt's heuristic decision for a call."""
        ...

    def scaled_mm(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                  scale_result: torch.Tensor | None, out_dtype: torch.dtype, fast: bool,
                  bias: torch.Tensor | None = None) -> torch.Tensor:
        """``torch._scaled_mm(a, b.t(), ...)`` on the device; the result on the CPU."""
        ...


def default_torch_workspace() -> int:
    """The cuBLASLt workspace torch's ``_scaled_mm`` is assumed to pass: ``CUBLASLT_WORKSPACE_SIZE`` (KiB)
    if set, else 1 MiB (torch 2.7.1's default; recorded in the manifest as an assumption)."""
    import os

    value = os.environ.get("CUBLASLT_WORKSPACE_SIZE")
    if value and value.isdigit():
        return int(value) * 1024
    return 1 << 20


def _driver_version() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False)
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


class CudaDevice:
    """The local CUDA GPU: cuBLASLt heuristic queries and live ``torch._scaled_mm`` calls."""

    def __init__(self, device: int = 0) -> None:
        """Check for CUDA and cuBLASLt.

        Raises:
            RecordUnavailableError: no CUDA device or no usable libcublasLt (the message says which).
        """
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise RecordUnavailableError(
                f"'python -m mmaemu record' needs an NVIDIA GPU: torch.cuda.is_available() is False here "
                f"(torch {torch.__version__}, {build}). Run it on the GPU you want to record; replay the "
                "recording anywhere with 'python -m mmaemu replay DIR'."
            )
        from ..platforms._cublaslt import CublasLt

        try:
            self._lt = CublasLt(device=device)
        except BackendUnavailableError as exc:
            raise RecordUnavailableError(f"'python -m mmaemu record' cannot query cuBLASLt: {exc}") from exc
        self.device = device

    def environment(self) -> dict[str, Any]:
        """GPU, SM count, capability, driver, CUDA, cuBLASLt (version, path, sha256), torch, TE."""
        from ..platforms._cublaslt import cublaslt_version
        from .._version import __version__

        props = torch.cuda.get_device_properties(self.device)
        return {
            "gpu": props.name, "sm_count": int(props.multi_processor_count),
            "capability": [int(props.major), int(props.minor)], "memory_bytes": int(props.total_memory),
            "driver": _driver_version(), "cuda": torch.version.cuda, "cublaslt": cublaslt_version(),
            "cublaslt_path": self._lt.path, "cublaslt_sha256": sha256_file(Path(self._lt.path)),
            "torch": torch.__version__, "transformer_engine": _package_version("transformer_engine"),
            "python": platform.python_version(), "host_platform": platform.platform(), "mmaemu": __version__,
        }

    def query(self, q: HeuristicQuery) -> HeuristicResult:
        """Ask cuBLASLt's heuristic."""
        return self._lt.query(q)

    def scaled_mm(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                  scale_result: torch.Tensor | None, out_dtype: torch.dtype, fast: bool,
                  bias: torch.Tensor | None = None) -> torch.Tensor:
        """Run ``torch._scaled_mm`` on the GPU (synchronised) and return the output on the CPU."""
        dev = f"cuda:{self.device}"
        out = torch._scaled_mm(
            a.to(dev), b.to(dev).t(), scale_a=scale_a.to(dev), scale_b=scale_b.to(dev),
            bias=None if bias is None else bias.to(dev),
            scale_result=None if scale_result is None else scale_result.to(dev), out_dtype=out_dtype,
            use_fast_accum=fast,
        )
        torch.cuda.synchronize(self.device)
        return out.cpu()
