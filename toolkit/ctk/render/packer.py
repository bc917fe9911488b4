"""The gcp target's other way (pure): Packer folders that build its images on Google Cloud, for
users who run Packer themselves, and a cluster-only Cluster Toolkit blueprint that boots the
built images by name.

    gcp/packer/IMAGE/      image.pkr.hcl (images/gcp.pkr.hcl), versions.pkr.hcl, the Packer
                           variables (image.auto.pkrvars.json) and the roles' (ansible-vars.json)
    gcp/packer/ansible/    the roles the Ansible provisioner runs (copied by targets.folder)
    gcp/cluster-only.yaml  the blueprint's network and cluster groups, each Slurm VM booting
                           `instance_image: {name, project}`

An image's name is pinned by what is in it: IMAGE_NAME-<12 hex of the sha256 of its role
variables and ctk's roles>, so the cluster-only blueprint names exactly the image its Packer
folder builds, and a change to either gives a new name.
"""

from __future__ import annotations

import hashlib
import json
import os

from .. import paths
from ..blueprint.expand import Expanded
from ..model import Deployment, GcpSettings, ImageSpec
from ..modules import slurm_gcp
from ..yamlout import dump
from .gcluster import family_name, image_vars, native_blueprint, roles_tarball

PACKER_DIR = "gcp/packer"


def pinned_image_name(img: ImageSpec, tarball: bytes) -> str:
    """The image's name in the cluster-only blueprint and its Packer folder."""
    h = hashlib.sha256(tarball + b"\0" + img.name.encode()).hexdigest()[:12]
    return f"{family_name(img)[:48]}-{h}"


def image_folders(exp: Expanded, dep: Deployment, tarball: bytes | None = None) -> dict[str, str]:
    """gcp/packer/IMAGE/ per image of the gcp target, and gcp/cluster-only.yaml; {} for other
    targets (Cluster Toolkit's own image builds stay in its blueprint). TARBALL: the roles
    tarball render.gcluster made for the same deployment (made here if not given)."""
    if not dep.traits.hands_off_to_gcluster:
        return {}
    images = [img for img in dep.images if img.source == "ctk/image"]
    ivars = {img.name: image_vars(img) for img in images}
    if tarball is None:
        tarball = roles_tarball(ivars)
    template = open(os.path.join(paths.IMAGES, "gcp.pkr.hcl")).read()
    versions = open(os.path.join(paths.IMAGES, "gcp-versions.pkr.hcl")).read()
    g = dep.settings_of(GcpSettings)
    files: dict[str, str] = {}
    names: dict[str, str] = {}
    for img in images:
        fam = slurm_gcp.family_for(img.base)
        assert fam is not None  # planning refused the others
        names[img.name] = pinned_image_name(img, tarball)
        pkvars = {k: v for k, v in {
            "project_id": g.project_id,
            "zone": g.zone,
            "machine_type": g.image_machine_type,
            "source_image_family": fam.family,
            "source_image_project_id": [slurm_gcp.PROJECT],
            "image_family": family_name(img),
            "image_name": names[img.name],
            "disk_size": g.image_disk_size,
            "labels": {"ghpc_blueprint": exp.blueprint.name, "ghpc_deployment": dep.deployment_name},
            "ansible_vars_file": "ansible-vars.json",
        }.items() if v is not None}
        folder = f"{PACKER_DIR}/{img.name}"
        files[f"{folder}/image.pkr.hcl"] = template
        files[f"{folder}/versions.pkr.hcl"] = versions
        files[f"{folder}/image.auto.pkrvars.json"] = json.dumps(pkvars, indent=2) + "\n"
        files[f"{folder}/ansible-vars.json"] = json.dumps(ivars[img.name], indent=2, sort_keys=True) + "\n"
    bp = native_blueprint(exp, dep, pinned=names)
    files["gcp/cluster-only.yaml"] = (
        "# Written by `ctk create`: the cluster alone, booting the images that gcp/packer/ builds,\n"
        "# by name. Build them first (packer build in each folder there), then:\n"
        "#   gcluster deploy gcp/cluster-only.yaml -o gcp\n---\n" + dump(bp))
    return files
