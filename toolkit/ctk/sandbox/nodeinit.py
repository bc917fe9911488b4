"""PID 1 of a lab node: sets up the node's filesystem inside fresh namespaces, starts its
services chrooted into the image, reaps children, and stops everything on SIGTERM.

Run by node.boot() as `unshare --mount --uts --pid --fork python3 -m ctk.sandbox.nodeinit SPEC`.
Everything mounted here lives in the node's own mount namespace, so when this process ends
the kernel tears the mounts down with it: a dead node leaves no mount behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def _log(msg: str) -> None:
    print(f"[nodeinit {time.strftime('%H:%M:%S')}] {msg}", flush=True)


CLONE_NEWTIME = 0x80


def fresh_boot_time() -> bool:
    """Put this node's processes in a time namespace of their own whose boot clock starts now:
    their uptime counts from the node's boot, not the host's. Slurm needs it of a node it
    powered up: slurmctld takes a registration whose boot time (now - uptime) is older than
    the resume request for a node that has not booted yet. False where the kernel has no time
    namespaces (the node then shares the host's uptime)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    try:
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
    except OSError:
        return False
    if libc.unshare(CLONE_NEWTIME) != 0:
        return False
    secs = int(up) + 1  # the offset's nanoseconds are positive: -(up) = -(secs) + (secs - up)
    nsec = int((secs - up) * 1e9)
    try:
        with open("/proc/self/timens_offsets", "w") as f:
            f.write(f"boottime {-secs} {min(nsec, 999_999_999)}\n")
    except OSError:
        return False
    return True


def setup(spec: dict) -> str:
    root = spec["root"]
    _mount("--make-rprivate", "/")
    lower = ":".join(spec["lowerdirs"])
    os.makedirs(spec["upper"], exist_ok=True)
    os.makedirs(spec["work"], exist_ok=True)
    os.makedirs(root, exist_ok=True)
    _mount("-t", "overlay", "overlay", "-o", f"lowerdir={lower},upperdir={spec['upper']},workdir={spec['work']}", root)
    for d in ("proc", "dev", "sys", "run", "tmp"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    _mount("-t", "proc", "proc", os.path.join(root, "proc"))
    _mount("--rbind", "/dev", os.path.join(root, "dev"))
    _mount("--rbind", "/sys", os.path.join(root, "sys"))
    _mount("-t", "tmpfs", "-o", "mode=755", "tmpfs", os.path.join(root, "run"))
    _mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", os.path.join(root, "tmp"))
    for b in spec.get("binds", []):
        dest = os.path.join(root, b["dest"].lstrip("/"))
        if os.path.isdir(b["src"]):
            os.makedirs(dest, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if not os.path.exists(dest):
                open(dest, "a").close()
        _mount("--bind", b["src"], dest)
        if b.get("ro"):
            _mount("-o", "remount,bind,ro", dest)
    for rel, f in spec.get("run_files", {}).items():  # secrets and runtime files: tmpfs only
        dest = os.path.join(root, "run", rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(f["src"], dest)
        os.chmod(dest, int(f.get("mode", "0600"), 8))
        if f.get("owner"):
            os.chown(dest, *_ids(root, f["owner"]))
    for d in spec.get("run_dirs", []):
        path = os.path.join(root, "run", d["path"])
        os.makedirs(path, exist_ok=True)
        os.chmod(path, int(d.get("mode", "0755"), 8))
        if d.get("owner"):
            os.chown(path, *_ids(root, d["owner"]))
    subprocess.run(["hostname", spec["hostname"]], check=True)
    return root


def _ids(root: str, owner: str) -> tuple[int, int]:
    """uid/gid of a user as the image's own /etc/passwd defines it."""
    user = owner.split(":")[0]
    with open(os.path.join(root, "etc/passwd")) as f:
        for line in f:
            parts = line.split(":")
            if parts[0] == user:
                return int(parts[2]), int(parts[3])
    raise KeyError(f"user {user} not in the image")


def start(root: str, svc: dict, logdir: str) -> subprocess.Popen:
    log = open(os.path.join(logdir, f"{svc['name']}.log"), "ab")

    ids = _ids(root, svc["user"]) if svc.get("user") else None

    def enter():
        os.chroot(root)
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


def _serves(root: str, ready: str) -> bool:
    """Whether a service's ready check passes: its path exists in the node, or its tcp:ADDR:PORT
    takes a connection (this process is in the node's network namespace)."""
    if ready.startswith("tcp:"):
        addr, port = ready[4:].rsplit(":", 1)
        try:
            socket.create_connection((addr, int(port)), timeout=1).close()
            return True
        except OSError:
            return False
    return os.path.exists(os.path.join(root, ready.lstrip("/")))


def wait_ready(root: str, svc: dict, proc: subprocess.Popen) -> None:
    """Until the service passes its ready check (or has exited, or its ready_timeout passed)."""
    timeout = float(svc.get("ready_timeout", 30))
    deadline = time.monotonic() + timeout
    while not _serves(root, svc["ready"]) and proc.poll() is None:
        if time.monotonic() > deadline:
            _log(f"{svc['name']}: no {svc['ready']} after {timeout:.0f} s; starting the rest")
            return
        time.sleep(0.05)


def _write_status(spec: dict, status: dict) -> None:
    """Which services are alive, for `ctk status` and for re-deploy to notice a dead daemon."""
    path = os.path.join(os.path.dirname(spec["ready_file"]), "services.json")
    with open(path + ".tmp", "w") as f:
        json.dump(status, f)
    os.replace(path + ".tmp", path)


def main(path: str) -> int:
    with open(path) as f:
        spec = json.load(f)
    stopping = False

    def on_term(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    if not fresh_boot_time():
        _log("no time namespace: the node's uptime is the host's")
    try:
        root = setup(spec)
    except Exception as e:  # noqa: BLE001 - reported through the log and the exit code
        _log(f"setup failed: {e}")
        return 1
    procs: dict[int, dict] = {}
    status: dict[str, dict] = {}
    for svc in spec.get("services", []):
        try:
            proc = start(root, svc, spec["logdir"])
            procs[proc.pid] = svc
            status[svc["name"]] = {"running": True}
            if svc.get("ready"):
                wait_ready(root, svc, proc)
        except OSError as e:
            _log(f"cannot start {svc['name']}: {e}")
            status[svc["name"]] = {"running": False, "error": str(e)}
    _write_status(spec, status)
    with open(spec["ready_file"] + ".tmp", "w") as f:
        # Our pid as the host sees it (the host's /proc is still mounted at /proc here),
        # so that ctk can signal and nsenter this node.
        f.write(os.readlink("/proc/self"))
    os.replace(spec["ready_file"] + ".tmp", spec["ready_file"])
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
            _write_status(spec, status)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
