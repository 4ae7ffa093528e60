"""A recording is untrusted input: links, special files, edited tables, forged reports and declared sizes.

Each test names what the code before the second hostile pass did with that input.
The recordings are the emulated recorder's (``tests/emulated_device.py``): plumbing, not GPU evidence.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from emulated_device import copy_recording

from mmaemu import _cli as cli
from mmaemu.errors import RecordingDamagedError
from mmaemu.presets import Maturity
from mmaemu.recording._format import Recording
from mmaemu.recording._writer import RecordingWriter, reseal
from mmaemu.recording._profile import profile_from_recording
from mmaemu.recording._replay import main_replay, replay

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def recorded(emulated_recording: Path) -> Path:
    return emulated_recording


def _copy(src: Path, tmp_path: Path) -> Path:
    return copy_recording(src, tmp_path, keep_report=True)


def _precious(tmp_path: Path) -> Path:
    """A file outside the recording that nothing may write to."""
    target = tmp_path / "outside" / "precious.txt"
    target.parent.mkdir()
    target.write_text("precious")
    return target


def _rewrite_table(path: Path, edit: object) -> None:
    """Apply ``edit(columns)`` to heuristics.npz (columns of the file as they are), then reseal."""
    with np.load(path / "heuristics.npz") as data:
        columns = {k: np.asarray(data[k]) for k in data.files}
    edit(columns)  # type: ignore[operator]
    np.savez_compressed(path / "heuristics.npz", **columns)
    reseal(path)


# -- item 2: no link is followed, no special file opened, no name leaves the directory -----------------------


@pytest.mark.parametrize("planted", ["replay.json.tmp", "replay.json", "manifest.json.tmp"])
def test_replay_never_writes_through_a_planted_link(recorded: Path, tmp_path: Path, planted: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: replay wrote replay.json.tmp through the link, overwriting the file it names (exit 0)."""
    path = _copy(recorded, tmp_path)
    target = _precious(tmp_path)
    (path / planted).unlink(missing_ok=True)
    os.symlink(target, path / planted)
    assert cli.main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and planted in err
    assert target.read_text() == "precious"
    with pytest.raises(RecordingDamagedError, match="symbolic link"):
        replay(path)
    assert target.read_text() == "precious" and (path / planted).is_symlink()


def test_reseal_never_writes_through_a_linked_manifest(recorded: Path, tmp_path: Path) -> None:
    """Old code: reseal() read and rewrote manifest.json through the link."""
    path = _copy(recorded, tmp_path)
    outside = tmp_path / "outside-manifest.json"
    shutil.copy(path / "manifest.json", outside)
    before = outside.read_bytes()
    (path / "manifest.json").unlink()
    os.symlink(outside, path / "manifest.json")
    with pytest.raises(RecordingDamagedError, match="symbolic link"):
        reseal(path)
    assert outside.read_bytes() == before


@pytest.mark.parametrize("name", ["calls.jsonl", "heuristics.npz", "probes.json"])
def test_a_data_file_that_is_a_link_is_refused(recorded: Path, tmp_path: Path, name: str) -> None:
    """Old code: replay and profile_from_recording read the file the link names (here an identical copy, so
    the replay passed and the profile was validated from files outside the recording)."""
    path = _copy(recorded, tmp_path)
    outside = tmp_path / f"outside-{name}"
    shutil.move(path / name, outside)
    os.symlink(outside, path / name)
    with pytest.raises(RecordingDamagedError, match=f"{name} is a symbolic link"):
        replay(path, write=False)
    with pytest.raises(RecordingDamagedError, match="symbolic link"):
        profile_from_recording(path)


def test_a_fifo_or_a_directory_in_a_recording_is_refused_without_blocking(recorded: Path, tmp_path: Path) -> None:
    """Old code: a FIFO named probes.json blocked the replay forever on open (a test would hang)."""
    path = _copy(recorded, tmp_path)
    (path / "probes.json").unlink()
    os.mkfifo(path / "probes.json")
    with pytest.raises(RecordingDamagedError, match="probes.json is a FIFO"):
        replay(path, write=False)
    with pytest.raises(RecordingDamagedError, match="FIFO"):
        profile_from_recording(path)
    path2 = _copy(recorded, tmp_path / "b")
    (path2 / "extra").mkdir()
    with pytest.raises(RecordingDamagedError, match="extra is a directory"):
        Recording.open(path2)


@pytest.mark.parametrize("name", ["/etc/passwd", "../outside.json", "sub/calls.jsonl", "calls.jsonl/"])
def test_manifest_names_that_leave_the_directory_are_refused(recorded: Path, tmp_path: Path, name: str) -> None:
    """Old code: profile_from_recording hashed (read) whatever file a manifest name pointed to."""
    path = _copy(recorded, tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"][name] = "0" * 64
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RecordingDamagedError, match="lists files a recording does not have"):
        profile_from_recording(path)
    assert cli.main(["replay", str(path)]) == 2


def test_the_writer_replaces_a_planted_link_instead_of_following_it(tmp_path: Path) -> None:
    """Old code: RecordingWriter wrote every file with open(path, 'w'), through a link planted meanwhile."""
    target = _precious(tmp_path)
    writer = RecordingWriter(tmp_path / "r", environment={}, grid={}, budget={})
    os.symlink(target, tmp_path / "r" / "calls.npz")
    writer.write_calls()
    writer.close()
    assert target.read_text() == "precious"
    assert not (tmp_path / "r" / "calls.npz").is_symlink() and (tmp_path / "r" / "calls.npz").is_file()


# -- item 3: validated means these bytes replayed, on this machine ------------------------------------------------


def test_a_table_edited_after_a_passing_replay_is_never_validated(recorded: Path, tmp_path: Path) -> None:
    """Old code: VALIDATED (the report's digest was the manifest's hashes, which the edit left alone)."""
    path = _copy(recorded, tmp_path)
    assert profile_from_recording(path).maturity is Maturity.VALIDATED
    with np.load(path / "heuristics.npz") as data:
        columns = {k: np.asarray(data[k]) for k in data.files}
    split = np.nonzero(columns["S"] > 1)[0]
    columns["S"][split[0]] = 1  # a decision changed: the profile would no longer split this shape
    np.savez_compressed(path / "heuristics.npz", **columns)
    with pytest.raises(RecordingDamagedError, match="heuristics.npz: its sha256 is not the manifest's"):
        profile_from_recording(path)
    reseal(path)  # sealed again: a consistent recording, but not the one that replayed
    profile = profile_from_recording(path)
    assert profile.maturity is Maturity.EXPERIMENTAL and profile.evidence is not None
    assert profile.evidence["replay"] == "for another recording"


def test_a_forged_or_foreign_replay_report_does_not_validate(recorded: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: any replay.json with the recording's digest and "passed": true validated the profile."""
    path = _copy(recorded, tmp_path)
    report = json.loads((path / "replay.json").read_text())
    forged = {k: v for k, v in report.items() if k != "attestation"}
    (path / "replay.json").write_text(json.dumps(forged))
    profile = profile_from_recording(path)
    assert profile.maturity is Maturity.EXPERIMENTAL and profile.evidence is not None
    assert profile.evidence["replay"].startswith("not attested")
    (path / "replay.json").write_text(json.dumps({**report, "calls": {**report["calls"], "total": 1}}))  # edited
    assert profile_from_recording(path).maturity is Maturity.EXPERIMENTAL
    (path / "replay.json").write_text(json.dumps(report))
    assert profile_from_recording(path).maturity is Maturity.VALIDATED
    monkeypatch.setenv("MMAEMU_CACHE_DIR", str(tmp_path / "another-machine"))  # the report came from elsewhere
    assert profile_from_recording(path).maturity is Maturity.EXPERIMENTAL
    assert replay(path).passed  # replayed here: validated here
    assert profile_from_recording(path).maturity is Maturity.VALIDATED


# -- item 4: declared sizes are bounded before anything is allocated ----------------------------------------------


def _edit_call(path: Path, index: int, **fields: object) -> None:
    lines = (path / "calls.jsonl").read_text().splitlines()
    d = json.loads(lines[index])
    d.update(fields)
    lines[index] = json.dumps(d)
    (path / "calls.jsonl").write_text("\n".join(lines) + "\n")
    reseal(path)


@pytest.mark.parametrize("shape", [{"m": 1 << 20, "k": 1 << 20}, {"m": 1 << 20, "n": 1 << 20, "k": 16},
                                   {"m": 1 << 21}, {"S": 255, "m": 4096, "n": 4096}])
def test_a_call_declaring_a_huge_shape_is_damage_not_an_allocation(recorded: Path, tmp_path: Path,
                                                                   shape: dict[str, int],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Old code: the format check passed and the replay tried to allocate up to 1 TiB (a MemoryError traceback)."""
    path = _copy(recorded, tmp_path)
    stored = [json.loads(line)["stored"] for line in (path / "calls.jsonl").read_text().splitlines()]
    _edit_call(path, stored.index(False), **shape)
    assert main_replay(str(path), "auto", None, None) == 2
    out = capsys.readouterr().out
    assert "DAMAGED FILE calls.jsonl" in out and "line" in out
    with pytest.raises(RecordingDamagedError, match="calls.jsonl"):
        profile_from_recording(path)


def test_a_stored_output_of_another_shape_is_damage(recorded: Path, tmp_path: Path) -> None:
    """Old code: the replay compared a reshaped buffer and raised ValueError from numpy (a traceback)."""
    path = _copy(recorded, tmp_path)
    lines = (path / "calls.jsonl").read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if json.loads(line)["stored"])
    call = json.loads(lines[index])
    _edit_call(path, index, m=call["m"] * 2)
    report = replay(path, write=False)
    assert not report.passed and f"out{call['id']}" in report.damaged["calls.npz"]


def test_an_npz_member_declaring_more_than_it_holds_is_refused(recorded: Path, tmp_path: Path) -> None:
    """Old code: numpy allocated the declared shape (here 2**40 bytes) before reading the member."""
    path = _copy(recorded, tmp_path)
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, np.uint8))
    header["shape"] = (1 << 40,)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    with zipfile.ZipFile(path / "calls.npz", "w") as z:
        z.writestr("out0.npy", buf.getvalue() + b"\0" * 64)
    reseal(path)
    report = replay(path, write=False)
    assert "declares" in report.damaged["calls.npz"]


# -- item 5: damaged tables are the documented error, naming the file and the column ------------------------------


@pytest.mark.parametrize("damage,column", [
    (lambda c: c.pop("S"), "S"),
    (lambda c: c.update(S=c["S"][:-1]), "S"),
    (lambda c: c.update(S=c["S"].astype(np.float64) + 0.5), "S"),
    (lambda c: c.update(custom=c["custom"].astype(np.float32)), "custom"),
    (lambda c: c.update(key=c["key"][::-1].copy()), "key"),
    (lambda c: c.update(S=np.zeros_like(c["S"])), "S"),
    (lambda c: c.update(part=np.full_like(c["part"], 9)), "part"),
    (lambda c: c.update(setting_start=c["setting_start"][:-1]), "setting_start"),
], ids=["no-S", "short-S", "float-S", "float-custom", "unsorted-key", "S-zero", "bad-part", "short-starts"])
def test_a_damaged_table_names_the_file_and_the_column(recorded: Path, tmp_path: Path, damage: object,
                                                       column: str) -> None:
    """Old code: KeyError (no S), IndexError (short column), or a float S column accepted and truncated."""
    path = _copy(recorded, tmp_path)
    _rewrite_table(path, damage)
    with pytest.raises(RecordingDamagedError, match=rf"heuristics\.npz: does not parse .*column {column}"):
        profile_from_recording(path)
    assert main_replay(str(path), "auto", None, None) == 2


@pytest.mark.parametrize("content", [b"[1, 2]", b"\"text\"", b"{\"rows\": "])
def test_a_table_info_that_is_not_an_object_is_damage(recorded: Path, tmp_path: Path, content: bytes) -> None:
    """Old code: TypeError from {**info} for a JSON list."""
    path = _copy(recorded, tmp_path)
    (path / "heuristics.json").write_bytes(content)
    reseal(path)
    with pytest.raises(RecordingDamagedError, match=r"heuristics\.json: does not parse"):
        profile_from_recording(path)


@pytest.mark.parametrize("field,value", [("S", 2.5), ("S", 10**9), ("stage", "bogus"), ("fmt_a", "int8"),
                                         ("name", "../x"), ("fast", "yes")])
def test_a_damaged_probe_document_is_damage(recorded: Path, tmp_path: Path, field: str, value: object) -> None:
    """Old code: int(2.5) truncated S, S = 10**9 planned a billion parts; others raised KeyError or ValueError deep
    inside the analysis."""
    path = _copy(recorded, tmp_path)
    doc = json.loads((path / "probes.json").read_text())
    doc["probes"][0][field] = value
    (path / "probes.json").write_text(json.dumps(doc))
    reseal(path)
    with pytest.raises(RecordingDamagedError, match=rf"probes\.json: probe 0: .*{field}"):
        profile_from_recording(path)
    assert main_replay(str(path), "auto", None, None) == 2


@pytest.mark.parametrize("field,value", [("out", "float32"), ("S", -1), ("name", "../x"), ("scale_a_bits", 1.5)])
def test_a_damaged_bias_probe_is_damage(recorded: Path, tmp_path: Path, field: str, value: object) -> None:
    path = _copy(recorded, tmp_path)
    doc = json.loads((path / "probes.json").read_text())
    doc["bias_probes"][0][field] = value
    (path / "probes.json").write_text(json.dumps(doc))
    reseal(path)
    with pytest.raises(RecordingDamagedError, match=r"probes\.json: bias probe 0"):
        profile_from_recording(path)
    assert main_replay(str(path), "auto", None, None) == 2


@pytest.mark.parametrize("field,value", [("name", "../x"), ("name", 7), ("m", 0), ("m", True), ("n", 10**6),
                                         ("k", 4096), ("fast", "yes"), ("bias", None)])
def test_a_damaged_rowwise_probe_is_damage(recorded: Path, tmp_path: Path, field: str, value: object) -> None:
    """A recording is untrusted: every field of a row-wise probe is checked before the analysis runs 48 candidates
    on it (k = 4096 with 16 x 16 outputs would be more work than a probe may take)."""
    path = _copy(recorded, tmp_path)
    doc = json.loads((path / "probes.json").read_text())
    doc["rowwise_probes"][3][field] = value
    (path / "probes.json").write_text(json.dumps(doc))
    reseal(path)
    with pytest.raises(RecordingDamagedError, match=r"probes\.json: row-wise probe 3"):
        profile_from_recording(path)
    assert main_replay(str(path), "auto", None, None) == 2


@pytest.mark.parametrize("edit", ["duplicate", "many", "not-a-list"])
def test_a_damaged_rowwise_probe_list_is_damage(recorded: Path, tmp_path: Path, edit: str) -> None:
    path = _copy(recorded, tmp_path)
    doc = json.loads((path / "probes.json").read_text())
    entries = doc["rowwise_probes"]
    doc["rowwise_probes"] = {"duplicate": entries + entries[:1], "many": entries * 2, "not-a-list": {"a": 1}}[edit]
    (path / "probes.json").write_text(json.dumps(doc))
    reseal(path)
    with pytest.raises(RecordingDamagedError, match=r"probes\.json: .*row-wise probe"):
        profile_from_recording(path)


def test_a_rowwise_probe_array_of_another_shape_is_damage(recorded: Path, tmp_path: Path) -> None:
    path = _copy(recorded, tmp_path)
    with np.load(path / "probes.npz") as data:
        arrays = dict(data)
    arrays["rw_out_chains-slow"] = arrays["rw_out_chains-slow"][:8]
    np.savez(path / "probes.npz", **arrays)
    reseal(path)
    with pytest.raises(RecordingDamagedError, match=r"array rw_out_chains-slow is not uint16 \(16, 16\)"):
        profile_from_recording(path)


def test_an_edited_rowwise_output_is_no_candidate(recorded: Path, tmp_path: Path) -> None:
    """A row-wise output the (emulated) GPU did not give fits no candidate: the replay fails, the profile decides no
    row-wise kernel (its row-wise calls warn)."""
    path = _copy(recorded, tmp_path)
    with np.load(path / "probes.npz") as data:
        arrays = dict(data)
    arrays["rw_out_zero-bias"] = arrays["rw_out_zero-bias"] ^ np.uint16(1)
    np.savez(path / "probes.npz", **arrays)
    reseal(path)
    assert main_replay(str(path), "auto", None, None) == 1
    assert profile_from_recording(path, name="edited-rowwise").rowwise_kernel is None


# -- the second hostile pass's own findings ------------------------------


def test_a_manifest_edited_after_a_passing_replay_is_never_validated(recorded: Path, tmp_path: Path) -> None:
    """Found by a hostile pass: the digest covered the data files only, so a manifest claiming another
    GPU, workspace or section status kept the profile VALIDATED."""
    path = _copy(recorded, tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["environment"]["gpu"] = "NVIDIA H100 80GB HBM3"
    manifest["environment"]["torch_workspace_bytes"] = 32 << 20
    (path / "manifest.json").write_text(json.dumps(manifest))
    profile = profile_from_recording(path)
    assert profile.maturity is Maturity.EXPERIMENTAL and profile.evidence is not None
    assert profile.evidence["replay"] == "for another recording"


def _edit_probes(path: Path, edit: object) -> None:
    doc = json.loads((path / "probes.json").read_text())
    edit(doc)  # type: ignore[operator]
    (path / "probes.json").write_text(json.dumps(doc))
    reseal(path)


def test_a_probe_declaring_work_past_its_bound_is_damage_not_hours(recorded: Path, tmp_path: Path) -> None:
    """Found by a hostile pass: one probe of K = 2**21 - 1 (4.7 KB of zero codes) made the analysis
    run for hours (160 candidates)."""
    path = _copy(recorded, tmp_path)
    with np.load(path / "probes.npz") as data:
        arrays = {k: np.asarray(data[k]) for k in data.files}
    k = (1 << 21) - 1
    arrays.update(a_huge=np.zeros((1, k), np.uint8), b_huge=np.zeros((1, k), np.uint8), out_huge=np.zeros((1, 1), np.uint32))
    np.savez_compressed(path / "probes.npz", **arrays)
    _edit_probes(path, lambda d: d["probes"].append({**d["probes"][0], "name": "huge", "m": 1, "n": 1, "k": k,
                                                     "compared": [1, 1]}))
    with pytest.raises(RecordingDamagedError, match="more work than a arithmetic probe may take"):
        profile_from_recording(path)


def test_two_probes_of_one_name_are_damage(recorded: Path, tmp_path: Path) -> None:
    """Found by a hostile pass: a RuntimeError ('Boolean value of Tensor ... ambiguous') from the analysis."""
    path = _copy(recorded, tmp_path)
    _edit_probes(path, lambda d: d["probes"].append(dict(d["probes"][0])))
    with pytest.raises(RecordingDamagedError, match="repeats an earlier probe"):
        profile_from_recording(path)


@pytest.mark.parametrize("name", ["manifest.json", "heuristics.json", "probes.json", "calls.jsonl", "replay.json"])
def test_deeply_nested_json_is_damage(recorded: Path, tmp_path: Path, name: str) -> None:
    """Found by a hostile pass: RecursionError tracebacks from json.loads."""
    path = _copy(recorded, tmp_path)
    (path / name).write_text("[" * 100_000 + "]" * 100_000)
    if name == "manifest.json":
        with pytest.raises(RecordingDamagedError, match="not a JSON object"):
            profile_from_recording(path)
        return
    if name != "replay.json":
        reseal(path)
        with pytest.raises(RecordingDamagedError, match=f"{name}: does not parse"):
            profile_from_recording(path)
        return
    assert profile_from_recording(path).maturity is Maturity.EXPERIMENTAL  # an unreadable report is no report


@pytest.mark.parametrize("field,value", [("k", 0), ("m", 0)])
def test_an_empty_live_call_is_damage(recorded: Path, tmp_path: Path, field: str, value: int) -> None:
    """Found by a hostile pass: an adversarial call with K = 0 raised IndexError regenerating its inputs."""
    path = _copy(recorded, tmp_path)
    _edit_call(path, 0, **{field: value})
    assert "calls.jsonl" in replay(path, write=False).damaged


def test_table_rows_of_an_unnamed_output_are_damage(recorded: Path, tmp_path: Path) -> None:
    """Found by a hostile pass: setting code 251 (output code 7) raised IndexError in Setting.from_code."""
    path = _copy(recorded, tmp_path)

    def move(c: dict[str, np.ndarray]) -> None:
        starts = c["setting_start"].copy()
        last = int(starts[-1])
        starts[:252] = np.minimum(starts[:252], last - 1)  # the last row now belongs to setting 251
        starts[252:] = last
        c["setting_start"] = starts

    _rewrite_table(path, move)
    with pytest.raises(RecordingDamagedError, match="names no output format"):
        profile_from_recording(path)


@pytest.mark.parametrize("section,key,value", [
    ("environment", "gpu", ["a", "b"]), ("environment", "cublaslt", 12), ("environment", "capability", "9.0"),
    ("grid", "live_cost", "2097152"), ("grid", "live_cost", True), ("grid", "live_cost", None),
    (None, "format_version", 1.0), (None, "format_version", True),
])
def test_mistyped_manifest_fields_are_damage(recorded: Path, tmp_path: Path, section: str | None, key: str,
                                             value: object) -> None:
    """Found by a hostile pass: accepted silently (a list GPU name, a string live_cost that switched the
    declared-size bound off, format_version 1.0)."""
    path = _copy(recorded, tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    target = manifest if section is None else manifest[section]
    if value is None:
        del target[key]
    else:
        target[key] = value
    (path / "manifest.json").write_text(json.dumps(manifest))
    if value is None:  # no live_cost: the calls cannot be bounded
        assert "calls.jsonl" in replay(path, write=False).damaged
        return
    with pytest.raises(RecordingDamagedError, match=key.replace("format_", "")):
        profile_from_recording(path)


def test_a_stored_output_that_contradicts_its_digest_is_damage(recorded: Path, tmp_path: Path) -> None:
    """Found by a hostile pass: one flipped bit in a stored output (resealed) replayed as PASSED."""
    path = _copy(recorded, tmp_path)
    with np.load(path / "calls.npz") as data:
        arrays = {k: np.asarray(data[k]).copy() for k in data.files}
    name = sorted(arrays)[0]
    arrays[name].reshape(-1)[0] ^= 1
    np.savez_compressed(path / "calls.npz", **arrays)
    reseal(path)
    report = replay(path, write=False)
    assert not report.passed and "contradict" in report.damaged["calls.npz"]


def test_profile_arguments_are_checked(recorded: Path) -> None:
    """Found by a hostile pass: preset=<a zoo preset> built an FP8 profile with B = 16, F = 25; preset="hopper"
    (a string) an unusable one; wrong types raised AttributeError."""
    from mmaemu.presets import ZOO, Architecture
    from mmaemu.formats import WideFormat
    import mmaemu

    with pytest.raises(mmaemu.UnsupportedFeatureError, match="not FP8"):
        profile_from_recording(recorded, preset=ZOO[(Architecture.HOPPER, WideFormat.FP16)])
    assert profile_from_recording(recorded, preset="hopper").preset.name == "hopper"
    for bad in ({"split_family": "contiguous"}, {"report": []}, {"report": "x"}, {"verdict": "x"}):
        with pytest.raises(TypeError):
            profile_from_recording(recorded, **bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("cublaslt", ["12.8 beta", "12.8\n", "12.8\u200b", "../../heur_h100pcie_lt12.8.3.14"])
def test_the_table_id_of_a_recording_is_one_printable_word(recorded: Path, tmp_path: Path, cublaslt: str) -> None:
    """Issue 46 hostile pass: the recording's table id carried environment.cublaslt unsanitised, so a version
    string with whitespace or a control character made an id that register_table (rightly) refuses."""
    from mmaemu.platforms._table import SplitTable, shipped_table_id

    path = _copy(recorded, tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["environment"]["cublaslt"] = cublaslt
    (path / "manifest.json").write_text(json.dumps(manifest))
    profile = profile_from_recording(path)
    assert profile.table_id is not None and shipped_table_id(profile.table_id) is None
    assert profile.table_id.isprintable() and not any(c.isspace() or c == "/" for c in profile.table_id)
    assert SplitTable.load(profile.table_id).table_id == profile.table_id
