"""The local registry of submitted jobs: `<dir>/jobs.jsonl`, one JSON object a line, appended
under an exclusive lock so concurrent submits never interleave a line. DIR is the deployment
folder for a local cluster, `~/.local/state/ctk/hosts/USER@HOST_PORT` for a login host.

A job's first line holds what was submitted; later lines with the same id add to it (the
final state and exit code, once seen), so status works after Slurm forgets the job."""

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
    """Every job, oldest first (later lines of the same id update its record)."""
    try:
        f = open(path(deployment_dir), encoding="utf-8")
    except FileNotFoundError:
        return []
    with f, held(f.fileno(), shared=True):
        text = f.read()
    by_id: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn line (the machine died mid-write): skip it
        if isinstance(rec, dict) and "id" in rec:
            jid = str(rec["id"])
            if jid in by_id and "template" not in rec:  # an update of a known job
                by_id[jid].update(rec)
            else:  # a new job (a reused id after a Slurm reset replaces the old one)
                by_id.pop(jid, None)
                by_id[jid] = rec
    return list(by_id.values())


def get(deployment_dir: str, job_id: str, where: str | None = None) -> dict[str, Any]:
    base = str(job_id).split("_", 1)[0]  # an array task 12_3 belongs to job 12
    for rec in load(deployment_dir):
        if str(rec["id"]) == base:
            return rec
    where = f"--deployment {deployment_dir}" if where is None else where
    raise UserError(f"job {job_id}: not submitted through ctk to this cluster",
                    hint=f"ctk job list {where}".rstrip())
