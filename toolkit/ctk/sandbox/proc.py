"""Stopping a process ctk started earlier (a node's PID 1, a host munged): the one way."""

from __future__ import annotations

import os
import signal

from ..waiting import TimedOut, poll


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
