"""Everything Slurm-specific about jobs, in one place: submit, state, cancel, exit code, logs.

Every function takes a `clusters.Cluster`: a local deployment (the host's Slurm commands
reach the lab through SLURM_CONF) or a login host over SSH. Scripts are written to the
cluster's jobs folder (`/home/.ctk-jobs` in the lab, `~/.ctk-jobs` on a login host); jobs
run there, so the templates' relative `--output` paths land in that folder too.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence

from ..connect.base import Cluster, SlurmError, exit_of, parse_kv_line

__all__ = ["SlurmError", "FINAL_STATES", "UNKNOWN", "submit", "states", "exit_code", "cancel", "log_paths"]

# Slurm job states after which nothing more happens (REQUEUED, PENDING, RUNNING, ... are not).
FINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
    "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED", "UNKNOWN",
})
UNKNOWN = "UNKNOWN"
# Ends after which a job submitted with --requeue goes back to PENDING: not final for it.
REQUEUED_AFTER = frozenset({"NODE_FAIL", "PREEMPTED"})
_REQUEUE = re.compile(r"^#SBATCH\s+--requeue\b", re.M)


def requeues(script_text: str) -> bool:
    """Whether the script asks Slurm to requeue it after a node failure or preemption."""
    return bool(_REQUEUE.search(script_text))


def submit_argv(script_path: str, jobs_dir: str, extra_args: Iterable[str] = ()) -> list[str]:
    return ["sbatch", "--parsable", f"--chdir={jobs_dir}", *extra_args, script_path]


def submit(cluster: Cluster, script_text: str, extra_args: Iterable[str] = (), name: str = "job",
           chdir: str | None = None) -> tuple[str, str]:
    """Store SCRIPT_TEXT in the cluster's jobs folder and sbatch it to run in CHDIR (default:
    the jobs folder): (job id, script path)."""
    path, r = cluster.put_and_run(script_text, name, lambda p: submit_argv(p, chdir or cluster.jobs_dir, extra_args))
    if r.returncode != 0:  # put_and_run left no script behind for a job that does not exist
        raise SlurmError(f"sbatch failed ({r.returncode}): {r.stderr.strip()}")
    job_id = r.stdout.strip().split(";", 1)[0]
    if not re.fullmatch(r"\d+", job_id):
        raise SlurmError(f"sbatch answered {r.stdout.strip()!r}, not a job id")
    return job_id, path


def test_only(cluster: Cluster, script_text: str) -> tuple[bool, str]:
    """`sbatch --test-only` of SCRIPT_TEXT (read from stdin): (accepted, Slurm's answer).
    Nothing is queued; Slurm checks the request against the partitions and nodes."""
    r = cluster.run(["sbatch", "--test-only", f"--chdir={cluster.jobs_dir}"], stdin=script_text)
    answer = (r.stderr.strip() or r.stdout.strip()).replace("sbatch: ", "")
    return r.returncode == 0, answer


def states_argv(job_ids: Sequence[str]) -> list[str]:
    """The one squeue call that reports every job of JOB_IDS, finished ones included, with
    the reason of each that is pending."""
    return ["squeue", "-h", "--states=all", "-j", ",".join(job_ids), "-o", "%i|%T|%r"]


def parse_details(text: str, job_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """squeue's `ID|STATE|REASON` lines as {id: (state, reason)}; reason is "" unless the job
    pends ("None" and an empty one are no reason). An array job (123_0, 123_[1-4], ...) is as
    far as its least advanced task: still RUNNING/PENDING while any task is (with a pending
    task's reason), else COMPLETED if every task completed, else the first task's end that
    was not COMPLETED."""
    found: dict[str, tuple[str, str]] = {}
    tasks: dict[str, list[tuple[str, str]]] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 2:
            continue
        jid, state = fields[0], fields[1].strip()
        reason = fields[2].strip() if len(fields) > 2 and state == "PENDING" else ""
        reason = "" if reason in ("None", "(null)") else reason
        found.setdefault(jid, (state, reason))
        if "_" in jid:
            tasks.setdefault(jid.split("_", 1)[0], []).append((state, reason))
    for base, sts in tasks.items():
        live = [st for st in sts if st[0] not in FINAL_STATES]
        if live:
            found[base] = next((st for st in live if st[0] != "PENDING"), live[0])
        else:
            found[base] = next(((st, "") for st, _ in sts if st != "COMPLETED"), ("COMPLETED", ""))
    return {j: found.get(j, (UNKNOWN, "")) for j in job_ids}


def parse_states(text: str, job_ids: Sequence[str]) -> dict[str, str]:
    """squeue's lines as {id: state} (see parse_details)."""
    return {j: st for j, (st, _) in parse_details(text, job_ids).items()}


def details(cluster: Cluster, job_ids: Sequence[str], known: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """{job id: (Slurm state, pending reason or "")}: one squeue call for all of JOB_IDS. Jobs
    squeue no longer lists (older than MinJobAge) come from KNOWN (final states seen before),
    then from one query of the cluster's accounting or job completion log; UNKNOWN if nothing
    remembers them."""
    ids = [str(j) for j in job_ids]
    if not ids:
        return {}
    known = known or {}
    ask = [j for j in ids if j not in known]
    out = {j: (known[j], "") for j in ids if j in known}
    if not ask:
        return out
    r = cluster.run(states_argv(ask))
    if r.returncode != 0:
        if "Invalid job id" not in r.stderr:  # that one means: every id asked about is gone
            raise SlurmError(f"squeue failed ({r.returncode}): {r.stderr.strip()}")
        found = dict.fromkeys(ask, (UNKNOWN, ""))
    else:
        found = parse_details(r.stdout, ask)
    gone = [j for j in ask if found[j][0] == UNKNOWN]
    if gone:
        for j, (st, _) in cluster.forgotten(gone).items():
            found[j] = (st, "")
    out.update(found)
    return out


def states(cluster: Cluster, job_ids: Sequence[str], known: dict[str, str] | None = None) -> dict[str, str]:
    """{job id: Slurm state} (see details)."""
    return {j: st for j, (st, _) in details(cluster, job_ids, known).items()}


def exit_code(cluster: Cluster, job_id: str) -> int | None:
    """The job's exit code (ExitCode=N:S; a signal S gives 128+S), None if Slurm forgot it."""
    r = cluster.run(["scontrol", "show", "-o", "job", str(job_id)])
    if r.returncode == 0 and r.stdout.strip():
        code = exit_of(parse_kv_line(r.stdout.splitlines()[0]).get("ExitCode", ""))
        if code is not None:
            return code
    return cluster.forgotten([str(job_id)]).get(str(job_id), (UNKNOWN, None))[1]


def cancel(cluster: Cluster, job_id: str) -> None:
    r = cluster.run(["scancel", str(job_id)])
    if r.returncode != 0:
        raise SlurmError(f"scancel {job_id} failed ({r.returncode}): {r.stderr.strip()}")


_OUT = re.compile(r"^#SBATCH\s+(?:--output|-o)[= ]\s*(\S+)", re.M)
_ERR = re.compile(r"^#SBATCH\s+(?:--error|-e)[= ]\s*(\S+)", re.M)
_NAME = re.compile(r"^#SBATCH\s+(?:--job-name|-J)[= ]\s*(\S+)", re.M)
_ARRAY = re.compile(r"^#SBATCH\s+(?:--array|-a)[= ]\s*(\S+)", re.M)


def expand_pattern(pattern: str, job_id: str, job_name: str, task: str | None = None) -> str:
    """Slurm's filename pattern for one job (or one array task): %j %A %a %x %%; others kept."""
    def sub(m: re.Match) -> str:
        c = m.group(1)
        table = {"j": job_id, "A": job_id, "x": job_name, "%": "%"}
        if task is not None:
            table["a"] = task
        return table.get(c, m.group(0))
    return re.sub(r"%([jAax%])", sub, pattern)


def array_tasks(script_text: str) -> list[str]:
    """The task ids of the script's `#SBATCH --array=` (0-3, 1,5,7, 0-9:2, %N throttles); []
    for a plain job."""
    m = _ARRAY.search(script_text)
    if not m:
        return []
    spec = m.group(1).split("%", 1)[0]
    out: list[str] = []
    for part in spec.split(","):
        rng, _, step = part.partition(":")
        lo, dash, hi = rng.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()) or (step and not step.isdigit()):
            return []
        for t in range(int(lo), (int(hi) if dash else int(lo)) + 1, int(step or 1)):
            out.append(str(t))
    return out


def log_paths(cluster: Cluster, script_text: str, job_id: str, script_name: str = "",
              task: str | None = None, chdir: str | None = None) -> tuple[str, str]:
    """The job's stdout and stderr paths as the cluster sees them (absolute), from the
    script's #SBATCH lines (Slurm's default slurm-%j.out when absent), relative ones in CHDIR
    (the folder the job runs in; default the jobs folder). For array jobs pass TASK; a pattern
    with %j names the task's own job id, which is known only to Slurm."""
    name_m = _NAME.search(script_text)
    name = (name_m.group(1) if name_m else script_name) or "sbatch"
    out_m, err_m = _OUT.search(script_text), _ERR.search(script_text)
    default = "slurm-%A_%a.out" if task is not None else "slurm-%j.out"
    out = expand_pattern(out_m.group(1) if out_m else default, job_id, name, task)
    err = expand_pattern(err_m.group(1), job_id, name, task) if err_m else out
    base = chdir or cluster.jobs_dir
    return posixpath.normpath(posixpath.join(base, out)), posixpath.normpath(posixpath.join(base, err))
