"""The block probes: how well they separate each block kernel model's candidates, and recording them on a GPU.

Usage::

    python tools/probes/block_probes.py                      # per base model: candidates, pairs, differing outputs
    python tools/probes/block_probes.py --json FILE          # also every pair's count (docs/data/block_probes.json)
    python tools/probes/block_probes.py record DIR --runner deepgemm                       # an H100/H800 with DeepGEMM
    python tools/probes/block_probes.py record DIR --runner torchao --base MODEL            # torchao's Triton kernel
    python tools/probes/block_probes.py record DIR --runner vllm --base MODEL              # vLLM's Triton kernel
    python -m mmaemu replay DIR                       # which candidate reproduces every output

``record`` runs the probes of :mod:`mmaemu.recording._blockwise` (E4M3 operands, fp32 scales, bf16 outputs) with
the kernel installed on this machine's GPU and writes a recording (``manifest.json``, ``probes.json`` with a
``block_probes`` entry naming the base model and the runner, ``probes.npz``; grid ``block-probes``: no cuBLASLt
table, no live call) that ``python -m mmaemu replay`` reads: the replay names the candidates of the base model
that reproduce every output (exactly one: the recording decides the model). The runners:

- ``deepgemm``: ``deep_gemm.fp8_gemm_nt`` (or the v1 ``gemm_fp8_fp8_bf16_nt``) with the probes' operands and
  scales, base ``deepgemm-sm90``;
- ``torchao``: ``torchao.kernel.blockwise_quantization.blockwise_fp8_gemm`` (the ``ao::blockwise_fp8_gemm``
  kernel; autotuned: the tile its autotuner picks for M = 4 decides the path, so pass the base model you expect
  and compare with the replay's answer, or record with each sm_90 base);
- ``vllm``: ``w8a8_block_fp8_matmul`` of vLLM's ``fp8_utils`` (its default config without a tuned file: the
  ``wgmma`` path on sm_90, ``mma`` on sm_89).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from mmaemu.kernels._block_model import BLOCK_MODELS  # noqa: E402
from mmaemu.recording._blockwise import (  # noqa: E402
    BLOCK_GRID,
    BlockProbe,
    BlockResult,
    block_document,
    block_probes,
    block_separation,
)

Runner = Callable[[BlockProbe], torch.Tensor]


def report(bases: list[str]) -> dict[str, Any]:
    """Per base model: the candidates' pairwise counts of differing probe outputs."""
    probes = block_probes()
    out: dict[str, Any] = {"probes": [{"name": p.name, "shape": list(p.shape)} for p in probes],
                           "outputs": sum(p.shape[0] * p.shape[1] for p in probes)}
    for base in bases:
        counts = block_separation(base, probes)
        names = sorted({c for pair in counts for c in pair}, key=lambda c: (c.count("/"), c))
        out[base] = {"candidates": len(names), "pairs": len(counts), "min": min(counts.values()),
                     "max": max(counts.values()), "pairs_not_separated": sum(1 for v in counts.values() if v == 0),
                     "names": names,
                     "counts": [[0 if x == y else counts.get((x, y), counts.get((y, x), 0)) for y in names] for x in names]}
    return out


def _deepgemm() -> tuple[Runner, str]:
    import deep_gemm  # type: ignore[import-not-found]

    gemm = getattr(deep_gemm, "fp8_gemm_nt", None) or deep_gemm.gemm_fp8_fp8_bf16_nt
    version = getattr(deep_gemm, "__version__", "?")

    def run(p: BlockProbe) -> torch.Tensor:
        m, n, _ = p.shape
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        gemm((p.a.cuda(), p.scale_a.cuda()), (p.w.cuda(), p.scale_w.cuda()), out)
        return out.cpu()

    return run, f"deep_gemm {version} {gemm.__name__}"


def _torchao() -> tuple[Runner, str]:
    import torchao
    from torchao.kernel.blockwise_quantization import blockwise_fp8_gemm

    def run(p: BlockProbe) -> torch.Tensor:
        return blockwise_fp8_gemm(p.a.cuda(), p.scale_a.cuda(), p.w.cuda(), p.scale_w.cuda(), 128).cpu()

    return run, f"torchao {torchao.__version__} blockwise_fp8_gemm"


def _vllm() -> tuple[Runner, str]:
    import vllm  # type: ignore[import-not-found]
    from vllm.model_executor.layers.quantization.utils.fp8_utils import (  # type: ignore[import-not-found]
        w8a8_block_fp8_matmul,
    )

    def run(p: BlockProbe) -> torch.Tensor:
        return w8a8_block_fp8_matmul(p.a.cuda(), p.w.cuda(), p.scale_a.cuda(), p.scale_w.cuda(), [128, 128],
                                     torch.bfloat16).cpu()

    return run, f"vllm {vllm.__version__} w8a8_block_fp8_matmul"


RUNNERS: dict[str, tuple[Callable[[], tuple[Runner, str]], str | None]] = {
    "deepgemm": (_deepgemm, "deepgemm-sm90"), "torchao": (_torchao, None), "vllm": (_vllm, None)}


def cuda_environment() -> dict[str, Any]:
    """The GPU's name, compute capability and SM count, and torch's and CUDA's versions."""
    props = torch.cuda.get_device_properties(0)
    return {"gpu": props.name, "capability": [props.major, props.minor], "sm_count": props.multi_processor_count,
            "torch": torch.__version__, "cuda": torch.version.cuda}


def record(directory: Path, run: Runner, runner: str, base: str, environment: dict[str, Any]) -> Path:
    """Run every block probe with ``run`` and write the recording ``replay`` reads (module docstring)."""
    from mmaemu.recording._records import Section, SectionStatus
    from mmaemu.recording._verdict import probe_document
    from mmaemu.recording._writer import RecordingWriter

    if base not in BLOCK_MODELS:
        raise ValueError(f"base {base!r} is not a block kernel model: {sorted(BLOCK_MODELS)}")
    writer = RecordingWriter(directory, environment=environment, grid={"name": BLOCK_GRID}, budget={})
    writer.set_section(Section.ENVIRONMENT, SectionStatus.COMPLETE)
    results = [BlockResult(p, run(p).contiguous()) for p in block_probes()]
    section, arrays = block_document(results, base, runner)
    doc, _ = probe_document([], {}, {"block_probes": section})
    writer.write_probes(doc, arrays)
    writer.set_section(Section.PROBES, SectionStatus.COMPLETE)
    for skipped in (Section.HEURISTICS, Section.CALLS):
        writer.set_section(skipped, SectionStatus.SKIPPED)
    writer.close()
    return directory


def _compact_rows(text: str) -> str:
    return re.sub(r"\[\s*((?:\d+,\s*)*\d+)\s*\]", lambda m: "[" + ", ".join(m.group(1).replace(",", " ").split()) + "]",
                  text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    rec = sub.add_parser("record", help="run the probes with the installed kernel on this GPU and write a recording")
    rec.add_argument("directory", type=Path)
    rec.add_argument("--runner", choices=sorted(RUNNERS), required=True)
    rec.add_argument("--base", choices=sorted(BLOCK_MODELS), default=None, help="the model of the kernel that runs")
    parser.add_argument("--json", default=None, help="write every pair's count to this file")
    parser.add_argument("--models", nargs="*", default=sorted(BLOCK_MODELS), help="base models (default: all)")
    args = parser.parse_args(argv)
    if args.command == "record":
        make, default = RUNNERS[args.runner]
        base = args.base or default
        if base is None:
            parser.error(f"--runner {args.runner} needs --base: the tile the kernel runs decides the model")
        run, runner = make()
        print(f"wrote {record(args.directory, run, runner, base, cuda_environment())}: python -m mmaemu replay "
              f"{args.directory}")
        return 0
    found = report(args.models)
    for base in args.models:
        r = found[base]
        print(f"{base}: {r['candidates']} candidates, {r['pairs']} pairs, differing outputs per pair {r['min']} to "
              f"{r['max']} of {found['outputs']}; pairs not separated: {r['pairs_not_separated']}")
    if args.json:
        Path(args.json).write_text(_compact_rows(json.dumps(found, indent=1, sort_keys=True)) + "\n")
    return 0 if all(found[b]["pairs_not_separated"] == 0 for b in args.models) else 1


if __name__ == "__main__":
    sys.exit(main())
