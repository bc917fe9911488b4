"""The local target (LocalTarget): the lab's deploy, status, destroy, preempt, exec and env
behind the one interface every target offers (targets.base.Target)."""

from __future__ import annotations

import os
from dataclasses import asdict

from ...errors import UserError
from ...model import Deployment
from ...progress import Progress
from ...render.hostlist import compress
from ..base import DeployOutcome, Status, Target
from ..labclient import LabCluster, job_cluster
from ..labstate import lab_dir, load_state
from .commands import env_local, exec_local
from .deploy import deploy_local
from .destroy import destroy_local, destroy_message
from .identity import IDENTITY, lab_identity, set_aside_controller_state
from .plan import DEFAULT_MAX_NODES
from .preempt import preempt_local
from .status import status_local


class LocalTarget(Target):
    """A real Slurm cluster on this machine, booted from the built images (see the package's doc)."""

    name = "local"

    def deploy(self, exp, dep: Deployment, deployment_dir: str, *, max_nodes: int | None,
               progress: Progress) -> DeployOutcome:
        res = deploy_local(dep, deployment_dir, max_nodes=max_nodes or DEFAULT_MAX_NODES, progress=progress)
        total = len(res.booted) + len(res.restarted) + len(res.kept) + len(res.rolling)
        return DeployOutcome([
            f"{dep.deployment_name}: {total} node(s) up in {res.seconds:.1f}s "
            f"(booted {len(res.booted)}, restarted {len(res.restarted)}, unchanged {len(res.kept)}"
            + (f", rolling out a new image to {len(res.rolling)}" if res.rolling else "")
            + (", reconfigured" if res.reconfigured else "") + ")",
            *([f"roll-out: {compress(res.rolling)} reboot into the new image once their jobs end; follow it with "
               f"ctk status {deployment_dir}"] if res.rolling else []),
            f'use it:   eval "$(ctk env {deployment_dir})"; sinfo; srun -N2 hostname',
            f"stop it:  ctk destroy {deployment_dir}"], asdict(res))

    def is_deployed(self, deployment_dir: str) -> bool:
        return load_state(deployment_dir) is not None

    def status(self, deployment_dir: str) -> Status:
        return status_local(deployment_dir)

    def destroy(self, deployment_dir: str, progress: Progress, purge: bool = False) -> str:
        return destroy_message(deployment_dir, destroy_local(deployment_dir, purge=purge))

    def held(self, deployment_dir: str) -> dict | None:
        ident = lab_identity(deployment_dir)
        if ident is None:
            return None
        return {**ident, "running": load_state(deployment_dir) is not None}

    def preempt(self, deployment_dir: str, names: list[str], notice: float | None = None,
                wait: bool = False) -> list[dict]:
        return preempt_local(deployment_dir, names, notice=notice, wait=wait)

    def overwrite_refusal(self, deployment_dir: str) -> UserError | None:
        ldir = lab_dir(deployment_dir)
        if load_state(deployment_dir) is not None:
            return UserError(f"{deployment_dir} has a lab cluster deployed from it",
                             hint=f"`ctk deploy` updates it in place; `ctk destroy {deployment_dir}` stops it first")
        if os.path.isdir(ldir):
            return UserError(f"{deployment_dir} keeps a destroyed lab's data in {ldir} (its /home, /root and "
                             "accounting database); -w would delete it",
                             hint=f"`ctk deploy` updates the folder in place and uses that data again; "
                             f"`ctk destroy --purge {deployment_dir}` deletes it first")
        return None

    def replace(self, deployment_dir: str, old: dict, dep: Deployment, progress: Progress) -> list[str]:
        lines = []
        if old.get("running"):
            res = destroy_local(deployment_dir)
            lines.append(f"stopped the lab of cluster {old['cluster']} ({len(res.stopped)} node(s))")
        if old.get("cluster") != dep.slurm_cluster_name:
            moved = set_aside_controller_state(deployment_dir, old["cluster"])
            if moved:
                lines.append(f"kept the saved state of cluster {old['cluster']}'s controller in {moved}")
        try:
            os.unlink(os.path.join(lab_dir(deployment_dir), IDENTITY))
        except FileNotFoundError:
            pass
        return lines

    def exec(self, deployment_dir: str, node: str, argv: list[str], user: str | None = None) -> int:
        return exec_local(deployment_dir, node, argv, user)

    def env(self, deployment_dir: str, user: str | None = None) -> str:
        return env_local(deployment_dir, user)

    def job_cluster(self, deployment_dir: str) -> LabCluster:
        return job_cluster(deployment_dir)
