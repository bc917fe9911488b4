"""Where jobs go: a cluster object for each way of naming one.

- `--host USER@HOST[:PORT]`: a login node over SSH (`SshCluster`, Fabric);
- `--deployment DIR`: the cluster its target hands over (a lab on this machine, or the ssh
  target's login host);
- neither: this machine's own Slurm, as on a login node (`HereCluster`).
"""

from __future__ import annotations

import os

from ..connect.base import (
    JOBS_SUBDIR,
    NODE_HOME,
    NODE_JOBS_DIR,
    Cluster,
    HereCluster,
    Result,
    SlurmError,
    SshCluster,
    exit_of,
    parse_kv_line,
)
from ..errors import UserError


def open_cluster(deployment: str | None = None, host: str | None = None, identity: str | None = None,
                 ssh_config: str | None = None) -> Cluster:
    """The cluster the command line names: --host (over SSH), --deployment (a deployment's
    cluster), or neither: the cluster this machine's own Slurm commands reach."""
    if host:
        return SshCluster(host, identity, ssh_config)
    if identity or ssh_config:
        raise UserError("--identity and --ssh-config go with --host USER@HOST")
    if not deployment:  # on a login node: the cluster this machine submits to
        return HereCluster().check()
    return deployment_cluster(deployment)


def deployment_cluster(deployment: str) -> Cluster:
    """The cluster of a deployment folder, as its target hands it over."""
    from .. import targets

    name = targets.target_of_folder(deployment)  # reads deployment.json, once
    if name is None:
        if not os.path.isdir(deployment):
            raise UserError(f"--deployment {deployment}: no such folder",
                            hint="deploy a cluster with 'ctk deploy BLUEPRINT -o DIR'")
        raise UserError(f"--deployment {deployment}: no deployment.json there",
                        hint="create and deploy it with 'ctk deploy BLUEPRINT -o DIR'")
    return targets.job_cluster(name, deployment)


def __getattr__(name: str):
    if name == "LocalCluster":  # the lab's cluster lives with its target
        from ..targets.labclient import LabCluster
        return LabCluster
    raise AttributeError(name)


__all__ = ["JOBS_SUBDIR", "NODE_HOME", "NODE_JOBS_DIR", "Cluster", "HereCluster", "Result", "SlurmError",
           "SshCluster", "exit_of", "open_cluster", "deployment_cluster", "parse_kv_line"]
