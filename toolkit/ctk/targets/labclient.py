"""The lab's job cluster: how `ctk job --deployment DIR`, `ctk status` and the tests reach a
running lab's Slurm. Each command is the lab's own Slurm client, run in its client node (the
first login node, else the controller) with nsenter; jobs live in the lab's shared /home.

Kept apart from the target's builders (targets.local) so that `ctk job submit` imports only
this: no planning, rendering, network or daemon code.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict
from typing import TYPE_CHECKING, Sequence

from ..connect.base import NODE_HOME, NODE_JOBS_DIR, HereCluster, Result, SlurmError, exit_of, parse_kv_line
from ..errors import UserError
from ..sandbox import node as nodes
from ..sandbox import DaemonError

if TYPE_CHECKING:
    from .local import LabNode


def lab_dir(deployment_dir: str) -> str:
    return os.path.join(deployment_dir, "lab")


def load_state(deployment_dir: str) -> dict | None:
    try:
        with open(os.path.join(lab_dir(deployment_dir), "state.json")) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def jobcomp_log(deployment_dir: str) -> str:
    """slurmctld's job completion log on this machine (jobcomp/filetxt)."""
    return os.path.join(os.path.abspath(lab_dir(deployment_dir)), "slurmctld", "jobcomp.log")


def client_node(nodes_: Sequence[dict] | Sequence[LabNode]) -> str:
    """The node whose Slurm client commands ctk runs: the first login node, else the controller."""
    rows = [x if isinstance(x, dict) else asdict(x) for x in nodes_]
    return next((x["name"] for x in rows if x["role"] == "login"), next(x["name"] for x in rows if x["role"] == "controller"))


def client_dir(deployment_dir: str) -> str:
    """The state folder of the lab's client node."""
    state = load_state(deployment_dir)
    if state is None:
        raise UserError(f"{deployment_dir} has no running lab", hint=f"ctk deploy BLUEPRINT -o {deployment_dir}")
    return os.path.join(lab_dir(deployment_dir), "nodes", client_node(state["nodes"]))


def slurm(deployment_dir: str, *argv: str, timeout: float = 30, check: bool = True, cwd: str = "/",
          stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run one of the lab's own Slurm client commands in its client node (the host needs no Slurm)."""
    sd = client_dir(deployment_dir)
    try:
        full = nodes.exec_argv(sd, list(argv), cwd=cwd)
    except DaemonError:
        if check:
            raise DaemonError(f"{argv[0]}: the lab's node {os.path.basename(sd)} is not running",
                              hint="ctk status shows the lab; ctk deploy brings it back") from None
        return subprocess.CompletedProcess(list(argv), 255, "", f"node {os.path.basename(sd)} is not running")
    r = subprocess.run(full, capture_output=True, text=True, timeout=timeout, input=stdin,
                       stdin=None if stdin is not None else subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise DaemonError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


class LabCluster(HereCluster):
    """Where `ctk job --deployment DIR` goes for a lab: the lab's own Slurm commands, run in its
    client node, and its shared /home, a folder of the deployment."""

    def __init__(self, deployment_dir: str):
        self.dir = os.path.abspath(deployment_dir)
        self.key = self.dir
        self.registry_dir = self.dir
        self.jobs_dir = NODE_JOBS_DIR

    def __repr__(self) -> str:
        return f"LabCluster({self.dir!r})"

    def deployment_dir(self) -> str:
        return self.dir

    def check(self) -> "LabCluster":
        if load_state(self.dir) is None:
            raise UserError(f"--deployment {self.dir}: not deployed on the local target",
                            hint=f"ctk deploy BLUEPRINT -o {self.dir}")
        return self

    def run(self, argv: Sequence[str], timeout: float = 30, stdin: str | None = None) -> Result:
        try:
            r = slurm(self.dir, *argv, timeout=timeout, check=False, cwd=NODE_HOME, stdin=stdin)
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{argv[0]}: no answer from the lab within {timeout:.0f}s") from None
        return Result(r.returncode, r.stdout, r.stderr)

    def put_script(self, text: str, name: str) -> str:
        host = super().put_script(text, name)  # into the shared /home, under its host path
        return os.path.join(NODE_HOME, os.path.relpath(host, os.path.join(self.dir, "lab", "home")))

    def host_path(self, node_path: str) -> str | None:
        """Where NODE_PATH (absolute, or relative to the jobs folder) lies on this machine;
        None outside the shared /home."""
        p = os.path.normpath(node_path if node_path.startswith("/") else os.path.join(NODE_JOBS_DIR, node_path))
        if p != NODE_HOME and not p.startswith(NODE_HOME + "/"):
            return None
        return os.path.join(self.dir, "lab", "home", os.path.relpath(p, NODE_HOME))

    def forgotten(self, ids: Sequence[str]) -> dict[str, tuple[str, int | None]]:
        """From accounting (one sacct call) where the lab keeps it; for the rest (a lab without
        accounting, or slurmdbd down), from the line slurmctld writes for every finished job to
        its job completion log (jobcomp/filetxt), kept in the deployment folder."""
        state = load_state(self.dir) or {}
        out: dict[str, tuple[str, int | None]] = self._sacct(ids) if state.get("accounting") else {}
        want = set(ids) - set(out)
        if not want:
            return out
        try:
            with open(jobcomp_log(self.dir), encoding="utf-8", errors="replace") as f:
                for line in f:  # a requeued job has a line per run: the last one wins
                    rec = parse_kv_line(line)
                    if rec.get("JobId") in want:
                        out[rec["JobId"]] = (rec.get("JobState", "UNKNOWN"), exit_of(rec.get("ExitCode", "")))
        except FileNotFoundError:
            pass
        return out


def job_cluster(deployment_dir: str) -> LabCluster:
    """The lab's cluster, once it is known to be deployed."""
    return LabCluster(deployment_dir).check()
