"""The local target: a real Slurm cluster on this machine, booted from the built images.

Every Slurm node (controller, computes, login) is a lab node (see node.py) with its own
hostname, network namespace (an address on the lab's bridge, see netns.py) and ports; munged runs in each with the cluster's key,
slurmctld on the controller, slurmd on the computes, sshd on the login nodes. Shared
folders are /home and /root on every node, as NFS is on a real cluster; the lab's user (the
ctk/target/local module's `user`, researcher by default) has the same uid on every node and owns
/home/USER. No node reaches the host's files: each runs pivoted into its own tree with only
sandbox.caps.NODE (see sandbox/nodeinit.py), and lab/ itself is root's alone (0700), since
what a node's root writes in the shared folders is root's on the host too. The runtime state lives in the deployment folder:

    lab/state.json         nodes, addresses, ports, what each was booted with
    lab/etc/               slurm.conf, gres.conf, cgroup.conf and hosts, as nodes see them
    lab/bin/               sbatch, srun, squeue, ... that run the lab's own Slurm commands in its
                           login node (ctk env puts them on PATH): the host needs no Slurm
    lab/secrets/           the munge key and the SSH keys (0400/0600, never printed)
    lab/ssh_config         `ssh -F lab/ssh_config LOGIN` reaches a login node as the lab's user
    lab/home/, lab/root/   /home and /root on every node
    lab/slurmctld/         slurmctld's saved state (jobs survive a controller restart) and
                           jobcomp.log, one line per finished job
    lab/slurmdbd/          the accounting database (MariaDB's data folder on the controller,
                           where slurmdbd keeps every job for sacct); secrets/ holds its
                           password and slurmdbd.conf, which only the controller sees
    lab/nodes/NAME/        each node's upper dir, logs and pid
    lab/identity.json      the cluster lab/ belongs to (a deploy of another one is refused)

`ctk destroy` keeps home/, root/, slurmdbd/ and slurmctld/ (KEPT), users' and accounting's data,
and removes the rest; --purge removes them too.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from .. import atomic
from ..connect.base import IDENTITY_FILE, next_identity, parse_identity, registry_home
from ..errors import UserError, did_you_mean
from ..model import (
    DEFAULT_BASE,
    HEALTH_CHECK,
    JAX_TASK_PROLOG,
    NO_SPOT_HINT,
    Deployment,
    ImageSpec,
    LabSettings,
)
from ..progress import Progress
from ..render.hostlist import compress
from ..sandbox import netns, secretfiles
from ..sandbox import node as nodes
from ..sandbox.daemons import DaemonError, ensure_munge_key, ensure_secret, stop_munged
from ..sandbox.proc import ctk_env, terminate
from . import leases
from .base import (
    IDENTITY_HINT,
    SINFO_PARTITIONS,
    DeployOutcome,
    NodeStatus,
    Status,
    Target,
    parse_node_states,
    parse_partitions,
    power_state,
    wait_ready,
    write_state,
)
from .labagent import MEMORY_RESERVE_MB, NODE_MB, available_mb
from .labclient import (
    USER_ENV,
    LabCluster,
    client_node,
    job_cluster,
    lab_dir,
    load_state,
    slurm,
)

if TYPE_CHECKING:  # the builders are imported where they are used: `ctk job` needs none of them
    from ..images.store import Store
    from ..render.slurmconf import NodeLayout

DEFAULT_MAX_NODES = 4  # per nodeset: fits 2 cores and 24 GiB with room to spare
DEFAULT_IMAGE = ImageSpec(name="ctk-local", module_id="", base=DEFAULT_BASE,
                          roles=["common", "munge", "slurm", "jax"], stack="jax-cpu")
GPU_DIR_IN_NODE = "/etc/ctk-gpus"
MUNGE_KEY_IN_NODE = "ctk/munge.key"  # under /run (tmpfs)
SLURM_KEY_IN_NODE = "ctk/slurm.key"  # auth/slurm's key, under /run (tmpfs)
SLURMD_TIMEOUT = 15  # a lab node that stops answering is DOWN (and its jobs requeued) within ~20 s
JOBCOMP_IN_NODE = "/var/spool/slurmctld/jobcomp.log"
# Accounting on the controller: MariaDB on its loopback (nothing outside the node reaches it),
# slurmdbd on a port of the lab's lease. slurmdbd reads slurmdbd.conf from its SLURM_CONF's
# folder, here one on the controller's tmpfs, so no other node sees the database password.
DB_DIR_IN_NODE = "/var/lib/mysql"
DB_PORT = 3306
DBD_DIR_IN_NODE = "ctk/dbd"  # under /run
DBD_PORT_SLOT = leases.PORTS_PER_LEASE - 2  # the nodes use the slots below it
EVENTS_SHOWN = 8  # the agent's last events in ctk status


@dataclass
class LabNode:
    name: str
    role: str  # controller | compute | login
    addr: str
    port: int
    image: str
    nodeset: str = ""
    host: int = 0  # the node's number in the lab's subnet (sandbox/netns.py)
    dynamic: bool = False  # a Slurm cloud node: powered up on demand by the lab's agent
    spot: bool = False  # can be preempted (ctk preempt, chaos)
    flex: int | None = None  # flex-start: seconds it runs before its capacity is taken back


@dataclass
class LabPlan:
    n: int
    dep: Deployment  # scaled down
    nodes: list[LabNode]
    images: list[ImageSpec]
    notes: list[str] = field(default_factory=list)

    def node(self, name: str) -> LabNode | None:
        return next((x for x in self.nodes if x.name == name), None)

    @property
    def controller(self) -> LabNode:
        return next(x for x in self.nodes if x.role == "controller")

    @property
    def cloud_nodes(self) -> list[LabNode]:
        return [x for x in self.nodes if x.dynamic]

    @property
    def needs_agent(self) -> bool:
        """Whether the lab runs its agent: it has nodes to power up, or nodes to preempt."""
        return any(x.dynamic or x.spot for x in self.nodes)


# ---- planning (pure) -------------------------------------------------------------------

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
    images, names = [], {}
    from ..images.base import SUITES

    for img in dep.images:
        if img.base in SUITES:
            images.append(img)
            names[img.name] = img.name
        else:
            notes.append(f"image {img.name} ({img.base}) is built on the gcp target; "
                         f"local nodes boot {DEFAULT_IMAGE.name} ({DEFAULT_IMAGE.base}, {DEFAULT_IMAGE.stack})")
            names[img.name] = DEFAULT_IMAGE.name
    return images, names


def plan_lab(dep: Deployment, n: int, max_nodes: int = DEFAULT_MAX_NODES) -> LabPlan:
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
    total = 1 + computes + sum(lg.count for lg in scaled.logins)
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
    return LabPlan(n, scaled, nodes_, images, notes)


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


def layout(plan: LabPlan) -> NodeLayout:
    from ..render.slurmconf import NodeLayout

    computes = [x for x in plan.nodes if x.role == "compute"]
    images = {img.name: img for img in plan.images}
    acct = accounting(plan)
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
        task_prolog=JAX_TASK_PROLOG if all(images[x.image].python for x in computes) else None,
        health_check=HEALTH_CHECK,
        # A wave of short jobs on the lab's few small nodes starts as soon as the last one
        # ends, not up to 3 s later (200 one-CPU tasks on the debug partition: 133 s with
        # Slurm's default, bench/array.py).
        batch_sched_delay=0,
        # Power saving, where the lab has dynamic nodes.
        cloud_nodes=[x.name for x in plan.cloud_nodes],
        resume_program=f"/etc/slurm/{RESUME_SCRIPT}" if plan.cloud_nodes else None,
        suspend_program=f"/etc/slurm/{SUSPEND_SCRIPT}" if plan.cloud_nodes else None,
        nodes_ready_program=f"/etc/slurm/{READY_SCRIPT}" if plan.cloud_nodes else None)


# slurmctld's ResumeProgram and SuspendProgram in the lab: each hands its nodes (a Slurm
# hostlist) to the lab's agent on the host, as a request file in a folder that only the
# controller sees; the agent boots or stops them (targets/labagent.py).
RESUME_SCRIPT, SUSPEND_SCRIPT, READY_SCRIPT = "ctk-resume", "ctk-suspend", "ctk-nodes-ready"
POWER_SCRIPTS = tuple(f"etc/slurm/{x}" for x in (RESUME_SCRIPT, SUSPEND_SCRIPT, READY_SCRIPT))
POWER_DIR_IN_NODE = "/var/spool/ctk-power"


def power_script(op: str) -> str:
    return f"""#!/bin/sh
# Written by ctk: slurmctld runs it with a hostlist of nodes to {op}. The lab's agent, on the
# host, reads the request from {POWER_DIR_IN_NODE} and does it (see ctk status).
set -eu
t=$(date +%s.%N)
printf '%s %s\\n' {op} "$1" > "{POWER_DIR_IN_NODE}/.$t.$$"
mv "{POWER_DIR_IN_NODE}/.$t.$$" "{POWER_DIR_IN_NODE}/$t.$$.{op}"
"""


def ready_script(timeout: int) -> str:
    """slurmctld's PrologSlurmctld in a lab with dynamic nodes: it returns once every node of
    the job answers. Its end is what starts a job on nodes that were powered up for it at once;
    without it slurmctld notices that they are up on its 30-second round."""
    return f"""#!/bin/sh
# Written by ctk: waits (at most {timeout} s, the ResumeTimeout) until no node of the job is
# powering up (#) or not responding (*), then lets slurmctld start the job. Never fails a job:
# nodes that do not come up are Slurm's ResumeTimeout's to handle.
end=$(( $(date +%s) + {timeout} ))
while [ "$(date +%s)" -lt "$end" ]; do
  states=$(sinfo -h -N -n "$SLURM_JOB_NODELIST" -o %T 2>/dev/null) || states='#'
  case "$states" in *'#'*|*'*'*|*'~'*) sleep 0.3 ;; *) exit 0 ;; esac
done
exit 0
"""


def lab_files(plan: LabPlan, ldir: str) -> dict[str, str]:
    """Every generated file of the lab, by path relative to lab/ (pure)."""
    from ..render.slurmconf import (
        render_cgroup_conf,
        render_gres_conf,
        render_slurm_conf,
    )

    lay = layout(plan)
    hosts = "127.0.0.1 localhost\n" + "".join(f"{x.addr} {x.name}\n" for x in plan.nodes)
    files = {"etc/slurm/slurm.conf": render_slurm_conf(plan.dep, layout=lay),
             "etc/slurm/cgroup.conf": render_cgroup_conf(plan.dep, layout=lay),
             "etc/hosts": hosts}
    if any(ns.gpu_count for ns in plan.dep.nodesets):
        files["etc/slurm/gres.conf"] = render_gres_conf(plan.dep, layout=lay)
    files["ssh_config"] = ssh_config(plan, ldir)
    if plan.cloud_nodes:
        assert plan.dep.controller is not None  # plan_lab refuses a deployment without one
        files[f"etc/slurm/{RESUME_SCRIPT}"] = power_script("resume")
        files[f"etc/slurm/{SUSPEND_SCRIPT}"] = power_script("suspend")
        files[f"etc/slurm/{READY_SCRIPT}"] = ready_script(plan.dep.controller.resume_timeout)
    return files


def slurmdbd_conf(plan: LabPlan, ldir: str) -> str:
    """slurmdbd.conf of the lab's controller (it holds the database password)."""
    from ..render.slurmconf import DbdLayout, render_slurmdbd_conf

    with open(os.path.join(ldir, "secrets", "mariadb.password")) as f:
        password = f.read().strip()
    return render_slurmdbd_conf(plan.dep, DbdLayout(
        dbd_host=plan.controller.name, dbd_port=leases.port(plan.n, DBD_PORT_SLOT),
        storage_host="127.0.0.1", storage_port=DB_PORT, storage_user="slurm", storage_pass=password,
        log_file="/var/log/slurm/slurmdbd.log", pid_file="/run/slurmdbd.pid", bind_own_address=True))


# The controller's database: made on its first boot in lab/slurmdbd, then served on the
# node's loopback only, with the InnoDB settings Slurm recommends (slurmdbd warns without).
MARIADB_SCRIPT = f"""set -e
D={DB_DIR_IN_NODE}
if [ ! -d "$D/mysql" ]; then
  mariadb-install-db --user=root --datadir="$D" --auth-root-authentication-method=socket --skip-test-db >/dev/null
fi
exec mariadbd --user=root --datadir="$D" --socket=/run/mysqld/mysqld.sock --bind-address=127.0.0.1 \
  --port={DB_PORT} --skip-log-bin --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900
"""
# slurmdbd, started once the database's socket is there: its user gets the password
# slurmdbd.conf holds (read here, passed to the client on stdin, never on a command line).
# slurmctld starts once slurmdbd's port answers: 24.11 refuses to start before slurmdbd
# answers while it does not know its cluster's id (a new lab). The database is made here
# too: slurmdbd 24.11 with Debian 13's libmariadb 3.4 fails its first query ("Number of
# columns in result (=1) set exceeds maximum allowed number of columns (=0)") when it has to
# create slurm_acct_db itself, and not when the database already exists.
SLURMDBD_SCRIPT = f"""set -e
conf=/run/{DBD_DIR_IN_NODE}/slurmdbd.conf
pw=$(sed -n 's/^StoragePass=//p' "$conf")
mariadb -uroot --socket=/run/mysqld/mysqld.sock <<SQL
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
SQL
exec slurmdbd -D
"""


def ssh_key(ldir: str) -> str:
    """The private key that logs in to the lab's login nodes as root."""
    return os.path.join(os.path.abspath(ldir), "secrets", "ssh", "id_ed25519")


def ssh_config(plan: LabPlan, ldir: str) -> str:
    """An SSH config naming every login node, for ssh -F, Fabric and `ctk job --host`, logging
    in as the lab's user (`ssh -l root` for root). Host keys are checked against
    lab/known_hosts, written at deploy time."""
    ldir = os.path.abspath(ldir)
    out = ["# ctk lab: ssh -F THIS_FILE LOGIN_NODE\n"]
    for x in plan.nodes:
        if x.role == "login":
            out.append(f"Host {x.name}\n  HostName {x.addr}\n  Port {x.port}\n  User {plan.dep.settings_of(LabSettings).user}\n"
                       f"  IdentityFile {ssh_key(ldir)}\n  IdentitiesOnly yes\n"
                       f"  UserKnownHostsFile {ldir}/known_hosts\n  StrictHostKeyChecking yes\n")
    return "".join(out)


def _ssh_keys(plan: LabPlan, ldir: str) -> None:
    """The lab's SSH host key and root's login key (secrets/ssh, 0700), and known_hosts."""
    from ..sandbox.sshd import keypair

    d = os.path.join(ldir, "secrets", "ssh")
    os.close(secretfiles.open_dir(ldir, "secrets/ssh"))  # 0700, root's, reached through no link
    keypair(os.path.join(d, "host_ed25519"), "ctk-lab-host")
    keypair(ssh_key(ldir), "ctk-lab-root")
    with open(os.path.join(d, "host_ed25519.pub")) as f:
        pub = " ".join(f.read().split()[:2])
    known = "".join(f"[{x.addr}]:{x.port} {pub}\n" for x in plan.nodes if x.role == "login")
    atomic.write_if_changed(os.path.join(ldir, "known_hosts"), known)


def node_spec(plan: LabPlan, x: LabNode, ldir: str, lowerdirs: list[str]) -> nodes.NodeSpec:
    slurm_auth = plan.dep.controller is not None and plan.dep.controller.slurm_auth
    if slurm_auth:  # auth/slurm: every Slurm daemon reads the key from the node's tmpfs
        services, env = [], {"SLURM_SACK_KEY": f"/run/{SLURM_KEY_IN_NODE}"}
        run_files = {SLURM_KEY_IN_NODE: {"src": os.path.join(ldir, "secrets", "slurm.key"), "mode": "0400",
                                         "owner": "root"}}
        # 0755 as with munge: the key is 0400, and jobs read /run/ctk/preempted there
        run_dirs = [{"path": "ctk", "mode": "0755", "owner": "root"}]
        if x.role == "login":  # the socket Slurm's commands authenticate through on a login node
            services.append(nodes.Service("sackd", ["/usr/sbin/sackd", "-D"], env=env))
    else:
        env = {}
        services = [nodes.Service("munged", ["/usr/sbin/munged", "--foreground",
                                             f"--key-file=/run/{MUNGE_KEY_IN_NODE}"], user="munge",
                                  ready="/run/munge/munge.socket.2")]
        run_files = {MUNGE_KEY_IN_NODE: {"src": os.path.join(ldir, "secrets", "munge.key"), "mode": "0400",
                                         "owner": "munge"}}
        run_dirs = [{"path": "munge", "mode": "0755", "owner": "munge"}]
    acct = x.role == "controller" and accounting(plan)
    if acct:  # the database, then slurmdbd, then slurmctld (a first boot makes the database)
        services.append(nodes.Service("mariadbd", ["/bin/sh", "-c", MARIADB_SCRIPT],
                                      ready="/run/mysqld/mysqld.sock", ready_timeout=120))
        services.append(nodes.Service("slurmdbd", ["/bin/sh", "-c", SLURMDBD_SCRIPT],
                                      env={**env, "SLURM_CONF": f"/run/{DBD_DIR_IN_NODE}/slurm.conf"},
                                      ready=f"tcp:{x.addr}:{leases.port(plan.n, DBD_PORT_SLOT)}", ready_timeout=120))
        run_files[f"{DBD_DIR_IN_NODE}/slurmdbd.conf"] = {
            "src": os.path.join(ldir, "secrets", "slurmdbd.conf"), "mode": "0600", "owner": "root"}
        run_dirs += [{"path": DBD_DIR_IN_NODE, "mode": "0700", "owner": "root"},
                     {"path": "mysqld", "mode": "0755", "owner": "root"}]
    if x.role == "controller":
        services.append(nodes.Service("slurmctld", ["/usr/sbin/slurmctld", "-D", "-i"], env=env))
    elif x.role == "compute":
        services.append(nodes.Service("slurmd", ["/usr/sbin/slurmd", "-D", "-N", x.name], env=env))
    if x.role == "login":  # sshd on the node's own address and port: ctk job --host reaches it
        from ..sandbox.sshd import sshd_parts

        sd = os.path.join(ldir, "secrets", "ssh")
        files, dirs, sshd = sshd_parts(x.addr, x.port, os.path.join(sd, "host_ed25519"),
                                       os.path.join(sd, "id_ed25519.pub"))
        run_files.update(files)
        run_dirs += dirs
        services.append(sshd)
    binds: list[dict] = [{"src": os.path.join(ldir, "etc", "slurm"), "dest": "/etc/slurm", "ro": True},
                         {"src": os.path.join(ldir, "etc", "hosts"), "dest": "/etc/hosts", "ro": True},
                         {"src": os.path.join(ldir, "home"), "dest": "/home"},
                         {"src": os.path.join(ldir, "root"), "dest": "/root"},
                         {"src": os.path.join(ldir, "gpus"), "dest": GPU_DIR_IN_NODE, "ro": True}]
    if x.role == "controller":
        binds.append({"src": os.path.join(ldir, "slurmctld"), "dest": "/var/spool/slurmctld"})
        if plan.cloud_nodes:
            binds.append({"src": os.path.join(ldir, "power", "requests"), "dest": POWER_DIR_IN_NODE})
    if acct:
        binds.append({"src": os.path.join(ldir, "slurmdbd"), "dest": DB_DIR_IN_NODE})
    lab = plan.dep.settings_of(LabSettings)
    return nodes.NodeSpec(
        hostname=x.name, state_dir=os.path.join(ldir, "nodes", x.name), lowerdirs=lowerdirs,
        services=services, binds=binds, run_files=run_files, run_dirs=run_dirs,
        netns=os.path.join(netns.NETNS_DIR, netns.netns(plan.n, x.host)),
        accounts=[{"name": lab.user, "uid": lab.user_uid, "gid": lab.user_uid, "home": f"/home/{lab.user}"}])


def user_home(plan: LabPlan, ldir: str) -> str:
    """/home/USER of the lab's user (lab/home/USER, 0700, the user's), made on the first deploy."""
    lab = plan.dep.settings_of(LabSettings)
    home = os.path.join(ldir, "home", lab.user)
    try:
        st = os.lstat(home)
    except FileNotFoundError:
        os.mkdir(home, 0o700)
        os.chown(home, lab.user_uid, lab.user_uid)
        return home
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{home} is not a folder: it is the home of the lab's user {lab.user}",
                        hint="move it away; ctk deploy makes the folder")
    return home


def check_accounts(plan: LabPlan, lowerdirs: dict[str, list[str]]) -> None:
    """Refuse a lab whose accounts (the lab's user, its images' service accounts) share a uid or
    gid with an account or a process of this machine: that host account could read the node's
    secrets through /proc, or trace its jobs."""
    from ..images.accounts import host_ids, image_accounts

    host_u, host_g = host_ids()
    lab = plan.dep.settings_of(LabSettings)
    seen: list[tuple[str, str, int, int]] = [("the lab's user", lab.user, lab.user_uid, lab.user_uid)]
    for img in plan.images:
        seen += [(f"image {img.name}'s account", name, uid, gid) for name, uid, gid in image_accounts(lowerdirs[img.name])]
    for what, name, uid, gid in seen:
        if uid < 100 or uid == 65534:  # root and Debian's static accounts, the same everywhere
            continue
        clash = host_u.get(uid) or (f"{host_g[gid]} (group)" if gid >= 100 and gid != 65534 and gid in host_g else None)
        if clash:
            hint = ("set user_uid in the ctk/target/local module to a free number from 1900000 to 1900099"
                    if name == lab.user else "rebuild the image (ctk renumbers its accounts from 1900100), or "
                    "move the host account")
            raise UserError(f"{what} {name} (uid {uid}, gid {gid}) shares its number with this machine's "
                            f"{clash}", hint=hint)


def spec_hash(spec: nodes.NodeSpec, conf_files: dict[str, str]) -> str:
    """What a node was booted with; a change means it must be restarted."""
    d = asdict(spec)
    return hashlib.sha256(json.dumps([d, conf_files.get("etc/hosts")], sort_keys=True).encode()).hexdigest()[:16]


# ---- side effects --------------------------------------------------------------------------

def _save_state(deployment_dir: str, state: dict) -> None:
    write_state(lab_dir(deployment_dir), state)


def _keys(ldir: str, slurm_auth: bool, acct: bool) -> None:
    """The cluster's secret: munge.key, or auth/slurm's slurm.key (1024 random bytes, 0400 in
    secrets/, 0700; never in an image, never printed); and with accounting the database
    password (0400), made once."""
    ensure_munge_key(os.path.join(ldir, "secrets", "slurm.key" if slurm_auth else "munge.key"))
    if acct:
        import secrets

        ensure_secret(os.path.join(ldir, "secrets", "mariadb.password"), lambda: secrets.token_hex(24).encode())


# The commands `ctk env` puts on PATH, and those whose working directory is the job's.
WRAPPED = ("sbatch", "srun", "salloc", "squeue", "sinfo", "scontrol", "scancel", "sacct", "sstat", "sprio",
           "sshare", "sacctmgr", "sreport", "sattach", "sbcast")
NEED_CWD = ("sbatch", "srun", "salloc")
# The environment a wrapped command passes into the node: Slurm's own input variables.
PASSED_ENV = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SINFO_", "SACCT_", "SCONTROL_", "SCANCEL_")


def wrapper(ldir: str, node: str, command: str, python: str, user: str) -> str:
    """A thin command (a Python script that needs nothing but the standard library and ctk's
    sandbox.enter) that runs the lab's COMMAND in NODE, arguments verbatim, in the node's view
    of the current folder, as the lab's USER (or $CTK_LAB_USER: root for an admin's commands)."""
    ldir = os.path.abspath(ldir)
    pkg = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    shared = [(os.path.join(ldir, "home"), "/home"), (os.path.join(ldir, "root"), "/root")]
    return f"""#!{python} -I
# Written by ctk for the lab in {os.path.dirname(ldir)}: runs Slurm's `{command}` in the lab's
# node {node}, with the arguments as given, in the same folder as seen from the node, as the
# lab's user {user} (${USER_ENV}=root: as root).
import os, sys
LAB, NODE, CMD, PKG = {ldir!r}, {node!r}, {command!r}, {pkg!r}
SHARED = {shared!r}
NEED_CWD, PASSED = {command in NEED_CWD!r}, {PASSED_ENV!r}
USER = os.environ.get({USER_ENV!r}) or {user!r}

def fail(msg, code):
    sys.stderr.write(CMD + ": " + msg + "\\n")
    sys.exit(code)

try:
    pid = open(os.path.join(LAB, "nodes", NODE, "pid")).read().strip()
    up = b"ctk.sandbox.nodeinit" in open("/proc/" + pid + "/cmdline", "rb").read()
except (OSError, ValueError):
    up = False
if not up:
    fail("the lab's node " + NODE + " is not running (ctk status " + os.path.dirname(LAB) + " shows it; ctk deploy brings it back)", 1)
try:
    here = os.path.realpath(os.getcwd())
except OSError:
    here = ""
wd = next((node + here[len(host):] for host, node in SHARED if here == host or here.startswith(host + "/")), None)
if wd is None:
    args = sys.argv[1:]
    if NEED_CWD and not any(a in ("-D", "--chdir") or a.startswith(("--chdir=", "-D")) for a in args):
        fail("the current folder " + (here or "(deleted)") + " is not shared with the lab's nodes. Shared: "
             + "; ".join(h + " (" + n + " on the nodes)" for h, n in SHARED) + ". cd into one, or give --chdir", 2)
if not NEED_CWD and wd and wd.startswith("/root") and USER != "root":
    wd = None  # a command that reads no files of the folder: from the user's home
env = {{k: v for k, v in os.environ.items() if k.startswith(PASSED) and k != "SLURM_CONF"}}
if os.environ.get("TERM"):
    env["TERM"] = os.environ["TERM"]
sys.path.insert(0, PKG)
from ctk.sandbox.enter import EnterError, enter
try:
    sys.exit(enter(int(pid), [CMD, *sys.argv[1:]], user=USER, cwd=wd, env=env))
except EnterError as e:
    fail(str(e) + ((" (root's /root is not the lab's user's: cd into " + os.path.join(LAB, "home", USER)
                    + ", or " + {USER_ENV!r} + "=root)") if wd and wd.startswith("/root") and USER != "root" else ""), 125)
"""


def write_wrappers(deployment_dir: str, client: str, user: str) -> str:
    """The lab's bin/ folder of wrapped Slurm commands (rewritten when they change); its path."""
    import sys

    ldir = os.path.abspath(lab_dir(deployment_dir))
    bindir = os.path.join(ldir, "bin")
    os.makedirs(bindir, exist_ok=True)
    for cmd in WRAPPED:
        path = os.path.join(bindir, cmd)
        atomic.write_if_changed(path, wrapper(ldir, client, cmd, sys.executable, user))
        os.chmod(path, 0o755)
    return bindir


def _ask(deployment_dir: str, *argv: str, timeout: float = 15) -> str | None:
    """The output of one of the lab's Slurm commands, or None if it fails or does not answer."""
    try:
        r = slurm(deployment_dir, *argv, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    return r.stdout if r.returncode == 0 else None


def node_states(deployment_dir: str) -> dict[str, str]:
    """Slurm's state of every node (idle, alloc, down*, ...), or {} if slurmctld is unreachable."""
    out = _ask(deployment_dir, "sinfo", "-h", "-N", "-o", "%N %T")
    return parse_node_states(out) if out is not None else {}


ERROR_LINE = re.compile(r"\b(fatal|error|failed|cannot|can't|denied|refused)\b", re.I)


def log_errors(path: str, n: int = 6) -> list[str]:
    """The last N lines of the log at PATH that say what went wrong (else its last N lines),
    each clipped: what a failure message quotes."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 65536))
            lines = [ln.rstrip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return []
    bad = [ln for ln in lines if ERROR_LINE.search(ln)]
    return [ln if len(ln) <= 300 else ln[:297] + "..." for ln in (bad or lines)[-n:]]


def dead_daemon(deployment_dir: str, plan: LabPlan) -> DaemonError | None:
    """A daemon of a running node of the lab that has exited (slurmctld refusing its state,
    slurmdbd without its database, ...): an error naming the node, the daemon and its last error
    lines; None while every one runs."""
    ldir = lab_dir(deployment_dir)
    for x in plan.nodes:
        sd = os.path.join(ldir, "nodes", x.name)
        if nodes.node_alive(sd) is None:
            continue  # not booted (a dynamic node powered down)
        for name, st in nodes.service_states(sd).items():
            if st.get("running", True):
                continue
            log = os.path.join(sd, "log", f"{name}.log")
            why = f" with status {st['exit']}" if "exit" in st else (f": {st['error']}" if st.get("error") else "")
            lines = log_errors(log)
            return DaemonError(f"{name} on {x.name} exited{why} while the lab came up"
                               + ("; its last errors:\n" + "\n".join("    " + ln for ln in lines) if lines else ""),
                               hint=f"see {log}; fix the cause, then `ctk deploy` again")
    return None


def _checked(deployment_dir: str, plan: LabPlan, check):
    """CHECK, after making sure no daemon of the lab died (that raises at once)."""
    def run():
        err = dead_daemon(deployment_dir, plan)
        if err:
            raise err
        return check()
    return run


def _wait_ready(deployment_dir: str, plan: LabPlan, timeout: float, progress: Progress) -> None:
    def timed_out(states: str) -> DaemonError:
        ctl = plan.controller.name if plan.controller else None
        lines = log_errors(os.path.join(lab_dir(deployment_dir), "nodes", ctl, "log", "slurmctld.log")) if ctl else []
        return DaemonError(f"nodes did not become idle in {timeout:.0f}s: {states}"
                           + (f"; slurmctld on {ctl} last said:\n" + "\n".join("    " + ln for ln in lines)
                              if lines else ""),
                           hint=f"see the nodes' logs in {os.path.join(lab_dir(deployment_dir), 'nodes')}/NODE/log")

    wait_ready(_checked(deployment_dir, plan, lambda: node_states(deployment_dir)),
               [x.name for x in plan.nodes if x.role == "compute"], timeout, progress, 0.3, timed_out)


def cluster_registered(deployment_dir: str, cluster: str) -> bool | None:
    """Whether slurmdbd answers and knows CLUSTER (None: it does not answer)."""
    out = _ask(deployment_dir, "sacctmgr", "-n", "-P", "show", "cluster", "format=cluster")
    return None if out is None else cluster in out.split()


def _wait_accounting(deployment_dir: str, plan: LabPlan, timeout: float, progress: Progress) -> None:
    """Until slurmdbd answers and holds the cluster, which slurmctld registers when it first
    reaches slurmdbd."""
    from ..waiting import TimedOut, poll

    progress.task("wait for accounting (slurmdbd)")
    name = plan.dep.slurm_cluster_name
    try:
        poll(_checked(deployment_dir, plan, lambda: cluster_registered(deployment_dir, name)), timeout, 0.5)
    except TimedOut:
        log = os.path.join(lab_dir(deployment_dir), "nodes", plan.controller.name, "log", "slurmdbd.log")
        raise DaemonError(f"slurmdbd on {plan.controller.name} did not register cluster {name} in time",
                          hint=f"see {log}") from None


@dataclass
class DeployResult:
    deployment_dir: str
    booted: list[str]
    restarted: list[str]
    kept: list[str]
    stopped: list[str]
    reconfigured: bool
    notes: list[str]
    seconds: float


def power_dir(deployment_dir: str) -> str:
    return os.path.join(os.path.abspath(lab_dir(deployment_dir)), "power")


def agent_config(plan: LabPlan, deployment_dir: str, specs: dict[str, nodes.NodeSpec]) -> dict:
    """What the lab's agent needs: the nodes it may boot, stop or preempt, with the specs they
    boot with, and the rehearsal's settings."""
    lab = plan.dep.settings_of(LabSettings)
    return {"deployment_dir": os.path.abspath(deployment_dir), "n": plan.n,
            "preemption_notice": lab.preemption_notice, "flex_start_delay": lab.flex_start_delay,
            "flex_run_duration": lab.flex_run_duration, "boot_delay": lab.boot_delay,
            "chaos_interval": lab.chaos_interval, "chaos_seed": lab.chaos_seed,
            "nodes": {x.name: {"host": x.host, "dynamic": x.dynamic, "spot": x.spot, "flex": x.flex,
                               "spec": asdict(specs[x.name])}
                      for x in plan.nodes if x.dynamic or x.spot}}


def start_agent(deployment_dir: str, config: dict) -> tuple[int, bool]:
    """The lab's agent, running with CONFIG (restarted when it changed); (pid, restarted)."""
    import sys

    from ..waiting import TimedOut, poll
    from .labagent import agent_pid

    pdir = power_dir(deployment_dir)
    os.makedirs(os.path.join(pdir, "requests"), exist_ok=True)
    path = os.path.join(pdir, "agent.json")
    changed = atomic.write_if_changed(path, json.dumps(config, indent=1, sort_keys=True) + "\n", 0o600)
    pid = agent_pid(pdir)
    if pid and not changed:
        return pid, False
    if pid:
        terminate(pid)
    log = open(os.path.join(pdir, "agent.log"), "ab")
    proc = subprocess.Popen([sys.executable, "-m", "ctk.targets.labagent", path], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=ctk_env())
    try:
        poll(lambda: agent_pid(pdir) == proc.pid or proc.poll() is not None, 30, 0.05)
    except TimedOut:
        pass
    if agent_pid(pdir) != proc.pid:
        raise DaemonError("the lab's agent did not start", hint=f"see {os.path.join(pdir, 'agent.log')}")
    return proc.pid, bool(pid)


def stop_agent(deployment_dir: str) -> bool:
    from .labagent import agent_pid

    pid = agent_pid(power_dir(deployment_dir))
    if not pid:
        return False
    return terminate(pid)


BOOT_WORKERS = 8  # compute nodes booted at once (each mostly waits for its daemons to start)


def _boot_all(n: int, to_boot: list[tuple[LabNode, nodes.NodeSpec]], started: list[str], progress: Progress) -> None:
    """Boot the controller first, then the compute nodes side by side, then the login nodes;
    STARTED gets the state folder of every node that booted (the first failure is raised once
    the others have finished)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

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


def deploy_local(dep: Deployment, deployment_dir: str, *, max_nodes: int = DEFAULT_MAX_NODES,
                 progress: Progress | None = None, store: Store | None = None,
                 ready_timeout: float = 60.0) -> DeployResult:
    """Bring the lab cluster to the state the deployment describes; idempotent. Dynamic nodes
    are left powered down (the lab's agent boots them when Slurm asks)."""
    progress = progress or Progress()
    t0 = time.monotonic()
    ldir = os.path.abspath(lab_dir(deployment_dir))
    # A planted link or a foreign key in lab/secrets stops the deploy before anything starts.
    if os.path.lexists(ldir):
        secretfiles.check_tree(ldir, "secrets")
    ident = lab_identity(deployment_dir)
    if ident and ident["cluster"] != dep.slurm_cluster_name:  # before anything is written or started
        raise UserError(identity_clash(deployment_dir, ident, dep), hint=IDENTITY_HINT.format(dir=deployment_dir))
    n = leases.lease(deployment_dir)
    old = load_state(deployment_dir) or {}
    running = {x["name"] for x in old.get("nodes", [])
               if nodes.node_alive(os.path.join(ldir, "nodes", x["name"])) is not None}
    try:
        plan = plan_lab(dep, n, max_nodes)
        mem_notes = check_memory(plan, running)
    except UserError:
        if not old:  # refused before anything ran: the lease goes back
            leases.release(deployment_dir)
        raise
    # A lab left running when its folder was removed holds this lease's addresses: stop it.
    orphans = stop_leftovers(deployment_dir, only_orphans=True)
    if orphans:
        progress.say(f"note: stopped {len(orphans)} node(s) of an earlier lab whose folder was removed")
    for note in plan.notes + mem_notes:
        progress.say(f"note: {note}")
    from ..images.build import build_image
    from ..images.store import Store

    store = store or Store()
    layers: dict[str, list[str]] = {}
    for img in plan.images:
        rec = store.image(img.name)
        if rec is None or not all(store.has(k) for k in rec["layers"]) or rec["spec"] != asdict(img):
            build_image(img, store, progress)
            rec = store.image(img.name)
            assert rec is not None  # build_image records the image it built
        layers[img.name] = rec["layers"]

    started_now: list[str] = []
    to_boot: list[tuple[LabNode, nodes.NodeSpec]] = []
    try:
        check_accounts(plan, {name: store.lowerdirs(keys) for name, keys in layers.items()})
        for d in ("home", "root", "slurmctld", "slurmdbd", "gpus", "nodes", "power/requests"):
            os.makedirs(os.path.join(ldir, d), exist_ok=True)
        # What a node's root writes in the shared folders (a setuid binary, a file with
        # capabilities) is root's on the host too: no host user but root may reach lab/.
        os.chmod(ldir, 0o700)
        ident = new_identity(ident, dep)
        atomic.write_if_changed(os.path.join(ldir, IDENTITY), json.dumps(ident) + "\n", 0o600)
        os.chmod(os.path.join(ldir, "home"), 0o755)
        user_home(plan, ldir)
        os.chmod(os.path.join(ldir, "root"), 0o700)
        os.chmod(os.path.join(ldir, "power"), 0o700)
        _ssh_keys(plan, ldir)
        max_gpus = max([ns.gpu_count for ns in plan.dep.nodesets] + [0])
        for i in range(max_gpus):
            link = os.path.join(ldir, "gpus", f"nvidia{i}")
            if not os.path.islink(link):
                os.symlink("/dev/null", link)
        acct = accounting(plan)
        _keys(ldir, plan.dep.controller is not None and plan.dep.controller.slurm_auth, acct)
        if acct:
            atomic.write_if_changed(os.path.join(ldir, "secrets", "slurmdbd.conf"), slurmdbd_conf(plan, ldir), 0o600)
        files = lab_files(plan, ldir)
        files[f"etc/slurm/{IDENTITY_FILE}"] = json.dumps({"cluster": ident["cluster"], "id": ident["id"]}) + "\n"
        changed = [rel for rel, text in files.items() if atomic.write_if_changed(os.path.join(ldir, rel), text)]
        for rel in ("etc/slurm/gres.conf", *POWER_SCRIPTS):
            if rel not in files and os.path.exists(os.path.join(ldir, rel)):
                os.unlink(os.path.join(ldir, rel))
                changed.append(rel)
        for rel in POWER_SCRIPTS:
            if rel in files:
                os.chmod(os.path.join(ldir, rel), 0o755)
        netns.ensure_bridge(n)
        write_wrappers(deployment_dir, client_node(plan.nodes), plan.dep.settings_of(LabSettings).user)

        old_nodes = {x["name"]: x for x in old.get("nodes", [])}
        want = {x.name: x for x in plan.nodes}
        node_set_changed = set(old_nodes) != set(want) or any(
            (old_nodes[k]["addr"], old_nodes[k]["port"], old_nodes[k].get("dynamic", False))
            != (want[k].addr, want[k].port, want[k].dynamic) for k in want if k in old_nodes)
        conf_changed = any(rel.startswith("etc/slurm/") for rel in changed)

        stopped = []
        for name in old_nodes:
            if name not in want:
                nodes.stop(os.path.join(ldir, "nodes", name))
                netns.remove(n, int(old_nodes[name].get("host") or old_nodes[name]["addr"].rsplit(".", 1)[1]))
                shutil.rmtree(os.path.join(ldir, "nodes", name), ignore_errors=True)
                stopped.append(name)

        # Until the deploy completes, status and destroy find the nodes it boots from here.
        _save_state(deployment_dir, {**old, "complete": False} if old else {
            "n": n, "deployment": dep.deployment_name, "nodes": [{**asdict(x), "hash": ""} for x in plan.nodes],
            "notes": plan.notes, "max_nodes": max_nodes, "complete": False})
        booted, restarted, kept, records = [], [], [], []
        specs: dict[str, nodes.NodeSpec] = {}
        # Slurm 22.05 adds or moves nodes only on a restart of its daemons; a change of
        # partitions or limits needs no more than `scontrol reconfigure`.
        order = sorted(plan.nodes, key=lambda x: {"controller": 0, "compute": 1, "login": 2}[x.role])
        for x in order:
            spec = specs[x.name] = node_spec(plan, x, ldir, store.lowerdirs(layers[x.image]))
            h = spec_hash(spec, files)
            running_now = nodes.node_alive(spec.state_dir) is not None  # up, or booting (a killed deploy's)
            healthy = nodes.node_pid(spec.state_dir) is not None and not nodes.dead_services(spec.state_dir)
            prev = old_nodes.get(x.name, {})
            if healthy and prev.get("hash") == h and not (node_set_changed and x.role != "login"):
                kept.append(x.name)
            elif x.dynamic and not running_now:
                pass  # powered down: the agent boots it when a job needs it
            elif running_now and x.dynamic:  # slurmctld restarts with it powered down
                nodes.stop(spec.state_dir)
                netns.remove(n, x.host)
                stopped.append(x.name)
            else:
                if running_now:
                    nodes.stop(spec.state_dir)
                    restarted.append(x.name)
                else:
                    booted.append(x.name)
                to_boot.append((x, spec))
            records.append({**asdict(x), "hash": h})
        _boot_all(n, to_boot, started_now, progress)
        reconfigured = False
        if conf_changed and not node_set_changed and kept and any(r == plan.controller.name for r in kept):
            slurm(deployment_dir, "scontrol", "reconfigure")
            reconfigured = True
        if plan.needs_agent:
            pid, _ = start_agent(deployment_dir, agent_config(plan, deployment_dir, specs))
        else:
            stop_agent(deployment_dir)
        _save_state(deployment_dir, {"n": n, "deployment": dep.deployment_name, "nodes": records,
                                     "notes": plan.notes, "max_nodes": max_nodes, "complete": True,
                                     "accounting": acct, "cluster": dep.slurm_cluster_name,
                                     "agent": plan.needs_agent, "user": dep.settings_of(LabSettings).user})
        _wait_ready(deployment_dir, plan, ready_timeout, progress)
        if acct:
            _wait_accounting(deployment_dir, plan, ready_timeout, progress)
    except BaseException:
        # Stop what this run started or was starting (a node still booting in a pool thread);
        # what was already running before stays as it was.
        for sd in started_now + [spec.state_dir for _, spec in to_boot]:
            nodes.stop(sd)
        if not old:  # nothing of this lab ran before: give back its network and its lease too
            stop_agent(deployment_dir)
            _stop_all(deployment_dir)
            try:
                os.unlink(os.path.join(lab_dir(deployment_dir), "state.json"))
            except FileNotFoundError:
                pass
            netns.remove_lab(n)
            leases.release(deployment_dir)
        else:
            _save_state(deployment_dir, old)
        raise
    return DeployResult(deployment_dir, booted, restarted, kept, stopped, reconfigured, plan.notes + mem_notes,
                        time.monotonic() - t0)


def _stop_all(deployment_dir: str) -> list[str]:
    ldir = lab_dir(deployment_dir)
    stop_agent(deployment_dir)  # first: it would boot nodes again
    stopped = []
    nd = os.path.join(ldir, "nodes")
    if os.path.isdir(nd):
        for name in sorted(os.listdir(nd)):
            if nodes.stop(os.path.join(nd, name)):
                stopped.append(name)
    stop_munged(os.path.join(ldir, "host-munge"))
    n = leases.number(deployment_dir)
    if n is not None:
        netns.remove_lab(n)
    return stopped


# ---- labs whose folder is gone ------------------------------------------------------------
# A lab's processes name their deployment folder on their command line (nodeinit's spec file,
# the host munged's socket), so a lab is found again even after its folder was removed.

def _lab_processes(deployment_dir: str) -> list[tuple[int, str, bool]]:
    """(pid, node name or "host-munge", its files still exist) of every process of the lab
    of DEPLOYMENT_DIR: nodeinit (PID 1 of each node) and the host's munged."""
    prefixes = {os.path.join(p, "lab") + "/" for p in (os.path.abspath(deployment_dir), os.path.realpath(deployment_dir))}
    out = []
    for pid in (int(d) for d in os.listdir("/proc") if d.isdigit()):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if len(argv) > 3 and argv[1:3] == ["-m", "ctk.targets.labagent"]:
            for pre in prefixes:
                if argv[3].startswith(pre + "power/"):
                    out.append((pid, "agent", os.path.exists(argv[3])))
        elif len(argv) > 3 and argv[1:3] == ["-m", "ctk.sandbox.nodeinit"]:
            spec = argv[3]
            for pre in prefixes:
                if spec.startswith(pre + "nodes/"):
                    out.append((pid, spec[len(pre + "nodes/"):].split("/")[0], os.path.exists(spec)))
        elif argv and os.path.basename(argv[0]) == "munged":
            for a in argv:
                for pre in prefixes:
                    if a.startswith(f"--socket={pre}host-munge/"):
                        out.append((pid, "host-munge", os.path.exists(a.split("=", 1)[1])))
    return out


def stop_leftovers(deployment_dir: str, only_orphans: bool = False) -> list[str]:
    """Stop the lab processes of DEPLOYMENT_DIR that no state file leads to (ONLY_ORPHANS:
    just those whose files are gone); the node names stopped."""
    procs = [p for p in _lab_processes(deployment_dir) if not (only_orphans and p[2])]
    procs.sort(key=lambda p: p[1] != "agent")  # the agent first: it would boot nodes again
    return sorted(name for pid, name, _ in procs if terminate(pid) and name not in ("host-munge", "agent"))


def has_leftovers(deployment_dir: str) -> bool:
    return leases.leased(deployment_dir) or bool(_lab_processes(deployment_dir))


# What `ctk destroy` keeps of a lab (its users' and its accounting's data), by folder of lab/,
# with what it is on the nodes; `ctk destroy --purge` deletes it, and the next deploy into
# the folder uses it again.
KEPT = (("home", "/home of every node"), ("root", "/root of every node"),
        ("slurmdbd", "the accounting database (sacct's history)"),
        ("slurmctld", "the controller's saved state (queued jobs, the next job id)"))
IDENTITY = "identity.json"  # the cluster lab/ belongs to: {"cluster", "deployment", "id"}


def new_identity(held: dict | None, dep: Deployment) -> dict:
    """lab/identity.json for a deploy of DEP: the id of the cluster whose data lab/ keeps (HELD,
    the same cluster: another one was refused or set aside), else a new one (next_identity)."""
    return {**next_identity(held, dep.slurm_cluster_name), "deployment": dep.deployment_name}


def identity_clash(deployment_dir: str, held: dict, dep: Deployment) -> str:
    """The refusal of a deploy of DEP into a folder that holds another cluster (HELD)."""
    how = "runs" if held.get("running", load_state(deployment_dir) is not None) else "keeps the data of"
    old = f"cluster {held['cluster']!r}" + (f" (deployment {held['deployment']})" if held.get("deployment") else "")
    return (f"{deployment_dir} {how} {old}; the blueprint is cluster {dep.slurm_cluster_name!r} "
            f"(deployment {dep.deployment_name}): a deployment folder holds one cluster")


@dataclass
class DestroyResult:
    stopped: list[str]
    kept: list[tuple[str, str]]  # (path, what it is) left in place
    deleted: list[tuple[str, str]]  # (path, what it was) of the kept kinds, deleted by --purge


def kept_data(deployment_dir: str) -> list[tuple[str, str]]:
    """(path, what it is) of each folder of users' or accounting data under lab/, kept by
    destroy (with the saved state of controllers of other clusters, set aside by deploy -w)."""
    ldir = os.path.abspath(lab_dir(deployment_dir))
    out = [(os.path.join(ldir, name), what) for name, what in KEPT if os.path.isdir(os.path.join(ldir, name))]
    try:
        names = sorted(os.listdir(ldir))
    except OSError:
        names = []
    for name in names:
        if name.startswith("slurmctld.") and os.path.isdir(os.path.join(ldir, name)):
            out.append((os.path.join(ldir, name), f"the saved state of the controller of cluster {name[10:]}"))
    return out


def lab_identity(deployment_dir: str) -> dict | None:
    """The cluster whose lab lives (or whose data is kept) in DEPLOYMENT_DIR/lab: {cluster,
    deployment}, from lab/identity.json, else slurmctld's own record of its cluster's name in
    its saved state; None if lab/ holds no cluster's data."""
    ldir = lab_dir(deployment_dir)
    try:
        with open(os.path.join(ldir, IDENTITY)) as f:
            ident = json.load(f)
        if isinstance(ident, dict) and isinstance(ident.get("cluster"), str):
            return ident
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(ldir, "slurmctld", "clustername")) as f:
            name = f.read().strip()
    except OSError:
        return None
    return {"cluster": name, "deployment": None} if name else None


def set_aside_controller_state(deployment_dir: str, old_cluster: str) -> str | None:
    """Move the saved state of OLD_CLUSTER's controller out of the way of a new cluster's
    (slurmctld refuses another cluster's state: CLUSTER NAME MISMATCH); where it went."""
    ldir = lab_dir(deployment_dir)
    src = os.path.join(ldir, "slurmctld")
    if not os.path.isdir(src) or not os.listdir(src):
        return None
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in old_cluster) or "unknown"
    dest, i = os.path.join(ldir, f"slurmctld.{safe}"), 1
    while os.path.lexists(dest):
        i += 1
        dest = os.path.join(ldir, f"slurmctld.{safe}.{i}")
    os.rename(src, dest)
    return dest


def destroy_local(deployment_dir: str, purge: bool = False) -> DestroyResult:
    """Stop every daemon of the lab, free its addresses and ports, remove its runtime state
    (the deployment folder's generated files stay). The lab's /home, /root, accounting database
    and controller state stay in lab/ (KEPT), unless PURGE. Works on a lab whose folder is gone."""
    stopped = _stop_all(deployment_dir) if os.path.isdir(deployment_dir) else []
    stopped += stop_leftovers(deployment_dir)
    n = leases.number(deployment_dir)
    if n is not None:
        netns.remove_lab(n)
    ldir = lab_dir(deployment_dir)
    data = kept_data(deployment_dir)
    ident = lab_identity(deployment_dir)
    if purge or not data:
        shutil.rmtree(ldir, ignore_errors=True)
        kept, deleted = [], data
        if purge and ident and parse_identity(json.dumps(ident)):  # the jobs ctk recorded of it go too
            reg = registry_home({"cluster": ident["cluster"], "id": ident["id"]})
            if os.path.isdir(reg):
                shutil.rmtree(reg)
                deleted.append((reg, "ctk's registry of the lab's jobs (ctk job list)"))
    else:
        keep = {os.path.basename(p) for p, _ in data}
        for name in os.listdir(ldir):
            if name in keep:
                continue
            path = os.path.join(ldir, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        if ident:  # what the kept data belongs to, for the next deploy's check
            atomic.write_file(os.path.join(ldir, IDENTITY), json.dumps(ident) + "\n", 0o600)
        kept, deleted = data, []
    leases.release(deployment_dir)
    return DestroyResult(sorted(set(stopped)), kept, deleted)


def destroy_message(deployment_dir: str, res: DestroyResult) -> str:
    lines = [f"destroyed {deployment_dir}: stopped {len(res.stopped)} node(s)"]
    if res.kept:
        lines.append(f"kept (the next `ctk deploy` into {deployment_dir} uses them again; "
                     f"`ctk destroy --purge {deployment_dir}` deletes them):")
        lines += [f"  {path}  {what}" for path, what in res.kept]
    if res.deleted:
        lines.append("deleted (--purge):")
        lines += [f"  {path}  {what}" for path, what in res.deleted]
    return "\n".join(lines)


def status_local(deployment_dir: str) -> Status:
    """Nodes (process and Slurm state) and partitions of a lab deployment; the nodes a deploy
    left running when it was killed before it finished, if that is all there is."""
    state = load_state(deployment_dir)
    ldir = lab_dir(deployment_dir)
    if state is None:
        kept = kept_data(deployment_dir)
        raise UserError(f"{deployment_dir} has no running lab" + (
            f" (it keeps a destroyed lab's data: {', '.join(os.path.basename(p) for p, _ in kept)} in "
            f"{lab_dir(deployment_dir)})" if kept else ""),
            hint=f"deploy it with: ctk deploy BLUEPRINT -o {deployment_dir}")
    slurm_states = node_states(deployment_dir)
    out_nodes = []
    for x in state["nodes"]:
        sd = os.path.join(ldir, "nodes", x["name"])
        running = nodes.node_pid(sd) is not None
        dead = nodes.dead_services(sd) if running else []
        ssh = None
        if x["role"] == "login":
            ssh = {"host": x["addr"], "port": x["port"], "user": state.get("user", "root"), "identity": ssh_key(ldir),
                   "ssh_config": os.path.join(os.path.abspath(ldir), "ssh_config")}
        sst = slurm_states.get(x["name"]) if x["role"] == "compute" else None
        out_nodes.append(NodeStatus(x["name"], x["role"], x["addr"], running and not dead, dead, sst,
                                    image=x["image"], ssh=ssh,
                                    power=power_state(sst, running) if x.get("dynamic") else None,
                                    spot=True if x.get("spot") else None,
                                    flex=True if x.get("flex") else None))
    parts = _ask(deployment_dir, *SINFO_PARTITIONS)
    acct = None
    if state.get("accounting"):
        acct = "up" if cluster_registered(deployment_dir, state["cluster"]) else "down"
    agent, events = None, []
    if state.get("agent"):
        from .labagent import agent_pid, read_events

        pdir = power_dir(deployment_dir)
        agent = "up" if agent_pid(pdir) else "down"
        events = read_events(pdir)[-EVENTS_SHOWN:]
    return Status(deployment=state["deployment"], target="local", controller_reachable=bool(slurm_states),
                  nodes=out_nodes, partitions=parse_partitions(parts) if parts is not None else [],
                  notes=state.get("notes", []), slurm_client=client_node(state["nodes"]), lab_user=state.get("user"),
                  interrupted=not state.get("complete", True), accounting=acct, agent=agent, events=events)


def preempt_local(deployment_dir: str, names: list[str], notice: float | None = None,
                  wait: bool = False) -> list[dict]:
    """Hand the lab's agent a preemption of each node (Spot nodes that are powered up); with
    WAIT, return once each is down. One row per node: {node, state, detail}."""
    from ..render.hostlist import expand
    from ..waiting import TimedOut, poll
    from .labagent import agent_pid, read_events, request

    state = load_state(deployment_dir)
    if state is None:
        raise UserError(f"{deployment_dir} has no running lab", hint=f"ctk deploy BLUEPRINT -o {deployment_dir}")
    by_name = {x["name"]: x for x in state["nodes"]}
    want: list[str] = []
    for arg in names:
        try:
            want += expand(arg)
        except ValueError as e:
            raise UserError(f"ctk preempt: {arg!r} is not a node name or hostlist: {e}") from None
    for name in want:
        x = by_name.get(name)
        if x is None:
            raise UserError(f"ctk preempt: no node {name!r} in {deployment_dir}",
                            hint=did_you_mean(name, list(by_name)) or "ctk status lists the nodes")
        if not x.get("spot"):
            spot = compress([k for k, v in by_name.items() if v.get("spot")])
            raise UserError(f"ctk preempt: {name} is not a Spot or preemptible node: Google Cloud does not "
                            "preempt it", hint=f"Spot nodes of this lab: {spot}" if spot else
                            NO_SPOT_HINT)
        if nodes.node_pid(os.path.join(lab_dir(deployment_dir), "nodes", name)) is None:
            raise UserError(f"ctk preempt: {name} is powered down: there is nothing to preempt",
                            hint="a job on its partition powers it up")
    pdir = power_dir(deployment_dir)
    if agent_pid(pdir) is None:
        raise DaemonError("the lab's agent is not running", hint=f"ctk deploy again starts it ({pdir}/agent.log)")
    since = time.time()
    kw = {"by": "ctk-preempt"} if notice is None else {"notice": notice, "by": "ctk-preempt"}
    request(pdir, "preempt", want, **kw)

    def seen(event: str) -> set[str | None]:
        return {e.get("node") for e in read_events(pdir) if e.get("event") == event and e.get("epoch", 0) >= since - 1}

    try:
        poll(lambda: set(want) <= seen("notice"), 15, 0.1)
    except TimedOut:
        raise DaemonError("the lab's agent did not take the preemption", hint=f"see {pdir}/agent.log") from None
    notices = {e["node"]: e for e in read_events(pdir) if e.get("event") == "notice" and e.get("epoch", 0) >= since - 1}
    if wait:
        longest = max(float(notices[n].get("seconds", 0)) for n in want)
        try:
            poll(lambda: set(want) <= seen("down"), longest + 60, 0.2)
        except TimedOut:
            raise DaemonError("the preempted nodes did not go down in time", hint=f"see {pdir}/events.log") from None
        return [{"node": n, "state": "down", "detail": "preempted; its jobs were requeued"} for n in want]
    return [{"node": n, "state": "notice",
             "detail": f"SIGTERM in {float(notices[n].get('seconds', 0)):g} s"} for n in want]


def exec_local(deployment_dir: str, node: str, argv: list[str], user: str | None = None) -> int:
    state = load_state(deployment_dir)
    if state is None:
        raise UserError(f"{deployment_dir} has no running lab")
    names = [x["name"] for x in state["nodes"]]
    if node not in names:
        raise UserError(f"no node {node!r} in {deployment_dir} ({did_you_mean(node, names) or 'nodes: ' + compress(names)})")
    sd = os.path.join(lab_dir(deployment_dir), "nodes", node)
    if nodes.node_pid(sd) is None:
        raise UserError(f"node {node} is not running", hint="ctk deploy again brings it back")
    return subprocess.call(nodes.exec_argv(sd, argv, user=user or "root", cwd=None if user else "/"))


def env_local(deployment_dir: str, user: str | None = None) -> str:
    """Shell exports that put the lab's Slurm commands (run in its login node, as the lab's user,
    or as USER) first on PATH."""
    import shlex

    state = load_state(deployment_dir)
    if state is None:
        raise UserError(f"{deployment_dir} has no running lab")
    bindir = write_wrappers(deployment_dir, client_node(state["nodes"]), state.get("user", "root"))
    out = f"export PATH={shlex.quote(bindir)}:\"$PATH\"\n"
    if user:
        out += f"export {USER_ENV}={shlex.quote(user)}\n"
    return out


class LocalTarget(Target):
    name = "local"

    def deploy(self, exp, dep: Deployment, deployment_dir: str, *, max_nodes: int | None,
               progress: Progress) -> DeployOutcome:
        res = deploy_local(dep, deployment_dir, max_nodes=max_nodes or DEFAULT_MAX_NODES, progress=progress)
        total = len(res.booted) + len(res.restarted) + len(res.kept)
        return DeployOutcome([
            f"{dep.deployment_name}: {total} node(s) up in {res.seconds:.1f}s "
            f"(booted {len(res.booted)}, restarted {len(res.restarted)}, unchanged {len(res.kept)}"
            + (", reconfigured" if res.reconfigured else "") + ")",
            f'use it:   eval "$(ctk env {deployment_dir})"; sinfo; srun -N2 hostname',
            f"stop it:  ctk destroy {deployment_dir}"], asdict(res))

    def is_deployed(self, deployment_dir: str) -> bool:
        return load_state(deployment_dir) is not None

    def status(self, deployment_dir: str) -> Status:
        return status_local(deployment_dir)

    def destroy(self, deployment_dir: str, progress: Progress, purge: bool = False) -> str:
        return destroy_message(deployment_dir, destroy_local(deployment_dir, purge=purge))

    def held(self, deployment_dir: str) -> dict | None:
        ident = lab_identity(deployment_dir)
        if ident is None:
            return None
        return {**ident, "running": load_state(deployment_dir) is not None}

    def preempt(self, deployment_dir: str, names: list[str], notice: float | None = None,
                wait: bool = False) -> list[dict]:
        return preempt_local(deployment_dir, names, notice=notice, wait=wait)

    def overwrite_refusal(self, deployment_dir: str) -> UserError | None:
        ldir = lab_dir(deployment_dir)
        if load_state(deployment_dir) is not None:
            return UserError(f"{deployment_dir} has a lab cluster deployed from it",
                             hint=f"`ctk deploy` updates it in place; `ctk destroy {deployment_dir}` stops it first")
        if os.path.isdir(ldir):
            return UserError(f"{deployment_dir} keeps a destroyed lab's data in {ldir} (its /home, /root and "
                             "accounting database); -w would delete it",
                             hint=f"`ctk deploy` updates the folder in place and uses that data again; "
                             f"`ctk destroy --purge {deployment_dir}` deletes it first")
        return None

    def replace(self, deployment_dir: str, old: dict, dep: Deployment, progress: Progress) -> list[str]:
        lines = []
        if old.get("running"):
            res = destroy_local(deployment_dir)
            lines.append(f"stopped the lab of cluster {old['cluster']} ({len(res.stopped)} node(s))")
        if old.get("cluster") != dep.slurm_cluster_name:
            moved = set_aside_controller_state(deployment_dir, old["cluster"])
            if moved:
                lines.append(f"kept the saved state of cluster {old['cluster']}'s controller in {moved}")
        try:
            os.unlink(os.path.join(lab_dir(deployment_dir), IDENTITY))
        except FileNotFoundError:
            pass
        return lines

    def exec(self, deployment_dir: str, node: str, argv: list[str], user: str | None = None) -> int:
        return exec_local(deployment_dir, node, argv, user)

    def env(self, deployment_dir: str, user: str | None = None) -> str:
        return env_local(deployment_dir, user)

    def job_cluster(self, deployment_dir: str) -> LabCluster:
        return job_cluster(deployment_dir)
