import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "toolkit"))

# Cluster Toolkit's own blueprints and modules, kept beside the repository (not copied into it).
# CTK_FIXTURES points elsewhere (or at nothing, to see what skips without them).
FIXTURES_REL = "../shared/fixtures/cluster-toolkit"
FIXTURES = os.path.normpath(os.environ.get("CTK_FIXTURES") or os.path.join(ROOT, *FIXTURES_REL.split("/")))
FIXTURES_MISSING = None if os.path.isdir(FIXTURES) else (
    f"{FIXTURES_REL} not found: {FIXTURES} (Cluster Toolkit's example blueprints, "
    "beside this repository)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"ct_fixtures: reads {FIXTURES_REL}; skipped with the reason when it is absent")


def pytest_collection_modifyitems(config, items):
    for item in items:
        # Prepended, so this reason wins over pytest's own "got empty parameter set".
        if FIXTURES_MISSING and item.get_closest_marker("ct_fixtures"):
            item.add_marker(pytest.mark.skip(reason=FIXTURES_MISSING), append=False)


@pytest.fixture
def write(tmp_path):
    """Write a blueprint text to a file and return its path."""
    def _write(text: str, name: str = "bp.yaml") -> str:
        p = tmp_path / name
        p.write_text(text)
        return str(p)
    return _write

# tests/image/ holds the testinfra suites ctk runs against a built image (ctk image test);
# they need a node to talk to, so a plain `pytest tests` leaves them to that command.
collect_ignore = [] if os.environ.get("CTK_IMAGE_VERIFY") else ["image"]
