"""What `ctk job` prints: the logic behind the command line, kept out of ctk.cli."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from ..errors import UserError
from . import templates


def parse_sets(sets: list[str], nodes: str | None) -> dict[str, str]:
    """--set K=V flags (and --nodes) as a dict of raw strings; typed later by the template."""
    out: dict[str, str] = {}
    for s in sets:
        key, eq, value = s.partition("=")
        if not eq or not key.strip():
            raise UserError(f"--set {templates.clip(s)}: expected K=V", hint="--set nodes=2")
        out[key.strip()] = value
    if nodes is not None:
        out["nodes"] = nodes
    return out


def render_cli(template: str, sets: list[str], nodes: str | None, deployment: str | None,
               nodeset: str | None, command: list[str]) -> str:
    params = parse_sets(sets, nodes)
    cluster = templates.load_deployment(deployment) if deployment else None
    if nodeset and not deployment:
        raise UserError("--nodeset needs --deployment DIR")
    return templates.render(template, params, command, cluster, nodeset)


def check_script(script: str, cluster) -> tuple[bool, str]:
    """`sbatch --test-only` of SCRIPT on CLUSTER: (accepted, Slurm's answer)."""
    from . import scheduler

    return scheduler.test_only(cluster, script)


def templates_text(as_json: bool) -> str:
    names = templates.list_templates()
    if not names:  # an empty list would hide a broken install or a wrong CTK_SBATCH_DIR
        raise UserError(f"no job templates in {templates.template_dir()}",
                        hint=f"templates are files NAME{templates.SUFFIX} there; CTK_SBATCH_DIR names another folder")
    tpls = [templates.load_template(n) for n in names]
    if as_json:
        return json.dumps([t.to_dict() for t in tpls], indent=2) + "\n"
    out = []
    for t in tpls:
        out.append(f"{t.name}: {t.description}")
        for p in t.params.values():
            default = "required" if p.required else f"default {json.dumps(p.default)}"
            bounds = "".join(f", {w} {b}" for w, b in (("min", p.min), ("max", p.max)) if b is not None)
            out.append(f"  {p.name} ({p.type}, {default}{bounds}): {p.help}")
        out.append("")
    return "\n".join(out)


# ---- submit and follow (ctk job submit/status/logs/cancel/list) ----------------------------

@dataclass(frozen=True)
class ClusterRef:
    """The flags that name a cluster: --deployment, or --host with --identity / --ssh-config;
    none: this machine's own Slurm."""

    deployment: str | None = None
    host: str | None = None
    identity: str | None = None
    ssh_config: str | None = None

    def flags(self) -> str:
        """The flags again, for hints."""
        if self.host:
            return f"--host {self.host}" + (f" --ssh-config {self.ssh_config}" if self.ssh_config else "")
        return f"--deployment {self.deployment}" if self.deployment else ""


@dataclass(frozen=True)
class SubmitRequest:
    template: str
    sets: tuple[str, ...]
    nodes: str | None
    nodeset: str | None
    command: tuple[str, ...]
    cluster: ClusterRef
    sbatch_args: tuple[str, ...] = ()


def cluster_of(ref: ClusterRef):
    """The cluster named by --host (with --identity/--ssh-config) or --deployment."""
    from .clusters import open_cluster

    return open_cluster(ref.deployment, ref.host, ref.identity, ref.ssh_config)


def submit_cli(req: SubmitRequest):
    from .api import submit

    extra = list(req.sbatch_args)
    for opt in extra:
        if not opt.startswith("-") or opt in ("-", "--") or "\n" in opt:
            raise UserError(f"--sbatch {opt!r}: an sbatch option such as --dependency=afterok:12, as one word",
                            hint="--sbatch=--hold")
    cluster = cluster_of(req.cluster)
    deployment = req.cluster.deployment if req.cluster.host else None
    return submit(req.template, parse_sets(list(req.sets), req.nodes), cluster, list(req.command), req.nodeset,
                  extra_args=extra, deployment=deployment)


def load_job(job_id: str, ref: ClusterRef):
    """(the Job, the array task asked for or None): ID may be an array task, 12_3."""
    from . import registry
    from .api import Job

    cluster = cluster_of(ref)
    base, _, task = str(job_id).partition("_")
    rec = registry.get(cluster.registry_dir, base, ref.flags())
    job = Job(base, cluster, rec)
    if task and task not in job.tasks:
        raise UserError(f"job {job_id}: job {base} has no array task {task!r}",
                        hint=f"tasks {', '.join(job.tasks)}" if job.tasks else "")
    return job, task or None


def status_rows(ids: list[str], ref: ClusterRef) -> list[dict]:
    """One row per job asked about (every registered job when IDS is empty): one squeue call,
    and for jobs Slurm has forgotten, one accounting / completion-log query."""
    from . import registry, scheduler

    cluster = cluster_of(ref)
    d = cluster.registry_dir
    recs = registry.load(d)
    if ids:
        by_id = {str(r["id"]): r for r in recs}
        for j in ids:
            if j not in by_id:
                registry.get(d, j, ref.flags())  # raises the UserError with its hint
        recs = [by_id[j] for j in ids]
    known = {str(r["id"]): r["final_state"] for r in recs if r.get("final_state")}
    st = scheduler.states(cluster, [str(r["id"]) for r in recs], known)
    for r in recs:  # remember final states, for when Slurm no longer lists the jobs
        s = st[str(r["id"])]
        if (s in scheduler.FINAL_STATES and s != scheduler.UNKNOWN and not r.get("final_state")
                and not (s in scheduler.REQUEUED_AFTER and r.get("requeue"))):
            registry.append(d, {"id": str(r["id"]), "final_state": s})
    return [{"id": str(r["id"]), "state": st[str(r["id"])], "template": r.get("template"),
             "submitted": r.get("submitted"), "script": r.get("script"), "stdout": r.get("stdout")}
            for r in recs]


def status_text(rows: list[dict], as_json: bool) -> str:
    if as_json:
        return json.dumps(rows, indent=2) + "\n"
    return _table(rows, ("id", "state", "template"))


def list_text(ref: ClusterRef, as_json: bool) -> str:
    from . import registry

    recs = registry.load(cluster_of(ref).registry_dir)
    if as_json:
        return json.dumps(recs, indent=2) + "\n"
    rows = [{"id": str(r["id"]), "template": r.get("template", ""),
             "submitted": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.get("submitted", 0))),
             "command": " ".join(r.get("command") or [])} for r in recs]
    return _table(rows, ("id", "template", "submitted", "command"))


def _table(rows: list[dict], cols: tuple[str, ...]) -> str:
    if not rows:
        return "(no jobs)\n"
    widths = {c: max(len(c), *(len(str(r.get(c) or "")) for r in rows)) for c in cols}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in cols).rstrip()]
    for r in rows:
        lines.append("  ".join(str(r.get(c) or "").ljust(widths[c]) for c in cols).rstrip())
    return "\n".join(lines) + "\n"


def follow(job, out, poll: float = 0.2, poll_max: float = 1.0, print_logs: bool = True,
           task: str | None = None, stderr: bool = False, progress=None) -> str:
    """Write the job's stdout (or stderr) to OUT as it grows until the job ends; the final
    state. PROGRESS, if given, gets a line each time the job's state changes."""
    import codecs


    whole = bool(job.tasks) and task is None  # every array task's log, under headers
    pos = 0
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    delay = poll
    last = None
    while True:
        st = job.state
        if progress is not None and st != last and not job._final(st):
            progress.write(f"job {job.id}: {st}\n")
            progress.flush()
            last = st
        if print_logs:
            if whole:
                text = job.logs(stderr)
                new, pos = text[pos:], max(pos, len(text))
            else:
                data = job.log_bytes(stderr, task, pos)
                pos += len(data)
                new = decoder.decode(data)
            if new:
                out.write(new)
                out.flush()
                delay = poll
        if job._final(st):
            break
        time.sleep(delay)
        delay = min(delay * 2, poll_max)
    return st


def final_exit_code(job, state: str) -> int:
    """The exit code `ctk job submit --wait` ends with: the job's own (ExitCode), else 0 for
    COMPLETED and 1 for any other end."""
    code = job.exit_code()
    if code is None or (code == 0 and state != "COMPLETED"):
        return 0 if state == "COMPLETED" else 1
    return code
