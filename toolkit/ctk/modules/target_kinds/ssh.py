"""The ssh target's module kind (ctk/target/ssh): the existing machines a cluster is deployed on."""

from __future__ import annotations

from ..schema import Input, ModuleKind

SSH_HOST_KEYS = ("name", "host", "port", "user", "key", "role", "nodeset", "slurmd_port", "slurmctld_port",
                 "service_manager")
SSH_ROLES = ("controller", "compute", "login")
SERVICE_MANAGERS = ("systemd", "direct")

KIND = ModuleKind(
    source="ctk/target/ssh",
    role="target",
    doc="Deploy onto existing machines over SSH (the ssh target): ctk's Ansible roles configure "
        "the hosts listed here into the cluster the rest of the blueprint describes.",
    inputs=(
        Input("hosts", "list(object)", None,
            "The machines, one mapping each: name (the node's name: Slurm NodeName, SlurmctldHost), "
            "host (address ssh connects to; the node's NodeAddr), port (default 22), user (default "
            "root; another user needs passwordless sudo), key (path of a private key file, relative "
            "to the blueprint; default: ssh's own), role (controller, compute or login), nodeset "
            "(computes: the nodeset's name or module id), slurmd_port, slurmctld_port, "
            "service_manager (overrides the module's). Exactly one controller; each nodeset gets "
            "one compute host per node.", required=True),
        Input("service_manager", "string", "systemd",
            "How daemons are started on the hosts: systemd, or direct (start-stop-daemon; for "
            "machines without systemd, such as containers)."),
    ),
    outputs=(),
)
