"""Stopping a process ctk started earlier (a node's PID 1, a host munged): the one way."""

from __future__ import annotations

import os
import signal

from ..waiting import TimedOut, poll


def ctk_env() -> dict[str, str]:
    """The environment of a `python -m ctk....` process ctk starts to outlive it (a node's PID 1,
    a lab's agent): this one's, with the ctk package it runs from first on the path."""
    return {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}


def running_pid(pid_file: str, module: str) -> int | None:
    """The pid PID_FILE names if that process is still `python -m MODULE ...`, else None (the
    file is stale: the pid was reused, or the process is gone)."""
    try:
        pid = int(open(pid_file).read().strip())
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
    except (OSError, ValueError):
        return None
    return pid if module.encode() in cmdline.split(b"\0") else None


def terminate(pid: int, timeout: float = 15.0) -> bool:
    """SIGTERM, wait up to TIMEOUT seconds for the process to go, then SIGKILL. A child of this
    process is reaped. False if it was already gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False

    def gone() -> bool:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child: init reaps it
            pass
        return not os.path.exists(f"/proc/{pid}")

    try:
        poll(gone, timeout, 0.05)
    except TimedOut:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return True
