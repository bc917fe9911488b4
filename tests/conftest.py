import glob
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "toolkit"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import diskwatch  # noqa: E402

# Cluster Toolkit's own blueprints and modules, kept beside the repository (not copied into it).
# CTK_FIXTURES points elsewhere (or at nothing, to see what skips without them).
FIXTURES_REL = "../shared/fixtures/cluster-toolkit"
FIXTURES = os.path.normpath(os.environ.get("CTK_FIXTURES") or os.path.join(ROOT, *FIXTURES_REL.split("/")))
FIXTURES_MISSING = None if os.path.isdir(FIXTURES) else (
    f"{FIXTURES_REL} not found: {FIXTURES} (Cluster Toolkit's example blueprints, "
    "beside this repository; .ci/run refuses to run without them)")

# The one skip CI accepts (see NoSkip): the test needs GPU hardware this machine lacks.
GPU_SKIP_PREFIX = "no GPU"


def load_program(path: str, name: str):
    """A Python program ctk installs (a role's file, without a .py suffix) as a module."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader(name, path)
    spec = importlib.util.spec_from_loader(name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def gpu_present() -> bool:
    """An NVIDIA GPU and its driver on this machine (the device files the driver creates)."""
    return os.path.exists("/dev/nvidiactl") and bool(glob.glob("/dev/nvidia[0-9]*"))


def pytest_addoption(parser):
    parser.addoption("--soak-seconds", type=float, default=300, metavar="S",
                     help="how long the elastic lab's soak submits training jobs under random preemption "
                     "(default 300, the least CI runs)")


def pytest_configure(config):
    diskwatch.configure(config)
    config.addinivalue_line(
        "markers", f"ct_fixtures: reads {FIXTURES_REL}; skipped with the reason when it is absent")
    config.addinivalue_line(
        "markers", f"requires_gpu: needs NVIDIA GPU hardware; skipped ('{GPU_SKIP_PREFIX} ...') without it")
    config.addinivalue_line(
        "markers", "root: needs root (files of other owners, /run/ctk, capabilities); skipped without it, "
        "and left out of `make test-unit` run as another user")
    # The inner pytest of `ctk image build/test` (CTK_IMAGE_VERIFY) is ctk's own verification, whose
    # skips (a role the image does not have) are part of its result, not tests CI failed to run.
    if os.environ.get("CTK_NO_SKIP") and not os.environ.get("CTK_IMAGE_VERIFY"):
        config.pluginmanager.register(NoSkip(), "ctk-no-skip")


def pytest_collection_modifyitems(config, items):
    gpu_reason = None if gpu_present() else f"{GPU_SKIP_PREFIX}: /dev/nvidiactl or /dev/nvidia0 absent"
    for item in items:
        # Prepended, so this reason wins over pytest's own "got empty parameter set".
        if FIXTURES_MISSING and item.get_closest_marker("ct_fixtures"):
            item.add_marker(pytest.mark.skip(reason=FIXTURES_MISSING), append=False)
        if gpu_reason and item.get_closest_marker("requires_gpu"):
            item.add_marker(pytest.mark.skip(reason=gpu_reason), append=False)
        if os.geteuid() != 0 and item.get_closest_marker("root"):
            item.add_marker(pytest.mark.skip(reason="needs root"), append=False)


class NoSkip:
    """CTK_NO_SKIP=1 (set by .ci/run): a skipped test did not run, so it fails, with its reason;
    only a `requires_gpu` test skipped for want of a GPU stays skipped."""

    @staticmethod
    def _reason(report) -> str:
        longrepr = report.longrepr
        return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        reason = self._reason(report).removeprefix("Skipped: ")
        if item.get_closest_marker("requires_gpu") and reason.startswith(GPU_SKIP_PREFIX):
            return
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} was skipped, and CTK_NO_SKIP forbids it: {reason}"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector):
        # A module that skips itself as a whole (pytest.skip(allow_module_level=True)).
        outcome = yield
        report = outcome.get_result()
        if report.skipped:
            reason = self._reason(report).removeprefix("Skipped: ")
            report.outcome = "failed"
            report.longrepr = f"{collector.nodeid} was skipped, and CTK_NO_SKIP forbids it: {reason}"


@pytest.fixture
def write(tmp_path):
    """Write a blueprint text to a file and return its path."""
    def _write(text: str, name: str = "bp.yaml") -> str:
        p = tmp_path / name
        p.write_text(text)
        return str(p)
    return _write
