"""What `ctk status` says of a lab: each node's process and Slurm state, its partitions, its
accounting and its agent, asked of the lab's own Slurm commands."""

from __future__ import annotations

import os
import subprocess

from ...errors import UserError
from ...sandbox import node as nodes
from ..base import (
    SINFO_PARTITIONS,
    NodeStatus,
    Status,
    parse_node_states,
    parse_partitions,
    power_state,
)
from ..labagent import agent_pid, image_version, read_events
from ..labclient import client_node, slurm
from ..labstate import LabState, lab_dir, load_state
from .agent import power_dir
from .files import ssh_key
from .identity import kept_data

EVENTS_SHOWN = 8  # the agent's last events in ctk status


def ask(deployment_dir: str, *argv: str, timeout: float = 15) -> str | None:
    """The output of one of the lab's Slurm commands, or None if it fails or does not answer."""
    try:
        r = slurm(deployment_dir, *argv, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    return r.stdout if r.returncode == 0 else None


def node_states(deployment_dir: str) -> dict[str, str]:
    """Slurm's state of every node (idle, alloc, down*, ...), or {} if slurmctld is unreachable."""
    out = ask(deployment_dir, "sinfo", "-h", "-N", "-o", "%N %T")
    return parse_node_states(out) if out is not None else {}


def booted_version(state_dir: str) -> str | None:
    """The build of its image a running node booted (from the spec it was booted with)."""
    return image_version(nodes.booted_layers(state_dir) or []) or None


def cluster_registered(deployment_dir: str, cluster: str) -> bool | None:
    """Whether slurmdbd answers and knows CLUSTER (None: it does not answer)."""
    out = ask(deployment_dir, "sacctmgr", "-n", "-P", "show", "cluster", "format=cluster")
    return None if out is None else cluster in out.split()


def _node_statuses(deployment_dir: str, state: LabState) -> tuple[list[NodeStatus], dict[str, str]]:
    """Each node's status, and Slurm's state of each node ({}: slurmctld did not answer)."""
    ldir = lab_dir(deployment_dir)
    slurm_states = node_states(deployment_dir)
    out_nodes = []
    for x in state.nodes:
        sd = os.path.join(ldir, "nodes", x.name)
        running = nodes.node_pid(sd) is not None
        dead = nodes.dead_services(sd) if running else []
        ssh = None
        if x.role == "login":
            ssh = {"host": x.addr, "port": x.port, "user": state.user or "root", "identity": ssh_key(ldir),
                   "ssh_config": os.path.join(os.path.abspath(ldir), "ssh_config")}
        sst = slurm_states.get(x.name) if x.role == "compute" else None
        booted = booted_version(sd) if running else None
        out_nodes.append(NodeStatus(x.name, x.role, x.addr, running and not dead, dead, sst,
                                    image=x.image, ssh=ssh, image_version=booted,
                                    rolling_to=(x.image_version if booted and x.image_version
                                                and booted != x.image_version else None),
                                    power=power_state(sst, running) if x.dynamic else None,
                                    spot=True if x.spot else None,
                                    flex=True if x.flex else None))
    return out_nodes, slurm_states


def status_local(deployment_dir: str) -> Status:
    """Nodes (process and Slurm state) and partitions of a lab deployment; the nodes a deploy
    left running when it was killed before it finished, if that is all there is."""
    state = load_state(deployment_dir)
    if state is None:
        kept = kept_data(deployment_dir)
        raise UserError(f"{deployment_dir} has no running lab" + (
            f" (it keeps a destroyed lab's data: {', '.join(os.path.basename(p) for p, _ in kept)} in "
            f"{lab_dir(deployment_dir)})" if kept else ""),
            hint=f"deploy it with: ctk deploy BLUEPRINT -o {deployment_dir}")
    out_nodes, slurm_states = _node_statuses(deployment_dir, state)
    parts = ask(deployment_dir, *SINFO_PARTITIONS)
    acct = None
    if state.accounting:
        acct = "up" if cluster_registered(deployment_dir, state.cluster) else "down"
    agent, events = None, []
    if state.agent:
        pdir = power_dir(deployment_dir)
        agent = "up" if agent_pid(pdir) else "down"
        events = read_events(pdir)[-EVENTS_SHOWN:]
    return Status(deployment=state.deployment, target="local", controller_reachable=bool(slurm_states),
                  nodes=out_nodes, partitions=parse_partitions(parts) if parts is not None else [],
                  notes=state.notes, slurm_client=client_node(state.nodes), lab_user=state.user,
                  interrupted=not state.complete, accounting=acct, agent=agent, events=events,
                  rest_url=state.rest, rest=(("up" if answers(state.rest) else "down") if state.rest else None),
                  metrics_url=state.metrics,
                  metrics=(("up" if answers(state.metrics) else "down") if state.metrics else None))


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether something accepts a connection at URL's address and port (slurmrestd)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=timeout):
            return True
    except OSError:
        return False
