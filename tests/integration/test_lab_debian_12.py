"""The Debian 12 lab, from the image built in the background since the session began
(conftest.py). A module of its own, so that with several workers it runs once that build is
likely done, and on a worker of its own rather than holding up another module's lab."""

import os

import pytest

from .conftest import LAB_12
from .labtools import (
    assert_jaxlib_accepts_template_xla_flags,
    deploy,
    sacct_line,
    wait_forgotten,
)

# It waits for the Debian 12 image's background build: longer than the 900 s a test gets elsewhere.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(2700)]


def test_a_debian_12_lab_still_deploys_and_runs_jax_smoke(lab12_store, tmp_path_factory):
    """Debian 12 (Slurm 22.05, Python 3.11) stays supported: its lab runs jax-smoke on two
    nodes with the stack for its Python (jax 0.10.2), driven by its own Slurm commands. Its
    image was built in the background (conftest.py), into the store it deploys from."""
    from ctk.stacks import load_stacks
    layers = sorted(os.listdir(os.path.join(lab12_store, "layers")))
    lab = deploy(tmp_path_factory, lab12_store, "lab12", LAB_12)
    assert sorted(os.listdir(os.path.join(lab12_store, "layers"))) == layers  # it built nothing
    try:
        assert lab.slurm("sinfo", "-V").stdout.split()[-1].startswith("22.05")
        r = lab.ctk("job", "submit", "jax-smoke", "--deployment", lab.path, "--nodes", "2", "--wait", timeout=300)
        assert r.returncode == 0, (r.stdout, r.stderr)
        out = lab.ctk("job", "logs", r.stdout.strip(), "--deployment", lab.path).stdout
        fields = [dict(kv.split("=") for kv in ln.split()[1:]) for ln in out.splitlines() if ln.startswith("ctk-smoke ")]
        assert sorted(f["process"] for f in fields) == ["0", "1"]
        assert all(f["process_count"] == "2" and f["reduced"] == "2" for f in fields)
        r = lab.ctk("exec", lab.path, "lab12-login-0", "--", "/opt/ctk/jax/bin/python", "-c", "import jax; print(jax.__version__)")
        assert r.stdout.strip() == load_stacks()["jax-cpu-0.10"].jax, (r.stdout, r.stderr)
        assert_jaxlib_accepts_template_xla_flags(lab, "lab12-login-0")  # jaxlib 0.10.2
        # Accounting with Slurm 22.05 and Debian 12's MariaDB: this lab keeps a finished job
        # 2 s (MinJobAge); once slurmctld has forgotten it, sacct still has its end.
        job = lab.slurm("sbatch", "--parsable", "-N1", "-o", "/dev/null", "--wrap", "exit 5").stdout.strip()
        wait_forgotten(lab, job)
        assert sacct_line(lab, job) == "FAILED|5:0"
    finally:
        lab.destroy()
