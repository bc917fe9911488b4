"""The lab's job cluster: how `ctk job --deployment DIR`, `ctk status` and the tests reach a
running lab's Slurm. Each command is the lab's own Slurm client, run in its client node (the
first login node, else the controller), as the lab's user (sandbox/enter.py); jobs live in the
user's home, /home/USER/.ctk-jobs, on the lab's shared /home.

Kept apart from the target's builders (targets.local) so that `ctk job submit` imports only
this: no planning, rendering, network or daemon code.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable, Sequence

from ..connect.base import (
    JOBS_SUBDIR,
    NODE_HOME,
    HereCluster,
    Result,
    SlurmError,
    exit_of,
    parse_identity,
    parse_kv_line,
    script_name,
)
from ..errors import UserError
from ..sandbox import DaemonError
from ..sandbox import node as nodes
from ..sandbox.labwrapper import USER_ENV
from .labstate import LabNode, lab_dir, load_state


def jobcomp_log(deployment_dir: str) -> str:
    """slurmctld's job completion log on this machine (jobcomp/filetxt)."""
    return os.path.join(os.path.abspath(lab_dir(deployment_dir)), "slurmctld", "jobcomp.log")


def client_node(nodes_: Sequence[LabNode]) -> str:
    """The node whose Slurm client commands ctk runs: the first login node, else the controller."""
    return next((x.name for x in nodes_ if x.role == "login"), next(x.name for x in nodes_ if x.role == "controller"))


def client_dir(deployment_dir: str) -> str:
    """The state folder of the lab's client node."""
    state = load_state(deployment_dir)
    if state is None:
        raise UserError(f"{deployment_dir} has no running lab", hint=f"ctk deploy BLUEPRINT -o {deployment_dir}")
    return os.path.join(lab_dir(deployment_dir), "nodes", client_node(state.nodes))


def lab_user(deployment_dir: str) -> str:
    """Who ctk's commands on the lab run as: $CTK_LAB_USER, else the lab's user."""
    if os.environ.get(USER_ENV):
        return os.environ[USER_ENV]
    state = load_state(deployment_dir)
    return (state.user if state else None) or "root"


def home_of(user: str) -> str:
    return "/root" if user == "root" else f"{NODE_HOME}/{user}"


def slurm(deployment_dir: str, *argv: str, timeout: float = 30, check: bool = True, cwd: str = "/",
          stdin: str | None = None, user: str = "root", umask: str | None = None) -> subprocess.CompletedProcess:
    """Run one of the lab's own Slurm client commands in its client node (the host needs no Slurm),
    as USER of the node."""
    sd = client_dir(deployment_dir)
    try:
        full = nodes.exec_argv(sd, list(argv), cwd=cwd, user=user, umask=umask)
    except DaemonError:
        if check:
            raise DaemonError(f"{argv[0]}: the lab's node {os.path.basename(sd)} is not running",
                              hint="ctk status shows the lab; ctk deploy brings it back") from None
        return subprocess.CompletedProcess(list(argv), 255, "", f"node {os.path.basename(sd)} is not running")
    r = subprocess.run(full, capture_output=True, text=True, timeout=timeout, input=stdin,
                       stdin=None if stdin is not None else subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise DaemonError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r



# Standard input into a new file $2 (never over an existing one) in the private folder $1.
PRIVATE_WRITE_SCRIPT = 'umask 077 && mkdir -p "$1" && chmod 700 "$1" && set -C && cat > "$2"'
# The same, then the command that follows ($3...), which reads the file; the file goes again if
# the command fails. A write that fails exits WRITE_FAILED with WRITE_FAILED_MARK and the
# shell's reason on standard error (sbatch itself exits 0 or 1).
WRITE_FAILED, WRITE_FAILED_MARK = 97, "ctk: cannot write the script:"
PRIVATE_WRITE_AND_RUN = (
    # a new empty file first (never over another), then the text: one cut short (a full disk)
    # is removed, being this shell's own
    'err=$( (umask 077 && mkdir -p "$1" && chmod 700 "$1" && set -C && : > "$2") 2>&1 ) || '
    f'{{ printf "{WRITE_FAILED_MARK} %s\\n" "$err" >&2; exit {WRITE_FAILED}; }}; '
    f'err=$(cat 2>&1 >| "$2") || {{ rm -f -- "$2"; printf "{WRITE_FAILED_MARK} %s\\n" "$err" >&2; exit {WRITE_FAILED}; }}; '
    'p=$2; shift 2; "$@"; rc=$?; [ "$rc" -eq 0 ] || rm -f -- "$p"; exit "$rc"')

class LabCluster(HereCluster):
    """Where `ctk job --deployment DIR` goes for a lab: the lab's own Slurm commands, run in its
    client node as the lab's user ($CTK_LAB_USER=root: as root), and the user's home on the
    shared /home, a folder of the deployment."""

    def __init__(self, deployment_dir: str):
        self.dir = os.path.abspath(deployment_dir)
        self.key = self.dir
        self.user = lab_user(self.dir)
        self.home = home_of(self.user)
        self.jobs_dir = f"{self.home}/{JOBS_SUBDIR}"

    def __repr__(self) -> str:
        return f"LabCluster({self.dir!r})"

    def deployment_dir(self) -> str:
        return self.dir

    def identity(self) -> dict[str, str] | None:
        """The lab's, from lab/identity.json (what its nodes read in /etc/slurm/ctk-cluster.json),
        without asking the lab."""
        try:
            with open(os.path.join(lab_dir(self.dir), "identity.json"), encoding="utf-8") as f:
                ident = parse_identity(f.read())
        except OSError:
            ident = None
        return ident if ident and ident.get("id") else super().identity()  # asked in the lab

    def check(self) -> LabCluster:
        if load_state(self.dir) is None:
            raise UserError(f"--deployment {self.dir}: not deployed on the local target",
                            hint=f"ctk deploy BLUEPRINT -o {self.dir}")
        return self

    def run(self, argv: Sequence[str], timeout: float = 30, stdin: str | None = None) -> Result:
        try:
            # umask 077: the job's output files are its user's alone (sbatch passes it as SLURM_UMASK)
            r = slurm(self.dir, *argv, timeout=timeout, check=False, cwd=self.home, stdin=stdin, user=self.user,
                      umask="077")
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{argv[0]}: no answer from the lab within {timeout:.0f}s") from None
        if r.returncode == 125 and not r.stdout:  # the node could not start it (sandbox/enter.py)
            if r.stderr.startswith("no user "):
                raise UserError(f"{USER_ENV}={self.user}: {r.stderr.strip()}",
                                hint=f"unset {USER_ENV} (the lab's user), or {USER_ENV}=root")
            raise SlurmError(f"{argv[0]} on the lab: {r.stderr.strip()}")
        return Result(r.returncode, r.stdout, r.stderr)

    def put_script(self, text: str, name: str) -> str:
        """The script, written in the node as its user (0600 in the 0700 jobs folder): the node
        resolves the path, so nothing the node made there redirects the write to the host."""
        path = f"{self.jobs_dir}/{script_name(name)}.sbatch"
        r = self.run(["/bin/sh", "-c", PRIVATE_WRITE_SCRIPT, "sh", self.jobs_dir, path], stdin=text)
        if r.returncode != 0:
            raise SlurmError(f"cannot write the job's script {path} on the lab as {self.user}: {r.stderr.strip()}")
        return path

    def remove(self, path: str) -> None:
        self.run(["rm", "-f", "--", path])

    def put_and_run(self, text: str, name: str, argv_for: Callable[[str], list[str]],
                    timeout: float = 30) -> tuple[str, Result]:
        """put_script and the command in one entry into the node (each entry is a process of
        its own: sbatch through the API took three, 68 ms against plain sbatch's 24)."""
        path = f"{self.jobs_dir}/{script_name(name)}.sbatch"
        try:
            r = self.run(["/bin/sh", "-c", PRIVATE_WRITE_AND_RUN, "sh", self.jobs_dir, path, *argv_for(path)],
                         stdin=text, timeout=timeout)
        except BaseException:
            self.remove(path)
            raise
        if r.returncode == WRITE_FAILED and r.stderr.startswith(WRITE_FAILED_MARK):
            raise SlurmError(f"cannot write the job's script {path} on the lab as {self.user}: "
                             f"{r.stderr[len(WRITE_FAILED_MARK):].strip()}")
        return path, r

    def shared_folders(self) -> list[tuple[str, str]]:
        """The lab's folder that is the nodes' /home, where jobs can run and logs be read."""
        return [(os.path.join(self.dir, "lab", "home"), NODE_HOME)]

    def chdir_for(self, host_dir: str) -> str | None:
        """HOST_DIR as the nodes see it, if it is in the lab's shared /home; else None."""
        here = os.path.realpath(host_dir)
        for host, node in self.shared_folders():
            host = os.path.realpath(host)
            if here == host or here.startswith(host + "/"):
                return node + here[len(host):]
        return None

    def host_path(self, node_path: str) -> str | None:
        """Where NODE_PATH (absolute, or relative to the jobs folder) lies on this machine;
        None outside the shared /home."""
        p = os.path.normpath(node_path if node_path.startswith("/") else os.path.join(self.jobs_dir, node_path))
        if p != NODE_HOME and not p.startswith(NODE_HOME + "/"):
            return None
        return os.path.join(self.dir, "lab", "home", os.path.relpath(p, NODE_HOME))

    def read(self, path: str, offset: int = 0, missing: bytes | None = b"") -> bytes | None:
        """A job's log from the shared /home, opened without following any symlink a job made on
        the way (it would lead outside the lab) and only if it is a regular file (a FIFO would
        hang); MISSING otherwise."""
        p = os.path.normpath(path if path.startswith("/") else os.path.join(self.jobs_dir, path))
        if not p.startswith(NODE_HOME + "/"):
            return missing
        try:
            fd = open_below(os.path.join(self.dir, "lab", "home"), os.path.relpath(p, NODE_HOME))
        except OSError:
            return missing
        with os.fdopen(fd, "rb") as f:
            f.seek(offset)
            return f.read()

    def forgotten(self, ids: Sequence[str]) -> dict[str, tuple[str, int | None]]:
        """From accounting (one sacct call) where the lab keeps it; for the rest (a lab without
        accounting, or slurmdbd down), from the line slurmctld writes for every finished job to
        its job completion log (jobcomp/filetxt), kept in the deployment folder."""
        state = load_state(self.dir)
        out: dict[str, tuple[str, int | None]] = self._sacct(ids) if state and state.accounting else {}
        want = set(ids) - set(out)
        if not want:
            return out
        try:
            with open(jobcomp_log(self.dir), encoding="utf-8", errors="replace") as f:
                for line in f:  # a requeued job has a line per run: the last one wins
                    rec = parse_kv_line(line)
                    if rec.get("JobId") in want:
                        out[rec["JobId"]] = (rec.get("JobState", "UNKNOWN"), exit_of(rec.get("ExitCode", "")))
        except FileNotFoundError:
            pass
        return out


def open_below(base: str, rel: str) -> int:
    """A read-only fd of the regular file BASE/REL, each component opened with O_NOFOLLOW from
    the one before: OSError on a symlink, a '..', or anything but a regular file at the end."""
    parts = [x for x in rel.split("/") if x and x != "."]
    if not parts or ".." in parts:
        raise OSError(f"{rel}: not a path below {base}")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        out = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(out).st_mode):
        os.close(out)
        raise OSError(f"{rel}: not a regular file")
    return out


def job_cluster(deployment_dir: str) -> LabCluster:
    """The lab's cluster, once it is known to be deployed."""
    return LabCluster(deployment_dir).check()
