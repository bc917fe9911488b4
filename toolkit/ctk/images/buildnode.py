"""The build node: a lab node booted from the layers built so far, running only sshd, so that
Packer's SSH communicator and Ansible reach it exactly as they reach a cloud VM.

The same kind of node, booted from a bare base layer with its own hostname and address, stands
in for an existing machine of the ssh target in tests ("bare nodes")."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

from ..cluster import node as nodes
from ..cluster.daemons import DaemonError
from ..runner import run

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


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def sshd_parts(addr: str, port: int, host_key: str, authorized_keys: str) -> tuple[dict, list, nodes.Service]:
    """What a node needs to run sshd on ADDR:PORT: its /run files (the host key and the
    authorized keys, copied in at boot, never baked into a layer), /run dirs and the service.
    Key-only logins; root may log in (the lab's nodes have no other user)."""
    files = {"ctk/ssh_host_ed25519_key": {"src": host_key, "mode": "0600"},
             "ctk/authorized_keys": {"src": authorized_keys, "mode": "0600"}}
    service = nodes.Service("sshd", [
        "/usr/sbin/sshd", "-D", "-e", "-p", str(port), "-o", f"ListenAddress={addr}",
        "-o", "HostKey=/run/ctk/ssh_host_ed25519_key", "-o", "AuthorizedKeysFile=/run/ctk/authorized_keys",
        "-o", "UsePAM=no", "-o", "PermitRootLogin=prohibit-password", "-o", "PidFile=/run/sshd.pid",
        "-o", "PasswordAuthentication=no"])
    return files, [{"path": "sshd", "mode": "0755"}], service


def keypair(path: str, comment: str = "ctk") -> None:
    """An ed25519 key pair at PATH (0600) and PATH.pub, unless PATH exists."""
    if not os.path.exists(path):
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
            what="ssh-keygen failed")


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
    port = port or _free_port(addr)
    files, dirs, sshd = sshd_parts(addr, port, host, client + ".pub")
    spec = nodes.NodeSpec(
        hostname=hostname,
        state_dir=os.path.join(work, "node"),
        lowerdirs=lowerdirs,
        run_files={**files, **(run_files or {})},
        run_dirs=dirs,
        binds=list(binds or []),
        services=[sshd],
    )
    nodes.boot(spec, timeout=timeout)
    deadline = time.time() + timeout
    while time.time() < deadline:  # sshd answers once it is listening
        try:
            with socket.create_connection((addr, port), timeout=1) as s:
                if s.recv(4).startswith(b"SSH"):
                    return BuildNode(spec, addr, port, client)
        except OSError:
            time.sleep(0.1)
    log = os.path.join(spec.logdir, "sshd.log")
    nodes.stop(spec.state_dir)
    raise DaemonError(f"sshd in node {hostname} did not start:\n{open(log).read()[-2000:] if os.path.exists(log) else ''}")
