"""What the lab benchmarks share: ctk run from this checkout, and a lab's own Slurm commands as
root (the wrappers `ctk env --user root` puts on PATH), run from the lab's shared /root."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLUEPRINTS = os.path.join(ROOT, "tests", "integration", "blueprints")


def ctk(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`ctk ARGS` of this checkout; with CHECK a failure ends the benchmark with its error."""
    r = subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "toolkit")})
    if check and r.returncode != 0:
        sys.exit(f"ctk {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return r


def lab_env(dep: str) -> dict:
    """The environment in which the lab's Slurm commands run as root."""
    m = re.search(r"export PATH=(\S+):", ctk("env", dep, "--user", "root").stdout)
    assert m
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env.update(PATH=m.group(1) + os.pathsep + env["PATH"], CTK_LAB_USER="root")
    return env


def slurm(env: dict, dep: str, *argv: str) -> subprocess.CompletedProcess:
    """One of the lab's Slurm commands (ARGV), in ENV from lab_env."""
    return subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=60,
                          cwd=os.path.join(dep, "lab", "root"))


@contextlib.contextmanager
def lab_folder(prefix: str) -> Iterator[tuple[str, str]]:
    """(a new temporary folder, the deployment folder in it); at the end the lab there is
    destroyed with its data, and the folder removed once that succeeded."""
    top = tempfile.mkdtemp(prefix=prefix)
    dep = os.path.join(top, "dep")
    try:
        yield top, dep
    finally:
        if not os.path.exists(dep) or ctk("destroy", dep, "--purge", check=False).returncode == 0:
            shutil.rmtree(top, ignore_errors=True)
