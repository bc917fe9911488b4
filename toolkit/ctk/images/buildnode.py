"""The build node: a lab node booted from the layers built so far, running only sshd, so that
Packer's SSH communicator and Ansible reach it exactly as they reach a cloud VM.

The same kind of node, booted from a bare base layer with its own hostname and address, stands
in for an existing machine of the ssh target in tests ("bare nodes")."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from ..sandbox import node as nodes
from ..sandbox.caps import BUILD as BUILD_CAPS
from ..sandbox.daemons import DaemonError
from ..sandbox.net import free_port
from ..sandbox.sshd import keypair, sshd_parts
from ..waiting import TimedOut, poll

# Build nodes live on their own loopback subnet, away from lab clusters' addresses.
BUILD_ADDR = "127.0.250.1"


@dataclass
class BuildNode:
    spec: nodes.NodeSpec
    addr: str
    port: int
    private_key: str

    @property
    def upper(self) -> str:
        return self.spec.upper

    def stop(self) -> None:
        nodes.stop(self.spec.state_dir)


def stop_in(work: str) -> bool:
    """Stop the build node booted in WORK (by boot(..., work)), up or booting; True if one ran."""
    return nodes.stop(os.path.join(work, "node"))


def boot(lowerdirs: list[str], work: str, timeout: float = 30.0, run_files: dict | None = None,
         binds: list[dict] | None = None, *, hostname: str = "ctk-build", addr: str = BUILD_ADDR,
         port: int | None = None) -> BuildNode:
    """Boot a build node over `lowerdirs`; its changes land in work/node/upper.

    `run_files` are copied under the node's /run (tmpfs), so they never become part of a layer.
    sshd listens on `addr`:`port` (default: a free port) and accepts work/keys/client; the node's
    hostname is `hostname`."""
    keys = os.path.join(work, "keys")
    os.makedirs(keys, mode=0o700, exist_ok=True)
    client, host = os.path.join(keys, "client"), os.path.join(keys, "host")
    for k in (client, host):
        keypair(k, "ctk-build")
    port = port or free_port(addr)
    files, dirs, sshd = sshd_parts(addr, port, host, client + ".pub")
    spec = nodes.NodeSpec(
        hostname=hostname,
        state_dir=os.path.join(work, "node"),
        lowerdirs=lowerdirs,
        run_files={**files, **(run_files or {})},
        run_dirs=dirs,
        binds=list(binds or []),
        services=[sshd],
        caps=list(BUILD_CAPS),  # package scripts set file capabilities (no_new_privs keeps them inert)
    )
    nodes.boot(spec, timeout=timeout)

    def answers() -> bool:  # sshd answers once it is listening
        try:
            with socket.create_connection((addr, port), timeout=1) as s:
                return s.recv(4).startswith(b"SSH")
        except OSError:
            return False

    try:
        poll(answers, timeout, 0.1)
        return BuildNode(spec, addr, port, client)
    except TimedOut:
        pass
    log = os.path.join(spec.logdir, "sshd.log")
    nodes.stop(spec.state_dir)
    raise DaemonError(f"sshd in node {hostname} did not start:\n{open(log).read()[-2000:] if os.path.exists(log) else ''}")
