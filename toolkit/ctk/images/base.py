"""Base OS trees for local builds: a Debian minbase tree, cached as the bottom layer.

mmdebstrap makes it where it is installed (Debian's own, as debootstrap is: the same minbase
tree, but it unpacks with apt and dpkg in one go: 26.8 s for trixie here, where debootstrap took
44.0 s); else debootstrap. The tool is part of the base's key: the two trees are not byte for
byte the same (debootstrap adds lsb-base), so a base is never taken for the other's."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import time

from ..errors import UserError
from ..progress import Progress
from ..runner import run
from .accounts import renumber
from .store import Store

# What every base carries: python3 for Ansible (and python3-apt for its apt module, which would
# otherwise run apt-get update and install it in the first layer), sshd for the build node.
INCLUDE = ["python3", "python3-apt", "openssh-server", "ca-certificates"]
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


def apt_checks_valid_until() -> bool:
    """Whether this machine's apt refuses Release files past their Valid-Until date. A machine
    whose packages come through a mirror of a frozen archive turns the check off
    (Acquire::Check-Valid-Until "false"): the suites a build adds for its nodes (slurm_release's)
    then do the same, or apt refuses them as expired."""
    tool = shutil.which("apt-config", path="/usr/bin:/bin")  # this machine's, whatever PATH says
    if tool is None:
        return True
    try:
        out = subprocess.run([tool, "dump", "Acquire::Check-Valid-Until"], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return True
    return not re.search(r'^Acquire::Check-Valid-Until "(false|no|0)";', out, re.M | re.I)


def bootstrapper() -> str:
    """mmdebstrap where this machine has it, else debootstrap (CTK_BOOTSTRAP names one)."""
    want = os.environ.get("CTK_BOOTSTRAP")
    if want:
        if want not in ("mmdebstrap", "debootstrap"):
            raise UserError(f"CTK_BOOTSTRAP={want}: expected mmdebstrap or debootstrap")
        return want
    return "mmdebstrap" if shutil.which("mmdebstrap") else "debootstrap"


def bootstrap_argv(tool: str, base: str, tree: str) -> list[str]:
    """TOOL's command line, in a mount namespace of its own: what it mounts in the tree (/proc,
    /sys, /dev) goes when it ends, even killed, so no later rmtree of a leftover tree reaches
    the host's /dev."""
    own = ["unshare", "--mount", "--propagation", "private"]
    if tool == "mmdebstrap":
        # apt's package lists stay (mmdebstrap fetched them anyway): the first role's apt task finds
        # them fresh and skips its own `apt-get update` (cache_valid_time), about 2 s a build
        return own + ["mmdebstrap", "--mode=root", "--variant=minbase", f"--include={','.join(INCLUDE)}",
                      "--dpkgopt=force-unsafe-io", "--skip=cleanup/apt/lists", SUITES[base], tree, mirror()]
    return own + ["debootstrap", "--variant=minbase", f"--include={','.join(INCLUDE)}", SUITES[base], tree, mirror()]


def base_key(base: str, tool: str | None = None) -> str:
    desc = {"base": base, "suite": SUITES.get(base), "variant": "minbase", "include": INCLUDE,
            "mirror": mirror(), "version": BASE_VERSION}
    tool = tool or bootstrapper()
    if tool != "debootstrap":  # the keys of debootstrap's bases stay what they were
        desc["tool"] = tool
        desc["apt_lists"] = "kept"
    return "base-" + hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]


def chosen_base_key(store: Store, base: str) -> str:
    """The key the base will have: a cached base of the tool this machine uses, else one the
    other tool made (it stands, as any cached layer), else the tool's new one."""
    tool = bootstrapper()
    key = base_key(base, tool)
    if not store.has(key) and not os.environ.get("CTK_BOOTSTRAP"):
        other = base_key(base, "debootstrap" if tool == "mmdebstrap" else "mmdebstrap")
        if store.has(other):
            return other
    return key


def ensure_base(store: Store, base: str, progress: Progress) -> str:
    """The key of the base layer, building it (mmdebstrap, else debootstrap) if it is not cached."""
    if base not in SUITES:
        raise UserError(f"base '{base}' cannot be built on this machine (local builds support: "
                        f"{', '.join(SUITES)}); other bases build on the gcp target")
    key = chosen_base_key(store, base)
    if store.has(key):
        return key
    tool = bootstrapper()
    work = store.scratch(f"{key}.build")
    tree = os.path.join(work, "root")
    t0 = time.monotonic()
    with progress.step(f"base {base} ({tool} {SUITES[base]})"):
        run(bootstrap_argv(tool, base, tree), on_line=lambda ln: _show(progress, ln),
            what=f"{tool} of {base} failed", log_path=os.path.join(work, f"{tool}.log"))
        _scrub(tree)
        renumber(tree)  # sshd's and systemd's accounts take numbers no host account has
    store.commit(key, tree, {"kind": "base", "base": base, "include": INCLUDE, "tool": tool,
                             "seconds": round(time.monotonic() - t0, 1)})
    shutil.rmtree(work, ignore_errors=True)
    return key


_PER_PACKAGE = ("I: Retrieving", "I: Validating", "I: Extracting", "I: Unpacking", "I: Configuring")


def _show(progress: Progress, line: str) -> None:
    # debootstrap prints a line per package per phase; off a TTY only the phases are worth it
    # (mmdebstrap's lines are its phases).
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
