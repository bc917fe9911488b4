"""The Makefile's set-up agrees with pyproject.toml."""

import os
import re
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_venv_is_filled_by_the_uv_ctk_depends_on():
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    pin = re.search(r"^UV_PIN := (.+)$", makefile, re.M)
    assert pin, "Makefile: no UV_PIN line"
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    assert pin.group(1).strip() in deps, (pin.group(1), deps)
