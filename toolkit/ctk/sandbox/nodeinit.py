"""A lab node's init: sets up the node's filesystem inside fresh namespaces, pivots into it,
starts its services, reaps children, and stops everything on SIGTERM.

Run by node.boot() as `python3 -m ctk.sandbox.nodeinit SPEC` (inside the node's network
namespace). It is two processes:

- the monitor (this process) stays on the host: it forks the node's PID 1 into a new PID
  namespace and writes what PID 1 reports through a pipe (services.json, the pid file) into the
  node's state folder. Nothing in the node can see it or reach the host's files through it.
- PID 1 unshares the mount, UTS and IPC namespaces, mounts the node's tree (overlay of the
  image's layers, a fresh /proc with /proc/sys read-only, a /dev of its own with only the
  harmless devices, a read-only /sys, tmpfs /run and /tmp, the lab's shared folders), then
  pivot_roots into it and detaches the host's root: from here on no path in the node names a
  host file. It then confines itself (caps.confine: the bounding set, no_new_privs) before it
  starts any service, so every process of the node, root included, has only caps.NODE.

Everything mounted lives in the node's mount namespace: when PID 1 ends, the kernel tears it
down with it, and every process of the node dies with it.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import socket
import stat
import subprocess
import sys
import time
import traceback  # noqa: F401 - loaded before the pivot: an error report must not need the host's files

from . import caps

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWTIME = 0x20000, 0x4000000, 0x8000000, 0x20000000, 0x80
MNT_DETACH = 2
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}

_libc = ctypes.CDLL(None, use_errno=True)


def _sys(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def _log(msg: str) -> None:
    print(f"[nodeinit {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fresh_boot_time() -> bool:
    """Put this node's processes in a time namespace of their own whose boot clock starts now:
    their uptime counts from the node's boot, not the host's. Slurm needs it of a node it
    powered up: slurmctld takes a registration whose boot time (now - uptime) is older than
    the resume request for a node that has not booted yet. False where the kernel has no time
    namespaces (the node then shares the host's uptime)."""
    try:
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
    except OSError:
        return False
    if _libc.unshare(CLONE_NEWTIME) != 0:
        return False
    secs = int(up) + 1  # the offset's nanoseconds are positive: -(up) = -(secs) + (secs - up)
    nsec = int((secs - up) * 1e9)
    try:
        with open("/proc/self/timens_offsets", "w") as f:
            f.write(f"boottime {-secs} {min(nsec, 999_999_999)}\n")
    except OSError:
        return False
    return True


def in_tree(root: str, rel: str, kind: str = "") -> str:
    """ROOT/REL, refusing a symlink on the way: the node's own earlier boots wrote its tree
    (its upper dir persists), and what ctk mounts or writes there before the pivot is resolved
    against the host's root. KIND "dir" or "file" creates what is missing."""
    path = root
    parts = [p for p in rel.strip("/").split("/") if p]
    for i, part in enumerate(parts):
        if part in (".", ".."):
            raise OSError(f"{rel}: no '.' or '..' in a node path")
        path = os.path.join(path, part)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            last = i == len(parts) - 1
            if not kind:
                raise
            if last and kind == "file":
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
            else:
                os.mkdir(path, 0o755)
            continue
        if stat.S_ISLNK(st.st_mode):
            raise OSError(f"the node's tree has a symlink at /{os.path.relpath(path, root)}, where ctk "
                          f"mounts or writes /{rel.strip('/')}: refusing to follow it")
    return path


DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"}
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
PROC_MASKED = ("kcore", "kallsyms", "keys", "timer_list", "sched_debug", "kmsg")
TTY_GID = 5  # Debian's static tty group


def _proc(root: str) -> None:
    """A proc of the node's PID namespace, with what would change the host read-only (sysctls,
    sysrq) and what shows the host's kernel memory or keys masked."""
    proc = in_tree(root, "proc", "dir")
    _mount("-t", "proc", "-o", "nosuid,nodev,noexec", "proc", proc)
    for name in PROC_READ_ONLY:
        p = os.path.join(proc, name)
        if os.path.exists(p):
            _mount("--bind", p, p)
            _mount("-o", "remount,bind,ro,nosuid,nodev,noexec", p)
    for name in PROC_MASKED:
        p = os.path.join(proc, name)
        if os.path.isfile(p):
            _mount("--bind", os.path.join(root, "dev", "null"), p)


def _dev(root: str) -> None:
    """A /dev of the node's own: null, zero, full, random, urandom, tty, its own ptys and
    /dev/shm; no disk, no kernel log, nothing of the host's."""
    dev = in_tree(root, "dev", "dir")
    _mount("-t", "tmpfs", "-o", "mode=755,nosuid,size=1m", "tmpfs", dev)
    for name, (major, minor) in DEVICES.items():
        p = os.path.join(dev, name)
        os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(p, 0o666)
    for name, target in DEV_LINKS.items():
        os.symlink(target, os.path.join(dev, name))
    for d in ("pts", "shm"):
        os.mkdir(os.path.join(dev, d), 0o755)
    _mount("-t", "devpts", "-o", f"newinstance,ptmxmode=0666,mode=0620,gid={TTY_GID},nosuid,noexec", "devpts",
           os.path.join(dev, "pts"))
    _mount("-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs", os.path.join(dev, "shm"))


def _mounts_under(path: str) -> list[str]:
    """Mount points at or below PATH in this mount namespace, outermost first."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].encode().decode("unicode_escape")
            if mp == path or mp.startswith(path + "/"):
                out.append(mp)
    return sorted(out, key=len)


def _sys_fs(root: str) -> None:
    """sysfs read-only (the node's network namespace's view), and the host's cgroup hierarchy,
    which slurmd reads, read-only under it."""
    sysd = in_tree(root, "sys", "dir")
    _mount("-t", "sysfs", "-o", "ro,nosuid,nodev,noexec", "sysfs", sysd)
    cg = os.path.join(sysd, "fs", "cgroup")
    if os.path.isdir("/sys/fs/cgroup") and os.path.isdir(cg):
        _mount("--rbind", "/sys/fs/cgroup", cg)
        for mp in _mounts_under(cg):
            _mount("-o", "remount,bind,ro,nosuid,nodev,noexec", mp)


def _ids(root: str, owner: str) -> tuple[int, int]:
    """uid/gid of a user as the image's own /etc/passwd defines it (parsed here: NSS would
    load the image's libraries into this process)."""
    user = owner.split(":")[0]
    with open(in_tree(root, "etc/passwd")) as f:
        for line in f:
            parts = line.rstrip("\n").split(":")
            if parts[0] == user and len(parts) >= 4:
                return int(parts[2]), int(parts[3])
    raise KeyError(f"user {user} not in the image")


def add_accounts(root: str, accounts: list[dict]) -> None:
    """The lab's user accounts in the node's /etc/passwd, group and shadow (same uid on every
    node), replacing an entry of the same name or uid; their homes are the lab's to make."""
    if not accounts:
        return
    files = {n: in_tree(root, f"etc/{n}") for n in ("passwd", "group", "shadow")}
    names = {a["name"] for a in accounts}
    uids = {str(a["uid"]) for a in accounts}
    gids = {str(a.get("gid", a["uid"])) for a in accounts}
    for name, path in files.items():
        with open(path) as f:
            lines = f.read().splitlines()
        keep = []
        for ln in lines:
            parts = ln.split(":")
            if parts[0] in names or (name == "passwd" and len(parts) > 2 and parts[2] in uids) or (
                    name == "group" and len(parts) > 2 and parts[2] in gids):
                continue
            keep.append(ln)
        for a in accounts:
            gid = a.get("gid", a["uid"])
            keep.append({"passwd": f"{a['name']}:x:{a['uid']}:{gid}::{a['home']}:{a.get('shell', '/bin/bash')}",
                         "group": f"{a['name']}:x:{gid}:",
                         "shadow": f"{a['name']}:*:19000:0:99999:7:::"}[name])  # '*': no password, not locked
        st = os.lstat(path)
        tmp = path + ".ctk-new"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, st.st_mode & 0o7777)
        with os.fdopen(fd, "w") as f:
            os.fchown(f.fileno(), st.st_uid, st.st_gid)  # shadow stays root:shadow 0640
            os.fchmod(f.fileno(), st.st_mode & 0o7777)
            f.write("\n".join(keep) + "\n")
        os.replace(tmp, path)


def setup(spec: dict) -> None:
    """The node's tree, mounted and filled; PID 1 is pivoted into it at the end."""
    root = spec["root"]
    _mount("--make-rprivate", "/")
    lower = ":".join(spec["lowerdirs"])
    os.makedirs(spec["upper"], exist_ok=True)
    os.makedirs(spec["work"], exist_ok=True)
    os.makedirs(root, exist_ok=True)
    # Renames and metadata-only copy-ups written the plain way, whatever the kernel's defaults:
    # an upper dir is then one ctk can fold into a layer (ctk.images.overlay).
    _mount("-t", "overlay", "overlay", "-o",
           f"lowerdir={lower},upperdir={spec['upper']},workdir={spec['work']},redirect_dir=off,metacopy=off", root)
    _dev(root)
    _proc(root)
    _sys_fs(root)
    _mount("-t", "tmpfs", "-o", "mode=755,nosuid,nodev", "tmpfs", in_tree(root, "run", "dir"))
    _mount("-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs", in_tree(root, "tmp", "dir"))
    for b in spec.get("binds", []):
        dest = in_tree(root, b["dest"], "dir" if os.path.isdir(b["src"]) else "file")
        _mount("--bind", b["src"], dest)
        _mount("-o", "remount,bind,nosuid,nodev" + (",ro" if b.get("ro") else ""), dest)
    for o in spec.get("overlays", []):  # read-only: no upper dir, nothing of the node's written there
        dest = in_tree(root, o["dest"], "dir")
        if len(o["lowerdirs"]) > 1:
            _mount("-t", "overlay", "overlay", "-o", f"ro,nosuid,nodev,lowerdir={':'.join(o['lowerdirs'])}", dest)
        else:
            _mount("--bind", o["lowerdirs"][0], dest)
            _mount("-o", "remount,bind,ro,nosuid,nodev", dest)
    for rel, f in spec.get("run_files", {}).items():  # secrets and runtime files: tmpfs only
        dest = os.path.join(root, "run", rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(f["src"], "rb") as src:
            data = src.read()
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, int(f.get("mode", "0600"), 8))
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        if f.get("owner"):
            os.chown(dest, *_ids(root, f["owner"]))
    for d in spec.get("run_dirs", []):
        path = os.path.join(root, "run", d["path"])
        os.makedirs(path, exist_ok=True)
        os.chmod(path, int(d.get("mode", "0755"), 8))
        if d.get("owner"):
            os.chown(path, *_ids(root, d["owner"]))
    add_accounts(root, spec.get("accounts", []))
    subprocess.run(["hostname", spec["hostname"]], check=True)
    hn = in_tree(root, "etc/hostname", "file")  # the node's own name, as a VM's /etc/hostname has it
    fd = os.open(hn, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
    with os.fdopen(fd, "w") as f:
        f.write(spec["hostname"] + "\n")
    pivot(root)


def pivot(root: str) -> None:
    """Make ROOT this mount namespace's root and detach the host's: nothing in the node, root
    included, can name a host path again (no chroot to climb out of)."""
    nr = _PIVOT_ROOT.get(platform.machine())
    if nr is None:
        raise OSError(f"no pivot_root system call number known for {platform.machine()}")
    os.chdir(root)
    _sys(_libc.syscall(nr, b".", b"."), "pivot_root")
    _sys(_libc.umount2(b".", MNT_DETACH), "detaching the host's root")
    os.chdir("/")


def start(svc: dict, log: int) -> subprocess.Popen:
    """Start a service (in the node: the pivot is done) as its user, its output to LOG."""
    ids = _ids("/", svc["user"]) if svc.get("user") else None

    def enter():
        os.chdir("/")
        if ids:  # drop to the service's user, as its own init script would
            os.setgroups([])
            os.setgid(ids[1])
            os.setuid(ids[0])

    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
           "LANG": "C.UTF-8", **svc.get("env", {})}
    _log(f"starting {svc['name']}: {' '.join(svc['argv'])}")
    return subprocess.Popen(svc["argv"], preexec_fn=enter, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env)


def _serves(ready: str) -> bool:
    """Whether a service's ready check passes: its path exists in the node, or its tcp:ADDR:PORT
    takes a connection (this process is in the node's network namespace)."""
    if ready.startswith("tcp:"):
        addr, port = ready[4:].rsplit(":", 1)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a numeric address: no resolver
            s.settimeout(1)
            try:
                s.connect((addr, int(port)))
                return True
            except OSError:
                return False
    return os.path.exists(ready)


def wait_ready(svc: dict, proc: subprocess.Popen) -> None:
    """Until the service passes its ready check (or has exited, or its ready_timeout passed)."""
    timeout = float(svc.get("ready_timeout", 30))
    deadline = time.monotonic() + timeout
    while not _serves(svc["ready"]) and proc.poll() is None:
        if time.monotonic() > deadline:
            _log(f"{svc['name']}: no {svc['ready']} after {timeout:.0f} s; starting the rest")
            return
        time.sleep(0.05)


def node_main(spec: dict, logs: dict[str, int], report) -> int:
    """PID 1 of the node. REPORT(dict) sends a status line to the monitor."""
    stopping = False

    def on_term(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        _sys(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC), "unshare")
        if not fresh_boot_time():
            _log("no time namespace: the node's uptime is the host's")
        setup(spec)
        # The node's capabilities, for good, before any service starts. PID 1 holds no host
        # folder open (its logs and its pipe to the monitor are files): a node process that
        # reads /proc/1 finds nothing of the host there, and /proc/1/root is the node's root.
        caps.confine(spec.get("caps") or caps.NODE)
    except Exception as e:  # noqa: BLE001 - reported through the log and the exit code
        _log(f"setup failed: {e}")
        return 1
    procs: dict[int, dict] = {}
    status: dict[str, dict] = {}
    for svc in spec.get("services", []):
        try:
            proc = start(svc, logs[svc["name"]])
            procs[proc.pid] = svc
            status[svc["name"]] = {"running": True}
            if svc.get("ready"):
                wait_ready(svc, proc)
        except OSError as e:
            _log(f"cannot start {svc['name']}: {e}")
            status[svc["name"]] = {"running": False, "error": str(e)}
    for fd in logs.values():
        os.close(fd)
    report({"services": status, "ready": True})
    while not stopping:
        try:
            pid, wstatus = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pid = 0
        if pid and pid in procs:
            name = procs.pop(pid)["name"]
            code = os.waitstatus_to_exitcode(wstatus)
            _log(f"{name} exited with status {code}")
            status[name] = {"running": False, "exit": code}
            report({"services": status})
        if not pid:
            time.sleep(0.2)
    _log("stopping")
    for pid in list(procs):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    # Everything else in the node too (an sshd session, a job step, a shell from ctk exec):
    # as PID 1 of the namespace, kill(-1) reaches every process in it but ourselves.
    try:
        os.kill(-1, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + float(spec.get("stop_timeout", 10))
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                time.sleep(0.1)
        except ChildProcessError:
            break
    # Whatever is left dies with PID 1 (the kernel kills the namespace's processes).
    return 0


def _write(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main(path: str) -> int:
    """The monitor: fork PID 1 into a new PID namespace, record what it reports, end with it."""
    with open(path) as f:
        spec = json.load(f)
    state_dir = os.path.dirname(spec["ready_file"])
    # From here the node exists: the monitor's pid says so (node.node_alive) until PID 1 reports
    # ready and its pid is written, so that a deploy killed meanwhile and run again neither
    # boots a second node nor loses this one. A SIGTERM before PID 1 exists waits (blocked)
    # until it can be forwarded.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    monitor_file = os.path.join(state_dir, "monitor.pid")
    _write(monitor_file, str(os.getpid()))
    # Services' logs, opened on the host before the pivot; PID 1 hands each to its service.
    logs = {s["name"]: os.open(os.path.join(spec["logdir"], f"{s['name']}.log"),
                               os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
            for s in spec.get("services", [])}
    _sys(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    rfd, wfd = os.pipe()
    child = os.fork()
    if child == 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        os.close(rfd)
        out = os.fdopen(wfd, "w")

        def report(msg: dict) -> None:
            try:
                out.write(json.dumps(msg) + "\n")
                out.flush()
            except OSError:
                pass  # the monitor is gone: the node runs on

        code = 1
        try:
            code = node_main(spec, logs, report)
        finally:
            os._exit(code)
    os.close(wfd)
    for fd in logs.values():
        os.close(fd)

    def forward(signum, frame):
        try:
            os.kill(child, signal.SIGTERM)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})  # a pending one goes to PID 1 now
    with os.fdopen(rfd) as pipe:
        for line in pipe:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "services" in msg:  # which services are alive, for ctk status and re-deploy
                _write(os.path.join(state_dir, "services.json"), json.dumps(msg["services"]))
            if msg.get("ready"):  # PID 1's pid as the host sees it: ctk signals and enters it
                _write(spec["ready_file"], str(child))
    try:
        while True:
            try:
                _, wstatus = os.waitpid(child, 0)
                return os.waitstatus_to_exitcode(wstatus)
            except ChildProcessError:
                return 0
            except InterruptedError:
                continue
    finally:
        try:
            os.unlink(monitor_file)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
