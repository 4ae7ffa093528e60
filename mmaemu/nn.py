"""Modules that route a model's FP8 GEMMs through mmaemu.

:class:`EmulatedFP8Linear` is an inference-only FP8 Linear layer: it quantises its input as
Transformer Engine does (:mod:`mmaemu.quantization`) and computes ``x @ W.T`` with
``mmaemu::scaled_mm`` (:mod:`mmaemu.ops`), so it runs eagerly, under ``torch.compile`` (one
opaque operator, no graph break) and under ``torch.export`` with the same bits.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from . import ops
from .backends import Backend
from ._checks import fp8_pair_refusal, has_algorithm
from .errors import UnsupportedFeatureError
from .formats import FP8_DTYPES, OUT_DTYPES, fp8_format_of
from ._options import Options
from .platforms._profiles import Profile, registered_name
from .quantization import ScalingRecipe, current_scale, quantize, reciprocal_scale
from ._split import SplitKSpec, splitk_text

__all__ = ["EmulatedFP8Linear"]

#: activation and float weight dtypes: Transformer Engine's (it casts nothing else to FP8).
_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _names(dtypes: tuple[torch.dtype, ...]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def _scalar(value: object, name: str) -> torch.Tensor:
    """A positive finite tensor-wise scale as a 0-dim fp32 tensor (rounded to nearest even)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must have one element (a tensor-wise scale), got shape {tuple(value.shape)}")
        if value.dtype == torch.bool or value.is_complex():
            raise TypeError(f"{name} must be a real number or a real tensor, got a {value.dtype} tensor")
        scale = value.detach().to(torch.float32).reshape(()).clone()
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        scale = torch.tensor(float(value), dtype=torch.float32)
    else:
        raise TypeError(f"{name} must be a one-element tensor or a real number, got {type(value).__name__}")
    as_float = float(scale)
    if not (math.isfinite(as_float) and as_float > 0):
        raise ValueError(
            f"{name}={as_float!r} (in fp32): a quantisation scale must be positive and finite, as Transformer "
            "Engine's always are (its scale update keeps the previous scale rather than produce 0, Inf or NaN)"
        )
    return scale


def _check_inverse(scale_inv: torch.Tensor, name: str) -> None:
    """A positive scale whose reciprocal overflows fp32 (below about 2**-128) is no TE scale either."""
    if not bool(torch.isfinite(scale_inv)):
        raise ValueError(
            f"{name} = 1 / scale is {float(scale_inv)} in fp32: the scale is too small for its reciprocal to be "
            "finite (Transformer Engine's scales are at least fp8_max / FP32_MAX)"
        )


def _check_scales(weight_scale_inv: torch.Tensor, input_scale: torch.Tensor | None,
                  input_scale_inv: torch.Tensor | None) -> None:
    """The one rule for a layer's scales, whichever way they come in (the constructor, a state dict).

    ``weight_scale_inv`` and ``input_scale`` are positive and finite in fp32, ``input_scale``'s
    reciprocal is finite, and ``input_scale_inv`` is exactly ``reciprocal_scale(input_scale)``
    (TE keeps the two in step; a stale inverse would scale the GEMM with another value than the
    quantisation used).

    Raises:
        ValueError: naming the scale.
    """
    _scalar(weight_scale_inv, "weight_scale_inv")
    if (input_scale is None) != (input_scale_inv is None):
        raise ValueError("input_scale and input_scale_inv come together (delayed scaling) or not at all")
    if input_scale is None or input_scale_inv is None:
        return
    s = _scalar(input_scale, "input_scale")
    expected = reciprocal_scale(s)
    _check_inverse(expected, "input_scale_inv")
    if input_scale_inv.reshape(()).detach().cpu().view(torch.int32) != expected.view(torch.int32):
        raise ValueError(
            f"input_scale_inv={float(input_scale_inv)!r} is not 1 / input_scale = {float(expected)!r} (fp32, rounded to "
            "nearest even): the GEMM would use another scale than the quantisation; store both from one scale"
        )


class EmulatedFP8Linear(torch.nn.Module):
    """``y = x @ W.T`` with FP8 operands, as Transformer Engine computes it on a reference GPU.

    Inference only, without bias (mmaemu refuses a fused bias: add it after the layer if your
    model has one, which is not what TE's fused epilogue computes bit for bit). The forward pass:

    1. quantises ``x`` to ``input_dtype``: ``fp8(saturate(fp32(x) * input_scale))``, as TE's
       delayed scaling does with a stored scale, or with ``input_scale=None`` as TE's current
       scaling does (``input_scale = fp8_max / amax(x)`` at each call; see
       :mod:`mmaemu.quantization`);
    2. reshapes the leading dimensions of ``x`` into M (``[..., K] -> [M, K]``);
    3. calls ``mmaemu::scaled_mm(x_fp8, W_fp8.t(), 1 / input_scale, weight_scale_inv)`` with
       ``use_fast_accum`` (default True: TE's forward GEMM does not split the accumulator) and
       ``out_dtype`` (default: the input's dtype, as TE returns the activation dtype);
    4. reshapes the result to ``[..., N]``.

    Everything that decides bits is explicit: the FP8 weight and its ``scale_inv``, the input
    scale, the profile (the reference platform; default ``"hopper-te"``: Transformer Engine 2.3 on
    an H100 PCIe) and ``splitk`` (default ``"auto"``: cuBLAS's split-K decision from the profile's
    recorded tables; a shape no evidence decides raises :class:`~mmaemu.SplitKUnknownError`, see
    ``mmaemu.explain``). M, and so the split decision, is the number of rows after reshaping:
    padding a sequence changes it.

    Buffers (moved by ``.to(device)``, kept in their dtype by ``.to(dtype)``, saved in the state
    dict): ``weight`` (``[N, K]`` FP8), ``weight_scale_inv`` and ``input_scale`` (fp32 scalars;
    ``input_scale`` is absent under current scaling).

    Args:
        weight: ``[N, K]``: an FP8 tensor (``float8_e4m3fn`` or ``float8_e5m2``, already
            quantised) or a bf16, fp16 or fp32 tensor (quantised here to E4M3 with
            ``weight_scale``, as TE casts its weight).
        weight_scale: the weight's quantisation scale (TE's ``scale``); ``weight_scale_inv =
            fp32(1 / weight_scale)``. Required for a float weight; for an FP8 weight pass this or
            ``weight_scale_inv``.
        input_scale: the activation's quantisation scale (TE's ``scale``), or None for current
            scaling.
        weight_scale_inv: the FP8 weight's dequantisation scale, as ``torch._scaled_mm`` takes it.
        input_dtype: FP8 format of the activation (default E4M3, TE's forward format).
        out_dtype: ``float32``, ``bfloat16``, ``float16``, ``float8_e4m3fn``, ``float8_e5m2``, or
            None for the input's dtype.
        use_fast_accum: a bool, as ``torch._scaled_mm`` (default True, as TE's forward GEMM).
        profile: a registered profile's name or the registered :class:`~mmaemu.Profile` itself
            (default ``"hopper-te"``).
        splitk: ``"auto"``, ``1`` or ``(S, scheme)``, as :func:`mmaemu.scaled_mm`.
        backend: ``"auto"``, ``"reference"``, ``"cpu"`` or ``"triton"`` (or a
            :class:`mmaemu.backends.Backend`); its availability is checked at each call.

    Scales are tensors with one element or Python real numbers, rounded to fp32 (to nearest
    even) as TE stores them; they must be positive and finite, as TE's always are, and so must
    their fp32 reciprocals.

    NaN, Inf and -0: an Inf input saturates to +-max like any overflow, a NaN input stays NaN and
    makes its output row the canonical NaN (as on the GPU), -0 inputs quantise to -0 and exact
    zero outputs are +0.

    Raises (at construction): ValueError for a weight that is not 2-D or of another dtype,
    scales with more than one element, a missing scale, a scale that is zero, negative, infinite
    or NaN, an invalid profile, splitk, backend, input or output dtype, and dtype combinations
    torch or the reference cuBLASLt refuses (E5M2 x E5M2; E4M3 x E4M3 -> E5M2); TypeError for a
    non-bool ``use_fast_accum`` and arguments of the wrong type; MmaemuError when a float weight
    is quantised on a CPU that flushes subnormals to zero. At each call: TypeError for an
    activation that is not bf16, fp16 or fp32, and what :func:`mmaemu.scaled_mm` raises:
    ``ReferenceRejectsError`` when K or N is not a multiple of 16, ``SplitKUnknownError``,
    ``BackendUnavailableError``, and ``UnsupportedFeatureError`` with grad mode on, for a
    delayed-scaling layer (any input) and for an input requiring grad (run under
    ``torch.inference_mode()`` or ``torch.no_grad()``).

    [Note: grad mode and delayed scaling. Transformer Engine 2.x updates the delayed-scaling
    scales (amax history, then ``scale = fp8_max / amax``) when the outermost ``fp8_autocast``
    region exits with ``torch.is_grad_enabled()``; Evo 2's vortex wraps every projection call in
    its own region, so under grad mode each call changes the next call's scale. With grad mode
    off the stored scales stay as loaded, which is what this layer computes. Evidence: TE's
    ``FP8GlobalStateManager.fp8_autocast_exit`` (v2.2 and later); not recorded on hardware.]

    Example:
        >>> import torch, mmaemu
        >>> from mmaemu.nn import EmulatedFP8Linear
        >>> w = torch.full((64, 1024), 0.25)
        >>> layer = EmulatedFP8Linear(w, weight_scale=4.0, input_scale=2.0)   # W quantised to 1.0
        >>> x = torch.full((2, 8, 1024), 0.5, dtype=torch.bfloat16)          # M = 16 rows
        >>> with torch.inference_mode():
        ...     y = layer(x)
        >>> y.shape, y.dtype, y[0, 0, 0].item()
        (torch.Size([2, 8, 64]), torch.bfloat16, 128.0)
    """

    weight: torch.Tensor
    weight_scale_inv: torch.Tensor
    input_scale: torch.Tensor | None
    input_scale_inv: torch.Tensor | None

    def __init__(
        self,
        weight: torch.Tensor,
        *,
        weight_scale: torch.Tensor | float | None = None,
        input_scale: torch.Tensor | float | None,
        weight_scale_inv: torch.Tensor | float | None = None,
        input_dtype: torch.dtype = torch.float8_e4m3fn,
        out_dtype: torch.dtype | None = None,
        use_fast_accum: bool = True,
        profile: str | Profile = "hopper-te",
        splitk: SplitKSpec = "auto",
        backend: str | Backend = "auto",
    ) -> None:
        super().__init__()
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"weight must be a 2-D [N, K] torch.Tensor, got {type(weight).__name__}")
        if torch.nn.parameter.is_lazy(weight):
            raise ValueError("weight is an uninitialised lazy parameter: run the module once to initialise it")
        if weight.dim() != 2:
            raise ValueError(f"weight must be a 2-D [N, K] tensor, got shape {tuple(weight.shape)}")
        if weight.dtype not in FP8_DTYPES and weight.dtype not in _FLOAT_DTYPES:
            raise ValueError(
                f"weight of dtype {weight.dtype}: pass an FP8 weight ({_names(FP8_DTYPES)}) with its scale, or a "
                f"{_names(_FLOAT_DTYPES)} weight to quantise (Transformer Engine's weight types); convert other "
                "types yourself if that conversion is what the reference run did"
            )
        if not isinstance(input_dtype, torch.dtype) or input_dtype not in FP8_DTYPES:
            raise ValueError(f"input_dtype={input_dtype!r}: accepted: {_names(FP8_DTYPES)}")
        fp8_format_of(input_dtype)
        if out_dtype is not None and (not isinstance(out_dtype, torch.dtype) or out_dtype not in OUT_DTYPES):
            raise ValueError(f"out_dtype={out_dtype!r}: accepted: None (the input's dtype) or {_names(OUT_DTYPES)}")
        if not isinstance(use_fast_accum, bool):
            raise TypeError(f"use_fast_accum must be a bool, got {type(use_fast_accum).__name__}")
        options = Options.parse(profile, splitk, backend)  # invalid values raise now, not at the first call
        weight_dtype = weight.dtype if weight.dtype in FP8_DTYPES else torch.float8_e4m3fn
        refused = fp8_pair_refusal(input_dtype, weight_dtype)
        if refused is not None:
            raise ValueError(f"input_dtype and the FP8 weight are both float8_e5m2: torch._scaled_mm refuses it ({refused})")
        if out_dtype is not None and not has_algorithm(input_dtype, weight_dtype, out_dtype):
            raise ValueError(
                f"out_dtype={out_dtype} with {input_dtype} input and a {weight_dtype} weight: the reference cuBLASLt "
                "has no such kernel (CUBLAS_STATUS_NOT_SUPPORTED)"
            )
        if weight.dtype in FP8_DTYPES:
            if (weight_scale is None) == (weight_scale_inv is None):
                raise ValueError("an FP8 weight needs exactly one of weight_scale and weight_scale_inv")
            wq = weight.detach().clone()
            if weight_scale_inv is not None:
                scale_inv = _scalar(weight_scale_inv, "weight_scale_inv")
            else:
                assert weight_scale is not None
                scale_inv = reciprocal_scale(_scalar(weight_scale, "weight_scale"))
        else:
            if weight_scale is None or weight_scale_inv is not None:
                raise ValueError("a float weight needs weight_scale (its quantisation scale), not weight_scale_inv")
            ws = _scalar(weight_scale, "weight_scale")
            wq = quantize(weight.detach(), ws, torch.float8_e4m3fn)
            scale_inv = reciprocal_scale(ws)
        _check_inverse(scale_inv, "weight_scale_inv")
        self.register_buffer("weight", wq)
        self.register_buffer("weight_scale_inv", scale_inv.to(wq.device))
        if input_scale is None:
            self.recipe = ScalingRecipe.CURRENT
            self.input_scale = None
            self.input_scale_inv = None
        else:
            self.recipe = ScalingRecipe.DELAYED
            s = _scalar(input_scale, "input_scale").to(wq.device)
            s_inv = reciprocal_scale(s)
            _check_inverse(s_inv, "input_scale_inv")
            self.register_buffer("input_scale", s)
            self.register_buffer("input_scale_inv", s_inv)
        _check_scales(self.weight_scale_inv, self.input_scale, self.input_scale_inv)
        self.input_dtype = input_dtype
        self.out_dtype = out_dtype
        self.use_fast_accum = use_fast_accum
        self.profile = registered_name(profile)
        self.splitk: SplitKSpec = options.splitk
        self.backend: Backend = options.backend  # auto is resolved per call: it depends on the input's device

    @property
    def in_features(self) -> int:
        """K."""
        return int(self.weight.shape[1])

    @property
    def out_features(self) -> int:
        """N."""
        return int(self.weight.shape[0])

    @classmethod
    def from_linear(
        cls,
        linear: torch.nn.Linear,
        *,
        weight_scale: torch.Tensor | float,
        input_scale: torch.Tensor | float | None,
        **kwargs: Any,
    ) -> EmulatedFP8Linear:
        """An emulated copy of a ``torch.nn.Linear`` (or any module with ``weight`` ``[N, K]``).

        The weight is quantised with ``weight_scale``; other keyword arguments are the
        constructor's. The layer is built on the weight's device.

        Raises:
            UnsupportedFeatureError: the Linear has a bias (mmaemu does not model a fused bias).
            TypeError: ``linear`` is not a module with a tensor ``weight``.
            ValueError: an uninitialised lazy weight, a weight that is not 2-D, and what the
                constructor raises.

        Example:
            >>> import torch
            >>> from mmaemu.nn import EmulatedFP8Linear
            >>> lin = torch.nn.Linear(1024, 64, bias=False)
            >>> EmulatedFP8Linear.from_linear(lin, weight_scale=64.0, input_scale=1.0)
            EmulatedFP8Linear(in_features=1024, out_features=64, input=float8_e4m3fn, recipe=delayed, profile='hopper-te', splitk='auto')
        """
        weight = getattr(linear, "weight", None)
        if not isinstance(linear, torch.nn.Module):
            raise TypeError(
                "from_linear takes a torch.nn.Linear (or a module with a [N, K] tensor weight), got "
                f"{type(linear).__name__}"
            )
        if not isinstance(weight, torch.Tensor):
            raise TypeError(
                f"the {type(linear).__name__} has no tensor weight: from_linear takes a torch.nn.Linear (or a module "
                "with a [N, K] tensor weight)"
            )
        if torch.nn.parameter.is_lazy(weight):
            raise ValueError(f"the {type(linear).__name__}'s weight is uninitialised (lazy): run the module once first")
        if weight.dim() != 2:
            raise ValueError(
                f"the {type(linear).__name__}'s weight has shape {tuple(weight.shape)}: from_linear needs a 2-D "
                "[N, K] weight (a Linear's); reshape a convolution's weight yourself if it is a matrix product"
            )
        if getattr(linear, "bias", None) is not None:
            raise UnsupportedFeatureError(
                "the Linear has a bias: mmaemu does not model a fused bias; build the layer from the weight and add "
                "the bias afterwards if that is what the reference computes"
            )
        return cls(weight, weight_scale=weight_scale, input_scale=input_scale, **kwargs)

    def _apply(self, fn: Any, recurse: bool = True) -> EmulatedFP8Linear:
        """``.to(device)`` moves the buffers; a dtype conversion (``.half()``, ``.to(bf16)``) must not
        touch the FP8 weight or the fp32 scales, so their dtypes are restored exactly."""
        before = {name: buf for name, buf in self._buffers.items() if buf is not None}
        super()._apply(fn, recurse)
        for name, old in before.items():
            new = self._buffers[name]
            if new is not None and new.dtype != old.dtype:
                self._buffers[name] = old.to(new.device)
        return self

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        """Refuse buffers of another dtype: ``copy_`` would convert them (a bf16 weight rounded to
        FP8 without its scale, an fp64 scale rounded to fp32) and give other bits silently; buffers of
        another shape or on the meta device (torch would refuse them after loading the others); and
        scales the constructor refuses (:func:`_check_scales`). A refused layer loads nothing."""
        wrong = [
            f"{prefix}{name}: {state_dict[prefix + name].dtype} {tuple(state_dict[prefix + name].shape)} on "
            f"{state_dict[prefix + name].device.type} in the state dict, {buf.dtype} {tuple(buf.shape)} in the layer"
            for name, buf in self._buffers.items()
            if buf is not None and isinstance(state_dict.get(prefix + name), torch.Tensor)
            and (state_dict[prefix + name].dtype != buf.dtype or state_dict[prefix + name].shape != buf.shape
                 or state_dict[prefix + name].device.type == "meta")
        ]
        if wrong:
            error_msgs.append(
                "EmulatedFP8Linear loads its FP8 weight and fp32 scales bit for bit, without conversion, of the "
                "layer's shapes and with values (not on the meta device); convert them as the reference run did "
                "(or build the layer from them): " + "; ".join(wrong)
            )
            return  # nothing of this layer is loaded
        incoming = {name: state_dict.get(prefix + name, buf) for name, buf in self._buffers.items()}
        weight_scale_inv = incoming["weight_scale_inv"]
        if isinstance(weight_scale_inv, torch.Tensor) and all(
                isinstance(t, torch.Tensor) and t.numel() == 1 for name, t in incoming.items() if name != "weight"):
            try:
                _check_scales(weight_scale_inv, incoming.get("input_scale"), incoming.get("input_scale_inv"))
            except ValueError as exc:
                error_msgs.append(f"EmulatedFP8Linear {prefix or '(root)'}: the state dict's scales are refused, as "
                                  f"the constructor would refuse them: {exc}")
                return  # nothing of this layer is loaded
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def _check_activation(self, x: object) -> torch.Tensor:
        """``x`` if it is an activation Transformer Engine would quantise (bf16, fp16 or fp32, ``[..., K]``)."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"EmulatedFP8Linear takes a torch.Tensor, got {type(x).__name__}")
        if x.dtype in FP8_DTYPES:
            raise TypeError("EmulatedFP8Linear quantises its input itself: pass the activation in bf16, fp16 or fp32")
        if x.dtype not in _FLOAT_DTYPES:
            raise TypeError(
                f"EmulatedFP8Linear takes bf16, fp16 or fp32 activations (Transformer Engine's), got {x.dtype}; "
                "convert it (for example x.float()) only if that conversion is what the reference run did"
            )
        if x.dim() == 0:
            raise ValueError(f"EmulatedFP8Linear takes [..., K] activations (K = {self.in_features}), got a 0-d tensor")
        return x

    def quantize_input(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x_fp8, scale_inv)``: the FP8 activation and the ``scale_a`` the GEMM receives.

        Raises:
            TypeError, ValueError: as :meth:`forward`, for ``x`` itself.
        """
        x = self._check_activation(x)
        if self.input_scale is None or self.input_scale_inv is None:
            scale = current_scale(x, self.input_dtype)
            return quantize(x, scale, self.input_dtype), reciprocal_scale(scale)
        return quantize(x, self.input_scale, self.input_dtype), self.input_scale_inv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., K]`` bf16, fp16 or fp32 -> ``[..., N]`` of ``out_dtype`` (default ``x.dtype``).

        NaN, Inf and -0 as in the class description: a NaN in a row makes that output row the
        canonical NaN, infinities saturate to +-max when quantised, exact zero outputs are +0.

        Raises:
            TypeError: ``x`` is not a tensor, or not bf16, fp16 or fp32 (Transformer Engine's
                activation types: an FP8 ``x`` is already quantised, an fp64 ``x`` would be
                rounded to fp32 first, which no TE run does).
            ValueError: a 0-dimensional ``x``.
            MmaemuError: on the CPU, when the CPU flushes subnormals to zero.
            UnsupportedFeatureError: grad mode is on and the layer has a stored input scale
                (delayed scaling; see the class's note), or as :func:`mmaemu.scaled_mm`.
            ReferenceRejectsError, SplitKUnknownError: as :func:`mmaemu.scaled_mm` (for
                example a last dimension that is not K).
        """
        x = self._check_activation(x)
        if self.recipe is ScalingRecipe.DELAYED and torch.is_grad_enabled():
            raise UnsupportedFeatureError(
                "EmulatedFP8Linear with a stored input_scale (delayed scaling) runs with grad mode off: with grad "
                "mode on, Transformer Engine updates a delayed-scaling layer's scales from its amax history when "
                "each forward's fp8_autocast region exits, so its second call would no longer use the stored "
                "scale, and this layer keeps it frozen (as TE does at inference). Run the model under "
                "torch.inference_mode() or torch.no_grad(), or use current scaling (input_scale=None)"
            )
        xq, x_scale_inv = self.quantize_input(x)
        rows = xq.reshape(-1, x.shape[-1])
        y = ops.scaled_mm(
            rows, self.weight.t(), x_scale_inv, self.weight_scale_inv,
            out_dtype=self.out_dtype if self.out_dtype is not None else x.dtype,
            use_fast_accum=self.use_fast_accum, profile=self.profile, splitk=self.splitk, backend=self.backend,
        )
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        splitk = splitk_text(self.splitk)
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"input={str(self.input_dtype).replace('torch.', '')}, recipe={self.recipe.value}, "
            f"profile={self.profile!r}, splitk={splitk!r}"
        )
