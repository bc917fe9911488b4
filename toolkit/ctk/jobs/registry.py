"""The local registry of submitted jobs: `<deployment>/jobs.jsonl`, one JSON object a line,
appended under an exclusive lock so concurrent submits never interleave a line."""

from __future__ import annotations

import fcntl
import json
import os
from typing import Any

from ..blueprint.errors import UserError

FILE = "jobs.jsonl"


def path(deployment_dir: str) -> str:
    return os.path.join(deployment_dir, FILE)


def append(deployment_dir: str, record: dict[str, Any]) -> None:
    """Add RECORD (needs an 'id') as one line, atomically with respect to other ctk processes."""
    line = (json.dumps(record, sort_keys=True, ensure_ascii=True, default=str) + "\n").encode()
    fd = os.open(path(deployment_dir), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def load(deployment_dir: str) -> list[dict[str, Any]]:
    """Every record, oldest first (a later record of the same id replaces an earlier one)."""
    try:
        f = open(path(deployment_dir), encoding="utf-8")
    except FileNotFoundError:
        return []
    with f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH)
        text = f.read()
    by_id: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn line (the machine died mid-write): skip it
        if isinstance(rec, dict) and "id" in rec:
            by_id.pop(str(rec["id"]), None)
            by_id[str(rec["id"])] = rec
    return list(by_id.values())


def get(deployment_dir: str, job_id: str) -> dict[str, Any]:
    for rec in load(deployment_dir):
        if str(rec["id"]) == str(job_id):
            return rec
    raise UserError(f"job {job_id}: not submitted through ctk to {deployment_dir}\n"
                    f"  hint: ctk job list --deployment {deployment_dir}")
