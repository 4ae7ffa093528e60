"""``python -m mmaemu record``: turn a CUDA GPU into a recorded reference platform.

The recorder runs four sections inside a fixed time budget and writes a recording directory
(:mod:`mmaemu.recording`) after each one, so that a run stopped by its budget keeps what it has:

1. **environment**: GPU, SM count, compute capability, driver, CUDA, cuBLASLt version and the sha256 of
   the library, torch, Transformer Engine (if installed);
2. **heuristics**: cuBLASLt's decision (S, reduction scheme, customOption, workspace needed) with torch's
   ``_scaled_mm`` descriptor (:mod:`mmaemu.platforms._cublaslt`) for a grid of shapes (:mod:`mmaemu.recording._grid`): a dense grid of M x M*N levels x
   K around the split region (for the envelope), random held-out shapes, and common model projections;
   every workspace, output dtype, format pair, fast and slow;
3. **probes**: the numerics probes of :mod:`mmaemu.recording._probes` (arithmetic, slow interval, split-K on shapes
   the heuristic splits);
4. **calls**: live ``torch._scaled_mm`` calls, split and unsplit, random and adversarial data, K not a
   multiple of 128 among them, each run twice; inputs from a seed, the outputs' sha256, the full output
   of a sample, the heuristic's decision for each.

Everything that needs the GPU goes through a :class:`~mmaemu.recording._device.Device`
(:mod:`mmaemu.recording._device`); the sections share one time budget (:mod:`mmaemu.recording._budget`).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from ..errors import RecordUnavailableError
from ..formats import Fp8Format, OutFormat, fp8_format_of
from ..platforms._cublaslt import HeuristicQuery
from ..platforms._table import (
    FP8_FORMATS,
    KEY_DESCRIPTION,
    OUT_FORMATS,
    TABLE_FORMAT,
    WS_BYTES,
    Setting,
    setting_statistics,
    table_arrays,
    table_codes,
)
from ._bias import BiasResult, bias_document, bias_probes
from ._rowwise import RowwiseResult, rowwise_document, rowwise_probes
from ._budget import Budget
from ._device import CudaDevice, Device, default_torch_workspace
from ._writer import RecordingWriter
from ._records import (
    CallRecord,
    DataKind,
    Part,
    Section,
    SectionStatus,
    fp32_bits,
    fp32_scalar,
    output_sha256,
)
from ._grid import GRIDS, Grid
from ._inputs import call_inputs, inputs_sha256
from ._probes import (
    CORNER,
    ProbeInput,
    ProbeResult,
    ProbeStage,
    analyse,
    split_probe,
    unsplit_probes,
)
from ._verdict import probe_document, with_sm120_note

__all__ = ["Recorder", "check_out", "main_record", "record"]

# --------------------------------------------------------------------------------------------------
# The recorder
# --------------------------------------------------------------------------------------------------


@dataclass
class _Rows:
    m: list[int] = field(default_factory=list)
    n: list[int] = field(default_factory=list)
    k: list[int] = field(default_factory=list)
    setting: list[int] = field(default_factory=list)
    S: list[int] = field(default_factory=list)
    custom: list[int] = field(default_factory=list)
    reduction: list[int] = field(default_factory=list)
    workspace: list[int] = field(default_factory=list)
    algo: list[int] = field(default_factory=list)
    tile: list[int] = field(default_factory=list)
    part: list[int] = field(default_factory=list)
    index: dict[tuple[int, int, int, int], int] = field(default_factory=dict)


class Recorder:
    """Records a GPU (through a :class:`Device`) into a recording directory."""

    def __init__(self, device: Device, out: str | Path, *, grid: Grid, budget: Budget,
                 torch_workspace: int | None = None) -> None:
        """Prepare; nothing runs until :meth:`run`."""
        self.device = device
        self.out = Path(out)
        self.grid = grid
        self.budget = budget
        self.torch_workspace = default_torch_workspace() if torch_workspace is None else int(torch_workspace)
        if self.torch_workspace not in WS_BYTES:
            raise ValueError(f"torch workspace {self.torch_workspace} is not one of the recorded workspaces {WS_BYTES}")
        self._rows = _Rows()
        self._rejects: set[tuple[str, str, str]] = set()
        self._failures: dict[str, int] = {}

    # -- heuristics -----------------------------------------------------------------------------------

    def _query(self, m: int, n: int, k: int, fa: Fp8Format, fb: Fp8Format, out: OutFormat, fast: bool, ws: int,
               part: Part) -> tuple[int, int, int] | None:
        """Query (once per key) and keep the row; returns (S, custom, reduction) or None when rejected."""
        setting = Setting(fa, fb, out, fast, ws).code
        key = (setting, m, n, k)
        rows = self._rows
        if key in rows.index:
            i = rows.index[key]
            return rows.S[i], rows.custom[i], rows.reduction[i]
        r = self.device.query(HeuristicQuery(m=m, n=n, k=k, dtype_a=fa.dtype, dtype_b=fb.dtype, out_dtype=out.dtype,
                                             use_fast_accum=fast, workspace_bytes=ws))
        if not r.ok:
            if r.status == "rejected":
                self._rejects.add((fa.short_name, fb.short_name, out.dtype_name))
            else:
                self._failures[r.status] = self._failures.get(r.status, 0) + 1
            return None
        rows.index[key] = len(rows.m)
        for name, value in (("m", m), ("n", n), ("k", k), ("setting", setting), ("S", r.splitk),
                            ("custom", r.custom_option), ("reduction", r.reduction_scheme),
                            ("workspace", r.workspace_size), ("algo", r.algo_id), ("tile", r.tile_id), ("part", int(part))):
            getattr(rows, name).append(int(value))
        return r.splitk, r.custom_option, r.reduction_scheme

    def _settings(self) -> list[tuple[int, OutFormat, bool, Fp8Format, Fp8Format]]:
        ws_order = sorted(self.grid.workspaces, key=lambda w: (w != self.torch_workspace, w))
        return [(ws, out, fast, fa, fb) for ws in ws_order for out in self.grid.outs for fast in self.grid.fasts
                for fa, fb in self.grid.pairs]

    def heuristics(self) -> SectionStatus:
        """The heuristic sweep (torch's workspace first)."""
        shapes = list(self.grid.shapes())
        settings = self._settings()
        total = len(shapes) * len(settings)
        done = 0
        for ws, out, fast, fa, fb in settings:
            for m, n, k, part in shapes:
                self._query(m, n, k, fa, fb, out, fast, ws, part)
                done += 1
                if done % 64 == 0:
                    self.budget.progress(done, total)
                    if self.budget.expired():
                        self.budget.stop(f"heuristics: {done:,} of {total:,} queries")
                        self.budget.progress(done, total, force=True)
                        return SectionStatus.PARTIAL
        self.budget.progress(done, total, force=True)
        return SectionStatus.COMPLETE

    def table(self, environment: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The recorded rows in the split-K table format, with the recording's info."""
        r = self._rows
        cols: dict[str, np.ndarray] = {
            "S": np.asarray(r.S, np.uint8), "custom": np.asarray(r.custom, np.uint8),
            "reduction": np.asarray(r.reduction, np.uint8), "workspace": np.asarray(r.workspace, np.int64),
            "algo": np.asarray(r.algo, np.int32), "tile": np.asarray(r.tile, np.int32), "part": np.asarray(r.part, np.uint8),
        }
        arrays = table_arrays(np.asarray(r.setting, np.int64), np.asarray(r.m, np.int64), np.asarray(r.n, np.int64),
                              np.asarray(r.k, np.int64), cols)
        info = {
            "format": TABLE_FORMAT, "table_id": "heur_recording",
            "gpu": environment.get("gpu"), "sm_count": environment.get("sm_count"),
            "capability": environment.get("capability"), "cublaslt": environment.get("cublaslt"),
            "torch": environment.get("torch"), "driver": environment.get("driver"),
            "rows": len(arrays["key"]), "split_rows": int((arrays["S"] > 1).sum()),
            "key": KEY_DESCRIPTION,
            "codes": {**table_codes(), "part": {p.name.lower(): int(p) for p in Part}},
            "source": {"recording": True, "descriptor": "torch 2.7.1 _scaled_mm (mmaemu.platforms._cublaslt), requestedAlgoCount 1",
                       "failures": dict(self._failures)},
            "settings": setting_statistics(arrays),
            "rejects": [{"fmt_a": a, "fmt_b": b, "out": o} for a, b, o in sorted(self._rejects)],
            "verified_combos": [],
            "envelope": {"kind": "k_grid", "claim": "none: profile_from_recording fits one", "K_grid": [], "K_min": 0,
                         "K_max": -1, "bounds": [], "validation": {}},
        }
        return arrays, info

    # -- probes -----------------------------------------------------------------------------------------

    def _split_rows(self, out: OutFormat | None = None, pair: tuple[Fp8Format, Fp8Format] | None = None,
                    corner: bool = False) -> list[int]:
        """Indices of recorded split rows at torch's workspace (optionally one output and format pair)."""
        r = self._rows
        found = []
        for i, code in enumerate(r.setting):
            s = Setting.from_code(code)
            if r.S[i] <= 1 or s.workspace_bytes != self.torch_workspace:
                continue
            if out is not None and s.out is not out:
                continue
            if pair is not None and (s.fmt_a, s.fmt_b) != pair:
                continue
            big_enough = not corner or (r.m[i] >= CORNER[0] and r.n[i] >= CORNER[1])
            if (r.m[i] + r.n[i]) * r.k[i] <= self.grid.live_cost and big_enough:
                found.append(i)
        return sorted(found, key=lambda i: ((r.m[i] + r.n[i]) * r.k[i], i))

    def probes(self, writer: RecordingWriter) -> SectionStatus:
        """Run the probes; write ``probes.json`` / ``probes.npz`` with the verdict."""
        inputs: list[ProbeInput] = list(unsplit_probes())
        r = self._rows
        chosen: dict[tuple[bool, int, int], int] = {}
        for i in self._split_rows(OutFormat.FLOAT32, (Fp8Format.E4M3, Fp8Format.E4M3), corner=True):
            fast = Setting.from_code(r.setting[i]).fast
            chosen.setdefault((fast, r.S[i], r.custom[i]), i)
        for j, (_, i) in enumerate(sorted(chosen.items(), key=lambda kv: (r.m[kv[1]] + r.n[kv[1]]) * r.k[kv[1]])):
            if j >= self.grid.split_probes:
                break
            fast = Setting.from_code(r.setting[i]).fast
            inputs.append(split_probe(f"split-{j}", r.m[i], r.n[i], r.k[i], fast, self.grid.seed + j))
        results: list[ProbeResult] = []
        errors: dict[str, str] = {}
        one = torch.tensor(1.0)
        status = SectionStatus.COMPLETE
        for done, p in enumerate(inputs):
            if self.budget.expired():
                self.budget.stop(f"probes: {done} of {len(inputs)}")
                status = SectionStatus.PARTIAL
                break
            m, n, k = p.shape
            decision = self._query(m, n, k, fp8_format_of(p.a.dtype), fp8_format_of(p.b.dtype),
                                   OutFormat.FLOAT32, p.fast, self.torch_workspace, Part.LIVE)
            try:
                out = self.device.scaled_mm(p.a, p.b, one, one, None, torch.float32, p.fast)
            except Exception as exc:  # noqa: BLE001 - a probe torch refuses is reported, not fatal
                errors[p.name] = f"{type(exc).__name__}: {exc}"
                continue
            s, custom = (decision[0], decision[1]) if decision else (0, 0)
            corner = out[: CORNER[0], : CORNER[1]] if p.stage is ProbeStage.SPLIT else out
            results.append(ProbeResult(p, corner.contiguous(), s, custom))
            self.budget.progress(done + 1, len(inputs))
        self.budget.progress(len(results), len(inputs), force=True)
        biased = self._bias_probes(errors) if status is SectionStatus.COMPLETE else []
        rowwise = self._rowwise_probes(errors) if status is SectionStatus.COMPLETE else []
        verdict = with_sm120_note(analyse(results), self.device.environment().get("capability"))
        doc, arrays = probe_document(results, errors, {"verdict_at_recording": verdict.to_json()})
        doc["bias_probes"], bias_arrays = bias_document(biased)
        doc["rowwise_probes"], rowwise_arrays = rowwise_document(rowwise)
        writer.write_probes(doc, {**arrays, **bias_arrays, **rowwise_arrays})
        return status

    def _bias_probes(self, errors: dict[str, str]) -> list[BiasResult]:
        """Run the bias probes (:mod:`mmaemu.recording._bias`); a refused one is an error entry."""
        results = []
        for p in bias_probes():
            decision = self._query(16, 16, 16, Fp8Format.E4M3, Fp8Format.E4M3, p.out, True, self.torch_workspace,
                                   Part.LIVE)
            try:
                out = self.device.scaled_mm(p.a, p.b, fp32_scalar(p.scale_a_bits), fp32_scalar(p.scale_b_bits), None,
                                            p.out.dtype, True, bias=p.bias)
            except Exception as exc:  # noqa: BLE001 - a probe torch refuses is reported, not fatal
                errors[p.name] = f"{type(exc).__name__}: {exc}"
                continue
            s, custom = (decision[0], decision[1]) if decision else (0, 0)
            results.append(BiasResult(p, out.contiguous(), s, custom))
        return results

    def _rowwise_probes(self, errors: dict[str, str]) -> list[RowwiseResult]:
        """Run the row-wise probes (:mod:`mmaemu.recording._rowwise`); a refused one is an error entry (torch 2.7.1
        refuses row-wise scales on GPUs other than sm_89, sm_9x and sm_10x)."""
        results = []
        for p in rowwise_probes():
            m, n, _ = p.shape
            try:
                out = self.device.scaled_mm(p.a, p.b, p.scale_a.reshape(m, 1), p.scale_b.reshape(1, n), None,
                                            torch.bfloat16, p.fast, bias=p.bias)
            except Exception as exc:  # noqa: BLE001 - a probe torch refuses is reported, not fatal
                errors[p.name] = f"{type(exc).__name__}: {exc}"
                continue
            results.append(RowwiseResult(p, out.contiguous()))
        return results

    # -- live calls ---------------------------------------------------------------------------------------

    def _call_plan(self) -> list[tuple[int, int, int, Fp8Format, Fp8Format, OutFormat, bool, DataKind]]:
        """The live calls: per (fast, S, out, pair) split key its cheapest rows, then unsplit calls."""
        r = self._rows
        plan: list[tuple[int, int, int, Fp8Format, Fp8Format, OutFormat, bool, DataKind]] = []
        keys: dict[tuple[bool, int, int, int, int], list[int]] = {}
        for i in self._split_rows():
            s = Setting.from_code(r.setting[i])
            codes = (OUT_FORMATS.index(s.out), FP8_FORMATS.index(s.fmt_a), FP8_FORMATS.index(s.fmt_b))
            keys.setdefault((s.fast, r.S[i], *codes), []).append(i)
        kinds = (DataKind.ADVERSARIAL, DataKind.RANDOM)
        for key_index, ((fast, _, out_code, a_code, b_code), rows) in enumerate(sorted(keys.items())):
            # K not a multiple of 128 first, then the cheapest; data kinds alternate across keys and rows
            rows = sorted(rows, key=lambda i: (r.k[i] % 128 == 0, (r.m[i] + r.n[i]) * r.k[i]))
            for j, i in enumerate(rows[: self.grid.live_per_key]):
                fa, fb = FP8_FORMATS[a_code], FP8_FORMATS[b_code]
                plan.append((r.m[i], r.n[i], r.k[i], fa, fb, OUT_FORMATS[out_code], fast, kinds[(key_index + j) % 2]))
        unsplit_shapes = [(16, 64, 1040), (32, 48, 2000), (64, 256, 4096), (1, 32, 8208)]
        count = 0
        for out in self.grid.outs:
            for fast in self.grid.fasts:
                for fa, fb in self.grid.pairs:
                    for j in range(self.grid.live_unsplit):
                        m, n, k = unsplit_shapes[j % len(unsplit_shapes)]
                        plan.append((m, n, k, fa, fb, out, fast, kinds[count % 2]))
                        count += 1
        return plan

    def calls(self, writer: RecordingWriter) -> SectionStatus:
        """Run the live calls (each twice); write ``calls.jsonl`` and ``calls.npz``."""
        plan = self._call_plan()
        rng = np.random.default_rng(self.grid.seed + 7)
        scales = [1.0, 0.5, 2.0**-6, 0.3712, 3.0, 1.0 / 448]
        status = SectionStatus.COMPLETE
        for i, (m, n, k, fa, fb, out, fast, data) in enumerate(plan):
            if self.budget.expired():
                self.budget.stop(f"calls: {i} of {len(plan)}")
                status = SectionStatus.PARTIAL
                break
            decision = self._query(m, n, k, fa, fb, out, fast, self.torch_workspace, Part.LIVE)
            seed = self.grid.seed * 1000 + i
            a, b = call_inputs(data, seed, m, n, k, fa, fb)
            sa, sb = float(scales[rng.integers(len(scales))]), float(scales[rng.integers(len(scales))])
            sr = float(scales[rng.integers(len(scales))]) if out.fp8 is not None and rng.integers(2) else None
            outputs: list[str] = []
            error = None
            first: torch.Tensor | None = None
            for _ in range(2):
                try:
                    result = self.device.scaled_mm(a, b, fp32_scalar(fp32_bits(sa)), fp32_scalar(fp32_bits(sb)),
                                                   None if sr is None else fp32_scalar(fp32_bits(sr)), out.dtype, fast)
                except Exception as exc:  # noqa: BLE001 - what torch raised is part of the record
                    error = f"{type(exc).__name__}: {exc}"
                    break
                outputs.append(output_sha256(result))
                first = result if first is None else first
            s, custom, reduction = decision if decision else (0, 0, 0)
            record = CallRecord(
                id=i, m=m, n=n, k=k, fmt_a=fa, fmt_b=fb, out=out, fast=fast, data=data, seed=seed,
                input_sha256=inputs_sha256(a, b), scale_a_bits=fp32_bits(sa), scale_b_bits=fp32_bits(sb),
                scale_result_bits=None if sr is None else fp32_bits(sr), workspace_bytes=self.torch_workspace,
                S=s, custom=custom, reduction=reduction, outputs=tuple(outputs),
                stored=error is None and m * n <= self.grid.store_elements, error=error,
            )
            writer.add_call(record, first)
            self.budget.progress(i + 1, len(plan))
        self.budget.progress(len(plan), len(plan), force=True)
        writer.write_calls()
        return status

    # -- all ----------------------------------------------------------------------------------------------

    def run(self) -> Path:
        """Run every section within the budget; returns the recording directory."""
        environment = dict(self.device.environment())
        environment["torch_workspace_bytes"] = self.torch_workspace
        environment["torch_workspace_assumed"] = "CUBLASLT_WORKSPACE_SIZE or 1 MiB (torch 2.7.1's default)"
        writer = RecordingWriter(self.out, environment=environment, grid=self.grid.describe(),
                                 budget=self.budget.describe())
        try:
            writer.set_section(Section.ENVIRONMENT, SectionStatus.COMPLETE)
            self.budget.begin(Section.HEURISTICS)
            status = self.heuristics()
            writer.write_table(*self.table(environment))
            writer.set_section(Section.HEURISTICS, status, rows=len(self._rows.m), rejects=sorted(self._rejects))
            self.budget.begin(Section.PROBES)
            writer.set_section(Section.PROBES, self.probes(writer))
            self.budget.begin(Section.CALLS)
            status = self.calls(writer)
            writer.write_table(*self.table(environment))  # the live calls' and probes' shapes join the table
            writer.set_section(Section.CALLS, status, calls=len(self._call_plan()))
        finally:
            writer.update("budget", self.budget.describe())
            writer.close()
        return self.out




def check_out(out: str | Path) -> Path:
    """``out`` as a recording directory: absent (its nearest existing ancestor a directory) or an empty directory.

    Raises:
        FileExistsError: ``out`` is not empty.
        NotADirectoryError: ``out``, or an ancestor, is a file.
    """
    path = Path(out)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise NotADirectoryError(f"{path} exists and is not a directory: a recording needs a new directory")
        if any(path.iterdir()):
            raise FileExistsError(f"{path} is not empty: a recording needs a fresh directory")
        return path
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise NotADirectoryError(f"{path}: {parent} is not a directory")
    return path


def record(out: str | Path, *, budget_minutes: float = 30.0, grid: str | Grid = "quick", device: Device | None = None,
           torch_workspace: int | None = None, progress: TextIO | None = None) -> Path:
    """Record the local GPU (or ``device``) into ``out``.

    ``out``, the budget, the grid and the workspace are checked before the GPU is asked anything.

    Raises:
        RecordUnavailableError: no CUDA GPU or cuBLASLt (and no ``device`` given).
        FileExistsError: ``out`` exists and is not empty.
        NotADirectoryError: ``out`` is a file.
        ValueError: a budget that is not a positive number of minutes, an unknown grid, or a torch
            workspace (``torch_workspace`` or ``CUBLASLT_WORKSPACE_SIZE``) that the recording does not query.
    """
    chosen, workspace = _checked_arguments(out, budget_minutes, grid, torch_workspace)
    dev: Device = device if device is not None else CudaDevice()
    budget = Budget(budget_minutes, stream=progress)
    return Recorder(dev, out, grid=chosen, budget=budget, torch_workspace=workspace).run()


def _checked_arguments(out: str | Path, budget_minutes: float, grid: str | Grid,
                       torch_workspace: int | None) -> tuple[Grid, int]:
    """The grid and the torch workspace, after checking every argument (see :func:`record`)."""
    check_out(out)
    if (isinstance(budget_minutes, bool) or not isinstance(budget_minutes, (int, float))
            or not math.isfinite(budget_minutes) or budget_minutes <= 0):
        raise ValueError(f"budget_minutes={budget_minutes!r}: the budget must be a positive, finite number of minutes")
    if isinstance(grid, str) and grid not in GRIDS:
        raise ValueError(f"grid={grid!r} is not a grid; accepted: {', '.join(repr(g) for g in GRIDS)}")
    chosen = GRIDS[grid] if isinstance(grid, str) else grid
    workspace = default_torch_workspace() if torch_workspace is None else int(torch_workspace)
    if workspace not in WS_BYTES:
        source = "CUBLASLT_WORKSPACE_SIZE" if torch_workspace is None else "the torch workspace"
        raise ValueError(f"{source} gives {workspace} bytes, not one of the recorded workspaces {WS_BYTES} "
                         "(pass --torch-workspace with one of them)")
    return chosen, workspace


def main_record(out: str, budget_minutes: float, grid: str, torch_workspace: int | None,
                stream: TextIO | None = None) -> int:
    """The ``record`` command: 0 when recorded (even stopped by the budget); 2 when no GPU is usable or an
    argument is refused (nothing is written then); 130 when interrupted (the recording so far is kept)."""
    stream = stream or sys.stderr
    try:
        _checked_arguments(out, budget_minutes, grid, torch_workspace)
        device = CudaDevice()
    except (RecordUnavailableError, OSError, ValueError) as exc:  # no GPU; FileExistsError, NotADirectoryError ...
        stream.write(f"mmaemu record: {exc}\n")
        return 2
    try:
        path = record(out, budget_minutes=budget_minutes, grid=grid, torch_workspace=torch_workspace, device=device,
                      progress=stream)
    except OSError as exc:  # the disk filled up, the directory went away ...
        stream.write(f"\nmmaemu record: cannot write the recording: {exc}; what was written so far is in {out} "
                     "(incomplete: its replay will fail)\n")
        return 2
    except KeyboardInterrupt:
        written = Path(out) / "manifest.json"
        stream.write("\nmmaemu record: interrupted; "
                     + (f"what was recorded so far is in {out} (incomplete: its replay will fail)\n"
                        if written.is_file() else "nothing was written\n"))
        return 130
    stream.write(f"recording written to {path}; replay it with: python -m mmaemu replay {path}\n")
    return 0
