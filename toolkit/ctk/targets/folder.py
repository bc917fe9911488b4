"""The deployment folder: expanded blueprint, the Deployment model, per-group artifacts.

Layout:
    expanded.yaml          the blueprint after expansion (Cluster Toolkit format)
    deployment.json        the Deployment model
    <group>/slurm/         slurm.conf, gres.conf, cgroup.conf (in the controller's group)
    <group>/<image>/       a Packer folder per image for building it on Google Cloud
                           (image.pkr.hcl, its variables, the roles' variables)
    gcp/                   the gcp target's hand-off to Cluster Toolkit: blueprint.yaml for
                           gcluster, the roles tarball it stages, README.md (render.gcluster)
    ansible/               the playbooks and roles those Packer folders run
    staged/                files named by ghpc_stage()
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from .. import atomic, paths
from ..blueprint.expand import Expanded
from ..errors import Failure, UserError
from ..model import Deployment
from ..render.gcluster import TARBALL_PATH, gcp_files
from ..render.packer import PACKER_DIR, image_folders
from ..render.slurmconf import (
    render_cgroup_conf,
    render_gres_conf,
    render_oci_conf,
    render_slurm_conf,
)
from ..yamlout import dump
from . import REGISTRY, get
from .base import not_a_deployment_folder


def artifacts(exp: Expanded, dep: Deployment) -> dict[str, str | bytes]:
    """Every generated file (text, or bytes for a tarball), by folder-relative path (pure)."""
    files: dict[str, str | bytes] = {
        "expanded.yaml": dump(exp.to_blueprint()),
        "deployment.json": json.dumps(dep.to_dict(), indent=2) + "\n",
    }
    gcp = gcp_files(exp, dep)
    files.update(gcp)
    tarball = gcp.get(TARBALL_PATH)
    assert not isinstance(tarball, str)  # gcp_files makes the roles tarball as bytes
    files.update(image_folders(exp, dep, tarball))
    # Where the cluster's own tooling writes slurm.conf (slurm-gcp on Google Cloud), ctk writes none.
    if dep.controller is not None and dep.traits.writes_slurm_conf:
        if dep.controller.module_id:
            em = exp.module(dep.controller.module_id)
            assert em is not None  # planning took the controller from that module of EXP
            group = em.module.group
        else:
            group = exp.blueprint.groups[-1].name
        # A target that knows where the daemons listen (the ssh target's hosts) says so.
        lay = _folder_layout(dep)
        files[f"{group}/slurm/slurm.conf"] = render_slurm_conf(dep, layout=lay)
        files[f"{group}/slurm/cgroup.conf"] = render_cgroup_conf(dep, layout=lay)
        files[f"{group}/slurm/oci.conf"] = render_oci_conf(dep)
        if any(ns.gpu_count for ns in dep.nodesets):
            files[f"{group}/slurm/gres.conf"] = render_gres_conf(dep, layout=lay)
    return files


def _folder_layout(dep: Deployment):
    return get(dep.target).folder_layout(dep) if dep.target in REGISTRY else None


def packer_version() -> tuple[int, ...] | None:
    """The version of the packer on PATH, or None without one."""
    if not shutil.which("packer"):
        return None
    r = subprocess.run(["packer", "version"], capture_output=True, text=True,
                       env={**os.environ, "CHECKPOINT_DISABLE": "1"})
    m = re.search(r"v?(\d+)\.(\d+)\.(\d+)", r.stdout)
    return tuple(int(x) for x in m.groups()) if m else None


def packer_validate(folder: str, full: bool = False,
                    version: tuple[int, ...] | None = None) -> subprocess.CompletedProcess:
    """`packer validate` of a gcp/packer/IMAGE folder. Packer before 1.7 cannot read the
    `required_plugins` of versions.pkr.hcl, so there the folder is checked without that file
    (a copy). FULL runs the builder's and provisioner's own checks too (offline; the Ansible
    provisioner wants ansible-playbook, which ctk's environment has). VERSION: packer's, when the
    caller has asked it already."""
    version = version or packer_version()
    if version is None:
        raise Failure("packer is not on PATH", hint="install Packer (Debian: apt install packer)")
    env = {**os.environ, "CHECKPOINT_DISABLE": "1",
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    argv = ["packer", "validate"] + ([] if full else ["-syntax-only"]) + ["."]
    if version >= (1, 7):
        return subprocess.run(argv, cwd=folder, capture_output=True, text=True, env=env)
    with tempfile.TemporaryDirectory(prefix="ctk-packer-") as tmp:
        copy = os.path.join(tmp, os.path.basename(folder))
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("versions.pkr.hcl"))
        os.symlink(os.path.join(os.path.dirname(os.path.abspath(folder)), "ansible"), os.path.join(tmp, "ansible"))
        return subprocess.run(argv, cwd=copy, capture_output=True, text=True, env=env)


def _packer_dirs(files) -> list[str]:
    """The gcp target's Packer folders among a deployment folder's files (relative paths)."""
    return sorted({os.path.dirname(rel) for rel in files if rel.startswith(PACKER_DIR + "/")})


def _packer_folders_check(folder: str, files) -> list[str]:
    """Copy the roles beside the gcp target's Packer folders and check each with `packer validate
    -syntax-only` (offline: no credentials needed); the notes to print."""
    folders = _packer_dirs(files)
    if not folders:
        return []
    shutil.copytree(paths.ansible_dir(), os.path.join(folder, PACKER_DIR, "ansible"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.retry", "*.pyc"))
    version = packer_version()
    if version is None:
        return [f"warning: packer is not on PATH, so {PACKER_DIR}/*/ were not checked (packer validate)"]
    for rel in folders:
        r = packer_validate(os.path.join(folder, rel), version=version)
        if r.returncode != 0:
            raise Failure(f"packer rejected the generated template in {rel}:\n{r.stdout}{r.stderr}")
    return []


def create(exp: Expanded, dep: Deployment, out_dir: str, overwrite: bool = False) -> list[str]:
    """Write the deployment folder atomically; refuse to replace one unless `overwrite`. Returns
    notes for the user (what could not be checked)."""
    if os.path.exists(out_dir):
        if not os.path.isdir(out_dir):
            raise UserError(f"{out_dir} exists and is not a folder")
        if not overwrite:
            raise UserError(f"deployment folder {out_dir} already exists",
                            hint="pass -w to overwrite it")
        if not os.path.exists(os.path.join(out_dir, "deployment.json")) and os.listdir(out_dir):
            raise not_a_deployment_folder(out_dir, "not overwriting it")
        for name in REGISTRY:
            refusal = get(name).overwrite_refusal(out_dir)
            if refusal is not None:
                raise refusal
    stage = atomic.staging_dir(out_dir)
    try:
        files = artifacts(exp, dep)
        for rel, text in files.items():
            path = os.path.join(stage, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                with open(path, "wb") as f:
                    f.write(text.encode() if isinstance(text, str) else text)
            except OSError as e:  # a full disk names no file: name the one it was for
                if e.filename is None:
                    raise OSError(e.errno, e.strerror, os.path.join(out_dir, rel)) from None
                raise
        for rel, src in exp.staged.items():
            dest = os.path.join(stage, rel)
            if os.path.isdir(src):
                shutil.copytree(src, dest)
            else:
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copy2(src, dest)
        notes = _packer_folders_check(stage, files)
        os.chmod(stage, 0o755)
        atomic.replace_dir(stage, out_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return notes


def update(exp: Expanded, dep: Deployment, out_dir: str) -> list[str]:
    """Write the generated files into an existing (possibly running) deployment folder, each
    atomically, leaving runtime state alone; returns the files that changed."""
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not os.path.exists(os.path.join(out_dir, "deployment.json")) \
            and not os.path.exists(os.path.join(out_dir, ".ctk.lock")):
        raise not_a_deployment_folder(out_dir, "not writing into it")
    changed = []
    files = artifacts(exp, dep)
    for rel, text in files.items():
        if atomic.write_if_changed(os.path.join(out_dir, rel), text):
            changed.append(rel)
    if _packer_dirs(files):
        shutil.copytree(paths.ansible_dir(), os.path.join(out_dir, PACKER_DIR, "ansible"), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.retry", "*.pyc"))
    for rel, src in exp.staged.items():
        dest = os.path.join(out_dir, rel)
        if os.path.isdir(src):
            shutil.copytree(src, dest, dirs_exist_ok=True)
        else:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(src, dest)
    return changed
