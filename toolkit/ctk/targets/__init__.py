"""Targets: where a deployment runs, one module each behind one interface (targets.base.Target).

    local   a real Slurm cluster on this machine, booted from the built images (targets.local)
    ssh     existing machines, configured over SSH by the same Ansible roles (targets.ssh)
    gcp     Google Cloud: Cluster Toolkit's gcluster deploys the blueprint ctk writes (targets.gcp)

A target is found by name through REGISTRY (the blueprint's target, or the one a deployment
folder records); a new target is a module with a Target subclass and one line here.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from ..errors import UserError, did_you_mean
from ..progress import Progress
from .base import (DeployOutcome, NodeStatus, PartitionStatus, Status, Target, deployment_lock,
                   target_of_folder)

if TYPE_CHECKING:
    from ..blueprint.expand import Expanded

# name -> "module:class", imported on first use.
REGISTRY = {
    "local": "ctk.targets.local:LocalTarget",
    "ssh": "ctk.targets.ssh:SshTarget",
    "gcp": "ctk.targets.gcp:GcpTarget",
}
# The job cluster a deployment of a target hands to `ctk job`, where it lives apart from the
# target's builders, so that a submit imports only it; other targets hand theirs through
# Target.job_cluster.
JOB_CLUSTERS = {
    "local": "ctk.targets.labclient:job_cluster",
}

_loaded: dict[str, Target] = {}


def get(name: str) -> Target:
    """The target called NAME."""
    if name in _loaded:
        return _loaded[name]
    spec = REGISTRY.get(name)
    if spec is None:
        raise UserError(f"unknown target {name!r}", hint=did_you_mean(name, REGISTRY) or f"targets: {', '.join(REGISTRY)}")
    module, cls = spec.split(":")
    _loaded[name] = getattr(importlib.import_module(module), cls)()
    return _loaded[name]


def job_cluster(name: str, deployment_dir: str):
    """The cluster `ctk job --deployment DIR` submits to, for a deployment of target NAME."""
    spec = JOB_CLUSTERS.get(name)
    if spec is None:
        return get(name).job_cluster(deployment_dir)
    module, fn = spec.split(":")
    return getattr(importlib.import_module(module), fn)(deployment_dir)


def of_folder(deployment_dir: str) -> Target:
    """The target of a deployment folder; a UserError (exit 2) if it is not a deployment folder."""
    name = target_of_folder(deployment_dir)
    if name is None:
        if not os.path.exists(deployment_dir):
            raise UserError(f"{deployment_dir}: no such deployment folder",
                            hint="create one with 'ctk deploy BLUEPRINT -o DIR'")
        raise UserError(f"{deployment_dir} is not a ctk deployment folder (no deployment.json)",
                        hint="give the folder 'ctk deploy BLUEPRINT -o DIR' wrote")
    return get(name)


def deploy(exp: "Expanded", deployment_dir: str, *, max_nodes: int | None, progress: Progress) -> DeployOutcome:
    """Write the deployment folder's files and deploy it on its blueprint's target, holding the
    folder's lock."""
    from . import folder

    dep = exp.deployment  # type: ignore[attr-defined]
    target = get(dep.target)
    with deployment_lock(deployment_dir):
        folder.update(exp, dep, deployment_dir)
        return target.deploy(exp, dep, deployment_dir, max_nodes=max_nodes, progress=progress)


def destroy(deployment_dir: str | None, progress: Progress, lease: int | None = None, force: bool = False) -> str:
    """Stop a deployment; with LEASE, the lab holding that lease whose folder is gone (with
    FORCE, one whose folder is still there too). A lab whose folder was removed while it ran is
    stopped through its lease too."""
    from . import leases, local

    if lease is not None:
        holder = leases.holder(lease)
        if holder is None:
            raise UserError(f"--lease {lease}: no lab holds that lease")
        if os.path.isdir(holder) and not force:  # someone's lab, running: its folder says whose
            raise UserError(f"--lease {lease} is held by the lab in {holder}, whose folder still exists",
                            hint=f"ctk destroy {holder} stops it; --force stops it through its lease anyway")
        stopped = local.destroy_local(holder)
        return f"destroyed the lab of lease {lease} ({holder}): stopped {len(stopped)} node(s)"
    assert deployment_dir is not None
    if not os.path.isdir(deployment_dir) and local.has_leftovers(deployment_dir):
        stopped = local.destroy_local(deployment_dir)
        return f"destroyed {deployment_dir} (its folder is gone): stopped {len(stopped)} node(s)"
    target = of_folder(deployment_dir)
    with deployment_lock(deployment_dir):
        return target.destroy(deployment_dir, progress)


__all__ = ["REGISTRY", "DeployOutcome", "NodeStatus", "PartitionStatus", "Status", "Target", "deploy", "destroy", "get", "job_cluster", "of_folder"]
