"""Run a command inside a running node, as the node's own processes run: in its namespaces, its
root, with caps.NODE and no_new_privs, as root or as one of the node's users.

nsenter would join the namespaces but run the node's binary with every capability of the host's
root, and anything in the node (its root can replace /usr/bin/squeue) would then have them. Here
the capabilities go before anything of the node runs: this process joins the namespaces (which
needs CAP_SYS_ADMIN), confines itself, forks (a PID namespace takes its children) and the child
execs the command. Users are read from the node's /etc/passwd and /etc/group as text, never
through NSS (which would load the node's libraries into this process).

    python -m ctk.sandbox.enter PID [--user NAME] [--cwd DIR] [--umask OCT] [--env K=V]... -- CMD...
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

# os.execvpe looks the program up on PATH with os.get_exec_path, which imports warnings when
# first called: by then this process has joined the node's mount namespace, where the host's
# standard library is not, so the import would fail there. Imported here, before entering.
import warnings  # noqa: F401

from . import caps

NAMESPACES = (("net", 0x40000000), ("uts", 0x4000000), ("ipc", 0x8000000), ("pid", 0x20000000),
              ("mnt", 0x20000))  # mnt last: it changes our root, and the /proc we read
PR_SET_DUMPABLE = 4
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_libc = ctypes.CDLL(None, use_errno=True)


class EnterError(Exception):
    """The command could not be started in the node (exit 125, as env and nsenter do)."""


def _account(user: str) -> tuple[int, int, list[int], str]:
    """(uid, gid, supplementary gids, home) of USER in the node's own files."""
    try:
        with open("/etc/passwd") as f:
            row = next((ln.rstrip("\n").split(":") for ln in f if ln.split(":", 1)[0] == user), None)
    except OSError as e:
        raise EnterError(f"cannot read the node's /etc/passwd: {e.strerror}") from None
    if row is None or len(row) < 6:
        raise EnterError(f"no user {user!r} in the node (the lab's user is the one its blueprint's "
                         "ctk/target/local module names, researcher unless set; root is always there)")
    uid, gid = int(row[2]), int(row[3])
    groups = [gid]
    try:
        with open("/etc/group") as f:
            for ln in f:
                g = ln.rstrip("\n").split(":")
                if len(g) >= 4 and user in g[3].split(","):
                    groups.append(int(g[2]))
    except (OSError, ValueError):
        pass
    return uid, gid, sorted(set(groups)), row[5]


def enter(pid: int, argv: list[str], *, user: str = "root", cwd: str | None = None,
          env: dict[str, str] | None = None, umask: int | None = None) -> int:
    """Run ARGV in node PID's namespaces (see the module's doc); its exit status."""
    fds = []
    try:
        for name, _ in NAMESPACES:
            fds.append(os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC))
    except OSError as e:
        raise EnterError(f"node process {pid} is gone ({e.strerror})") from None
    for fd, (name, flag) in zip(fds, NAMESPACES):
        if _libc.setns(fd, flag) != 0:
            errnum = ctypes.get_errno()
            raise EnterError(f"cannot join the node's {name} namespace: {os.strerror(errnum)} (ctk needs root)")
        os.close(fd)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    caps.confine(caps.NODE)
    ids = _account(user) if user != "root" else (0, 0, [0], "/root")
    full_env = {"PATH": NODE_PATH, "HOME": ids[3], "LANG": "C.UTF-8", "USER": user, "LOGNAME": user,
                **(env or {})}
    r, w = os.pipe()  # the child's exec error, if any, comes back through it
    child = os.fork()
    if child == 0:
        os.close(r)
        try:
            if umask is not None:
                os.umask(umask)
            os.setgroups(ids[2])
            os.setgid(ids[1])
            os.setuid(ids[0])
            wd = cwd or ids[3]
            try:
                os.chdir(wd)
            except OSError as e:
                raise EnterError(f"cannot enter {wd} in the node as {user}: {e.strerror}") from None
            os.set_inheritable(w, False)
            os.execvpe(argv[0], argv, full_env)
        except EnterError as e:
            os.write(w, str(e).encode())
        except OSError as e:
            os.write(w, f"{argv[0]}: {e.strerror} (in the node, as {user})".encode())
        os._exit(125)
    os.close(w)

    def forward(signum, frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, forward)
    with os.fdopen(r, "rb") as f:
        err = f.read().decode(errors="replace")
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if err:
        raise EnterError(err)
    return os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status)


def main(args: list[str]) -> int:
    user, cwd, umask, env = "root", None, None, {}
    try:
        pid = int(args.pop(0))
        while args and args[0] != "--":
            opt, val = args.pop(0), args.pop(0)
            if opt == "--user":
                user = val
            elif opt == "--cwd":
                cwd = val
            elif opt == "--umask":
                umask = int(val, 8)
            elif opt == "--env":
                k, _, v = val.partition("=")
                env[k] = v
            else:
                raise ValueError(opt)
        argv = args[1:]
        if not argv:
            raise ValueError("no command")
    except (IndexError, ValueError) as e:
        sys.stderr.write(f"usage: python -m ctk.sandbox.enter PID [--user U] [--cwd D] [--umask M] [--env K=V]... -- CMD... ({e})\n")
        return 125
    try:
        return enter(pid, argv, user=user, cwd=cwd, env=env, umask=umask)
    except EnterError as e:
        sys.stderr.write(f"{e}\n")
        return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
