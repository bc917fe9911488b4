"""The accounts of an image: its service accounts (munge, slurm, mysql, sshd, ...) renumbered
into model.SERVICE_IDS as each layer is built, and the check at deploy that no host account
shares a number with any of them.

Why: a lab node runs without a user namespace, so a uid in a node is the same uid on the host. A
host account that shared munge's uid could open /proc/<munged>/root and read the lab's munge key;
one that shared a job's uid could trace it. Packages pick their accounts' numbers as they are
installed (adduser from 100 up, systemd-sysusers from 999 down), which are the numbers host
accounts have too, so ctk moves every account of the dynamic range into numbers of its own.
"""

from __future__ import annotations

import os
import stat

from ..model import SERVICE_IDS

# Static numbers for the accounts ctk's roles make, so that the same account has the same number
# in every image (the slurm role creates its user with slurm_uid = this number).
FIXED = {"munge": 1_900_100, "slurm": 1_900_101, "mysql": 1_900_102, "sshd": 1_900_103,
         "systemd-network": 1_900_104, "messagebus": 1_900_105, "_chrony": 1_900_106, "slurmrestd": 1_900_107}
DYNAMIC = range(100, 65534)  # what Debian and packages give out (65534 is nobody / nogroup)
STATIC_GROUPS = {"users"}  # Debian's base-passwd fixes users at 100


def _rows(path: str) -> list[list[str]]:
    with open(path) as f:
        return [ln.rstrip("\n").split(":") for ln in f if ln.strip()]


def _write_rows(path: str, rows: list[list[str]]) -> None:
    st = os.lstat(path)
    tmp = path + ".ctk-new"
    with open(tmp, "w") as f:
        f.write("".join(":".join(r) + "\n" for r in rows))
    os.chown(tmp, st.st_uid, st.st_gid)
    os.chmod(tmp, stat.S_IMODE(st.st_mode))
    os.replace(tmp, path)


def renumber(tree: str) -> dict[str, dict[str, tuple[int, int]]]:
    """Move TREE's accounts of the dynamic range (users and groups) into SERVICE_IDS, rewriting
    etc/passwd and etc/group and the owners of TREE's files. TREE is a layer's upper dir (or a
    base tree): an account appears there with the layer that made it, and so do its files.
    Returns {"users": {name: (old, new)}, "groups": {...}}."""
    passwd, group = os.path.join(tree, "etc/passwd"), os.path.join(tree, "etc/group")
    users = _rows(passwd) if os.path.isfile(passwd) and not os.path.islink(passwd) else []
    groups = _rows(group) if os.path.isfile(group) and not os.path.islink(group) else []
    used_u = {int(r[2]) for r in users if len(r) > 2 and r[2].isdigit()}
    used_g = {int(r[2]) for r in groups if len(r) > 2 and r[2].isdigit()}
    taken = used_u | used_g  # a user and its group of the same name get the same number
    chosen: dict[str, int] = {}

    def pick(name: str, used: set[int]) -> int:
        for n in (chosen.get(name), FIXED.get(name)):
            if n is not None and n not in used:
                break
        else:
            n = next(x for x in range(SERVICE_IDS.start + 100, SERVICE_IDS.stop) if x not in taken)
        taken.add(n)
        used.add(n)
        chosen[name] = n
        return n

    gmap: dict[int, int] = {}
    moved_g: dict[str, tuple[int, int]] = {}
    for r in groups:
        if len(r) > 2 and r[2].isdigit() and int(r[2]) in DYNAMIC and r[0] not in STATIC_GROUPS:
            old = int(r[2])
            gmap[old] = new = pick(r[0], used_g)
            moved_g[r[0]] = (old, new)
            r[2] = str(new)
    umap: dict[int, int] = {}
    moved_u: dict[str, tuple[int, int]] = {}
    for r in users:
        if len(r) > 3 and r[2].isdigit() and int(r[2]) in DYNAMIC:
            old = int(r[2])
            umap[old] = new = pick(r[0], used_u)
            moved_u[r[0]] = (old, new)
            r[2] = str(new)
        if len(r) > 3 and r[3].isdigit() and int(r[3]) in gmap:
            r[3] = str(gmap[int(r[3])])
    if moved_u:
        _write_rows(passwd, users)
    if moved_g:
        _write_rows(group, groups)
    if umap or gmap:
        _chown_tree(tree, umap, gmap)
    return {"users": moved_u, "groups": moved_g}


def _chown_tree(tree: str, umap: dict[int, int], gmap: dict[int, int]) -> None:
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            uid, gid = umap.get(st.st_uid, -1), gmap.get(st.st_gid, -1)
            if uid == -1 and gid == -1:
                continue
            os.lchown(p, uid, gid)
            if not stat.S_ISLNK(st.st_mode):  # chown clears setuid and setgid bits: keep the mode
                os.chmod(p, stat.S_IMODE(st.st_mode))


def image_accounts(lowerdirs: list[str]) -> list[tuple[str, int, int]]:
    """(name, uid, gid) of every account in an image's /etc/passwd (LOWERDIRS topmost first)."""
    for d in lowerdirs:
        p = os.path.join(d, "etc/passwd")
        if os.path.lexists(p):
            return [(r[0], int(r[2]), int(r[3])) for r in _rows(p) if len(r) > 3 and r[2].isdigit() and r[3].isdigit()]
    return []


def host_ids() -> tuple[dict[int, str], dict[int, str]]:
    """{uid: who} and {gid: who} of this machine: its accounts and groups, the owners of its
    running processes (those in this PID namespace: a lab's nodes have their own)."""
    uids: dict[int, str] = {}
    gids: dict[int, str] = {}
    for path, out in (("/etc/passwd", uids), ("/etc/group", gids)):
        try:
            for r in _rows(path):
                if len(r) > 2 and r[2].isdigit():
                    out.setdefault(int(r[2]), f"{os.path.basename(path)} entry {r[0]!r}")
        except OSError:
            pass
    try:
        own = os.readlink("/proc/self/ns/pid")
    except OSError:
        own = None
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):
        try:
            if own and os.readlink(f"/proc/{pid}/ns/pid") != own:
                continue  # a lab node's process (its numbers are ctk's), or a container's
            with open(f"/proc/{pid}/status") as f:
                for ln in f:
                    if ln.startswith(("Uid:", "Gid:")):
                        target = uids if ln.startswith("Uid:") else gids
                        for n in ln.split()[1:]:
                            target.setdefault(int(n), f"a process (pid {pid})")
        except OSError:
            continue
    return uids, gids
