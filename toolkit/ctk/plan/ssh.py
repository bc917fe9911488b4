"""The ssh target's planning: the machines a ctk/target/ssh module lists (name, address, login,
key, role, nodeset, daemons' ports), each checked at its line, and the blueprint's nodes placed
on them."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable
from typing import Any

from ..blueprint.errors import Collector, did_you_mean
from ..blueprint.expand import Expanded, ExpandedModule
from ..blueprint.expand import setting_pos as setting_pos
from ..model import (
    Controller,
    Deployment,
    Nodeset,
    SshHost,
    SshSettings,
)
from ..modules.target_kinds.ssh import (
    SERVICE_MANAGERS,
    SSH_HOST_KEYS,
    SSH_ROLES,
)
from .values import module_of, str_of

# What ssh and Ansible are given as a host's address: a DNS name, an IPv4 or an IPv6 address (a
# zone index after '%'). Nothing else: a value starting with '-' would reach ssh as an option
# (-oProxyCommand=... runs a command on this machine), and '@' or spaces as another login.
_HOST_ADDR_RE = re.compile(r"^[A-Za-z0-9:][A-Za-z0-9._:-]*(%[A-Za-z0-9_.-]+)?$")



def _host_address(addr: str) -> bool:
    """ADDR is a DNS name, an IPv4 address or an IPv6 one (with a zone index after '%'): one
    with a ':' must be IPv6 (10.0.0.1:2222 is not an address; the port has a key of its own)."""
    if not _HOST_ADDR_RE.fullmatch(addr):
        return False
    if ":" not in addr:
        return True
    try:
        ipaddress.IPv6Address(addr.split("%", 1)[0])
    except ValueError:
        return False
    return True


# A host's name is its hostname and Slurm NodeName: one DNS label.
_HOST_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def _port(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v.strip())
    return v if isinstance(v, int) and 1 <= v <= 65535 else None


# An error of one ssh host: (message, key of the host it is at or None: the host's mapping, hint).
_HostError = Callable[[str, str | None, str], None]


def plan_ssh(exp: Expanded, dep: Deployment, em: ExpandedModule | None, c: Collector) -> SshSettings:
    """The machines EM (a ctk/target/ssh module) lists, each checked at its line: the settings'
    hosts. Each nodeset's nodes become its compute hosts (Nodeset.hostnames), the controller's
    hostname the controller host's name. No hosts where any is wrong."""
    assert em is not None  # the ssh target is chosen by its module
    doc = exp.blueprint.doc
    n_errors = len(c.errors)
    settings = em.module.path + ("settings",)
    default_mgr = str_of(em.get("service_manager"), "systemd")
    if default_mgr not in SERVICE_MANAGERS:
        c.add(f"unknown service_manager {default_mgr!r}", doc.pos(settings + ("service_manager",)),
              "one of: " + ", ".join(SERVICE_MANAGERS))
        default_mgr = "systemd"
    hosts = em.get("hosts")
    if not isinstance(hosts, list):
        return SshSettings()  # a wrong type or a missing setting was reported by validate()
    if not hosts:
        c.add("the ssh target lists no hosts", doc.pos(settings + ("hosts",)),
              "add one mapping per machine: {name, host, role} (and key, user, port, nodeset)")
        return SshSettings()
    out = _ssh_hosts(hosts, settings, default_mgr, dep, c, doc)
    controllers = [h for h in out if h.role == "controller"]
    if len(controllers) > 1:
        c.add(f"the ssh target lists {len(controllers)} controllers ("
              + ", ".join(h.name for h in controllers) + ")", doc.pos(settings + ("hosts",)),
              "give exactly one host role: controller")
    elif not controllers and len(c.errors) == n_errors:
        c.add("the ssh target lists no controller", doc.pos(settings + ("hosts",)),
              "give one host role: controller (slurmctld runs there)")
    if len(c.errors) > n_errors:
        return SshSettings()
    _ssh_nodes(exp, em, dep, out, c, doc)
    ctl = controllers[0]
    if dep.controller is None:
        dep.controller = Controller("", hostname=ctl.name)
    else:
        dep.controller.hostname = ctl.name
    return SshSettings(out)


def _ssh_hosts(hosts: list, settings: tuple, default_mgr: str, dep: Deployment, c: Collector,
               doc) -> list[SshHost]:
    """The ssh target's HOSTS (its setting, under SETTINGS) that pass every check, in their
    order; each problem of each host goes to c."""
    base_dir = os.path.dirname(os.path.abspath(doc.file))
    nodesets: dict[str, Nodeset] = {}  # by name and by module id
    for ns in dep.nodesets:
        nodesets.setdefault(ns.name, ns)
        nodesets.setdefault(ns.module_id, ns)
    out: list[SshHost] = []
    names: dict[str, int] = {}
    machines: dict[tuple[str, int], str] = {}
    for i, h in enumerate(hosts):
        host = _ssh_host(i, h, settings + ("hosts", i), names, machines, nodesets, base_dir, default_mgr,
                         dep, c, doc)
        if host is not None:
            out.append(host)
    return out


def _ssh_host(i: int, h: Any, here: tuple, names: dict[str, int], machines: dict[tuple[str, int], str],
              nodesets: dict[str, Nodeset], base_dir: str, default_mgr: str, dep: Deployment,
              c: Collector, doc) -> SshHost | None:
    """Host I of the ssh target (H, at HERE): its SshHost, or None once every problem it has is
    reported. NAMES (name -> index) and MACHINES ((address, port) -> name) hold the hosts before
    it; they get its own name, and its machine once it passed."""
    if not isinstance(h, dict):
        c.add(f"ssh host {i + 1} must be a mapping, found {type(h).__name__}", doc.pos(here),
              "for example {name: node-0, host: 10.0.0.5, role: compute, nodeset: debug, key: ~/.ssh/id_ed25519}")
        return None
    n_errors = len(c.errors)  # the host passes if its checks add none
    name = h.get("name")
    label = f" ({name})" if isinstance(name, str) and name else ""
    prefix = f"ssh host {i + 1}{label}: "

    def err(msg: str, key: str | None, hint: str) -> None:
        c.add(prefix + msg, doc.pos(here + ((key,) if key else ())), hint)

    for k in h:
        if k not in SSH_HOST_KEYS:
            c.add(f"{prefix}unknown key '{k}'", doc.key_pos(here + (k,)),
                  did_you_mean(str(k), list(SSH_HOST_KEYS)) or "keys: " + ", ".join(SSH_HOST_KEYS))
    _ssh_host_name(name, i, names, err)
    addr = h.get("host")
    if not isinstance(addr, str) or not _host_address(addr.strip()):
        err("needs host, the address or DNS name ssh connects to" if addr is None else
            f"invalid host {addr!r}", "host" if addr is not None else None,
            "" if addr is None else "a DNS name or an IPv4 or IPv6 address (letters, digits, '.', '-', ':'), "
            "starting with a letter, a digit or ':'; the user and port have keys of their own")
    role = h.get("role")
    if role not in SSH_ROLES:
        err("needs a role" if role is None else f"unknown role {role!r}", "role" if role is not None else None,
            did_you_mean(str(role), list(SSH_ROLES)) if isinstance(role, str) else
            "one of: " + ", ".join(SSH_ROLES))
    port, user = _ssh_host_login(h, err)
    key_path = _ssh_host_key(h.get("key"), base_dir, err)
    mgr = h.get("service_manager", default_mgr)
    if mgr not in SERVICE_MANAGERS:
        err(f"unknown service_manager {mgr!r}", "service_manager", "one of: " + ", ".join(SERVICE_MANAGERS))
    ports = _ssh_daemon_ports(h, role, err)
    nodeset = _ssh_host_nodeset(h, role, nodesets, dep, err)
    if len(c.errors) > n_errors:
        return None
    # each was checked above
    assert isinstance(name, str) and isinstance(addr, str) and isinstance(role, str) and port is not None
    machine = (addr.strip(), port)
    if machine in machines:
        err(f"{addr}:{port} is listed twice (also as '{machines[machine]}')", "host", "list each machine once")
        return None
    machines[machine] = name
    return SshHost(name=name, host=addr.strip(), role=role, port=port, user=user, key=key_path,
                   nodeset=nodeset, slurmd_port=ports.get("slurmd_port"),
                   slurmctld_port=ports.get("slurmctld_port"), service_manager=mgr)


def _ssh_host_name(name: Any, i: int, names: dict[str, int], err: _HostError) -> None:
    """Host I's name: a hostname (one DNS label) that no host before it has (NAMES: name -> index
    of the host, which gets this one's)."""
    if not isinstance(name, str) or not _HOST_NAME_RE.fullmatch(name):
        err("needs a name, a hostname (letters, digits, '-'), which is its Slurm node name"
            if name is None else f"invalid name {name!r}", "name" if name is not None else None,
            "use letters, digits and '-', at most 63, not starting or ending with '-'")
    elif name in names:
        err(f"name '{name}' is used by host {names[name] + 1} too", "name", "every host needs its own name")
    else:
        names[name] = i


def _ssh_host_login(h: dict, err: _HostError) -> tuple[int | None, Any]:
    """The port (None: invalid) and user ssh logs in to host H with."""
    port = _port(h.get("port", 22))
    if port is None:
        err(f"invalid port {h.get('port')!r}", "port", "a TCP port, 1-65535")
    user = h.get("user", "root")
    if not isinstance(user, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", user):
        err(f"invalid user {user!r}", "user", "")
    return port, user


def _ssh_host_key(key: Any, base_dir: str, err: _HostError) -> str | None:
    """The path of a host's private key file (KEY, relative to the blueprint's folder BASE_DIR);
    None without a key or with one that is not a path."""
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        err(f"key must be the path of a private key file, found {key!r}", "key", "")
        return None
    key_path = os.path.normpath(os.path.join(base_dir, os.path.expanduser(key)))
    if not os.path.isfile(key_path):
        err(f"key file '{key}' does not exist", "key", f"looked for {key_path}")
    elif key_path.endswith(".pub"):
        err(f"key '{key}' is a public key", "key", "give the private key's path (without .pub)")
    return key_path


def _ssh_daemon_ports(h: dict, role: Any, err: _HostError) -> dict[str, int | None]:
    """Host H's slurmd_port and slurmctld_port (those it sets), each on the role whose daemon
    listens there."""
    ports: dict[str, int | None] = {}
    for k in ("slurmd_port", "slurmctld_port"):
        if h.get(k) is not None:
            ports[k] = _port(h[k])
            if ports[k] is None:
                err(f"invalid {k} {h[k]!r}", k, "a TCP port, 1-65535")
    if role != "compute" and "slurmd_port" in h:
        err("slurmd_port is for compute hosts (slurmd runs there)", "slurmd_port", "")
    if role != "controller" and "slurmctld_port" in h:
        err("slurmctld_port is for the controller host", "slurmctld_port", "")
    return ports


def _ssh_host_nodeset(h: dict, role: Any, nodesets: dict[str, Nodeset], dep: Deployment,
                      err: _HostError) -> str:
    """The name of the nodeset a compute host H is a node of (NODESETS: by name and by module id;
    the blueprint's only one when H names none); "" for other roles, and for a wrong one."""
    if role != "compute":
        if h.get("nodeset") is not None:
            err(f"only compute hosts belong to a nodeset (this one is {role})", "nodeset", "")
        return ""
    ref = h.get("nodeset")
    live = sorted({ns.name for ns in dep.nodesets})
    if ref is None and len(live) == 1:
        return live[0]
    if ref is None:
        err("a compute host needs nodeset, the nodeset it is a node of", None,
            "nodesets: " + ", ".join(live) if live else "the blueprint has no nodeset "
            "(add a ctk/slurm/nodeset module)")
    elif not isinstance(ref, str) or ref not in nodesets:
        err(f"no nodeset {ref!r}", "nodeset",
            (did_you_mean(str(ref), list(nodesets)) if isinstance(ref, str) else "")
            or ("nodesets: " + ", ".join(live) if live else "the blueprint has no nodeset"))
    else:
        return nodesets[ref].name
    return ""


def _ssh_nodes(exp: Expanded, em: ExpandedModule, dep: Deployment, out: list[SshHost], c: Collector,
               doc) -> None:
    """Each nodeset's nodes become its compute hosts among OUT, all static; a nodeset with more
    static nodes than hosts is an error (EM: the ssh target's module)."""
    for ns in dep.nodesets:
        mine = [h.name for h in out if h.role == "compute" and h.nodeset == ns.name]
        if ns.node_count_static > len(mine):
            nem = module_of(exp, ns.module_id)
            where = nem.module.path + (("settings", "node_count_static") if "node_count_static" in nem.settings
                                       else ("id",))
            c.add(f"nodeset '{ns.name}' has {ns.node_count_static} static nodes but the ssh target lists "
                  f"{len(mine)} compute host(s) for it", doc.pos(where),
                  f"list one host per node (role: compute, nodeset: {ns.name}) in '{em.id}', "
                  "or lower node_count_static")
            continue
        # Existing machines are all up: every host is a static node, named as the blueprint names it.
        ns.hostnames = mine
        ns.node_count_static, ns.node_count_dynamic_max = len(mine), 0
