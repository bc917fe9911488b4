"""sshd in a node, and the key pairs it and its clients use."""

from __future__ import annotations

import os

from ..runner import run
from .node import Service


def sshd_parts(addr: str, port: int, host_key: str, authorized_keys: str) -> tuple[dict, list, Service]:
    """What a node needs to run sshd on ADDR:PORT only: its /run files (the host key and the
    authorized keys, copied in at boot, never baked into a layer), /run dirs and the service.
    Key-only logins, for root and the node's users."""
    # sshd reads the authorized keys as the user logging in: public keys, in a folder of their own.
    files = {"ctk/ssh_host_ed25519_key": {"src": host_key, "mode": "0600"},
             "ctk-ssh/authorized_keys": {"src": authorized_keys, "mode": "0644"}}
    service = Service("sshd", [
        "/usr/sbin/sshd", "-D", "-e", "-p", str(port), "-o", f"ListenAddress={addr}",
        "-o", "HostKey=/run/ctk/ssh_host_ed25519_key", "-o", "AuthorizedKeysFile=/run/ctk-ssh/authorized_keys",
        "-o", "UsePAM=no", "-o", "PermitRootLogin=prohibit-password", "-o", "PidFile=/run/sshd.pid",
        "-o", "PasswordAuthentication=no"])
    return files, [{"path": "sshd", "mode": "0755"}, {"path": "ctk-ssh", "mode": "0755"}], service


def keypair(path: str, comment: str = "ctk") -> None:
    """An ed25519 key pair at PATH (0600) and PATH.pub, unless PATH exists; its folder (0700) and
    a pre-existing key are checked as secrets are (sandbox/secretfiles.py)."""
    from . import secretfiles

    folder = os.path.dirname(os.path.abspath(path))
    fd = secretfiles.open_dir(os.path.dirname(folder), os.path.basename(folder))
    try:
        exists = secretfiles.check_file(fd, os.path.basename(path), path)
    finally:
        os.close(fd)
    if not exists:  # ssh-keygen writes into the folder just checked: root's, 0700, no link
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
            what="ssh-keygen failed")
