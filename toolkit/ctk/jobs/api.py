"""Python API: submit a template to a cluster and follow the job.

    job = ctk.jobs.submit("jax-smoke", {"nodes": 2}, "path/to/deployment", command=["python3"])
    job.wait()          # the final Slurm state, e.g. "COMPLETED"
    print(job.logs())

The cluster is a local deployment folder (a path) or a `ctk.jobs.clusters.Cluster`, e.g.
`SshCluster("alice@login.example.org")` for a login node reached over SSH.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from . import registry, scheduler, templates
from .clusters import Cluster

if TYPE_CHECKING:
    from .options import JobOptions

POLL_START, POLL_MAX = 0.2, 5.0


def as_cluster(cluster: Cluster | str | os.PathLike | None) -> Cluster:
    """A Cluster from a Cluster, a deployment folder, or None (this machine's own Slurm)."""
    if isinstance(cluster, Cluster):
        return cluster
    if cluster is None:
        from .clusters import HereCluster
        return HereCluster().check()
    if isinstance(cluster, (str, os.PathLike)):
        from .clusters import deployment_cluster
        return deployment_cluster(os.fspath(cluster))
    raise UserError("cluster: a deployment folder path, a ctk.jobs.clusters.Cluster, or None")


class Job:
    """A job submitted through ctk."""

    def __init__(self, job_id: str, cluster: Cluster | str, record: dict[str, Any] | None = None):
        self.id = str(job_id)
        self.cluster = as_cluster(cluster)
        self.record = record if record is not None else registry.get(self.cluster.registry_dir, self.id)

    @classmethod
    def load(cls, job_id: str, cluster: Cluster | str) -> Job:
        c = as_cluster(cluster)
        return cls(job_id, c, registry.get(c.registry_dir, str(job_id)))

    def __repr__(self) -> str:
        return f"Job({self.id!r}, {self.cluster!r})"

    reason = ""  # the pending reason squeue gave with the last state asked for
    displaced: dict[str, Any] | None = None  # at submit: the earlier job that had this id, renamed ID~N

    @property
    def state(self) -> str:
        """Slurm's state now (one squeue call; the registry or accounting once Slurm forgets);
        `reason` is then the pending reason ("" when the job does not pend)."""
        known = {self.id: self.record["final_state"]} if self.record.get("final_state") else None
        st, self.reason = scheduler.details(self.cluster, [self.id], known)[self.id]
        if self._final(st) and st != scheduler.UNKNOWN and not known:
            self.remember(st)
        return st

    @property
    def never_starts(self) -> str | None:
        """Why the job, pending, will never start on its own (as of the last state), or None."""
        from .limits import never_starts

        return never_starts(self.reason)

    def _final(self, state: str) -> bool:
        """Nothing more will happen (a requeueable job's NODE_FAIL/PREEMPTED is not its end)."""
        if state in scheduler.REQUEUED_AFTER and self.record.get("requeue"):
            return False
        return state in scheduler.FINAL_STATES

    def remember(self, state: str) -> None:
        """Note a final state in the registry, for when Slurm no longer lists the job."""
        code = scheduler.exit_code(self.cluster, self.id)
        self.record.update(final_state=state, exit_code=code)
        registry.append(self.cluster.registry_dir, {"id": self.id, "final_state": state, "exit_code": code})

    @property
    def done(self) -> bool:
        return self._final(self.state)

    def wait(self, timeout: float | None = None, poll: float = POLL_START, poll_max: float = POLL_MAX) -> str:
        """Block until the job ends; its final state. Polls from POLL seconds, doubling to POLL_MAX.
        Raises TimeoutError after TIMEOUT seconds (a job that never starts pends until then:
        see `never_starts`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll
        while True:
            st = self.state
            if self._final(st):
                return st
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} still {st} after {timeout}s")
            sleep = delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic()))
            time.sleep(sleep)
            delay = min(delay * 2, poll_max)

    def exit_code(self) -> int | None:
        if "exit_code" in self.record and self.record.get("final_state"):
            return self.record["exit_code"]
        return scheduler.exit_code(self.cluster, self.id)

    @property
    def tasks(self) -> list[str]:
        """Array task ids ([] for a plain job)."""
        return list(self.record.get("array_tasks") or [])

    def log_paths(self, task: str | None = None) -> tuple[str, str]:
        """stdout and stderr as the cluster sees them (of array task TASK, default the first,
        for an array job: the registry keeps its paths with %a in place of the task id)."""
        out, err = self.record["stdout"], self.record["stderr"]
        if self.tasks:
            t = task if task is not None else self.tasks[0]
            out, err = out.replace("%a", t), err.replace("%a", t)
        return out, err

    def log_bytes(self, stderr: bool = False, task: str | None = None, offset: int = 0) -> bytes:
        """The raw bytes of one log (of array task TASK) from byte OFFSET (b"" while there is none)."""
        return self.cluster.read(self.log_paths(task)[1 if stderr else 0], offset) or b""

    def read_logs(self, stderr: bool = False, task: str | None = None) -> tuple[str, list[str]]:
        """(the job's stdout or stderr so far, the paths of those logs that are not there), each
        log read once. An array job's logs are its tasks' logs, one after another, each under a
        header line."""
        tasks = [task] if task is not None or not self.tasks else self.tasks
        parts, missing = [], []
        for t in tasks:
            path = self.log_paths(t)[1 if stderr else 0]
            data = self.cluster.read(path, 0, missing=None)
            if data is None:
                missing.append(path)
                continue
            text = data.decode("utf-8", errors="replace")
            if len(tasks) > 1 or (self.tasks and task is None):
                parts.append(f"==> {self.id}_{t} <==\n{text}" if text else "")
            else:
                parts.append(text)
        return "".join(parts), missing

    def logs(self, stderr: bool = False, task: str | None = None) -> str:
        """The job's stdout (or stderr) so far; "" before it starts writing (see read_logs)."""
        return self.read_logs(stderr, task)[0]

    def cancel(self) -> None:
        if self.record.get("slurm_id"):
            raise UserError(f"job {self.id} ended before Slurm gave its id {self.record['slurm_id']} to another job",
                            hint=f"ctk job cancel {self.record['slurm_id']} cancels that other job")
        scheduler.cancel(self.cluster, self.id)


def submit(template: str, params: dict[str, Any], cluster: Cluster | str | None, command: Sequence[str] = (),
           nodeset: str | None = None, extra_args: Iterable[str] = (), deployment: str | None = None,
           options: JobOptions | None = None, chdir: str | None = None) -> Job:
    """Render TEMPLATE with PARAMS and submit it to CLUSTER (a local deployment folder, a
    Cluster, or None for the cluster this machine's Slurm commands reach). The deployment's facts (accelerator, GPUs, network) come from CLUSTER when it is
    a local deployment, or from DEPLOYMENT (a deployment folder) when given. OPTIONS (--time,
    --mem, --env, ...) go into the script; the job runs in CHDIR (a folder of the cluster),
    else OPTIONS.chdir, else the cluster's jobs folder. A job that no partition it names
    would ever start is refused (UserError) before sbatch runs."""
    from . import limits

    c = as_cluster(cluster)
    dep_dir = deployment or c.deployment_dir()
    dep = templates.load_deployment(dep_dir) if dep_dir else None
    script = templates.render(template, dict(params), list(command), dep, nodeset)
    if options is not None:
        script = options.check().apply(script, with_sbatch=False)
        chdir = chdir or options.chdir
    extra_args = list(extra_args)
    limits.check(script, extra_args, limits.ask(c))  # a job Slurm would never start is refused here
    job_id, path = scheduler.submit(c, script, extra_args, name=template, chdir=chdir)
    tasks = scheduler.array_tasks(script)
    if tasks:
        out, err = scheduler.log_paths(c, script, job_id, template, "%a", chdir=chdir)
    else:
        out, err = scheduler.log_paths(c, script, job_id, template, chdir=chdir)
    record = {"id": job_id, "template": template, "params": dict(params),
              "command": [str(x) for x in command], "nodeset": nodeset, "script": path,
              "stdout": out, "stderr": err, "submitted": time.time(), "cluster": c.key,
              "chdir": chdir or c.jobs_dir}
    if tasks:
        record["array_tasks"] = tasks
    if scheduler.requeues(script):
        record["requeue"] = True
    job = Job(job_id, c, record)
    job.displaced = registry.add(c.registry_dir, record)
    return job
