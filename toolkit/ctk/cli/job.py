"""ctk job templates / render / submit / status / logs / cancel / list.

Kept light: `ctk job submit` imports only what a submit needs (the template engine and the
scheduler), not the blueprint engine or the targets' builders."""

from __future__ import annotations

import json
import sys
import time

from ..errors import UserError
from .common import Parser, show_help


def add_parsers(sub) -> None:
    job = sub.add_parser("job", help="render, submit and follow JAX training jobs from sbatch templates",
                         description="Batch scripts from the templates in sbatch/: resources, srun launch, "
                         "JAX/XLA/NCCL/TPU settings, preemption-safe mode. With --deployment the "
                         "accelerator, GPUs per node, network and TPU facts come from the cluster. "
                         "submit/status/logs/cancel/list work on a local deployment (--deployment DIR), "
                         "on any Slurm cluster through its login node over SSH (--host USER@HOST), or, "
                         "run on a login node, on that node's own cluster. "
                         "Exit codes: 0 done, 1 ctk or the cluster failed, 2 refused before anything ran (bad "
                         "arguments, or a job the cluster's partitions would never start); with submit --wait "
                         "the job's own result: 3 it failed (its exit code is printed), 4 it ended otherwise "
                         "(cancelled, time limit, node failure, preemption), 5 it pends for a reason that never "
                         "goes away on its own (it stays queued).")
    job.set_defaults(run=lambda args: show_help(job))
    jsub = job.add_subparsers(dest="job_cmd", metavar="SUBCOMMAND", parser_class=Parser)
    _add_templates(jsub)
    _add_render(jsub)
    _add_submit(jsub)
    _add_status(jsub)
    _add_logs(jsub)
    _add_cancel(jsub)
    _add_list(jsub)
    _add_efficiency(jsub)


def _cluster_args(p, deployment_help="deployment folder of a local cluster") -> None:
    """The flags naming the cluster a subcommand works on."""
    g = p.add_argument_group("cluster (one of; neither: this machine's own Slurm, as on a login node)")
    g.add_argument("--deployment", metavar="DIR", help=deployment_help)
    g.add_argument("--host", metavar="USER@HOST[:PORT]",
                   help="a login node reached over SSH (Fabric); also a Host of your SSH config")
    g.add_argument("-i", "--identity", metavar="FILE", help="with --host: the SSH private key")
    g.add_argument("--ssh-config", metavar="FILE", help="with --host: an SSH config file (default ~/.ssh/config)")


def _job_option_args(p) -> None:
    """The flags that become #SBATCH lines of a rendered job (ctk.jobs.options.JobOptions)."""
    g = p.add_argument_group("job options (each an #SBATCH line after the template's own, which it overrides)")
    g.add_argument("--time", metavar="TIME", help="time limit (HH:MM:SS, D-HH:MM:SS, MM; checked against the "
                   "partition's MaxTime before submission)")
    g.add_argument("--mem", metavar="SIZE", help="memory per node (4G, 512M; default: the partition's "
                   "DefMemPerCPU times the CPUs)")
    g.add_argument("--ntasks-per-node", type=int, metavar="N",
                   help="processes per node (the templates start one per node, or one per GPU on GPU nodes)")
    g.add_argument("--dependency", metavar="DEP", help="start after other jobs: afterok:12, afterany:12:13, "
                   "singleton (ctk job status shows DependencyNeverSatisfied when it cannot be met)")
    g.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable of the job, exported after the #SBATCH lines (repeatable; "
                   "the template's own settings, set later, win)")
    g.add_argument("--chdir", metavar="DIR", help="the folder the job runs in, as the nodes see it; relative "
                   "paths in the command and the logs are in it (default: the folder you submit from, where "
                   "the cluster shares it: this machine's own cluster, a lab's /home; else ~/.ctk-jobs)")
    g.add_argument("--sbatch", action="append", default=[], metavar="OPT", dest="sbatch_args",
                   help="any other sbatch option, as one word (repeatable), e.g. --sbatch=--hold or "
                   "--sbatch=--exclusive")


def _template_args(p) -> None:
    """The template a subcommand renders and its parameters."""
    p.add_argument("template", help="template name (see ctk job templates)")
    p.add_argument("--set", action="append", default=[], metavar="K=V", dest="sets",
                   help="set a template parameter (repeatable; lists as [a, b] or a,b)")
    p.add_argument("--nodes", metavar="N", help="number of nodes (same as --set nodes=N)")
    p.add_argument("--nodeset", metavar="NAME", help="nodeset to run on (default: the default partition's first)")
    p.set_defaults(command=[])  # the words after `--` (split off in main)


def _add_templates(jsub) -> None:
    p = jsub.add_parser("templates", help="the templates and their parameters")
    p.add_argument("--json", action="store_true", help="machine-readable list")
    p.set_defaults(run=templates)


def _add_render(jsub) -> None:
    p = jsub.add_parser("render", help="print the batch script of a template",
                        usage="ctk job render TEMPLATE [--set K=V]... [--nodes N] [--deployment DIR] "
                        "[--nodeset NAME] [--time T] [--mem SIZE] [--ntasks-per-node N] [--dependency DEP] "
                        "[--env K=V]... [--chdir DIR] [--sbatch OPT]... [--check [--host USER@HOST]] "
                        "[-- CMD [ARG...]]",
                        description="Print the batch script. With --check, also ask the cluster whether it "
                        "would run it (sbatch --test-only: nothing is queued); the answer goes to stderr "
                        "and a refusal exits 1.")
    _template_args(p)
    _job_option_args(p)
    _cluster_args(p, "deployment folder whose deployment.json describes the cluster (and, with --check, "
                  "the local cluster that checks it)")
    p.add_argument("--check", action="store_true", help="run sbatch --test-only on the cluster")
    p.set_defaults(run=render)


def _add_submit(jsub) -> None:
    p = jsub.add_parser("submit", help="render a template and submit it; print the job id",
                        usage="ctk job submit TEMPLATE [--deployment DIR | --host USER@HOST] [--set K=V]... "
                        "[--nodes N] [--nodeset NAME] [--time T] [--mem SIZE] [--ntasks-per-node N] "
                        "[--dependency DEP] [--env K=V]... [--chdir DIR] [--sbatch OPT]... [--wait] [--json] "
                        "[-- CMD [ARG...]]",
                        description="Render the template, store the script in the cluster's ~/.ctk-jobs "
                        "(/home/USER/.ctk-jobs in a lab), sbatch it and print the job id. The job runs in "
                        "--chdir, else in the folder you submit from where the cluster shares it (this "
                        "machine's own Slurm; a lab's /home: DIR/lab/home), else in ~/.ctk-jobs (then a "
                        "command naming a relative file, such as train.py, is refused on a lab). Before sbatch "
                        "runs, the job is checked against the partitions (one sinfo call): a partition that "
                        "does not exist, a time above its MaxTime, more nodes than it has, more GPUs or memory "
                        "than its nodes have are refused (exit 2), since Slurm would queue such a job and "
                        "never start it. The job is recorded in the local registry, so status/logs/cancel "
                        "work later. With --host and --deployment, the facts come from the deployment and the "
                        "job goes to the host.")
    _template_args(p)
    _job_option_args(p)
    _cluster_args(p)
    p.add_argument("--wait", action="store_true",
                   help="follow the job to its end: exit 0 if it completed, 3 if it failed (its own exit code is "
                   "printed, and in --json), 4 if it was cancelled, timed out, lost its node or was preempted, "
                   "5 as soon as it pends for a reason that never goes away (DependencyNeverSatisfied, ...)")
    p.add_argument("--json", action="store_true",
                   help="print the job's record as JSON (with --wait: also its final state and exit code)")
    p.set_defaults(run=submit)


def _add_status(jsub) -> None:
    p = jsub.add_parser("status", help="Slurm state of jobs submitted through ctk (one squeue call)",
                        description="States from one squeue call; jobs Slurm no longer lists come from "
                        "the registry (final states seen before), the accounting database (sacct) or, "
                        "in a lab, slurmctld's job completion log.")
    p.add_argument("ids", nargs="*", metavar="ID", help="job ids (default: every job in the registry)")
    _cluster_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable states")
    p.set_defaults(run=status)


def _add_logs(jsub) -> None:
    p = jsub.add_parser("logs", help="print a job's stdout (ID_TASK: one array task's)")
    p.add_argument("id", metavar="ID", help="job id, or ID_TASK for one task of an array job")
    _cluster_args(p)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--stderr", action="store_true", help="the job's stderr instead")
    p.set_defaults(run=logs)


def _add_cancel(jsub) -> None:
    p = jsub.add_parser("cancel", help="cancel a job (scancel)")
    p.add_argument("id", metavar="ID", help="job id")
    _cluster_args(p)
    p.set_defaults(run=cancel)


def _add_list(jsub) -> None:
    p = jsub.add_parser("list", help="jobs submitted through ctk to a cluster (the local registry)")
    _cluster_args(p)
    p.add_argument("--json", action="store_true", help="the registry's records as JSON")
    p.set_defaults(run=list_)


def _add_efficiency(jsub) -> None:
    p = jsub.add_parser("efficiency", help="how well a finished job used its CPUs and memory (as seff does)",
                        description="CPU time against the CPUs the job held for its run, and its largest "
                        "task's memory against the memory it held, from one sacct call (the cluster "
                        "keeps accounting). An array job gets a report for each task.")
    p.add_argument("id", metavar="ID", help="job id, or ID_TASK for one task of an array job")
    _cluster_args(p)
    p.add_argument("--json", action="store_true", help="the figures as JSON")
    p.set_defaults(run=efficiency)



def _options(args):
    from ..jobs.options import JobOptions

    return JobOptions(time=args.time, mem=args.mem, ntasks_per_node=args.ntasks_per_node, dependency=args.dependency,
                      env=tuple(args.env), chdir=args.chdir, sbatch=tuple(args.sbatch_args)).check()


def _ref(args):
    from ..jobs.commands import ClusterRef

    return ClusterRef(args.deployment, args.host, args.identity, args.ssh_config)


def templates(args) -> int:
    from ..jobs import commands as jobcli

    sys.stdout.write(jobcli.templates_text(args.json))
    return 0


def render(args) -> int:
    from ..jobs import commands as jobcli

    if not args.check and (args.host or args.identity or args.ssh_config):
        raise UserError("--host, --identity and --ssh-config go with --check",
                        hint="ctk job render TEMPLATE --check --host USER@HOST")
    script = jobcli.render_cli(args.template, args.sets, args.nodes, args.deployment, args.nodeset, args.command,
                               _options(args))
    if not args.check:
        sys.stdout.write(script)
        return 0
    note = jobcli.network_note(args.deployment, args.nodeset) if args.deployment else None
    if note:
        print(note, file=sys.stderr)
    if args.deployment and not args.host and jobcli.templates.load_deployment(args.deployment).traits.hands_off_to_gcluster:
        raise UserError(f"--deployment {args.deployment} is on Google Cloud: sbatch --test-only runs on its login node",
                        hint=f"ctk job render {args.template} --check --deployment {args.deployment} --host LOGIN_NODE")
    cluster = jobcli.cluster_of(_ref(args))
    try:
        jobcli.check_limits(script, [], cluster)  # exit 2: a job the partitions would never start
        ok, answer = jobcli.check_script(script, cluster)
    finally:
        cluster.close()
    sys.stdout.write(script)
    sys.stdout.flush()
    print(f"sbatch --test-only: {'accepted' if ok else 'REFUSED'}: {answer}", file=sys.stderr)
    return 0 if ok else 1


def submit(args) -> int:
    from ..jobs import commands as jobcli

    req = jobcli.SubmitRequest(args.template, tuple(args.sets), args.nodes, args.nodeset, tuple(args.command),
                               _ref(args), tuple(args.sbatch_args), _options(args))
    job = jobcli.submit_cli(req)
    d = getattr(job, "displaced", None)  # the API's Job; stand-ins may lack it
    if d:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(d.get("submitted") or 0))
        print(f"note: Slurm gave id {job.id} before, to the {d.get('template')} job submitted through ctk on "
              f"{when}; that earlier job is listed as {d['id']} now (ctk job status {d['id']})", file=sys.stderr)
    if not args.json:
        print(job.id, flush=True)
    code = 0
    if args.wait:
        state = jobcli.follow(job, sys.stdout, print_logs=False, progress=sys.stderr)
        code = jobcli.final_exit_code(job, state)
        own = job.exit_code() if job._final(state) else None
        if job._final(state):
            print(f"job {job.id}: {state} (exit code {own})", file=sys.stderr)
        else:
            print(f"job {job.id}: pending for {job.reason}, which never goes away on its own: "
                  f"{job.never_starts}. It stays queued: ctk job cancel {job.id} removes it", file=sys.stderr)
    if args.json:
        out = {k: v for k, v in job.record.items() if k != "params"}
        out["params"] = job.record.get("params")
        if args.wait:
            out.update(state=state, exit_code=own, reason=job.reason or None, ctk_exit=code)
        print(json.dumps(out, indent=2, default=str))
    return code


def status(args) -> int:
    from ..jobs import commands as jobcli

    sys.stdout.write(jobcli.status_text(jobcli.status_rows(args.ids, _ref(args)), args.json))
    return 0


def logs(args) -> int:
    from ..jobs import commands as jobcli

    job, task = jobcli.load_job(args.id, _ref(args))
    if args.follow:
        jobcli.follow(job, sys.stdout, task=task, stderr=args.stderr)
    else:
        text, lost = job.read_logs(stderr=args.stderr, task=task)
        sys.stdout.write(text)
        if lost:
            sys.stdout.flush()
            state = job.state
            if state in NOT_STARTED:
                print(f"job {args.id} is {state}: no log yet", file=sys.stderr)
            else:
                from ..errors import Failure
                raise Failure(f"job {args.id} ({state}): its log {', '.join(lost)} is not there: deleted, or "
                              "never written (a job cancelled before it started writes none)",
                              hint=f"ctk job status {args.id}")
    return 0


NOT_STARTED = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD")


def cancel(args) -> int:
    from ..jobs import commands as jobcli

    job, _ = jobcli.load_job(args.id, _ref(args))
    job.cancel()
    print(f"job {args.id}: cancel requested", file=sys.stderr)
    return 0


def list_(args) -> int:
    from ..jobs import commands as jobcli

    sys.stdout.write(jobcli.list_text(_ref(args), args.json))
    return 0


def efficiency(args) -> int:
    from ..jobs import commands as jobcli
    from ..jobs.efficiency import efficiency as job_efficiency
    from ..jobs.efficiency import report

    cluster = jobcli.cluster_of(_ref(args))
    try:
        found = job_efficiency(cluster, args.id)
    finally:
        cluster.close()
    if args.json:
        print(json.dumps([e.to_dict() for e in found], indent=2))
    else:
        sys.stdout.write("".join(report(e) for e in found))
    return 0
