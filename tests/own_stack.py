"""Run a call on a thread of its own, so that its speed does not depend on how deep the caller's stack is.

[Note: the frame stack's chunk boundary] CPython 3.11 keeps Python frames in per-thread chunks of about
16 KiB (later versions too, from their source; measured on 3.11.7 only); when a call needs more room
than the current chunk has, a new chunk is mapped, and it is unmapped again when that call returns. A
hot loop of small calls (Triton's interpreter makes millions: comprehensions, generator expressions,
type constructors) that sits exactly on a chunk boundary maps and unmaps a chunk for each of them.
Measured here (Python 3.11.7, Triton 3.9 interpreter, one 16 x 256 x 16 GEMM): 0.41 to 0.64 s at 0 to
28 extra frames below a plain pytest test, 0.71 to 2.07 s at 30 to 46; a hypothesis test puts the backend call at such a depth, and
``test_accumulate_random[triton]`` took 57 s instead of 19.5 s, 34 s of them in the kernel (sys time).
A new thread starts with an empty stack, so the call lands at the depth a plain script gives it.
This is a test-suite concern only: the bits do not change, and on a GPU the interpreter is not used.
"""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

T = TypeVar("T")


def on_own_stack(fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
    """``fn(*args, **kwargs)`` on a new thread; its result, or the exception it raised, raised here.

    Warning filters are process-wide, so ``warnings.catch_warnings`` around the call still applies.
    """
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)

    thread = threading.Thread(target=target, name="own-stack")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]
