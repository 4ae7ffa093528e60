"""Replay of the RTX 4060 recordings that expect an output (the ground truth of the ada profile).

Every ``dot`` record through :func:`mmaemu.model.dot`; every ``gemm`` record through
:func:`mmaemu.scaled_mm` (``via: scaled_mm``) or ``epilogue(accumulate(...))`` (``via: subset``),
at the split the hardware used. Bits must be equal: 0 mismatches.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import mmaemu
from conftest import require
from mmaemu.testing import assert_bitwise_equal
from recordings import RTX4060, RTX4060_PAIRWISE, fp32_scalar, load, splitk_of, torch_dtype


def _records(kind: str, *, error: bool = False, directory: Path = RTX4060) -> list[dict[str, Any]]:
    if not directory.exists():
        return []
    return [r for r in load(directory).by_kind(kind) if ("error" in r["expect"]) == error]


def _ids(records: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in records]


def _expected(rec: dict[str, Any]) -> torch.Tensor:
    exp = rec["expect"]
    t = load(rec["_dir"]).tensor(exp["bits"], exp["dtype"])
    return t.reshape(exp["shape"]) if "shape" in exp else t


DOTS = _records("dot")
GEMMS = _records("gemm")
PAIRWISE = _records("gemm", directory=RTX4060_PAIRWISE)


@pytest.fixture(autouse=True)
def _need_recordings() -> None:
    require(RTX4060)


@pytest.mark.parametrize("rec", DOTS, ids=_ids(DOTS))
def test_dot_record(rec: dict[str, Any]) -> None:
    data = load()
    a = data.tensor(rec["a"], rec["fmt_a"])
    b = data.tensor(rec["b"], rec["fmt_b"])
    c = data.tensor(rec["c"], "float32")
    got = mmaemu.model.dot(a, b, c, preset=rec["preset"])
    assert_bitwise_equal(got, _expected(rec))


def _operands(rec: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    data = load(rec["_dir"])
    return data.tensor(rec["a"], rec["fmt_a"]), data.tensor(rec["b"], rec["fmt_b"])


def _run_gemm(rec: dict[str, Any], backend: str) -> torch.Tensor:
    a, b = _operands(rec)
    sa, sb = fp32_scalar(rec["scale_a_bits"]), fp32_scalar(rec["scale_b_bits"])
    sr = None if rec["scale_result_bits"] is None else fp32_scalar(rec["scale_result_bits"])
    out_dtype = torch_dtype(rec["out_dtype"])
    splitk = splitk_of(rec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mmaemu.UnverifiedSplitWarning)
        if rec["via"] == "subset":
            acc = mmaemu.accumulate(a, b, use_fast_accum=rec["use_fast_accum"], splitk=splitk, profile=rec["profile"],
                                    backend=backend)
            got = mmaemu.epilogue(acc, sa, sb, out_dtype=out_dtype, scale_result=sr)
            if rec.get("out_select") == "diagonal":
                got = torch.diagonal(got).contiguous()
            return got
        call = rec.get("call", {})
        kwargs: dict[str, Any] = {"profile": rec["profile"], "splitk": splitk, "backend": backend}
        if call.get("out_dtype", True) is not False:
            kwargs["out_dtype"] = out_dtype
        if call.get("use_fast_accum", True) is not False:
            kwargs["use_fast_accum"] = rec["use_fast_accum"]
        if sr is not None:
            kwargs["scale_result"] = sr
        if "out_fill" in call:
            out = torch.full((a.shape[0], b.shape[0]), float(call["out_fill"])).to(out_dtype)
            result = mmaemu.scaled_mm(a, b.t(), sa, sb, out=out, **kwargs)
            assert result.data_ptr() == out.data_ptr(), "scaled_mm(out=...) must return out"
            return result
        return mmaemu.scaled_mm(a, b.t(), sa, sb, **kwargs)


@pytest.mark.parametrize("rec", GEMMS, ids=_ids(GEMMS))
def test_gemm_record(rec: dict[str, Any], backend: str) -> None:
    assert_bitwise_equal(_run_gemm(rec, backend), _expected(rec))


@pytest.mark.parametrize("rec", PAIRWISE, ids=_ids(PAIRWISE))
def test_pairwise_record(rec: dict[str, Any], backend: str) -> None:
    """The four outputs that decide the pairwise order at S = 10, 11, 15, 20 (recordings/rtx4060-pairwise)."""
    require(RTX4060_PAIRWISE)
    assert_bitwise_equal(_run_gemm(rec, backend), _expected(rec))


def test_the_pairwise_recordings_are_there() -> None:
    require(RTX4060_PAIRWISE)
    assert sorted(splitk_of(r)[0] for r in PAIRWISE) == [10, 11, 15, 20]  # type: ignore[index]


def test_the_recordings_cover_the_split_families() -> None:
    """The replay above is the evidence for serial and pairwise combination: make sure it is there."""
    schemes = {splitk_of(r)[1] for r in GEMMS if not isinstance(splitk_of(r), int)}  # type: ignore[index]
    parts = {splitk_of(r)[0] for r in GEMMS if not isinstance(splitk_of(r), int)}  # type: ignore[index]
    assert schemes == {"serial", "pairwise"}
    assert {2, 3, 4, 5, 6, 8, 12, 16, 24, 32} <= parts
    assert len(DOTS) == 62 and len(GEMMS) == 1619
