"""The lab's plan (pure): which nodes a deployment becomes on this machine, scaled down to fit
(LabPlan, plan_lab), whether they fit in its memory, and where Slurm's daemons, files and
ports are in the lab's nodes (layout, the paths in a node)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from ...errors import UserError
from ...model import DEFAULT_BASE, HEALTH_CHECK, JAX_TASK_PROLOG, Deployment, ImageSpec
from ...render.slurmconf import NodeLayout
from ...sandbox import netns
from .. import leases
from ..labstate import MEMORY_RESERVE_MB, NODE_MB, LabNode, available_mb

DEFAULT_MAX_NODES = 4  # per nodeset: fits 2 cores and 24 GiB with room to spare
# The image of nodes whose blueprint names none (a Cluster Toolkit blueprint's), or one the lab
# cannot build. Its Slurm is the release slurm-gcp's images carry (26.05: slurm_version 26.05.2
# in slurm-gcp's slurm role), which is what such a blueprint's cluster runs on Google Cloud, not
# debian-13's own 24.11; and it is blueprints/lab.yaml's image layer for layer, so a store that
# built the lab builds nothing more for it.
DEFAULT_IMAGE = ImageSpec(name="ctk-local", module_id="", base=DEFAULT_BASE,
                          roles=["common", "munge", "slurm", "jax"], stack="jax-cpu", slurm_release="26.05")
GPU_DIR_IN_NODE = "/etc/ctk-gpus"
MUNGE_KEY_IN_NODE = "ctk/munge.key"  # under /run (tmpfs)
SLURM_KEY_IN_NODE = "ctk/slurm.key"  # auth/slurm's key, under /run (tmpfs)
JWT_KEY_IN_NODE = "ctk/jwt_hs256.key"  # auth/jwt's key (the controller's only), under /run (tmpfs)
REST_PORT = 6820  # slurmrestd, on the controller's address (Slurm's own default port)
PROMETHEUS_PORT = 9090  # the Prometheus server (the metrics role), on the controller's address
EXPORTER_PORT = 9100  # each node's Prometheus node exporter, on its own address
PROMETHEUS_CONF_IN_NODE = "ctk/prometheus.yml"  # under /run (tmpfs), the controller's
BACKUP_SLURMCTLD_TIMEOUT = 10  # an HA lab's backup takes over 10 s after the primary goes silent
SLURMD_TIMEOUT = 15  # a lab node that stops answering is DOWN (and its jobs requeued) within ~20 s
JOBCOMP_IN_NODE = "/var/spool/slurmctld/jobcomp.log"
# Accounting on the controller: MariaDB on its loopback (nothing outside the node reaches it),
# slurmdbd on a port of the lab's lease. slurmdbd reads slurmdbd.conf from its SLURM_CONF's
# folder, here one on the controller's tmpfs, so no other node sees the database password.
DB_DIR_IN_NODE = "/var/lib/mysql"
DB_PORT = 3306
DBD_DIR_IN_NODE = "ctk/dbd"  # under /run
DBD_PORT_SLOT = leases.PORTS_PER_LEASE - 2  # the nodes use the slots below it
# slurmctld's ResumeProgram and SuspendProgram in the lab: each hands its nodes (a Slurm
# hostlist) to the lab's agent on the host, as a request file in a folder that only the
# controller sees; the agent boots or stops them (targets/labagent.py). files.py writes them.
RESUME_SCRIPT, SUSPEND_SCRIPT, READY_SCRIPT = "ctk-resume", "ctk-suspend", "ctk-nodes-ready"
POWER_SCRIPTS = tuple(f"etc/slurm/{x}" for x in (RESUME_SCRIPT, SUSPEND_SCRIPT, READY_SCRIPT))
POWER_DIR_IN_NODE = "/var/spool/ctk-power"
# RebootProgram in every node: it does nothing there. A node Slurm reboots (`scontrol reboot`,
# a roll-out's reboot when idle) is marked REBOOT_ISSUED, and the lab's agent on the host, which
# watches for that mark, stops the node and boots it from its image, as a cloud's reboot call.
REBOOT_SCRIPT = "ctk-reboot"


@dataclass
class LabPlan:
    """The lab a deployment becomes: its lease N, the deployment scaled down, its nodes, the
    images they boot, and what the scaling changed (NOTES)."""

    n: int
    dep: Deployment  # scaled down
    nodes: list[LabNode]
    images: list[ImageSpec]
    notes: list[str] = field(default_factory=list)
    containers: list[ImageSpec] = field(default_factory=list)  # built here; every compute node has each

    def node(self, name: str) -> LabNode | None:
        return next((x for x in self.nodes if x.name == name), None)

    @property
    def controller(self) -> LabNode:
        return next(x for x in self.nodes if x.role == "controller")

    @property
    def backup(self) -> LabNode | None:
        """The backup controller (enable_backup_controller), if the lab has one."""
        return next((x for x in self.nodes if x.role == "controller" and x.name != self.controller.name), None)

    @property
    def cloud_nodes(self) -> list[LabNode]:
        return [x for x in self.nodes if x.dynamic]

    @property
    def needs_agent(self) -> bool:
        """Whether the lab runs its agent: it has nodes to power up, or nodes to preempt."""
        return any(x.dynamic or x.spot for x in self.nodes)


def scale(dep: Deployment, max_nodes: int) -> tuple[Deployment, list[str]]:
    """A copy of the deployment with every nodeset capped at `max_nodes` nodes, static ones
    first; dynamic nodes stay dynamic (powered up on demand)."""
    out = copy.deepcopy(dep)
    notes = []
    for ns in out.nodesets:
        want = ns.node_count
        static = min(ns.node_count_static, max_nodes)
        dynamic = min(ns.node_count_dynamic_max, max_nodes - static)
        if static + dynamic < want:
            notes.append(f"nodeset {ns.name}: {want} nodes capped to {static + dynamic} (--max-nodes {max_nodes})")
        ns.node_count_static, ns.node_count_dynamic_max = static, dynamic
        if ns.gpu_count:
            assert ns.gpu_type is not None  # planning gives a nodeset with GPUs their gres type
            notes.append(f"nodeset {ns.name}: {ns.gpu_count} x {ns.gpu_type.upper()} per node emulated "
                         "as Slurm gres (no devices)")
        if ns.tpu_type:
            notes.append(f"nodeset {ns.name}: TPU {ns.tpu_type} hosts run as CPU nodes")
    for lg in out.logins:
        if lg.count > 1:
            notes.append(f"login {lg.name}: {lg.count} instances reduced to 1")
            lg.count = 1
    return out, notes


def _local_images(dep: Deployment, notes: list[str]) -> tuple[list[ImageSpec], dict[str, str]]:
    """Images to build here, and for each image name the name of the one that replaces it."""
    # The image builders load only for a deploy: ctk status, env and exec (`eval "$(ctk env)"`
    # runs often) import this module and need none of them.
    from ...images.base import SUITES

    images, names = [], {}

    for img in dep.images:
        if img.base in SUITES:
            images.append(img)
            names[img.name] = img.name
        else:
            notes.append(f"image {img.name} ({img.base}) is built on the gcp target; "
                         f"local nodes boot {DEFAULT_IMAGE.name} ({DEFAULT_IMAGE.base}, {DEFAULT_IMAGE.stack}, "
                         f"Slurm {DEFAULT_IMAGE.slurm_release})")
            names[img.name] = DEFAULT_IMAGE.name
    return images, names


def plan_lab(dep: Deployment, n: int, max_nodes: int = DEFAULT_MAX_NODES) -> LabPlan:
    """The lab of lease N that DEP becomes, each nodeset capped at MAX_NODES nodes: its nodes,
    their addresses and ports, and the images they boot (built here; one that cannot be is
    replaced by DEFAULT_IMAGE)."""
    if dep.controller is None:
        raise UserError("the blueprint has no Slurm controller: nothing to deploy on the local target")
    scaled, notes = scale(dep, max_nodes)
    images, names = _local_images(scaled, notes)
    default = images[0].name if images else DEFAULT_IMAGE.name
    if not images or any(v == DEFAULT_IMAGE.name for v in names.values()) or any(
            (x.image or default) not in names and x.image for x in scaled.nodesets):
        if DEFAULT_IMAGE.name not in [i.name for i in images]:
            images.append(DEFAULT_IMAGE)

    def image_of(name: str | None) -> str:
        if name is None:
            return default
        if name not in names:
            notes.append(f"image {name!r} is not declared in the blueprint; using {default}")
            names[name] = default
        return names[name]

    computes = sum(ns.node_count for ns in scaled.nodesets)
    total = 1 + computes + sum(lg.count for lg in scaled.logins) + (1 if scaled.controller and scaled.controller.backup else 0)
    if total > netns.MAX_HOSTS:
        raise UserError(f"the lab would have {total} nodes; a lab has at most {netns.MAX_HOSTS}",
                        hint="lower --max-nodes, or the blueprint's node counts")
    slurmd_port = leases.port(n, leases.PORTS_PER_LEASE - 1)
    ctl = scaled.controller
    assert ctl is not None  # a copy of DEP, which has one (checked above)
    nodes_: list[LabNode] = [LabNode(ctl.hostname, "controller", leases.addr(n, 1),
                                     leases.port(n, 0), image_of(ctl.image), host=1)]
    host = 2
    for ns in scaled.nodesets:
        for i, name in enumerate(ns.node_names()):
            # Every compute node's slurmd listens on the same port, each on its own address.
            nodes_.append(LabNode(name, "compute", leases.addr(n, host), slurmd_port, image_of(ns.image),
                                  ns.name, host=host, dynamic=i >= ns.node_count_static, spot=ns.spot,
                                  flex=ns.flex_max_run_duration))
            host += 1
    logins = [(name, lg.image) for lg in scaled.logins for name in lg.node_names()]
    for i, (name, image) in enumerate(logins):  # sshd on a port of the lease each
        nodes_.append(LabNode(name, "login", leases.addr(n, host), leases.port(n, 1 + i), image_of(image), host=host))
        host += 1
    if ctl.backup:  # the backup slurmctld: a controller node of its own, on the same port at its address
        nodes_.append(LabNode(f"{ctl.hostname}-backup", "controller", leases.addr(n, host), leases.port(n, 0),
                              image_of(ctl.image), host=host))
    from ...images.base import SUITES  # see _local_images

    containers = [c for c in scaled.containers if c.base in SUITES]
    notes += [f"container image {c.name} ({c.base}) is not built on the local target" for c in scaled.containers
              if c.base not in SUITES]
    return LabPlan(n, scaled, nodes_, images, notes, containers)


def memory_mb(nodes_: list[LabNode]) -> int:
    """What the nodes take of this machine's memory when all of them are up and idle."""
    return sum(NODE_MB[x.role] for x in nodes_)


def check_memory(plan: LabPlan, running: set[str]) -> list[str]:
    """Refuse a lab whose always-up nodes do not fit in this machine's memory; a note where its
    dynamic nodes, all powered up, would not. RUNNING: nodes already up (their memory is in use)."""
    avail = available_mb()
    if avail is None:
        return []
    static = [x for x in plan.nodes if not x.dynamic and x.name not in running]
    need = memory_mb(static) + MEMORY_RESERVE_MB
    if need > avail:
        raise UserError(f"the lab's {len(static)} always-up node(s) need about {memory_mb(static)} MB and this "
                        f"machine has {avail} MB available (with {MEMORY_RESERVE_MB} MB kept for jobs)",
                        hint="lower --max-nodes or node_count_static; dynamic nodes take memory only when "
                             "a job powers them up")
    dynamic = [x for x in plan.cloud_nodes if x.name not in running]
    if dynamic and need + memory_mb(dynamic) > avail:
        return [f"{len(dynamic)} dynamic node(s) need about {memory_mb(dynamic)} MB more when all are powered "
                f"up; {avail - need} MB are left: the lab's agent refuses to power up nodes beyond that"]
    return []


def accounting(plan: LabPlan) -> bool:
    """Whether the lab keeps Slurm's accounting: the blueprint asks for it (the default) and
    the controller's image has the slurm role, which installs slurmdbd and MariaDB."""
    images = {img.name: img for img in plan.images}
    return (plan.dep.controller is not None and plan.dep.controller.accounting
            and "slurm" in images[plan.controller.image].roles)


def node_image(plan: LabPlan, x: LabNode) -> ImageSpec | None:
    """The image node X boots."""
    return next((img for img in plan.images if img.name == x.image), None)


def has_role(plan: LabPlan, x: LabNode, role: str) -> bool:
    img = node_image(plan, x)
    return img is not None and role in img.roles


def rest(plan: LabPlan) -> bool:
    """Whether the lab's controller runs slurmrestd (Slurm's REST API, JWT tokens): where its
    image has the slurm role of Slurm 24.11 or later (the releases ctk tests it on)."""
    img = node_image(plan, plan.controller)
    return has_role(plan, plan.controller, "slurm") and img is not None and img.slurm is not None \
        and img.slurm >= (24, 11)


def metrics_url(plan: LabPlan) -> str | None:
    """The Prometheus server's URL, where the controller's image has the metrics role."""
    return f"http://{plan.controller.addr}:{PROMETHEUS_PORT}" if has_role(plan, plan.controller, "metrics") else None


def prometheus_conf(plan: LabPlan) -> str:
    """The server's scrape configuration: slurmctld's OpenMetrics endpoints (Slurm 25.11+) and
    the node exporter of every node whose image has the metrics role, each labelled with its
    node's name. Every 5 s: a lab is for watching things happen."""
    ctl = f"{plan.controller.addr}:{plan.controller.port}"
    lines = ["# Generated by ctk: the lab's Prometheus (the metrics role)", "global:",
             "  scrape_interval: 5s", "  evaluation_interval: 5s", "scrape_configs:"]
    release = plan.dep.slurm()
    if release is not None and release >= (25, 11):
        for what in ("jobs", "nodes", "partitions", "scheduler", "jobs-users-accts"):
            lines += [f"  - job_name: slurm-{what}", f"    metrics_path: /metrics/{what}",
                      "    static_configs:", f"      - targets: ['{ctl}']"]
    lines += ["  - job_name: node", "    static_configs:"]
    for x in plan.nodes:
        if has_role(plan, x, "metrics"):
            lines += [f"      - targets: ['{x.addr}:{EXPORTER_PORT}']", f"        labels: {{node: {x.name}}}"]
    return "\n".join(lines) + "\n"


def rest_url(plan: LabPlan) -> str | None:
    return f"http://{plan.controller.addr}:{REST_PORT}" if rest(plan) else None


def layout(plan: LabPlan) -> NodeLayout:
    """Where the lab's Slurm daemons listen and keep their files, as slurm.conf says it."""
    computes = [x for x in plan.nodes if x.role == "compute"]
    images = {img.name: img for img in plan.images}
    acct = accounting(plan)
    backup = plan.backup
    return NodeLayout(
        controller_addr=plan.controller.addr, controller_port=plan.controller.port,
        node_addr={x.name: x.addr for x in computes}, node_port={},  # each slurmd on SlurmdPort
        state_dir="/var/spool/slurmctld", spool_dir="/var/spool/slurmd", log_dir="/var/log/slurm",
        pid_dir="/run", slurm_user="root", controller_host=plan.controller.name,
        slurmd_port=leases.port(plan.n, leases.PORTS_PER_LEASE - 1),
        gpu_dev_dir=GPU_DIR_IN_NODE, job_comp_loc=JOBCOMP_IN_NODE, slurmd_timeout=SLURMD_TIMEOUT,
        bind_own_address=True,  # every daemon, and srun, binds its node's address
        slurmdbd_addr=plan.controller.name if acct else None,
        slurmdbd_port=leases.port(plan.n, DBD_PORT_SLOT) if acct else None,
        jwt_key=f"/run/{JWT_KEY_IN_NODE}" if rest(plan) else None,
        backup_host=backup.name if backup else None, backup_addr=backup.addr if backup else None,
        slurmctld_timeout=BACKUP_SLURMCTLD_TIMEOUT if backup else 120,
        task_prolog=JAX_TASK_PROLOG if all(images[x.image].python for x in computes) else None,
        health_check=HEALTH_CHECK,
        reboot_program=f"/etc/slurm/{REBOOT_SCRIPT}",
        # A wave of short jobs on the lab's few small nodes starts as soon as the last one
        # ends, not up to 3 s later (200 one-CPU tasks on the debug partition: 133 s with
        # Slurm's default, bench/array.py).
        batch_sched_delay=0,
        # Power saving, where the lab has dynamic nodes.
        cloud_nodes=[x.name for x in plan.cloud_nodes],
        resume_program=f"/etc/slurm/{RESUME_SCRIPT}" if plan.cloud_nodes else None,
        suspend_program=f"/etc/slurm/{SUSPEND_SCRIPT}" if plan.cloud_nodes else None,
        nodes_ready_program=f"/etc/slurm/{READY_SCRIPT}" if plan.cloud_nodes else None)
