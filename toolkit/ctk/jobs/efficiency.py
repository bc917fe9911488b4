"""How well a finished job used what it was given, from one sacct call: CPU time against the
CPUs it held for its run, and its largest memory footprint against the memory it held.

Debian ships no `seff` (no slurm-wlm-contrib in 12 or 13), so ctk reads the same accounting
fields itself. The figures need the job's samples: JobAcctGatherType set (every slurm.conf ctk
renders sets it) and an accounting database (sacct).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from ..connect.base import Cluster, SlurmError
from ..errors import UserError

__all__ = ["Efficiency", "SACCT_FIELDS", "sacct_argv", "parse_sacct", "efficiency", "report", "cpu_seconds",
           "mem_bytes"]

SACCT_FIELDS = ("JobID", "JobName", "State", "ExitCode", "NNodes", "AllocCPUS", "ElapsedRaw", "TotalCPU",
                "MaxRSS", "ReqMem", "AllocTRES")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def cpu_seconds(text: str) -> float:
    """sacct's TotalCPU ([D-][HH:]MM:SS[.mmm]) in seconds; 0 for an empty field."""
    text = text.strip()
    if not text:
        return 0.0
    days, _, clock = text.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    h, m, s = parts
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + s


def mem_bytes(text: str, default_unit: str = "") -> int | None:
    """A sacct memory figure (1234K, 2000M, 1.5G, plain bytes) in bytes; None if empty."""
    m = re.fullmatch(r"([0-9.]+)([KMGTP]?)[nc]?", text.strip())
    if not m:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2) or default_unit])


@dataclass
class Efficiency:
    job: str
    name: str
    state: str
    exit_code: str
    nodes: int
    cpus: int
    elapsed_s: int
    cpu_s: float  # CPU time of every step (user + system)
    max_rss_bytes: int | None  # the largest task's, over the steps
    mem_bytes: int | None  # memory allocated to the job (all its nodes)

    @property
    def cpu_efficiency(self) -> float | None:
        held = self.elapsed_s * self.cpus
        return self.cpu_s / held if held else None

    @property
    def mem_efficiency(self) -> float | None:
        if self.max_rss_bytes is None or not self.mem_bytes:
            return None
        return self.max_rss_bytes / self.mem_bytes

    def to_dict(self) -> dict:
        return {**asdict(self), "cpu_efficiency": self.cpu_efficiency, "mem_efficiency": self.mem_efficiency}


def sacct_argv(job_id: str) -> list[str]:
    return ["sacct", "-n", "-P", "-j", job_id, "-o", ",".join(SACCT_FIELDS)]


def _alloc_mem(tres: str, req_mem: str) -> int | None:
    """The job's memory: AllocTRES's mem= (the whole allocation), else ReqMem."""
    m = re.search(r"(?:^|,)mem=([^,]+)", tres)
    if m:
        return mem_bytes(m.group(1), "M")
    return mem_bytes(req_mem, "M")


def parse_sacct(text: str) -> list[Efficiency]:
    """One Efficiency a job (each array task its own), from `sacct -n -P` of SACCT_FIELDS: the
    job's line gives its allocation, its steps' lines (ID.batch, ID.0, ...) the largest RSS."""
    jobs: dict[str, Efficiency] = {}
    steps: dict[str, list[int]] = {}
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) != len(SACCT_FIELDS):
            continue
        row = dict(zip(SACCT_FIELDS, cols))
        jid, _, step = row["JobID"].partition(".")
        if step:
            rss = mem_bytes(row["MaxRSS"])
            if rss is not None:
                steps.setdefault(jid, []).append(rss)
            continue
        jobs[jid] = Efficiency(
            job=jid, name=row["JobName"], state=row["State"].split()[0] if row["State"] else "",
            exit_code=row["ExitCode"], nodes=int(row["NNodes"] or 0), cpus=int(row["AllocCPUS"] or 0),
            elapsed_s=int(row["ElapsedRaw"] or 0), cpu_s=cpu_seconds(row["TotalCPU"]), max_rss_bytes=None,
            mem_bytes=_alloc_mem(row["AllocTRES"], row["ReqMem"]))
    for jid, e in jobs.items():
        if steps.get(jid):
            e.max_rss_bytes = max(steps[jid])
    return list(jobs.values())


def efficiency(cluster: Cluster, job_id: str) -> list[Efficiency]:
    """The efficiency of job JOB_ID (of each of its tasks, for an array), one sacct call."""
    if not re.fullmatch(r"\d+(_\d+)?", job_id):
        raise UserError(f"{job_id!r} is not a job id", hint="ctk job efficiency 1234 (or 1234_5: one array task)")
    r = cluster.run(sacct_argv(job_id))
    if r.returncode != 0:
        raise SlurmError(f"sacct failed ({r.returncode}): {r.stderr.strip()}")
    found = parse_sacct(r.stdout)
    if not found:
        raise UserError(f"job {job_id}: not in the accounting database",
                        hint="sacct knows only jobs of a cluster with accounting (slurmdbd)")
    return found


def _size(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def report(e: Efficiency) -> str:
    """A report of one job, as an admin reads it on a login node."""
    held = e.elapsed_s * e.cpus
    return (f"Job {e.job} ({e.name}): {e.state}, exit code {e.exit_code}\n"
            f"  Nodes: {e.nodes}  CPUs: {e.cpus}  Wall-clock: {_clock(e.elapsed_s)}\n"
            f"  CPU efficiency: {_pct(e.cpu_efficiency)} ({_clock(e.cpu_s)} of {_clock(held)} core-walltime)\n"
            f"  Memory efficiency: {_pct(e.mem_efficiency)} ({_size(e.max_rss_bytes)} of {_size(e.mem_bytes)})\n")
