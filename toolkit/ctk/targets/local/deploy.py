"""`ctk deploy` on the local target: bring the lab to the state the deployment describes,
idempotently. Its steps, in order: check lab/ and the cluster it holds, take the lease and
plan the lab, build the images, prepare lab/ (folders, identity, keys), write the lab's
files, stop the nodes the plan dropped, boot what is new or changed, start the agent, record
the state and wait for Slurm. A deploy that fails stops what it started; a first one gives
back the lab's network and lease too."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from ... import atomic
from ...connect.base import IDENTITY_FILE
from ...errors import UserError
from ...model import Deployment, LabSettings
from ...progress import Progress
from ...render.hostlist import compress
from ...sandbox import netns, secretfiles
from ...sandbox import node as nodes
from .. import leases
from ..base import IDENTITY_HINT
from ..labagent import image_version
from ..labclient import client_node, slurm
from ..labstate import LabNode, LabState, NodeRecord, lab_dir, load_state, save_state
from .agent import agent_config, restart_agent, start_agent, stop_agent
from .commands import write_wrappers
from .destroy import stop_all, stop_leftovers
from .files import (
    check_accounts,
    cluster_secrets,
    lab_files,
    node_spec,
    slurmdbd_conf,
    spec_hash,
    ssh_keys,
    user_home,
)
from .identity import (
    IDENTITY,
    identity_clash,
    lab_identity,
    new_identity,
    running_release,
    slurm_change,
)
from .plan import (
    DEFAULT_MAX_NODES,
    POWER_SCRIPTS,
    REBOOT_SCRIPT,
    LabPlan,
    accounting,
    check_memory,
    metrics_url,
    plan_lab,
    rest,
    rest_url,
)
from .ready import wait_accounting, wait_nodes

if TYPE_CHECKING:
    from ...images.store import Store

BOOT_WORKERS = 8  # compute nodes booted at once (each mostly waits for its daemons to start)


@dataclass
class DeployResult:
    """What a deploy did, node by node (ctk deploy --json prints it)."""

    deployment_dir: str
    booted: list[str]
    restarted: list[str]
    kept: list[str]
    stopped: list[str]
    reconfigured: bool
    rolling: list[str]  # compute nodes that reboot into their changed image once their jobs end
    notes: list[str]
    seconds: float


@dataclass
class _Nodes:
    """What a deploy does to the lab's nodes, filled in as it goes: on a failure, what it
    started (or was starting) is stopped."""

    booted: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    rolling: list[str] = field(default_factory=list)
    unrolled: list[str] = field(default_factory=list)  # kept, on the spec a pending roll-out would have left
    records: list[NodeRecord] = field(default_factory=list)  # the state's nodes, with their hashes
    specs: dict[str, nodes.NodeSpec] = field(default_factory=dict)
    to_boot: list[tuple[LabNode, nodes.NodeSpec]] = field(default_factory=list)
    started: list[str] = field(default_factory=list)  # state folders of the nodes booted so far


def _boot_all(n: int, to_boot: list[tuple[LabNode, nodes.NodeSpec]], started: list[str], progress: Progress) -> None:
    """Boot the controller first, then the compute nodes side by side, then the login nodes;
    STARTED gets the state folder of every node that booted (the first failure is raised once
    the others have finished)."""
    lock = threading.Lock()

    def boot(x: LabNode, spec: nodes.NodeSpec) -> None:
        progress.task(f"boot {x.role} {x.name} ({x.addr})")
        netns.create(n, x.host)
        nodes.boot(spec)
        with lock:
            started.append(spec.state_dir)

    for role in ("controller", "compute", "login"):
        batch = [(x, spec) for x, spec in to_boot if x.role == role]
        if role != "compute" or len(batch) < 2:
            for x, spec in batch:
                boot(x, spec)
            continue
        with ThreadPoolExecutor(min(BOOT_WORKERS, len(batch))) as pool:
            futures = [pool.submit(boot, x, spec) for x, spec in batch]
        errors = [e for f in futures if (e := f.exception()) is not None]
        if errors:
            raise errors[0]


def _check_folder(dep: Deployment, deployment_dir: str, ldir: str) -> dict | None:
    """Refuse, before anything is written or started, a lab/ with a planted link or a foreign
    key in lab/secrets, or one that holds another cluster; the identity lab/ holds."""
    if os.path.lexists(ldir):
        secretfiles.check_tree(ldir, "secrets")
    ident = lab_identity(deployment_dir)
    if ident and ident["cluster"] != dep.slurm_cluster_name:
        raise UserError(identity_clash(deployment_dir, ident, dep), hint=IDENTITY_HINT.format(dir=deployment_dir))
    return ident


def _plan(dep: Deployment, deployment_dir: str, n: int, old: LabState | None, max_nodes: int,
          held: dict | None) -> tuple[LabPlan, list[str]]:
    """The lab's plan and the notes of its memory check; a refusal of a lab that never ran
    gives its lease back."""
    ldir = os.path.abspath(lab_dir(deployment_dir))
    running = {x.name for x in (old.nodes if old else [])
               if nodes.node_alive(os.path.join(ldir, "nodes", x.name)) is not None}
    try:
        plan = plan_lab(dep, n, max_nodes)
        refusal = slurm_change(deployment_dir, held, dep)
        if refusal:
            raise refusal
        return plan, check_memory(plan, running)
    except UserError:
        if old is None:  # refused before anything ran: the lease goes back
            leases.release(deployment_dir)
        raise


def _images(plan: LabPlan, store: Store, progress: Progress) -> dict[str, list[str]]:
    """The layers of each image the lab boots, built where they are missing or out of date."""
    # The image builders load only here: ctk status, env and exec import this package and need
    # none of them.
    from ...images.build import build_image, current_layers

    layers: dict[str, list[str]] = {}
    for img in plan.images + plan.containers:
        rec = store.image(img.name)
        # rebuilt where this ctk's roles or the stack's lock make other layers (a roll-out)
        if (rec is None or rec["spec"] != asdict(img) or rec["layers"] != current_layers(img, store)
                or not all(store.has(k) for k in rec["layers"])):
            build_image(img, store, progress)
            rec = store.image(img.name)
            assert rec is not None  # build_image records the image it built
        layers[img.name] = rec["layers"]
    return layers


def _prepare(plan: LabPlan, dep: Deployment, ldir: str, held: dict | None, lowerdirs: dict[str, list[str]]) -> dict:
    """lab/ made ready for the nodes: its folders and their modes, its identity, the lab's
    user's home, the SSH keys, the emulated GPUs, the cluster's secrets and slurmdbd.conf; the
    identity."""
    check_accounts(plan, lowerdirs)
    for d in ("home", "root", "slurmctld", "slurmdbd", "gpus", "nodes", "power/requests"):
        os.makedirs(os.path.join(ldir, d), exist_ok=True)
    # What a node's root writes in the shared folders (a setuid binary, a file with
    # capabilities) is root's on the host too: no host user but root may reach lab/.
    os.chmod(ldir, 0o700)
    ident = new_identity(held, dep)
    atomic.write_if_changed(os.path.join(ldir, IDENTITY), json.dumps(ident) + "\n", 0o600)
    os.chmod(os.path.join(ldir, "home"), 0o755)
    user_home(plan, ldir)
    os.chmod(os.path.join(ldir, "root"), 0o700)
    os.chmod(os.path.join(ldir, "power"), 0o700)
    ssh_keys(plan, ldir)
    max_gpus = max([ns.gpu_count for ns in plan.dep.nodesets] + [0])
    for i in range(max_gpus):
        link = os.path.join(ldir, "gpus", f"nvidia{i}")
        if not os.path.islink(link):
            os.symlink("/dev/null", link)
    acct = accounting(plan)
    cluster_secrets(ldir, plan.dep.controller is not None and plan.dep.controller.slurm_auth, acct, rest(plan))
    if acct:
        atomic.write_if_changed(os.path.join(ldir, "secrets", "slurmdbd.conf"), slurmdbd_conf(plan, ldir), 0o600)
    return ident


def _write_files(plan: LabPlan, ldir: str, ident: dict) -> tuple[dict[str, str], list[str]]:
    """The lab's files written where they changed, and those the plan no longer has removed;
    (the files, the paths that changed)."""
    files = lab_files(plan, ldir)
    files[f"etc/slurm/{IDENTITY_FILE}"] = json.dumps({"cluster": ident["cluster"], "id": ident["id"]}) + "\n"
    changed = [rel for rel, text in files.items() if atomic.write_if_changed(os.path.join(ldir, rel), text)]
    for rel in ("etc/slurm/gres.conf", *POWER_SCRIPTS):
        if rel not in files and os.path.exists(os.path.join(ldir, rel)):
            os.unlink(os.path.join(ldir, rel))
            changed.append(rel)
    for rel in (*POWER_SCRIPTS, f"etc/slurm/{REBOOT_SCRIPT}"):
        if rel in files:
            os.chmod(os.path.join(ldir, rel), 0o755)
    return files, changed


def _node_set_changed(old_nodes: dict[str, NodeRecord], want: dict[str, LabNode]) -> bool:
    """Whether nodes come or go, or move (address, port, dynamic): Slurm 22.05 adds or moves
    nodes only on a restart of its daemons."""
    return set(old_nodes) != set(want) or any(
        (old_nodes[k].addr, old_nodes[k].port, old_nodes[k].dynamic) != (want[k].addr, want[k].port, want[k].dynamic)
        for k in want if k in old_nodes)


def _stop_dropped(ldir: str, n: int, old_nodes: dict[str, NodeRecord], want: dict[str, LabNode]) -> list[str]:
    """Stop and remove the nodes the plan no longer has; their names."""
    stopped = []
    for name, x in old_nodes.items():
        if name not in want:
            nodes.stop(os.path.join(ldir, "nodes", name))
            netns.remove(n, int(x.host or x.addr.rsplit(".", 1)[1]))
            shutil.rmtree(os.path.join(ldir, "nodes", name), ignore_errors=True)
            stopped.append(name)
    return stopped


def _sort_nodes(plan: LabPlan, specs: dict[str, nodes.NodeSpec], files: dict[str, str],
                old_nodes: dict[str, NodeRecord], node_set_changed: bool, run: _Nodes) -> None:
    """Decide each node's fate, in boot order, into RUN: kept (healthy, booted with the same
    spec, and no restart of every daemon needed), left powered down (a dynamic node), stopped
    (a dynamic node that runs: slurmctld restarts with it powered down), rolled (a healthy
    static compute node whose spec changed, its image most often: Slurm reboots it into it once
    its jobs end, see _roll; its jobs outlive a restart of the controller, whose state is saved),
    or (re)booted. A static compute node is judged by the spec it booted with (its spec.json),
    not by what the last deploy recorded: a roll-out that has not reached it yet, or one taken
    back by deploying its old spec again (unrolled: its pending reboot is cancelled)."""
    for x in sorted(plan.nodes, key=lambda x: {"controller": 0, "compute": 1, "login": 2}[x.role]):
        spec = specs[x.name]
        h = spec_hash(spec, files)
        running_now = nodes.node_alive(spec.state_dir) is not None  # up, or booting (a killed deploy's)
        healthy = nodes.node_pid(spec.state_dir) is not None and not nodes.dead_services(spec.state_dir)
        prev = old_nodes.get(x.name)
        booted = nodes.booted_spec(spec.state_dir) if x.role == "compute" and not x.dynamic else None
        same = prev is not None and (prev.hash == h if booted is None else asdict(booted) == asdict(spec))
        if healthy and same and not (node_set_changed and x.role != "login"):
            run.kept.append(x.name)
            if prev is not None and prev.hash != h:
                run.unrolled.append(x.name)
        elif healthy and prev is not None and x.role == "compute" and not x.dynamic and not node_set_changed:
            run.rolling.append(x.name)
        elif x.dynamic and not running_now:
            pass  # powered down: the agent boots it when a job needs it
        elif running_now and x.dynamic:  # slurmctld restarts with it powered down
            nodes.stop(spec.state_dir)
            netns.remove(plan.n, x.host)
            run.stopped.append(x.name)
        else:
            if running_now:
                nodes.stop(spec.state_dir)
                run.restarted.append(x.name)
            else:
                run.booted.append(x.name)
            run.to_boot.append((x, spec))
        run.records.append(NodeRecord(**asdict(x), hash=h, image_version=image_version(spec.lowerdirs)))


def _bring_up(dep: Deployment, deployment_dir: str, plan: LabPlan, old: LabState | None, ident: dict | None,
              store: Store, layers: dict[str, list[str]], max_nodes: int, ready_timeout: float,
              progress: Progress, run: _Nodes) -> bool:
    """Everything a deploy does once its images are built (see the module's doc), into RUN;
    whether slurmctld was reconfigured in place."""
    ldir = os.path.abspath(lab_dir(deployment_dir))
    n = plan.n
    ident = _prepare(plan, dep, ldir, ident, {name: store.lowerdirs(ks) for name, ks in layers.items()})
    acct = accounting(plan)
    files, changed = _write_files(plan, ldir, ident)
    netns.ensure_bridge(n)
    write_wrappers(deployment_dir, client_node(plan.nodes), plan.dep.settings_of(LabSettings).user)

    old_nodes = {x.name: x for x in (old.nodes if old else [])}
    want = {x.name: x for x in plan.nodes}
    node_set_changed = _node_set_changed(old_nodes, want)
    conf_changed = any(rel.startswith("etc/slurm/") for rel in changed)
    run.stopped += _stop_dropped(ldir, n, old_nodes, want)

    # Until the deploy completes, status and destroy find the nodes it boots from here.
    save_state(deployment_dir, dataclasses.replace(old, complete=False) if old else LabState(
        n=n, deployment=dep.deployment_name, nodes=[NodeRecord(**asdict(x)) for x in plan.nodes],
        notes=plan.notes, max_nodes=max_nodes, complete=False))
    # Slurm 22.05 adds or moves nodes only on a restart of its daemons; a change of
    # partitions or limits needs no more than `scontrol reconfigure`.
    containers = {c.name: store.lowerdirs(layers[c.name]) for c in plan.containers}
    specs = {x.name: node_spec(plan, x, ldir, store.lowerdirs(layers[x.image]), containers) for x in plan.nodes}
    run.specs = specs
    # The agent stops (its reboots and boots under way finished) until the deploy is done: the
    # two must not stop or boot the same node at once. It starts again with the new specs.
    stop_agent(deployment_dir)
    _sort_nodes(plan, specs, files, old_nodes, node_set_changed, run)
    _boot_all(n, run.to_boot, run.started, progress)
    reconfigured = False
    if conf_changed and not node_set_changed and run.kept and any(r == plan.controller.name for r in run.kept):
        slurm(deployment_dir, "scontrol", "reconfigure")
        reconfigured = True
    # The agent runs in every lab: it carries out Slurm's reboots (a roll-out's), and powers
    # dynamic nodes up and down, and preempts Spot nodes, where the lab has them.
    start_agent(deployment_dir, agent_config(plan, deployment_dir, run.specs))
    if run.rolling or run.unrolled:
        _roll(deployment_dir, plan, run.rolling, run.unrolled, layers, progress)
    save_state(deployment_dir, LabState(n=n, deployment=dep.deployment_name, nodes=run.records, notes=plan.notes,
                                        max_nodes=max_nodes, complete=True, accounting=acct,
                                        cluster=dep.slurm_cluster_name, agent=True,
                                        user=dep.settings_of(LabSettings).user, rest=rest_url(plan),
                                        metrics=metrics_url(plan)))
    wait_nodes(deployment_dir, plan, ready_timeout, progress, but=run.rolling)
    if acct:
        wait_accounting(deployment_dir, plan, ready_timeout, progress)
    return reconfigured


ROLL_REASON = "ctk roll-out"  # the start of the reason of a node a roll-out drained


def _roll(deployment_dir: str, plan: LabPlan, names: list[str], unrolled: list[str], layers: dict[str, list[str]],
          progress: Progress) -> None:
    """A rolling update of NAMES: Slurm drains each one (no new job starts there), and once its
    jobs have ended reboots it (`scontrol reboot ASAP`, reboot when idle), which the agent does
    with the node's new spec; the node then takes jobs again (nextstate=RESUME). An idle node
    reboots at once; a running job is never cut short. A node that was out of service for
    another reason (drained by an admin or the health check, down) comes back DOWN with that
    reason, as it went. UNROLLED: nodes a roll-out had not reached and that now keep their spec:
    their reboot is cancelled (Slurm undrains what the reboot drained)."""
    out = slurm(deployment_dir, "sinfo", "-h", "-N", "-o", "%N|%T|%E", check=False).stdout
    reasons = {p[0]: (p[1], p[2]) for p in (ln.split("|", 2) for ln in out.splitlines()) if len(p) == 3}
    pending = [n for n in unrolled if "@" in reasons.get(n, ("", ""))[0]
               and reasons[n][1].startswith(ROLL_REASON)]
    if pending:
        progress.task(f"cancel the roll-out of {compress(pending)}: they keep the spec they run")
        slurm(deployment_dir, "scontrol", "cancel_reboot", compress(pending))
    by_image: dict[str, list[str]] = {}
    for x in plan.nodes:
        if x.name in names:
            by_image.setdefault(x.image, []).append(x.name)
    for image, group in sorted(by_image.items()):
        version = layers[image][-1] if layers.get(image) else ""
        why = f"{ROLL_REASON}: image {image} {version}"
        progress.task(f"roll out image {image} ({version}) to {compress(group)}: each reboots once its jobs end")
        out_of_service = {}
        for n in group:
            state, reason = reasons.get(n, ("", ""))
            if ("drain" in state or state.startswith("down")) and reason and reason != "none" \
                    and not reason.startswith(ROLL_REASON):
                out_of_service[n] = reason.split(f" ({ROLL_REASON}")[0]  # its own reason, without earlier roll-outs'
        rest = [n for n in group if n not in out_of_service]
        if rest:
            slurm(deployment_dir, "scontrol", "reboot", "ASAP", "nextstate=RESUME", f"reason={why}", compress(rest))
        for n, reason in sorted(out_of_service.items()):
            slurm(deployment_dir, "scontrol", "reboot", "ASAP", "nextstate=DOWN", f"reason={reason} ({why})", n)


def _undo(deployment_dir: str, n: int, old: LabState | None, run: _Nodes) -> None:
    """After a failed deploy: stop what it started or was starting (a node still booting in a
    pool thread); what was already running before stays as it was. A lab that never ran before
    gives back its network and its lease too."""
    for sd in run.started + [spec.state_dir for _, spec in run.to_boot]:
        nodes.stop(sd)
    if old is not None:
        restart_agent(deployment_dir)  # stopped for the deploy (_bring_up): as it was configured
    if old is None:
        stop_agent(deployment_dir)
        stop_all(deployment_dir)
        try:
            os.unlink(os.path.join(lab_dir(deployment_dir), "state.json"))
        except FileNotFoundError:
            pass
        netns.remove_lab(n)
        leases.release(deployment_dir)
    else:
        save_state(deployment_dir, old)


def deploy_local(dep: Deployment, deployment_dir: str, *, max_nodes: int = DEFAULT_MAX_NODES,
                 progress: Progress | None = None, store: Store | None = None,
                 ready_timeout: float = 60.0) -> DeployResult:
    """Bring the lab cluster to the state the deployment describes; idempotent. Dynamic nodes
    are left powered down (the lab's agent boots them when Slurm asks)."""
    progress = progress or Progress()
    t0 = time.monotonic()
    ident = _check_folder(dep, deployment_dir, os.path.abspath(lab_dir(deployment_dir)))
    n = leases.lease(deployment_dir)
    old = load_state(deployment_dir)
    if ident and "slurm" not in ident and old is not None:  # recorded by an earlier ctk without it
        ident = {**ident, **running_release(deployment_dir)}
    plan, mem_notes = _plan(dep, deployment_dir, n, old, max_nodes, ident)
    # A lab left running when its folder was removed holds this lease's addresses: stop it.
    orphans = stop_leftovers(deployment_dir, only_orphans=True)
    if orphans:
        progress.say(f"note: stopped {len(orphans)} node(s) of an earlier lab whose folder was removed")
    for note in plan.notes + mem_notes:
        progress.say(f"note: {note}")
    from ...images.store import Store  # see _images

    store = store or Store()
    layers = _images(plan, store, progress)
    run = _Nodes()
    try:
        reconfigured = _bring_up(dep, deployment_dir, plan, old, ident, store, layers, max_nodes, ready_timeout,
                                 progress, run)
    except BaseException:
        _undo(deployment_dir, n, old, run)
        raise
    notes = plan.notes + mem_notes
    if run.rolling:
        notes.append(f"rolling out a change of {compress(run.rolling)} (its image, or how it boots): each node is "
                     "drained and reboots into it once its jobs end (`ctk status` shows each node's image)")
    if run.unrolled:
        notes.append(f"{compress(run.unrolled)} keep the spec they run: the roll-out that had not reached them "
                     "is cancelled")
    return DeployResult(deployment_dir, run.booted, run.restarted, run.kept, run.stopped, reconfigured,
                        run.rolling, notes, time.monotonic() - t0)
