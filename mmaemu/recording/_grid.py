"""What a recording covers: the grid of heuristic queries, probes and live calls, by named size.

A :class:`Grid` names the shapes queried (a dense M x M*N x K grid around the split region for the
envelope, random held-out shapes and common model projections, :data:`MODEL_SHAPES`), the settings
(workspaces, outputs, format pairs, fast and slow) and how many probes and live calls run. :data:`GRIDS`
holds the named grids of ``python -m mmaemu record --grid``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..formats import Fp8Format, OutFormat
from ..platforms._table import OUT_FORMATS, WS_BYTES
from ._records import Part

__all__ = ["GRIDS", "MODEL_SHAPES", "Grid"]


_PAIRS = [(Fp8Format.E4M3, Fp8Format.E4M3), (Fp8Format.E4M3, Fp8Format.E5M2), (Fp8Format.E5M2, Fp8Format.E4M3),
          (Fp8Format.E5M2, Fp8Format.E5M2)]

#: (K, N) of common model projections (in_features, out_features): Llama 2 7B, Llama 3 8B / Mistral 7B,
#: Llama 3 70B, Qwen2.5 7B, Llama 3.2 1B.
MODEL_SHAPES: tuple[tuple[int, int], ...] = (
    (4096, 4096), (4096, 11008), (11008, 4096), (4096, 12288),
    (4096, 14336), (14336, 4096), (4096, 1024), (4096, 6144),
    (8192, 8192), (8192, 28672), (28672, 8192), (8192, 1024), (8192, 10240),
    (3584, 3584), (3584, 18944), (18944, 3584), (3584, 512),
    (2048, 2048), (2048, 8192), (8192, 2048), (2048, 512),
)




@dataclass(frozen=True)
class Grid:
    """What the heuristic sweep and the live calls cover.

    Attributes:
        name: ``quick``, ``full`` or a custom name.
        ms: M values of the dense grid.
        mn_ref: the reference M*N the levels multiply.
        levels: M*N = level * mn_ref (the dense levels, log-spaced around the split region).
        ks: K values of the dense grid (some not multiples of 128).
        heldout: random held-out shapes (M, M*N, K log-uniform in the grid's ranges).
        model_ms: M values of the model projection shapes.
        models: (K, N) of model projections.
        workspaces: workspaces queried (bytes).
        outs: output formats.
        pairs: format pairs.
        fasts: use_fast_accum values.
        live_per_key: live split calls per (fast, S, out, pair): one adversarial, then random.
        live_unsplit: unsplit live calls per (out, fast, pair).
        live_cost: the largest (M + N) * K of a live call.
        split_probes: how many split probes (distinct S and customOption first).
        store_elements: outputs up to this many elements are stored in full.
        seed: the seed of held-out shapes, live inputs and scales.
    """

    name: str
    ms: tuple[int, ...]
    mn_ref: int
    levels: tuple[float, ...]
    ks: tuple[int, ...]
    heldout: int
    model_ms: tuple[int, ...]
    models: tuple[tuple[int, int], ...] = MODEL_SHAPES
    workspaces: tuple[int, ...] = WS_BYTES
    outs: tuple[OutFormat, ...] = OUT_FORMATS
    pairs: tuple[tuple[Fp8Format, Fp8Format], ...] = tuple(_PAIRS)
    fasts: tuple[bool, ...] = (True, False)
    live_per_key: int = 2
    live_unsplit: int = 2
    live_cost: int = 1 << 24
    split_probes: int = 6
    store_elements: int = 1 << 16
    seed: int = 20261016

    def describe(self) -> dict[str, Any]:
        """The grid as JSON."""
        d = dataclasses.asdict(self)
        d["outs"] = [o.dtype_name for o in self.outs]
        d["pairs"] = [f"{a.short_name}x{b.short_name}" for a, b in self.pairs]
        d["models"] = [list(x) for x in self.models]
        return d

    def shapes(self) -> Iterator[tuple[int, int, int, Part]]:
        """Every (M, N, K, part) of the sweep, without repeats (dense grid, held-out, models)."""
        seen: set[tuple[int, int, int]] = set()
        for k in self.ks:
            for m in self.ms:
                for level in self.levels:
                    n = max(16, _round16(level * self.mn_ref / m))
                    if n < 1 << 21 and (m, n, k) not in seen:
                        seen.add((m, n, k))
                        yield m, n, k, Part.GRID
        rng = np.random.default_rng(self.seed)
        lo_mn, hi_mn = min(self.levels) * self.mn_ref, max(self.levels) * self.mn_ref
        for _ in range(self.heldout):
            m = int(round(math.exp(rng.uniform(0, math.log(max(self.ms))))))
            mn = math.exp(rng.uniform(math.log(lo_mn), math.log(hi_mn)))
            n = max(16, _round16(mn / m))
            kf = math.exp(rng.uniform(math.log(min(self.ks)), math.log(max(self.ks))))
            k = max(16, int(round(kf / 128) * 128) if rng.integers(0, 2) else _round16(kf))
            if n < 1 << 21 and k < 1 << 21 and (m, n, k) not in seen:
                seen.add((m, n, k))
                yield m, n, k, Part.HELDOUT
        for k, n in self.models:
            for m in self.model_ms:
                if (m, n, k) not in seen:
                    seen.add((m, n, k))
                    yield m, n, k, Part.MODEL


def _round16(x: float) -> int:
    return int(math.ceil(x / 16.0)) * 16


def _levels(lo: int, hi: int, per_octave: int) -> tuple[float, ...]:
    return tuple(2.0 ** (i / per_octave) for i in range(lo * per_octave, hi * per_octave + 1))


GRIDS: dict[str, Grid] = {
    "quick": Grid("quick", ms=(1, 16, 64, 256, 1024, 4096), mn_ref=1 << 17, levels=_levels(-4, 5, 2),
                  ks=(1024, 2048, 4096, 5136, 6144, 8192, 12288, 16400, 32768, 65536, 262144), heldout=300,
                  model_ms=(1, 16, 64, 256, 1024, 4096)),
    "full": Grid("full", ms=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384), mn_ref=1 << 17,
                 levels=_levels(-6, 6, 4),
                 ks=(1024, 1040, 1536, 2048, 3072, 3600, 4096, 5120, 5136, 5744, 6144, 8192, 8208, 10240, 12288,
                     16384, 16400, 24576, 32768, 49152, 65536, 65552, 131072, 262144, 524288, 1048576),
                 heldout=3000, model_ms=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
                 live_per_key=3, live_unsplit=4, split_probes=10),
}
