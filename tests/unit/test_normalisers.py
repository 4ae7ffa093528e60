"""One normaliser per argument: every entry point refuses a bad ``splitk`` or ``backend`` with the same words.

``splitk`` goes through :func:`mmaemu._split.parse_splitk` (text: ``splitk_from_text``), ``backend``
through :func:`mmaemu.backends.parse_backend`, format names through :func:`mmaemu.formats.dtype_from_name`,
``profile`` through :func:`mmaemu.platforms.get_profile`. If an entry point grew its own parser, its
message (or its acceptance) would drift from the others' and these tests would fail.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import mmaemu
from mmaemu import nn, ops
from mmaemu.backends import Backend, parse_backend
from mmaemu._cli import main
from mmaemu.formats import FORMAT_NAMES, dtype_from_name
from mmaemu._split import AUTO, Scheme, SplitK, parse_splitk, splitk_from_text, splitk_text

X = torch.full((16, 32), 1.0).to(torch.float8_e4m3fn)
W = torch.full((16, 32), 1.0).to(torch.float8_e4m3fn)
ONE = torch.tensor(1.0)


def _entry_points(**bad: object) -> dict[str, Callable[[], object]]:
    """Each public entry point called with one bad argument (and explicit, valid others)."""
    kwargs = {"splitk": 1, "backend": "reference", **bad}
    return {
        "scaled_mm": lambda: mmaemu.scaled_mm(X, W.t(), ONE, ONE, out_dtype=torch.float32, **kwargs),  # type: ignore[arg-type]
        "explain": lambda: _explain_error(**kwargs),
        "accumulate": lambda: mmaemu.accumulate(X, W, use_fast_accum=True, **kwargs),  # type: ignore[arg-type]
        "ops": lambda: ops.scaled_mm(X, W.t(), ONE, ONE, out_dtype=torch.float32, **kwargs),  # type: ignore[arg-type]
        "emulate": lambda: mmaemu.emulate(**kwargs),  # type: ignore[arg-type]
        "nn": lambda: nn.EmulatedFP8Linear(W, weight_scale_inv=ONE, input_scale=ONE, **kwargs),  # type: ignore[arg-type]
    }


def _explain_error(**kwargs: object) -> None:
    """``explain`` reports what ``scaled_mm`` would raise instead of raising: raise it here."""
    plan = mmaemu.explain(X, W.t(), ONE, ONE, out_dtype=torch.float32, **kwargs)  # type: ignore[arg-type]
    name, message = plan.validation
    raise {"ValueError": ValueError, "TypeError": TypeError, "UnknownNameError": mmaemu.UnknownNameError}[name](message)


def _messages(kind: type[Exception], **bad: object) -> dict[str, str]:
    found = {}
    for name, call in _entry_points(**bad).items():
        with pytest.raises(kind) as info:
            call()
        found[name] = str(info.value)
    return found


@pytest.mark.parametrize("bad", ["Auto", "4,serial", (4, "diagonal"), 0, (0, "serial"), (3, "none"), 2.0])
def test_a_bad_splitk_is_refused_in_the_same_words_everywhere(bad: object) -> None:
    with pytest.raises(ValueError) as expected:
        parse_splitk(bad)
    assert set(_messages(ValueError, splitk=bad).values()) == {str(expected.value)}


@pytest.mark.parametrize(("bad", "kind"), [("gpu", ValueError), ("CPU", ValueError), (1, TypeError), (None, TypeError)])
def test_a_bad_backend_is_refused_in_the_same_words_everywhere(bad: object, kind: type[Exception]) -> None:
    with pytest.raises(kind) as expected:
        parse_backend(bad)  # type: ignore[arg-type]
    assert set(_messages(kind, backend=bad).values()) == {str(expected.value)}


def test_the_command_line_uses_the_same_parsers(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, parser_message in (
        (["explain", "16", "16", "32", "--splitk", "4,diagonal"], _text_error("4,diagonal")),
        (["explain", "16", "16", "32", "--fmt", "e4m3,e3m4"], _format_error("e3m4")),
        (["replay", ".", "--backend", "gpu"], _backend_error("gpu")),
    ):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert parser_message in capsys.readouterr().err


def _text_error(text: str) -> str:
    with pytest.raises(ValueError) as info:
        splitk_from_text(text)
    return str(info.value)


def _format_error(name: str) -> str:
    with pytest.raises(ValueError) as info:
        dtype_from_name(name)
    return str(info.value)


def _backend_error(name: str) -> str:
    with pytest.raises(ValueError) as info:
        parse_backend(name)
    return str(info.value)


@pytest.mark.parametrize("value", [AUTO, 1, (1, "serial"), (4, "serial"), (4, Scheme.PAIRWISE), SplitK(3, Scheme.CONTIGUOUS)])
def test_the_text_form_of_a_split_round_trips(value: object) -> None:
    parsed = parse_splitk(value)
    assert splitk_from_text(splitk_text(value)) == parsed
    assert splitk_text(value) in ("auto", "1") or "," in splitk_text(value)


def test_every_accepted_form_gives_one_value() -> None:
    assert parse_splitk((4, "serial")) == parse_splitk((4, Scheme.SERIAL)) == parse_splitk(SplitK(4, Scheme.SERIAL)) \
        == splitk_from_text(" 4, Serial ")
    assert parse_splitk(1) == parse_splitk((1, "pairwise")) == splitk_from_text("1") == SplitK(1, Scheme.NONE)
    assert parse_backend("triton") is parse_backend(Backend.TRITON) is Backend.TRITON


def test_every_format_name_names_a_format_mmaemu_reads_or_writes() -> None:
    for name, dtype in FORMAT_NAMES.items():
        assert dtype_from_name(name.upper()) is dtype
        assert dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2)
