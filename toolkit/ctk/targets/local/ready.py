"""Waiting for a deployed lab to come up: every compute node taking jobs, slurmdbd holding the
cluster; a daemon that died on the way fails the wait at once, quoting its log."""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Callable, Collection
from typing import TypeVar

from ...progress import Progress
from ...sandbox import DaemonError
from ...sandbox import node as nodes
from ...waiting import TimedOut, poll
from ..base import wait_ready
from ..labstate import lab_dir
from .plan import LabPlan
from .status import cluster_registered, node_states

T = TypeVar("T")


ERROR_LINE = re.compile(r"\b(fatal|error|failed|cannot|can't|denied|refused)\b", re.I)


def log_errors(path: str, n: int = 6) -> list[str]:
    """The last N lines of the log at PATH that say what went wrong (else its last N lines),
    each clipped: what a failure message quotes."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 65536))
            lines = [ln.rstrip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return []
    bad = [ln for ln in lines if ERROR_LINE.search(ln)]
    return [ln if len(ln) <= 300 else ln[:297] + "..." for ln in (bad or lines)[-n:]]


def dead_daemon(deployment_dir: str, plan: LabPlan) -> DaemonError | None:
    """A daemon of a running node of the lab that has exited (slurmctld refusing its state,
    slurmdbd without its database, ...): an error naming the node, the daemon and its last error
    lines; None while every one runs."""
    ldir = lab_dir(deployment_dir)
    for x in plan.nodes:
        sd = os.path.join(ldir, "nodes", x.name)
        if nodes.node_alive(sd) is None:
            continue  # not booted (a dynamic node powered down)
        for name, st in nodes.service_states(sd).items():
            log = os.path.join(sd, "log", f"{name}.log")
            if st.get("running", True):
                if not _fatal_since_boot(log, sd):
                    continue
                st = {**st, "fatal": True}  # its last words were fatal: it is on its way out
            why = (f" with status {st['exit']}" if "exit" in st else (f": {st['error']}" if st.get("error")
                   else " after a fatal error" if st.get("fatal") else ""))
            lines = log_errors(log)
            return DaemonError(f"{name} on {x.name} exited{why} while the lab came up"
                               + ("; its last errors:\n" + "\n".join("    " + ln for ln in lines) if lines else ""),
                               hint=f"see {log}; fix the cause, then `ctk deploy` again")
    return None


_FATAL = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?\] fatal: ")


def _fatal_since_boot(log: str, state_dir: str) -> bool:
    """Whether a Slurm daemon's LOG has a `fatal:` line stamped after the node's boot began.
    slurmctld 26.05 has been seen to linger after its fatal line (CLUSTER NAME MISMATCH) past the
    ready timeout, where earlier releases exited at once. (Not the node's pid file: written once
    its services are launched, it can be a second younger than a daemon's first fatal line.)"""
    booted = nodes.boot_started(state_dir)
    if booted is None:
        return False
    for line in log_errors(log, n=6):
        m = _FATAL.match(line)
        if m:
            try:
                when = datetime.datetime.fromisoformat(m.group(1)).timestamp()
            except ValueError:
                continue
            if when >= int(booted):
                return True
    return False


def checked(deployment_dir: str, plan: LabPlan, check: Callable[[], T]) -> Callable[[], T]:
    """CHECK, after making sure no daemon of the lab died (that raises at once)."""
    def run() -> T:
        err = dead_daemon(deployment_dir, plan)
        if err:
            raise err
        return check()
    return run


def wait_nodes(deployment_dir: str, plan: LabPlan, timeout: float, progress: Progress, but: Collection[str] = ()) -> None:
    """Until every compute node of the lab takes jobs (at most TIMEOUT seconds), BUT those
    (a roll-out's, drained until their jobs end)."""
    def timed_out(states: str) -> DaemonError:
        ctl = plan.controller.name if plan.controller else None
        lines = log_errors(os.path.join(lab_dir(deployment_dir), "nodes", ctl, "log", "slurmctld.log")) if ctl else []
        return DaemonError(f"nodes did not become idle in {timeout:.0f}s: {states}"
                           + (f"; slurmctld on {ctl} last said:\n" + "\n".join("    " + ln for ln in lines)
                              if lines else ""),
                           hint=f"see the nodes' logs in {os.path.join(lab_dir(deployment_dir), 'nodes')}/NODE/log")

    wait_ready(checked(deployment_dir, plan, lambda: node_states(deployment_dir)),
               [x.name for x in plan.nodes if x.role == "compute" and x.name not in but], timeout, progress, 0.3,
               timed_out)


def wait_accounting(deployment_dir: str, plan: LabPlan, timeout: float, progress: Progress) -> None:
    """Until slurmdbd answers and holds the cluster, which slurmctld registers when it first
    reaches slurmdbd."""
    progress.task("wait for accounting (slurmdbd)")
    name = plan.dep.slurm_cluster_name
    try:
        poll(checked(deployment_dir, plan, lambda: cluster_registered(deployment_dir, name)), timeout, 0.5)
    except TimedOut:
        log = os.path.join(lab_dir(deployment_dir), "nodes", plan.controller.name, "log", "slurmdbd.log")
        raise DaemonError(f"slurmdbd on {plan.controller.name} did not register cluster {name} in time",
                          hint=f"see {log}") from None
