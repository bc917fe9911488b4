"""The lab's agent from the deploy's side (the agent itself is targets/labagent.py): what it is
told (agent.json), starting it, restarted when that changed, and stopping it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict

from ... import atomic
from ...model import LabSettings
from ...sandbox import node as nodes
from ...sandbox.daemons import DaemonError
from ...sandbox.proc import ctk_env, terminate
from ...waiting import TimedOut, poll
from ..labagent import agent_pid
from ..labstate import lab_dir
from .plan import LabPlan


def power_dir(deployment_dir: str) -> str:
    """The lab's power/ folder: the agent's config, pid, log, events and requests."""
    return os.path.join(os.path.abspath(lab_dir(deployment_dir)), "power")


def agent_config(plan: LabPlan, deployment_dir: str, specs: dict[str, nodes.NodeSpec]) -> dict:
    """What the lab's agent needs: the nodes it may boot, stop, reboot or preempt (every compute
    node), with the specs they boot with, and the rehearsal's settings."""
    lab = plan.dep.settings_of(LabSettings)
    return {"deployment_dir": os.path.abspath(deployment_dir), "n": plan.n,
            "preemption_notice": lab.preemption_notice, "flex_start_delay": lab.flex_start_delay,
            "flex_run_duration": lab.flex_run_duration, "boot_delay": lab.boot_delay,
            "chaos_interval": lab.chaos_interval, "chaos_seed": lab.chaos_seed,
            "nodes": {x.name: {"host": x.host, "dynamic": x.dynamic, "spot": x.spot, "flex": x.flex,
                               "spec": asdict(specs[x.name])}
                      for x in plan.nodes if x.role == "compute"}}


def start_agent(deployment_dir: str, config: dict) -> tuple[int, bool]:
    """The lab's agent, running with CONFIG (restarted when it changed); (pid, restarted)."""
    pdir = power_dir(deployment_dir)
    os.makedirs(os.path.join(pdir, "requests"), exist_ok=True)
    path = os.path.join(pdir, "agent.json")
    changed = atomic.write_if_changed(path, json.dumps(config, indent=1, sort_keys=True) + "\n", 0o600)
    pid = agent_pid(pdir)
    if pid and not changed:
        return pid, False
    if pid:
        terminate(pid)
    log = open(os.path.join(pdir, "agent.log"), "ab")
    proc = subprocess.Popen([sys.executable, "-m", "ctk.targets.labagent", path], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=ctk_env())
    try:
        poll(lambda: agent_pid(pdir) == proc.pid or proc.poll() is not None, 30, 0.05)
    except TimedOut:
        pass
    if agent_pid(pdir) != proc.pid:
        raise DaemonError("the lab's agent did not start", hint=f"see {os.path.join(pdir, 'agent.log')}")
    return proc.pid, bool(pid)


def restart_agent(deployment_dir: str) -> None:
    """Start the lab's agent again with the config it last had (a failed deploy stopped it), if
    any; a config that cannot be read leaves it stopped (`ctk status` says so)."""
    try:
        with open(os.path.join(power_dir(deployment_dir), "agent.json")) as f:
            config = json.load(f)
        start_agent(deployment_dir, config)
    except (OSError, ValueError, DaemonError):
        pass


def stop_agent(deployment_dir: str) -> bool:
    """Stop the lab's agent; whether it was running."""
    pid = agent_pid(power_dir(deployment_dir))
    if not pid:
        return False
    return terminate(pid)
