"""What the accelerator roles put in an image, per base, and the rules stacks and GPUs must keep
against it.

The versions are written once, in the roles' own variables: the NVIDIA driver the nvidia_driver
role pins (its vars/<Distribution>[-<major>].yml, `__nvidia_driver_pin`) and the CUDA toolkit the
cuda role installs (`__cuda_toolkit`). ctk reads them here, so a blueprint is checked against
exactly what its image will carry, before any build starts:

- a CUDA stack needs a driver at least its `min_driver` (jax[cuda13] needs >= 580, which no
  Debian archive has);
- a GPU generation needs its driver and kernel module: Blackwell (B200, GB200, GB300, RTX PRO
  6000) runs only on NVIDIA's open kernel module, from driver 570;
- Transformer Engine builds against a CUDA toolkit of its stack's CUDA major version, >= 12.1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

import yaml

from .. import paths
from ..model import BASES
from ..modules.machines import gpu_generation
from .catalog import (
    python_tuple,  # "550.163.01" -> (550, 163, 1), as for Python versions
)

# Ansible's names (ansible_facts['distribution']) for the distributions of ctk's bases.
ANSIBLE_DISTRIBUTION = {"debian": "Debian", "ubuntu": "Ubuntu", "rocky": "Rocky"}
ANSIBLE_FAMILY = {"debian": "Debian", "ubuntu": "Debian", "rocky": "RedHat"}

# GPU generations that need more than any driver that runs CUDA 12: generation -> (oldest
# driver, kernel module). Blackwell's GPUs have no proprietary-module support at all.
GENERATION_NEEDS = {
    "Blackwell": ("570", "open"),
}


def gpu_needs(gres: str | None) -> tuple[str, str, str] | None:
    """(generation, oldest driver, kernel module) a GPU of gres type GRES needs beyond CUDA 12's
    drivers; None when any such driver runs it (or ctk does not know the type)."""
    generation = gpu_generation(gres or "")
    need = GENERATION_NEEDS.get(generation or "")
    return (generation, *need) if generation and need else None

# What Transformer Engine builds against: a CUDA toolkit of at least this release.
TE_MIN_CUDA = "12.1"


@dataclass(frozen=True)
class Driver:
    """The NVIDIA driver an image on one base gets from the nvidia_driver role."""

    version: str  # "550.163.01"; a branch ("580") where only the branch is pinned
    branch: str
    package_version: str | None  # the distribution's package version, where pinned exactly
    kernel_module: str  # "open" | "proprietary"
    source: str  # where it comes from, in words

    def at_least(self, floor: str) -> bool:
        return python_tuple(self.version) >= python_tuple(floor)


@dataclass(frozen=True)
class Toolkit:
    """The CUDA toolkit an image on one base gets from the cuda role."""

    version: str  # "12.4"

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


def _vars_files(base: str) -> list[str]:
    """The names the roles' `first_found` tries for a base, most specific first."""
    b = BASES.get(base)
    if b is None:
        return []
    dist = ANSIBLE_DISTRIBUTION.get(b.distribution, b.distribution.capitalize())
    return [f"{dist}-{b.release.split('.')[0]}.yml", f"{dist}.yml", f"{ANSIBLE_FAMILY.get(b.distribution, dist)}.yml"]


@cache
def _role_vars(ansible_dir: str, role: str, base: str) -> dict:
    for name in _vars_files(base):
        path = os.path.join(ansible_dir, "roles", role, "vars", name)
        if os.path.isfile(path):
            with open(path) as f:
                return yaml.safe_load(f) or {}
    return {}


def image_driver(base: str) -> Driver | None:
    """The driver the nvidia_driver role installs on BASE (None: ctk does not know one)."""
    d = _role_vars(paths.ansible_dir(), "nvidia_driver", base).get("__nvidia_driver_pin")
    if not isinstance(d, dict):
        return None
    return Driver(str(d["version"]), str(d.get("branch") or str(d["version"]).split(".")[0]),
                  d.get("package_version"), str(d.get("kernel_module", "proprietary")), str(d.get("source", "")))


def cuda_toolkit(base: str) -> Toolkit | None:
    """The CUDA toolkit the cuda role installs on BASE (None: none ctk knows)."""
    t = _role_vars(paths.ansible_dir(), "cuda", base).get("__cuda_toolkit")
    return Toolkit(str(t["version"])) if isinstance(t, dict) else None


def has_dcgm(base: str) -> bool:
    """Does the dcgm role know where BASE gets DCGM (NVIDIA publishes it for some releases only)?"""
    return bool(_role_vars(paths.ansible_dir(), "dcgm", base).get("__dcgm_packages"))


def bases_with_dcgm() -> list[str]:
    return [name for name in BASES if has_dcgm(name)]


def bases_with_driver(floor: str, module: str | None = None) -> list[str]:
    """The bases whose driver is at least FLOOR (with that kernel module), in BASES order."""
    out = []
    for name in BASES:
        d = image_driver(name)
        if d is not None and d.at_least(floor) and (module is None or d.kernel_module == module):
            out.append(name)
    return out


def bases_with_toolkit(major: int, floor: str = TE_MIN_CUDA) -> list[str]:
    out = []
    for name in BASES:
        t = cuda_toolkit(name)
        if t is not None and t.major == major and python_tuple(t.version) >= python_tuple(floor):
            out.append(name)
    return out
