"""Evo 2 with each FP8 projection computed by mmaemu, one block at a time on the GPU.

Evo 2 computes one kind of GEMM in FP8: the input projection of each Hyena block
(``blocks[i].projections``, a Transformer Engine Linear of ``[3 * hidden, hidden]``; 5760 x 1920
in the 1B, 12288 x 4096 in the 7B, 24576 x 8192 in the 20B and 40B), with delayed scaling, whose
forward scales the checkpoint stores in the module's ``_extra_state``. Everything else (the MLPs,
``out_filter_dense``, attention, the embedding) is bf16. This script builds the upstream model
(vortex's ``StripedHyena``: ``pip install evo2==0.6.0 vtx==1.1.0``; Transformer Engine is not
needed), replaces exactly those projections by :class:`mmaemu.nn.EmulatedFP8Linear` layers with
the stored scales (TE's initial scale 1.0 where a projection stores none), so that their bits are
those of Transformer Engine 2.3 on the profile's reference GPU (``--profile hopper-te``, the
default, or ``ada-te``), and runs the rest of the model natively::

    python examples/evo2_offload.py selfcheck
    python examples/evo2_offload.py test --model evo2_1b_base --checkpoint evo2_1b_base.pt
    python examples/evo2_offload.py score --model evo2_40b --checkpoint evo2_40b.pt \\
        --input seqs.fasta --out scores.tsv

``selfcheck`` needs vortex only (no GPU, no checkpoint): it builds a small StripedHyena from
vortex's own classes on the CPU (the 1B's widths, one block of each of its four kinds), saves a
checkpoint with TE-style FP8 states, loads it with vortex's ``load_checkpoint``, replaces the
projections, runs vortex's forward pass, and checks every replaced projection's output bits
against :func:`mmaemu.scaled_mm` on operands quantised here as TE quantises them. It exits 0 only
if every check holds. ``test`` runs the four prompts of evo2's upstream test
(``evo2/test/test_evo2.py``) and prints each loss and PASS or FAIL against the expected mean loss
(0.502 for the 1B) with the upstream test's tolerance. ``score`` writes the mean log-likelihood of
each FASTA record, as evo2's ``score_sequences`` computes it.

What decides bits, besides the profile: the projection's M is the number of tokens after vortex
pads the sequence to a multiple of 16 (``ParallelGatedConvBlock.pad_to_multiple``, active because
the config enables FP8 projections), and the split-K decision depends on it; up to 8,192 tokens
per sequence every Evo 2 projection shape is in both TE profiles' recorded tables, which decide
S = 1. The stored scales are used frozen, as TE uses them with grad mode off; the script runs
under ``torch.inference_mode()`` and :class:`~mmaemu.nn.EmulatedFP8Linear` refuses a forward with
grad mode on.

What vortex 1.1.0 needs a GPU for, found by the self-check:

- building: ``StripedHyena.__init__`` refuses ``use_fp8_input_projections`` without Transformer
  Engine, puts blocks on ``cuda:0`` when CUDA is visible and enters ``torch.cuda.device(device)``
  for every block, which raises for ``"cpu"``. :func:`build_model` turns the FP8 flag off while
  building (and on again), hides CUDA and makes ``torch.cuda.device`` a no-op for CPU devices,
  during construction only;
- the forward pass, on the CPU: ``ParallelGatedConvBlock.proj_norm`` enters
  ``torch.cuda.device(x.device)`` (``vortex/model/model.py``, line 507), which raises for a CPU
  tensor, and the attention blocks' rotary embedding is a Triton kernel
  (``vortex/ops/embedding/rotary.py``, ``apply_rotary``), which needs a GPU or Triton's
  interpreter. ``selfcheck`` runs the forward pass with the same ``torch.cuda.device`` patch and
  ``TRITON_INTERPRET=1``; on a GPU neither is needed;
- importing: ``vortex/ops/attn_interface.py`` imports ``flash_attn_2_cuda`` (flash-attn's CUDA
  extension). ``selfcheck`` puts an empty stand-in module in its place when flash-attn is not
  installed; the model it builds uses vortex's non-flash attention (``use_flash_attn: False``), so
  nothing from that module is ever called.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import math
import os
import pickle
import sys
import tempfile
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

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
#: the scale a TE delayed-scaling module starts with (and keeps, with grad mode off) when its
#: checkpoint stores none.
TE_INITIAL_SCALE = 1.0
#: E4M3's largest finite value: TE's forward format and its saturation bound.
E4M3_MAX = 448.0


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


def fp8_projection_names(model: torch.nn.Module) -> list[str]:
    """Evo 2's FP8 GEMMs: the input projection of every Hyena block, when the model's config
    enables FP8 input projections (``use_fp8_input_projections``, as every Evo 2 config does),
    else none.

    The rule is vortex's: ``ParallelGatedConvBlock`` builds ``projections`` as a TE Linear with
    ``use_fp8`` from that flag, and no other module of the model is FP8. What a checkpoint stores
    does not select modules: an ``_extra_state`` elsewhere leaves its module bf16.
    """
    from vortex.model.model import ParallelGatedConvBlock

    if not model.config.get("use_fp8_input_projections", False):
        return []
    return [f"blocks.{i}.projections" for i, block in enumerate(model.blocks)
            if isinstance(block, ParallelGatedConvBlock)]


def stored_scales(state_dict: dict[str, Any], name: str) -> TEScales:
    """The forward scales TE would use for module ``name``: the ones its ``_extra_state`` stores,
    or TE's initial scale (1.0) for both when it stores none."""
    scales = read_te_fp8_scales(state_dict.get(f"{name}._extra_state"))
    if scales is not None:
        return scales
    one = torch.tensor(TE_INITIAL_SCALE, dtype=torch.float32)
    return TEScales(input=one, weight=one.clone())


def replace_fp8_projections(
    model: torch.nn.Module,
    state_dict: dict[str, Any],
    *,
    profile: str = "hopper-te",
    splitk: Any = "auto",
    backend: str = "auto",
) -> dict[str, TEScales]:
    """Replace each FP8 projection of ``model`` (:func:`fp8_projection_names`) by an
    :class:`EmulatedFP8Linear` with the scales of :func:`stored_scales`.

    Each weight is the module's own, already loaded (bf16), quantised with the weight scale as TE
    casts it; activations are quantised with the input scale. vortex pads each projection's input
    to a multiple of 16 tokens itself (the config's FP8 flag is on), so M is what TE's GEMM saw.

    Returns:
        The scales of each replaced module, by name.

    Raises:
        mmaemu.UnsupportedFeatureError: a projection has a bias (mmaemu does not model TE's
            fused bias; no Evo 2 config has one: ``qkv_proj_bias: False``).
    """
    replaced: dict[str, TEScales] = {}
    for name in fp8_projection_names(model):
        scales = stored_scales(state_dict, name)
        old = model.get_submodule(name)
        if getattr(old, "bias", None) is not None and old.bias.numel() > 0:
            raise mmaemu.UnsupportedFeatureError(f"{name} has a bias: TE's fused bias is not modelled")
        layer = EmulatedFP8Linear(old.weight.detach(), weight_scale=scales.weight, input_scale=scales.input,
                                  profile=profile, splitk=splitk, backend=backend)
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name), attr, layer)
        replaced[name] = scales
    return replaced


@contextlib.contextmanager
def cuda_device_accepts_cpu() -> Iterator[None]:
    """``torch.cuda.device(d)`` as a no-op for a non-CUDA ``d`` or None (vortex enters it for every
    block it builds, around every projection with ``x.device`` and in its rotary kernel with
    ``x.device.index``, None for a CPU tensor); CUDA devices are entered as usual."""
    real = torch.cuda.device

    class device(real):  # type: ignore[misc,valid-type]  # a subclass: torch checks isinstance against it
        def __init__(self, d: Any) -> None:
            if d is None or (not isinstance(d, int) and torch.device(d).type != "cuda"):
                self.idx, self.prev_idx = -1, -1  # torch.cuda.device(-1) enters and exits without CUDA
            else:
                super().__init__(d)

    with mock.patch("torch.cuda.device", device):
        yield


def build_model(config: Any) -> torch.nn.Module:
    """vortex's ``StripedHyena(config)``, built in host memory without Transformer Engine.

    Construction-time measures only (see the module's docstring): FP8 projections off while
    building (vortex refuses them without TE; its TE-free ``TELinear`` is built instead and
    :func:`replace_fp8_projections` replaces it) and on again afterwards, so that vortex pads the
    projections' inputs as it does with TE; CUDA hidden; ``torch.cuda.device`` a no-op for CPU.
    """
    from vortex.model.model import StripedHyena

    fp8 = bool(config.get("use_fp8_input_projections", False))
    config.use_fp8_input_projections = False
    try:
        with mock.patch("torch.cuda.is_available", return_value=False), cuda_device_accepts_cpu():
            model = StripedHyena(config)
    finally:
        config.use_fp8_input_projections = fp8
    return model


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint's tensors, memory-mapped, with TE's ``_extra_state`` (``io.BytesIO``) allowed."""
    torch.serialization.add_safe_globals([io.BytesIO])
    return torch.load(path, map_location="cpu", mmap=True, weights_only=True)


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


def load_model(model_name: str, checkpoint: Path, *, profile: str, splitk: Any, backend: str,
               device: str) -> tuple[torch.nn.Module, Any, list[str]]:
    """Build the vortex model on the host (:func:`build_model`), load the checkpoint with vortex's
    own ``load_checkpoint`` (memory-mapped), replace the FP8 projections, and set the model up to
    run block by block on ``device``. Needs evo2 (its configs), vortex and, to run, a GPU."""
    import pkgutil

    import yaml  # evo2 depends on it
    from evo2.utils import CONFIG_MAP
    from vortex.model.tokenizer import CharLevelTokenizer
    from vortex.model.utils import dotdict, load_checkpoint

    raw = pkgutil.get_data("evo2", CONFIG_MAP[model_name])
    assert raw is not None, f"evo2 ships no config for {model_name}"
    config = dotdict(yaml.safe_load(raw))
    model = build_model(config)
    load_checkpoint(model, checkpoint)  # without TE it drops the _extra_state entries: read them here
    names = list(replace_fp8_projections(model, read_checkpoint(checkpoint), profile=profile, splitk=splitk,
                                         backend=backend))
    model.eval()
    for name, module in model.named_children():
        if name != "blocks":
            module.to(device)
    model.block_idx_to_device = {i: device for i in range(len(model.blocks))}
    offload_blocks(model.blocks, device)
    return model, CharLevelTokenizer(512), names


# ----------------------------------------------------------------------------------------------
# selfcheck: vortex's real classes, a small model, on the CPU


def selfcheck_config() -> Any:
    """A small Evo 2 config: ``evo2-1b-8k.yml``'s keys and widths (hidden 1920, so the projections
    are the 1B's 5760 x 1920), four blocks instead of 25 (one Hyena block of each kind, then
    attention, in the 1B's order), vortex's non-flash attention."""
    from vortex.model.utils import dotdict

    return dotdict({
        "model_name": "selfcheck-evo2-1b-layout", "vocab_size": 512, "hidden_size": 1920, "num_filters": 1920,
        "hcs_layer_idxs": [0], "hcm_layer_idxs": [1], "hcl_layer_idxs": [2], "attn_layer_idxs": [3],
        "hcm_filter_length": 128, "hcl_filter_groups": 1920, "hcm_filter_groups": 128, "hcs_filter_groups": 128,
        "hcs_filter_length": 7, "num_layers": 4, "short_filter_length": 3, "num_attention_heads": 15,
        "short_filter_bias": False, "mlp_init_method": "torch.nn.init.zeros_",
        "mlp_output_init_method": "torch.nn.init.zeros_", "eps": 1e-6, "state_size": 16, "rotary_emb_base": 10000,
        "make_vocab_size_divisible_by": 8, "inner_size_multiple_of": 16, "inner_mlp_size": 5120,
        "log_intermediate_values": False, "proj_groups": 1, "hyena_filter_groups": 1, "column_split_hyena": False,
        "column_split": True, "interleave": True, "evo2_style_activations": True, "model_parallel_size": 1,
        "pipe_parallel_size": 1, "tie_embeddings": True, "mha_out_proj_bias": True, "hyena_out_proj_bias": True,
        "hyena_flip_x1x2": False, "qkv_proj_bias": False, "use_fp8_input_projections": True, "max_seqlen": 8192,
        "max_batch_size": 1, "final_norm": True, "use_flash_attn": False, "use_flash_rmsnorm": False,
        "use_flash_depthwise": False, "use_flashfft": False, "use_laughing_hyena": False, "inference_mode": True,
        "tokenizer_type": "CharLevelTokenizer", "prefill_style": "fft", "mlp_activation": "gelu",
        "print_activations": False,
    })


def te_cast(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Transformer Engine's FP8 cast, written out here (not mmaemu's): the product ``x * scale`` in
    fp32 (exact for bf16 ``x``, then rounded once), saturated to +-448, rounded to E4M3."""
    product = x.float() * scale.float()
    return product.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def _te_extra_state(scales: TEScales) -> io.BytesIO:
    """A ``_extra_state`` as TE 2.x saves a delayed-scaling Linear's (``torch.save`` of its dict)."""
    scale = torch.tensor([scales.input.item(), scales.weight.item(), 1.0])
    state = {"scale_fwd": scale, "scale_inv_fwd": 1.0 / scale, "amax_history_fwd": torch.zeros(16, 3),
             "scale_bwd": torch.ones(2), "scale_inv_bwd": torch.ones(2), "amax_history_bwd": torch.zeros(16, 2),
             "extra_fp8_variables": {"num_gemms": 1}}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer


def _prepare_cpu_runtime() -> str | None:
    """Run-time measures for vortex's forward pass on the CPU (see the module's docstring); None,
    or why vortex cannot be imported. Must run before vortex is imported."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # vortex's rotary kernel, decorated at import
    try:
        import flash_attn_2_cuda  # noqa: F401
    except ImportError:
        sys.modules.setdefault("flash_attn_2_cuda", types.ModuleType("flash_attn_2_cuda"))
    try:
        import vortex.model.model  # noqa: F401
    except ImportError as exc:
        missing = getattr(exc, "name", None) or ""
        if missing.split(".")[0] in ("vortex", ""):
            return f"vortex is not installed ({exc}); install it with: pip install vtx==1.1.0"
        return (f"vortex is installed but cannot be imported: it needs the module {missing!r}, which is "
                f"missing ({exc}); install it (for 'triton': pip install triton) and run again")
    import logging

    logging.getLogger("vortex").setLevel(logging.WARNING)
    for name in ("StripedHyena", "vortex.model.utils"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return None


@dataclass
class Check:
    """One line of the self-check's report."""

    ok: bool
    text: str


def selfcheck(*, profile: str = "hopper-te", backend: str = "auto", tokens: int = 21, seed: int = 0,
              out: Any = None) -> list[Check]:
    """Build a small Evo 2 (:func:`selfcheck_config`) with vortex's classes on the CPU, give it a
    checkpoint with TE-style FP8 states, load it with vortex's ``load_checkpoint``, replace the FP8
    projections, run vortex's forward pass on ``tokens`` tokens, and check each replaced
    projection's output bits against :func:`mmaemu.scaled_mm` on operands cast by :func:`te_cast`.

    The weights are vortex's random initialisation (with decaying long filters). The checkpoint's
    scales are TE's calibration rule, ``scale = 448 / amax``, from one bf16 forward pass of the
    model itself; the last Hyena projection stores no FP8 state (TE's initial 1.0
    applies), and one MLP layer stores an FP8 state that must leave it bf16.
    """
    from vortex.model.model import ParallelGatedConvBlock
    from vortex.model.tokenizer import CharLevelTokenizer
    from vortex.model.utils import load_checkpoint

    def say(text: str) -> None:
        print(text, file=out or sys.stdout, flush=True)

    checks: list[Check] = []
    torch.manual_seed(seed)
    model = build_model(selfcheck_config())
    model.to_bfloat16_except_pr_lc()
    for name, p in model.named_parameters():
        if name.endswith("log_poles"):  # vortex draws them from N(0, 1): make the long filters decay, as
            p.data = -p.data.abs()      # a trained model's do, or they grow as exp(t) and overflow
    names = fp8_projection_names(model)
    hyena = [f"blocks.{i}.projections" for i, b in enumerate(model.blocks) if isinstance(b, ParallelGatedConvBlock)]
    checks.append(Check(names == hyena and len(names) == 3,
                        f"FP8 projections selected: {names} (the Hyena blocks' projections, nothing else)"))

    tokenizer = CharLevelTokenizer(512)
    prompt = ("ACGTTGCAAGTCCGATAGGCTAACGT" * 400)[:tokens]
    ids = torch.tensor(tokenizer.tokenize(prompt), dtype=torch.long).unsqueeze(0)

    # calibration, as TE's delayed scaling would have left the scales: 448 / amax of each operand
    amax: dict[str, float] = {}
    hooks = [model.get_submodule(n).register_forward_pre_hook(
        lambda m, a, n=n: amax.__setitem__(n, a[0].detach().abs().float().max().item())) for n in names]
    with torch.inference_mode(), cuda_device_accepts_cpu():
        model(ids)
    for h in hooks:
        h.remove()
    state = dict(model.state_dict())
    stored = {}
    for n in names[:-1]:
        w_amax = model.get_submodule(n).weight.detach().abs().float().max().item()
        stored[n] = TEScales(input=torch.tensor(E4M3_MAX / amax[n], dtype=torch.float32),
                             weight=torch.tensor(E4M3_MAX / w_amax, dtype=torch.float32))
        state[f"{n}._extra_state"] = _te_extra_state(stored[n])
    state["blocks.0.mlp.l1._extra_state"] = _te_extra_state(TEScales(torch.tensor(8.0), torch.tensor(8.0)))

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "selfcheck.pt"
        torch.save(state, path)
        torch.manual_seed(seed + 1)  # other random weights: the loaded ones must replace them
        model = build_model(selfcheck_config())
        with contextlib.redirect_stdout(io.StringIO()):  # vortex prints the keys it ignores
            load_checkpoint(model, path)
        checkpoint = read_checkpoint(path)
        weights = {n: checkpoint[f"{n}.weight"].clone() for n in names}
        replaced = replace_fp8_projections(model, checkpoint, profile=profile, backend=backend)
        del checkpoint
    model.eval()
    others = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    checks.append(Check(list(replaced) == names and all(isinstance(model.get_submodule(n), EmulatedFP8Linear)
                                                        for n in names)
                        and "blocks.0.mlp.l1" in others and "blocks.3.inner_mha_cls.Wqkv" in others,
                        f"replaced {len(replaced)} projections by EmulatedFP8Linear; {len(others)} bf16 Linear "
                        "layers left as they were (blocks.0.mlp.l1, whose checkpoint entry holds FP8 scales, among "
                        "them)"))
    last = replaced[names[-1]]
    checks.append(Check(last.input.item() == TE_INITIAL_SCALE and last.weight.item() == TE_INITIAL_SCALE,
                        f"{names[-1]} stores no FP8 state: TE's initial scale {TE_INITIAL_SCALE} for its "
                        "input and weight"))

    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    hooks = [model.get_submodule(n).register_forward_hook(
        lambda m, a, y, n=n: seen.__setitem__(n, (a[0].detach().clone(), y.detach().clone()))) for n in names]
    with torch.inference_mode(), cuda_device_accepts_cpu():
        logits, _ = model(ids)
    for h in hooks:
        h.remove()
    checks.append(Check(tuple(logits.shape) == (1, tokens, 512) and bool(torch.isfinite(logits.float()).all()),
                        f"vortex's forward pass ran on the CPU: logits {tuple(logits.shape)} {logits.dtype}, finite"))

    for n in names:
        x, y = seen[n]
        scales = replaced[n]
        rows = x.reshape(-1, x.shape[-1])
        padded = math.ceil(tokens / PAD_MULTIPLE) * PAD_MULTIPLE
        xq, wq = te_cast(rows, scales.input), te_cast(weights[n], scales.weight)
        one = torch.tensor(1.0, dtype=torch.float32)
        args = (xq, wq.t(), one / scales.input, one / scales.weight)
        kwargs: dict[str, Any] = {"out_dtype": torch.bfloat16, "use_fast_accum": True, "profile": profile}
        want = mmaemu.scaled_mm(*args, **kwargs)
        plan = mmaemu.explain(*args, **kwargs)
        got = y.reshape(-1, y.shape[-1])
        same = got.shape == want.shape and torch.equal(got.view(torch.int16), want.view(torch.int16))
        split = plan.split
        where = f"S = {split.parts} ({split.source.value}: {split.note})" if split is not None else "no split"
        checks.append(Check(same and rows.shape[0] == padded,
                            f"{n}: M x N x K = {rows.shape[0]} x {wq.shape[0]} x {wq.shape[1]} ({tokens} tokens padded "
                            f"by vortex to {padded}), {'bits equal' if same else 'BITS DIFFER'} to mmaemu.scaled_mm "
                            f"on TE's cast operands; {where}"))

    try:
        with cuda_device_accepts_cpu():
            model(ids)  # grad mode on: TE would update the stored scales after each projection call
        refused = False
    except mmaemu.UnsupportedFeatureError:
        refused = True
    checks.append(Check(refused, "a forward pass with grad mode on is refused (TE would update the delayed scales)"))
    for c in checks:
        say(f"{'ok  ' if c.ok else 'FAIL'} {c.text}")
    return checks


def cmd_selfcheck(args: argparse.Namespace) -> int:
    problem = _prepare_cpu_runtime()
    if problem is not None:
        print(f"evo2_offload.py selfcheck: cannot run here: {problem}", file=sys.stderr)
        return 2
    checks = selfcheck(profile=args.profile, backend=args.backend, tokens=args.tokens)
    failed = sum(not c.ok for c in checks)
    print(f"selfcheck: {len(checks) - failed} of {len(checks)} checks hold (vtx 1.1.0 API, profile {args.profile!r})")
    return 1 if failed else 0


# ----------------------------------------------------------------------------------------------
# test and score: need evo2, vortex, a checkpoint and a GPU (not run by the test suite).


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
    p = sub.add_parser("selfcheck", help="vortex's classes on the CPU: the replacement, bit for bit (no GPU)")
    p.add_argument("--profile", default="hopper-te", help="hopper-te (default) or ada-te")
    p.add_argument("--backend", default="auto")
    p.add_argument("--tokens", type=int, default=21, help="prompt length (vortex pads it to a multiple of 16)")
    args = parser.parse_args(argv)
    if args.command == "selfcheck":
        return cmd_selfcheck(args)
    if args.splitk != "auto":
        args.splitk = int(args.splitk)
    problem = missing_runtime()
    if problem is not None:
        print(f"evo2_offload.py: cannot run here: {problem}", file=sys.stderr)
        return 2
    return cmd_test(args) if args.command == "test" else cmd_score(args)


if __name__ == "__main__":
    sys.exit(main())
