"""Targets: where a deployment runs, one module each behind one interface (targets.base.Target).

    local   a real Slurm cluster on this machine, booted from the built images (targets.local)
    ssh     existing machines, configured over SSH by the same Ansible roles (targets.ssh)
    gcp     Google Cloud: Cluster Toolkit's gcluster deploys the blueprint ctk writes (targets.gcp)

A target is found by name (the blueprint's target, or the one a deployment folder records) in
ctk.target_registry, which also says what it can do; a new target is a module with a Target
subclass and an entry there.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from ..errors import UserError, did_you_mean
from ..progress import Progress
from ..target_registry import TARGETS, resolve
from .base import (
    IDENTITY_HINT,
    DeployOutcome,
    NodeStatus,
    PartitionStatus,
    Status,
    Target,
    deployment_lock,
    not_a_deployment_folder,
    target_of_folder,
)

if TYPE_CHECKING:
    from ..plan import Planned

# name -> its entry (the Target subclass, imported on first use; its traits)
REGISTRY = TARGETS

_loaded: dict[str, Target] = {}


def get(name: str) -> Target:
    """The target called NAME."""
    if name in _loaded:
        return _loaded[name]
    entry = REGISTRY.get(name)
    if entry is None:
        raise UserError(f"unknown target {name!r}", hint=did_you_mean(name, REGISTRY) or f"targets: {', '.join(REGISTRY)}")
    _loaded[name] = resolve(entry.impl)()
    return _loaded[name]


def job_cluster(name: str, deployment_dir: str):
    """The cluster `ctk job --deployment DIR` submits to, for a deployment of target NAME."""
    entry = REGISTRY.get(name)
    if entry is None or entry.job_cluster is None:
        return get(name).job_cluster(deployment_dir)
    return resolve(entry.job_cluster)(deployment_dir)


def of_folder(deployment_dir: str) -> Target:
    """The target of a deployment folder; a UserError (exit 2) if it is not a deployment folder."""
    name = target_of_folder(deployment_dir)
    if name is None:
        if not os.path.exists(deployment_dir):
            raise UserError(f"{deployment_dir}: no such deployment folder",
                            hint="create one with 'ctk deploy BLUEPRINT -o DIR'")
        raise not_a_deployment_folder(deployment_dir)
    return get(name)


def held(deployment_dir: str) -> dict | None:
    """The cluster a deployment folder holds: {target, cluster, deployment, running}, where it is
    deployed or keeps a destroyed lab's data; None where it holds none."""
    name = target_of_folder(deployment_dir)
    if name is None or name not in REGISTRY:
        return None
    target = get(name)
    own = target.held(deployment_dir)
    if own is not None:
        return {"target": name, **own}
    if not target.is_deployed(deployment_dir):
        return None
    try:
        with open(os.path.join(deployment_dir, "deployment.json")) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    return {"target": name, "cluster": d.get("slurm_cluster_name"), "deployment": d.get("deployment_name"),
            "running": True}


def deploy(planned: Planned, deployment_dir: str, *, max_nodes: int | None, progress: Progress,
           overwrite: bool = False) -> DeployOutcome:
    """Write the deployment folder's files of a planned blueprint and deploy it on its target, holding the
    folder's lock. A folder that holds another cluster (another name, or another target) is
    refused before anything is written, unless OVERWRITE: then the old one is stopped first
    (its users' data kept)."""
    # Here, not at the top: the folder's writer loads the renderers (Packer, gcluster), and
    # `ctk job`, which imports this package for the lab's client, needs none of them.
    from . import folder

    exp, dep = planned.expanded, planned.deployment
    target = get(dep.target)
    with deployment_lock(deployment_dir):
        old = held(deployment_dir)
        if old is not None and (old["target"], old["cluster"]) != (dep.target, dep.slurm_cluster_name):
            what = f"cluster {old['cluster']!r}" + (f" (deployment {old['deployment']})" if old.get("deployment") else "")
            how = "runs" if old.get("running") else "keeps the data of"
            if not overwrite:
                raise UserError(
                    f"{deployment_dir} {how} {what} on the {old['target']} target; the blueprint is cluster "
                    f"{dep.slurm_cluster_name!r} (deployment {dep.deployment_name}) on the {dep.target} target: "
                    "a deployment folder holds one cluster",
                    hint=IDENTITY_HINT.format(dir=deployment_dir))
            replaced = get(old["target"]).replace(deployment_dir, old, dep, progress)
        else:
            replaced = None
        folder.update(exp, dep, deployment_dir)
        outcome = target.deploy(exp, dep, deployment_dir, max_nodes=max_nodes, progress=progress)
        if replaced is not None:
            assert old is not None  # a cluster is replaced only where the folder held one
            outcome.lines[:0] = [f"replaced cluster {old['cluster']}: {line}" for line in replaced]
            outcome.record["replaced"] = {"cluster": old["cluster"], "target": old["target"], "done": replaced}
        return outcome


def destroy(deployment_dir: str | None, progress: Progress, lease: int | None = None, force: bool = False,
            purge: bool = False) -> str:
    """Stop a deployment; with LEASE, the lab holding that lease whose folder is gone (with
    FORCE, one whose folder is still there too). A lab whose folder was removed while it ran is
    stopped through its lease too."""
    # Here, not at the top: the local target's package loads the lab's planning, rendering and
    # daemon code, and `ctk job` imports this package (for targets.labclient) without them.
    from . import leases, local

    if lease is not None:
        holder = leases.holder(lease)
        if holder is None:
            raise UserError(f"--lease {lease}: no lab holds that lease")
        if os.path.isdir(holder) and not force:  # someone's lab, running: its folder says whose
            raise UserError(f"--lease {lease} is held by the lab in {holder}, whose folder still exists",
                            hint=f"ctk destroy {holder} stops it; --force stops it through its lease anyway")
        res = local.destroy_local(holder, purge=purge)
        return local.destroy_message(holder, res).replace(f"destroyed {holder}", f"destroyed the lab of lease {lease} ({holder})", 1)
    assert deployment_dir is not None
    if not os.path.isdir(deployment_dir) and local.has_leftovers(deployment_dir):
        res = local.destroy_local(deployment_dir)
        return f"destroyed {deployment_dir} (its folder is gone): stopped {len(res.stopped)} node(s)"
    target = of_folder(deployment_dir)
    with deployment_lock(deployment_dir):
        return target.destroy(deployment_dir, progress, purge=purge)


__all__ = ["REGISTRY", "DeployOutcome", "NodeStatus", "PartitionStatus", "Status", "Target", "deploy", "destroy", "get", "job_cluster", "of_folder"]
