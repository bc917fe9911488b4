"""Base OS trees for local builds: `debootstrap --variant=minbase`, cached as the bottom layer."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil

from ..errors import UserError
from ..progress import Progress
from ..runner import run
from .accounts import renumber
from .store import Store

# What every base carries: python3 for Ansible, sshd for the build node Packer talks to.
INCLUDE = ["python3", "openssh-server", "ca-certificates"]
SUITES = {"debian-12": "bookworm", "debian-13": "trixie"}
BASE_VERSION = 2  # bump when the way bases are made changes


def mirror() -> str:
    """The Debian mirror: CTK_DEBIAN_MIRROR, else the one this machine's apt uses."""
    if os.environ.get("CTK_DEBIAN_MIRROR"):
        return os.environ["CTK_DEBIAN_MIRROR"]
    for path in glob.glob("/etc/apt/sources.list.d/*.sources"):
        for line in open(path):
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


def base_key(base: str) -> str:
    desc = {"base": base, "suite": SUITES.get(base), "variant": "minbase", "include": INCLUDE,
            "mirror": mirror(), "version": BASE_VERSION}
    return "base-" + hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]


def ensure_base(store: Store, base: str, progress: Progress) -> str:
    """The key of the base layer, building it with debootstrap if it is not cached."""
    if base not in SUITES:
        raise UserError(f"base '{base}' cannot be built on this machine (local builds support: "
                        f"{', '.join(SUITES)}); other bases build on the gcp target")
    key = base_key(base)
    if store.has(key):
        return key
    work = store.scratch(f"{key}.build")
    tree = os.path.join(work, "root")
    with progress.step(f"base {base} (debootstrap {SUITES[base]})"):
        run(["debootstrap", "--variant=minbase", f"--include={','.join(INCLUDE)}", SUITES[base], tree, mirror()],
            on_line=lambda ln: _show(progress, ln),
            what=f"debootstrap of {base} failed", log_path=os.path.join(work, "debootstrap.log"))
        _scrub(tree)
        renumber(tree)  # sshd's and systemd's accounts take numbers no host account has
    store.commit(key, tree, {"kind": "base", "base": base, "include": INCLUDE})
    shutil.rmtree(work, ignore_errors=True)
    return key


_PER_PACKAGE = ("I: Retrieving", "I: Validating", "I: Extracting", "I: Unpacking", "I: Configuring")


def _show(progress: Progress, line: str) -> None:
    # debootstrap prints a line per package per phase; off a TTY only the phases are worth it.
    if line.startswith("I: ") and (progress.tty or not line.startswith(_PER_PACKAGE)):
        progress.task(line[3:])


def _scrub(tree: str) -> None:
    """Nothing secret or machine-specific stays in an image: host keys, machine-id, caches."""
    for p in glob.glob(os.path.join(tree, "etc/ssh/ssh_host_*")):
        os.unlink(p)
    mid = os.path.join(tree, "etc/machine-id")
    if os.path.exists(mid):
        open(mid, "w").close()
    for p in glob.glob(os.path.join(tree, "var/cache/apt/archives/*.deb")):
        os.unlink(p)
