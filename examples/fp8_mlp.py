"""A small FP8 MLP, run natively and under ``mmaemu.emulate``: which outputs differ, and by how much.

The model is a gated MLP of the shape Evo 2 uses (``y = l3(gelu(l1(z)) * l2(z))``), with
synthetic weights, whose three Linear layers are FP8 layers written the usual way: quantise the
activation with a stored scale, then call ``torch._scaled_mm``. The script runs it twice on the
same input:

1. natively: ``torch._scaled_mm`` on this machine (on a CPU, torch's own reference kernel);
2. under ``mmaemu.emulate(profile=...)``: the same code, each ``torch._scaled_mm`` now returning
   the bits of the profile's reference GPU (default ``hopper``: torch 2.7.1 on an H100 PCIe).

It prints, for each layer fed the same input, how many bf16 outputs differ and by how much,
then the same for the whole MLP (where the differences of earlier layers propagate), and the
emulation log. Nothing is downloaded; it runs in seconds on a CPU::

    python examples/fp8_mlp.py [--profile hopper|ada|...] [--tokens 32] [--seed 0]

Only the FP8 GEMMs change: quantisation, GELU and the product run natively in both runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import torch

import mmaemu
from mmaemu.quantization import quantize, reciprocal_scale, scale_from_amax

HIDDEN, INNER = 1024, 4096  # shapes whose split-K decisions the recorded tables hold for 16..64 tokens


class FP8Linear(torch.nn.Module):
    """An FP8 Linear as FP8 models write it: a stored input scale, then ``torch._scaled_mm``."""

    def __init__(self, weight: torch.Tensor, input_scale: torch.Tensor) -> None:
        super().__init__()
        weight_scale = scale_from_amax(weight.abs().amax())
        self.register_buffer("weight", quantize(weight, weight_scale))
        self.register_buffer("weight_scale_inv", reciprocal_scale(weight_scale))
        self.register_buffer("input_scale", input_scale)
        self.register_buffer("input_scale_inv", reciprocal_scale(input_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = quantize(x, self.input_scale).reshape(-1, x.shape[-1])
        y = torch._scaled_mm(rows, self.weight.t(), self.input_scale_inv, self.weight_scale_inv,
                             out_dtype=torch.bfloat16, use_fast_accum=True)
        return y.reshape(*x.shape[:-1], -1)


class GatedMLP(torch.nn.Module):
    """``l3(gelu(l1(z)) * l2(z))`` with three FP8 layers."""

    def __init__(self, generator: torch.Generator, calibration: torch.Tensor) -> None:
        super().__init__()

        def weight(n: int, k: int) -> torch.Tensor:
            return (torch.randn(n, k, generator=generator) * k**-0.5).to(torch.bfloat16)

        def input_scale(x: torch.Tensor) -> torch.Tensor:  # delayed scaling, calibrated once
            return scale_from_amax(x.float().abs().amax())

        w1, w2, w3 = weight(INNER, HIDDEN), weight(INNER, HIDDEN), weight(HIDDEN, INNER)
        h = torch.nn.functional.gelu(calibration.float() @ w1.float().t()) * (calibration.float() @ w2.float().t())
        self.l1 = FP8Linear(w1, input_scale(calibration))
        self.l2 = FP8Linear(w2, input_scale(calibration))
        self.l3 = FP8Linear(w3, input_scale(h))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        hidden = torch.nn.functional.gelu(self.l1(z)) * self.l2(z)
        return self.l3(hidden.to(torch.bfloat16))


@dataclass(frozen=True)
class Comparison:
    """How the emulated output of one stage differs from the native one."""

    name: str
    total: int
    differing: int
    max_abs: float
    max_output: float

    def line(self) -> str:
        share = self.differing / self.total if self.total else 0.0
        return (f"{self.name:>12s}  {self.differing:>6d} of {self.total:>6d} bf16 outputs differ ({share:6.1%}), "
                f"by up to {self.max_abs:.4g} (outputs up to {self.max_output:.4g} in magnitude)")


def compare(name: str, native: torch.Tensor, emulated: torch.Tensor) -> Comparison:
    """Count differing bit patterns and measure the largest differences."""
    diff = mmaemu.testing.bitwise_diff(emulated, native)
    a, b = native.float(), emulated.float()
    finite = torch.isfinite(a) & torch.isfinite(b)
    delta = (a - b).abs()[finite]
    magnitude = a.abs()[finite]
    return Comparison(name, diff.total, diff.differing, float(delta.max()) if delta.numel() else 0.0,
                      float(magnitude.max()) if magnitude.numel() else 0.0)


@dataclass(frozen=True)
class Report:
    """Everything the script prints."""

    profile: str
    layers: list[Comparison]
    model: Comparison
    log: mmaemu.EmulationLog
    seconds: float


def activations(tokens: int, generator: torch.Generator) -> torch.Tensor:
    """The MLP's input: ``tokens`` rows of bf16 activations, as a batch of two sequences when ``tokens`` is
    even (the linears flatten the batch), one sequence otherwise."""
    batch = 2 if tokens % 2 == 0 else 1
    return (torch.randn(batch, tokens // batch, HIDDEN, generator=generator) * 2).to(torch.bfloat16)


def run(profile: str = "hopper", tokens: int = 32, seed: int = 0) -> Report:
    """Build the MLP, run it natively and under ``mmaemu.emulate(profile=profile)``, compare."""
    start = time.perf_counter()
    generator = torch.Generator().manual_seed(seed)
    z = activations(tokens, generator)
    calibration = (torch.randn(64, HIDDEN, generator=generator) * 2).to(torch.bfloat16)
    mlp = GatedMLP(generator, calibration)

    inputs: dict[str, torch.Tensor] = {}
    hooks = [layer.register_forward_pre_hook(lambda m, a, n=name: inputs.__setitem__(n, a[0]))
             for name, layer in (("l1", mlp.l1), ("l2", mlp.l2), ("l3", mlp.l3))]
    with torch.inference_mode():
        native_out = mlp(z)
        for h in hooks:
            h.remove()
        native_layers = {name: getattr(mlp, name)(x) for name, x in inputs.items()}
        with mmaemu.emulate(profile=profile) as log:
            emulated_layers = {name: getattr(mlp, name)(x) for name, x in inputs.items()}
            emulated_out = mlp(z)
    layers = [compare(f"layer {name}", native_layers[name], emulated_layers[name]) for name in inputs]
    return Report(profile, layers, compare("whole MLP", native_out, emulated_out), log, time.perf_counter() - start)


def render(report: Report, tokens: int) -> str:
    """What the script prints for ``report`` (a run of ``tokens`` rows)."""
    lines = [f"FP8 gated MLP, {tokens} tokens, hidden {HIDDEN}, inner {INNER}: native torch._scaled_mm "
             f"({torch.__version__}, CPU) against mmaemu profile {report.profile!r}",
             "Each layer on the same input (the FP8 GEMM alone):",
             *(comparison.line() for comparison in report.layers),
             "The whole MLP (differences propagate through GELU and the product):",
             report.model.line(),
             str(report.log),
             f"({report.seconds:.1f} s)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--profile", default="hopper", help="reference platform (default: hopper)")
    parser.add_argument("--tokens", type=int, default=32, help="rows M of each GEMM (default 32)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.tokens < 1:
        parser.error(f"--tokens {args.tokens}: the GEMMs need at least one row")
    print(render(run(args.profile, args.tokens, args.seed), args.tokens))
    return 0


if __name__ == "__main__":
    sys.exit(main())
