"""A lab's record of itself, shared by the local target (targets.local), the lab's client
(targets.labclient) and its agent (targets.labagent): the lab's folder, its nodes, the state
file a deploy writes (lab/state.json, one LabState), and what a lab node takes of this
machine's memory.

Nothing here imports the target's builders, the client or the agent: each of them imports
this at module level, with no cycle between them.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from ..model import from_fields
from .base import read_state, write_state

# What a lab node takes of this machine's memory, idle (bench/lab_scale.py measures it): a
# compute node's nodeinit, munged and slurmd; the controller's MariaDB and slurmctld, and the
# login node's sshd, take more. A job's own processes come on top.
NODE_MB = {"compute": 12, "login": 16, "controller": 260}
MEMORY_RESERVE_MB = 512  # left to the host and to jobs when a lab is at its largest


def available_mb() -> int | None:
    """This machine's available memory (MemAvailable), or None where /proc says nothing."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def lab_dir(deployment_dir: str) -> str:
    """The lab's folder of a deployment folder."""
    return os.path.join(deployment_dir, "lab")


@dataclass
class LabNode:
    """A node of the lab: a Slurm controller, compute or login node with its own address."""

    name: str
    role: str  # controller | compute | login
    addr: str
    port: int
    image: str
    nodeset: str = ""
    host: int = 0  # the node's number in the lab's subnet (sandbox/netns.py)
    dynamic: bool = False  # a Slurm cloud node: powered up on demand by the lab's agent
    spot: bool = False  # can be preempted (ctk preempt, chaos)
    flex: int | None = None  # flex-start: seconds it runs before its capacity is taken back


@dataclass
class NodeRecord(LabNode):
    """A lab node as a deploy recorded it, with what it was booted with."""

    hash: str = ""  # spec_hash of the node it booted; "" until the deploy has booted it
    # The build of its image it is to run (labagent.image_version): a node still on another one
    # is being rolled out to it (status compares the two).
    image_version: str = ""


@dataclass
class LabState:
    """lab/state.json: what the last deploy set up (or, not complete, was setting up when it
    stopped). A state file an earlier ctk wrote may lack keys: they take these defaults."""

    n: int = 0  # the lab's lease (targets/leases.py): its addresses and ports
    deployment: str = ""
    nodes: list[NodeRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    max_nodes: int | None = None
    complete: bool = True  # False from the start of a deploy until it has booted every node
    accounting: bool = False  # the controller runs slurmdbd (sacct works)
    cluster: str = ""  # Slurm's ClusterName
    agent: bool = False  # the lab runs its agent (targets/labagent.py)
    user: str | None = None  # the lab's ordinary user; None in a state written before it booted
    rest: str | None = None  # slurmrestd's URL (the controller's address); None: no REST API
    metrics: str | None = None  # the Prometheus server's URL (the metrics role); None: none

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabState:
        """The state in D, a state file's JSON; keys it lacks take their defaults, keys this
        ctk does not know are left out."""
        return from_fields(cls, {**d, "nodes": [from_fields(NodeRecord, x) for x in d.get("nodes", [])]})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def node(self, name: str) -> NodeRecord | None:
        return next((x for x in self.nodes if x.name == name), None)


def load_state(deployment_dir: str) -> LabState | None:
    """The running lab's state (lab/state.json), or None."""
    d = read_state(lab_dir(deployment_dir))
    return None if d is None else LabState.from_dict(d)


def save_state(deployment_dir: str, state: LabState) -> None:
    """Record the lab's STATE in lab/state.json, whole or not at all."""
    write_state(lab_dir(deployment_dir), state.to_dict())
