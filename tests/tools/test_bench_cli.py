"""``python -m mmaemu bench`` checks bits before timing and writes its figures (small shapes here)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mmaemu import _bench as bench
from mmaemu._cli import main


def test_bench_small_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("numba")
    out = tmp_path / "bench.json"
    assert main(["bench", "--shape", "16x32x512", "--repeat", "1", "--configs", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    row = data["results"][0]
    assert row["shape"] == [16, 32, 512] and row["cpu_s"] > 0 and row["reference_s"] > 0  # M, N, K as given
    assert row["macs"] == 16 * 32 * 512
    # the command that measured the figures, as docs/performance.md quotes it beside them
    assert data["command"] == f"python -m mmaemu bench --shape 16x32x512 --repeat 1 --configs --json {out}"
    assert data["numba"] and data["threads"] >= 1
    assert [c["config"] for c in row["configs"]] == [c.label for c in bench.CONFIGS[1:]]
    printed = capsys.readouterr().out
    assert "reference / cpu" in printed and "not timed" not in printed  # K = 512: every config runs
    assert "M, N, K = 16, 32, 512 (" in printed and "M, K, N" not in printed


def test_bench_no_native_skips_only_torchs_scaled_mm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``--no-native``: torch's native ``_scaled_mm`` is never called; the fp32 matmul comparator still is."""
    pytest.importorskip("numba")
    import torch

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("torch._scaled_mm was called under --no-native")

    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    out = tmp_path / "bench.json"
    assert main(["bench", "--shape", "16x32x64", "--repeat", "1", "--no-native", "--json", str(out)]) == 0
    row = json.loads(out.read_text())["results"][0]
    assert row["torch_native_scaled_mm_s"] is None and row["torch_native_scaled_mm_note"] == "not timed (--no-native)"
    assert row["torch_fp32_matmul_s"] > 0 and row["cpu_over_fp32_matmul"] > 0
    assert "not timed (--no-native)" in capsys.readouterr().out


def test_bench_block_scaled_against_scaled_mm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--block-scaled``: the kernel model's cpu time over scaled_mm's on the same shape, measured in one run, after its
    bits are checked against the reference backend; ``--block-scaled KERNEL`` names another model."""
    pytest.importorskip("numba")
    out = tmp_path / "bench.json"
    assert main(["bench", "--shape", "16x64x256", "--repeat", "1", "--no-native", "--block-scaled", "--json",
                 str(out)]) == 0
    block = json.loads(out.read_text())["results"][0]["block_scaled"]
    assert block["kernel"] == "deepgemm-sm90" and block["cpu_s"] > 0 and block["scaled_mm_cpu_s"] > 0
    assert block["over_scaled_mm"] == block["cpu_s"] / block["scaled_mm_cpu_s"]
    assert "block-scaled as deepgemm-sm90" in capsys.readouterr().out
    assert "--block-scaled deepgemm-sm90 --json" in json.loads(out.read_text())["command"]  # the command that measured it
    sm89 = "triton-block-sm89-mma-bk64-nofpfusion@triton3.3-3.9"
    assert main(["bench", "--shape", "16x64x256", "--repeat", "1", "--no-native", "--block-scaled", sm89, "--json",
                 str(out)]) == 0
    assert json.loads(out.read_text())["results"][0]["block_scaled"]["kernel"] == sm89
    with pytest.raises(SystemExit):
        main(["bench", "--block-scaled", "no-such-kernel"])
    assert "is not a block-scaled kernel model" in capsys.readouterr().err


def test_bench_refuses_to_time_unequal_bits(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A backend whose bits differ from the reference's is never timed: exit 1, the reason on stderr."""
    pytest.importorskip("numba")
    from mmaemu.backends import _cpu as cpu

    real = cpu.accumulate
    monkeypatch.setattr(cpu, "accumulate", lambda *a: real(*a)._replace(values=real(*a).values * 2))
    assert main(["bench", "--shape", "16x16x32", "--repeat", "1"]) == 1
    captured = capsys.readouterr()
    assert "bits differ" in captured.err and "cpu backend" not in captured.out.split("median times:")[-1]


def _cache_snapshot(cache: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under a numba cache directory, by relative path: its inode, modification time and bytes.

    Numba writes a cache file to a temporary name and renames it, so a rewrite with the same bytes
    still changes the inode and the modification time.
    """
    return {str(p.relative_to(cache)): (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(cache.rglob("*")) if p.is_file()}


def test_first_call_latency_reports_cold_and_warm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cold process compiles into an empty numba cache; the warm one loads from it and compiles nothing.

    Checked on the cache directory, not on the times: the warm process leaves the cache's files
    (the index and the machine code) as the cold one wrote them, neither rewritten nor added to.
    """
    pytest.importorskip("numba")
    snapshots: list[tuple[dict[str, tuple[int, int, bytes]], dict[str, tuple[int, int, bytes]]]] = []
    real_run = subprocess.run

    def run(*args: Any, **kwargs: Any) -> Any:
        cache = Path(kwargs["env"]["NUMBA_CACHE_DIR"])
        before = _cache_snapshot(cache)
        proc = real_run(*args, **kwargs)
        snapshots.append((before, _cache_snapshot(cache)))
        return proc

    monkeypatch.setattr(bench.subprocess, "run", run)
    latency = bench.first_call_latency()
    assert set(latency) == {"cold_s", "warm_s"}
    assert all(isinstance(v, float) and v > 0 for v in latency.values())
    assert len(snapshots) == 2
    (cold_before, cold_after), (warm_before, warm_after) = snapshots
    assert cold_before == {}  # the cold process starts from an empty cache
    assert any(name.endswith(".nbi") for name in cold_after) and any(name.endswith(".nbc") for name in cold_after)
    assert warm_before == cold_after
    assert warm_after == warm_before  # the warm process compiled nothing: every kernel came from the disk cache


def test_zoo_rows_run_at_the_last_shape_only(capsys: pytest.CaptureFixture[str]) -> None:
    """One run gives both bars: the base rows at every shape, the zoo table at the last one."""
    pytest.importorskip("numba")
    report = bench.run([(16, 16, 64), (16, 32, 32)], repeat=1, configs=False, first_call=False, json_path=None, zoo=True)
    first, last = report["results"]  # type: ignore[misc]
    assert "zoo" not in first and [r["preset"] for r in last["zoo"]][:1] == ["volta"]
    assert all(r["over_e4m3"] > 0 for r in last["zoo"])
    assert report["cpu"] and report["cpu_fp8_kernel"] in ("avx512 (mmaemu.backends._cpu_fp8)", "portable")
    assert "zoo: cpu accumulate at M, N, K = 16, 32, 32" in capsys.readouterr().out
