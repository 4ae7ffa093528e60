"""The host process's environment that mmaemu's arithmetic depends on.

- :func:`check_cpu_subnormals`: the CPU must keep IEEE subnormals (no flush-to-zero);
- :func:`cpu_default_device`: plans and constants are made on the CPU whatever the default device;
- :func:`env_flag`: the one reader of mmaemu's boolean environment variables;
- :func:`user_cache_dir`: the per-user directory mmaemu keeps files in (``MMAEMU_CACHE_DIR``);
- :func:`refuse_autograd`: the one rule for tensors that require grad (mmaemu is inference-only).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import torch

from .errors import MmaemuError, UnsupportedFeatureError

__all__ = ["check_cpu_subnormals", "cpu_default_device", "env_flag", "refuse_autograd", "require_cpu_subnormals",
           "user_cache_dir"]


def check_cpu_subnormals() -> None:
    """Raise :class:`MmaemuError` when the CPU flushes subnormals (FTZ/DAZ), detected for real.

    Multiplies a subnormal by 0.5 in torch on the CPU: flush-to-zero (results) or
    denormals-are-zero (inputs), e.g. after ``torch.set_flush_denormal(True)``, both give 0.
    The exact arithmetic of the CPU backends relies on IEEE subnormals. The probe always runs on the
    CPU, whatever ``torch.set_default_device`` says.

    Raises:
        MmaemuError: the CPU flushes subnormals; the message says how to turn it off.
    """
    tiny = torch.tensor([2.0**-140], dtype=torch.float32, device="cpu")
    probe = float((tiny * 0.5)[0])
    if probe != 2.0**-141:
        raise MmaemuError(
            "the CPU flushes subnormal floats to zero (flush-to-zero / denormals-are-zero is on, e.g. "
            "torch.set_flush_denormal(True)); mmaemu's exact arithmetic needs IEEE subnormals: call "
            "torch.set_flush_denormal(False) before mmaemu (and check that no library turned FTZ/DAZ on)"
        )


def require_cpu_subnormals(device: torch.device) -> None:
    """:func:`check_cpu_subnormals` where fp32 arithmetic on ``device`` runs on the CPU (the quantizers).

    Skipped while ``torch.compile`` traces (the probe reads a value; it would break the graph): the compiled
    :class:`~mmaemu.nn.EmulatedFP8Linear` still refuses, since its ``mmaemu::scaled_mm`` operator probes in the
    same thread when it runs.
    """
    if device.type == "cpu" and not torch.compiler.is_compiling():
        check_cpu_subnormals()


def cpu_default_device() -> contextlib.AbstractContextManager[object]:
    """A block in which tensors made without ``device=`` are CPU tensors, as in a fresh process.

    mmaemu makes its plans and constants without ``device=`` (on the CPU) and moves them where they
    are used; under ``torch.set_default_device("meta")`` or ``"cuda"`` they would be made there
    instead (meta tensors hold no values). Nothing is pushed when the default already is the CPU.
    """
    if torch.get_default_device().type == "cpu":
        return contextlib.nullcontext()
    return torch.device("cpu")


def refuse_autograd(*named: tuple[str, object]) -> None:
    """Raise when, with grad mode on, any of the named tensors requires grad: mmaemu is inference-only.

    Its results are computed from bit patterns, so autograd could only record a wrong graph (or none);
    every entry point refuses instead, before anything is computed or modified. Under
    ``torch.no_grad()`` or ``torch.inference_mode()`` such tensors are accepted (nothing is recorded).

    Args:
        named: ``(argument name, value)`` pairs; values that are not tensors are ignored.

    Raises:
        UnsupportedFeatureError: naming the arguments that require grad.
    """
    if not torch.is_grad_enabled():
        return
    grads = [name for name, t in named if isinstance(t, torch.Tensor) and t.requires_grad]
    if grads:
        raise UnsupportedFeatureError(
            f"{', '.join(grads)} require grad with grad mode on: mmaemu is "
            "inference-only (no autograd); run under torch.no_grad() or torch.inference_mode(), or detach() them"
        )


_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off")


def env_flag(name: str, default: bool = False) -> bool:
    """A boolean environment variable: ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``.

    Case-insensitive, surrounding whitespace ignored; unset or empty means ``default``.

    Raises:
        ValueError: any other value; the message names the variable and the accepted values.
    """
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if value == "":
        return default
    if value in _TRUE_WORDS:
        return True
    if value in _FALSE_WORDS:
        return False
    raise ValueError(
        f"{name}={raw!r} is not a boolean; accepted (case-insensitive): {', '.join(_TRUE_WORDS)} to turn it on, "
        f"{', '.join(_FALSE_WORDS)} to turn it off (empty or unset: {'on' if default else 'off'})"
    )


def user_cache_dir() -> Path:
    """The per-user directory mmaemu keeps its files in (not created here).

    ``MMAEMU_CACHE_DIR`` when set and not empty; else ``%LOCALAPPDATA%\\mmaemu`` on Windows,
    ``~/Library/Caches/mmaemu`` on macOS, and ``$XDG_CACHE_HOME/mmaemu`` (default ``~/.cache/mmaemu``)
    elsewhere. Never inside the installed package, so uninstalling mmaemu leaves its files in place
    and a reinstall finds them.
    """
    chosen = os.environ.get("MMAEMU_CACHE_DIR", "").strip()
    if chosen:
        return Path(chosen).expanduser()
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "mmaemu"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "mmaemu"
    return Path(os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache") / "mmaemu"
