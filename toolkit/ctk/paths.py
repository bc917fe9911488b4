"""Where ctk's own data lives: the package data under ctk/data (Ansible roles, sbatch
templates, stacks and Packer files, blueprints, image verification suites).

Found next to the package's own modules (its import spec's location), so an installed wheel
and a source checkout find the same files. ctk is always installed unzipped: these are real
folders, which ansible, packer and pytest (run as subprocesses) read. (importlib.resources
would find them too, but loads zipfile and pathlib: a tenth of `ctk job submit`'s imports.)
"""

from __future__ import annotations

import os

from .errors import Failure

_PACKAGE = os.path.dirname(os.path.abspath(__spec__.origin or __file__))


def _data(name: str) -> str:
    path = os.path.join(_PACKAGE, "data", name)
    if not os.path.isdir(path):
        raise Failure(f"ctk's data folder {name!r} is not on the filesystem ({path})",
                      hint="install ctk unzipped (pip install), with its package data")
    return path


ANSIBLE = _data("ansible")
IMAGES = _data("images")
BLUEPRINTS = _data("blueprints")
SBATCH = _data("sbatch")
VERIFY = _data("verify")
GRAFANA_DASHBOARD = os.path.join(_data("grafana"), "slurm.json")  # for the metrics role's Prometheus
TESTS_IMAGE = VERIFY  # the suites' old home was the repository's tests/image


def ansible_dir() -> str:
    """The playbooks and roles images are built with (CTK_ANSIBLE_DIR overrides, e.g. for a
    site's own roles)."""
    return os.environ.get("CTK_ANSIBLE_DIR", ANSIBLE)
