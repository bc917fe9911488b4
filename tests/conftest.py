import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "toolkit"))

FIXTURES = os.path.normpath(os.path.join(ROOT, "..", "shared", "fixtures", "cluster-toolkit"))


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
