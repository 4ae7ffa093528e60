"""Shared test configuration: where the hardware evidence lives, the exhaustive-tier flag (FULL), the tools loader."""

from __future__ import annotations

import os
import random
import types
from collections.abc import Iterator
from pathlib import Path

# Triton reads TRITON_INTERPRET when mmaemu first imports the kernels, which any test module may
# cause while it is collected (a parametrization that asks whether the triton backend is usable):
# set it before every test module, so the Triton tests run in the interpreter (CI has no GPU).
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
from evidence import evidence_root
from hypothesis import Phase, settings

#: The hardware evidence: ``evidence/`` in the repository, or ``../shared`` / ``MMAEMU_SHARED`` (tests/evidence.py).
SHARED = evidence_root()
HW_VECTORS = SHARED / "hw-vectors"
RECORDINGS = SHARED / "recordings"

# ``HYPOTHESIS_PROFILE=mutants`` (set by tools/evidence/mutants.py): report the first failing example
# without shrinking it; a mutant only needs to fail, and shrinking slow-model cases takes minutes.
settings.register_profile("mutants", phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

#: ``MMAEMU_FULL=1`` (or ``pytest --full``) runs the exhaustive tiers instead of CI samples.
FULL = os.environ.get("MMAEMU_FULL") == "1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true", help="run exhaustive tests instead of samples")


#: The test tiers, one folder each under tests/: ``pytest tests/hostile`` or ``pytest -m hostile`` runs one.
#: ``unit`` (named after the module it tests), ``evidence`` (hardware vectors and recordings, the slow
#: model), ``hostile`` (refusals and hostile input), ``integration`` (torchao, emulate, nn, the operator,
#: torch.distributed, recordings end to end), ``tools`` and ``docs``. Doctests of the package are unit tests.
TIERS = ("unit", "evidence", "hostile", "integration", "tools", "docs")
TESTS = Path(__file__).resolve().parent


def tier_of(path: Path) -> str:
    """The tier of a collected file: its folder under tests/ (``unit`` for the package's doctests)."""
    folder = Path(path).resolve().parent
    return folder.name if folder.parent == TESTS and folder.name in TIERS else "unit"


def pytest_configure(config: pytest.Config) -> None:
    global FULL
    if config.getoption("--full"):
        os.environ["MMAEMU_FULL"] = "1"
        FULL = True
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: the {tier} tier of the tests (the folder tests/{tier})")
    config.addinivalue_line("markers", "upg: a test of the user-private-group rule (mmaemu._private)")


def require(path: Path) -> Path:
    """Skip the calling test when hardware evidence is absent."""
    if not path.exists():
        pytest.skip(f"hardware evidence not found at {path} (MMAEMU_SHARED names a folder without it)")
    return path


def _cpu_backends() -> list[str]:
    """The backends the capability table says run on this machine's CPU tensors (the Triton kernels
    through Triton's interpreter, set above)."""
    from mmaemu.backends import CONCRETE, supports

    return [b.value for b in CONCRETE if supports(b, None, (), "cpu")]


#: Every exactness test runs on each backend listed here: the capability table decides (cpu needs numba,
#: triton needs Triton; both are test extras).
BACKENDS = _cpu_backends()
#: The backends compared with the reference backend by the differential suite.
COMPILED = [b for b in BACKENDS if b != "reference"]
#: Triton's interpreter runs a kernel some hundred times slower than the compiled cpu backend: in CI each
#: test function runs ``TRITON_CASES`` of its Triton cases, a fixed sample (the first always);
#: ``--full`` runs them all.
TRITON_CASES = 2
#: More cases where each is small: the differential suite's configurations are 32 x 32 GEMMs.
TRITON_CASES_OF = {"test_backend_equals_reference_backend": 8}
#: Test functions whose every case takes the interpreter a minute or more (K up to 2**16, S up to 32):
#: their Triton cases run with ``--full`` only. CI still runs pairwise combination at S = 5, 11 and 20
#: in the interpreter (tests/unit/test_triton_backend.py::test_pairwise_combination_at_large_s).
TRITON_FULL_ONLY = frozenset({
    "test_split_combination_order_matters_and_matches",
    "test_combination_order_probes_up_to_32_parts",
    "test_pairwise_record",
    # a minute in the interpreter on an AVX2 runner; CI runs the triton backend's specials case of the same cases
    # (test_accumulate_with_nan_inf_and_specials) and the differential suite
    "test_accumulate_random",
})


@pytest.fixture(params=BACKENDS, scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test (all backends share one exactness suite)."""
    return str(request.param)


@pytest.fixture(params=COMPILED, scope="session")
def compiled_backend(request: pytest.FixtureRequest) -> str:
    """A backend other than the reference, for the differential suite."""
    return str(request.param)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier; outside ``--full``, keep a fixed sample of ``TRITON_CASES`` Triton
    cases of each test function (none of those in ``TRITON_FULL_ONLY``)."""
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item.path)))
    if FULL:
        return
    groups: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        params = getattr(item, "callspec", None)
        if params is not None and "triton" in (params.params.get("backend"), params.params.get("compiled_backend")):
            groups.setdefault(f"{item.path}::{getattr(item, 'originalname', item.name)}", []).append(i)
    drop: set[int] = set()
    for key, members in groups.items():
        if key.rsplit("::", 1)[1] in TRITON_FULL_ONLY:
            drop.update(members)
        else:
            count = TRITON_CASES_OF.get(key.rsplit("::", 1)[1], TRITON_CASES)
            if len(members) > count:  # a fixed pseudo-random sample (the same in every run), the first case kept
                keep = {members[0], *random.Random(key).sample(members[1:], count - 1)}
                drop.update(m for m in members if m not in keep)
    if drop:
        config.hook.pytest_deselected(items=[items[i] for i in sorted(drop)])
        items[:] = [item for i, item in enumerate(items) if i not in drop]


ROOT = Path(__file__).resolve().parents[1]


def tool_path(name: str) -> Path:
    """The script ``tools/<group>/<name>.py`` (or ``tools/<name>.py``): the tools are grouped by purpose."""
    found = sorted(ROOT.glob(f"tools/{name}.py")) + sorted(ROOT.glob(f"tools/*/{name}.py"))
    assert len(found) == 1, f"tools/**/{name}.py: {found}"
    return found[0]


def load_tool(name: str) -> "types.ModuleType":
    """Import a tool script (see :func:`tool_path`) as a module (the tools are scripts, not a package)."""
    import importlib.util
    import sys

    path = tool_path(name)
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


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


@pytest.fixture(scope="session")
def emulated_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One complete recording of the emulated 'GPU' (hopper arithmetic, contiguous splits), replayed once
    (its replay.json passed): plumbing for the record/replay tests. Tests change copies only
    (:func:`emulated_device.copy_recording`)."""
    import torch
    from emulated_device import TINY_GRID, EmulatedDevice

    from mmaemu.recording._record import record
    from mmaemu.recording._replay import replay

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        path = tmp_path_factory.mktemp("rec") / "hopper-emulated"
        record(path, budget_minutes=30, grid=TINY_GRID, device=EmulatedDevice("hopper"), progress=None)
        report = replay(path)
    finally:
        torch.set_num_threads(before)
    assert report.passed, report.summary()
    return path


# -- the evidence replayed once: outcomes of the record replays, for tools/docs/validation_report.py --outcomes -------------

#: Test functions whose cases are recorded evidence (one record or table each); their outcomes are logged.
EVIDENCE_TESTS = frozenset({"test_dot_record", "test_gemm_record", "test_pairwise_record", "test_call_record",
                            "test_every_recorded_row_resolves_to_the_recorded_split",
                            "test_every_workspace_and_customoption_resolves"})
_OUTCOMES: dict[str, dict[str, str]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    name = getattr(item, "originalname", item.name)
    callspec = getattr(item, "callspec", None)
    if name in EVIDENCE_TESTS and callspec is not None:
        params = callspec.params
        case = params.get("rec", params.get("table_id"))
        key = case["id"] if isinstance(case, dict) else str(case)
        report = outcome.get_result()
        report.user_properties.append(("evidence", (name, str(params.get("backend", "-")), key)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for prop, value in report.user_properties:
        if prop != "evidence":
            continue
        name, backend, key = value
        cases = _OUTCOMES.setdefault(f"{name}/{backend}", {})
        previous = cases.get(key)
        if report.failed:
            cases[key] = "failed"
        elif report.when == "call" and report.passed and previous != "failed":
            cases[key] = "passed"
        elif report.skipped and previous is None:
            cases[key] = "skipped"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get("MMAEMU_EVIDENCE_LOG")
    if target and not hasattr(session.config, "workerinput"):  # the controller under pytest-xdist
        import json

        Path(target).write_text(json.dumps({"format": "mmaemu-evidence-outcomes/1", "outcomes": _OUTCOMES},
                                           indent=0, sort_keys=True) + "\n")
