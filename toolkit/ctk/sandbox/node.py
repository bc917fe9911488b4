"""Lab nodes: a Slurm node (or an image build node) booted from image layers on this machine.

A node is an overlayfs (the image's layers read-only, a per-node upper dir) that its PID 1
pivots into, its own mount, UTS, IPC and PID namespaces, its own /dev, read-only /sys and
/proc/sys, tmpfs on /run and /tmp, only the capabilities of caps.NODE, and its own address: a lab
node has its own network namespace (netns.py), a build node a loopback address. Its PID 1 is
ctk's nodeinit, which outlives the ctk command that booted it (see nodeinit.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field, fields

from ..waiting import TimedOut, poll
from . import DaemonError
from .caps import NODE as NODE_CAPS
from .proc import ctk_env, running_pid, terminate


@dataclass
class Service:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""  # run as this user of the image (default: root)
    # What shows the service serves: a path in the node (a socket it makes) or "tcp:ADDR:PORT"
    # (a port it listens on, in the node's network). The services after it start only then,
    # or after READY_TIMEOUT seconds (munged's socket before slurmctld, which fails without it).
    ready: str = ""
    ready_timeout: float = 30.0


@dataclass
class NodeSpec:
    hostname: str
    state_dir: str  # holds upper/, work/, root/ (the mount point), log/, spec.json, pid
    lowerdirs: list[str]  # image layers, topmost first
    services: list[Service] = field(default_factory=list)
    binds: list[dict] = field(default_factory=list)  # {src, dest, ro}
    # Read-only trees of image layers in the node (a container image's rootfs): {dest, lowerdirs}.
    overlays: list[dict] = field(default_factory=list)
    run_files: dict[str, dict] = field(default_factory=dict)  # path under /run -> {src, mode, owner}
    run_dirs: list[dict] = field(default_factory=list)  # {path (under /run), mode, owner}
    stop_timeout: float = 10.0
    netns: str = ""  # path of a network namespace to boot in (netns.create); "" = the host's
    # Accounts added to the node's /etc/passwd at boot: {name, uid, gid, home, shell}.
    accounts: list[dict] = field(default_factory=list)
    caps: list[str] = field(default_factory=lambda: list(NODE_CAPS))  # what the node's root keeps

    @classmethod
    def from_dict(cls, d: dict) -> NodeSpec:
        """The spec asdict() made (a lab's agent boots nodes from their recorded specs)."""
        return cls(**{**d, "services": [Service(**x) for x in d.get("services", [])]})

    @property
    def upper(self) -> str:
        return os.path.join(self.state_dir, "upper")

    @property
    def root(self) -> str:
        return os.path.join(self.state_dir, "root")

    @property
    def logdir(self) -> str:
        return os.path.join(self.state_dir, "log")


UPPER_LAYERS = "upper-layers.json"  # in a node's state dir: the layers its upper dir was written on


def _pid_file(state_dir: str) -> str:
    return os.path.join(state_dir, "pid")


def boot_started(state_dir: str) -> float | None:
    """When the node's last boot began (its spec.json is written just before its init starts,
    so before any of its services), as epoch seconds; None if it never booted. Its pid file is
    written only once the services have been launched."""
    try:
        return os.stat(os.path.join(state_dir, "spec.json")).st_mtime
    except OSError:
        return None


def node_pid(state_dir: str) -> int | None:
    """Host pid of the node's PID 1 if the node is running, else None."""
    return running_pid(_pid_file(state_dir), "ctk.sandbox.nodeinit")


def _monitor_pid(state_dir: str) -> int | None:
    """The pid of the node's monitor (nodeinit on the host) while it runs, booting or not."""
    pid = running_pid(os.path.join(state_dir, "monitor.pid"), "ctk.sandbox.nodeinit")
    if pid is None:
        return None
    try:  # this node's, not another's that got a recycled pid
        spec = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[-2:]
    except OSError:
        return None
    return pid if os.path.join(state_dir, "spec.json").encode() in spec else None


def node_alive(state_dir: str) -> int | None:
    """A host pid of the node's process tree if it exists, up or still booting (PID 1's once it
    is up, else its monitor's), else None: what decides whether a node must be booted or
    stopped, where node_pid (up only) decides whether it can be entered."""
    return node_pid(state_dir) or _monitor_pid(state_dir)


def service_states(state_dir: str) -> dict[str, dict]:
    """{service: {"running": bool, "exit": code, "error": why it did not start}} of a node, as
    its PID 1 last reported; {} before it reported."""
    try:
        with open(os.path.join(state_dir, "services.json")) as f:
            states = json.load(f)
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in states.items() if isinstance(v, dict)} if isinstance(states, dict) else {}


def dead_services(state_dir: str) -> list[str]:
    """Services of a running node that have exited (a killed slurmd, a crashed munged)."""
    try:
        with open(os.path.join(state_dir, "services.json")) as f:
            return sorted(k for k, v in json.load(f).items() if not v.get("running"))
    except (OSError, ValueError):
        return []


def booted_spec(state_dir: str) -> NodeSpec | None:
    """The spec the node was last booted with (its spec.json), or None if it never booted."""
    try:
        with open(os.path.join(state_dir, "spec.json")) as f:
            d = json.load(f)
        names = {f.name for f in fields(NodeSpec)}
        return NodeSpec.from_dict({k: v for k, v in d.items() if k in names})
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def booted_layers(state_dir: str) -> list[str] | None:
    """The image layers (overlay lowerdirs) the node last booted, or None if it never booted."""
    try:
        with open(os.path.join(state_dir, "spec.json")) as f:
            layers = json.load(f).get("lowerdirs")
    except (OSError, ValueError, AttributeError):
        return None
    return layers if isinstance(layers, list) else None


def fresh_tree_for(spec: NodeSpec) -> None:
    """Where the node's own tree (its overlay's upper and work dirs) was written on top of other
    image layers than SPEC's, drop it: a node that boots another image starts from that image,
    as a machine reimaged with it does. What is written there on top of one image's files would
    hide the other's (an /etc/passwd written at boot hides the new image's accounts). What must
    outlive a reboot is not there: homes, Slurm's state and the accounting database are the
    lab's shared folders, bound into the node. UPPER_LAYERS records the layers, before the node
    writes anything (a node whose boot failed has written on them too)."""
    record = os.path.join(spec.state_dir, UPPER_LAYERS)
    try:
        with open(record) as f:
            was = json.load(f)
    except (OSError, ValueError):
        was = booted_layers(spec.state_dir)  # a node an earlier ctk booted: its last spec's
    if was is not None and was != spec.lowerdirs:
        for d in ("upper", "work"):
            shutil.rmtree(os.path.join(spec.state_dir, d), ignore_errors=True)
    with open(record + ".tmp", "w") as f:
        json.dump(spec.lowerdirs, f)
    os.replace(record + ".tmp", record)


def boot(spec: NodeSpec, timeout: float = 30.0) -> int:
    """Start the node in the background and wait until its services have been launched (each
    one that names a ready check once it passed, or its ready_timeout)."""
    timeout += sum(s.ready_timeout for s in spec.services if s.ready)
    if node_alive(spec.state_dir):
        raise DaemonError(f"node {spec.hostname} is already running (or booting)",
                          hint="stop it first (nodes.stop)")
    for d in (spec.state_dir, spec.logdir):
        os.makedirs(d, exist_ok=True)
    pid_file = _pid_file(spec.state_dir)
    for stale in (pid_file, os.path.join(spec.state_dir, "services.json")):
        if os.path.exists(stale):
            os.unlink(stale)
    record = asdict(spec)
    record.update(root=spec.root, upper=spec.upper, work=os.path.join(spec.state_dir, "work"),
                  logdir=spec.logdir, ready_file=pid_file)
    spec_path = os.path.join(spec.state_dir, "spec.json")
    fresh_tree_for(spec)
    with open(spec_path, "w") as f:
        json.dump(record, f, indent=1)
    init_log = open(os.path.join(spec.logdir, "nodeinit.log"), "ab")
    env = ctk_env()
    enter_net = ["nsenter", f"--net={spec.netns}"] if spec.netns else []
    proc = subprocess.Popen(
        [*enter_net, sys.executable, "-m", "ctk.sandbox.nodeinit", spec_path],
        stdin=subprocess.DEVNULL, stdout=init_log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    def booted_or_exited() -> bool:  # up once nodeinit has written its pid
        return node_pid(spec.state_dir) is not None or proc.poll() is not None

    try:
        poll(booted_or_exited, timeout, 0.05)
    except TimedOut:
        pass
    pid = node_pid(spec.state_dir)
    if pid:
        return pid
    tail = _tail(os.path.join(spec.logdir, "nodeinit.log"))
    if proc.poll() is None:
        proc.kill()
    raise DaemonError(f"node {spec.hostname} did not boot:\n{tail}")


def _tail(path: str, n: int = 20) -> str:
    try:
        return "\n".join(open(path, errors="replace").read().splitlines()[-n:])
    except OSError:
        return "(no log)"


def stop(state_dir: str, timeout: float = 15.0) -> bool:
    """Stop a node, up or still booting (SIGTERM to its PID 1, or to its monitor, which hands
    it on; SIGKILL after `timeout`); True if it was running."""
    pid = node_pid(state_dir)
    if pid:
        return terminate(pid, timeout)
    monitor = _monitor_pid(state_dir)
    if not monitor:
        return False
    terminate(monitor, timeout + 5)
    pid = node_pid(state_dir)  # it may have become ready meanwhile
    if pid:
        terminate(pid, timeout)
    return True


NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def enter_argv(pid: int | str, argv: list[str], *, user: str = "root", cwd: str | None = None,
               env: dict[str, str] | None = None, umask: str | None = None) -> list[str]:
    """The command line that runs ARGV in the node whose PID 1 is PID (sandbox/enter.py): its
    namespaces and root, the node's capabilities, as USER (root or one of the node's accounts),
    in CWD (a path in the node; default the user's home), with a clean environment plus ENV.
    It runs this ctk (not whatever a PYTHONPATH names) in Python's isolated mode."""
    pkg = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    opts = ["--user", user] + (["--cwd", cwd] if cwd else []) + (["--umask", umask] if umask else [])
    for k, v in (env or {}).items():
        opts += ["--env", f"{k}={v}"]
    return [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {pkg!r}); "
            "from ctk.sandbox.enter import main; sys.exit(main(sys.argv[1:]))", str(pid), *opts, "--", *argv]


def exec_argv(state_dir: str, argv: list[str], cwd: str | None = "/", env: dict[str, str] | None = None,
              user: str = "root", umask: str | None = None) -> list[str]:
    """The command line that runs `argv` inside a running node (see enter_argv)."""
    pid = node_pid(state_dir)
    if not pid:
        raise DaemonError(f"node at {state_dir} is not running")
    return enter_argv(pid, argv, user=user, cwd=cwd, env=env, umask=umask)


def run_in(state_dir: str, argv: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(exec_argv(state_dir, argv), capture_output=True, text=True, timeout=timeout, **kw)
