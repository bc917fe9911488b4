"""What every target offers, and the parts they share.

A target takes a planned Deployment somewhere: `local` boots it on this machine, `ssh`
configures existing machines. Each one is a `Target` (deploy, status, destroy, exec, env and
the job cluster a deployment hands to `ctk job`, preempt), looked up by name in
ctk.target_registry, whose traits say what the layers below the targets may ask; nothing tests
a target's name (tests/unit/test_target_registry.py says so).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import atomic, paths
from ..errors import UserError
from ..locks import Busy, lock_file
from ..progress import Progress
from ..waiting import TimedOut, poll

if TYPE_CHECKING:
    from ..blueprint.expand import Expanded
    from ..connect.base import Cluster
    from ..model import Deployment
    from ..render.slurmconf import NodeLayout

# sinfo's node states in which a node takes jobs (flags such as * or ~ stripped).
READY_STATES = ("idle", "allocated", "mixed", "completing")
_STATE_FLAGS = "*~#!%$@^-"


@dataclass
class NodeStatus:
    name: str
    role: str  # controller | compute | login
    addr: str
    running: bool  # its daemons are up
    dead_services: list[str] = field(default_factory=list)
    slurm_state: str | None = None  # compute nodes: sinfo's state
    image: str | None = None  # local target
    # local target: the build of its image the node runs (its top layer's key), and the one a
    # roll-out is taking it to (None: none under way)
    image_version: str | None = None
    rolling_to: str | None = None
    ssh: dict | None = None  # local login nodes: how to reach them
    ssh_port: int | None = None  # ssh target
    reachable: bool | None = None  # ssh target: the host answered over SSH
    # Nodes powered up on demand (a lab's dynamic nodes): "off", "powering-up", "on",
    # "powering-down"; None for static nodes.
    power: str | None = None
    spot: bool | None = None  # a lab node that can be preempted
    flex: bool | None = None  # a lab node on flex-start capacity (arrives late, taken back)


def power_state(slurm_state: str | None, running: bool) -> str:
    """A dynamic node's power state from sinfo's state flags (~ powered down, # powering up,
    % powering down, ! power down pending) and whether its daemons run."""
    st = slurm_state or ""
    if "#" in st:
        return "powering-up"
    if "%" in st or "!" in st:
        return "powering-down"
    if "~" in st:
        return "off"
    return "on" if running else "off"


@dataclass
class PartitionStatus:
    partition: str
    default: bool
    avail: str
    nodes: int
    state: str
    nodelist: str
    gres: str


@dataclass
class Status:
    """What `ctk status` reports of a deployment."""

    deployment: str
    target: str
    controller_reachable: bool
    nodes: list[NodeStatus]
    partitions: list[PartitionStatus] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The node whose Slurm client commands ctk runs (a lab's login node, else its controller).
    slurm_client: str | None = None
    lab_user: str | None = None  # a lab's ordinary user, whom ctk job and ctk env's commands run as
    # A deploy that did not finish (killed part-way): the nodes it left running are listed.
    interrupted: bool = False
    # Slurm's accounting: "up" (slurmdbd answers and holds the cluster: sacct works), "down",
    # or None where the deployment keeps none.
    accounting: str | None = None
    # Slurm's REST API (slurmrestd, JWT tokens): its URL, and "up" (it answers) or "down"
    rest_url: str | None = None
    rest: str | None = None
    # Prometheus (the metrics role): its URL, and "up" or "down"
    metrics_url: str | None = None
    metrics: str | None = None
    # The lab's agent (it powers dynamic nodes up and down): "up", "down", or None where the
    # lab has none; what it did last, and its chaos settings.
    agent: str | None = None
    events: list[dict] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return (not self.interrupted and self.controller_reachable and bool(self.nodes)
                and all(x.running or x.power in ("off", "powering-up", "powering-down") for x in self.nodes)
                and self.accounting != "down" and self.agent != "down" and self.rest != "down"
                and self.metrics != "down")

    def to_dict(self) -> dict:
        def clean(d: dict) -> dict:
            return {k: v for k, v in d.items() if v is not None}
        d = clean({k: v for k, v in dataclasses.asdict(self).items() if k not in ("nodes", "partitions")})
        d["nodes"] = [clean(dataclasses.asdict(x)) for x in self.nodes]
        d["partitions"] = [dataclasses.asdict(p) for p in self.partitions]
        return d

    def render(self, folder: str) -> str:
        """The report `ctk status FOLDER` prints; its commands name FOLDER, ready to paste."""
        head = f"deployment {self.deployment}: slurmctld " + ("reachable" if self.controller_reachable else "NOT reachable")
        if self.accounting:
            head += "; accounting (slurmdbd) " + ("up: sacct works" if self.accounting == "up" else "DOWN")
        lines = [head]
        if self.interrupted:
            lines.append(f"a deploy did not complete: {sum(x.running for x in self.nodes)} node(s) left running "
                         "(ctk deploy finishes it; ctk destroy stops them)")
        lines.append("")
        if self.nodes:
            w = max(len(x.name) for x in self.nodes)
            power = any(x.power for x in self.nodes)
            images = any(x.image_version for x in self.nodes)
            iw = max([len(f"{x.image} {x.image_version}") for x in self.nodes if x.image_version] + [5])
            lines.append(f"{'NODE':<{w}}  {'ROLE':<10} {'ADDRESS':<14} {'DAEMONS':<8} "
                         + (f"{'POWER':<14} " if power else "") + (f"{'IMAGE':<{iw}} " if images else "") + "SLURM")
            for x in self.nodes:
                if x.running:
                    proc = "up"
                elif x.dead_services:
                    proc = "DEAD:" + ",".join(x.dead_services)
                else:
                    proc = "-" if x.power else "DOWN"
                pw = (x.power or "static") + (" spot" if x.spot else "") + (" flex" if x.flex else "")
                lines.append(f"{x.name:<{w}}  {x.role:<10} {x.addr:<14} {proc:<8} "
                             + (f"{pw if x.role == 'compute' else '':<14} " if power else "")
                             + (f"{(f'{x.image} {x.image_version}') if x.image_version else '-':<{iw}} "
                                if images else "")
                             + f"{x.slurm_state or '-'}")
        if self.partitions:
            lines += ["", f"{'PARTITION':<12} {'AVAIL':<6} {'NODES':>5}  {'STATE':<10} {'GRES':<14} NODELIST"]
            for p in self.partitions:
                lines.append(f"{p.partition + ('*' if p.default else ''):<12} {p.avail:<6} {p.nodes:>5}  "
                             f"{p.state:<10} {p.gres:<14} {p.nodelist}")
        rolling = [x for x in self.nodes if x.rolling_to]
        if rolling:
            lines += ["", f"roll-out under way: {len(rolling)} node(s) reboot into a new image once their jobs end "
                      "(drained: no new job starts there)"]
            lines += [f"  {x.name}: {x.image} {x.image_version or '?'} -> {x.rolling_to} ({x.slurm_state or '-'})"
                      for x in rolling]
        if self.agent:
            lines += ["", "lab agent (reboots the nodes Slurm reboots, powers dynamic nodes up and down, preempts "
                      "Spot nodes): " + self.agent]
            if self.agent == "down":
                lines.append(f"  while it is down, no node Slurm reboots comes back (a roll-out stalls: Slurm marks "
                             f"the node DOWN after ResumeTimeout), no dynamic node powers up or down (jobs that need "
                             f"one pend), and no preemption or flex-start take-back happens; `ctk deploy BLUEPRINT -o "
                             f"{folder}` starts it again, and it puts the nodes right")
            for ev in self.events:
                lines.append(f"  {ev.get('time', '')}  {ev.get('event', '')} {ev.get('node', '')}"
                             + "".join(f" {k}={v}" for k, v in sorted(ev.items())
                                       if k not in ("time", "epoch", "event", "node")))
        if self.rest_url:
            lines += ["", f"REST API (slurmrestd): {self.rest_url} " + ("up" if self.rest == "up" else "DOWN")
                      + f", from this machine and the nodes; a token: `scontrol token` as the user "
                      "(its SLURM_JWT=... goes in the X-SLURM-USER-TOKEN header, the user in X-SLURM-USER-NAME); "
                      f"its OpenAPI document: {self.rest_url}/openapi/v3"]
        if self.metrics_url:
            lines += ["", f"metrics (Prometheus): {self.metrics_url} " + ("up" if self.metrics == "up" else "DOWN")
                      + " scrapes slurmctld's /metrics/* and every node's exporter every 5 s; a Grafana dashboard "
                      f"for it (import it, with this Prometheus as its data source): {paths.GRAFANA_DASHBOARD}"]
        if self.slurm_client:
            home = os.path.join(folder, "lab", "home", self.lab_user or "")
            who = f" as {self.lab_user} (home: {home})" if self.lab_user else ""
            lines += ["", f"Slurm commands run in {self.slurm_client}{who}: eval \"$(ctk env {shlex.quote(folder)})\" puts sbatch, "
                      "srun, squeue, ... on PATH"]
        for x in self.nodes:
            if x.ssh:
                lines += ["", f"login {x.name}: ssh -F {x.ssh['ssh_config']} {x.name}",
                          f"  jobs through it: ctk job submit TEMPLATE --host {x.name} "
                          f"--ssh-config {x.ssh['ssh_config']} ..."]
        return "\n".join(lines) + "\n"


@dataclass
class DeployOutcome:
    """What `ctk deploy` prints: a summary, the next commands, and the target's own record."""

    lines: list[str]
    record: dict

    def render(self) -> str:
        return "\n".join(self.lines) + "\n"


# What to do about a deploy into a folder that holds another cluster.
IDENTITY_HINT = ("deploy the blueprint into another folder (-o DIR); or -w replaces the cluster in {dir} (its "
                 "/home, /root and accounting database are kept); or `ctk destroy --purge {dir}` first deletes "
                 "what the folder holds")


class Target:
    """A place deployments go. Subclasses implement every method."""

    name = ""

    def folder_layout(self, dep: Deployment) -> NodeLayout | None:
        """Where the daemons listen, for the slurm.conf written into the deployment folder;
        None: the generic layout (pure)."""
        return None

    def deploy(self, exp: Expanded, dep: Deployment, deployment_dir: str, *, max_nodes: int | None,
               progress: Progress) -> DeployOutcome:
        raise NotImplementedError

    def is_deployed(self, deployment_dir: str) -> bool:
        raise NotImplementedError

    def status(self, deployment_dir: str) -> Status:
        raise NotImplementedError

    def destroy(self, deployment_dir: str, progress: Progress, purge: bool = False) -> str:
        """Stop what the deployment runs; the message `ctk destroy` prints. Users' data stays
        unless PURGE (a target that keeps none refuses PURGE)."""
        raise NotImplementedError

    def held(self, deployment_dir: str) -> dict | None:
        """The cluster the folder holds on this target ({cluster, deployment, running}: deployed,
        or its data kept after a destroy), or None."""
        return None

    def overwrite_refusal(self, deployment_dir: str) -> UserError | None:
        """Why `ctk create -w` must not write over the folder (a cluster of this target deployed
        from it, or its users' data kept there); None if nothing of this target's is there."""
        return None

    def replace(self, deployment_dir: str, old: dict, dep: Deployment, progress: Progress) -> list[str]:
        """Make room for DEP where OLD (what held() said) is, keeping users' data; what was done."""
        return [self.destroy(deployment_dir, progress)] if old.get("running") else []

    def exec(self, deployment_dir: str, node: str, argv: list[str], user: str | None = None) -> int:
        raise NotImplementedError

    def env(self, deployment_dir: str, user: str | None = None) -> str:
        """Shell exports that point Slurm's commands at the cluster (as USER, where the target
        runs them itself)."""
        raise NotImplementedError

    def job_cluster(self, deployment_dir: str) -> Cluster:
        """Where `ctk job --deployment DIR` sends its Slurm commands."""
        raise NotImplementedError

    def preempt(self, deployment_dir: str, names: list[str], notice: float | None = None,
                wait: bool = False) -> list[dict]:
        """Preempt Spot nodes as the cloud would (a target that rehearses one); a row per node:
        {node, state, detail}."""
        raise UserError(f"ctk preempt: {deployment_dir} is a deployment of the {self.name} target; "
                        "preemptions are rehearsed on a lab (the local target)")


# ---- shared parts ------------------------------------------------------------------------

def not_a_deployment_folder(path: str, refusing: str = "") -> UserError:
    """The one error for a folder that holds files but no deployment.json; REFUSING: what ctk
    will not do to it."""
    return UserError(f"{path} is not a ctk deployment folder (no deployment.json)" + (f"; {refusing}" if refusing else ""),
                     hint="give the folder 'ctk deploy BLUEPRINT -o DIR' or 'ctk create' wrote, or an empty one")


STATE = "state.json"  # in a target's folder of the deployment folder (lab/, ssh/): what it deployed


def read_state(folder: str) -> dict | None:
    """The state a target recorded in FOLDER (its part of a deployment folder); None if none."""
    try:
        with open(os.path.join(folder, STATE)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def write_state(folder: str, state: dict) -> None:
    """Record a target's STATE in FOLDER, whole or not at all."""
    atomic.write_file(os.path.join(folder, STATE), json.dumps(state, indent=1) + "\n")


def target_of_folder(deployment_dir: str) -> str | None:
    """The target a deployment folder was created for, or None if it is not one."""
    try:
        with open(os.path.join(deployment_dir, "deployment.json")) as f:
            return json.load(f).get("target") or "local"
    except (OSError, ValueError):
        return None


@contextmanager
def deployment_lock(deployment_dir: str) -> Iterator[None]:
    """Two deploys (or a deploy and a destroy) of one deployment never interleave."""
    os.makedirs(deployment_dir, exist_ok=True)
    try:
        with lock_file(os.path.join(deployment_dir, ".ctk.lock"), wait=False, mode=0o644):
            yield
    except Busy:
        raise UserError(f"another ctk command is working on {deployment_dir}; wait for it to finish") from None


def parse_node_states(sinfo_out: str) -> dict[str, str]:
    """`sinfo -h -N -o '%N %T'` as {node: state}."""
    return dict(line.split(None, 1) for line in sinfo_out.splitlines() if len(line.split()) == 2)


SINFO_PARTITIONS = ["sinfo", "-h", "-o", "%P|%a|%D|%T|%N|%G"]


def parse_partitions(sinfo_out: str) -> list[PartitionStatus]:
    """The output of SINFO_PARTITIONS as PartitionStatus rows."""
    out = []
    for line in sinfo_out.splitlines():
        if line.count("|") != 5:
            continue
        name, avail, count, st, nodelist, gres = line.split("|")
        out.append(PartitionStatus(name.rstrip("*"), name.endswith("*"), avail, int(count), st, nodelist, gres))
    return out


def wait_ready(node_states: Callable[[], dict[str, str]], computes: list[str], timeout: float,
               progress: Progress, interval: float, error: Callable[[str], Exception]) -> None:
    """Poll NODE_STATES until every compute node takes jobs; raise ERROR(states) on timeout."""
    seen: dict[str, str] = {}

    def ready() -> bool:
        seen.clear()
        seen.update(node_states())
        waiting = [n for n in computes if seen.get(n, "?").rstrip(_STATE_FLAGS) not in READY_STATES]
        if seen and waiting:
            progress.task(f"waiting for {len(waiting)} node(s): "
                          + ", ".join(f"{n}={seen.get(n, '?')}" for n in waiting[:4]))
        return bool(seen) and not waiting

    try:
        poll(ready, timeout, interval)
    except TimedOut:
        raise error(", ".join(f"{n}={seen.get(n, 'unknown')}" for n in computes)) from None
