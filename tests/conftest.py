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
