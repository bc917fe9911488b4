"""The package's layers hold: import-linter's contract in pyproject.toml, run for real."""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _lint_imports() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    return exe if os.path.exists(exe) else shutil.which("lint-imports") or exe


def test_layer_contract_is_kept():
    r = subprocess.run([_lint_imports(), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "toolkit")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Contracts: 1 kept, 0 broken." in r.stdout


def test_a_wrong_way_import_breaks_the_contract(tmp_path):
    """The contract can fail: a copy of the package in which the model imports the CLI."""
    pkg = tmp_path / "toolkit"
    shutil.copytree(os.path.join(ROOT, "toolkit", "ctk"), pkg / "ctk",
                    ignore=shutil.ignore_patterns("__pycache__", "data"))
    model = pkg / "ctk" / "model.py"
    model.write_text(model.read_text() + "\nfrom . import cli  # noqa\n")
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path / "pyproject.toml")
    r = subprocess.run([_lint_imports(), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(pkg)})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ctk.model -> ctk.cli" in r.stdout
