"""Subnets and ports for lab clusters, leased per deployment folder.

Deployment number N (1..63) owns the subnet of lab N (sandbox/netns.py: 198.18.4N.0/22 on
the bridge ctkbrN) and the TCP ports
PORT_BASE + 64*N .. +63. The registry lives in /run/ctk, under a lock, so two
deployments never share addresses or ports; `ctk destroy` releases the lease.
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import contextmanager

from ..errors import UserError
from ..locks import lock_file
from ..sandbox import netns

PORT_BASE = 20000
PORTS_PER_LEASE = 64
MAX_LEASES = netns.MAX_LABS


def _registry_dir() -> str:
    # Host-wide (every state dir's deployments share the loopback range and the ports) and
    # on a tmpfs: leases die with the processes they were for when the machine restarts.
    d = os.environ.get("CTK_LEASE_DIR", "/run/ctk")
    os.makedirs(d, exist_ok=True)
    return d


@contextmanager
def _locked(write: bool = True):
    """The registry under its lock; written back at the end of the block when WRITE."""
    d = _registry_dir()
    with lock_file(os.path.join(d, "leases.lock"), shared=not write):
        path = os.path.join(d, "leases.json")
        try:
            leases = json.load(open(path))
        except (FileNotFoundError, ValueError):
            leases = {}
        yield leases
        if write:
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(leases, f, indent=1, sort_keys=True)
            os.replace(tmp, path)


def _ports_free(n: int) -> bool:
    base = PORT_BASE + PORTS_PER_LEASE * n
    for port in (base, base + 1, base + PORTS_PER_LEASE - 1):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "in use"
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                return False
    return True


def lease(deployment_dir: str) -> int:
    """The deployment's number N, leasing a free one the first time."""
    key = os.path.realpath(deployment_dir)
    with _locked() as leases:
        if key in leases:
            return leases[key]
        taken = set(leases.values())
        for n in range(1, MAX_LEASES + 1):
            if n not in taken and _ports_free(n):
                leases[key] = n
                return n
    raise UserError(f"no free lab subnet: {MAX_LEASES} deployments are up", hint="ctk destroy one of them")


def leased(deployment_dir: str) -> bool:
    with _locked(write=False) as leases:
        return os.path.realpath(deployment_dir) in leases


def holder(n: int) -> str | None:
    """The deployment folder that holds lease N (it may no longer exist)."""
    with _locked(write=False) as leases:
        return next((k for k, v in leases.items() if v == n), None)


def release(deployment_dir: str) -> None:
    key = os.path.realpath(deployment_dir)
    with _locked() as leases:
        leases.pop(key, None)


def number(deployment_dir: str) -> int | None:
    """The lease the deployment holds, if any (never leases one)."""
    with _locked(write=False) as leases:
        return leases.get(os.path.realpath(deployment_dir))


def addr(n: int, host: int) -> str:
    return netns.addr(n, host)


def port(n: int, i: int) -> int:
    if not 0 <= i < PORTS_PER_LEASE:
        raise ValueError(f"port slot {i} is outside a lease's {PORTS_PER_LEASE} ports")
    return PORT_BASE + PORTS_PER_LEASE * n + i
