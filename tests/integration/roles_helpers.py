"""Helpers for applying ctk's Ansible roles to a Debian root filesystem with the chroot connection.

- copy_rootfs(): a working copy of a base tree (the session store's debian-12 base layer), so
  that the base stays as it is;
- chrootmountpoints(): /proc, /dev (bind) and /sys mounted in the tree while working, resolv.conf
  copied in; everything unmounted after, even on failure;
- run_playbook(): ansible-playbook over community.general.chroot, with the PLAY RECAP parsed.

Needs root, and an Ansible that carries community.general (PyPI's `ansible`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ctk import paths
from diskwatch import mountpoints  # tests/ is on sys.path (tests/conftest.py)

ANSIBLE_DIR = Path(paths.ANSIBLE)
DEV_DIR = Path(os.environ.get("CTK_DEV_DIR", "/var/tmp/ctk-dev"))
SANE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class HelperError(RuntimeError):
    pass


# ---------------------------------------------------------------- working trees

def copy_rootfs(src: Path, dst: Path) -> Path:
    """A full copy of src at dst (owners, modes, links, xattrs kept)."""
    dst = Path(dst)
    if dst.exists():
        raise HelperError(f"{dst} already exists")
    dst.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(dst)], check=True)
    return dst


def remove_rootfs(root: Path) -> None:
    """Delete a working tree, refusing while anything is still mounted inside it."""
    root = Path(root).resolve()
    inside = [m for m in mountpoints() if m == str(root) or m.startswith(str(root) + "/")]
    if inside:
        raise HelperError(f"still mounted under {root}: {inside}")
    shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- mounts

def _umount(target: str) -> None:
    if subprocess.run(["umount", target], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", target], capture_output=True)


@contextlib.contextmanager
def chroot_mounts(root: Path):
    """/proc, /dev (bind) and /sys mounted inside root, and the host's resolv.conf copied in.

    Everything mounted here is unmounted on the way out, in reverse order (lazily when busy).
    """
    root = Path(root).resolve()
    done: list[str] = []
    specs = [
        (["mount", "-t", "proc", "proc"], "proc"),
        (["mount", "--bind", "/dev"], "dev"),
        (["mount", "-t", "sysfs", "sysfs"], "sys"),
    ]
    try:
        for argv, sub in specs:
            target = root / sub
            target.mkdir(exist_ok=True)
            if str(target) in mountpoints():
                continue
            subprocess.run(argv + [str(target)], check=True, capture_output=True)
            done.append(str(target))
        resolv = root / "etc/resolv.conf"
        if resolv.is_symlink():
            resolv.unlink()
        shutil.copyfile("/etc/resolv.conf", resolv)
        yield root
    finally:
        for target in reversed(done):
            _umount(target)


def chroot_run(root: Path, argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """Run argv inside root (mounts are the caller's business)."""
    return subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True,
                          timeout=timeout, env=_clean_env())


# ---------------------------------------------------------------- ansible

def find_ansible_playbook() -> str | None:
    """ansible-playbook from $CTK_ANSIBLE_PLAYBOOK, the dev venv, or PATH, if it has community.general."""
    candidates = [os.environ.get("CTK_ANSIBLE_PLAYBOOK"), str(DEV_DIR / "venv/bin/ansible-playbook"),
                  shutil.which("ansible-playbook")]
    for c in candidates:
        if not c or not os.access(c, os.X_OK):
            continue
        doc = Path(c).with_name("ansible-doc")
        if doc.exists():
            probe = subprocess.run([str(doc), "-t", "connection", "community.general.chroot"],
                                   capture_output=True, text=True, env=_clean_env())
            if probe.returncode != 0:
                continue
        return c
    return None


def _clean_env() -> dict[str, str]:
    """The environment for Ansible and chroot commands: nothing of the host's pip or Python setup
    (PIP_FIND_LINKS, PYTHONPATH, ...) leaks into the target, whose pip must stand on its own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV", "CONDA", "ANSIBLE_"))}
    env.update(PATH=SANE_PATH, LANG="C.UTF-8", LC_ALL="C.UTF-8")
    return env


@dataclass
class Recap:
    ok: int
    changed: int
    unreachable: int
    failed: int
    skipped: int
    rescued: int
    ignored: int


_RECAP_RE = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)(?:\s+skipped=(?P<skipped>\d+))?(?:\s+rescued=(?P<rescued>\d+))?"
    r"(?:\s+ignored=(?P<ignored>\d+))?", re.M)


def parse_recap(output: str) -> dict[str, Recap]:
    """host -> Recap, from the PLAY RECAP section of ansible-playbook's default output."""
    i = output.rfind("PLAY RECAP")
    if i < 0:
        return {}
    out = {}
    for m in _RECAP_RE.finditer(output[i:]):
        out[m.group("host")] = Recap(*(int(m.group(k) or 0) for k in
                                       ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")))
    return out


@dataclass
class PlaybookRun:
    returncode: int
    output: str
    recap: Recap | None
    seconds: float

    def changed_tasks(self) -> list[str]:
        """Names of the tasks that reported `changed` (from the default callback's output)."""
        names, current = [], None
        for line in self.output.splitlines():
            m = re.match(r"^(?:TASK|RUNNING HANDLER) \[(.*)\] \**$", line)
            if m:
                current = m.group(1)
            elif line.startswith("changed:") and current and current not in names:
                names.append(current)
        return names


def run_playbook(playbook: str, root: Path, extra_vars: dict, *, ansible_playbook: str,
                 timeout: float = 1800, workdir: Path | None = None, check: bool = False) -> PlaybookRun:
    """Run ansible/<playbook> (or the playbook at an absolute path) against the tree at root
    over the chroot connection; CHECK: in Ansible's check mode (nothing changed).

    The chroot host runs as root already: become is switched off for it (the tree may have
    no sudo). Extra vars go through a JSON file, so dicts and lists keep their types.
    """
    root = Path(root).resolve()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        inv = Path(tmp) / "inventory.ini"
        inv.write_text(f"{root} ansible_connection=community.general.chroot "
                       f"ansible_python_interpreter=/usr/bin/python3 ansible_become=false\n")
        ev = Path(tmp) / "vars.json"
        ev.write_text(json.dumps(extra_vars))
        env = _clean_env()
        env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_RETRY_FILES_ENABLED="0",
                   ANSIBLE_LOCAL_TEMP=str(Path(tmp) / "ansible-local"),
                   ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
                   ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3")
        t0 = time.monotonic()
        proc = subprocess.run(
            [ansible_playbook, "-i", str(inv), str(ANSIBLE_DIR / playbook), "-e", f"@{ev}"] + (["--check"] if check else []),
            capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ANSIBLE_DIR),
        )
        took = time.monotonic() - t0
    output = proc.stdout + proc.stderr
    recap = parse_recap(output).get(str(root))
    return PlaybookRun(proc.returncode, output, recap, took)
