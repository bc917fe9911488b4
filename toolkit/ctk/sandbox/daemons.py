"""Start and stop munged, slurmctld and slurmd as child processes, and wait for them to answer.

Used by the integration tests and by the local target.  Every daemon runs in the
foreground as a direct child (no shell, no double fork), so stopping it is a signal to a
known pid.  Start functions return only once the daemon answers; if it does not, they
stop it and raise :class:`DaemonError` carrying the tail of its log.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import DaemonError
from .net import free_port as free_tcp_port
from .proc import terminate

__all__ = [
    "DaemonError",
    "Proc",
    "free_tcp_port",
    "start_munged",
    "start_slurmctld",
    "start_slurmd",
    "wait_for",
]

# A Unix socket path is limited to 108 bytes (sun_path) on Linux, NUL included.
_MAX_SOCKET_PATH = 107


@dataclass
class Proc:
    """A running daemon: its process, and the files to read when something goes wrong."""

    name: str
    popen: subprocess.Popen
    logs: list[Path] = field(default_factory=list)  # most useful first
    env: dict[str, str] = field(default_factory=dict)  # extra environment for its clients

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of each log file that exists, with a heading per file."""
        parts = []
        for path in self.logs:
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            tail = "\n".join(text.splitlines()[-lines:])
            parts.append(f"--- {path} (last {lines} lines) ---\n{tail}")
        return "\n".join(parts) if parts else f"(no log files found for {self.name})"

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL.  Returns the exit code."""
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGTERM)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
            except ProcessLookupError:
                pass
        return self.popen.returncode

    def __enter__(self) -> Proc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _which(program: str) -> str:
    found = shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise DaemonError(f"{program} not found on PATH (is the package installed?)")
    return found


def wait_for(
    cmd: Sequence[str],
    timeout: float,
    *,
    env: Mapping[str, str] | None = None,
    ok: Callable[[subprocess.CompletedProcess], bool] | None = None,
    proc: Proc | None = None,
    interval: float = 0.25,
) -> subprocess.CompletedProcess:
    """Run ``cmd`` until it succeeds or ``timeout`` seconds have passed.

    Success is exit status 0, and ``ok(result)`` if given.  ``env`` is added to the
    current environment.  If ``proc`` is given and exits meanwhile, give up at once.
    Raises DaemonError with the command's last output (and ``proc``'s log tail).
    """
    full_env = {**os.environ, **(env or {})}
    deadline = time.monotonic() + timeout
    last: subprocess.CompletedProcess | None = None
    last_exc: Exception | None = None
    while True:
        try:
            last = subprocess.run(
                list(cmd),
                env=full_env,
                capture_output=True,
                text=True,
                timeout=max(1.0, min(10.0, deadline - time.monotonic())),
            )
            last_exc = None
            if last.returncode == 0 and (ok is None or ok(last)):
                return last
        except (subprocess.TimeoutExpired, OSError) as e:
            last_exc = e
        if proc is not None and not proc.alive():
            reason = f"{proc.name} exited with status {proc.popen.returncode}"
            break
        if time.monotonic() >= deadline:
            reason = f"no success within {timeout:g}s"
            break
        time.sleep(interval)
    detail = [f"waiting for {' '.join(cmd)!s}: {reason}"]
    if last_exc is not None:
        detail.append(f"last attempt: {last_exc}")
    elif last is not None:
        detail.append(
            f"last attempt: exit {last.returncode}\nstdout: {last.stdout.strip()}\n"
            f"stderr: {last.stderr.strip()}"
        )
    if proc is not None:
        detail.append(proc.log_tail())
    raise DaemonError("\n".join(detail))


def _spawn(name: str, argv: list[str], out_path: Path, env: Mapping[str, str] | None) -> subprocess.Popen:
    out = open(out_path, "ab")
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            # Own session: a Ctrl-C meant for the caller does not hit the daemon first,
            # and the caller stays in charge of stopping it.
            start_new_session=True,
        )
    except OSError as e:
        raise DaemonError(f"cannot run {name} ({argv[0]}): {e}") from e
    finally:
        out.close()


def ensure_secret(path: str, make, mode: int = 0o400) -> str:
    """A secret file at `path` (MODE, its folder 0700) holding the bytes MAKE() returns, made
    once and never through a link (sandbox/secretfiles.py); never printed by ctk. A
    pre-existing one that another user owns or may read is refused (UserError)."""
    from . import secretfiles

    folder = os.path.dirname(os.path.abspath(path))
    return secretfiles.ensure(os.path.dirname(folder), os.path.join(os.path.basename(folder), os.path.basename(path)),
                              make, mode)


def ensure_munge_key(path: str) -> str:
    """A munge key at `path` (1024 random bytes; see ensure_secret); never read back by ctk."""
    return ensure_secret(path, lambda: os.urandom(1024))


def start_munged(
    directory: str | os.PathLike,
    *,
    key_file: str | os.PathLike | None = None,
    force: bool = False,
    timeout: float = 15.0,
) -> Proc:
    """Start a private munged whose files all live in ``directory``.

    Creates ``key/munge.key`` (1024 random bytes, mode 0400) unless ``key_file`` is given.
    The socket is ``<directory>/munge.sock``; pass it to Slurm as
    ``AuthInfo=socket=<path>``.  ``Proc.env`` has no entry: munge clients take the
    socket as ``--socket``.  ``force`` adds munged's --force (needed, for instance, when
    a parent directory is group-writable).  Returns once ``munge -n`` succeeds.
    """
    d = Path(directory).resolve()
    d.mkdir(parents=True, exist_ok=True)
    sock = d / "munge.sock"
    if len(str(sock)) > _MAX_SOCKET_PATH:
        raise DaemonError(
            f"munge socket path is too long for a Unix socket ({len(str(sock))} bytes): {sock}"
        )
    if key_file is None:
        key = Path(ensure_munge_key(str(d / "key" / "munge.key")))
    else:
        key = Path(key_file).resolve()
    log = d / "munged.log"
    out = d / "munged.out"
    argv = [
        _which("munged"),
        "--foreground",
        f"--key-file={key}",
        f"--socket={sock}",
        f"--pid-file={d / 'munged.pid'}",
        f"--seed-file={d / 'munged.seed'}",
        f"--log-file={log}",
    ]
    if force:
        argv.append("--force")
    proc = Proc("munged", _spawn("munged", argv, out, None), logs=[out, log])
    try:
        wait_for([_which("munge"), "-n", f"--socket={sock}"], timeout, proc=proc)
    except DaemonError as e:
        proc.stop()
        raise DaemonError(f"munged did not start (socket {sock}):\n{e}") from None
    return proc


def munged_pid(directory: str | os.PathLike) -> int | None:
    """The pid of the munged that start_munged(DIRECTORY) started, if it still runs."""
    try:
        pid = int(open(os.path.join(directory, "munged.pid")).read())
        return pid if b"munged" in open(f"/proc/{pid}/cmdline", "rb").read() else None
    except (OSError, ValueError):
        return None


def ensure_munged(directory: str | os.PathLike, key_file: str | os.PathLike) -> None:
    """A munged in DIRECTORY with KEY_FILE, started unless one runs there; it outlives us."""
    if munged_pid(directory) is None:
        start_munged(directory, key_file=key_file, force=True)


def stop_munged(directory: str | os.PathLike, timeout: float = 5.0) -> bool:
    """Stop the munged of DIRECTORY (SIGTERM, then wait); False if none ran."""
    pid = munged_pid(directory)
    return pid is not None and terminate(pid, timeout)


def _conf_value(conf_path: Path, key: str) -> str | None:
    """The last value of ``key`` in a slurm.conf (enough to find its log file)."""
    value = None
    for raw in conf_path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        k, sep, v = line.partition("=")
        if sep and k.strip().lower() == key.lower() and " " not in k.strip():
            value = v.strip().split()[0] if v.strip() else ""
    return value


def start_slurmctld(
    conf_path: str | os.PathLike,
    env: Mapping[str, str] | None = None,
    *,
    clean: bool = False,
    timeout: float = 30.0,
    extra_args: Sequence[str] = (),
) -> Proc:
    """Start slurmctld in the foreground on ``conf_path`` and wait for ``scontrol ping``.

    ``env`` is added to the environment of slurmctld and of the readiness check;
    SLURM_CONF is set to ``conf_path`` in both (and in ``Proc.env``, for the caller's
    scontrol/sinfo/sbatch).  ``clean`` discards saved state from an earlier run (-c).
    Its stdout/stderr go to ``slurmctld.out`` next to the configured SlurmctldLogFile
    (or next to the config).
    """
    conf = Path(conf_path).resolve()
    if not conf.is_file():
        raise DaemonError(f"slurm.conf not found: {conf}")
    full_env = {**(env or {}), "SLURM_CONF": str(conf)}
    logfile = _conf_value(conf, "SlurmctldLogFile")
    log = Path(logfile) if logfile else None
    out_dir = log.parent if log is not None else conf.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "slurmctld.out"
    argv = [_which("slurmctld"), "-D", "-f", str(conf)]
    if clean:
        argv.append("-c")
    argv += list(extra_args)
    logs = [p for p in (log, out) if p is not None]
    proc = Proc("slurmctld", _spawn("slurmctld", argv, out, full_env), logs=logs, env=full_env)
    try:
        wait_for(
            [_which("scontrol"), "ping"],
            timeout,
            env=full_env,
            ok=lambda r: "UP" in r.stdout,
            proc=proc,
        )
    except DaemonError as e:
        proc.stop()
        raise DaemonError(f"slurmctld did not start with {conf}:\n{e}") from None
    return proc


def _node_path(conf: Path, key: str, node: str) -> Path | None:
    value = _conf_value(conf, key)
    if not value:
        return None
    return Path(value.replace("%n", node).replace("%h", node))


def start_slurmd(
    conf_path: str | os.PathLike,
    node_name: str,
    env: Mapping[str, str] | None = None,
    *,
    timeout: float = 30.0,
    extra_args: Sequence[str] = (),
) -> Proc:
    """Start ``slurmd -D -N <node_name>`` on ``conf_path`` and wait until it registers.

    Registered means slurmctld reports the node IDLE, MIXED or ALLOCATED, so slurmctld
    must already be running.  Creates the node's SlurmdSpoolDir (``%n`` expanded) and the
    directory of its log file.  Its stdout/stderr go to ``slurmd-<node>.out`` next to
    the log file (or next to the config).
    """
    conf = Path(conf_path).resolve()
    if not conf.is_file():
        raise DaemonError(f"slurm.conf not found: {conf}")
    full_env = {**(env or {}), "SLURM_CONF": str(conf)}
    spool = _node_path(conf, "SlurmdSpoolDir", node_name)
    if spool is not None:
        spool.mkdir(parents=True, exist_ok=True)
    log = _node_path(conf, "SlurmdLogFile", node_name)
    out_dir = log.parent if log is not None else conf.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"slurmd-{node_name}.out"
    argv = [_which("slurmd"), "-D", "-N", node_name, "-f", str(conf), *extra_args]
    logs = [p for p in (log, out) if p is not None]
    proc = Proc(f"slurmd {node_name}", _spawn("slurmd", argv, out, full_env), logs=logs, env=full_env)

    def registered(r: subprocess.CompletedProcess) -> bool:
        for word in r.stdout.split():
            if word.startswith("State="):
                state = word[len("State=") :].split("+")[0]
                return state in ("IDLE", "MIXED", "ALLOCATED")
        return False

    try:
        wait_for([_which("scontrol"), "show", "node", node_name], timeout, env=full_env, ok=registered, proc=proc)
    except DaemonError as e:
        proc.stop()
        raise DaemonError(f"slurmd for {node_name} did not register with {conf}:\n{e}") from None
    return proc
