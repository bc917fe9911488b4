"""Role jax: the stack's venv at /opt/ctk/jax with exactly the pinned versions, on PATH."""

import json

import pytest


@pytest.fixture(autouse=True)
def _only_with_jax(roles):
    if "jax" not in roles:
        pytest.skip("image has no jax role")


def test_venv_has_exact_pins(host, image):
    out = host.check_output("/opt/ctk/jax/bin/python -m pip list --format=json --disable-pip-version-check")
    installed = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(out)}
    for name, version in image["stack"]["pins"].items():
        base = name.split("[")[0].lower().replace("_", "-")
        assert installed.get(base) == version, f"{base}: {installed.get(base)} != {version}"


def test_profile_puts_venv_on_path(host):
    f = host.file("/etc/profile.d/ctk-jax.sh")
    assert f.exists and "/opt/ctk/jax/bin" in f.content_string
    assert "/opt/ctk/jax/bin" in host.check_output("bash -lc 'echo $PATH'")


def test_slurm_task_prolog_puts_venv_first_on_path(host):
    """slurm.conf's TaskProlog: every task of a job, the batch script included, gets the venv."""
    f = host.file("/usr/lib/ctk/jax-task-prolog")
    assert f.exists and f.mode == 0o755
    out = host.check_output("env PATH=/usr/bin:/bin /usr/lib/ctk/jax-task-prolog")
    assert out.strip() == "export PATH=/opt/ctk/jax/bin:/usr/bin:/bin"
    assert host.check_output("env PATH=/opt/ctk/jax/bin:/bin /usr/lib/ctk/jax-task-prolog").strip() == ""
