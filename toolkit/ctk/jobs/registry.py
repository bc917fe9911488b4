"""The local registry of submitted jobs: `<dir>/jobs.jsonl`, one JSON object a line, appended
under an exclusive lock so concurrent submits never interleave a line. DIR is the cluster's
registry folder (`Cluster.registry_dir`: `~/.local/state/ctk/clusters/NAME-ID`, by the cluster's
identity, so every way of reaching one cluster shares it).

A job's first line holds what was submitted; later lines with the same id add to it (the
final state and exit code, once seen), so status works after Slurm forgets the job. When Slurm
gives an id again (its saved state was lost, or its numbering wrapped), the earlier job is
kept, as ID~N (N = 1 for the first one that lost its id), never overwritten."""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import UserError
from ..locks import held

FILE = "jobs.jsonl"


def path(deployment_dir: str) -> str:
    return os.path.join(deployment_dir, FILE)


def append(deployment_dir: str, record: dict[str, Any]) -> None:
    """Add RECORD (needs an 'id') as one line, atomically with respect to other ctk processes."""
    line = (json.dumps(record, sort_keys=True, ensure_ascii=True, default=str) + "\n").encode()
    os.makedirs(deployment_dir, mode=0o700, exist_ok=True)
    fd = os.open(path(deployment_dir), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        with held(fd):
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
    finally:
        os.close(fd)


def load(deployment_dir: str) -> list[dict[str, Any]]:
    """Every job, oldest first (later lines of the same id update its record; an earlier job
    whose id Slurm gave again is listed as ID~N, with `slurm_id` its id in Slurm then)."""
    try:
        f = open(path(deployment_dir), encoding="utf-8")
    except FileNotFoundError:
        return []
    with f, held(f.fileno(), shared=True):
        text = f.read()
    jobs: list[dict[str, Any]] = []
    at: dict[str, int] = {}  # id -> index in jobs of the job that holds it now
    reused: dict[str, int] = {}
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn line (the machine died mid-write): skip it
        if not (isinstance(rec, dict) and "id" in rec):
            continue
        jid = rec["id"] = str(rec["id"])
        if jid in at and "template" not in rec:  # an update of a known job
            jobs[at[jid]].update(rec)
            continue
        if jid in at:  # Slurm gave the id again: the earlier job keeps its record, renamed
            reused[jid] = reused.get(jid, 0) + 1
            old = jobs[at[jid]]
            old.update(id=f"{jid}~{reused[jid]}", slurm_id=jid)
            old.setdefault("final_state", "UNKNOWN")  # Slurm no longer knows it by that id
        at[jid] = len(jobs)
        jobs.append(rec)
    return jobs


def add(deployment_dir: str, record: dict[str, Any]) -> dict[str, Any] | None:
    """Record a newly submitted job; the earlier job that had its id, as load() lists it from
    now on (ID~N), or None."""
    jid = str(record["id"])
    jobs = load(deployment_dir)
    append(deployment_dir, record)
    earlier = next((r for r in jobs if r["id"] == jid), None)
    if earlier is None:
        return None
    n = 1 + sum(1 for r in jobs if r.get("slurm_id") == jid)
    return {"final_state": "UNKNOWN", **earlier, "id": f"{jid}~{n}", "slurm_id": jid}


def get(deployment_dir: str, job_id: str, where: str | None = None) -> dict[str, Any]:
    base = str(job_id).split("_", 1)[0]  # an array task 12_3 belongs to job 12
    for rec in load(deployment_dir):
        if str(rec["id"]) == base:
            return rec
    where = f"--deployment {deployment_dir}" if where is None else where
    raise UserError(f"job {job_id}: not submitted through ctk to this cluster",
                    hint=f"ctk job list {where}".rstrip())
