"""The variables ctk gives each role of an image, wherever the image is built: a layer of the
local store (images.build) or a build VM on Google Cloud (render.gcluster)."""

from __future__ import annotations

from ..model import SERVICE_IDS, SLURM_ARCHIVES, ImageSpec
from . import te as te_
from .catalog import Stack
from .lock import Lock, image_lock, jax_role_vars

SLURM_UID = SERVICE_IDS.start + 1  # images.accounts.FIXED['slurm']


def role_variables(spec: ImageSpec, role: str, stack: Stack, lock: Lock | None = None) -> dict:
    """Variables that shape a role's layer; only the jax layer sees the stack and its lock."""
    if role == "jax":
        lock = lock or image_lock(spec, stack)
        assert lock is not None  # ROLE is one of SPEC's roles: image_lock gives its lock (or raises)
        return jax_role_vars(stack, [lock])
    if role == "slurm":  # the slurm user's number: the one ctk gives it in every image (images.accounts)
        return {"slurm_flavour": "all", "slurm_uid": SLURM_UID, **slurm_release_vars(spec)}
    if role == "pyxis":
        return pyxis_vars(spec)
    if role == "dcgm":  # DCGM 4's packages are per CUDA major
        return {"dcgm_cuda_major": te_.cuda_major(stack.accelerator) or 12}
    return {}


def pyxis_vars(spec: ImageSpec) -> dict:
    """The pyxis role's files for nodes that lack enroot or pyxis (each checked by its sha256)."""
    return {"pyxis_enroot_packages": list(spec.pyxis.get("enroot_packages") or []),
            "pyxis_source": dict(spec.pyxis.get("source") or {})}


def slurm_release_vars(spec: ImageSpec) -> dict:
    """The slurm role's release and suite where the image asks for a Slurm its base lacks (none
    otherwise: the layers of images on their base's Slurm keep their keys)."""
    if not spec.slurm_release:
        return {}
    return {"slurm_release": spec.slurm_release,
            "slurm_release_suite": SLURM_ARCHIVES[spec.slurm_release][spec.base]}
