"""What ctk's Google Cloud hand-off relies on in slurm-gcp's public images: the one table of it.

On the gcp target, Cluster Toolkit's Slurm modules boot slurm-gcp's images (project
schedmd-slurm-public), which already carry Slurm, munge and the Python that slurm-gcp's own
scripts run on; ctk builds its images on top of them and adds only what is above Slurm.

Sources (GoogleCloudPlatform/slurm-gcp unless named):
- CHANGELOG.md: the Slurm release each slurm-gcp release installs (SLURM_SINCE).
- ansible/roles/slurm/defaults/main.yml: Slurm installed under /usr/local with its
  configuration in /usr/local/etc/slurm, the slurm user and group with uid/gid 981.
- ansible/roles/python/tasks/main.yml: a Python 3.13 built into /slurm/python and the venv
  /slurm/python/venv that slurm-gcp's scripts (setup.py, resume, suspend) run in.
- docs/images.md and Cluster Toolkit v1.95's examples (image-builder.yaml, ml-slurm.yaml,
  hpc-slurm-ubuntu2204.yaml): the published families, `slurm-gcp-6-12-<os>`.
- The NVIDIA driver: slurm-gcp's cuda role installs NVIDIA's runfile driver on its x86 images
  (550.90.12 when this table was written); the Ubuntu families name their driver branch
  (`-nvidia-570`).
"""

from __future__ import annotations

from dataclasses import dataclass

PROJECT = "schedmd-slurm-public"
RELEASE = "6.12"  # the slurm-gcp release whose families ctk builds on (Cluster Toolkit v1.95)

# slurm-gcp release -> the Slurm it installs from that release on (CHANGELOG.md).
SLURM_SINCE = {
    "6.3.5": "23.11.3",
    "6.8.0": "24.05.3",
    "6.9.1": "24.11.2",
    "6.10.6": "25.05.2",
    "6.11.0": "25.11.2",
    "6.12.1": "25.11.4",
    "6.13.0": "26.05.2",
}

# Where slurm-gcp's images keep what ctk must not replace.
SLURM_PREFIX = "/usr/local"
SLURM_ETC = "/usr/local/etc/slurm"
SLURM_UID = 981
SLURM_PYTHON = "/slurm/python/bin/python3.13"
SLURM_VENV = "/slurm/python/venv"

# Roles ctk never applies on a slurm-gcp image, and why: the image brings them.
BROUGHT_BY_IMAGE = {
    "munge": "munge and its key handling",
    "slurm": "Slurm under /usr/local, built by slurm-gcp",
    "nvidia_driver": "the NVIDIA driver",
    "cuda": "the CUDA toolkit",
}


@dataclass(frozen=True)
class Family:
    """A slurm-gcp image family and what its images carry."""

    base: str  # ctk's name of the OS it is built from
    family: str
    driver: str  # NVIDIA driver version (or branch) the images carry

    @property
    def slurm(self) -> str:
        """The Slurm of this family's release (the newest entry of SLURM_SINCE at RELEASE)."""
        return slurm_of(RELEASE)


FAMILIES: dict[str, Family] = {f.base: f for f in (
    Family("debian-12", f"slurm-gcp-{RELEASE.replace('.', '-')}-debian-12", "550.90.12"),
    Family("rocky-9", f"slurm-gcp-{RELEASE.replace('.', '-')}-hpc-rocky-linux-9", "550.90.12"),
    Family("ubuntu-22.04", f"slurm-gcp-{RELEASE.replace('.', '-')}-ubuntu-2204-lts-nvidia-570", "570"),
    Family("ubuntu-24.04", f"slurm-gcp-{RELEASE.replace('.', '-')}-ubuntu-2404-lts-nvidia-570", "570"),
)}


def _tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def slurm_of(release: str) -> str:
    """The Slurm a slurm-gcp release ("6.12" or "6.12.1") installs."""
    want = _tuple(release) + (99,) * (3 - len(release.split(".")))
    best = [r for r in SLURM_SINCE if _tuple(r) <= want]
    if not best:
        raise KeyError(release)
    return SLURM_SINCE[max(best, key=_tuple)]


def family_for(base: str) -> Family | None:
    return FAMILIES.get(base)


def families_text() -> str:
    """'debian-12 (slurm-gcp-6-12-debian-12), ...' for hints."""
    return ", ".join(f"{f.base} ({f.family})" for f in FAMILIES.values())
