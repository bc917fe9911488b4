"""Shared by the integration tests: one lab image per session, built the way users build it."""

import json
import os
import re
import subprocess
import sys

import pytest

from ctk import paths

LAB = os.path.join(paths.BLUEPRINTS, "lab.yaml")


def ctk(*args, env=None, timeout=1800):
    return subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.fixture(scope="session")
def state(tmp_path_factory):
    """A fresh layer store for this session (CTK_STATE_DIR); CTK_TEST_STATE_DIR reuses one
    across sessions when iterating locally (then the first build may be a cache hit)."""
    if os.environ.get("CTK_TEST_STATE_DIR"):
        return os.environ["CTK_TEST_STATE_DIR"]
    return str(tmp_path_factory.mktemp("ctk-state"))


@pytest.fixture(scope="session")
def lab_build(state):
    """`ctk image build blueprints/lab.yaml` into the fresh store: builds and verifies."""
    r = ctk("image", "build", LAB, "--json", env={"CTK_STATE_DIR": state})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)[0]


SLURM_COMMANDS = ("sbatch", "srun", "salloc", "squeue", "sinfo", "scontrol", "scancel", "sacct")


def without_host_slurm(path: str) -> str:
    """PATH minus every folder that holds a host Slurm command."""
    return os.pathsep.join(d for d in path.split(os.pathsep)
                           if d and not any(os.path.exists(os.path.join(d, c)) for c in SLURM_COMMANDS))


def lab_env(deployment_dir: str) -> dict:
    """The environment `eval "$(ctk env DIR)"` makes, with no host Slurm command left on PATH."""
    r = ctk("env", deployment_dir)
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(r"export PATH=(\S+):\"\$PATH\"\n", r.stdout)
    assert m, r.stdout
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["PATH"] = m.group(1) + os.pathsep + without_host_slurm(os.environ["PATH"])
    return env
