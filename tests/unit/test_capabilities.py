"""The capability table (``mmaemu/backends/_capabilities.py``): ``parse_backend``, ``native`` and ``supports``."""

from __future__ import annotations

import pytest
import torch

from mmaemu.backends import Backend, _cpu as cpu
from mmaemu.backends._capabilities import CONCRETE, EXECUTORS, native, parse_backend
from mmaemu.errors import UnknownNameError
from mmaemu.presets import ZOO, presets


def test_parse_backend_takes_names_and_members_and_refuses_the_rest() -> None:
    for member in Backend:
        assert parse_backend(member.value) is member
        assert parse_backend(member) is member
    with pytest.raises(UnknownNameError, match="'gpu' is not a backend; accepted: 'auto', "):
        parse_backend("gpu")
    with pytest.raises(ValueError):  # an UnknownNameError is a ValueError too
        parse_backend("CPU")  # names are lower case, as torch's device names
    with pytest.raises(TypeError, match="backend must be a string, not int"):
        parse_backend(3)  # type: ignore[arg-type]


def test_every_concrete_backend_has_an_executor_and_auto_has_none() -> None:
    assert set(EXECUTORS) == set(CONCRETE) and Backend.AUTO not in CONCRETE
    for backend, executor in EXECUTORS.items():
        assert executor.backend is backend


@pytest.mark.parametrize("dtypes", [(), (torch.float16,), (torch.bfloat16,), (torch.float32,)],
                         ids=["fp8", "fp16", "bf16", "tf32"])
def test_native_is_each_executors_own_answer(dtypes: tuple[torch.dtype, ...]) -> None:
    """The table gathers the backends' facts and adds none: ``native`` is the executor's ``expresses``."""
    for backend, executor in EXECUTORS.items():
        for preset in [*presets().values(), *ZOO.values()]:
            assert native(backend, preset, dtypes) is bool(executor.expresses(preset, dtypes)), (backend, preset.name)
    hopper = presets()["hopper"]
    assert native(Backend.REFERENCE, hopper, dtypes)  # the reference backend computes every preset
    assert not native(Backend.AUTO, hopper)


def test_the_capability_table() -> None:
    """What ``supports`` answers, and what it refuses (the table behind auto, info and the test fixture)."""
    from mmaemu.backends import supports
    from mmaemu.presets import B200_MMA_SYNC, HOPPER

    ref = supports("reference", HOPPER, (torch.float8_e4m3fn, torch.float8_e5m2), "cpu")
    assert ref.usable and ref.native and bool(ref)
    assert not supports("reference", HOPPER, (), "meta")
    assert not supports(Backend.CPU, HOPPER, (), "cuda")  # CPU tensors only
    bad = supports("cpu", HOPPER, (torch.float64,), "cpu")
    assert not bad and "FP8" in bad.reason and "tf32" in bad.reason
    from mmaemu.presets import instruction_preset

    zoo = instruction_preset("hopper", torch.bfloat16)
    assert supports("reference", zoo, (torch.bfloat16,), "cpu").native
    if cpu.available()[0]:
        assert supports("cpu", zoo, (torch.bfloat16,), "cpu").native
    triton_zoo = supports("triton", zoo, (torch.bfloat16,), "cpu")
    if triton_zoo.usable:  # under TRITON_INTERPRET=1, with Triton installed
        assert not triton_zoo.native and "do not decode bf16: such calls are delegated" in triton_zoo.reason
    assert not triton_zoo.native
    if cpu.available()[0]:
        assert supports("cpu", HOPPER, (), "cpu").native
        delegated = supports("cpu", B200_MMA_SYNC, (), "cpu")  # rounds to nearest: the reference backend runs it
        assert delegated.usable and not delegated.native and "delegated to the reference backend" in delegated.reason
    with pytest.raises(ValueError, match="is not a backend"):
        supports("gpu", HOPPER, (), "cpu")
    with pytest.raises(TypeError, match="backend must be a string"):
        supports(3, HOPPER, (), "cpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is not a torch device"):
        supports("cpu", HOPPER, (), "nonsense")
