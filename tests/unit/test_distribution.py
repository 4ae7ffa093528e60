"""The distribution's name and version, and the warning when PyPI's unrelated ``mmaemu`` is installed too."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import mmaemu
from mmaemu._version import DISTRIBUTION, FOREIGN_DISTRIBUTION

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_repeats_the_name_and_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION == "mmaemu-bits"
    assert project["version"] == mmaemu.__version__


def test_version_sorts_above_the_foreign_release() -> None:
    """PyPI's ``mmaemu`` is at 0.1.0: this project's version never sorts below it."""
    from packaging.version import Version

    assert Version(mmaemu.__version__) > Version("0.1.0")


def _import_with(site: Path) -> subprocess.CompletedProcess[str]:
    code = "import warnings; warnings.simplefilter('always'); import mmaemu"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=site,
                          env={"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin"}, timeout=300)


def test_import_warns_when_the_foreign_distribution_is_installed(tmp_path: Path) -> None:
    info = tmp_path / f"{FOREIGN_DISTRIBUTION}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {FOREIGN_DISTRIBUTION}\nVersion: 0.1.0\n")
    result = _import_with(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "MmaemuWarning" in result.stderr and "pip uninstall mmaemu" in result.stderr, result.stderr
    assert "0.1.0" in result.stderr and str(tmp_path) in result.stderr


def test_import_is_silent_without_it(tmp_path: Path) -> None:
    result = _import_with(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "MmaemuWarning" not in result.stderr, result.stderr
