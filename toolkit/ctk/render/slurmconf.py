"""Render slurm.conf, gres.conf and cgroup.conf from a Deployment.

Pure functions: they read the model and return text, nothing else.  The output is
deterministic (same model in, same bytes out) so that golden files can diff it.

Two flavours:

* production (``layout=None``): one slurmd per host, the controller at
  ``dep.controller.hostname``, standard Debian paths, cgroup-based process tracking.
* local (``layout=NodeLayout(...)``): every node is a slurmd process on one machine,
  each with its own address/port and per-node spool/log/pid files; no cgroup
  enforcement, so it also runs inside containers.

The same text serves every Slurm release ctk's bases carry (22.05 to 24.11): nothing here was
removed or deprecated by 24.11. Slurm 23.11 removed the "none" plugins (task/none,
jobacct_gather/none, jobcomp/none, accounting_storage/none, mpi/none): 24.11 still reads those
values, as unset, without a word. Each was the default of 22.05, so leaving the option out means
the same to every release. Checked against the real slurmctld of each release (the host's
22.05, an image's 24.11) by tests/integration/test_slurmctld_accepts.py and
test_blueprint_to_slurmctld.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..model import OCI_RUNTIME, Deployment, Nodeset, Partition
from .hostlist import compress

__all__ = [
    "NodeLayout",
    "render_slurm_conf",
    "render_gres_conf",
    "render_cgroup_conf",
    "render_slurmdbd_conf",
    "partition_nodes",
    "def_mem_per_cpu",
]

# Production paths (as the Debian slurmctld/slurmd packages lay them out).
PROD_STATE_DIR = "/var/spool/slurmctld"
PROD_SPOOL_DIR = "/var/spool/slurmd"
PROD_LOG_DIR = "/var/log/slurm"
PROD_PID_DIR = "/run"
PROD_SLURM_USER = "slurm"
PROD_SLURMCTLD_PORT = 6817
PROD_SLURMD_PORT = 6818


@dataclass
class NodeLayout:
    """Where the daemons of a cluster that lives on one machine listen and write.

    ``node_addr``/``node_port`` map a Slurm NodeName to the address and port its slurmd
    listens on.  A node missing from ``node_addr`` gets ``controller_addr``; one missing
    from ``node_port`` uses ``slurmd_port``.  Several slurmd on one host therefore need
    either distinct ports or distinct loopback addresses (127.0.0.2, 127.0.0.3, ...).
    Each slurmd is started as ``slurmd -N <NodeName>``.

    The emulated nodes are usually bigger than the host (an a3-megagpu-8g has 208 CPUs
    and 1.8 TiB), so the local slurm.conf sets SlurmdParameters=config_overrides: slurmd
    reports the configured CPUs/memory instead of the host's, and the node is not
    marked INVAL.
    """

    controller_addr: str
    controller_port: int
    node_addr: dict[str, str]
    node_port: dict[str, int]
    state_dir: str  # StateSaveLocation
    spool_dir: str  # per node: <spool_dir>/<node>
    log_dir: str  # slurmctld.log, slurmd-<node>.log
    pid_dir: str  # slurmctld.pid, slurmd-<node>.pid
    slurm_user: str = "root"
    # Name in SlurmctldHost.  slurmctld only starts where this matches `hostname -s`;
    # "localhost" matches any host, which is what a single-machine cluster wants.
    controller_host: str = "localhost"
    slurmd_port: int | None = None  # SlurmdPort; None: controller_port + 1
    munge_socket: str | None = None  # AuthInfo=socket=...; None: munge's default socket
    node_hostname: dict[str, str] = field(default_factory=dict)  # default: the NodeName
    # Directory holding nvidia0, nvidia1, ... (the local target makes them symlinks to
    # /dev/null).  slurmd 22.05 drops GPUs that have no File= ("Removing file-less GPU"),
    # and then slurmctld marks the node INVAL; with these files the emulated GPUs
    # register and jobs get CUDA_VISIBLE_DEVICES.  None: gres.conf gives Count= only,
    # which slurmctld accepts but a real slurmd does not honour.
    gpu_dev_dir: str | None = None
    # One slurmd per node (%n in its spool dir, log and pid file names) when several share a
    # machine. False (the ssh target: one slurmd per machine): Debian's own names, which its
    # units and ctk's roles expect (/run/slurmd.pid, slurmd.log, one spool dir).
    per_node_files: bool = True
    # JobCompLoc of a jobcomp/filetxt log (one line per finished job), for clusters without
    # an accounting database; None: no job completion log.
    job_comp_loc: str | None = None
    # auth/jwt's key on the controller (AuthAltTypes=auth/jwt): slurmctld then takes the JSON Web
    # Tokens that `scontrol token` issues, which slurmrestd's clients send; None: no tokens.
    jwt_key: str | None = None
    # A backup controller (a second SlurmctldHost line) and slurmctld's SlurmctldTimeout: how long
    # the backup waits for the primary before it takes over.
    backup_host: str | None = None
    backup_addr: str | None = None
    slurmctld_timeout: int = 120
    slurmd_timeout: int = 300  # seconds before slurmctld marks a silent node DOWN
    # slurmdbd's address and port: AccountingStorageType=accounting_storage/slurmdbd (the
    # munge socket above also authenticates to it); None: no accounting.
    slurmdbd_addr: str | None = None
    slurmdbd_port: int | None = None
    min_job_age: int = 300  # seconds slurmctld keeps a finished job (squeue lists it)
    # slurmctld, slurmd and srun listen only on the address their host name resolves to,
    # never on every interface (NoCtldInAddrAny, NoInAddrAny). Each node needs its own name
    # and its own network stack: srun tells slurmd where it listens by the address its
    # connection comes from, which on a shared loopback is 127.0.0.1 for every node.
    bind_own_address: bool = False
    # A TaskProlog every compute node has (the jax role's, which puts the stack first on PATH).
    task_prolog: str | None = None
    # A HealthCheckProgram every compute node has (the slurm role's), run every
    # health_check_interval seconds in any node state; None: no health check.
    health_check: str | None = None
    health_check_interval: int = 300
    # RebootProgram, what slurmd runs on a node that `scontrol reboot` reboots; None: none (a
    # reboot is then refused).
    reboot_program: str | None = None
    # Power saving (the lab's dynamic nodes): these nodes are State=CLOUD, powered up by
    # RESUME_PROGRAM when jobs need them and down by SUSPEND_PROGRAM after their partition's
    # SuspendTime; every other node is static (SuspendExcNodes). Empty: no power saving.
    cloud_nodes: list[str] = field(default_factory=list)
    resume_program: str | None = None
    suspend_program: str | None = None
    # PrologSlurmctld that returns once the job's nodes answer (starts jobs on powered-up nodes
    # at once rather than on slurmctld's 30-second round).
    nodes_ready_program: str | None = None
    # SchedulerParameters' batch_sched_delay (seconds): how long slurmctld may put off starting
    # pending batch jobs after an event that frees resources (a job's end). Slurm's default of 3
    # spares a big cluster a scheduling pass per finished job; on a few small nodes, full of short
    # jobs, it is the wait between one wave of jobs and the next. None: Slurm's default.
    batch_sched_delay: int | None = None


# --------------------------------------------------------------------------- helpers

_KEY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_TOPOLOGY_KEYS = ("Boards", "SocketsPerBoard", "Sockets", "CoresPerSocket", "ThreadsPerCore")
# Keys that would start a new record if they showed up inside another record's extras.
_RECORD_KEYS = {"nodename", "partitionname", "nodeset", "frontendname", "downnodes"}

Params = list[tuple[str, str]]


def _fmt(key: str, value: Any) -> str:
    """One slurm.conf value as text."""
    if isinstance(value, bool):
        text = "YES" if value else "NO"
    elif isinstance(value, (list, tuple)):
        text = ",".join(_fmt(key, v) for v in value)
    elif isinstance(value, (int, float, str)):
        text = str(value)
    else:
        raise ValueError(f"{key}: unsupported value type {type(value).__name__}: {value!r}")
    if any(c in text for c in "\n\r#\""):
        raise ValueError(f"{key}: value {text!r} contains a newline, '#' or '\"'")
    if text == "" or any(c.isspace() for c in text):
        # The Slurm parser takes a double-quoted value as one token.
        text = f'"{text}"'
    return text


def _check_key(key: str, where: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise ValueError(f"{where}: {key!r} is not a valid Slurm parameter name")
    if key.lower() in _RECORD_KEYS:
        raise ValueError(f"{where}: {key!r} cannot be set here")
    return key


def _merge(base: Params, extra: dict[str, Any] | None, where: str) -> Params:
    """Overlay ``extra`` on ``base``; keys compare case-insensitively (as Slurm does).

    A key already in ``base`` keeps its position and takes the new value; a new key is
    appended in ``extra``'s order; a value of None removes the key.
    """
    out = list(base)
    for key, value in (extra or {}).items():
        _check_key(key, where)
        idx = next((i for i, (k, _) in enumerate(out) if k.lower() == key.lower()), None)
        if value is None:
            if idx is not None:
                del out[idx]
            continue
        text = _fmt(key, value)
        if idx is None:
            out.append((key, text))
        else:
            out[idx] = (out[idx][0], text)
    return out


def _get(d: dict[str, Any], key: str) -> Any:
    for k, v in d.items():
        if k.lower() == key.lower():
            return v
    return None


def _line(params: Params) -> str:
    return " ".join(f"{k}={v}" for k, v in params)


def _header(dep: Deployment) -> str:
    return (
        f"# Generated by ctk from blueprint {dep.blueprint_name}, "
        f"deployment {dep.deployment_name}. Do not edit."
    )


def _live_nodesets(dep: Deployment) -> list[Nodeset]:
    """Nodesets with at least one node, after checking that node names are unique."""
    seen: dict[str, str] = {}
    live = []
    for ns in dep.nodesets:
        for name in ns.node_names():
            if name in seen:
                raise ValueError(
                    f"node {name!r} is in nodeset {seen[name]!r} and in {ns.name!r}; "
                    "node_prefix values must not overlap"
                )
            seen[name] = ns.name
        if ns.node_count > 0:
            live.append(ns)
    return live


def partition_nodes(dep: Deployment, p: Partition) -> list[str]:
    """Node names of a partition, in nodeset order."""
    names: list[str] = []
    for ns_name in p.nodesets:
        try:
            ns = dep.nodeset(ns_name)
        except KeyError:
            raise ValueError(f"partition {p.name!r} references unknown nodeset {ns_name!r}") from None
        names.extend(ns.node_names())
    return names


def _topology(ns: Nodeset) -> tuple[int, Params]:
    """CPUs and the socket/core/thread parameters for a nodeset's NodeName line.

    When node_conf describes the topology, the missing piece (Sockets or CoresPerSocket)
    is derived from CPUs so the line is explicit, and the numbers are checked: Slurm
    accepts CPUs equal to the thread count or to the core count, nothing else.
    """
    conf = ns.node_conf
    cpus_override = _get(conf, "CPUs")
    try:
        cpus = int(cpus_override) if cpus_override is not None else int(ns.cpus)
    except (TypeError, ValueError):
        raise ValueError(f"nodeset {ns.name!r}: CPUs={cpus_override!r} is not a whole number") from None
    given = {k: _get(conf, k) for k in _TOPOLOGY_KEYS}
    if all(v is None for v in given.values()):
        return cpus, []

    def num(key: str) -> int | None:
        v = given[key]
        if v is None:
            return None
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise ValueError(f"nodeset {ns.name!r}: {key}={v!r} is not a whole number") from None
        if n < 1:
            raise ValueError(f"nodeset {ns.name!r}: {key}={n} must be at least 1")
        return n

    boards = num("Boards")
    sockets_key = "SocketsPerBoard" if boards is not None else "Sockets"
    if boards is not None and given["Sockets"] is not None and given["SocketsPerBoard"] is None:
        sockets_key = "Sockets"  # Slurm reads Sockets as per-board when Boards is set
    sockets = num(sockets_key)
    cores = num("CoresPerSocket")
    threads = num("ThreadsPerCore") or 1
    b = boards or 1

    def derive(what: str, divisor: int) -> int:
        if divisor <= 0 or cpus % divisor:
            raise ValueError(
                f"nodeset {ns.name!r}: cannot derive {what} from CPUs={cpus} and "
                f"node_conf {dict(conf)!r}"
            )
        return cpus // divisor

    if sockets is None:
        if cores is None:
            sockets, cores = 1, derive("CoresPerSocket", b * threads)
        else:
            sockets = derive(sockets_key, b * cores * threads)
    elif cores is None:
        cores = derive("CoresPerSocket", b * sockets * threads)
    total_cores = b * sockets * cores
    if cpus not in (total_cores * threads, total_cores):
        raise ValueError(
            f"nodeset {ns.name!r}: CPUs={cpus} does not match the topology "
            f"(boards={b} sockets={sockets} cores/socket={cores} threads/core={threads}: "
            f"{total_cores} cores, {total_cores * threads} threads)"
        )
    params: Params = []
    if boards is not None:
        params.append(("Boards", str(boards)))
    params += [(sockets_key, str(sockets)), ("CoresPerSocket", str(cores))]
    params.append(("ThreadsPerCore", str(threads)))
    return cpus, params


def _node_params(ns: Nodeset) -> Params:
    """Everything of a NodeName line after the name (and address) parameters."""
    cpus, topo = _topology(ns)
    params: Params = [("CPUs", str(cpus)), *topo, ("RealMemory", str(ns.memory_mb))]
    if ns.gpu_count > 0:
        gres = f"gpu:{ns.gpu_type}:{ns.gpu_count}" if ns.gpu_type else f"gpu:{ns.gpu_count}"
        params.append(("Gres", gres))
    if ns.features:
        params.append(("Features", _fmt("Features", list(ns.features))))
    params.append(("State", "UNKNOWN"))
    # node_conf goes last; the topology keys (and CPUs) were already handled above and
    # only need their values checked, everything else overrides or extends the line.
    handled = {k.lower() for k in (*_TOPOLOGY_KEYS, "CPUs")}
    extra = {k: v for k, v in ns.node_conf.items() if k.lower() not in handled}
    merged = _merge(params, extra, f"nodeset {ns.name!r} node_conf")
    # Keep State last for readability, wherever an override put it.
    state = [kv for kv in merged if kv[0].lower() == "state"]
    return [kv for kv in merged if kv[0].lower() != "state"] + state


# ------------------------------------------------------------------------ slurm.conf


def _base_params(dep: Deployment, layout: NodeLayout | None, has_gpus: bool) -> list[Params]:
    """The global part of slurm.conf, as sections of (key, value)."""
    return [_identity_params(dep, layout), _scheduling_params(dep, layout, has_gpus), _timeout_params(layout),
            _path_params(layout), _power_saving(dep, layout), _metrics(dep)]


def _metrics(dep: Deployment) -> Params:
    """slurmctld's OpenMetrics endpoints (Slurm 25.11+: /metrics/jobs, /metrics/nodes,
    /metrics/partitions, /metrics/scheduler on SlurmctldPort, for Prometheus to scrape), where
    the nodes' images carry such a release; a release ctk does not know (slurm-gcp's images)
    keeps its default."""
    release = dep.slurm()
    return [("MetricsType", "metrics/openmetrics")] if release is not None and release >= (25, 11) else []


def _identity_params(dep: Deployment, layout: NodeLayout | None) -> Params:
    """The cluster, its controller and ports, the Slurm user and the authentication. Without a
    layout (production) the controller's hostname and the standard ports; a deployment without
    a controller is a ValueError then."""
    if layout is None:
        if dep.controller is None:
            raise ValueError("deployment has no controller: cannot render a production slurm.conf")
        ctld_host = dep.controller.hostname
        ctld_port, slurmd_port = PROD_SLURMCTLD_PORT, PROD_SLURMD_PORT
        user = PROD_SLURM_USER
    else:
        ctld_host = f"{layout.controller_host}({layout.controller_addr})"
        ctld_port = layout.controller_port
        slurmd_port = layout.slurmd_port if layout.slurmd_port is not None else ctld_port + 1
        user = layout.slurm_user
    identity: Params = [
        ("ClusterName", dep.slurm_cluster_name),
        ("SlurmctldHost", ctld_host),
        *([("SlurmctldHost", f"{layout.backup_host}({layout.backup_addr})")]
          if layout is not None and layout.backup_host else []),
        ("SlurmctldPort", str(ctld_port)),
        ("SlurmdPort", str(slurmd_port)),
        ("SlurmUser", user),
    ]
    if dep.controller is not None and dep.controller.slurm_auth:
        # Slurm's own authentication (23.11+): a slurm.key shared by every daemon; clients
        # ask the local daemon (or sackd on a login node) over /run/slurm/sack.socket.
        identity += [("AuthType", "auth/slurm"), ("CredType", "cred/slurm")]
    else:
        identity.append(("AuthType", "auth/munge"))
        if layout is not None and layout.munge_socket:
            identity.append(("AuthInfo", f"socket={layout.munge_socket}"))
        identity.append(("CredType", "cred/munge"))
    if layout is not None and layout.jwt_key:
        identity += [("AuthAltTypes", "auth/jwt"), ("AuthAltParameters", f"jwt_key={layout.jwt_key}")]
    if layout is not None and layout.bind_own_address:
        identity.append(("CommunicationParameters", "NoCtldInAddrAny,NoInAddrAny"))
    return identity


def _scheduling_params(dep: Deployment, layout: NodeLayout | None, has_gpus: bool) -> Params:
    """Process tracking, resource selection, scheduling, priorities, accounting."""
    if layout is None:
        proctrack, task = "proctrack/cgroup", "task/cgroup,task/affinity"
    else:
        # No cgroups: the local target also runs in containers where slurmd cannot
        # create cgroups, and several slurmd on one host would fight over them. No task
        # plugin either (22.05's task/none, the default; 24.11 has no such plugin).
        proctrack, task = "proctrack/linuxproc", None
    slurmd_params = [] if layout is None else [("SlurmdParameters", "config_overrides")]
    scheduling: Params = [
        ("ProctrackType", proctrack),
        *([("TaskPlugin", task)] if task else []),
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_Core_Memory"),
        *_job_accounting(dep, layout, proctrack),
    ]
    if has_gpus:
        scheduling.append(("GresTypes", "gpu"))
    if layout is not None and layout.task_prolog:
        scheduling.append(("TaskProlog", layout.task_prolog))
    if layout is not None and layout.health_check:
        scheduling += [("HealthCheckProgram", layout.health_check),
                       ("HealthCheckInterval", str(layout.health_check_interval)),
                       ("HealthCheckNodeState", "ANY")]
    if layout is not None and layout.reboot_program:
        scheduling.append(("RebootProgram", layout.reboot_program))
    scheduling += [
        ("SchedulerType", "sched/backfill"),
        ("SchedulerParameters", ",".join(_scheduler_parameters(layout))),
        *_priority(dep, layout),
        ("ReturnToService", "2"),
        *_accounting(dep, layout),
        *([("JobCompType", "jobcomp/filetxt"), ("JobCompLoc", layout.job_comp_loc)]
          if layout is not None and layout.job_comp_loc else []),
        *slurmd_params,
    ]
    return scheduling


def _timeout_params(layout: NodeLayout | None) -> Params:
    """The daemons' timeouts, and how long a finished job stays in slurmctld's memory."""
    return [
        ("SlurmctldTimeout", str(layout.slurmctld_timeout if layout is not None else 120)),
        ("SlurmdTimeout", str(layout.slurmd_timeout if layout is not None else 300)),
        ("MessageTimeout", "30"),
        ("InactiveLimit", "0"),
        ("KillWait", "30"),
        ("MinJobAge", str(layout.min_job_age if layout is not None else 300)),
        ("Waittime", "0"),
    ]


def _path_params(layout: NodeLayout | None) -> Params:
    """The daemons' state, spool, pid and log files: a layout's (one set per node where nodes
    share a host), else the production ones."""
    if layout is None:
        state_dir = PROD_STATE_DIR
        spool = PROD_SPOOL_DIR
        ctld_log = f"{PROD_LOG_DIR}/slurmctld.log"
        slurmd_log = f"{PROD_LOG_DIR}/slurmd.log"
        ctld_pid = f"{PROD_PID_DIR}/slurmctld.pid"
        slurmd_pid = f"{PROD_PID_DIR}/slurmd.pid"
    else:
        state_dir = layout.state_dir
        # %n is replaced by the node name, so every slurmd on the host gets its own files.
        per_node = "-%n" if layout.per_node_files else ""
        spool = f"{layout.spool_dir}/%n" if layout.per_node_files else layout.spool_dir
        ctld_log = f"{layout.log_dir}/slurmctld.log"
        slurmd_log = f"{layout.log_dir}/slurmd{per_node}.log"
        ctld_pid = f"{layout.pid_dir}/slurmctld.pid"
        slurmd_pid = f"{layout.pid_dir}/slurmd{per_node}.pid"
    return [
        ("StateSaveLocation", state_dir),
        ("SlurmdSpoolDir", spool),
        ("SlurmctldPidFile", ctld_pid),
        ("SlurmdPidFile", slurmd_pid),
        ("SlurmctldLogFile", ctld_log),
        ("SlurmdLogFile", slurmd_log),
        ("SlurmctldDebug", "info"),
        ("SlurmdDebug", "info"),
    ]


def _power_saving(dep: Deployment, layout: NodeLayout | None) -> Params:
    """Slurm's power saving for a layout's cloud nodes: slurmctld runs the resume program for
    the powered-down nodes a job is given and the suspend program for nodes idle longer than
    their partition's SuspendTime. The timeouts and rates are the controller's (Cluster
    Toolkit's cloud_parameters)."""
    if layout is None or not layout.cloud_nodes or dep.controller is None:
        return []
    cloud = set(layout.cloud_nodes)
    static = [n for ns in dep.nodesets for n in ns.node_names() if n not in cloud]
    times = [p.suspend_time for p in dep.partitions
             if p.suspend_time >= 0 and any(n in cloud for n in partition_nodes(dep, p))]
    ctl = dep.controller
    out: Params = [
        ("ResumeProgram", layout.resume_program or ""),
        ("SuspendProgram", layout.suspend_program or ""),
        # A node that did not come up in ResumeTimeout is stopped, as one that powers down.
        ("ResumeFailProgram", layout.suspend_program or ""),
        ("ResumeTimeout", str(ctl.resume_timeout)),
        ("SuspendTimeout", str(ctl.suspend_timeout)),
        ("ResumeRate", str(ctl.resume_rate)),
        ("SuspendRate", str(ctl.suspend_rate)),
        # The partitions set their own SuspendTime; this is the shortest of them.
        ("SuspendTime", str(min(times)) if times else "INFINITE"),
    ]
    if static:
        out.append(("SuspendExcNodes", compress(static)))
    if layout.nodes_ready_program:
        out.append(("PrologSlurmctld", layout.nodes_ready_program))
    out += [
        # Powered-down cloud nodes are listed by sinfo and scontrol (else hidden).
        ("PrivateData", "cloud"),
        # A node that was DOWN (a preempted one) is IDLE again once powered down, so that it
        # can be powered up for the next job; power saving looks at nodes every second.
        ("SlurmctldParameters", "idle_on_node_suspend,power_save_interval=1,power_save_min_interval=0"),
    ]
    return out


# Seconds between two samples of a running task's CPU time and memory (sstat reads the last
# sample; sacct's MaxRSS is the largest one), as slurm-gcp samples them.
JOB_ACCT_GATHER_FREQUENCY = 30
# bf_continue: the backfill scheduler goes on through the queue after it releases its locks
# (else a long queue starves its tail); salloc_wait_nodes: salloc returns once every node of the
# allocation is up (cloud nodes boot after the allocation). Both are slurm-gcp's defaults.
SCHEDULER_PARAMETERS = ("bf_continue", "salloc_wait_nodes")
# Smallest DefMemPerCPU (MB) a partition gets, as in slurm-gcp.
MIN_MEM_PER_CPU = 100


def _scheduler_parameters(layout: NodeLayout | None) -> list[str]:
    out = list(SCHEDULER_PARAMETERS)
    if layout is not None and layout.batch_sched_delay is not None:
        out.append(f"batch_sched_delay={layout.batch_sched_delay}")
    return out


def _stores_accounting(dep: Deployment, layout: NodeLayout | None) -> bool:
    if layout is None:
        return dep.controller is not None and dep.controller.accounting
    return bool(layout.slurmdbd_addr)


def _job_accounting(dep: Deployment, layout: NodeLayout | None, proctrack: str) -> Params:
    """How slurmd samples what a job uses (sstat; sacct's MaxRSS, AveCPU, TotalCPU). The cgroup
    gatherer reads the job's cgroup, so it goes with proctrack/cgroup; without cgroups (the local
    target) the linux gatherer reads /proc of the processes proctrack/linuxproc tracks. Only
    where the samples are stored: slurmctld calls gathering without storage an error."""
    if not _stores_accounting(dep, layout):
        return []
    gather = "jobacct_gather/cgroup" if proctrack == "proctrack/cgroup" else "jobacct_gather/linux"
    return [("JobAcctGatherType", gather), ("JobAcctGatherFrequency", str(JOB_ACCT_GATHER_FREQUENCY))]


def _priority(dep: Deployment, layout: NodeLayout | None) -> Params:
    """Multifactor priority, set explicitly: it is 24.11's default but not 22.05's (basic, FIFO).
    It needs the accounting database (slurmctld ignores even the age weight without one), so a
    cluster without one keeps its release's default. Fair share and QOS outweigh the partition's
    PriorityJobFactor, which outweighs the time a job has waited (the tie-break that keeps equal
    jobs first come, first served). Job size weighs nothing: favouring big or small jobs is a
    site's choice, made with controller slurm_conf."""
    if not _stores_accounting(dep, layout):
        return []
    return [("PriorityType", "priority/multifactor"), ("PriorityWeightFairshare", "10000"),
            ("PriorityWeightQOS", "10000"), ("PriorityWeightPartition", "1000"), ("PriorityWeightAge", "100"),
            ("PriorityWeightJobSize", "0")]


def _accounting(dep: Deployment, layout: NodeLayout | None) -> Params:
    """Where slurmctld stores accounting: a layout's slurmdbd, or in production the controller's
    (slurm-gcp's layout, on slurmdbd's default port) unless the blueprint turns accounting off."""
    if layout is None:
        if not _stores_accounting(dep, layout):
            return []
        assert dep.controller is not None  # without a layout, only a controller stores accounting
        return [("AccountingStorageType", "accounting_storage/slurmdbd"),
                ("AccountingStorageHost", dep.controller.hostname)]
    if not layout.slurmdbd_addr:
        return []  # no accounting (accounting_storage/none, 22.05's default, is gone in 24.11)
    out: Params = [("AccountingStorageType", "accounting_storage/slurmdbd"),
                   ("AccountingStorageHost", layout.slurmdbd_addr)]
    if layout.slurmdbd_port:
        out.append(("AccountingStoragePort", str(layout.slurmdbd_port)))
    if layout.munge_socket:  # for slurmdbd, the "password" names munged's socket
        out.append(("AccountingStoragePass", layout.munge_socket))
    return out


@dataclass
class DbdLayout:
    """Where a cluster's slurmdbd listens and where its MariaDB is (the lab's controller)."""

    dbd_host: str  # the host name slurmctld and the clients reach slurmdbd at
    dbd_port: int
    storage_host: str
    storage_port: int
    storage_user: str
    storage_pass: str  # a secret: the file is 0600 and never printed
    log_file: str
    pid_file: str
    auth_info: str | None = None  # AuthInfo (munged's socket), where it is not the default
    # Listen only on the address dbd_host resolves to, never on every interface, as slurm.conf's
    # NoInAddrAny does for slurmd (slurmdbd 24.11 takes it from slurmdbd.conf's own
    # CommunicationParameters, though slurmdbd.conf(5) lists only the IPv6 and keepalive options).
    bind_own_address: bool = False


def render_slurmdbd_conf(dep: Deployment, dbd: DbdLayout) -> str:
    """slurmdbd.conf text (it holds the database password: write it 0600)."""
    slurm_auth = dep.controller is not None and dep.controller.slurm_auth
    params: Params = [("AuthType", "auth/slurm" if slurm_auth else "auth/munge")]
    if dbd.auth_info and not slurm_auth:
        params.append(("AuthInfo", dbd.auth_info))
    params += [("DbdHost", dbd.dbd_host), ("DbdPort", str(dbd.dbd_port)), ("SlurmUser", "root"),
               ("StorageType", "accounting_storage/mysql"), ("StorageHost", dbd.storage_host),
               ("StoragePort", str(dbd.storage_port)), ("StorageUser", dbd.storage_user),
               ("StoragePass", dbd.storage_pass), ("StorageLoc", "slurm_acct_db"),
               ("LogFile", dbd.log_file), ("PidFile", dbd.pid_file)]
    if dbd.bind_own_address:
        params.append(("CommunicationParameters", "NoInAddrAny"))
    return _header(dep) + "\n" + "\n".join(f"{k}={v}" for k, v in params) + "\n"


def _node_lines(live: list[Nodeset], layout: NodeLayout | None) -> list[str]:
    lines: list[str] = []
    for ns in live:
        rest = _node_params(ns)
        lines.append(f"# nodeset {ns.name}: {ns.node_count} x {ns.machine_type}")
        if layout is None:
            lines.append(_line([("NodeName", compress(ns.node_names())), *rest]))
            continue
        # One line per node: each slurmd has its own NodeAddr/NodeHostname/Port.  Slurm
        # can pair hostlists positionally (NodeName=n-[0-3] NodeAddr=127.0.0.[2-5]), but
        # per-node Port ranges are less well defined, the addresses and ports come from
        # a dict and need not be contiguous, and local clusters are small; one line per
        # node is unambiguous and diffs cleanly.
        cloud = set(layout.cloud_nodes)
        for name in ns.node_names():
            node_rest = rest
            if name in cloud:  # powered down until a job needs it
                node_rest = [kv for kv in rest if kv[0].lower() != "state"] + [("State", "CLOUD")]
            addr: Params = [
                ("NodeName", name),
                ("NodeAddr", layout.node_addr.get(name, layout.controller_addr)),
                ("NodeHostname", layout.node_hostname.get(name, name)),
            ]
            port = layout.node_port.get(name)
            if port is not None:
                addr.append(("Port", str(port)))
            lines.append(_line(addr + node_rest))
    return lines


_MEM_DEFAULTS = ("defmempercpu", "defmempernode", "defmempergpu")


def def_mem_per_cpu(dep: Deployment, p: Partition) -> int | None:
    """The memory (MB) a job in partition P gets per allocated CPU when it asks for none: the
    smallest share of a node's memory per CPU over the partition's nodesets (less a nodeset's
    MemSpecLimit), at least MIN_MEM_PER_CPU. Without it, under CR_Core_Memory, a job that names
    no memory is given a whole node's. None: the partition has no nodes, or the blueprint sets a
    memory default of its own (Slurm takes one of DefMemPerCPU, DefMemPerNode, DefMemPerGPU)."""
    extra = dep.controller.slurm_conf if dep.controller is not None else {}
    if any(k.lower() in _MEM_DEFAULTS for k in [*extra, *p.conf]):
        return None
    shares = []
    for name in p.nodesets:
        ns = dep.nodeset(name)
        if ns.node_count == 0:
            continue
        cpus, _ = _topology(ns)
        reserved = int(_get(ns.node_conf, "MemSpecLimit") or 0)
        shares.append(max(MIN_MEM_PER_CPU, (ns.memory_mb - reserved) // max(cpus, 1)))
    return min(shares) if shares else None


def _partition_lines(dep: Deployment, cloud: set[str] | None = None) -> list[str]:
    lines: list[str] = []
    seen: set[str] = set()
    for p in dep.partitions:
        if not _NAME_RE.match(p.name or ""):
            raise ValueError(f"partition name {p.name!r} is not a valid Slurm partition name")
        if p.name in seen:
            raise ValueError(f"partition {p.name!r} is defined twice")
        seen.add(p.name)
        nodes = partition_nodes(dep, p)
        if p.oversubscribe is not None:
            oversub = str(p.oversubscribe)
        else:
            oversub = "EXCLUSIVE" if p.exclusive else "NO"
        params: Params = [("PartitionName", p.name)]
        if nodes:
            params.append(("Nodes", compress(nodes)))
        params += [
            ("Default", "YES" if p.is_default else "NO"),
            ("MaxTime", p.max_time or "UNLIMITED"),
            ("OverSubscribe", oversub),
            ("State", "UP" if nodes else "INACTIVE"),
        ]
        mem = def_mem_per_cpu(dep, p) if nodes else None
        if mem is not None:
            params.append(("DefMemPerCPU", str(mem)))
        if cloud and any(n in cloud for n in nodes):
            params.append(("SuspendTime", str(p.suspend_time) if p.suspend_time >= 0 else "INFINITE"))
        if not nodes:
            # slurmctld 22.05 accepts a partition without Nodes.  INACTIVE makes sbatch
            # fail at once instead of queueing jobs that can never start.
            lines.append(f"# partition {p.name}: all its nodesets are empty, so no Nodes= and INACTIVE")
        params = _merge(params, p.conf, f"partition {p.name!r} conf")
        lines.append(_line(params))
    return lines


def render_slurm_conf(dep: Deployment, *, layout: NodeLayout | None = None) -> str:
    """slurm.conf text for the deployment (production, or local with ``layout``)."""
    live = _live_nodesets(dep)
    has_gpus = any(ns.gpu_count > 0 for ns in live)
    sections = _base_params(dep, layout, has_gpus)

    extra = dict(dep.controller.slurm_conf) if dep.controller is not None else {}
    auth = next((k for k in extra if k.lower() == "authinfo"), None)
    if auth and layout is not None and layout.munge_socket and isinstance(extra[auth], str) \
            and "socket=" not in extra[auth]:
        # The blueprint's AuthInfo options (cred_expire=...) keep the layout's munged socket.
        extra[auth] = f"socket={layout.munge_socket},{extra[auth]}"
    overridden = set()
    for key in extra:
        _check_key(key, "controller.slurm_conf")
        overridden.add(key.lower())

    out = [_header(dep)]
    titles = ["Cluster", "Scheduling", "Timeouts (seconds)", "State, spool and logs", "Power saving (cloud nodes)",
              "Metrics"]
    for title, params in zip(titles, sections):
        if not params:
            continue
        kept = [(k, v) for k, v in params if k.lower() not in overridden]
        out += ["", f"# {title}"]
        out += [f"{k}={v}" for k, v in kept]
    merged_extra = _merge([], {k: v for k, v in extra.items() if v is not None}, "controller.slurm_conf")
    if merged_extra:
        out += ["", "# From the blueprint (controller slurm_conf); these override the values above"]
        out += [f"{k}={v}" for k, v in merged_extra]

    out += ["", "# Nodes (login nodes are not Slurm nodes)"]
    out += _node_lines(live, layout)
    out += ["", "# Partitions"]
    out += _partition_lines(dep, set(layout.cloud_nodes) if layout is not None else None)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------- gres.conf


def _gpu_files(directory: str, count: int) -> str:
    return f"{directory}/nvidia0" if count == 1 else f"{directory}/nvidia[0-{count - 1}]"


def render_gres_conf(dep: Deployment, *, layout: NodeLayout | None = None) -> str:
    """gres.conf text: one line per GPU nodeset.

    Production lists the device files explicitly (File=/dev/nvidia[0-N]) rather than
    relying on AutoDetect=nvml: Debian's Slurm packages ship no gpu_nvml plugin, and
    explicit files work with any build.  With a layout the GPUs are emulated: File=
    points into ``layout.gpu_dev_dir`` when set (see NodeLayout), else Count= only.
    """
    lines = [_header(dep)]
    gpu_sets = [ns for ns in _live_nodesets(dep) if ns.gpu_count > 0]
    if not gpu_sets:
        lines.append("# No GPU nodesets.")
        return "\n".join(lines) + "\n"
    if layout is None:
        lines.append("# Device files listed explicitly: AutoDetect=nvml needs Slurm's NVML plugin on every node and cannot be used with cloud nodes.")
    elif layout.gpu_dev_dir:
        lines.append(f"# Local cluster: emulated GPUs, device files in {layout.gpu_dev_dir} link to /dev/null.")
    else:
        lines.append("# Local cluster: emulated GPUs, counts only (slurmd ignores GPUs without File=).")
    for ns in gpu_sets:
        params: Params = [("NodeName", compress(ns.node_names())), ("Name", "gpu")]
        if ns.gpu_type:
            params.append(("Type", ns.gpu_type))
        if layout is None:
            params.append(("File", _gpu_files("/dev", ns.gpu_count)))
        elif layout.gpu_dev_dir:
            params.append(("File", _gpu_files(layout.gpu_dev_dir.rstrip("/"), ns.gpu_count)))
        else:
            params.append(("Count", str(ns.gpu_count)))
        lines.append(_line(params))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------- cgroup.conf


def render_cgroup_conf(dep: Deployment, *, layout: NodeLayout | None = None) -> str:
    """cgroup.conf text.

    Production constrains cores, memory and devices (used by proctrack/cgroup and
    task/cgroup).  The local layout uses neither plugin, but slurmd 22.05 still loads
    the cgroup plugin at start: ``autodetect`` picks v1 on legacy/hybrid hosts and v2 on
    unified ones, and IgnoreSystemd=yes keeps cgroup/v2 from asking systemd over D-Bus
    (there is no systemd in a container).  Nothing is constrained.  From Slurm 26.05, which
    resets its own memory limit through the plugin at start (an error where /sys/fs/cgroup is
    read-only, as in a lab node), the local layout turns the plugin off: CgroupPlugin=disabled
    (Slurm 23.02+).
    """
    release = dep.slurm()
    off = layout is not None and release is not None and release >= (26, 5)
    lines = [_header(dep), f"CgroupPlugin={'disabled' if off else 'autodetect'}"]
    if layout is None:
        lines += ["ConstrainCores=yes", "ConstrainRAMSpace=yes", "ConstrainDevices=yes"]
    else:
        lines += [
            "IgnoreSystemd=yes",
            "ConstrainCores=no",
            "ConstrainRAMSpace=no",
            "ConstrainDevices=no",
        ]
    return "\n".join(lines) + "\n"



# ----------------------------------------------------------------------- oci.conf


def render_oci_conf(dep: Deployment) -> str:
    """oci.conf text: Slurm's own containers (`srun --container=BUNDLE`, `sbatch --container`)
    through the slurm role's OCI runtime on the compute nodes (runc, rootless, as the job's
    user, %U: slurmstepd runs `run` as the user and the others as root, which the runtime
    leaves for the user; see the role's files/ctk-oci-runtime). Each container is named by
    node, user, job, step and task. The step's spool folder goes to /var/run/slurm in the
    container (the runtime's own tmpfs /run): 24.11 mounts it there, 26.05 at its node path,
    which a read-only image has no folder for, unless MountSpoolDir says where (Slurm 23.02+;
    written from 25.05, the releases after the one whose default ctk has run)."""
    cid = "%n.%u.%j.%s.%t"
    rt = f"{OCI_RUNTIME} --uid %U"
    release = dep.slurm()
    return "\n".join([
        _header(dep),
        "# srun/sbatch --container=BUNDLE: BUNDLE's root filesystem through runc, rootless, as the job's user.",
        f'RunTimeQuery="{rt} state {cid}"',
        f'RunTimeKill="{rt} kill --all {cid}"',
        f'RunTimeDelete="{rt} delete --force {cid}"',
        f'RunTimeRun="{rt} run {cid} -b %b"',
        *(["MountSpoolDir=/var/run/slurm"] if release is not None and release >= (25, 5) else []),
    ]) + "\n"
