"""mmaemu.errors.warn_caller: a warning is attributed to the user's line, past mmaemu's and torch's frames and
past the import machinery's (a warning decided while mmaemu imports a module, e.g. the numba cache's)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

from mmaemu import errors


def test_a_warning_at_import_time_names_the_importing_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module of the package (stood in for by a folder added to the skipped ones) warns while it is imported,
    through two levels of imports: the warning names this test's import line, not a line of the package.
    Python's own stack walk skips importlib's frames (``_next_external_frame``), so warn_caller's count must too:
    it named the package's importing line (``mmaemu/backends/_cpu.py``, for the UntrustedCacheWarning)."""
    package = tmp_path / "standin_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from . import inner\n")
    (package / "inner.py").write_text(
        "from mmaemu.errors import MmaemuWarning, warn_caller\nwarn_caller('decided at import', MmaemuWarning)\n")
    skipped = errors._skipped_prefixes()
    monkeypatch.setattr(errors, "_skipped_prefixes", lambda: [*skipped, str(package) + "/"])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "standin_pkg", raising=False)
    monkeypatch.delitem(sys.modules, "standin_pkg.inner", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        import standin_pkg  # noqa: F401 - the import is the call site
    found = [(w.filename, w.lineno) for w in caught if str(w.message) == "decided at import"]
    assert found == [(__file__, line)], found
