"""The command line: ``python -m mmaemu explain`` prints the plan and exits 0 only for a valid call."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mmaemu._cli import main


def test_explain_quickstart_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "64", "5760", "1920", "--out", "bf16", "--fast"]) == 0
    out = capsys.readouterr().out
    assert "runs:       yes" in out and "S = 1, none, from table" in out and "validated:  yes" in out


def test_explain_unknown_split_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "16", "256", "128", "--fast", "--profile", "hopper-te"]) == 1
    assert "SplitKUnknownError" in capsys.readouterr().out


def test_explain_of_a_refused_shape_prints_the_plan_and_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    """Not the error scaled_mm raises (which points back to explain): the plan, each split-K source's
    finding in order, and what to do; exit status 1, no traceback."""
    assert main(["explain", "16", "256", "128", "--fast", "--profile", "hopper-te"]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("mmaemu plan for M x N x K = 16 x 256 x 128")
    assert "runs:       no, SplitKUnknownError: no recorded evidence decides" in out
    assert 'validated:  no: the call is refused (SplitKUnknownError): no source of splitk="auto" decides' in out
    sources = [line.split(":")[0].strip() for line in lines if line.startswith("    ") and line[4] != " "]
    assert sources == ["table", "workspace0", "live-query", "envelope", "inference"]
    assert "h100-small-k: the workspace is 32 MiB, not 1 MiB" in out  # why the small-K rule does not reach it
    assert "to decide:  Nearest shapes" in out and "splitk=1 only if" in out and "python -m mmaemu record" in out
    assert "See what is known" not in out and "Traceback" not in out


def test_explain_of_an_inferred_shape(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Single-token decode (1 x 11008 x 4096): runs, from inference, not validated, the warning listed."""
    assert main(["explain", "1", "11008", "4096"]) == 0
    out = capsys.readouterr().out
    assert "from inference (not verified)" in out and "h100-k-floor" in out
    assert "validated:  no: the split-K decision (S = 1, from inference) is not verified" in out
    assert "warns:      InferredSplitWarning" in out
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", "1")
    assert main(["explain", "1", "11008", "4096"]) == 1
    out = capsys.readouterr().out
    assert "inference:  off (MMAEMU_SPLITK_STRICT)" in out and "split-K:    undecided" in out


def test_explain_of_a_small_k_shape(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """16 x 256 x 128 under the default profile: below the recorded K range, S = 1 from h100-small-k, warned;
    it raised SplitKUnknownError before the rule, and still does under MMAEMU_SPLITK_STRICT=1."""
    assert main(["explain", "16", "256", "128", "--fast"]) == 0
    out = capsys.readouterr().out
    assert "S = 1, none, from inference (not verified)" in out and "h100-small-k" in out
    assert "below the recorded K range" in out and "warns:      InferredSplitWarning" in out
    monkeypatch.setenv("MMAEMU_SPLITK_STRICT", "1")
    assert main(["explain", "16", "256", "128", "--fast"]) == 1
    assert "SplitKUnknownError" in capsys.readouterr().out


def test_explain_ada_split_and_rejection(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "16", "128", "8192", "--profile", "ada", "--fast"]) == 0
    assert "S = 8, pairwise" in capsys.readouterr().out
    assert main(["explain", "64", "5760", "1920", "--out", "e5m2", "--fast"]) == 1
    assert "CUBLAS_STATUS_NOT_SUPPORTED" in capsys.readouterr().out


def test_python_dash_m_entry_point() -> None:
    done = subprocess.run([sys.executable, "-m", "mmaemu", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("mmaemu ")


# -- shapes: MxNxK everywhere; a shape this machine cannot hold is a usage error; explain allocates nothing ------


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI in-process; it must exit 2 through argparse, with the reason on stderr."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2, argv
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err, err
    return err


def test_explain_of_a_shape_no_machine_here_could_hold_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: planned with meta tensors, which explain refuses: a ValueError plan and exit 1."""
    err = _usage_error(["explain", "1000000", "1000000", "1000000"], capsys)
    assert "1000000 x 1000000 x 1000000" in err and "memory" in err and "meta" not in err


def test_explain_plans_a_huge_shape_without_allocating(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A machine with memory enough for the call (claimed here): the real plan, not a meta-tensor refusal.

    2**21 x 2**21 x 2**21 has 8 TiB of FP8 operands, more than any CPU here can even reserve, so the plan
    can only come from operands that are never allocated. Old code: "runs: no, ValueError" (meta tensors).
    """
    monkeypatch.setattr("mmaemu._cli_options._machine_memory", lambda: 1 << 62)
    code = main(["explain", str(1 << 21), str(1 << 21), str(1 << 21), "--fast"])
    out = capsys.readouterr().out
    assert out.startswith("mmaemu plan for M x N x K = 2097152 x 2097152 x 2097152 -> bfloat16")
    assert "ValueError" not in out and "meta" not in out and "note:" not in out
    assert ("runs:       yes" in out) == (code == 0) and ("backend:" in out) == (code == 0)


@pytest.mark.parametrize("argv", [
    ["64", "5760", "1920", "--fast"],
    ["16", "256", "128", "--fast"],                      # SplitKUnknownError, with the sources' findings
    ["1", "11008", "4096"],                              # from inference, warns
    ["16", "128", "8192", "--profile", "ada", "--fast"],  # S = 8, pairwise
    ["64", "5760", "1920", "--out", "e5m2"],             # cuBLASLt has no algorithm
    ["16", "16", "10"],                                  # K % 16 != 0
    ["16", "10", "16"],                                  # N % 16 != 0
    ["16", "16", "16", "--fmt", "e5m2,e5m2"],            # torch refuses the pair
    ["0", "16", "16"],                                   # an empty call
    ["32", "64", "512", "--splitk", "4,serial"],
    ["32", "64", "512", "--splitk", "8,contiguous"],     # more empty parts than accepted
])
def test_explain_plan_is_the_plan_of_real_cpu_operands(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """The command's plan, from operands it never allocates, is mmaemu.explain's plan of real CPU tensors."""
    import torch

    import mmaemu
    from mmaemu._cli import build_parser
    from mmaemu.formats import dtype_from_name

    args = build_parser().parse_args(["explain", *argv])
    code = main(["explain", *argv])
    got = capsys.readouterr().out
    mat1 = torch.zeros(args.M, args.K).to(args.fmt[0])
    mat2 = torch.zeros(args.N, args.K).to(args.fmt[1]).t()
    one = torch.tensor(1.0)
    want = mmaemu.explain(mat1, mat2, one, one, out_dtype=dtype_from_name(args.out), use_fast_accum=args.fast,
                          profile=args.profile, splitk=args.splitk, backend="auto")
    assert got == str(want) + "\n" and code == (0 if want.ok else 1)


def test_bench_reports_the_shape_in_the_order_given(capsys: pytest.CaptureFixture[str]) -> None:
    """``--shape 16x32x10`` (M = 16, N = 32, K = 10: K is not a multiple of 16) is refused as 16x32x10.

    Old code: "the call of shape 16x10x32".
    """
    pytest.importorskip("numba")
    assert main(["bench", "--shape", "16x32x10", "--repeat", "1"]) == 2
    err = capsys.readouterr().err
    assert "shape 16x32x10 " in err and "16x10x32" not in err and "(16x10)" in err  # torch's message: mat1 is M x K


def test_bench_of_a_shape_no_machine_here_could_hold_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: a RuntimeError traceback from the allocation (exit 1)."""
    err = _usage_error(["bench", "--shape", "1000000x1000000x1000000"], capsys)
    assert "1000000x1000000x1000000" in err and "memory" in err
