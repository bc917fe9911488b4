"""Which cluster a lab's folder belongs to (lab/identity.json, else slurmctld's saved record),
and what of a lab outlives it: its users' and accounting's data (KEPT), which `ctk destroy`
keeps and the next deploy of the same cluster uses again."""

from __future__ import annotations

import json
import os
import re

from ...connect.base import next_identity
from ...errors import UserError
from ...model import (
    BASES,
    SLURM_ARCHIVES,
    Deployment,
    parse_release,
    slurm_change_refusal,
    slurm_text,
)
from ..labclient import slurm
from ..labstate import lab_dir, load_state

# What `ctk destroy` keeps of a lab (its users' and its accounting's data), by folder of lab/,
# with what it is on the nodes; `ctk destroy --purge` deletes it, and the next deploy into
# the folder uses it again.
KEPT = (("home", "/home of every node"), ("root", "/root of every node"),
        ("slurmdbd", "the accounting database (sacct's history)"),
        ("slurmctld", "the controller's saved state (queued jobs, the next job id)"))
# The cluster lab/ belongs to: {"cluster", "deployment", "id", "slurm"}; "slurm": the Slurm
# release its daemons run (that wrote its saved state and accounting records), "24.11".
IDENTITY = "identity.json"


def new_identity(held: dict | None, dep: Deployment) -> dict:
    """lab/identity.json for a deploy of DEP: the id of the cluster whose data lab/ keeps (HELD,
    the same cluster: another one was refused or set aside), else a new one (next_identity)."""
    release = dep.slurm()
    return {**next_identity(held, dep.slurm_cluster_name), "deployment": dep.deployment_name,
            **({"slurm": slurm_text(release)} if release else {})}


def release_of_version(text: str) -> str | None:
    """"24.11" from `sinfo --version`'s "slurm-wlm 24.11.5" (or "slurm 26.05.5"); None otherwise."""
    m = re.search(r"\b(\d+\.\d\d)\.\d+", text)
    return m.group(1) if m else None


def running_release(deployment_dir: str) -> dict:
    """{"slurm": release} of the running lab's Slurm, asked of its client node (a lab an earlier
    ctk deployed, whose identity.json does not record it); {} where it does not answer."""
    try:
        r = slurm(deployment_dir, "sinfo", "--version", timeout=15, check=False)
    except Exception:  # noqa: BLE001 - a lab that does not answer is not checked, as before
        return {}
    release = release_of_version(r.stdout) if r.returncode == 0 else None
    return {"slurm": release} if release else {}


def _upgrade_path(old: tuple[int, int], new: tuple[int, int]) -> str:
    """The deploys on the way from Slurm OLD to NEW, each to the latest release ctk's images
    offer that the one before can go to."""
    offered: dict[tuple[int, int], str] = {}
    for b in BASES.values():
        offered.setdefault(b.slurm, f"base {b.name}")
    for text, bases in SLURM_ARCHIVES.items():
        r = parse_release(text)
        if r:
            offered.setdefault(r, f'slurm_release: "{text}" on base {", ".join(sorted(bases))}')
    path, cur = [], old
    while slurm_change_refusal(cur, new) is not None:
        steps = [r for r in sorted(offered) if cur < r < new and slurm_change_refusal(cur, r) is None]
        if not steps:
            return (f"no release ctk's images offer leads there from Slurm {slurm_text(cur)}; start the cluster over "
                    f"on Slurm {slurm_text(new)} (`ctk destroy DIR --purge` deletes its saved state and accounting)")
        cur = steps[-1]
        path.append(f"Slurm {slurm_text(cur)} ({offered[cur]})")
    return f"upgrade in steps: deploy the cluster on {', then '.join(path)}, then on {slurm_text(new)}"


def slurm_change(deployment_dir: str, held: dict | None, dep: Deployment) -> UserError | None:
    """The refusal of a deploy of DEP that would run a Slurm release onto data (saved state,
    accounting records) that it cannot take, kept in DEPLOYMENT_DIR/lab by a cluster (HELD) of
    another release; None where Slurm can take it (the same release, or an upgrade in SchedMD's
    window, which the deploy does in SchedMD's order: slurmdbd, slurmctld, then each slurmd as
    its jobs end)."""
    old = parse_release(str((held or {}).get("slurm") or ""))
    new = dep.slurm()
    why = slurm_change_refusal(old, new) if old and new else None
    if why is None:
        return None
    assert old is not None and new is not None
    if new < old:
        hint = (f"deploy it with Slurm {slurm_text(old)} or later (the image's base or slurm_release), or start the "
                f"cluster over: `ctk destroy {deployment_dir} --purge` deletes its saved state and accounting")
    else:
        hint = _upgrade_path(old, new)
    return UserError(f"{deployment_dir} holds a cluster of Slurm {slurm_text(old)}; the blueprint's images run "
                     f"Slurm {slurm_text(new)}: {why}", hint=hint)


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
