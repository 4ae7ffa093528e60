"""The option types of ``python -m mmaemu`` (:mod:`mmaemu._cli`): each checks one value.

Each raises ``argparse.ArgumentTypeError``, which argparse turns into a usage error (exit status 2, the
reason on stderr) before anything is read, computed or written; :func:`check_explain_shape` checks
``explain``'s three dimensions together, after each was parsed. Shapes are ``M x N x K`` everywhere
(``explain M N K``, ``bench --shape MxNxK``), and a shape this machine could not hold is a usage error
decided from the sizes alone, before anything is allocated.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
from collections.abc import Callable
from pathlib import Path

import torch

from .backends import parse_backend
from .formats import FORMAT_NAMES, dtype_from_name
from .platforms._profiles import get_profile
from ._split import splitk_from_text

__all__ = [
    "MAX_DIM", "backend", "block_kernel", "check_explain_shape", "device", "dim", "existing_dir", "fmt_pair", "minutes", "new_dir",
    "output_file", "positive_int", "preset", "profile", "shape", "splitk", "workspace",
]


#: The largest GEMM dimension the command line takes: cuBLAS's 32-bit dimensions (torch's operands of
#: such shapes could not be described to it, and their element counts would overflow int64 together).
MAX_DIM = (1 << 31) - 1


def _int(text: str, what: str, minimum: int, maximum: int = (1 << 63) - 1) -> int:
    """A decimal integer of ASCII digits (surrounding spaces allowed) in [minimum, maximum].

    ``int()`` alone would also take ``1_000``, ``+5`` and other scripts' digits (full-width ones), and
    refuse more than 4,300 digits as "not an integer"; none of them is a number a user means here.
    """
    digits = text.strip()
    negative = digits.startswith("-")
    magnitude = digits[1:] if negative else digits
    if not (magnitude.isascii() and magnitude.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer ({what})")
    if len(magnitude.lstrip("0")) > len(str(maximum)):  # before int(), which limits the digits
        bound = f"at least {minimum}" if negative else f"at most {maximum:,}"
        raise argparse.ArgumentTypeError(f"{text!r}: {what} must be {bound}")
    value = int(digits)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r}: {what} must be at least {minimum}")
    if value > maximum:
        raise argparse.ArgumentTypeError(f"{text!r}: {what} must be at most {maximum:,}")
    return value


def dim(text: str) -> int:
    """A GEMM dimension: an integer in [0, 2**31 - 1] (an empty call is a valid call)."""
    return _int(text, "a dimension", 0, MAX_DIM)


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return _int(text, "a count", 1)


def _machine_memory() -> int | None:
    """This machine's physical memory in bytes (None where the operating system does not say)."""
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows), or no such name
        return None
    return pages * page if pages > 0 and page > 0 else None


def _beyond_memory(need: int, what: str) -> str | None:
    """Why ``need`` bytes (a lower bound of what a command holds at once) cannot be held here, or None."""
    memory = _machine_memory()
    if memory is None or need <= memory:
        return None
    return (f"{what} needs at least {need / 2**30:,.1f} GiB, more than this machine's {memory / 2**30:,.1f} GiB "
            "of memory")


def shape(text: str) -> tuple[int, int, int]:
    """``MxNxK`` (the order of ``explain M N K``), each an integer in [1, 2**31 - 1]; returned as (M, N, K).

    A shape whose bench this machine could not hold (:func:`mmaemu._bench.bench_bytes`) is refused here,
    before anything is allocated.
    """
    from ._bench import bench_bytes

    parts = text.lower().split("x")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape MxNxK (e.g. 64x5760x1920)")
    m, n, k = (_int(p, "M, N and K of a shape MxNxK", 1, MAX_DIM) for p in parts)
    refused = _beyond_memory(bench_bytes(m, n, k), f"the bench of {m}x{n}x{k}")
    if refused is not None:
        raise argparse.ArgumentTypeError(f"{text!r}: {refused}")
    return m, n, k


def check_explain_shape(args: argparse.Namespace) -> str | None:
    """Why ``explain M N K`` is a usage error (a call this machine could not hold), or None.

    The plan is of a CPU call on this machine: its operands and output must fit in its memory.
    """
    need = (args.M * args.K * args.fmt[0].itemsize + args.N * args.K * args.fmt[1].itemsize
            + args.M * args.N * dtype_from_name(args.out).itemsize)
    return _beyond_memory(need, f"M x N x K = {args.M} x {args.N} x {args.K}: a call of this shape (its operands "
                                "and output)")


def fmt_pair(text: str) -> tuple[torch.dtype, torch.dtype]:
    """``A,B``: the formats of mat1 and mat2 (:func:`mmaemu.formats.dtype_from_name`)."""
    parts = text.split(",")
    if len(parts) != 2:
        accepted = ", ".join(sorted(FORMAT_NAMES))
        raise argparse.ArgumentTypeError(f"{text!r} is not two formats A,B (e.g. e4m3,e5m2); formats: {accepted}")
    try:
        return dtype_from_name(parts[0]), dtype_from_name(parts[1])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def splitk(text: str) -> object:
    """``auto``, ``1`` or ``S,scheme`` (:func:`mmaemu._split.splitk_from_text`)."""
    try:
        return splitk_from_text(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def profile(text: str) -> str:
    """A registered profile's name."""
    try:
        get_profile(text, warn=False)
    except (KeyError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc.args[0]) if exc.args else str(exc)) from None
    return text


def block_kernel(text: str) -> str:
    """A block-scaled kernel model's name (:data:`mmaemu.kernels._block_model.BLOCK_MODELS`; a candidate resolves too)."""
    from .kernels._block_model import block_model

    try:
        block_model(text)
    except (KeyError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def preset(text: str) -> str:
    """A modelled preset's name."""
    from .errors import MmaemuError
    from .presets import get_preset

    try:
        get_preset(text, warn=False)
    except (KeyError, ValueError, TypeError, MmaemuError) as exc:
        raise argparse.ArgumentTypeError(str(exc.args[0]) if exc.args else str(exc)) from None
    return text


def backend(text: str) -> str:
    """A backend name (whether it can run here is checked by the command)."""
    try:
        return parse_backend(text).value
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def device(text: str) -> str:
    """A torch device string."""
    try:
        torch.device(text)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch device ({str(exc).splitlines()[0]})") from None
    return text


def minutes(text: str) -> float:
    """A positive, finite number of minutes."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of minutes") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the budget must be a positive, finite number of minutes")
    return value


def workspace(text: str) -> int:
    """One of the workspaces a recording queries, in bytes."""
    from .platforms._table import WS_BYTES

    value = _int(text, "a workspace in bytes", 0)
    if value not in WS_BYTES:
        raise argparse.ArgumentTypeError(f"{text!r}: the workspace must be one of {WS_BYTES} bytes (0, 1, 4 or 32 MiB)")
    return value


def _path_type(check: Callable[[str, Path], None]) -> Callable[[str], str]:
    """An argparse type from a check of a path argument: an OSError while checking becomes the argument's error."""

    @functools.wraps(check)
    def parse(text: str) -> str:
        try:
            check(text, Path(text))
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc.strerror or exc}") from None
        return text

    return parse


@_path_type
def new_dir(text: str, path: Path) -> None:
    """A directory to create, or an empty one."""
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory; pass a new directory")
        if any(path.iterdir()):
            raise argparse.ArgumentTypeError(f"{text!r} is not empty: a recording needs a new or empty directory")
    else:
        parent = path.absolute().parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r}: {str(parent)!r} is not a directory")


@_path_type
def existing_dir(text: str, path: Path) -> None:
    """An existing directory (an empty string is refused, not read as the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names no recording (pass the recording's directory)")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text!r} does not exist")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory (a recording is a directory)")


@_path_type
def output_file(text: str, path: Path) -> None:
    """A file to write: its directory must exist and it must not be a directory."""
    if not text or path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file to write")
    if not path.absolute().parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: the directory {str(path.absolute().parent)!r} does not exist")
