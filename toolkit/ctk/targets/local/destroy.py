"""Stopping a lab: `ctk destroy` (its daemons, addresses, ports and runtime files; its users'
and accounting's data kept unless --purge), and the lab processes no state file leads to, such
as those of a lab whose folder was removed while it ran."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass

from ... import atomic
from ...connect.base import parse_identity, registry_home
from ...sandbox import netns
from ...sandbox import node as nodes
from ...sandbox.daemons import stop_munged
from ...sandbox.proc import terminate
from .. import leases
from ..labstate import lab_dir
from .agent import stop_agent
from .identity import IDENTITY, kept_data, lab_identity


@dataclass
class DestroyResult:
    """What a destroy did: the nodes it stopped, the data it kept or (--purge) deleted."""

    stopped: list[str]
    kept: list[tuple[str, str]]  # (path, what it is) left in place
    deleted: list[tuple[str, str]]  # (path, what it was) of the kept kinds, deleted by --purge


def stop_all(deployment_dir: str) -> list[str]:
    """Stop the lab's agent, its nodes and the host's munged, and remove its network; the
    nodes stopped."""
    ldir = lab_dir(deployment_dir)
    stop_agent(deployment_dir)  # first: it would boot nodes again
    stopped = []
    nd = os.path.join(ldir, "nodes")
    if os.path.isdir(nd):
        for name in sorted(os.listdir(nd)):
            if nodes.stop(os.path.join(nd, name)):
                stopped.append(name)
    stop_munged(os.path.join(ldir, "host-munge"))
    n = leases.number(deployment_dir)
    if n is not None:
        netns.remove_lab(n)
    return stopped


# ---- labs whose folder is gone ------------------------------------------------------------
# A lab's processes name their deployment folder on their command line (nodeinit's spec file,
# the host munged's socket), so a lab is found again even after its folder was removed.

def _lab_processes(deployment_dir: str) -> list[tuple[int, str, bool]]:
    """(pid, node name or "host-munge", its files still exist) of every process of the lab
    of DEPLOYMENT_DIR: nodeinit (PID 1 of each node) and the host's munged."""
    prefixes = {os.path.join(p, "lab") + "/" for p in (os.path.abspath(deployment_dir), os.path.realpath(deployment_dir))}
    out = []
    for pid in (int(d) for d in os.listdir("/proc") if d.isdigit()):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if len(argv) > 3 and argv[1:3] == ["-m", "ctk.targets.labagent"]:
            for pre in prefixes:
                if argv[3].startswith(pre + "power/"):
                    out.append((pid, "agent", os.path.exists(argv[3])))
        elif len(argv) > 3 and argv[1:3] == ["-m", "ctk.sandbox.nodeinit"]:
            spec = argv[3]
            for pre in prefixes:
                if spec.startswith(pre + "nodes/"):
                    out.append((pid, spec[len(pre + "nodes/"):].split("/")[0], os.path.exists(spec)))
        elif argv and os.path.basename(argv[0]) == "munged":
            for a in argv:
                for pre in prefixes:
                    if a.startswith(f"--socket={pre}host-munge/"):
                        out.append((pid, "host-munge", os.path.exists(a.split("=", 1)[1])))
    return out


def stop_leftovers(deployment_dir: str, only_orphans: bool = False) -> list[str]:
    """Stop the lab processes of DEPLOYMENT_DIR that no state file leads to (ONLY_ORPHANS:
    just those whose files are gone); the node names stopped."""
    procs = [p for p in _lab_processes(deployment_dir) if not (only_orphans and p[2])]
    procs.sort(key=lambda p: p[1] != "agent")  # the agent first: it would boot nodes again
    return sorted(name for pid, name, _ in procs if terminate(pid) and name not in ("host-munge", "agent"))


def has_leftovers(deployment_dir: str) -> bool:
    """Whether a lab of DEPLOYMENT_DIR still holds its lease or has processes running."""
    return leases.leased(deployment_dir) or bool(_lab_processes(deployment_dir))



# ---- ctk destroy ---------------------------------------------------------------------------

def destroy_local(deployment_dir: str, purge: bool = False) -> DestroyResult:
    """Stop every daemon of the lab, free its addresses and ports, remove its runtime state
    (the deployment folder's generated files stay). The lab's /home, /root, accounting database
    and controller state stay in lab/ (KEPT), unless PURGE. Works on a lab whose folder is gone."""
    stopped = stop_all(deployment_dir) if os.path.isdir(deployment_dir) else []
    stopped += stop_leftovers(deployment_dir)
    n = leases.number(deployment_dir)
    if n is not None:
        netns.remove_lab(n)
    ldir = lab_dir(deployment_dir)
    data = kept_data(deployment_dir)
    ident = lab_identity(deployment_dir)
    if purge or not data:
        shutil.rmtree(ldir, ignore_errors=True)
        kept, deleted = [], data
        if purge and ident and parse_identity(json.dumps(ident)):  # the jobs ctk recorded of it go too
            reg = registry_home({"cluster": ident["cluster"], "id": ident["id"]})
            if os.path.isdir(reg):
                shutil.rmtree(reg)
                deleted.append((reg, "ctk's registry of the lab's jobs (ctk job list)"))
    else:
        keep = {os.path.basename(p) for p, _ in data}
        for name in os.listdir(ldir):
            if name in keep:
                continue
            path = os.path.join(ldir, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        if ident:  # what the kept data belongs to, for the next deploy's check
            atomic.write_file(os.path.join(ldir, IDENTITY), json.dumps(ident) + "\n", 0o600)
        kept, deleted = data, []
    leases.release(deployment_dir)
    return DestroyResult(sorted(set(stopped)), kept, deleted)


def destroy_message(deployment_dir: str, res: DestroyResult) -> str:
    """What `ctk destroy` prints of RES."""
    lines = [f"destroyed {deployment_dir}: stopped {len(res.stopped)} node(s)"]
    if res.kept:
        lines.append(f"kept (the next `ctk deploy` into {deployment_dir} uses them again; "
                     f"`ctk destroy --purge {deployment_dir}` deletes them):")
        lines += [f"  {path}  {what}" for path, what in res.kept]
    if res.deleted:
        lines.append("deleted (--purge):")
        lines += [f"  {path}  {what}" for path, what in res.deleted]
    return "\n".join(lines)
