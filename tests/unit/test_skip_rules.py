"""tests/conftest.py's rules for skips, run on a small sample suite in a separate pytest: without
the Cluster Toolkit fixtures their tests skip with the reason; with CTK_NO_SKIP=1 (as .ci/run
sets it) a skip is a failure naming the test and the reason, unless a `requires_gpu` test lacks
its GPU."""

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

from conftest import FIXTURES_REL, GPU_SKIP_PREFIX, ROOT, gpu_present

SAMPLE = '''\
import pytest


def test_runs():
    pass


def test_skips_itself():
    pytest.skip("tool X is not installed")


def test_claims_a_gpu_without_the_marker():
    pytest.skip("no GPU here")


@pytest.mark.requires_gpu
def test_needs_a_gpu():
    pass


@pytest.mark.requires_gpu
def test_gpu_test_skipped_for_another_reason():
    pytest.skip("nvidia-smi is not installed")


@pytest.mark.ct_fixtures
@pytest.mark.parametrize("bp", [])
def test_reads_the_fixtures(bp):
    pass
'''

MODULE_SKIP = '''\
import pytest

pytest.skip("slurmctld is not installed", allow_module_level=True)


def test_never_collected():
    pass
'''


def run_sample(tmp_path, files: dict[str, str], **env) -> tuple[int, dict[str, tuple[str, str]], str]:
    """pytest on the files beside a copy of tests/conftest.py (and the plugin it loads): its exit code, each test's
    (outcome, message), and its output."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(os.path.join(ROOT, "tests", "conftest.py"), suite / "conftest.py")
    shutil.copy(os.path.join(ROOT, "tests", "diskwatch.py"), suite / "diskwatch.py")
    for name, text in files.items():
        (suite / name).write_text(text)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CTK_")}
    xml = tmp_path / "report.xml"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                        str(suite)], capture_output=True, text=True, cwd=suite,
                       env={**clean, "CTK_FIXTURES": str(tmp_path / "absent"), **env})
    results = {}
    for case in ET.parse(xml).iter("testcase"):
        outcome = [c for c in case if c.tag in ("skipped", "failure", "error")]
        results[case.get("name")] = ((outcome[0].tag, outcome[0].get("message")) if outcome else ("passed", None))
    return r.returncode, results, r.stdout


def fixtures_reason(tmp_path) -> str:
    return (f"{FIXTURES_REL} not found: {tmp_path / 'absent'} (Cluster Toolkit's example blueprints, "
            "beside this repository; .ci/run refuses to run without them)")


GPU_SKIP = ("skipped", f"{GPU_SKIP_PREFIX}: /dev/nvidiactl or /dev/nvidia0 absent")


def test_without_ctk_no_skip_skips_stay_skips(tmp_path):
    rc, got, _ = run_sample(tmp_path, {"test_sample.py": SAMPLE})
    assert rc == 0
    assert got == {
        "test_runs": ("passed", None),
        "test_skips_itself": ("skipped", "tool X is not installed"),
        "test_claims_a_gpu_without_the_marker": ("skipped", "no GPU here"),
        "test_needs_a_gpu": ("passed", None) if gpu_present() else GPU_SKIP,
        "test_gpu_test_skipped_for_another_reason": (
            ("skipped", "nvidia-smi is not installed") if gpu_present() else GPU_SKIP),
        "test_reads_the_fixtures[NOTSET]": ("skipped", fixtures_reason(tmp_path)),
    }


def test_ctk_no_skip_fails_every_skip_but_a_missing_gpu(tmp_path):
    rc, got, _ = run_sample(tmp_path, {"test_sample.py": SAMPLE}, CTK_NO_SKIP="1")
    assert rc == 1

    def forbidden(test, reason):
        return f"test_sample.py::{test} was skipped, and CTK_NO_SKIP forbids it: {reason}"

    assert got == {
        "test_runs": ("passed", None),
        "test_skips_itself": ("failure", forbidden("test_skips_itself", "tool X is not installed")),
        "test_claims_a_gpu_without_the_marker": (
            "failure", forbidden("test_claims_a_gpu_without_the_marker", "no GPU here")),
        "test_needs_a_gpu": ("passed", None) if gpu_present() else GPU_SKIP,
        # With a GPU the test runs and its own skip fails; without one it never gets that far.
        "test_gpu_test_skipped_for_another_reason": (
            ("failure", forbidden("test_gpu_test_skipped_for_another_reason", "nvidia-smi is not installed"))
            if gpu_present() else GPU_SKIP),
        # A skip at setup (the fixtures' mark) fails there: pytest reports it as an error.
        "test_reads_the_fixtures[NOTSET]": (
            "error", "failed on setup with \"" + forbidden("test_reads_the_fixtures[NOTSET]",
                                                           fixtures_reason(tmp_path)) + "\""),
    }


def test_ctk_no_skip_fails_a_module_that_skips_itself(tmp_path):
    rc, got, out = run_sample(tmp_path, {"test_sample.py": SAMPLE, "test_needs_slurm.py": MODULE_SKIP},
                              CTK_NO_SKIP="1")
    # A collection error stops the session before any test runs.
    assert rc == 2
    assert got == {"test_needs_slurm": ("error", "collection failure")}
    assert ("test_needs_slurm.py was skipped, and CTK_NO_SKIP forbids it: slurmctld is not installed\n"
            in out), out
