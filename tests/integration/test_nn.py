"""EmulatedFP8Linear and TE-style quantisation: the layer returns mmaemu.scaled_mm's bits on the same operands.

Expected values come from ``mmaemu.scaled_mm`` called directly on operands quantised here by
hand (scale in fp32, saturate, round to nearest even), compared bit for bit.
"""

from __future__ import annotations

import pytest
import torch

import mmaemu
from mmaemu.nn import EmulatedFP8Linear
from mmaemu.quantization import FP32_MAX, current_scale, quantize, reciprocal_scale, scale_from_amax
from mmaemu.testing import assert_bitwise_equal

E4M3 = torch.float8_e4m3fn
# (M, N, K) = (16, 64, 1024): a row of both H100 tables (hopper, hopper-te), S = 1.
N, K = 64, 1024


def _by_hand(x: torch.Tensor, scale: float, dtype: torch.dtype = E4M3) -> torch.Tensor:
    """The reference quantisation, written independently of mmaemu.quantization."""
    limit = 448.0 if dtype == E4M3 else 57344.0
    return (x.to(torch.float32) * torch.tensor(scale, dtype=torch.float32)).clamp(-limit, limit).to(dtype)


def _inv(scale: float) -> torch.Tensor:
    return torch.tensor(1.0, dtype=torch.float32) / torch.tensor(scale, dtype=torch.float32)


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    w = (torch.randn(N, K, generator=g) * 0.05).to(torch.bfloat16)
    x = (torch.randn(2, 8, K, generator=g) * 3).to(torch.bfloat16)
    x[0, 1, :5] = torch.tensor([1000.0, -1000.0, float("inf"), -0.0, 0.0])  # saturation, Inf, signed zeros
    return w, x


def test_layer_equals_scaled_mm_on_the_same_operands(data: tuple[torch.Tensor, torch.Tensor], backend: str) -> None:
    w, x = data
    ws, xs = 3000.0, 37.0  # not powers of two: the fp32 product rounds
    layer = EmulatedFP8Linear(w, weight_scale=ws, input_scale=xs, backend=backend)
    with torch.inference_mode():
        y = layer(x)
    xq = _by_hand(x, xs).reshape(-1, K)
    wq = _by_hand(w, ws)
    want = mmaemu.scaled_mm(xq, wq.t(), _inv(xs), _inv(ws), out_dtype=torch.bfloat16, use_fast_accum=True,
                            profile="hopper-te")
    assert y.shape == (2, 8, N) and y.dtype == torch.bfloat16
    assert_bitwise_equal(y.reshape(-1, N), want)
    assert_bitwise_equal(layer.weight, wq)
    assert float(xq.float().abs().max()) == 448.0  # the saturated entries are in the operands


def test_from_linear_and_fp8_weight_give_the_same_layer(data: tuple[torch.Tensor, torch.Tensor]) -> None:
    w, x = data
    lin = torch.nn.Linear(K, N, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(w)
    a = EmulatedFP8Linear.from_linear(lin, weight_scale=3000.0, input_scale=37.0, profile="hopper")
    b = EmulatedFP8Linear(_by_hand(w, 3000.0), weight_scale_inv=_inv(3000.0), input_scale=37.0, profile="hopper")
    c = EmulatedFP8Linear(_by_hand(w, 3000.0), weight_scale=3000.0, input_scale=torch.tensor([37.0]), profile="hopper")
    with torch.inference_mode():
        ya, yb, yc = a(x), b(x), c(x)
    assert_bitwise_equal(ya, yb)
    assert_bitwise_equal(ya, yc)


def test_current_scaling_uses_the_inputs_amax(data: tuple[torch.Tensor, torch.Tensor]) -> None:
    w, _ = data
    x = (torch.randn(16, K, generator=torch.Generator().manual_seed(3)) * 5).to(torch.bfloat16)
    x[3, 3] = float("nan")  # ignored by the amax; its output row is the canonical NaN
    layer = EmulatedFP8Linear(w, weight_scale=3000.0, input_scale=None, out_dtype=torch.float32, profile="hopper-te")
    with torch.inference_mode():
        y = layer(x)
    finite = x.float().nan_to_num(0.0).abs()
    scale = float(torch.tensor(448.0) / finite.max())
    want = mmaemu.scaled_mm(_by_hand(x, scale), _by_hand(w, 3000.0).t(), _inv(scale), _inv(3000.0),
                            out_dtype=torch.float32, use_fast_accum=True, profile="hopper-te")
    assert_bitwise_equal(y, want)
    assert torch.isnan(y[3]).all() and not torch.isnan(y[2]).any()


def test_explicit_splitk_and_undecided_shapes() -> None:
    g = torch.Generator().manual_seed(11)
    w = torch.randn(48, 256, generator=g).to(torch.bfloat16)  # (M, N, K) = (16, 48, 256): in no H100 table
    x = torch.randn(16, 256, generator=g).to(torch.bfloat16)
    with torch.inference_mode():
        with pytest.raises(mmaemu.SplitKUnknownError):
            EmulatedFP8Linear(w, weight_scale=100.0, input_scale=10.0)(x)
        y = EmulatedFP8Linear(w, weight_scale=100.0, input_scale=10.0, splitk=1)(x)
        y2 = EmulatedFP8Linear(w, weight_scale=100.0, input_scale=10.0, splitk=(2, "contiguous"))(x)
    want = mmaemu.scaled_mm(_by_hand(x, 10.0), _by_hand(w, 100.0).t(), _inv(10.0), _inv(100.0),
                            out_dtype=torch.bfloat16, use_fast_accum=True, profile="hopper-te", splitk=1)
    assert_bitwise_equal(y, want)
    want2 = mmaemu.scaled_mm(_by_hand(x, 10.0), _by_hand(w, 100.0).t(), _inv(10.0), _inv(100.0),
                             out_dtype=torch.bfloat16, use_fast_accum=True, profile="hopper-te",
                             splitk=(2, "contiguous"))
    assert_bitwise_equal(y2, want2)


def test_dtype_conversion_keeps_fp8_weight_and_fp32_scales(data: tuple[torch.Tensor, torch.Tensor]) -> None:
    w, x = data
    layer = EmulatedFP8Linear(w, weight_scale=3000.0, input_scale=37.0)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    layer.to(torch.bfloat16).half().float()
    for name, value in layer.state_dict().items():
        assert_bitwise_equal(value, before[name])
    fresh = EmulatedFP8Linear(torch.zeros(N, K), weight_scale=1.0, input_scale=1.0)
    fresh.load_state_dict(before)
    with torch.inference_mode():
        assert_bitwise_equal(fresh(x), layer(x))


def test_refusals() -> None:
    w = torch.randn(N, K)
    with pytest.raises(mmaemu.UnsupportedFeatureError):
        EmulatedFP8Linear.from_linear(torch.nn.Linear(K, N), weight_scale=1.0, input_scale=1.0)
    with pytest.raises(ValueError):
        EmulatedFP8Linear(w, input_scale=1.0)  # a float weight needs its scale
    with pytest.raises(ValueError):
        EmulatedFP8Linear(w.to(E4M3), input_scale=1.0)  # an FP8 weight needs one of its scales
    with pytest.raises(ValueError):
        EmulatedFP8Linear(w, weight_scale=torch.ones(2), input_scale=1.0)
    with pytest.raises(ValueError):
        EmulatedFP8Linear(w, weight_scale=1.0, input_scale=1.0, splitk=3)
    with pytest.raises(ValueError):
        EmulatedFP8Linear(w, weight_scale=1.0, input_scale=1.0, profile="h100")
    layer = EmulatedFP8Linear(w, weight_scale=1.0, input_scale=1.0)
    x = torch.randn(16, K, requires_grad=True)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="grad mode"):
        layer(x)
    with pytest.raises(TypeError):
        layer(x.detach().to(E4M3))
    current = EmulatedFP8Linear(w, weight_scale=1.0, input_scale=None)
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="inference-only"):
        current(x)
    with torch.inference_mode(), pytest.raises(mmaemu.ReferenceRejectsError, match="divisible by 16"):
        EmulatedFP8Linear(torch.randn(N, 40), weight_scale=1.0, input_scale=1.0, splitk=1)(torch.randn(16, 40))


def test_delayed_scaling_is_refused_under_grad_mode() -> None:
    """TE updates a delayed-scaling layer's scales after each forward under grad mode (the scale
    this layer keeps frozen): any input is refused then, even one that needs no grad; with grad
    mode off (no_grad or inference_mode) the same call runs, with the same bits either way."""
    w = torch.randn(N, K, generator=torch.Generator().manual_seed(5))
    x = torch.randn(16, K, generator=torch.Generator().manual_seed(6))
    delayed = EmulatedFP8Linear(w, weight_scale=64.0, input_scale=32.0, splitk=1)
    assert torch.is_grad_enabled() and not x.requires_grad
    with pytest.raises(mmaemu.UnsupportedFeatureError, match="inference_mode"):
        delayed(x)
    with torch.no_grad():
        a = delayed(x)
    with torch.inference_mode():
        b = delayed(x)
    assert_bitwise_equal(a, b)
    current = EmulatedFP8Linear(w, weight_scale=64.0, input_scale=None, splitk=1)  # no stored state: allowed
    current(x)


# ---- quantisation -------------------------------------------------------------------------


def test_quantize_rounds_to_nearest_even_and_saturates() -> None:
    # E4M3 near 1: step 1/8. Ties go to the even code; beyond 448 (and Inf) saturates.
    x = torch.tensor([1.0625, 1.1875, -1.0625, 464.0, 480.0, 1e30, float("inf"), float("-inf"), -0.0, 2.0**-10])
    got = quantize(x, 1.0).float().tolist()
    assert got == [1.0, 1.25, -1.0, 448.0, 448.0, 448.0, 448.0, -448.0, -0.0, 0.0]
    assert quantize(torch.tensor([-0.0]), 5.0).view(torch.uint8).item() == 0x80
    assert torch.isnan(quantize(torch.tensor([float("nan")]), 1.0).float()).all()
    e5m2 = quantize(torch.tensor([60000.0, float("inf"), 1.125]), 1.0, torch.float8_e5m2).float().tolist()
    assert e5m2 == [57344.0, 57344.0, 1.0]


def test_quantize_multiplies_in_fp32() -> None:
    # bf16 input times an fp32 scale: the product is rounded to fp32, not to bf16, before the cast.
    # 1.0625 * (1 + 2^-20) is just above the E4M3 tie 1.0625 in fp32 (-> 1.125), exactly on it in bf16 (-> 1.0).
    x = torch.tensor([1.0625], dtype=torch.bfloat16)
    scale = torch.tensor(1.0 + 2.0**-20, dtype=torch.float32)
    assert quantize(x, scale).float().item() == 1.125
    assert (x * scale).to(E4M3).float().item() == 1.0  # what a bf16 product would give
    assert_bitwise_equal(quantize(x, scale), _by_hand(x, float(scale)))


def test_scales() -> None:
    assert scale_from_amax(7.0).item() == 64.0
    assert scale_from_amax(7.0, margin=2).item() == 16.0
    assert scale_from_amax(float("inf"), previous=5.0).item() == 5.0
    assert scale_from_amax(float("nan"), previous=5.0).item() == 5.0
    assert scale_from_amax(1e-45).item() == FP32_MAX
    assert scale_from_amax(57344.0 / 4, torch.float8_e5m2).item() == 4.0
    assert current_scale(torch.tensor([float("inf"), 1.0])).item() == 1.0
    assert current_scale(torch.empty(0)).item() == 1.0
    assert current_scale(torch.tensor([3.0], dtype=torch.bfloat16)).item() == pytest.approx(448.0 / 3.0)
    assert_bitwise_equal(reciprocal_scale(3.0), torch.tensor(1.0) / torch.tensor(3.0))


@pytest.mark.parametrize("name,value", [("input_scale", 0.0), ("input_scale", float("nan")), ("input_scale", -2.0),
                                        ("input_scale", float("inf")), ("weight_scale_inv", -1.0),
                                        ("weight_scale_inv", 0.0), ("input_scale_inv", 0.3)])
def test_load_state_dict_refuses_what_the_constructor_refuses(name: str, value: float) -> None:
    """Old code: load_state_dict loaded an input_scale of 0 or NaN, a weight_scale_inv of -1 and an
    input_scale_inv that is not 1 / input_scale; the constructor refused each. The refused layer keeps its buffers."""
    layer = EmulatedFP8Linear(torch.randn(16, 32), weight_scale=2.0, input_scale=4.0)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    state = dict(before)
    state[name] = torch.tensor(value)
    with pytest.raises(RuntimeError, match=f"scales are refused, as the constructor would refuse them: {name}"):
        layer.load_state_dict(state)
    for k, v in layer.state_dict().items():
        assert torch.equal(v.reshape(-1).view(torch.uint8), before[k].reshape(-1).view(torch.uint8)), k
    ctor = {"input_scale": {"input_scale": value}, "weight_scale_inv": {"weight_scale_inv": value},
            "input_scale_inv": None}[name]
    if ctor is not None:  # the same values through the constructor: the same refusal
        weight = layer.weight
        kwargs = {"weight_scale_inv": 0.5, "input_scale": 4.0, **ctor}
        with pytest.raises(ValueError, match=name):
            EmulatedFP8Linear(weight, **kwargs)


def test_load_state_dict_takes_a_consistent_state() -> None:
    layer = EmulatedFP8Linear(torch.randn(16, 32), weight_scale=2.0, input_scale=4.0)
    other = EmulatedFP8Linear(torch.randn(16, 32), weight_scale=8.0, input_scale=0.5)
    layer.load_state_dict(other.state_dict())
    assert float(layer.input_scale_inv) == 2.0 and float(layer.weight_scale_inv) == 0.125  # type: ignore[arg-type]


@pytest.mark.parametrize("name,value", [("weight_scale_inv", torch.tensor([0.5, 5.0])), ("weight", torch.zeros(8, 32)),
                                        ("input_scale", torch.tensor(4.0, device="meta"))])
def test_load_state_dict_of_another_shape_or_on_meta_loads_nothing(name: str, value: torch.Tensor) -> None:
    """Found by a hostile pass: a scale of another shape made torch refuse after the weight was replaced."""
    layer = EmulatedFP8Linear(torch.randn(16, 32), weight_scale=2.0, input_scale=4.0)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    other = EmulatedFP8Linear(torch.randn(16, 32) * 3, weight_scale=8.0, input_scale=4.0).state_dict()
    state = {**other, name: value.to(before[name].dtype) if value.device.type != "meta" else value}
    with pytest.raises(RuntimeError, match="bit for bit"):
        layer.load_state_dict(state)
    for k, v in layer.state_dict().items():
        assert torch.equal(v.reshape(-1).view(torch.uint8), before[k].reshape(-1).view(torch.uint8)), k
