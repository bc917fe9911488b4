"""The gcp target: Cluster Toolkit's gcluster deploys; ctk hands it the blueprint and the roles.

`ctk deploy` writes the deployment folder (its gcp/ part is render.gcluster's), then runs
`gcluster deploy DIR/gcp/blueprint.yaml` when gcluster is on PATH; without it, it prints the
commands to run. gcluster keeps its own deployment folder, DIR/gcp/DEPLOYMENT_NAME, which
`ctk destroy` hands back to `gcluster destroy`. Status, exec and jobs go through the cluster's
login node over SSH (`ctk job --host`), as for any cluster ctk did not boot itself.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess

from ..errors import Failure, UserError
from ..model import Deployment, GcpSettings
from ..progress import Progress
from .base import DeployOutcome, Status, Target

GCLUSTER = "gcluster"


def _gcp_dir(deployment_dir: str) -> str:
    return os.path.join(deployment_dir, "gcp")


def _deployment_name(deployment_dir: str) -> str:
    with open(os.path.join(deployment_dir, "deployment.json")) as f:
        return json.load(f)["deployment_name"]


def deploy_commands(dep: Deployment, deployment_dir: str) -> list[list[str]]:
    """The gcluster command that deploys the folder's blueprint (images, then cluster)."""
    argv = [GCLUSTER, "deploy", os.path.join(_gcp_dir(deployment_dir), "blueprint.yaml"),
            "-o", _gcp_dir(deployment_dir), "--auto-approve"]
    if not dep.settings_of(GcpSettings).project_id:
        argv[3:3] = ["--vars", "project_id=YOUR_PROJECT"]
    return [argv]


def _run(argv: list[str], progress: Progress) -> None:
    progress.say("running: " + shlex.join(argv))
    r = subprocess.run(argv)
    if r.returncode != 0:
        raise Failure(f"{argv[0]} {argv[1]} failed (exit {r.returncode})")


class GcpTarget(Target):
    name = "gcp"

    def deploy(self, exp, dep: Deployment, deployment_dir: str, *, max_nodes: int | None,
               progress: Progress) -> DeployOutcome:
        if max_nodes:
            progress.say("note: --max-nodes is for the local target; on the gcp target the nodesets' own counts hold")
        cmds = deploy_commands(dep, deployment_dir)
        gcluster = shutil.which(GCLUSTER)
        commands = [shlex.join(c) for c in cmds]
        record = {"target": "gcp", "blueprint": os.path.join(_gcp_dir(deployment_dir), "blueprint.yaml"),
                  "commands": commands, "ran": False}
        if gcluster is None:
            return DeployOutcome([
                f"{dep.deployment_name}: wrote {record['blueprint']} (and the roles tarball beside it)",
                "gcluster (Cluster Toolkit) is not on PATH; to deploy, run:",
                *(f"  {c}" for c in commands),
                f"and to take it down: gcluster destroy {os.path.join(_gcp_dir(deployment_dir), dep.deployment_name)}"],
                record)
        if not dep.settings_of(GcpSettings).project_id:
            raise UserError("the gcp target needs a Google Cloud project to deploy into",
                            hint="give it: ctk deploy BP --vars project_id=YOUR_PROJECT")
        for c in cmds:
            _run(c, progress)
        record["ran"] = True
        return DeployOutcome([
            f"{dep.deployment_name}: deployed with gcluster from {record['blueprint']}",
            f"stop it:  ctk destroy {deployment_dir}"], record)

    def is_deployed(self, deployment_dir: str) -> bool:
        return os.path.isdir(os.path.join(_gcp_dir(deployment_dir), _deployment_name(deployment_dir)))

    def status(self, deployment_dir: str) -> Status:
        raise UserError(f"{deployment_dir} is on Google Cloud: ctk status reads only clusters it runs",
                        hint="ask the cluster's login node: ctk job status --host LOGIN_NODE")

    def destroy(self, deployment_dir: str, progress: Progress, purge: bool = False) -> str:
        if purge:
            raise UserError("--purge: a cluster on Google Cloud keeps no data in its deployment folder",
                            hint=f"ctk destroy {deployment_dir}")
        gdir = os.path.join(_gcp_dir(deployment_dir), _deployment_name(deployment_dir))
        argv = [GCLUSTER, "destroy", gdir, "--auto-approve"]
        if shutil.which(GCLUSTER) is None:
            return "gcluster (Cluster Toolkit) is not on PATH; to take the cluster down, run:\n  " + shlex.join(argv)
        if not os.path.isdir(gdir):
            return f"{deployment_dir}: gcluster has not deployed it ({gdir} does not exist); nothing to destroy"
        _run(argv, progress)
        return f"destroyed {deployment_dir} with gcluster"

    def exec(self, deployment_dir: str, node: str, argv: list[str], user: str | None = None) -> int:
        raise UserError("ctk exec runs commands on clusters ctk runs; this one is on Google Cloud",
                        hint=f"gcloud compute ssh {node} -- {shlex.join(argv)}")

    def env(self, deployment_dir: str, user: str | None = None) -> str:
        raise UserError("ctk env points Slurm's commands at clusters ctk runs; this one is on Google Cloud",
                        hint="submit through its login node: ctk job submit TEMPLATE --host LOGIN_NODE")

    def job_cluster(self, deployment_dir: str):
        raise UserError("jobs on a Google Cloud cluster go through its login node",
                        hint="ctk job submit TEMPLATE --host LOGIN_NODE (ssh config from gcloud compute config-ssh)")
