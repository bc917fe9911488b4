"""What a cluster's partitions allow, asked of Slurm once (one sinfo call), and a batch script
checked against it before it is submitted.

Slurm queues a job whose time is above its partition's MaxTime, or that asks for more nodes,
GPUs or memory than the partition's nodes have, and then never starts it (it pends with
PartitionTimeLimit, PartitionNodeLimit, ...), unless the site sets EnforcePartLimits. ctk
refuses such a job itself, with the limit and what to change, before sbatch runs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import UserError

# One line per partition and node configuration: name (default marked *), MaxTime, node count,
# CPUs, memory (MB) and generic resources of those nodes. -a: hidden partitions too.
SINFO_ARGV = ["sinfo", "-h", "-a", "-o", "%P|%l|%D|%c|%m|%G"]

# Pending reasons after which Slurm never starts the job on its own (the job stays queued
# until someone changes it or the cluster); `ctk job submit --wait` stops on them.
NEVER_STARTS = {
    "PartitionTimeLimit": "its time limit is above the partition's MaxTime",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionConfig": "it asks for more than the partition's nodes have",
    "DependencyNeverSatisfied": "a job it depends on ended in a way that can never satisfy the dependency",
    "BadConstraints": "no node of the partition has what it asks for",
    "InvalidAccount": "its account is not valid",
    "InvalidQOS": "its QOS is not valid",
    "AssocMaxWallDurationPerJobLimit": "its time limit is above its association's maximum",
    "QOSMaxWallDurationPerJobLimit": "its time limit is above its QOS's maximum",
    "AssocMaxNodesPerJobLimit": "it asks for more nodes than its association allows",
    "QOSMaxNodePerJobLimit": "it asks for more nodes than its QOS allows",
}


def never_starts(reason: str | None) -> str | None:
    """Why a job pending for REASON will never start, or None if it may."""
    return NEVER_STARTS.get((reason or "").strip())


@dataclass
class Partition:
    name: str
    default: bool = False
    max_minutes: float | None = None  # None: no limit
    nodes: int = 0
    cpus: int = 0  # the most any node has
    memory_mb: int = 0
    gpus: int = 0
    gpu_nodes: int = 0  # nodes with any GPU

    def describe(self) -> str:
        limit = "no time limit" if self.max_minutes is None else f"MaxTime {format_minutes(self.max_minutes)}"
        gpus = f", {self.gpus} GPUs per node" if self.gpus else ""
        return f"{self.name}{'*' if self.default else ''} ({self.nodes} nodes, {limit}{gpus})"


_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


def parse_minutes(text: str) -> float | None:
    """A Slurm time (sbatch's forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; sinfo's infinite) in
    minutes; None for no limit. A ValueError if it is none of these."""
    t = text.strip()
    if t.lower() in ("infinite", "unlimited", "-1"):
        return None
    m = _TIME.fullmatch(t)
    if not m:
        raise ValueError(f"not a Slurm time: {text!r}")
    days, a, b, c = m.groups()
    if days is not None:  # D-H, D-H:M, D-H:M:S
        return int(days) * 1440 + int(a) * 60 + int(b or 0) + int(c or 0) / 60
    if c is not None:  # H:M:S
        return int(a) * 60 + int(b) + int(c) / 60
    if b is not None:  # M:S
        return int(a) + int(b) / 60
    return float(a)  # M


def format_minutes(minutes: float) -> str:
    total = int(round(minutes * 60))
    d, rest = divmod(total, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def _gres_gpus(gres: str) -> int:
    """The GPU count of a node's Gres (gpu:h100:8, gpu:8(S:0-1), several comma-separated)."""
    n = 0
    for part in re.split(r",(?![^(]*\))", gres or ""):
        part = re.sub(r"\(.*?\)", "", part.strip())
        f = part.split(":")
        if f[0] == "gpu" and len(f) >= 2 and f[-1].isdigit():
            n += int(f[-1])
    return n


def parse_sinfo(text: str) -> dict[str, Partition]:
    """SINFO_ARGV's lines as {partition name: Partition}."""
    out: dict[str, Partition] = {}
    for line in text.splitlines():
        f = line.strip().split("|")
        if len(f) < 6 or not f[0]:
            continue
        name, default = f[0].rstrip("*"), f[0].endswith("*")
        p = out.setdefault(name, Partition(name, default))
        p.default = p.default or default
        try:
            p.max_minutes = parse_minutes(f[1])
        except ValueError:
            p.max_minutes = None
        count = int(f[2]) if f[2].isdigit() else 0
        p.nodes += count
        p.cpus = max(p.cpus, int(re.sub(r"\D", "", f[3]) or 0))
        p.memory_mb = max(p.memory_mb, int(re.sub(r"\D", "", f[4]) or 0))
        g = _gres_gpus(f[5])
        p.gpus = max(p.gpus, g)
        if g:
            p.gpu_nodes += count
    return out


def ask(cluster) -> dict[str, Partition]:
    """The cluster's partitions (one sinfo call); {} if sinfo does not answer (then nothing is
    checked here, and sbatch has the last word)."""
    r = cluster.run(SINFO_ARGV)
    return parse_sinfo(r.stdout) if r.returncode == 0 else {}


# ---- what a script asks for ---------------------------------------------------------------

_SHORT = {"-p": "partition", "-N": "nodes", "-t": "time", "-G": "gpus", "-n": "ntasks", "-c": "cpus-per-task",
          "-d": "dependency", "-D": "chdir"}


@dataclass
class Request:
    options: dict[str, str] = field(default_factory=dict)  # long option name -> value (last wins)

    def get(self, name: str) -> str | None:
        return self.options.get(name)


def _words(script: str) -> list[str]:
    """The options of the script's #SBATCH lines, in order (sbatch reads them up to the first
    line that is neither a comment nor blank)."""
    out: list[str] = []
    for i, line in enumerate(script.splitlines()):
        s = line.strip()
        if i == 0 and s.startswith("#!"):
            continue
        if s and not s.startswith("#"):
            break
        if s.startswith("#SBATCH"):
            try:
                out += shlex.split(s[len("#SBATCH"):].split(" #", 1)[0])
            except ValueError:
                continue
    return out


def request(script: str, extra_args: Iterable[str] = ()) -> Request:
    """What the script (then EXTRA_ARGS, sbatch's command line, which wins) asks for."""
    req = Request()
    words = _words(script) + list(extra_args)
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if w.startswith("--"):
            name, eq, value = w[2:].partition("=")
            if not eq:
                if i < len(words) and not words[i].startswith("-"):
                    value = words[i]
                    i += 1
                else:
                    value = ""
            req.options[name] = value
        elif w[:2] in _SHORT:
            value = w[2:]
            if not value and i < len(words):
                value = words[i]
                i += 1
            req.options[_SHORT[w[:2]]] = value
    return req


def _mb(text: str) -> int | None:
    m = re.fullmatch(r"(\d+)([KMGT]?)B?", text.strip().upper())
    if not m:
        return None
    n = int(m.group(1))
    return {"K": n // 1024, "": n, "M": n, "G": n * 1024, "T": n * 1024 * 1024}[m.group(2)]


def _count(text: str) -> int | None:
    """A count that may carry a GPU type (h100:8) or a range's minimum (2-4)."""
    last = text.split(":")[-1].split("-")[0].strip()
    return int(last) if last.isdigit() else None


def gpus_per_node(req: Request, nodes: int) -> int:
    for name in ("gpus-per-node",):
        v = req.get(name)
        if v:
            return _count(v) or 0
    gres = req.get("gres")
    if gres:
        return _gres_gpus(gres)
    total = req.get("gpus")
    if total and _count(total):
        return -(-(_count(total) or 0) // max(nodes, 1))
    return 0


def refusals(req: Request, part: Partition) -> list[str]:
    """Why PART would never start the job REQ (empty: it may)."""
    why = []
    nodes = _count(req.get("nodes") or "1") or 1
    if nodes > part.nodes:
        why.append(f"{nodes} nodes (--nodes): partition {part.name} has {part.nodes}")
    t = req.get("time")
    if t:
        try:
            minutes = parse_minutes(t)
        except ValueError:
            minutes = None
        if part.max_minutes is not None and (minutes is None or minutes > part.max_minutes):
            why.append(f"time {t} (--time): partition {part.name} allows at most "
                       f"{format_minutes(part.max_minutes)} (its MaxTime)")
    g = gpus_per_node(req, nodes)
    if g and not part.gpus:
        why.append(f"{g} GPUs per node: the nodes of partition {part.name} have no GPUs")
    elif g > part.gpus:
        why.append(f"{g} GPUs per node: the nodes of partition {part.name} have at most {part.gpus}")
    elif g and nodes > part.gpu_nodes:
        why.append(f"{nodes} nodes with GPUs: partition {part.name} has {part.gpu_nodes}")
    mem = _mb(req.get("mem") or "")
    if mem and part.memory_mb and mem > part.memory_mb:
        why.append(f"{mem} MB of memory per node (--mem): the nodes of partition {part.name} have at most "
                   f"{part.memory_mb} MB")
    return why


def check(script: str, extra_args: Iterable[str], parts: dict[str, Partition]) -> None:
    """Refuse (UserError, exit 2) a job no partition it names would ever start; nothing is
    checked when PARTS is empty (sinfo did not answer)."""
    if not parts:
        return
    req = request(script, extra_args)
    names = [n for n in (req.get("partition") or "").split(",") if n]
    listing = "; ".join(p.describe() for p in parts.values())
    if not names:
        default = next((p for p in parts.values() if p.default), None)
        if default is None:
            return  # sbatch answers: no default partition
        names = [default.name]
    unknown = [n for n in names if n not in parts]
    if unknown and len(unknown) == len(names):
        raise UserError(f"partition {unknown[0]!r} (--partition): the cluster has no such partition",
                        hint=f"partitions: {listing}")
    why = {n: refusals(req, parts[n]) for n in names if n in parts}
    if all(why.values()):
        first = next(iter(why.values()))
        raise UserError(f"Slurm would queue this job and never start it: {'; '.join(first)}",
                        hint=f"ask for less, or another partition (--set partition=NAME); partitions: {listing}")
