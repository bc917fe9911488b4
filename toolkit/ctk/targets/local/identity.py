"""Which cluster a lab's folder belongs to (lab/identity.json, else slurmctld's saved record),
and what of a lab outlives it: its users' and accounting's data (KEPT), which `ctk destroy`
keeps and the next deploy of the same cluster uses again."""

from __future__ import annotations

import json
import os

from ...connect.base import next_identity
from ...model import Deployment
from ..labstate import lab_dir, load_state

# What `ctk destroy` keeps of a lab (its users' and its accounting's data), by folder of lab/,
# with what it is on the nodes; `ctk destroy --purge` deletes it, and the next deploy into
# the folder uses it again.
KEPT = (("home", "/home of every node"), ("root", "/root of every node"),
        ("slurmdbd", "the accounting database (sacct's history)"),
        ("slurmctld", "the controller's saved state (queued jobs, the next job id)"))
IDENTITY = "identity.json"  # the cluster lab/ belongs to: {"cluster", "deployment", "id"}


def new_identity(held: dict | None, dep: Deployment) -> dict:
    """lab/identity.json for a deploy of DEP: the id of the cluster whose data lab/ keeps (HELD,
    the same cluster: another one was refused or set aside), else a new one (next_identity)."""
    return {**next_identity(held, dep.slurm_cluster_name), "deployment": dep.deployment_name}


def identity_clash(deployment_dir: str, held: dict, dep: Deployment) -> str:
    """The refusal of a deploy of DEP into a folder that holds another cluster (HELD)."""
    how = "runs" if held.get("running", load_state(deployment_dir) is not None) else "keeps the data of"
    old = f"cluster {held['cluster']!r}" + (f" (deployment {held['deployment']})" if held.get("deployment") else "")
    return (f"{deployment_dir} {how} {old}; the blueprint is cluster {dep.slurm_cluster_name!r} "
            f"(deployment {dep.deployment_name}): a deployment folder holds one cluster")


def kept_data(deployment_dir: str) -> list[tuple[str, str]]:
    """(path, what it is) of each folder of users' or accounting data under lab/, kept by
    destroy (with the saved state of controllers of other clusters, set aside by deploy -w)."""
    ldir = os.path.abspath(lab_dir(deployment_dir))
    out = [(os.path.join(ldir, name), what) for name, what in KEPT if os.path.isdir(os.path.join(ldir, name))]
    try:
        names = sorted(os.listdir(ldir))
    except OSError:
        names = []
    for name in names:
        if name.startswith("slurmctld.") and os.path.isdir(os.path.join(ldir, name)):
            out.append((os.path.join(ldir, name), f"the saved state of the controller of cluster {name[10:]}"))
    return out


def lab_identity(deployment_dir: str) -> dict | None:
    """The cluster whose lab lives (or whose data is kept) in DEPLOYMENT_DIR/lab: {cluster,
    deployment}, from lab/identity.json, else slurmctld's own record of its cluster's name in
    its saved state; None if lab/ holds no cluster's data."""
    ldir = lab_dir(deployment_dir)
    try:
        with open(os.path.join(ldir, IDENTITY)) as f:
            ident = json.load(f)
        if isinstance(ident, dict) and isinstance(ident.get("cluster"), str):
            return ident
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(ldir, "slurmctld", "clustername")) as f:
            name = f.read().strip()
    except OSError:
        return None
    return {"cluster": name, "deployment": None} if name else None


def set_aside_controller_state(deployment_dir: str, old_cluster: str) -> str | None:
    """Move the saved state of OLD_CLUSTER's controller out of the way of a new cluster's
    (slurmctld refuses another cluster's state: CLUSTER NAME MISMATCH); where it went."""
    ldir = lab_dir(deployment_dir)
    src = os.path.join(ldir, "slurmctld")
    if not os.path.isdir(src) or not os.listdir(src):
        return None
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in old_cluster) or "unknown"
    dest, i = os.path.join(ldir, f"slurmctld.{safe}"), 1
    while os.path.lexists(dest):
        i += 1
        dest = os.path.join(ldir, f"slurmctld.{safe}.{i}")
    os.rename(src, dest)
    return dest
