"""`ctk preempt`: a Spot node's preemption, as Google Cloud does it, handed to the lab's agent."""

from __future__ import annotations

import os
import time

from ...errors import UserError, did_you_mean
from ...model import NO_SPOT_HINT
from ...render.hostlist import compress, expand
from ...sandbox import node as nodes
from ...sandbox.daemons import DaemonError
from ...waiting import TimedOut, poll
from ..labagent import agent_pid, read_events, request
from ..labstate import LabState, lab_dir, load_state
from .agent import power_dir


def _preemptible(deployment_dir: str, state: LabState, names: list[str]) -> list[str]:
    """The nodes NAMES (names or hostlists) name, each a Spot node that is powered up; a
    UserError for any other."""
    by_name = {x.name: x for x in state.nodes}
    want: list[str] = []
    for arg in names:
        try:
            want += expand(arg)
        except ValueError as e:
            raise UserError(f"ctk preempt: {arg!r} is not a node name or hostlist: {e}") from None
    for name in want:
        x = by_name.get(name)
        if x is None:
            raise UserError(f"ctk preempt: no node {name!r} in {deployment_dir}",
                            hint=did_you_mean(name, list(by_name)) or "ctk status lists the nodes")
        if not x.spot:
            spot = compress([k for k, v in by_name.items() if v.spot])
            raise UserError(f"ctk preempt: {name} is not a Spot or preemptible node: Google Cloud does not "
                            "preempt it", hint=f"Spot nodes of this lab: {spot}" if spot else
                            NO_SPOT_HINT)
        if nodes.node_pid(os.path.join(lab_dir(deployment_dir), "nodes", name)) is None:
            raise UserError(f"ctk preempt: {name} is powered down: there is nothing to preempt",
                            hint="a job on its partition powers it up")
    return want


def preempt_local(deployment_dir: str, names: list[str], notice: float | None = None,
                  wait: bool = False) -> list[dict]:
    """Hand the lab's agent a preemption of each node (Spot nodes that are powered up); with
    WAIT, return once each is down. One row per node: {node, state, detail}."""
    state = load_state(deployment_dir)
    if state is None:
        raise UserError(f"{deployment_dir} has no running lab", hint=f"ctk deploy BLUEPRINT -o {deployment_dir}")
    want = _preemptible(deployment_dir, state, names)
    pdir = power_dir(deployment_dir)
    if agent_pid(pdir) is None:
        raise DaemonError("the lab's agent is not running", hint=f"ctk deploy again starts it ({pdir}/agent.log)")
    since = time.time()
    kw = {"by": "ctk-preempt"} if notice is None else {"notice": notice, "by": "ctk-preempt"}
    request(pdir, "preempt", want, **kw)

    def seen(event: str) -> set[str | None]:
        return {e.get("node") for e in read_events(pdir) if e.get("event") == event and e.get("epoch", 0) >= since - 1}

    try:
        poll(lambda: set(want) <= seen("notice"), 15, 0.1)
    except TimedOut:
        raise DaemonError("the lab's agent did not take the preemption", hint=f"see {pdir}/agent.log") from None
    notices = {e["node"]: e for e in read_events(pdir) if e.get("event") == "notice" and e.get("epoch", 0) >= since - 1}
    if wait:
        longest = max(float(notices[n].get("seconds", 0)) for n in want)
        try:
            poll(lambda: set(want) <= seen("down"), longest + 60, 0.2)
        except TimedOut:
            raise DaemonError("the preempted nodes did not go down in time", hint=f"see {pdir}/events.log") from None
        return [{"node": n, "state": "down", "detail": "preempted; its jobs were requeued"} for n in want]
    return [{"node": n, "state": "notice",
             "detail": f"SIGTERM in {float(notices[n].get('seconds', 0)):g} s"} for n in want]
