"""The lab's files and config (written by deploy, pure but for ssh_keys, user_home and keys):
slurm.conf and its kin as the nodes see them, the power scripts, the accounting database's
services and slurmdbd.conf, the SSH keys and ssh_config, the secrets, and each node's spec
(what it runs, what it binds, the lab's user account)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
from dataclasses import asdict

from ... import atomic
from ...errors import UserError
from ...model import CONTAINERS_DIR, LabSettings
from ...render.oci import bundle_config_text
from ...render.slurmconf import (
    DbdLayout,
    render_cgroup_conf,
    render_gres_conf,
    render_oci_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
)
from ...sandbox import netns, secretfiles
from ...sandbox import node as nodes
from ...sandbox.daemons import ensure_munge_key, ensure_secret
from ...sandbox.sshd import keypair, sshd_parts
from .. import leases
from ..labstate import LabNode
from .plan import (
    DB_DIR_IN_NODE,
    DB_PORT,
    DBD_DIR_IN_NODE,
    DBD_PORT_SLOT,
    EXPORTER_PORT,
    GPU_DIR_IN_NODE,
    JWT_KEY_IN_NODE,
    MUNGE_KEY_IN_NODE,
    POWER_DIR_IN_NODE,
    PROMETHEUS_CONF_IN_NODE,
    PROMETHEUS_PORT,
    READY_SCRIPT,
    REBOOT_SCRIPT,
    REST_PORT,
    RESUME_SCRIPT,
    SLURM_KEY_IN_NODE,
    SUSPEND_SCRIPT,
    LabPlan,
    accounting,
    has_role,
    layout,
    metrics_url,
    prometheus_conf,
    rest,
)


def power_script(op: str) -> str:
    """slurmctld's ResumeProgram (OP resume) or SuspendProgram (suspend) in the lab."""
    return f"""#!/bin/sh
# Written by ctk: slurmctld runs it with a hostlist of nodes to {op}. The lab's agent, on the
# host, reads the request from {POWER_DIR_IN_NODE} and does it (see ctk status).
set -eu
t=$(date +%s.%N)
printf '%s %s\\n' {op} "$1" > "{POWER_DIR_IN_NODE}/.$t.$$"
mv "{POWER_DIR_IN_NODE}/.$t.$$" "{POWER_DIR_IN_NODE}/$t.$$.{op}"
"""


REBOOT_TEXT = """#!/bin/sh
# Written by ctk: the lab's RebootProgram. slurmd runs it when Slurm reboots this node; it does
# nothing here. Slurm then marks the node REBOOT_ISSUED, and the lab's agent on the host stops
# the node and boots it again from its image (the one the last `ctk deploy` gave it).
exit 0
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
    lay = layout(plan)
    hosts = "127.0.0.1 localhost\n" + "".join(f"{x.addr} {x.name}\n" for x in plan.nodes)
    files = {"etc/slurm/slurm.conf": render_slurm_conf(plan.dep, layout=lay),
             "etc/slurm/cgroup.conf": render_cgroup_conf(plan.dep, layout=lay),
             "etc/slurm/oci.conf": render_oci_conf(plan.dep),
             "etc/hosts": hosts}
    for c in plan.containers:  # each container image's OCI bundle config, beside its rootfs in the nodes
        files[f"containers/{c.name}/config.json"] = bundle_config_text(c)
    if any(ns.gpu_count for ns in plan.dep.nodesets):
        files["etc/slurm/gres.conf"] = render_gres_conf(plan.dep, layout=lay)
    files["ssh_config"] = ssh_config(plan, ldir)
    files[f"etc/slurm/{REBOOT_SCRIPT}"] = REBOOT_TEXT
    if metrics_url(plan):
        files["etc/prometheus.yml"] = prometheus_conf(plan)
    if plan.cloud_nodes:
        assert plan.dep.controller is not None  # plan_lab refuses a deployment without one
        files[f"etc/slurm/{RESUME_SCRIPT}"] = power_script("resume")
        files[f"etc/slurm/{SUSPEND_SCRIPT}"] = power_script("suspend")
        files[f"etc/slurm/{READY_SCRIPT}"] = ready_script(plan.dep.controller.resume_timeout)
    return files


def slurmdbd_conf(plan: LabPlan, ldir: str) -> str:
    """slurmdbd.conf of the lab's controller (it holds the database password)."""
    with open(os.path.join(ldir, "secrets", "mariadb.password")) as f:
        password = f.read().strip()
    return render_slurmdbd_conf(plan.dep, DbdLayout(
        dbd_host=plan.controller.name, dbd_port=leases.port(plan.n, DBD_PORT_SLOT),
        storage_host="127.0.0.1", storage_port=DB_PORT, storage_user="slurm", storage_pass=password,
        log_file="/var/log/slurm/slurmdbd.log", pid_file="/run/slurmdbd.pid", bind_own_address=True))


# The controller's database: made on its first boot in lab/slurmdbd, then served on the
# node's loopback only, with the InnoDB settings Slurm recommends (slurmdbd warns without).
# MariaDB 11.8 (Debian 13) turns innodb_snapshot_isolation on, which slurmdbd 26.05 says it
# does not support ("will cause slurmdbd to fatal when a write conflicts"): off ("loose-": a
# MariaDB without the setting, Debian 12's 10.11, ignores it).
MARIADB_SCRIPT = f"""set -e
D={DB_DIR_IN_NODE}
if [ ! -d "$D/mysql" ]; then
  mariadb-install-db --user=root --datadir="$D" --auth-root-authentication-method=socket --skip-test-db >/dev/null
fi
exec mariadbd --user=root --datadir="$D" --socket=/run/mysqld/mysqld.sock --bind-address=127.0.0.1 \
  --port={DB_PORT} --skip-log-bin --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 \
  --loose-innodb-snapshot-isolation=OFF
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


def ssh_keys(plan: LabPlan, ldir: str) -> None:
    """The lab's SSH host key and root's login key (secrets/ssh, 0700), and known_hosts."""
    d = os.path.join(ldir, "secrets", "ssh")
    os.close(secretfiles.open_dir(ldir, "secrets/ssh"))  # 0700, root's, reached through no link
    keypair(os.path.join(d, "host_ed25519"), "ctk-lab-host")
    keypair(ssh_key(ldir), "ctk-lab-root")
    with open(os.path.join(d, "host_ed25519.pub")) as f:
        pub = " ".join(f.read().split()[:2])
    known = "".join(f"[{x.addr}]:{x.port} {pub}\n" for x in plan.nodes if x.role == "login")
    atomic.write_if_changed(os.path.join(ldir, "known_hosts"), known)


def node_spec(plan: LabPlan, x: LabNode, ldir: str, lowerdirs: list[str],
              containers: dict[str, list[str]] | None = None) -> nodes.NodeSpec:
    """What node X boots with (its image's LOWERDIRS): its daemons, the secrets on its tmpfs,
    the lab's folders it binds, its network namespace and the lab's user."""
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
    primary = x.name == plan.controller.name  # the backup controller runs slurmctld alone
    acct = primary and accounting(plan)
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
    _rest_and_metrics(plan, x, ldir, env, services, run_files, run_dirs)
    if x.role == "login":  # sshd on the node's own address and port: ctk job --host reaches it
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
    overlays: list[dict] = []
    if x.role == "compute":  # each container image, read-only, as an OCI bundle Slurm can run
        for name, layers in sorted((containers or {}).items()):
            bundle = f"{CONTAINERS_DIR}/{name}"
            binds.append({"src": os.path.join(ldir, "containers", name, "config.json"),
                          "dest": f"{bundle}/config.json", "ro": True})
            overlays.append({"dest": f"{bundle}/rootfs", "lowerdirs": layers})
    lab = plan.dep.settings_of(LabSettings)
    return nodes.NodeSpec(
        hostname=x.name, state_dir=os.path.join(ldir, "nodes", x.name), lowerdirs=lowerdirs,
        services=services, binds=binds, overlays=overlays, run_files=run_files, run_dirs=run_dirs,
        netns=os.path.join(netns.NETNS_DIR, netns.netns(plan.n, x.host)),
        accounts=[{"name": lab.user, "uid": lab.user_uid, "gid": lab.user_uid, "home": f"/home/{lab.user}"}])


def _rest_and_metrics(plan: LabPlan, x: LabNode, ldir: str, env: dict[str, str], services: list[nodes.Service],
                      run_files: dict[str, dict], run_dirs: list[dict]) -> None:
    """Node X's share of the REST API (slurmrestd and auth/jwt's key, on the controller) and of
    the metrics role (a node exporter on every node, Prometheus on the controller)."""
    def run_ctk() -> None:
        if not any(d["path"] == "ctk" for d in run_dirs):
            run_dirs.append({"path": "ctk", "mode": "0755", "owner": "root"})

    if x.role == "controller" and rest(plan):  # clients' tokens go to slurmctld, which checks them with the key
        run_files[JWT_KEY_IN_NODE] = {"src": os.path.join(ldir, "secrets", "jwt_hs256.key"), "mode": "0400",
                                      "owner": "root"}
        run_ctk()
    if x.name == plan.controller.name and rest(plan):  # slurmrestd on the primary
        services.append(nodes.Service(
            "slurmrestd", ["/usr/sbin/slurmrestd", "-a", "rest_auth/jwt", "-s", "openapi/slurmctld",
                           "-u", "slurmrestd", "-g", "slurmrestd", f"{x.addr}:{REST_PORT}"],
            env={**env, "SLURM_JWT": "daemon"}))  # no wait: nothing after it needs it (status probes it)
    if not has_role(plan, x, "metrics"):
        return
    services.append(nodes.Service(
        "node-exporter", ["/usr/bin/prometheus-node-exporter", f"--web.listen-address={x.addr}:{EXPORTER_PORT}"],
        user="prometheus", ready=f"tcp:{x.addr}:{EXPORTER_PORT}"))
    if x.name == plan.controller.name:
        run_files[PROMETHEUS_CONF_IN_NODE] = {"src": os.path.join(ldir, "etc", "prometheus.yml"), "mode": "0644",
                                              "owner": "root"}
        run_ctk()
        services.append(nodes.Service(
            "prometheus", ["/usr/bin/prometheus", f"--config.file=/run/{PROMETHEUS_CONF_IN_NODE}",
                           "--storage.tsdb.path=/var/lib/prometheus/metrics2",
                           f"--web.listen-address={x.addr}:{PROMETHEUS_PORT}"],
            user="prometheus"))  # no wait, as slurmrestd


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
    # The image store's modules load only for a deploy (see plan._local_images).
    from ...images.accounts import host_ids, image_accounts

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


def cluster_secrets(ldir: str, slurm_auth: bool, acct: bool, jwt: bool = False) -> None:
    """The cluster's secret: munge.key, or auth/slurm's slurm.key (1024 random bytes, 0400 in
    secrets/, 0700; never in an image, never printed); with accounting the database password
    (0400); with the REST API auth/jwt's key (64 random bytes: whoever holds it can make a token
    for any user, root included, so only the controller's slurmctld reads it). Each made once."""
    ensure_munge_key(os.path.join(ldir, "secrets", "slurm.key" if slurm_auth else "munge.key"))
    if acct:
        ensure_secret(os.path.join(ldir, "secrets", "mariadb.password"), lambda: secrets.token_hex(24).encode())
    if jwt:
        ensure_secret(os.path.join(ldir, "secrets", "jwt_hs256.key"), lambda: secrets.token_bytes(64))

