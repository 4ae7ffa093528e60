"""A recording's block probes are untrusted input: every field is checked before the analysis runs up to 24
candidates on them, and a damaged one is reported as damage (replay exit 2), never computed."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from mmaemu.errors import RecordingDamagedError
from mmaemu.recording._blockwise import block_results, computed_block
from mmaemu.recording._writer import reseal
from mmaemu.recording._format import Recording
from mmaemu.recording._replay import main_replay

TOOLS = Path(__file__).resolve().parents[2] / "tools"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = importlib.util.spec_from_file_location("block_probes_hostile", TOOLS / "probes" / "block_probes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    root = tmp_path_factory.mktemp("block") / "rec"
    return module.record(root, lambda p: computed_block(p, "deepgemm-sm90"), "emulated", "deepgemm-sm90",  # type: ignore[no-any-return]
                         {"gpu": "emulated", "capability": [9, 0], "sm_count": 132})


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


def _edit(path: Path, edit: object) -> None:
    doc = json.loads((path / "probes.json").read_text())
    edit(doc)  # type: ignore[operator]
    (path / "probes.json").write_text(json.dumps(doc))
    reseal(path)


def _damaged(path: Path, match: str) -> None:
    rec = Recording.open(path)
    with pytest.raises(RecordingDamagedError, match=match):
        block_results(rec.probes() or {}, rec.probe_arrays())
    assert main_replay(str(path), "auto", None, None) == 2


@pytest.mark.parametrize("field,value", [("name", "../x"), ("name", 7), ("m", 0), ("m", True), ("n", 10**6),
                                         ("k", 4096), ("n", 96), ("k", 200)])
def test_a_damaged_block_probe_is_damage(recorded: Path, tmp_path: Path, field: str, value: object) -> None:
    """Every field: a plain name, dimensions in range, work within the bound (k = 4096 at 4 x 64 is too much per
    candidate), N % 64 and K % 128 as every modelled kernel takes them."""
    path = _copy(recorded, tmp_path)
    _edit(path, lambda doc: doc["block_probes"]["probes"][1].__setitem__(field, value))
    _damaged(path, r"probes\.json: block probe 1")


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.__setitem__("block_probes", []), "not an object with a 'runner'"),
    (lambda d: d["block_probes"].__setitem__("base", "cutlass-rowwise-sm90"), "names no block kernel model"),
    (lambda d: d["block_probes"].__setitem__("base", ["deepgemm-sm90"]), "names no block kernel model"),
    (lambda d: d["block_probes"].__setitem__("runner", "x" * 201), "'runner' string"),
    (lambda d: d["block_probes"].__setitem__("probes", d["block_probes"]["probes"] * 2), "at most 8"),
    (lambda d: d["block_probes"]["probes"].append(d["block_probes"]["probes"][0]), "repeats an earlier probe"),
])
def test_a_damaged_block_probe_section_is_damage(recorded: Path, tmp_path: Path, edit: object, match: str) -> None:
    path = _copy(recorded, tmp_path)
    _edit(path, edit)
    _damaged(path, match)


def test_a_block_probe_array_of_another_shape_or_dtype_is_damage(recorded: Path, tmp_path: Path) -> None:
    for key, change in (("bp_out_chains", lambda a: a[:2]), ("bp_sw_zero", lambda a: a.astype(np.int32)),
                        ("bp_a_fusion", None)):
        path = _copy(recorded, tmp_path / key)
        with np.load(path / "probes.npz") as data:
            arrays = dict(data)
        if change is None:
            del arrays[key]
        else:
            arrays[key] = change(arrays[key])
        np.savez(path / "probes.npz", **arrays)
        reseal(path)
        _damaged(path, f"array {key} is not")


def test_an_edited_block_output_fits_no_candidate(recorded: Path, tmp_path: Path) -> None:
    """An output the (emulated) GPU did not give: no candidate fits, the replay fails (exit 1), nothing is damage."""
    path = _copy(recorded, tmp_path)
    with np.load(path / "probes.npz") as data:
        arrays = dict(data)
    arrays["bp_out_fusion"] = arrays["bp_out_fusion"] ^ np.uint16(1)
    np.savez(path / "probes.npz", **arrays)
    reseal(path)
    assert main_replay(str(path), "auto", None, None) == 1
