"""Shared test configuration: where the hardware evidence lives, the exhaustive-tier flag (FULL), the tools loader."""

from __future__ import annotations

import os
import types
from collections.abc import Iterator
from pathlib import Path

# Triton reads TRITON_INTERPRET when mmaemu first imports the kernels, which any test module may
# cause while it is collected (a parametrization that asks whether the triton backend is usable):
# set it before every test module, so the Triton tests run in the interpreter (CI has no GPU).
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
from hypothesis import Phase, settings

#: ``../shared`` beside the repository (CI has it; a user's clone may not).
SHARED = Path(os.environ.get("MMAEMU_SHARED", Path(__file__).resolve().parents[2] / "shared"))
HW_VECTORS = SHARED / "hw-vectors"
RECORDINGS = SHARED / "recordings"

# ``HYPOTHESIS_PROFILE=mutants`` (set by tools/mutants.py): report the first failing example
# without shrinking it; a mutant only needs to fail, and shrinking slow-model cases takes minutes.
settings.register_profile("mutants", phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

#: ``MMAEMU_FULL=1`` (or ``pytest --full``) runs the exhaustive tiers instead of CI samples.
FULL = os.environ.get("MMAEMU_FULL") == "1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true", help="run exhaustive tests instead of samples")


def pytest_configure(config: pytest.Config) -> None:
    global FULL
    if config.getoption("--full"):
        os.environ["MMAEMU_FULL"] = "1"
        FULL = True


def require(path: Path) -> Path:
    """Skip the calling test when hardware evidence is absent."""
    if not path.exists():
        pytest.skip(f"hardware evidence not found at {path} (a clone without ../shared)")
    return path


#: Every exactness test runs on each backend listed here (cpu needs numba, a test extra).
BACKENDS = ["reference"]
try:
    import numba  # noqa: F401

    BACKENDS.append("cpu")
except ImportError:  # pragma: no cover
    pass


@pytest.fixture(params=BACKENDS, scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test (all backends share one exactness suite)."""
    return str(request.param)


ROOT = Path(__file__).resolve().parents[1]


def load_tool(name: str) -> "types.ModuleType":
    """Import ``tools/<name>.py`` as a module (the tools are scripts, not a package)."""
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "tools"))


@pytest.fixture(scope="module")
def one_torch_thread() -> "Iterator[None]":
    """Tiny tensors: a second torch thread only contends with the other processes on this machine.

    Use with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
