"""The cpu backend's host-side pieces that its kernels share: tiles, per-thread scratch buffers, the
launch guard of numba's threading layer, and the accumulation plan as numpy arrays.

No arithmetic happens here (:mod:`mmaemu.backends._cpu` and :mod:`mmaemu.backends._cpu_zoo` compute).
"""

from __future__ import annotations

import contextlib
import math
import threading

import numpy as np

from .._accumulation import AccumulationPlan, flatten_plan

__all__ = [
    "SCRATCH_LIMIT_BYTES", "aligned_buffer", "buffer", "flatten", "launch_guard", "panel_rows", "release_scratch", "tiles",
]


def tiles(m: int, n: int, threads: int) -> tuple[int, int]:
    """(M tile, N tile): wide N tiles (long vector loops), shrunk until every thread has tasks."""
    m_tile, n_tile = 32, 1024
    while n_tile > 256 and math.ceil(m / m_tile) * math.ceil(n / n_tile) < 4 * threads:
        n_tile //= 2
    while m_tile > 4 and math.ceil(m / m_tile) * math.ceil(n / n_tile) < 4 * threads:
        m_tile //= 2
    return m_tile, n_tile


def panel_rows(m: int, n_panels: int, threads: int) -> int:
    """Rows per task of the AVX-512 kernels (one task: an M tile over one panel of 64 columns): 256
    (a panel's block reused from cache by many rows), fewer until every thread has at least four tasks."""
    m_tile = 256
    while m_tile > 2 and math.ceil(m / m_tile) * n_panels < 4 * threads:
        m_tile //= 2
    return min(m_tile, max(m, 1))


#: Scratch buffers larger than this are allocated per call instead of kept.
SCRATCH_LIMIT_BYTES = 256 * 2**20
_scratch = threading.local()


def buffer(name: str, shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
    """A scratch array of ``shape``, reused by later calls in this thread (its contents are stale).

    Writing freshly mapped memory costs a page fault every 4 KiB, more than the decoding itself (a
    decoded weight of the quickstart is 5 bytes x 11 million elements, about 13,000 pages), so the
    buffers are kept per thread between calls.
    """
    size = math.prod(shape)
    nbytes = size * np.dtype(dtype).itemsize
    if nbytes > SCRATCH_LIMIT_BYTES:
        return np.empty(shape, dtype=dtype)
    pool: dict[str, np.ndarray] = _scratch.__dict__.setdefault("pool", {})
    held = pool.get(name)
    if held is None or held.size < size or held.dtype != dtype:
        held = pool[name] = np.empty(size, dtype=dtype)
    return held[:size].reshape(shape)


_WORKQUEUE_LOCK = threading.Lock()


def launch_guard() -> threading.Lock | contextlib.nullcontext[None]:
    """Serialise kernel launches where numba's threading layer is ``workqueue`` (not thread-safe).

    The ``omp`` and ``tbb`` layers accept concurrent launches from several Python threads; the
    ``workqueue`` fallback (no OpenMP or TBB runtime found) aborts the process on them.
    """
    import numba  # the caller runs a numba kernel: numba imports

    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet in this process: be safe
        return _WORKQUEUE_LOCK
    return _WORKQUEUE_LOCK if layer == "workqueue" else contextlib.nullcontext()


def release_scratch() -> None:
    """Free the calling thread's scratch buffers (they are kept between calls to save page faults)."""
    _scratch.__dict__.pop("pool", None)


def flatten(plan: AccumulationPlan, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray, int]:
    """The tiled kernels' plan argument: (k in order, chain starts, each chain's part, parts,
    the parts' combination order and roles (:func:`mmaemu._accumulation.flatten_plan`), block size)."""
    flat = flatten_plan(plan)
    return (flat.k_order.numpy(), np.asarray(flat.chain_starts, np.int64), np.asarray(flat.chain_part, np.int64),
            len(plan.parts), np.asarray(flat.order, np.int64), np.asarray(flat.role, np.int64), block)


def aligned_buffer(name: str, shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
    """:func:`buffer` starting on a 64-byte boundary (whole-vector loads that never straddle a cache line)."""
    itemsize = np.dtype(dtype).itemsize
    size = math.prod(shape)
    flat = buffer(name, (size + 64 // itemsize,), dtype)
    shift = (-flat.ctypes.data % 64) // itemsize
    return flat[shift:shift + size].reshape(shape)
