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
                           login node (ctk env puts them on PATH): the host needs no Slurm;
                           wrapper.json holds the lab's values they read (sandbox/labwrapper.py)
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

The package's rooms, in the order they build on each other (lab/state.json's LabState, which
the lab's client and agent read too, is targets/labstate.py):

    plan.py       the lab's plan (pure): nodes, scaling, memory check, Slurm's layout in the nodes
    files.py      the lab's files and config: slurm.conf and kin, power scripts, the database's
                  services, SSH keys and config, secrets, each node's spec, the lab's user
    commands.py   ctk exec and ctk env: the wrapped Slurm commands in lab/bin
    agent.py      the lab's agent's config, start and stop
    identity.py   the cluster lab/ belongs to, and the data a destroy keeps
    status.py     ctk status: nodes, partitions, accounting, agent
    ready.py      waiting for the lab's nodes and accounting to come up
    destroy.py    ctk destroy, and the processes of labs whose folder is gone
    deploy.py     ctk deploy
    preempt.py    ctk preempt
    target.py     LocalTarget, the target's one interface
"""


from ..labstate import (
    MEMORY_RESERVE_MB,
    NODE_MB,
    LabNode,
    LabState,
    NodeRecord,
    available_mb,
    lab_dir,
    load_state,
)
from .agent import agent_config, power_dir, start_agent, stop_agent
from .commands import (
    WRAPPED,
    WRAPPER_CONFIG,
    env_local,
    exec_local,
    wrapper,
    wrapper_config,
    write_wrappers,
)
from .deploy import BOOT_WORKERS, DeployResult, deploy_local
from .destroy import (
    DestroyResult,
    destroy_local,
    destroy_message,
    has_leftovers,
    stop_all,
    stop_leftovers,
)
from .files import (
    MARIADB_SCRIPT,
    SLURMDBD_SCRIPT,
    check_accounts,
    cluster_secrets,
    lab_files,
    node_spec,
    power_script,
    ready_script,
    slurmdbd_conf,
    spec_hash,
    ssh_config,
    ssh_key,
    ssh_keys,
    user_home,
)
from .identity import (
    IDENTITY,
    KEPT,
    identity_clash,
    kept_data,
    lab_identity,
    new_identity,
    set_aside_controller_state,
)
from .plan import (
    DB_DIR_IN_NODE,
    DB_PORT,
    DBD_DIR_IN_NODE,
    DBD_PORT_SLOT,
    DEFAULT_IMAGE,
    DEFAULT_MAX_NODES,
    GPU_DIR_IN_NODE,
    JOBCOMP_IN_NODE,
    MUNGE_KEY_IN_NODE,
    POWER_DIR_IN_NODE,
    POWER_SCRIPTS,
    READY_SCRIPT,
    RESUME_SCRIPT,
    SLURM_KEY_IN_NODE,
    SLURMD_TIMEOUT,
    SUSPEND_SCRIPT,
    LabPlan,
    accounting,
    check_memory,
    layout,
    memory_mb,
    plan_lab,
    scale,
)
from .preempt import preempt_local
from .ready import ERROR_LINE, dead_daemon, log_errors, wait_accounting, wait_nodes
from .status import EVENTS_SHOWN, cluster_registered, node_states, status_local
from .target import LocalTarget

__all__ = [
    "BOOT_WORKERS", "DBD_DIR_IN_NODE", "DBD_PORT_SLOT", "DB_DIR_IN_NODE", "DB_PORT", "DEFAULT_IMAGE",
    "DEFAULT_MAX_NODES", "DeployResult", "DestroyResult", "ERROR_LINE", "EVENTS_SHOWN", "GPU_DIR_IN_NODE",
    "IDENTITY", "JOBCOMP_IN_NODE", "KEPT", "LabNode", "LabPlan", "LabState", "LocalTarget", "MARIADB_SCRIPT",
    "MEMORY_RESERVE_MB", "MUNGE_KEY_IN_NODE", "NODE_MB", "NodeRecord", "POWER_DIR_IN_NODE", "POWER_SCRIPTS",
    "READY_SCRIPT", "RESUME_SCRIPT", "SLURMDBD_SCRIPT", "SLURMD_TIMEOUT", "SLURM_KEY_IN_NODE",
    "SUSPEND_SCRIPT", "WRAPPED", "WRAPPER_CONFIG", "accounting", "agent_config", "available_mb",
    "check_accounts", "check_memory", "cluster_registered", "cluster_secrets", "dead_daemon", "deploy_local",
    "destroy_local", "destroy_message", "env_local", "exec_local", "has_leftovers", "identity_clash",
    "kept_data", "lab_dir", "lab_files", "lab_identity", "layout", "load_state", "log_errors", "memory_mb",
    "new_identity", "node_spec", "node_states", "plan_lab", "power_dir", "power_script", "preempt_local",
    "ready_script", "scale", "set_aside_controller_state", "slurmdbd_conf", "spec_hash", "ssh_config",
    "ssh_key", "ssh_keys", "start_agent", "status_local", "stop_agent", "stop_all", "stop_leftovers",
    "user_home", "wait_accounting", "wait_nodes", "wrapper", "wrapper_config", "write_wrappers",
]
