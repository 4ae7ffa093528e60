"""Evo 2 with each FP8 projection computed by mmaemu, one block at a time on the GPU.

Evo 2's Hyena blocks compute their input projection (``blocks[i].projections``, a Transformer
Engine Linear, ``[3 * hidden, hidden]``) as an FP8 GEMM with delayed scaling; the checkpoint
stores each projection's FP8 scales in its ``_extra_state``. This script builds the upstream
model (evo2 0.6.0 with vortex, ``pip install evo2==0.6.0 vtx==1.1.0``; Transformer Engine is not
needed), replaces every such projection with an :class:`mmaemu.nn.EmulatedFP8Linear` using the
stored scales, so that its bits are those of Transformer Engine 2.3 on the profile's reference
GPU (``--profile hopper-te``, the default, or ``ada-te``), and runs the rest of the model natively.

The weights stay in host memory (memory-mapped from the checkpoint) and each block is copied to
the GPU just before it runs and dropped just after, so checkpoints larger than GPU memory run::

    python examples/evo2_offload.py test --model evo2_1b_base --checkpoint evo2_1b_base.pt
    python examples/evo2_offload.py score --model evo2_40b --checkpoint evo2_40b.pt \\
        --input seqs.fasta --out scores.tsv

``test`` runs the four prompts of evo2's upstream test (``evo2/test/test_evo2.py``) and prints
each loss and PASS or FAIL against the expected mean loss (0.502 for the 1B), with the upstream
test's tolerance. ``score`` writes the mean log-likelihood of each FASTA record, as evo2's
``score_sequences`` computes it.

What decides bits, besides the profile: the projection's M is the number of tokens after vortex
pads a sequence to a multiple of 16 (done here too, :class:`PaddedProjection`), and the split-K
decision depends on it; up to 8,192 tokens per sequence every Evo 2 projection shape is in both
TE profiles' recorded tables. The stored scales are used frozen, as at inference.

Not run in this repository's tests (no GPU, no checkpoint): :func:`load_model`,
:func:`offload_blocks` on a GPU, and the two commands. The parts that need neither Evo 2 nor a
GPU (reading TE's stored scales, replacing the projections, padding, the PASS/FAIL rule) are
tested on a stand-in module with Evo 2's attribute layout (``tests/test_examples.py``).
"""

from __future__ import annotations

import argparse
import csv
import io
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import torch

import mmaemu
from mmaemu.nn import EmulatedFP8Linear

#: mean loss of the upstream test (bf16 losses averaged), and its tolerance ``eps``.
EXPECTED_LOSS = {
    "evo2_1b_base": 0.501953125,
    "evo2_7b": 0.3476563,
    "evo2_7b_base": 0.3520508,
    "evo2_20b": 0.2166748046875,
    "evo2_40b": 0.2159424,
    "evo2_40b_base": 0.2149658,
}
TOLERANCE = 1e-3
#: vortex pads the sequence to a multiple of this before an FP8 projection.
PAD_MULTIPLE = 16
#: index of the input and the weight in TE's forward scaling tensors (GEMM1_INPUT, GEMM1_WEIGHT).
TE_INPUT, TE_WEIGHT = 0, 1


@dataclass(frozen=True)
class TEScales:
    """A Transformer Engine Linear's stored forward FP8 scales (the quantisation scales, fp32)."""

    input: torch.Tensor
    weight: torch.Tensor


def _load_state(blob: bytes) -> Any:
    try:
        return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - an older TE pickled the dict directly
        return pickle.loads(blob)  # noqa: S301 - the checkpoint is trusted by whoever loads the model


def read_te_fp8_scales(extra_state: Any) -> TEScales | None:
    """The forward scales in a TE module's ``_extra_state``, or None when it holds none.

    TE serialises ``{"scale_fwd": [input, weight, output], "scale_inv_fwd": ..., ...}`` with
    ``torch.save`` into an ``io.BytesIO`` (or, in other versions, a uint8 tensor of those bytes, or
    a pickle); all three forms are read.
    """
    if extra_state is None:
        return None
    if isinstance(extra_state, io.BytesIO):
        blob = extra_state.getvalue()
    elif isinstance(extra_state, torch.Tensor):
        if extra_state.numel() == 0:
            return None
        blob = extra_state.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
    elif isinstance(extra_state, (bytes, bytearray)):
        blob = bytes(extra_state)
    else:
        return None
    state = _load_state(blob)
    if not isinstance(state, dict) or "scale_fwd" not in state:
        return None
    scale = torch.as_tensor(state["scale_fwd"]).detach().to("cpu", torch.float32).reshape(-1)
    return TEScales(input=scale[TE_INPUT].clone(), weight=scale[TE_WEIGHT].clone())


def fp8_projection_names(state_dict: dict[str, Any]) -> list[str]:
    """Modules whose ``_extra_state`` in the checkpoint holds FP8 scales, in checkpoint order."""
    names = []
    for key, value in state_dict.items():
        if key.endswith("._extra_state") and read_te_fp8_scales(value) is not None:
            names.append(key[: -len("._extra_state")])
    return names


class PaddedProjection(torch.nn.Module):
    """An :class:`EmulatedFP8Linear` that pads dim -2 (the sequence) to a multiple of 16, as vortex
    does before an FP8 projection, and slices the padding off again.

    The padding rows are zeros, which change no other row's result; they change M, and M decides
    the split-K decision. An input already padded (vortex pads when its FP8 flag is on) is left
    as it is.
    """

    def __init__(self, linear: EmulatedFP8Linear, multiple: int = PAD_MULTIPLE) -> None:
        super().__init__()
        self.linear = linear
        self.multiple = multiple

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-2]
        pad = (-length) % self.multiple
        if pad:
            x = torch.nn.functional.pad(x, (0, 0, 0, pad))
        y = self.linear(x)
        return y[..., :length, :] if pad else y


def replace_fp8_projections(
    model: torch.nn.Module,
    state_dict: dict[str, Any],
    *,
    profile: str = "hopper-te",
    splitk: Any = "auto",
    backend: str = "auto",
) -> list[str]:
    """Replace each FP8 projection of ``model`` by a :class:`PaddedProjection` with the stored scales.

    The projections are the modules whose ``_extra_state`` in ``state_dict`` holds TE's FP8
    scales; each one's weight is the module's own (already loaded) ``weight``, quantised with
    the stored weight scale, and activations are quantised with the stored input scale.

    Returns:
        The names of the replaced modules.

    Raises:
        mmaemu.UnsupportedFeatureError: a projection has a bias (mmaemu does not model TE's
            fused bias).
    """
    names = fp8_projection_names(state_dict)
    for name in names:
        scales = read_te_fp8_scales(state_dict[f"{name}._extra_state"])
        assert scales is not None
        old = model.get_submodule(name)
        if getattr(old, "bias", None) is not None and old.bias.numel() > 0:
            raise mmaemu.UnsupportedFeatureError(f"{name} has a bias: TE's fused bias is not modelled")
        layer = EmulatedFP8Linear(old.weight.detach(), weight_scale=scales.weight, input_scale=scales.input,
                                  profile=profile, splitk=splitk, backend=backend)
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, PaddedProjection(layer))
    return names


class _Offload:
    """Forward hooks that bring one module's tensors to the GPU for its forward pass only.

    Each parameter and buffer is replaced, in its module's table, by a copy on the device, and
    the host tensor (memory-mapped from the checkpoint) is put back afterwards: nothing is
    copied back, since inference changes no weight.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.saved: list[tuple[dict[str, Any], str, torch.Tensor]] = []

    def before(self, module: torch.nn.Module, args: Any) -> None:
        for sub in module.modules():
            for table in (sub._parameters, sub._buffers):
                for key, t in list(table.items()):
                    if t is None or t.device == self.device:
                        continue
                    self.saved.append((table, key, t))
                    moved = t.detach().to(self.device, non_blocking=True)
                    if isinstance(t, torch.nn.Parameter):
                        moved = torch.nn.Parameter(moved, requires_grad=False)
                    table[key] = moved

    def after(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        for table, key, host in self.saved:
            table[key] = host
        self.saved = []


def offload_blocks(blocks: Iterable[torch.nn.Module], device: torch.device | str) -> list[Any]:
    """Keep each block's weights in host memory and copy them to ``device`` only while it runs.

    Returns the hook handles (``handle.remove()`` undoes it).
    """
    handles = []
    for block in blocks:
        hooks = _Offload(torch.device(device))
        handles.append(block.register_forward_pre_hook(hooks.before))
        handles.append(block.register_forward_hook(hooks.after))
    return handles


def check_loss(model_name: str, mean_loss: float) -> tuple[bool | None, str]:
    """PASS or FAIL as the upstream test decides it (|mean loss - expected| < 1e-3)."""
    expected = EXPECTED_LOSS.get(model_name)
    if expected is None:
        return None, f"mean loss {mean_loss:.4f} (no expected value for {model_name})"
    ok = abs(mean_loss - expected) < TOLERANCE
    return ok, f"{'PASS' if ok else 'FAIL'}: mean loss {mean_loss:.4f}, expected {expected:.4f} +- {TOLERANCE:g}"


def read_fasta(path: Path) -> list[tuple[str, str]]:
    """``(name, sequence)`` of each record of a FASTA file."""
    records: list[tuple[str, str]] = []
    name, parts = None, []
    for line in Path(path).read_text().splitlines():
        if line.startswith(">"):
            if name is not None:
                records.append((name, "".join(parts)))
            name, parts = line[1:].strip(), []
        elif line.strip():
            parts.append(line.strip())
    if name is not None:
        records.append((name, "".join(parts)))
    return records


def missing_runtime() -> str | None:
    """Why this machine cannot run Evo 2 here, or None when it can."""
    try:
        import evo2  # noqa: F401
        import vortex  # noqa: F401
    except ImportError as exc:
        return (f"Evo 2 is not installed ({exc}). Install it with: pip install evo2==0.6.0 vtx==1.1.0 "
                "(and flash-attn), then download a checkpoint, e.g. hf download arcinstitute/evo2_1b_base")
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible: Evo 2's kernels (vortex, flash-attn) need one, even with mmaemu's FP8 GEMMs"
    return None


# ----------------------------------------------------------------------------------------------
# Below: needs evo2, vortex and a GPU (not exercised by the test suite).


def load_model(model_name: str, checkpoint: Path, *, profile: str, splitk: Any, backend: str,
               device: str) -> tuple[torch.nn.Module, Any, list[str]]:
    """Build the vortex model on the host, load the checkpoint (memory-mapped), replace the FP8
    projections, and set it up to run block by block on ``device``."""
    import pkgutil
    from unittest import mock

    import yaml  # evo2 depends on it
    from evo2.utils import CONFIG_MAP
    from vortex.model.model import StripedHyena
    from vortex.model.tokenizer import CharLevelTokenizer
    from vortex.model.utils import dotdict

    raw = pkgutil.get_data("evo2", CONFIG_MAP[model_name])
    assert raw is not None, f"evo2 ships no config for {model_name}"
    config = dotdict(yaml.safe_load(raw))
    config.use_fp8_input_projections = False  # no Transformer Engine: the projections become mmaemu's
    with mock.patch("torch.cuda.is_available", return_value=False):  # build on the host, not on the GPU
        model = StripedHyena(config)
    torch.serialization.add_safe_globals([io.BytesIO])  # TE's _extra_state
    state = torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=True)
    fp8 = {f"{name}._extra_state" for name in fp8_projection_names(state)}
    weights = {k: v for k, v in state.items() if k not in fp8}  # the non-TE projections take no FP8 state
    convert = getattr(model, "to_bfloat16_except_pr_lc", None)  # as vortex's load_checkpoint does
    if convert is not None:
        convert(to_float32=True)
    load = getattr(model, "custom_load_state_dict", None)
    if load is not None:
        load(weights)
    else:
        model.load_state_dict(weights, strict=False)
    if convert is not None:
        convert()
    names = replace_fp8_projections(model, state, profile=profile, splitk=splitk, backend=backend)
    model.eval()
    for name, module in model.named_children():
        if name != "blocks":
            module.to(device)
    model.block_idx_to_device = {i: device for i in range(len(model.blocks))}
    offload_blocks(model.blocks, device)
    return model, CharLevelTokenizer(512), names


def cmd_test(args: argparse.Namespace) -> int:
    from importlib import resources

    import torch.nn.functional as F

    model, tokenizer, names = load_model(args.model, args.checkpoint, profile=args.profile, splitk=args.splitk,
                                         backend=args.backend, device=args.device)
    print(f"{len(names)} FP8 projections computed by mmaemu (profile {args.profile!r})")
    path = args.prompts or resources.files("evo2.test.data") / "prompts.csv"
    with open(path, encoding="utf-8-sig", newline="") as fh:
        prompts = [row[0] for row in list(csv.reader(fh))[1:]]
    losses = []
    for i, seq in enumerate(prompts, 1):
        ids = torch.tensor(tokenizer.tokenize(seq), dtype=torch.long, device=args.device)
        with torch.inference_mode():
            logits, _ = model.forward(ids.unsqueeze(0))
            pred, target = logits[0, :-1, :], ids[1:]
            loss = F.cross_entropy(pred, target)  # in the logits' dtype (bf16), as the upstream test
            loss32 = F.cross_entropy(pred.float(), target)
            accuracy = (pred.argmax(-1) == target).float().mean().item()
        losses.append(loss.item())
        print(f"prompt {i}: loss {loss.item():.4f} (fp32 {loss32.item():.4f}), accuracy {accuracy:.2%}")
    ok, message = check_loss(args.model, sum(losses) / len(losses))
    print(message)
    return 0 if ok or ok is None else 1


def cmd_score(args: argparse.Namespace) -> int:
    from evo2.scoring import score_sequences

    model, tokenizer, names = load_model(args.model, args.checkpoint, profile=args.profile, splitk=args.splitk,
                                         backend=args.backend, device=args.device)
    records = read_fasta(args.input)
    with torch.inference_mode():
        scores = score_sequences([seq for _, seq in records], model=model, tokenizer=tokenizer, batch_size=1,
                                 prepend_bos=False, reduce_method="mean")
    with open(args.out, "w") as fh:
        fh.write("name\tscore\n")
        for (name, _), score in zip(records, scores):
            fh.write(f"{name}\t{float(score):.8g}\n")
    print(f"{len(records)} sequences scored with {len(names)} FP8 projections from mmaemu -> {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("test", "score"):
        p = sub.add_parser(name)
        p.add_argument("--model", required=True, help="evo2 model name, e.g. evo2_1b_base or evo2_40b")
        p.add_argument("--checkpoint", type=Path, required=True, help="the checkpoint (.pt)")
        p.add_argument("--profile", default="hopper-te", help="hopper-te (default) or ada-te")
        p.add_argument("--splitk", default="auto", help="'auto' (default) or 1")
        p.add_argument("--backend", default="auto")
        p.add_argument("--device", default="cuda:0")
        if name == "test":
            p.add_argument("--prompts", type=Path, help="CSV of prompts (default: the upstream test's)")
        else:
            p.add_argument("--input", type=Path, required=True, help="FASTA file")
            p.add_argument("--out", type=Path, required=True, help="TSV of scores")
    args = parser.parse_args(argv)
    if args.splitk != "auto":
        args.splitk = int(args.splitk)
    problem = missing_runtime()
    if problem is not None:
        print(f"evo2_offload.py: cannot run here: {problem}", file=sys.stderr)
        return 2
    return cmd_test(args) if args.command == "test" else cmd_score(args)


if __name__ == "__main__":
    sys.exit(main())
