"""Packer folders for building a deployment's images on Google Cloud (pure)."""

from __future__ import annotations

import json
import os

from .. import paths
from ..model import Deployment
from ..stacks import get_stack, image_lock, jax_role_vars


def image_folders(exp, dep: Deployment) -> dict[str, str]:
    """Packer folders for building the images on Google Cloud, by folder-relative path."""
    files = {}
    template = open(os.path.join(paths.IMAGES, "gcp.pkr.hcl")).read()
    for img in dep.images:
        if not img.cloud:
            continue
        jax_vars = {"jax_stack": img.stack, "jax_stack_pins": {}}
        if "jax" in img.roles:
            stack = get_stack(img.stack)
            jax_vars = jax_role_vars(stack, [image_lock(img, stack)])
        folder = f"{exp.module(img.module_id).module.group}/{img.name}"
        files[f"{folder}/image.pkr.hcl"] = template
        files[f"{folder}/image.auto.pkrvars.json"] = json.dumps(
            {**img.cloud, "ansible_vars_file": "ansible-vars.json"}, indent=2) + "\n"
        files[f"{folder}/ansible-vars.json"] = json.dumps(
            {"ctk_roles": img.roles, "slurm_flavour": "all", **jax_vars},
            indent=2) + "\n"
    return files
