"""What `ctk job` prints: the logic behind the command line, kept out of ctk.cli."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UserError
from . import templates

if TYPE_CHECKING:
    from .options import JobOptions


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
               nodeset: str | None, command: list[str], options=None) -> str:
    params = parse_sets(sets, nodes)
    cluster = templates.load_deployment(deployment) if deployment else None
    if nodeset and not deployment:
        raise UserError("--nodeset needs --deployment DIR")
    script = templates.render(template, params, command, cluster, nodeset)
    return options.check().apply(script) if options is not None else script


def network_note(deployment: str, nodeset: str | None) -> str | None:
    """What the GPUs of the job's nodeset talk over, and where that comes from (for render
    --check); None for a nodeset without GPUs."""
    from ..render import gpunets

    cluster = templates.load_deployment(deployment)
    ns, _ = templates.pick_nodeset(cluster, nodeset)
    if not ns.gpu_count or ns.tpu_type:
        return None
    head = f"network: {ns.network} (nodeset {ns.name}, {ns.machine_type})"
    if not cluster.traits.hands_off_to_gcluster:
        return head
    built = gpunets.wiring(cluster).described.get(ns.name)
    if built:
        line = f"{head}: the Google Cloud hand-off gives it {built.split(': ', 1)[1]} (gcp/blueprint.yaml)"
        if ns.network in ("gpudirect-tcpx", "gpudirect-tcpxo"):
            line += ("; RxDM needs Docker and more on the nodes (gcp/README.md), and where a node lacks them the "
                     "job runs over sockets: see journalctl -t ctk-rxdm there")
        return line
    return f"{head}: the Google Cloud hand-off gives it no GPU network; its GPUs talk over the primary network"


def check_script(script: str, cluster) -> tuple[bool, str]:
    """`sbatch --test-only` of SCRIPT on CLUSTER: (accepted, Slurm's answer)."""
    from . import scheduler

    return scheduler.test_only(cluster, script)


def check_limits(script: str, extra_args: list[str], cluster) -> None:
    """Refuse (exit 2) a job that no partition it names would ever start (one sinfo call)."""
    from . import limits

    limits.check(script, extra_args, limits.ask(cluster))


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
    options: JobOptions | None = None


def cluster_of(ref: ClusterRef):
    """The cluster named by --host (with --identity/--ssh-config) or --deployment."""
    from .clusters import open_cluster

    return open_cluster(ref.deployment, ref.host, ref.identity, ref.ssh_config)


# Arguments of a command that look like files named relative to the folder the job runs in.
_FILE_SUFFIXES = (".py", ".sh", ".json", ".yaml", ".yml", ".toml", ".cfg", ".txt", ".csv", ".npz", ".npy", ".ipynb")


def relative_files(command: list[str]) -> list[str]:
    """The words of COMMAND that name files relative to the job's folder (train.py, ./run.sh,
    data/x.csv): what a job finds only if it runs where the user meant."""
    return [a for a in command[1:] + command[:1]
            if not a.startswith(("-", "/", "~", "$")) and "=" not in a
            and (a.startswith(("./", "../")) or a.endswith(_FILE_SUFFIXES))]


def submit_cli(req: SubmitRequest):
    """Submit as `ctk job submit` does: the job runs in --chdir, else in the folder it is
    submitted from where the cluster shares it (this machine's own Slurm; a lab's /home), else
    in the cluster's jobs folder, which a command naming relative files is refused for on a lab."""
    import os

    from .api import submit
    from .options import JobOptions

    opts = req.options if req.options is not None else JobOptions(sbatch=tuple(req.sbatch_args))
    opts.check()
    cluster = cluster_of(req.cluster)
    chdir = opts.chdir
    if chdir is None:
        try:
            chdir = cluster.chdir_for(os.getcwd())
        except OSError:  # the current folder was removed
            chdir = None
    shared = cluster.shared_folders()
    rel = relative_files(list(req.command))
    if chdir is None and shared is not None and rel:
        here = os.getcwd() if os.path.isdir(".") else "(a removed folder)"
        folders = "; ".join(f"{h} ({n} on the nodes)" for h, n in shared)
        raise UserError(f"the command names {rel[0]}, relative to the folder the job runs in, and the current "
                        f"folder {here} is not shared with the cluster's nodes (shared: {folders}): the job "
                        f"would run in {cluster.jobs_dir} and not find it",
                        hint="put your files in a shared folder and submit from there, or give --chdir FOLDER "
                        "(as the nodes see it), or name the file by its absolute path on the nodes")
    deployment = req.cluster.deployment if req.cluster.host else None
    return submit(req.template, parse_sets(list(req.sets), req.nodes), cluster, list(req.command), req.nodeset,
                  extra_args=list(opts.sbatch), deployment=deployment, options=opts, chdir=chdir)


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


def status_rows(ids: list[str], ref: ClusterRef, cluster=None) -> list[dict]:
    """One row per job asked about (every registered job when IDS is empty): one squeue call,
    and for jobs Slurm has forgotten, one accounting / completion-log query."""
    from . import registry, scheduler

    cluster = cluster or cluster_of(ref)
    d = cluster.registry_dir
    recs = registry.load(d)
    if ids:
        by_id = {str(r["id"]): r for r in recs}
        for j in ids:
            if j not in by_id:
                registry.get(d, j, ref.flags())  # raises the UserError with its hint
        recs = [by_id[j] for j in ids]
    from .limits import never_starts

    known = {str(r["id"]): r["final_state"] for r in recs if r.get("final_state")}
    det = scheduler.details(cluster, [str(r["id"]) for r in recs], known)
    st = {j: s for j, (s, _) in det.items()}
    for r in recs:  # remember final states, for when Slurm no longer lists the jobs
        s = st[str(r["id"])]
        if (s in scheduler.FINAL_STATES and s != scheduler.UNKNOWN and not r.get("final_state")
                and not (s in scheduler.REQUEUED_AFTER and r.get("requeue"))):
            registry.append(d, {"id": str(r["id"]), "final_state": s})
    rows = []
    for r in recs:
        state, reason = det[str(r["id"])]
        rows.append({"id": str(r["id"]), "state": state, "reason": reason or None,
                     "never_starts": never_starts(reason), "template": r.get("template"),
                     "submitted": r.get("submitted"), "script": r.get("script"), "stdout": r.get("stdout")})
    return rows


def status_text(rows: list[dict], as_json: bool) -> str:
    if as_json:
        return json.dumps(rows, indent=2) + "\n"
    shown = [{**r, "reason": (r["reason"] + (f" (never starts: {r['never_starts']})" if r.get("never_starts") else ""))
              if r.get("reason") else ""} for r in rows]
    return _table(shown, ("id", "state", "template", "reason"))


def list_text(ref: ClusterRef, as_json: bool) -> str:
    """The registry's jobs, each with its state now (the same one squeue call as status)."""
    from . import registry

    cluster = cluster_of(ref)  # one connection for the registry and the squeue call
    recs = {str(r["id"]): r for r in registry.load(cluster.registry_dir)}
    states = {r["id"]: r for r in status_rows([], ref, cluster)} if recs else {}
    if as_json:
        return json.dumps([{**r, "state": states[j]["state"], "reason": states[j]["reason"]}
                           for j, r in recs.items()], indent=2) + "\n"
    rows = [{"id": j, "state": states[j]["state"], "template": r.get("template", ""),
             "submitted": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.get("submitted", 0))),
             "command": " ".join(r.get("command") or [])} for j, r in recs.items()]
    return _table(rows, ("id", "state", "template", "submitted", "command"))



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
    """Write the job's stdout (or stderr) to OUT as it grows until the job ends, or pends for
    a reason that never goes away on its own (job.never_starts); the last state. PROGRESS, if
    given, gets a line each time the job's state or pending reason changes."""
    import codecs


    whole = bool(job.tasks) and task is None  # every array task's log, under headers
    pos = 0
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    delay = poll
    last = None
    while True:
        st = job.state
        now = (st, job.reason)
        if progress is not None and now != last and not job._final(st):
            progress.write(f"job {job.id}: {st}" + (f" ({job.reason})" if job.reason else "") + "\n")
            progress.flush()
            last = now
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
        if job._final(st) or job.never_starts:
            break
        time.sleep(delay)
        delay = min(delay * 2, poll_max)
    return st


def final_exit_code(job, state: str) -> int:
    """The exit code `ctk job submit --wait` ends with (errors.EXIT_JOB_*): 0 for a job that
    completed with 0; 3 for one that failed (its own code is printed and in --json); 4 for an
    end that was not the job's (cancelled, timeout, node failure, preemption); 5 for a job that
    pends for a reason that never goes away on its own."""
    from ..errors import EXIT_JOB_ENDED, EXIT_JOB_FAILED, EXIT_JOB_NEVER_STARTS

    if not job._final(state):
        return EXIT_JOB_NEVER_STARTS
    code = job.exit_code()
    if state == "COMPLETED" and not code:
        return 0
    if state in ("COMPLETED", "FAILED", "OUT_OF_MEMORY"):
        return EXIT_JOB_FAILED
    return EXIT_JOB_ENDED
