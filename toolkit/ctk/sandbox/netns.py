"""Lab networks: each lab node in its own network namespace, on one bridge per lab.

A node in its own network stack is what makes Slurm's `CommunicationParameters=NoInAddrAny`
work: every daemon (and srun) binds its node's address, and a connection from the node leaves
from that address too, so slurmstepd connects back to where srun listens. Nodes that shared
the host's loopback all sent from 127.0.0.1.

Lab N (1..63) owns the subnet PREFIX.4N.0/22 on the bridge `ctkbrN`: room for 1021 nodes, the
host being the last address but the broadcast (PREFIX.4N+3.254). Its node H (1..1021) is the
H-th address of the subnet (PREFIX.4N+H//256.H%256) in the namespace `ctk-N-H`, linked to the
bridge by the veth pair `ctkNvH` / `eth0`. PREFIX is 198.18 (RFC 2544's benchmarking range,
which no real network routes), or CTK_LAB_NET. Nothing leaves the bridge: no forwarding, no NAT.
"""

from __future__ import annotations

import os
import re
import subprocess

from ..errors import UserError
from . import DaemonError

NETNS_DIR = "/run/netns"
PREFIX_LEN = 22
MAX_LABS = 63  # lab N's subnet starts at PREFIX.4N.0: N = 63 ends at PREFIX.255.255
HOST = (1 << (32 - PREFIX_LEN)) - 2  # the host's address on each lab bridge (1022: PREFIX.4N+3.254)
MAX_HOSTS = HOST - 1  # node numbers 1..1021


def prefix() -> str:
    p = os.environ.get("CTK_LAB_NET", "198.18")
    if not re.fullmatch(r"\d{1,3}\.\d{1,3}", p) or any(int(o) > 255 for o in p.split(".")):
        raise UserError(f"CTK_LAB_NET={p!r} is not the first two octets of a /16",
                        hint="for example CTK_LAB_NET=198.18 (the default)")
    return p


def addr(n: int, host: int) -> str:
    """The address of node HOST (1..MAX_HOSTS; HOST for the host itself) of lab N."""
    if not 1 <= n <= MAX_LABS or not 1 <= host <= HOST:
        raise ValueError(f"no address for node {host} of lab {n}")
    return f"{prefix()}.{4 * n + host // 256}.{host % 256}"


def subnet(n: int) -> str:
    return f"{prefix()}.{4 * n}.0/{PREFIX_LEN}"


def bridge(n: int) -> str:
    return f"ctkbr{n}"


def netns(n: int, host: int) -> str:
    return f"ctk-{n}-{host}"


def _veth(n: int, host: int) -> str:
    return f"ctk{n}v{host}"


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *argv], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise DaemonError(f"ip {' '.join(argv)} failed: {r.stderr.strip()}",
                          hint="lab networks need root (CAP_NET_ADMIN) and iproute2")
    return r


def _link_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def ensure_bridge(n: int) -> None:
    """The lab's bridge, up, with the host's address on it (idempotent)."""
    br = bridge(n)
    if not _link_exists(br):
        _ip("link", "add", br, "type", "bridge")
    have = _ip("-o", "-4", "addr", "show", "dev", br).stdout
    if f" {addr(n, HOST)}/{PREFIX_LEN} " not in have:
        _ip("addr", "add", f"{addr(n, HOST)}/{PREFIX_LEN}", "dev", br)
    _ip("link", "set", br, "up")


def create(n: int, host: int) -> str:
    """A fresh namespace for node HOST of lab N, its eth0 on the bridge; its path (for nsenter).
    Whatever a stopped node left under that name is replaced."""
    ns, veth = netns(n, host), _veth(n, host)
    remove(n, host)
    _ip("netns", "add", ns)
    _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    _ip("link", "set", veth, "master", bridge(n), "up")
    _ip("-n", ns, "addr", "add", f"{addr(n, host)}/{PREFIX_LEN}", "dev", "eth0")
    _ip("-n", ns, "link", "set", "eth0", "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    return os.path.join(NETNS_DIR, ns)


def remove(n: int, host: int) -> None:
    """Drop the node's namespace name and its veth (the stack itself goes with its last process)."""
    if os.path.exists(os.path.join(NETNS_DIR, netns(n, host))):
        _ip("netns", "del", netns(n, host), check=False)
    if _link_exists(_veth(n, host)):
        _ip("link", "del", _veth(n, host), check=False)


def remove_lab(n: int) -> None:
    """Every namespace and the bridge of lab N."""
    pat = re.compile(rf"ctk-{n}-(\d+)")
    for name in os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else []:
        m = pat.fullmatch(name)
        if m:
            remove(n, int(m.group(1)))
    if _link_exists(bridge(n)):
        _ip("link", "del", bridge(n), check=False)
