"""Where ctk's own data lives: the repository's ansible/, images/, blueprints/, sbatch/."""

from __future__ import annotations

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE = os.path.join(REPO, "ansible")
IMAGES = os.path.join(REPO, "images")
BLUEPRINTS = os.path.join(REPO, "blueprints")
SBATCH = os.path.join(REPO, "sbatch")
TESTS_IMAGE = os.path.join(REPO, "tests", "image")


def ansible_dir() -> str:
    """The playbooks and roles images are built with (CTK_ANSIBLE_DIR overrides, e.g. for a
    site's own roles)."""
    return os.environ.get("CTK_ANSIBLE_DIR", ANSIBLE)
