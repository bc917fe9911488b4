"""ctk deploy / status / destroy / exec / env: a deployment on its target."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .. import ansible_env
from ..errors import EXIT_FAIL, EXIT_OK, UserError
from ..model import NO_SPOT_HINT, LabSettings
from .common import BlueprintRef, blueprint_args, progress_of


def add_parsers(sub) -> None:
    _add_deploy(sub)
    _add_status(sub)
    _add_destroy(sub)
    _add_exec(sub)
    _add_preempt(sub)
    _add_env(sub)


def _add_deploy(sub) -> None:
    p = sub.add_parser("deploy", help="build the images and bring the cluster up (local target: this machine)",
                       description="Create or update the deployment folder, build or reuse the images, and "
                       "boot one lab node per Slurm node (controller, computes, login) on this machine. "
                       "Re-running it is idempotent: unchanged nodes keep running, a changed partition "
                       "layout is applied with `scontrol reconfigure`, a dead node is brought back. "
                       "With a ctk/target/ssh module (the ssh target) it configures the listed machines "
                       "over SSH with ctk's Ansible roles instead (install, then configure phase); "
                       "re-running it changes nothing on an unchanged cluster. With a ctk/target/gcp "
                       "module (the gcp target) it writes DIR/gcp/, a Cluster Toolkit blueprint that "
                       "builds the images on slurm-gcp's, and runs `gcluster deploy` on it when gcluster "
                       "is on PATH (else it prints that command).")
    blueprint_args(p)
    p.add_argument("-o", "--out", metavar="DIR", help="deployment folder (default: ./DEPLOYMENT_NAME)")
    p.add_argument("--max-nodes", type=int, default=None, metavar="N",
                   help="cap each nodeset at N nodes on the local target, static ones first (default: 4); "
                   "dynamic nodes are powered up only when a job needs them")
    p.add_argument("--chaos", metavar="RATE", type=chaos_rate, default=None,
                   help="local target: preempt a random powered-up Spot node at this mean interval, "
                   "for soak runs (90s, 5m, or a rate such as 2/min; 0 or off: none); overrides the "
                   "ctk/target/local module's chaos_interval. What was preempted, and when, is in "
                   "DIR/lab/power/events.log and ctk status")
    p.add_argument("--chaos-seed", type=int, default=None, metavar="N",
                   help="seed of --chaos's random choices (default: the module's chaos_seed, else a new one)")
    p.add_argument("-w", "--overwrite", action="store_true",
                   help="replace the cluster the folder holds when it is another one (another cluster name or "
                   "target): stop it, keep its /home, /root and accounting database, deploy this one. Without "
                   "-w such a deploy is refused (exit 2) before anything changes")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(run=deploy)


def _add_status(sub) -> None:
    p = sub.add_parser("status", help="nodes and partitions of a deployed cluster (lab or ssh target)")
    p.add_argument("dir", nargs="?", default=".", help="deployment folder (default: .)")
    p.add_argument("--json", action="store_true", help="machine-readable status")
    p.set_defaults(run=status)


def _add_destroy(sub) -> None:
    p = sub.add_parser("destroy", help="stop every daemon of a lab cluster and free its addresses and ports, "
                       "keeping its users' data (ssh target: stop the daemons on the hosts; packages stay)",
                       description="Stop a deployment. On a lab, what users made stays in DIR/lab and is "
                       "listed: /home and /root of the nodes (lab/home, lab/root), the accounting database "
                       "(lab/slurmdbd) and the controller's saved state (lab/slurmctld: queued jobs, the next "
                       "job id); the next `ctk deploy` into DIR uses them again, and --purge deletes them. "
                       "A lab whose folder was removed while it ran is still found (through its lease) and "
                       "stopped: give the folder's old path, or --lease N.")
    p.add_argument("dir", nargs="?", help="deployment folder")
    p.add_argument("--lease", type=int, metavar="N",
                   help="stop the lab holding lease N (its addresses are 198.18.4N.0/22, its bridge ctkbrN) whose "
                   "folder was removed; a lab whose folder still exists is refused (exit 2) unless --force")
    p.add_argument("--force", action="store_true",
                   help="with --lease: stop the lab even though its folder still exists (it may be another "
                   "user's or a running test's)")
    p.add_argument("--purge", action="store_true",
                   help="also delete the lab's /home, /root, accounting database and controller state (each "
                   "deleted folder is listed)")
    p.set_defaults(run=destroy)


def _add_exec(sub) -> None:
    p = sub.add_parser("exec", help="run a command inside a node of a lab cluster (ssh target: on a host, over SSH)",
                       usage="ctk exec [--user NAME] DIR NODE -- CMD [ARG...]",
                       description="Run CMD in NODE. On a lab it runs as root of the node (with the node's "
                       "capabilities only: it cannot reach the host), or as --user NAME, an account of the "
                       "node (the lab's user, for example).")
    p.add_argument("--user", metavar="NAME", help="on a lab: run as this account of the node (default root)")
    p.add_argument("dir", help="deployment folder")
    p.add_argument("node", help="node name (see ctk status)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="command to run (after --)")
    p.set_defaults(run=exec_)


def _add_preempt(sub) -> None:
    p = sub.add_parser("preempt", help="preempt Spot nodes of a lab as Google Cloud does (notice, SIGTERM, "
                       "down); Slurm requeues their jobs",
                       description="Give each NODE (a powered-up node of a Spot or preemptible nodeset of a "
                       "lab) its preemption notice: after NOTICE seconds Slurm marks it DOWN (its jobs are "
                       "requeued and get SIGTERM), every process of the node gets SIGTERM, and the node goes "
                       "down. It stays powered down (a static node too) until the next job that needs it powers "
                       "it up again. The lab's agent does it; ctk status and DIR/lab/power/events.log show "
                       "each step. Exit status: 0 done, 2 a NODE that is not a powered-up Spot or "
                       "preemptible node of the lab (nothing is preempted), 1 the agent did not do it.")
    p.add_argument("dir", help="deployment folder (local target)")
    p.add_argument("nodes", nargs="+", metavar="NODE", help="node names or Slurm hostlists (see ctk status)")
    p.add_argument("--notice", type=float, default=None, metavar="SECONDS",
                   help="seconds between the notice and the SIGTERM (default: the lab's preemption_notice, "
                   "30 unless its ctk/target/local module says otherwise)")
    p.add_argument("--wait", action="store_true", help="return once every node is down")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(run=preempt)


def _add_env(sub) -> None:
    p = sub.add_parser("env", help="print exports that point the host's sbatch/srun/squeue at a lab cluster "
                       "(or an ssh target's)",
                       description='Use as: eval "$(ctk env DIR)". On a lab the commands run in its login '
                       "node as the lab's user (the ctk/target/local module's user, researcher unless set), "
                       "in the node's view of the current folder (lab/home/USER is /home/USER there); "
                       "CTK_LAB_USER=root, or --user root, runs them as root.")
    p.add_argument("dir", help="deployment folder")
    p.add_argument("--user", metavar="NAME", help="on a lab: run the commands as this account of its nodes "
                   "(root for an admin's) rather than the lab's user")
    p.set_defaults(run=env)



def chaos_rate(text: str) -> float:
    """--chaos's value as a mean interval in seconds (0: none)."""
    import re

    t = text.strip().lower()
    if t in ("0", "off", "none"):
        return 0.0
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*/\s*(s|sec|min|m|h|hour)", t)
    if m:
        per = {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "hour": 3600}[m.group(2)]
        if float(m.group(1)) > 0:
            return per / float(m.group(1))
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|m|h)?", t)
    if m and float(m.group(1)) > 0:
        return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    raise argparse.ArgumentTypeError(f"{text!r} is not a mean interval (90s, 5m) or a rate (2/min)")


def deploy(args) -> int:
    from .. import targets

    if args.max_nodes is not None and args.max_nodes < 1:
        raise UserError(f"--max-nodes {args.max_nodes}: must be at least 1")
    ansible_env.strategy()  # a wrong CTK_ANSIBLE_STRATEGY stops the deploy before it writes anything
    planned = BlueprintRef.of(args).process()
    dep = planned.deployment
    if args.chaos is not None or args.chaos_seed is not None:
        if not isinstance(dep.settings, LabSettings):
            raise UserError(f"--chaos: the blueprint's target is {dep.target}; preemptions are "
                            "rehearsed on the local target only")
        if args.chaos and not any(ns.spot for ns in dep.nodesets):
            raise UserError(f"--chaos: no nodeset of {args.blueprint} is Spot or preemptible: there would be "
                            "nothing to preempt", hint=NO_SPOT_HINT)
        if args.chaos is not None:
            dep.settings.chaos_interval = args.chaos
        if args.chaos_seed is not None:
            dep.settings.chaos_seed = args.chaos_seed
    out = args.out or os.path.join(".", dep.deployment_name)
    outcome = targets.deploy(planned, out, max_nodes=args.max_nodes, progress=progress_of(args),
                             overwrite=args.overwrite)
    sys.stdout.write(json.dumps(outcome.record, indent=2) + "\n" if args.json else outcome.render())
    return EXIT_OK


def preempt(args) -> int:
    from .. import targets

    target = targets.of_folder(args.dir)
    if args.notice is not None and args.notice < 0:
        raise UserError(f"--notice {args.notice:g}: must be 0 or more")
    rows = target.preempt(args.dir, args.nodes, notice=args.notice, wait=args.wait)
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        for r in rows:
            print(f"{r['node']}: {r['state']}" + (f" ({r['detail']})" if r.get("detail") else ""))
    return EXIT_OK


def status(args) -> int:
    from .. import targets

    st = targets.of_folder(args.dir).status(args.dir)
    sys.stdout.write(json.dumps(st.to_dict(), indent=2) + "\n" if args.json else st.render(args.dir))
    return EXIT_OK if st.healthy else EXIT_FAIL


def destroy(args) -> int:
    from .. import targets

    if (args.dir is None) == (args.lease is None):
        raise UserError("ctk destroy: give a deployment folder or --lease N (not both)",
                        hint="ctk destroy DIR")
    if args.force and args.lease is None:
        raise UserError("ctk destroy --force goes with --lease N", hint="ctk destroy DIR needs no --force")
    print(targets.destroy(args.dir, progress_of(args), lease=args.lease, force=args.force, purge=args.purge))
    return EXIT_OK


def exec_(args) -> int:
    from .. import targets

    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        raise UserError("ctk exec: no command given", hint="ctk exec DIR NODE -- hostname")
    if args.user:
        return targets.of_folder(args.dir).exec(args.dir, args.node, cmd, user=args.user)
    return targets.of_folder(args.dir).exec(args.dir, args.node, cmd)


def env(args) -> int:
    from .. import targets

    sys.stdout.write(targets.of_folder(args.dir).env(args.dir, args.user))
    return EXIT_OK
