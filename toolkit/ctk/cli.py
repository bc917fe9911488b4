"""Command line: parses arguments and calls into the packages. No logic lives here."""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import __version__
from .blueprint.errors import UserError as UserError_

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 2 with a hint, like every other bad input
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}\n  hint: run '{self.prog} --help'", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _bp_args(p):
    p.add_argument("blueprint", help="blueprint YAML file (Cluster Toolkit format)")
    p.add_argument("--vars", action="append", default=[], metavar="K=V[,K=V]",
                   help="set deployment variables (repeatable; values are YAML: lists and maps allowed)")
    p.add_argument("-d", "--deployment-file", metavar="FILE",
                   help="deployment file with vars (overridden by --vars)")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="ctk", description="Slurm cluster images and jobs for AI/ML training, "
                 "from Cluster Toolkit blueprints.",
                 epilog="Exit codes: 0 success, 1 failure while running, 2 bad input (blueprint, flags).")
    ap.add_argument("--version", action="version", version=f"ctk {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("validate", help="check a blueprint; report every error with file:line:col",
                       description="Load, expand and validate a blueprint. All errors are reported at "
                       "once; exit 2 if there is any.")
    _bp_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable result")

    p = sub.add_parser("expand", help="print the expanded blueprint",
                       description="Resolve vars, expressions and `use` wiring; print the result as YAML.")
    _bp_args(p)
    p.add_argument("-o", "--out", metavar="FILE", help="write to FILE instead of stdout")

    p = sub.add_parser("show", help="tables of images, partitions, nodesets, unsupported modules")
    _bp_args(p)
    p.add_argument("--json", action="store_true", help="print the Deployment model as JSON")
    p.add_argument("--target", default="local", help="target the report is for (default: local)")

    p = sub.add_parser("create", help="write the deployment folder",
                       description="Write the deployment folder (expanded blueprint, deployment.json, "
                       "slurm.conf and friends) atomically.")
    _bp_args(p)
    p.add_argument("-o", "--out", metavar="DIR", help="folder to write (default: ./DEPLOYMENT_NAME)")
    p.add_argument("-w", "--overwrite", action="store_true", help="replace an existing deployment folder")

    p = sub.add_parser("deploy", help="build the images and bring the cluster up (local target: this machine)",
                       description="Create or update the deployment folder, build or reuse the images, and "
                       "boot one lab node per Slurm node (controller, computes, login) on this machine. "
                       "Re-running it is idempotent: unchanged nodes keep running, a changed partition "
                       "layout is applied with `scontrol reconfigure`, a dead node is brought back. "
                       "With a ctk/target/ssh module (the ssh target) it configures the listed machines "
                       "over SSH with ctk's Ansible roles instead (install, then configure phase); "
                       "re-running it changes nothing on an unchanged cluster.")
    _bp_args(p)
    p.add_argument("-o", "--out", metavar="DIR", help="deployment folder (default: ./DEPLOYMENT_NAME)")
    p.add_argument("--max-nodes", type=int, default=None, metavar="N",
                   help="cap each nodeset at N nodes on the local target (default: 4)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    p.add_argument("--json", action="store_true", help="machine-readable result")

    job = sub.add_parser("job", help="render, submit and follow JAX training jobs from sbatch templates",
                         description="Batch scripts from the templates in sbatch/: resources, srun launch, "
                         "JAX/XLA/NCCL/TPU settings, preemption-safe mode. With --deployment the "
                         "accelerator, GPUs per node, network and TPU facts come from the cluster. "
                         "submit/status/logs/cancel/list work on a local deployment (--deployment DIR), "
                         "on any Slurm cluster through its login node over SSH (--host USER@HOST), or, "
                         "run on a login node, on that node's own cluster. "
                         "Exit codes: 0 done, 1 the cluster failed or refused, 2 bad arguments.")
    jsub = job.add_subparsers(dest="job_cmd", metavar="SUBCOMMAND", parser_class=_Parser)

    def cluster_args(p, deployment_help="deployment folder of a local cluster"):
        g = p.add_argument_group("cluster (one of; neither: this machine's own Slurm, as on a login node)")
        g.add_argument("--deployment", metavar="DIR", help=deployment_help)
        g.add_argument("--host", metavar="USER@HOST[:PORT]",
                       help="a login node reached over SSH (Fabric); also a Host of your SSH config")
        g.add_argument("-i", "--identity", metavar="FILE", help="with --host: the SSH private key")
        g.add_argument("--ssh-config", metavar="FILE", help="with --host: an SSH config file (default ~/.ssh/config)")

    def template_args(p):
        p.add_argument("template", help="template name (see ctk job templates)")
        p.add_argument("--set", action="append", default=[], metavar="K=V", dest="sets",
                       help="set a template parameter (repeatable; lists as [a, b] or a,b)")
        p.add_argument("--nodes", metavar="N", help="number of nodes (same as --set nodes=N)")
        p.add_argument("--nodeset", metavar="NAME", help="nodeset to run on (default: the default partition's first)")
        p.set_defaults(command=[])  # the words after `--` (split off in main)

    p = jsub.add_parser("templates", help="the templates and their parameters")
    p.add_argument("--json", action="store_true", help="machine-readable list")
    p = jsub.add_parser("render", help="print the batch script of a template",
                        usage="ctk job render TEMPLATE [--set K=V]... [--nodes N] [--deployment DIR] "
                        "[--nodeset NAME] [--check [--host USER@HOST]] [-- CMD [ARG...]]",
                        description="Print the batch script. With --check, also ask the cluster whether it "
                        "would run it (sbatch --test-only: nothing is queued); the answer goes to stderr "
                        "and a refusal exits 1.")
    template_args(p)
    cluster_args(p, "deployment folder whose deployment.json describes the cluster (and, with --check, "
                 "the local cluster that checks it)")
    p.add_argument("--check", action="store_true", help="run sbatch --test-only on the cluster")

    p = jsub.add_parser("submit", help="render a template and submit it; print the job id",
                        usage="ctk job submit TEMPLATE [--deployment DIR | --host USER@HOST] [--set K=V]... "
                        "[--nodes N] [--nodeset NAME] [--wait] [-- CMD [ARG...]]",
                        description="Render the template, store the script in the cluster's ~/.ctk-jobs "
                        "(/home/.ctk-jobs in a lab), sbatch it there and print the job id. The job is "
                        "recorded in the local registry, so status/logs/cancel work later. With --host "
                        "and --deployment, the facts come from the deployment and the job goes to the host.")
    template_args(p)
    cluster_args(p)
    p.add_argument("--wait", action="store_true", help="follow the job to its end and exit with its exit code")
    p.add_argument("--sbatch", action="append", default=[], metavar="OPT", dest="sbatch_args",
                   help="an extra sbatch option, given as one word (repeatable), e.g. "
                   "--sbatch=--dependency=afterok:12 or --sbatch=--hold")
    p.add_argument("--json", action="store_true",
                   help="print the job's record as JSON (with --wait: also its final state and exit code)")
    p = jsub.add_parser("status", help="Slurm state of jobs submitted through ctk (one squeue call)",
                        description="States from one squeue call; jobs Slurm no longer lists come from "
                        "the registry (final states seen before), the accounting database (sacct) or, "
                        "in a lab, slurmctld's job completion log.")
    p.add_argument("ids", nargs="*", metavar="ID", help="job ids (default: every job in the registry)")
    cluster_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable states")
    p = jsub.add_parser("logs", help="print a job's stdout (ID_TASK: one array task's)")
    p.add_argument("id", metavar="ID", help="job id, or ID_TASK for one task of an array job")
    cluster_args(p)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--stderr", action="store_true", help="the job's stderr instead")
    p = jsub.add_parser("cancel", help="cancel a job (scancel)")
    p.add_argument("id", metavar="ID", help="job id")
    cluster_args(p)
    p = jsub.add_parser("list", help="jobs submitted through ctk to a cluster (the local registry)")
    cluster_args(p)
    p.add_argument("--json", action="store_true", help="the registry's records as JSON")

    p = sub.add_parser("status", help="nodes and partitions of a deployed cluster (lab or ssh target)")
    p.add_argument("dir", nargs="?", default=".", help="deployment folder (default: .)")
    p.add_argument("--json", action="store_true", help="machine-readable status")

    p = sub.add_parser("destroy", help="stop every daemon of a lab cluster and free its addresses and ports "
                       "(ssh target: stop the daemons on the hosts; packages stay)")
    p.add_argument("dir", help="deployment folder")

    p = sub.add_parser("exec", help="run a command inside a node of a lab cluster (ssh target: on a host, over SSH)",
                       usage="ctk exec DIR NODE -- CMD [ARG...]")
    p.add_argument("dir", help="deployment folder")
    p.add_argument("node", help="node name (see ctk status)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="command to run (after --)")

    p = sub.add_parser("env", help="print exports that point the host's sbatch/srun/squeue at a lab cluster "
                       "(or an ssh target's)",
                       description='Use as: eval "$(ctk env DIR)"')
    p.add_argument("dir", help="deployment folder")

    img = sub.add_parser("image", help="build, test, list and export node images",
                         description="Node images are built locally as cached layers (debootstrap base, "
                         "then one layer per Ansible role, each applied by Packer over SSH into a build "
                         "node). Layers live under $CTK_STATE_DIR (default /var/lib/ctk).")
    isub = img.add_subparsers(dest="image_cmd", metavar="SUBCOMMAND", parser_class=_Parser)
    p = isub.add_parser("build", help="build the blueprint's images (cached layers), then verify them")
    _bp_args(p)
    p.add_argument("--only", metavar="NAME", help="build only this image")
    p.add_argument("--no-verify", action="store_true", help="skip the testinfra and functional checks")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p = isub.add_parser("test", help="verify built images: testinfra suites and functional checks")
    _bp_args(p)
    p.add_argument("--only", metavar="NAME", help="test only this image")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    p = isub.add_parser("list", help="images in the layer store")
    p.add_argument("--json", action="store_true", help="machine-readable list")
    p = isub.add_parser("export", help="export a built image as a folder, tar.zst, OCI archive or ext4 disk")
    p.add_argument("name", help="image name (see ctk image list)")
    p.add_argument("--format", required=True, choices=["dir", "tar", "oci", "ext4"], help="output format")
    p.add_argument("-o", "--out", required=True, metavar="PATH", help="where to write it")
    p.add_argument("-w", "--overwrite", action="store_true", help="replace PATH if it exists")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    p = isub.add_parser("gc", help="remove layers no image uses, and leftovers of interrupted builds")
    p.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    job_command = None
    if argv[:1] == ["job"] and "--" in argv:  # ctk job render ... -- CMD: CMD is the user's, verbatim
        i = argv.index("--")
        argv, job_command = argv[:i], argv[i + 1:]
    args = ap.parse_args(argv)
    if job_command is not None:
        args.command = job_command
    if not args.cmd:
        ap.print_help()
        return EXIT_USAGE
    from .blueprint import BlueprintErrors, UserError
    from .cluster.daemons import DaemonError
    from .images.build import ImageBuildError
    from .images.verify import ImageVerifyError
    from .runner import CommandError
    try:
        if args.cmd == "image":
            return _image(args, ap)
        if args.cmd == "job":
            return _job(args, ap)
        if args.cmd in ("status", "destroy", "exec", "env"):
            return _lab(args)
        return _run(args)
    except BlueprintErrors as e:
        if getattr(args, "json", False):
            print(json.dumps({"ok": False, "errors": [x.to_dict() for x in e.errors]}, indent=2))
        else:
            print(e.render(), file=sys.stderr)
            n = len(e.errors)
            print(f"{n} error{'s' if n != 1 else ''}", file=sys.stderr)
        return EXIT_USAGE
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (ImageBuildError, ImageVerifyError, CommandError, DaemonError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _warn(exp) -> None:
    for w in exp.warnings:
        print(w.render(getattr(exp, "sources", {})).replace(": error: ", ": warning: ", 1), file=sys.stderr)


def _lab(args) -> int:
    from .cluster import local, ssh

    if ssh.is_ssh_deployment(args.dir):
        return _ssh_lab(args, ssh, local)
    if args.cmd == "status":
        st = local.status_local(args.dir)
        sys.stdout.write(json.dumps(st, indent=2) + "\n" if args.json else local.format_status(st))
        return EXIT_OK if st["controller_reachable"] and all(x["running"] for x in st["nodes"]) else EXIT_FAIL
    if args.cmd == "destroy":
        stopped = local.destroy_local(args.dir)
        print(f"destroyed {args.dir}: stopped {len(stopped)} node(s)")
        return EXIT_OK
    if args.cmd == "exec":
        cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not cmd:
            raise UserError_("ctk exec: no command given\n  hint: ctk exec DIR NODE -- hostname")
        return local.exec_local(args.dir, args.node, cmd)
    if args.cmd == "env":
        sys.stdout.write(local.env_local(args.dir))
        return EXIT_OK
    raise AssertionError(args.cmd)


def _ssh_lab(args, ssh, local) -> int:
    """status, destroy, exec and env of a deployment on the ssh target."""
    if args.cmd == "status":
        st = ssh.status_ssh(args.dir)
        sys.stdout.write(json.dumps(st, indent=2) + "\n" if args.json else local.format_status(st))
        return EXIT_OK if st["controller_reachable"] and all(x["running"] for x in st["nodes"]) else EXIT_FAIL
    if args.cmd == "destroy":
        with local.deployment_lock(args.dir):
            stopped = ssh.destroy_ssh(args.dir)
        print(f"destroyed {args.dir}: stopped the daemons on {len(stopped)} host(s) "
              "(packages, /etc/slurm and the munge key stay on them)")
        return EXIT_OK
    if args.cmd == "exec":
        cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not cmd:
            raise UserError_("ctk exec: no command given\n  hint: ctk exec DIR NODE -- hostname")
        return ssh.exec_ssh(args.dir, args.node, cmd)
    if args.cmd == "env":
        sys.stdout.write(ssh.env_ssh(args.dir))
        return EXIT_OK
    raise AssertionError(args.cmd)


def _deploy_ssh(args, exp, out) -> int:
    from . import deployfolder
    from .cluster import local, ssh
    from .progress import Progress

    dep = exp.deployment
    progress = Progress(quiet=args.quiet or args.json)
    if args.max_nodes:
        progress.say("note: --max-nodes is for the local target; the ssh target deploys every listed host")
    with local.deployment_lock(out):
        deployfolder.update(exp, dep, out)
        res = ssh.deploy_ssh(dep, out, progress=progress)
    if args.json:
        print(json.dumps(vars(res), indent=2))
        return EXIT_OK
    changed = {phase: sum(v.values()) for phase, v in res.changed.items()}
    print(f"{dep.deployment_name}: {len(res.hosts)} host(s) configured over SSH in {res.seconds:.1f}s "
          f"(changed: install {changed.get('install', 0)}, configure {changed.get('configure', 0)})")
    print(f"status:   ctk status {out}")
    print(f"stop it:  ctk destroy {out}")
    return EXIT_OK


def _deploy(args, exp) -> int:
    from . import deployfolder
    from .cluster import local
    from .progress import Progress

    dep = exp.deployment
    out = args.out or os.path.join(".", dep.deployment_name)
    if dep.target == "ssh":
        return _deploy_ssh(args, exp, out)
    if dep.target != "local":
        raise UserError_(f"target {dep.target!r} is not deployable yet; use the local target")
    progress = Progress(quiet=args.quiet or args.json)
    with local.deployment_lock(out):
        deployfolder.update(exp, dep, out)
        res = local.deploy_local(dep, out, max_nodes=args.max_nodes or local.DEFAULT_MAX_NODES, progress=progress)
    if args.json:
        print(json.dumps(vars(res), indent=2))
        return EXIT_OK
    total = len(res.booted) + len(res.restarted) + len(res.kept)
    print(f"{dep.deployment_name}: {total} node(s) up in {res.seconds:.1f}s "
          f"(booted {len(res.booted)}, restarted {len(res.restarted)}, unchanged {len(res.kept)}"
          + (", reconfigured" if res.reconfigured else "") + ")")
    print(f'use it:   eval "$(ctk env {out})"; sinfo; srun -N2 hostname')
    print(f"stop it:  ctk destroy {out}")
    return EXIT_OK


def _image(args, ap) -> int:
    from .images import commands
    from .progress import Progress

    if not args.image_cmd:
        ap.parse_args(["image", "--help"])
    progress = Progress(quiet=getattr(args, "quiet", False) or getattr(args, "json", False))
    if args.image_cmd == "list":
        sys.stdout.write(commands.list_images(args.json))
        return EXIT_OK
    if args.image_cmd == "gc":
        removed = commands.gc(args.dry_run)
        print(("would remove" if args.dry_run else "removed") + f" {len(removed)} item(s)")
        for r in removed:
            print(f"  {r}")
        return EXIT_OK
    if args.image_cmd == "export":
        from .images.export import export_image
        print(export_image(args.name, args.format, args.out, progress=progress, overwrite=args.overwrite))
        return EXIT_OK
    from .blueprint import process

    exp = process(args.blueprint, args.vars, args.deployment_file)
    _warn(exp)
    if args.image_cmd == "build":
        res = commands.build(exp.deployment, args.only, not args.no_verify, progress)
        if args.json:
            print(json.dumps(res, indent=2))
        elif args.quiet:
            for r in res:
                print(f"{r['image']}: built {','.join(r['built']) or '-'}; cached {','.join(r['cached']) or '-'}")
        return EXIT_OK
    if args.image_cmd == "test":
        for r in commands.test(exp.deployment, args.only, progress):
            print(f"{r['image']}: {r['summary']}")
        return EXIT_OK
    raise AssertionError(args.image_cmd)


def _job(args, ap) -> int:
    from .jobs import commands as jobcli

    if not args.job_cmd:
        ap.parse_args(["job", "--help"])
    if args.job_cmd == "templates":
        sys.stdout.write(jobcli.templates_text(args.json))
        return 0
    if args.job_cmd == "render":
        if not args.check and (args.host or args.identity or args.ssh_config):
            raise UserError_("--host, --identity and --ssh-config go with --check\n"
                            "  hint: ctk job render TEMPLATE --check --host USER@HOST")
        script = jobcli.render_cli(args.template, args.sets, args.nodes, args.deployment, args.nodeset,
                                   args.command)
        if not args.check:
            sys.stdout.write(script)
            return 0
        cluster = jobcli.cluster_of(args)
        try:
            ok, answer = jobcli.check_script(script, cluster)
        finally:
            cluster.close()
        sys.stdout.write(script)
        sys.stdout.flush()
        print(f"sbatch --test-only: {'accepted' if ok else 'REFUSED'}: {answer}", file=sys.stderr)
        return 0 if ok else 1
    if args.job_cmd == "submit":
        job = jobcli.submit_cli(args)
        if not args.json:
            print(job.id, flush=True)
        code = 0
        if args.wait:
            state = jobcli.follow(job, sys.stdout, print_logs=False, progress=sys.stderr)
            code = jobcli.final_exit_code(job, state)
            print(f"job {job.id}: {state} (exit code {code})", file=sys.stderr)
        if args.json:
            out = {k: v for k, v in job.record.items() if k != "params"}
            out["params"] = job.record.get("params")
            if args.wait:
                out.update(state=state, exit_code=code)
            print(json.dumps(out, indent=2, default=str))
        return code
    if args.job_cmd == "status":
        sys.stdout.write(jobcli.status_text(jobcli.status_rows(args.ids, args), args.json))
        return 0
    if args.job_cmd == "logs":
        job, task = jobcli.load_job(args.id, args)
        if args.follow:
            jobcli.follow(job, sys.stdout, task=task, stderr=args.stderr)
        else:
            sys.stdout.write(job.logs(stderr=args.stderr, task=task))
        return 0
    if args.job_cmd == "cancel":
        job, task = jobcli.load_job(args.id, args)
        job.cancel()
        print(f"job {args.id}: cancel requested", file=sys.stderr)
        return 0
    if args.job_cmd == "list":
        sys.stdout.write(jobcli.list_text(args, args.json))
        return 0
    raise AssertionError(args.job_cmd)


def _run(args) -> int:
    from .blueprint import process

    exp = process(args.blueprint, args.vars, args.deployment_file)
    dep = exp.deployment
    if args.cmd == "validate":
        if args.json:
            print(json.dumps({"ok": True, "errors": [], "warnings": [w.to_dict() for w in exp.warnings]},
                             indent=2))
        else:
            _warn(exp)
            print(f"{args.blueprint}: ok ({sum(1 for _ in exp.blueprint.modules())} modules, "
                  f"{len(dep.partitions)} partitions, {len(dep.nodesets)} nodesets)")
        return EXIT_OK
    _warn(exp)
    if args.cmd == "expand":
        from . import atomic
        from .yamlout import dump
        text = dump(exp.to_blueprint())
        if args.out:
            atomic.write_file(args.out, text)
        else:
            sys.stdout.write(text)
        return EXIT_OK
    if args.cmd == "show":
        if args.json:
            print(json.dumps(dep.to_dict(), indent=2))
        else:
            from .report import show
            sys.stdout.write(show(dep, args.target))
        return EXIT_OK
    if args.cmd == "deploy":
        return _deploy(args, exp)
    if args.cmd == "create":
        from .deployfolder import create
        out = args.out or os.path.join(".", dep.deployment_name)
        create(exp, dep, out, args.overwrite)
        print(f"created deployment folder {out}")
        return EXIT_OK
    raise AssertionError(args.cmd)
