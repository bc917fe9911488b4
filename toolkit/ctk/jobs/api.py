"""Python API: submit a template to a cluster and follow the job.

    job = ctk.jobs.submit("jax-smoke", {"nodes": 2}, "path/to/deployment", command=["python"])
    job.wait()          # the final Slurm state, e.g. "COMPLETED"
    print(job.logs())
"""

from __future__ import annotations

import os
import time
from typing import Any, Iterable, Sequence

from ..blueprint.errors import UserError
from . import registry, scheduler, templates

POLL_START, POLL_MAX = 0.2, 5.0


class Job:
    """A job submitted through ctk to a local deployment."""

    def __init__(self, job_id: str, cluster: str, record: dict[str, Any] | None = None):
        self.id = str(job_id)
        self.cluster = cluster
        self.record = record if record is not None else registry.get(cluster, self.id)

    @classmethod
    def load(cls, job_id: str, cluster: str) -> "Job":
        return cls(job_id, cluster, registry.get(cluster, str(job_id)))

    def __repr__(self) -> str:
        return f"Job({self.id!r}, {self.cluster!r})"

    @property
    def state(self) -> str:
        """Slurm's state now (one squeue call)."""
        return scheduler.states(self.cluster, [self.id])[self.id]

    @property
    def done(self) -> bool:
        return self.state in scheduler.FINAL_STATES

    def wait(self, timeout: float | None = None, poll: float = POLL_START, poll_max: float = POLL_MAX) -> str:
        """Block until the job ends; its final state. Polls from POLL seconds, doubling to POLL_MAX.
        Raises TimeoutError after TIMEOUT seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll
        while True:
            st = self.state
            if st in scheduler.FINAL_STATES:
                return st
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} still {st} after {timeout}s")
            sleep = delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic()))
            time.sleep(sleep)
            delay = min(delay * 2, poll_max)

    def exit_code(self) -> int | None:
        return scheduler.exit_code(self.cluster, self.id)

    def log_paths(self) -> tuple[str | None, str | None]:
        out, err = self.record.get("stdout"), self.record.get("stderr")
        return out, err

    def logs(self, stderr: bool = False) -> str:
        """The job's stdout (or stderr) so far; "" before it starts writing."""
        p = self.log_paths()[1 if stderr else 0]
        if not p:
            return ""
        try:
            with open(p, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def cancel(self) -> None:
        scheduler.cancel(self.cluster, self.id)


def submit(template: str, params: dict[str, Any], cluster: str, command: Sequence[str] = (),
           nodeset: str | None = None, extra_args: Iterable[str] = ()) -> Job:
    """Render TEMPLATE with PARAMS for the deployment folder CLUSTER and submit it."""
    if not isinstance(cluster, (str, os.PathLike)):
        raise UserError("cluster: a deployment folder path")
    cluster = os.fspath(cluster)
    dep = templates.load_deployment(cluster)
    script = templates.render(template, dict(params), list(command), dep, nodeset)
    job_id, path = scheduler.submit(script, cluster, extra_args, name=template)
    out, err = scheduler.log_paths(cluster, script, job_id, os.path.basename(path))
    record = {"id": job_id, "template": template, "params": {k: v for k, v in params.items()},
              "command": [str(c) for c in command], "nodeset": nodeset, "script": path,
              "stdout": out, "stderr": err, "submitted": time.time(), "cluster": os.path.abspath(cluster)}
    registry.append(cluster, record)
    return Job(job_id, cluster, record)
