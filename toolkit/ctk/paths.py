"""Where ctk's own data lives: the package data under ctk/data (Ansible roles, sbatch
templates, stacks and Packer files, blueprints, image verification suites).

Found through importlib.resources, so an installed wheel and a source checkout find the same
files. ctk is always installed unzipped: these are real folders, which ansible, packer and
pytest (run as subprocesses) read.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from .errors import Failure


def _data(name: str) -> str:
    res = files("ctk") / "data" / name
    if not isinstance(res, Path):
        raise Failure(f"ctk's data folder {name!r} is not on the filesystem ({res!r})",
                      hint="install ctk unzipped (pip install)")
    return str(res)


ANSIBLE = _data("ansible")
IMAGES = _data("images")
BLUEPRINTS = _data("blueprints")
SBATCH = _data("sbatch")
VERIFY = _data("verify")
TESTS_IMAGE = VERIFY  # the suites' old home was the repository's tests/image


def ansible_dir() -> str:
    """The playbooks and roles images are built with (CTK_ANSIBLE_DIR overrides, e.g. for a
    site's own roles)."""
    return os.environ.get("CTK_ANSIBLE_DIR", ANSIBLE)
