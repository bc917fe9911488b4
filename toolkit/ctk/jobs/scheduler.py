"""Everything Slurm-specific about jobs, in one place: submit, state, cancel, exit code, logs.

The cluster is a local deployment folder: the host's Slurm commands reach the lab through
SLURM_CONF (cluster.local.slurm_env). Scripts are written under the shared home,
`<dir>/lab/home/.ctk-jobs/`, which the nodes see as `/home/.ctk-jobs`; jobs run there, so the
templates' relative `--output` paths land in that folder too.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from typing import Iterable, Sequence

from ..blueprint.errors import UserError
from ..cluster.daemons import DaemonError

JOBS_SUBDIR = ".ctk-jobs"
NODE_HOME = "/home"
NODE_JOBS_DIR = f"{NODE_HOME}/{JOBS_SUBDIR}"

# Slurm job states after which nothing more happens (REQUEUED, PENDING, RUNNING, ... are not).
FINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
    "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED", "UNKNOWN",
})
UNKNOWN = "UNKNOWN"


class SlurmError(DaemonError):
    """A Slurm command failed (cluster down, request refused): exit 1, not a usage error."""


def _check_deployment(deployment_dir: str) -> None:
    from ..cluster import local

    if not os.path.isfile(os.path.join(deployment_dir, "deployment.json")):
        raise UserError(f"--deployment {deployment_dir}: no deployment.json there\n"
                        "  hint: create and deploy it with 'ctk deploy BLUEPRINT -o DIR'")
    from ..cluster import ssh

    if ssh.is_ssh_deployment(deployment_dir):
        raise UserError(f"--deployment {deployment_dir}: ssh-target deployments cannot take jobs yet\n"
                        "  hint: submit to a local deployment (ctk deploy on this machine)")
    if local.load_state(deployment_dir) is None:
        raise UserError(f"--deployment {deployment_dir}: not deployed on the local target\n"
                        f"  hint: ctk deploy BLUEPRINT -o {deployment_dir}")


def _run(deployment_dir: str, argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess:
    from ..cluster import local

    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **local.slurm_env(deployment_dir)})
    except FileNotFoundError:
        raise UserError(f"{argv[0]}: not installed on this machine") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]}: no answer from the cluster within {timeout:.0f}s") from None


def jobs_dir(deployment_dir: str) -> str:
    """The host folder the nodes see as /home/.ctk-jobs."""
    return os.path.join(os.path.abspath(deployment_dir), "lab", "home", JOBS_SUBDIR)


def to_host_path(deployment_dir: str, node_path: str) -> str | None:
    """Where the node path NODE_PATH (under /home) lies on the host; None if outside /home."""
    p = os.path.normpath(node_path if node_path.startswith("/") else os.path.join(NODE_JOBS_DIR, node_path))
    if p != NODE_HOME and not p.startswith(NODE_HOME + "/"):
        return None
    return os.path.join(os.path.abspath(deployment_dir), "lab", "home", os.path.relpath(p, NODE_HOME))


def write_script(script_text: str, deployment_dir: str, name: str) -> str:
    """SCRIPT_TEXT as a new file `<jobs_dir>/<name>-<timestamp>.sbatch`; its host path."""
    d = jobs_dir(deployment_dir)
    os.makedirs(d, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S") + f"{time.time() % 1:.6f}"[1:]
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", name) or "job"
    for i in range(1000):
        path = os.path.join(d, f"{safe}-{stamp}{'' if i == 0 else f'-{i}'}.sbatch")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(script_text)
        return path
    raise SlurmError(f"cannot name a new script in {d}")


def submit_argv(script_path: str, extra_args: Iterable[str] = ()) -> list[str]:
    return ["sbatch", "--parsable", f"--chdir={NODE_JOBS_DIR}", *extra_args, script_path]


def submit(script_text: str, deployment_dir: str, extra_args: Iterable[str] = (), name: str = "job") -> tuple[str, str]:
    """Write SCRIPT_TEXT under the shared home and sbatch it: (job id, script's host path)."""
    _check_deployment(deployment_dir)
    path = write_script(script_text, deployment_dir, name)
    r = _run(deployment_dir, submit_argv(path, extra_args))
    if r.returncode != 0:
        raise SlurmError(f"sbatch failed ({r.returncode}): {r.stderr.strip()}")
    job_id = r.stdout.strip().split(";", 1)[0]
    if not re.fullmatch(r"\d+", job_id):
        raise SlurmError(f"sbatch answered {r.stdout.strip()!r}, not a job id")
    return job_id, path


def states_argv(job_ids: Sequence[str]) -> list[str]:
    """The one squeue call that reports every job of JOB_IDS, finished ones included."""
    return ["squeue", "-h", "--states=all", "-j", ",".join(job_ids), "-o", "%i|%T"]


def parse_states(text: str, job_ids: Sequence[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in text.splitlines():
        jid, sep, state = line.strip().partition("|")
        if not sep:
            continue
        base = jid.split("_", 1)[0]  # array tasks: 123_4 (the first task listed speaks for 123)
        found.setdefault(jid, state.strip())
        found.setdefault(base, state.strip())
    return {j: found.get(j, UNKNOWN) for j in job_ids}


def states(deployment_dir: str, job_ids: Sequence[str]) -> dict[str, str]:
    """{job id: Slurm state} with one squeue call; UNKNOWN for jobs Slurm no longer lists."""
    ids = [str(j) for j in job_ids]
    if not ids:
        return {}
    r = _run(deployment_dir, states_argv(ids))
    if r.returncode != 0:
        if "Invalid job id" in r.stderr:  # every id asked about is gone from slurmctld
            return {j: UNKNOWN for j in ids}
        raise SlurmError(f"squeue failed ({r.returncode}): {r.stderr.strip()}")
    return parse_states(r.stdout, ids)


def show_job(deployment_dir: str, job_id: str) -> dict[str, str]:
    """`scontrol show -o job ID` as a dict; {} if Slurm no longer knows the job."""
    r = _run(deployment_dir, ["scontrol", "show", "-o", "job", str(job_id)])
    if r.returncode != 0:
        return {}
    first = r.stdout.splitlines()[0] if r.stdout.strip() else ""
    return dict(tok.split("=", 1) for tok in first.split() if "=" in tok)


def exit_code(deployment_dir: str, job_id: str) -> int | None:
    """The job's exit code (ExitCode=N:S; a signal S gives 128+S), None if Slurm forgot it."""
    ec = show_job(deployment_dir, job_id).get("ExitCode")
    if not ec:
        return None
    code, _, sig = ec.partition(":")
    try:
        code_i, sig_i = int(code), int(sig or 0)
    except ValueError:
        return None
    return code_i if code_i or not sig_i else 128 + sig_i


def cancel(deployment_dir: str, job_id: str) -> None:
    r = _run(deployment_dir, ["scancel", str(job_id)])
    if r.returncode != 0:
        raise SlurmError(f"scancel {job_id} failed ({r.returncode}): {r.stderr.strip()}")


_OUT = re.compile(r"^#SBATCH\s+(?:--output|-o)[= ]\s*(\S+)", re.M)
_ERR = re.compile(r"^#SBATCH\s+(?:--error|-e)[= ]\s*(\S+)", re.M)
_NAME = re.compile(r"^#SBATCH\s+(?:--job-name|-J)[= ]\s*(\S+)", re.M)


def _expand(pattern: str, job_id: str, job_name: str) -> str:
    def sub(m: re.Match) -> str:
        c = m.group(1)
        return {"j": job_id, "A": job_id, "x": job_name, "%": "%"}.get(c, m.group(0))
    return re.sub(r"%([jAx%])", sub, pattern)


def log_paths(deployment_dir: str, script_text: str, job_id: str, script_name: str = "") -> tuple[str | None, str | None]:
    """Host paths of the job's stdout and stderr, from the script's #SBATCH lines (Slurm's
    default slurm-%j.out when absent); None for a log outside the shared home."""
    name = (_NAME.search(script_text).group(1) if _NAME.search(script_text) else script_name) or "sbatch"
    out_m, err_m = _OUT.search(script_text), _ERR.search(script_text)
    out = _expand(out_m.group(1) if out_m else "slurm-%j.out", job_id, name)
    err = _expand(err_m.group(1), job_id, name) if err_m else out
    return to_host_path(deployment_dir, out), to_host_path(deployment_dir, err)
