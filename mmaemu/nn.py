"""Modules that route a model's FP8 GEMMs through mmaemu.

:class:`EmulatedFP8Linear` is an inference-only FP8 Linear layer: it quantises its input as
Transformer Engine does (:mod:`mmaemu.quantization`) and computes ``x @ W.T`` with
``mmaemu::scaled_mm`` (:mod:`mmaemu.ops`), so it runs eagerly, under ``torch.compile`` (one
opaque operator, no graph break) and under ``torch.export`` with the same bits.
"""

from __future__ import annotations

from typing import Any

import torch

from . import ops
from .accumulation import SplitK, SplitKArg
from .errors import UnsupportedFeatureError
from .formats import fp8_format_of
from .platform import Profile, get_profile
from .quantization import ScalingRecipe, current_scale, quantize, reciprocal_scale

__all__ = ["EmulatedFP8Linear"]

_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def _scalar(value: torch.Tensor | float, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must have one element (a tensor-wise scale), got shape {tuple(value.shape)}")
        return value.detach().to(torch.float32).reshape(()).clone()
    return torch.tensor(float(value), dtype=torch.float32)


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
        weight: ``[N, K]``: an FP8 tensor (already quantised) or a float tensor (quantised here
            with ``weight_scale``, as TE casts its weight).
        weight_scale: the weight's quantisation scale (TE's ``scale``); ``weight_scale_inv =
            fp32(1 / weight_scale)``. Required for a float weight; for an FP8 weight pass this or
            ``weight_scale_inv``.
        input_scale: the activation's quantisation scale (TE's ``scale``), or None for current
            scaling.
        weight_scale_inv: the FP8 weight's dequantisation scale, as ``torch._scaled_mm`` takes it.
        input_dtype: FP8 format of the activation (default E4M3, TE's forward format).
        out_dtype: output dtype, or None for the input's dtype.
        use_fast_accum: as ``torch._scaled_mm`` (default True, as TE's forward GEMM).
        profile: reference platform (default ``"hopper-te"``).
        splitk: ``"auto"``, ``1`` or ``(S, scheme)``, as :func:`mmaemu.scaled_mm`.
        backend: ``"auto"``, ``"reference"`` or ``"cpu"``.

    NaN, Inf and -0: an Inf input saturates to +-max like any overflow, a NaN input stays NaN and
    makes its output row the canonical NaN (as on the GPU), -0 inputs quantise to -0 and exact
    zero outputs are +0.

    Raises (at construction): ValueError for a weight that is not 2-D, scales with more than one
    element, a missing scale, an invalid profile, splitk or dtype. At each call, what
    :func:`mmaemu.scaled_mm` raises: ``ReferenceRejectsError`` when K or N is not a multiple of
    16, ``SplitKUnknownError``, and ``UnsupportedFeatureError`` for an input requiring grad with
    grad mode on (run under ``torch.inference_mode()``).

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
        splitk: SplitKArg | str = "auto",
        backend: str = "auto",
    ) -> None:
        super().__init__()
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            raise ValueError("weight must be a 2-D [N, K] tensor")
        fp8_format_of(input_dtype)  # ValueError for a non-FP8 input dtype
        if weight.dtype in _FP8_DTYPES:
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
        self.register_buffer("weight", wq)
        self.register_buffer("weight_scale_inv", scale_inv.to(wq.device))
        if input_scale is None:
            self.recipe = ScalingRecipe.CURRENT
            self.input_scale = None
            self.input_scale_inv = None
        else:
            self.recipe = ScalingRecipe.DELAYED
            s = _scalar(input_scale, "input_scale").to(wq.device)
            self.register_buffer("input_scale", s)
            self.register_buffer("input_scale_inv", reciprocal_scale(s))
        self.input_dtype = input_dtype
        self.out_dtype = out_dtype
        self.use_fast_accum = bool(use_fast_accum)
        self.profile = get_profile(profile).name
        self.splitk = splitk if isinstance(splitk, str) else SplitK.parse(splitk)
        ops.encode_splitk(self.splitk)  # ValueError for an invalid splitk, now rather than at the first call
        self.backend = backend

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

        Example:
            >>> import torch
            >>> from mmaemu.nn import EmulatedFP8Linear
            >>> lin = torch.nn.Linear(1024, 64, bias=False)
            >>> EmulatedFP8Linear.from_linear(lin, weight_scale=64.0, input_scale=1.0)
            EmulatedFP8Linear(in_features=1024, out_features=64, input=float8_e4m3fn, recipe=delayed, profile='hopper-te', splitk='auto')
        """
        if getattr(linear, "bias", None) is not None:
            raise UnsupportedFeatureError(
                "the Linear has a bias: mmaemu does not model a fused bias; build the layer from the weight and add "
                "the bias afterwards if that is what the reference computes"
            )
        return cls(linear.weight, weight_scale=weight_scale, input_scale=input_scale, **kwargs)

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

    def quantize_input(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x_fp8, scale_inv)``: the FP8 activation and the ``scale_a`` the GEMM receives."""
        if self.input_scale is None or self.input_scale_inv is None:
            scale = current_scale(x, self.input_dtype)
            return quantize(x, scale, self.input_dtype), reciprocal_scale(scale)
        return quantize(x, self.input_scale, self.input_dtype), self.input_scale_inv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., K]`` floating point -> ``[..., N]`` of ``out_dtype`` (default ``x.dtype``)."""
        if x.dtype in _FP8_DTYPES:
            raise TypeError("EmulatedFP8Linear quantises its input itself: pass the activation in bf16, fp16 or fp32")
        xq, x_scale_inv = self.quantize_input(x)
        rows = xq.reshape(-1, x.shape[-1])
        y = ops.scaled_mm(
            rows, self.weight.t(), x_scale_inv, self.weight_scale_inv,
            out_dtype=self.out_dtype if self.out_dtype is not None else x.dtype,
            use_fast_accum=self.use_fast_accum, profile=self.profile, splitk=self.splitk, backend=self.backend,
        )
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        splitk = ops.encode_splitk(self.splitk)
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"input={str(self.input_dtype).replace('torch.', '')}, recipe={self.recipe.value}, "
            f"profile={self.profile!r}, splitk={splitk!r}"
        )
